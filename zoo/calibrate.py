"""Simulation-based calibration (Talts et al. 2018) of the zoo's engines: ``zoo.sbc`` and
``zoo sbc``.

For each replication: simulate data from the registered model's prior on its bundled data's
shapes, run the engine on them through the same path as ``zoo.run``, and rank the true values
among the posterior draws (:mod:`zoo_inference.sbc` simulates, ranks and judges;
:mod:`zoo_reports.sbc` renders the pages). For ``svi`` the draws are the fitted guide's: the
calibration of a variational fit.

Replications are independent: they run on the report sweep's executor (worker processes, or a
Dask cluster with ``scheduler``). Each is seeded from ``(seed, rep)``, so a result does not
depend on the number of workers.
"""

from __future__ import annotations

import json
import sys
import time
import warnings
from collections.abc import Mapping, Sequence
from concurrent.futures import as_completed
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tqdm.auto import tqdm

import zoo_reports.sbc as pages
from zoo_inference import ZooError, check_options
from zoo_inference import sbc as calibration
from zoo_inference.context import EngineContext
from zoo_inference.engines import budget
from zoo_inference.results import one_line, site_rows
from zoo_inference.runtime import interactive, threads
from zoo_inference.sbc import PAGE_PREFIX, Outcome, Task, Transform, scaled
from zoo_reports.figures import FigureImage

from . import api
from .files import check_writable, locked, write_atomically
from .profiles import COUNT_OPTIONS
from .registry import ModelEntry, get_model, list_models
from .sweep import default_workers, executor

__all__ = ["SBCResult", "sbc", "sbc_models", "scaled", "simulate"]

# Engine options an SBC replication runs with unless the model or the caller says otherwise:
# enough for a fair posterior on the zoo's small models, small enough for 100 replications.
SBC_BUDGETS: dict[str, dict[str, Any]] = {
    "svi": {"num_steps": 1000, "num_samples": 1000},
    "nuts": {"num_samples": 200, "warmup": 200, "num_chains": 4},
    "hmc": {"num_samples": 200, "warmup": 200, "num_chains": 4},
    "chees": {"num_samples": 50, "warmup": 300, "num_chains": 16},
    "mams": {"num_samples": 50, "warmup": 200, "num_chains": 16},
}


class SBCResult(calibration.Calibration):
    """:class:`zoo_inference.sbc.Calibration` (ranks, p-values, verdict, findings), its pages."""

    def figures(self, limit: int = pages.MAX_PANELS) -> list[FigureImage]:
        """ECDF-difference plots and rank histograms (:func:`zoo_reports.sbc.figures`)."""
        return pages.figures(self, limit)

    def page(self, *, generated: str | None = None) -> dict[str, str]:
        """The result's files as ``{filename: text}`` (:func:`zoo_reports.sbc.page`)."""
        return pages.page(self, generated=generated)

    def write(self, out: str | Path) -> Path:
        """Write the result's page and files into ``out`` and refresh its SBC index
        (``sbc.html``, ``sbc.md``: every SBC result in ``out``); return the page's path."""
        out = check_writable(out)
        with locked(out):
            write_pages(out, [self])
        return out / f"{self.stem}.html"


def simulate(entry: ModelEntry, seed: int) -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
    """One draw from the model's joint prior on its bundled data's shapes: ``(data, truth)``
    (:func:`zoo_inference.sbc.simulate`)."""
    return calibration.simulate(
        entry.model,
        entry.load_data(),
        seed,
        name=entry.name,
        continuous=entry.structure.continuous,
    )


def write_pages(out: Path, results: Sequence[SBCResult]) -> None:
    """Every result's files, and the index of every SBC result in ``out`` (earlier ones kept),
    written atomically."""
    stems = {r.stem for r in results}
    earlier = {}
    for path in sorted(out.glob(f"{PAGE_PREFIX}*.json")):
        if path.stem in stems:
            continue
        try:
            earlier[path.stem] = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
    write_atomically(out, pages.pages(results, earlier), last=pages.INDEX)


# --------------------------------------------------------------------------- one replication
def _run_rep(task: Task, entry: ModelEntry | None = None) -> Outcome:
    """Simulate, run the engine, rank the true values; numerical failures are a failed
    replication, an engine that gives no posterior draws is fatal."""
    entry = entry if entry is not None else get_model(task.model)
    start = time.perf_counter()
    data, truth = simulate(entry, task.data_seed)

    def failed(reason: str) -> Outcome:
        return Outcome(task.rep, False, time.perf_counter() - start, reason=reason)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a replication's failure is recorded with its reason
        try:
            prepared = api.prepare(
                entry, task.engine, data=data, seed=task.run_seed, progress=False, **task.options
            )
        except ZooError as e:
            return failed(f"simulated data rejected: {e}")
        run = api.execute(prepared, predictive=False)
    return calibration.rank(task, run, truth, start)


def batchable(entry: ModelEntry, engine: str, options: Mapping[str, Any]) -> bool:
    """Whether the replications can run as the chains of one sampler (the zoo's ``nuts``)."""
    spec = entry.engine_spec(engine)
    opts = {**spec.defaults, **entry.registered_options(engine), **options}
    return calibration.batchable(spec, opts)


def _run_batched(
    entry: ModelEntry, tasks: Sequence[Task], workers: int, progress: bool | str
) -> list[Outcome]:
    """Every replication at once (:func:`zoo_inference.sbc.sample_batched`), in ``workers`` forked
    groups, and each replication's chains ranked as its own run. The sampler's seed comes from
    the SBC's seed; the ranks' tie-breaking from each replication's seeds, as in the one-by-one
    path."""
    start = time.perf_counter()
    first = tasks[0]
    outcomes: dict[int, Outcome] = {}
    sims: dict[int, tuple[api.Prepared, dict[str, torch.Tensor]]] = {}
    for task in tasks:
        data, truth = simulate(entry, task.data_seed)
        try:
            checked = api.prepare(
                entry, task.engine, data=data, seed=task.run_seed, progress=False, **task.options
            )
        except ZooError as e:
            reason = f"simulated data rejected: {e}"
            outcomes[task.rep] = Outcome(task.rep, False, 0.0, reason=reason)
            continue
        sims[task.rep] = (checked, truth)
    kept = [t for t in tasks if t.rep in sims]
    if kept:
        # every replication has the same engine options, defaults filled in by api.prepare
        opts = sims[kept[0].rep][0].options
        datasets = [sims[t.rep][0].data for t in kept]
        seed = int(np.random.SeedSequence([first.run_seed, len(tasks)]).generate_state(1)[0])
        ctx = EngineContext(
            entry.name, entry.model, entry.guide, datasets[0], entry.structure, seed,
            progress is True and workers == 1,
        )  # fmt: skip
        if progress == "lines":
            chains = int(opts["num_chains"])
            print(
                f"{entry.name}/{first.engine}: {len(kept)} replications as {len(kept)} x "
                f"{chains} chains of one batched sampler",
                file=sys.stderr,
                flush=True,
            )
        with threads(1), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            runs = calibration.sample_batched(
                ctx, first.engine, datasets, opts, parallel=workers > 1
            )
        each = (time.perf_counter() - start) / len(kept)
        for task, run in zip(kept, runs, strict=True):
            if isinstance(run, str):
                outcomes[task.rep] = Outcome(task.rep, False, each, reason=run)
                continue
            outcome = calibration.rank(task, run, sims[task.rep][1], time.perf_counter())
            outcome.wall_time_s = each
            outcomes[task.rep] = outcome
    return [outcomes[t.rep] for t in tasks]


# --------------------------------------------------------------------------- the entry point
def sbc_options(entry: ModelEntry, engine: str, options: Mapping[str, Any]) -> dict[str, Any]:
    """Options of one replication: the SBC budget of the (base) engine, then the model's own
    options (counts: the larger wins), then ``options``."""
    spec = entry.engine_spec(engine)
    base = entry.base_engine(engine)
    planned = SBC_BUDGETS.get(base) or budget(base, "check")
    opts = {k: v for k, v in planned.items() if k in spec.defaults}
    for key, value in entry.registered_options(engine).items():
        if key in opts and key in COUNT_OPTIONS and isinstance(value, int):
            opts[key] = max(opts[key], value)
        elif key in opts:
            opts[key] = value
    opts.update(options)
    check_options(spec, {**entry.registered_options(engine), **opts})
    return opts


def _positive_int(name: str, value: Any, low: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < low:
        raise ZooError(f"{name} must be an integer >= {low}, got {value!r}")
    return int(value)


def sbc(
    name_or_entry: str | ModelEntry,
    engine: str = "nuts",
    *,
    reps: int = 100,
    seed: int = 0,
    draws: int = 99,
    bins: int | None = None,
    alpha: float = 0.01,
    workers: int | None = None,
    scheduler: str | None = None,
    progress: bool | str | None = None,
    transform: Transform | None = None,
    out: str | Path | None = None,
    batch: bool | None = None,
    **options: Any,
) -> SBCResult:
    """Simulation-based calibration of ``engine`` on a model: ``zoo.sbc("normal_normal",
    "nuts", reps=100)``.

    ``reps`` replications, each a prior draw, data simulated from it and one run of the engine;
    ``draws``: the true value of each continuous parameter is ranked among this many posterior
    draws (ranks ``0..draws``; MCMC draws thinned by their ESS first). ``bins``: of the
    chi-square test (default: about 10 replications a bin, at most 20); ``alpha``: the level of
    the whole test (Bonferroni over the parameters). ``options`` are the engine's (default: a
    budget sized for SBC, ``SBC_BUDGETS``). ``workers`` (default: one per core) or ``scheduler``
    (a Dask address) run the replications in parallel; ``progress``: a bar (True) or a line per
    replication (``"lines"``). ``transform``: applied to each replication's Run before its
    ranks are taken (a deliberately broken engine, in tests); picklable where workers run it.
    ``out``: also write the page (``sbc-MODEL-ENGINE.html`` with ``.md``, ``.json``, ``.csv``
    of the ranks, and the folder's ``sbc.html`` index). ``batch``: run the replications as the
    chains of one sampler, each chain given its replication's data (the zoo's ``nuts``; ``None``:
    wherever it applies and no ``scheduler`` is named; ``False``: one engine run each).

    Raises :class:`ZooError` before any work for an unknown model, engine or option, a model
    without continuous latent sites, bad counts or an unwritable ``out``; and as soon as the
    engine is seen to give a point estimate instead of posterior draws.
    """
    entry = get_model(name_or_entry)
    seed = api.check_seed(seed)
    reps = _positive_int("reps", reps, 2)
    draws = _positive_int("draws", draws)
    if bins is not None:
        bins = _positive_int("bins", bins, 2)
    if isinstance(alpha, bool) or not isinstance(alpha, float | int) or not 0 < alpha < 1:
        raise ZooError(f"alpha must be a number in (0, 1), got {alpha!r}")
    workers = default_workers() if workers is None else _positive_int("workers", workers)
    if transform is not None and not callable(transform):
        raise ZooError(f"transform must be a function Run -> Run, got {transform!r}")
    if not isinstance(engine, str):
        raise ZooError(f"engine must be a name, got {engine!r}")
    sites = entry.structure.continuous
    if not sites:
        raise ZooError(
            f"model {entry.name!r} has no continuous latent sites: SBC ranks continuous "
            "parameters (its latent sites are all discrete)"
        )
    opts = sbc_options(entry, engine, options)
    api.prepare(entry, engine, seed=seed, progress=False, **opts)  # engine applies, options ok
    if not (batch is None or isinstance(batch, bool)):
        raise ZooError(f"batch must be True, False or None (auto), got {batch!r}")
    if batch and not batchable(entry, engine, opts):
        raise ZooError(
            f"batch=True runs the replications as chains of the zoo's nuts; engine {engine!r} "
            f"with options {opts} is not that"
        )
    if batch is None:
        batch = scheduler is None and batchable(entry, engine, opts)
    out_dir = check_writable(out) if out is not None else None
    if progress is None:
        progress = interactive()
    params = tuple(row for s in sites for row in site_rows(s, np.zeros(entry.structure.shapes[s])))
    tasks = [
        Task(entry.name, engine, opts, r, *calibration.seeds(seed, r), draws, sites, transform)
        for r in range(reps)
    ]
    start = time.perf_counter()
    outcomes = _run_all(entry, tasks, workers, scheduler, progress, batch)
    ok = [o for o in outcomes if o.ok]
    p = len(params)
    result = SBCResult(
        model=entry.name,
        engine=engine,
        options=dict(opts),
        seed=seed,
        reps=reps,
        num_draws=draws,
        alpha=float(alpha),
        params=params,
        rep_ids=np.array([o.rep for o in ok], dtype=int),
        ranks=np.array([o.ranks for o in ok], dtype=np.int64).reshape(len(ok), p),
        ess=np.array([o.ess for o in ok], dtype=float).reshape(len(ok), p),
        kept=np.array([o.kept for o in ok], dtype=np.int64).reshape(len(ok), p),
        wall_time_s=np.array([o.wall_time_s for o in ok], dtype=float),
        failures={o.rep: str(o.reason) for o in outcomes if not o.ok},
        bins=bins,
        total_time_s=time.perf_counter() - start,
    )
    if out_dir is not None:
        with locked(out_dir):
            write_pages(out_dir, [result])
    return result


def _run_all(
    entry: ModelEntry,
    tasks: Sequence[Task],
    workers: int,
    scheduler: str | None,
    progress: bool | str,
    batch: bool = False,
) -> list[Outcome]:
    """Every replication's outcome, in order: all at once as chains of one sampler (``batch``),
    or the first in this process (it proves the model simulates and the engine gives draws
    before workers start) and the rest on the executor."""
    label = f"sbc {entry.name}/{tasks[0].engine}"
    bar = tqdm(total=len(tasks), desc=label, unit="rep", disable=progress is not True)
    outcomes: dict[int, Outcome] = {}

    def done(o: Outcome) -> None:
        if o.fatal:
            raise ZooError(o.fatal)
        outcomes[o.rep] = o
        bar.update()
        if progress == "lines":
            state = "ok" if o.ok else f"failed ({o.reason})"
            print(
                f"[{len(outcomes)}/{len(tasks)}] {label} rep {o.rep}: {state} "
                f"{o.wall_time_s:.1f} s",
                file=sys.stderr,
                flush=True,
            )

    if batch:
        try:
            batched = _run_batched(entry, tasks, workers, progress)
        except ZooError:
            bar.close()
            raise
        except Exception as e:  # noqa: BLE001 - the user's model under per-chain data
            warnings.warn(
                f"sbc {entry.name}/{tasks[0].engine}: the batched run failed ({one_line(e)}); "
                "running the replications one by one",
                RuntimeWarning,
                stacklevel=3,
            )
        else:
            try:
                for outcome in batched:
                    done(outcome)
            finally:
                bar.close()
            return [outcomes[t.rep] for t in tasks]
    registered = _is_registered(entry)
    pool = executor(workers, scheduler) if len(tasks) > 1 and registered else None
    try:
        done(_run_rep(tasks[0], entry))
        if pool is None:
            for task in tasks[1:]:
                done(_run_rep(task, entry))
        else:
            futures = {pool.submit(_run_rep, task): task for task in tasks[1:]}
            for fut in as_completed(futures):
                done(_collect(fut, futures[fut]))
    finally:
        bar.close()
        if pool is not None:
            pool.shutdown(cancel_futures=True)
    return [outcomes[t.rep] for t in tasks]


def _is_registered(entry: ModelEntry) -> bool:
    try:
        return get_model(entry.name) is entry
    except ZooError:
        return False


def _collect(fut: Any, task: Task) -> Outcome:
    try:
        return fut.result()
    except ZooError:
        raise
    except Exception as e:  # noqa: BLE001 - a worker that died: a failed replication
        return Outcome(task.rep, False, float("nan"), reason=one_line(e))


def sbc_models(names: Sequence[str] | None, engines: Sequence[str]) -> list[tuple[str, str]]:
    """The (model, engine) pairs an SBC run over ``names`` covers; every named model must take
    every engine. ``names=None``: every model with continuous latent sites, with each of
    ``engines`` that applies to it."""
    if not engines:
        raise ZooError("name at least one engine")
    if names is not None:
        entries = [get_model(n) for n in dict.fromkeys(names)]
        for entry in entries:
            for engine in engines:
                entry.engine_spec(engine)  # a clear error if it does not apply
        return [(e.name, g) for e in entries for g in engines]
    plan = []
    for name in list_models():
        entry = get_model(name)
        if entry.structure.continuous:
            plan += [(name, g) for g in engines if g in entry.engines]
    if not plan:
        raise ZooError(f"none of the engines {list(engines)} applies to a model")
    return plan
