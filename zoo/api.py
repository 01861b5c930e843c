"""The public façade: ``zoo.run``, ``zoo.compare``, ``zoo.report``."""

from __future__ import annotations

import dataclasses
import numbers
import time
import traceback
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from zoo_inference import (
    GENERIC_ENGINES,
    Comparison,
    EngineContext,
    Run,
    ZooError,
    check_options,
    inspect_model,
)
from zoo_inference.accuracy import comparison_table, long_table, reference_engine
from zoo_inference.predictive import with_predictive
from zoo_inference.results import one_line
from zoo_inference.runtime import interactive, own_param_store, seeded, threads
from zoo_inference.tags import measure as measure_tags
from zoo_inference.verdict import judged

from .registry import ModelEntry, get_model
from .tags import ModelTags, remember, tags_of
from .validation import check_data

MAX_SEED = 2**32 - 1  # numpy's generator takes no larger seed


def check_seed(seed: Any) -> int:
    """``seed`` if it is an integer in [0, 2**32 - 1], else a :class:`ZooError` saying so."""
    if (
        isinstance(seed, bool)
        or not isinstance(seed, numbers.Integral)
        or not 0 <= seed <= MAX_SEED  # type: ignore[operator]  # typeshed: Integral declares no >=
    ):
        raise ZooError(f"seed must be an integer from 0 to 2**32 - 1, got {seed!r}")
    return int(seed)


@dataclass
class Prepared:
    """A validated run request: nothing has been computed yet."""

    entry: ModelEntry
    engine: str
    data: dict[str, Any]
    options: dict[str, Any]
    seed: int
    progress: bool
    default_data: bool = False


def prepare(
    name_or_entry: str | ModelEntry,
    engine: str,
    *,
    data: Mapping[str, Any] | None = None,
    replace_data: bool = False,
    seed: int = 0,
    progress: bool | None = None,
    **options: Any,
) -> Prepared:
    """Validate model, engine, data and options; raise :class:`ZooError` on the first problem."""
    entry = get_model(name_or_entry)
    seed = check_seed(seed)
    if not isinstance(engine, str):
        raise ZooError(f"engine must be a name, got {engine!r}")
    spec = entry.engine_spec(engine)
    if data is None:
        checked = entry.load_data()
    else:
        if not isinstance(replace_data, bool):
            raise ZooError(f"replace_data must be True or False, got {replace_data!r}")
        checked = check_data(entry.name, entry.model, entry.load_data(), data, replace=replace_data)
    opts = check_options(spec, {**entry.registered_options(engine), **options})
    if progress is None:
        progress = interactive()
    elif not isinstance(progress, bool):
        raise ZooError(f"progress must be True, False or None (auto), got {progress!r}")
    return Prepared(entry, engine, checked, opts, seed, bool(progress), data is None)


def execute(p: Prepared, *, predictive: bool = True) -> Run:
    """Run a prepared request: seeded from its seed, with an empty Pyro parameter store, one
    torch thread, timed. Numerical failures give a failed Run, never an exception; the caller's
    random state and parameter store are restored. The Run returned is built here with what
    was run (model, engine, options, seed, data) and, with ``predictive``, posterior-predictive
    draws (after the timing, in the run's parameter store: an extra of the run), and its one
    verdict (:func:`~zoo_inference.verdict.judged`: ``status``, ``reasons``, ``caveat``), which
    every reader of the Run shows as it is."""
    entry, spec = p.entry, p.entry.engine_spec(p.engine)
    start = time.perf_counter()
    with seeded(p.seed), own_param_store(), threads(1):
        try:
            structure = entry.structure if p.default_data else inspect_model(entry.model, p.data)
            ctx = EngineContext(
                entry.name,
                entry.model,
                entry.guide,
                p.data,
                structure,
                p.seed,
                p.progress,
                entry.evaluate_fn,
            )
            result = spec.fn(ctx, **p.options)
        except ZooError:
            raise
        except Exception as e:  # noqa: BLE001 - recorded in the Run, never lost
            reason = one_line(e)
            warnings.warn(f"{entry.name}/{p.engine} failed: {reason}", RuntimeWarning, stacklevel=3)
            result = Run(
                engine=p.engine,
                status="failed",
                error=reason,
                extras={"traceback": traceback.format_exc()},
            )
        wall = time.perf_counter() - start
        if predictive:
            model_data = {**p.data, **result.model_data}
            result = with_predictive(result, entry.model, model_data, seed=p.seed)
    return judged(
        dataclasses.replace(
            result,
            engine=p.engine,
            model=entry.name,
            seed=p.seed,
            options=dict(p.options),
            data=dict(p.data),
            diagnostics={**result.diagnostics, "wall_time_s": wall},
        )
    )


def run(
    name_or_entry: str | ModelEntry,
    engine: str,
    *,
    data: Mapping[str, Any] | None = None,
    replace_data: bool = False,
    seed: int = 0,
    progress: bool | None = None,
    **options: Any,
) -> Run:
    """Run one engine on one model: ``zoo.run("three_coin", "em", seed=0)``.

    ``data``: the model's keyword arguments (``zoo info NAME`` lists them), merged over its
    bundled dataset: what it leaves out keeps its default (``data={"y": ...}`` keeps the prior's
    hyperparameters); ``replace_data=True`` takes ``data`` whole. ``options`` are the engine's
    (see ``zoo info NAME``). Bad input raises ``ValueError`` before any work starts, naming
    the key or site, what it expects and what it got.
    """
    prepared = prepare(
        name_or_entry,
        engine,
        data=data,
        replace_data=replace_data,
        seed=seed,
        progress=progress,
        **options,
    )
    return execute(prepared)


def split_options(
    entry: ModelEntry, engines: Sequence[str], options: Mapping[str, Any]
) -> dict[str, dict[str, Any]]:
    """``options`` holds per-engine dicts (``svi={"num_steps": 500}``) and shared options, which go
    to every engine that takes them; a shared option no engine takes is an error."""
    per = {e: dict(options.get(e) or {}) for e in engines}
    for key, value in options.items():
        if key in engines or key in entry.reference_engines or key in GENERIC_ENGINES:
            # per-engine options; those of engines not compared here are ignored
            if not isinstance(value, Mapping):
                raise ZooError(f"options for engine {key!r} must be a dict, got {value!r}")
            continue
        takers = [e for e in engines if key in entry.engine_spec(e).defaults]
        if not takers:
            raise ZooError(f"option {key!r} is taken by none of the engines {list(engines)}")
        for e in takers:
            per[e].setdefault(key, value)
    return per


def comparison(
    entry: ModelEntry,
    runs: Mapping[str, Run],
    data: Mapping[str, Any],
    *,
    seed: int = 0,
    profile: str = "custom",
) -> Comparison:
    """The Comparison of finished runs of one model on ``data`` (run with ``seed``; their
    options sized by ``profile``, or ``custom``)."""
    truth = entry.ground_truth(data)
    wide = comparison_table(runs, truth, entry.compared_params())
    reference = None if truth is not None and truth.mean else reference_engine(runs)
    return Comparison(
        entry.info(),
        dict(runs),
        long_table(wide, reference),
        truth,
        dict(data),
        seed,
        profile,
        table_wide=wide,
        reference=reference,
    )


def compare(
    name_or_entry: str | ModelEntry,
    engines: Sequence[str] | None = None,
    *,
    seed: int = 0,
    data: Mapping[str, Any] | None = None,
    replace_data: bool = False,
    progress: bool | None = None,
    **options: Any,
) -> Comparison:
    """Run several engines (default: every engine that applies) on one model and tabulate them
    against the ground truth. A failed engine is recorded, never raised. ``data`` and
    ``replace_data`` as for :func:`run`."""
    entry = get_model(name_or_entry)
    if isinstance(engines, str):  # zoo.compare("m", "exact"): one engine, not its letters
        engines = [engines]
    engines = list(engines) if engines is not None else list(entry.engines)
    if not engines and not entry.engines:
        raise ZooError(f"no engine applies to model {entry.name!r} ({entry.why_not('svi')})")
    if not engines:
        raise ZooError("compare needs at least one engine")
    per = split_options(entry, engines, options)
    prepared = [
        prepare(
            entry, e, data=data, replace_data=replace_data, seed=seed, progress=progress, **per[e]
        )
        for e in engines
    ]
    runs = {p.engine: execute(p) for p in prepared}
    return comparison(entry, runs, prepared[0].data, seed=seed)


def model_tags(name_or_entry: str | ModelEntry, *, measure: bool = False) -> ModelTags | None:
    """A model's measured tags (``zoo.model_tags("eight_schools").labels``) and the figures
    they come from (:class:`zoo.tags.ModelTags`), as ``benchmarks/model_tags.py`` measured the
    zoo's models; None for a model not measured (one of your own), unless ``measure``: then it
    is measured now (a default nuts run at seed 0, then L-BFGS from dispersed starts) and kept
    for the process."""
    entry = get_model(name_or_entry)
    found = tags_of(entry)
    if found is not None or not measure:
        return found
    figures = measure_tags(entry, lambda: run(entry, "nuts", seed=0, progress=False))
    return remember(entry, figures)
