"""Comparison reports: one page per model (HTML + Markdown, JSON/CSV beside) and a zoo index.

>>> from reports import write_report
>>> write_report(["beta_bernoulli"], out="report", profile="smoke")  # doctest: +SKIP
PosixPath('report/index.html')

``write_report`` runs every engine that applies to each model through :func:`zoo.compare` with
the options of a profile (:mod:`reports.profiles`), renders the pages (:mod:`reports.render`,
figures from :mod:`reports.figures`, findings from :mod:`reports.findings`) and moves them into
``out`` only when every page is written, so an error never leaves a half-written report.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import secrets
import shutil
import sys
import warnings
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from .findings import Finding, findings, worst_std_err
from .profiles import PROFILES, check_profile, engine_options
from .render import model_context, model_summary, now_utc, render_index, render_model_page

__all__ = [
    "PROFILES",
    "Finding",
    "findings",
    "model_context",
    "model_summary",
    "plan_report",
    "render_index",
    "render_model_page",
    "worst_std_err",
    "write_report",
]


def plan_report(
    names: str | Sequence[str] | None = None,
    *,
    profile: str = "quick",
    options: Mapping[str, Mapping[str, Any]] | None = None,
    engines: Sequence[str] | None = None,
) -> dict[str, dict[str, dict[str, Any]]]:
    """``{model: {engine: options}}`` that a report would run; validates everything first.

    Raises :class:`zoo.ZooError` (a ValueError) for an unknown model (naming close matches), an
    unknown profile (naming the valid ones), ``options`` or ``engines`` naming an unknown engine,
    an unknown option, or a named model none of ``engines`` applies to (a whole-zoo report,
    ``names=None``, leaves such models out). ``options`` maps an engine name
    to options that override the profile wherever that engine applies
    (``{"svi": {"lr": 0.01}}``); ``engines`` keeps only those engines (default: every engine
    that applies to each model).
    """
    import zoo
    from inference import GENERIC_ENGINES, ZooError, check_options

    check_profile(profile)
    every = names is None
    if names is None:
        names = zoo.list_models()
    elif isinstance(names, str):
        names = [names]
    entries = [zoo.get_model(n) for n in dict.fromkeys(names)]
    if not entries:
        raise ZooError("no models to report")
    options = dict(options or {})
    known = set(GENERIC_ENGINES).union(*(e.engines for e in entries))
    if isinstance(engines, str):
        engines = [engines]
    unknown = [e for e in engines or () if e not in known]
    if unknown:
        raise ZooError(f"unknown engine(s) {unknown}; engines of these models: {sorted(known)}")
    for engine, opts in options.items():
        if engine not in known:
            raise ZooError(f"options name unknown engine {engine!r}; engines: {sorted(known)}")
        if not isinstance(opts, Mapping):
            raise ZooError(f"options for engine {engine!r} must be a dict, got {opts!r}")
    plan: dict[str, dict[str, dict[str, Any]]] = {}
    for entry in entries:
        per: dict[str, dict[str, Any]] = {}
        chosen = [e for e in entry.engines if engines is None or e in engines]
        if not chosen and every:
            continue  # a whole-zoo report: models none of `engines` applies to are left out
        if not chosen:
            raise ZooError(
                f"none of the engines {list(engines or ())} applies to model {entry.name!r} "
                f"(engines that apply: {', '.join(entry.engines)})"
            )
        for engine in chosen:
            spec = entry.engine_spec(engine)
            model_defaults = entry.engine_options.get(engine, {})
            opts = engine_options(
                profile, engine, spec.defaults, model_defaults, options.get(engine)
            )
            check_options(spec, {**model_defaults, **opts})
            per[engine] = opts
        plan[entry.name] = per
    if not plan:
        raise ZooError(f"none of the engines {list(engines or ())} applies to any model")
    return plan


def write_report(
    names: str | Sequence[str] | None = None,
    *,
    out: str | os.PathLike[str],
    profile: str = "quick",
    seed: int = 0,
    progress: bool | None = None,
    options: Mapping[str, Mapping[str, Any]] | None = None,
    engines: Sequence[str] | None = None,
) -> Path:
    """Write ``out/index.html`` and, per model, ``NAME.html``, ``NAME.md``, ``NAME.json`` and
    ``NAME.csv``, plus ``index.md``, ``results.json`` and ``results.csv``; return the index path.

    ``names``: models to report (default: every registered model). ``profile``: ``"quick"``,
    ``"full"`` or ``"smoke"`` (tiny runs for tests; see :mod:`reports.profiles`). ``options``:
    per-engine overrides of the profile, e.g. ``{"svi": {"num_steps": 500}}``. ``engines``: only
    these engines (default: every engine that applies). ``progress``: a bar over the models on
    stderr (None: when stderr is a terminal).

    Everything is validated before any work starts (unknown model, profile, engine or option:
    ``zoo.ZooError``, a ValueError). Pages are rendered into a temporary directory beside ``out``
    and moved into place only when all are written; files of ``out`` this report does not write
    are left alone, and models reported earlier into the same ``out`` stay in its index. A failed
    engine does not stop the report: it shows as a failed cell with its reason.
    """
    import zoo
    from inference import ZooError

    plan = plan_report(names, profile=profile, options=options, engines=engines)
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise ZooError(f"seed must be a non-negative integer, got {seed!r}")
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise ZooError(f"report output {str(out)!r} exists and is not a directory")
    if progress is None:
        progress = sys.stderr.isatty()

    from tqdm.auto import tqdm

    generated = now_utc()
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.parent / f"{out.name}.tmp-{secrets.token_hex(4)}"
    tmp.mkdir()
    try:
        summaries = []
        with tqdm(plan.items(), desc="zoo report", unit="model", disable=not progress) as bar:
            for name, per_engine in bar:
                bar.set_postfix_str(name)
                with warnings.catch_warnings(record=True) as caught, _quiet_loggers() as logged:
                    warnings.simplefilter("default")
                    cmp = zoo.compare(
                        name, list(per_engine), seed=seed, progress=False, **per_engine
                    )
                    seen = {f"{w.category.__name__}: {w.message}" for w in caught}
                    seen |= {f"{r.name}: {r.getMessage()}" for r in logged}
                    files = render_model_page(
                        cmp,
                        profile=profile,
                        seed=seed,
                        generated=generated,
                        warnings_seen=sorted(seen),
                    )
                summaries.append(json.loads(files.pop("summary")))
                for filename, text in files.items():
                    (tmp / filename).write_text(text, encoding="utf-8")
                del cmp
        summaries += _earlier_models(out, exclude=set(plan))
        for filename, text in render_index(
            summaries, profile=profile, seed=seed, generated=generated
        ).items():
            (tmp / filename).write_text(text, encoding="utf-8")
        _move_into(tmp, out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out / "index.html"


class _Collect(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@contextlib.contextmanager
def _quiet_loggers(names: Sequence[str] = ("arviz", "pyro")) -> Iterator[list[logging.LogRecord]]:
    """Collect (instead of print) what the engines' libraries log while a report runs."""
    handler = _Collect()
    loggers = [logging.getLogger(n) for n in names]
    own = getattr(sys.modules.get("arviz"), "_log", None)  # ArviZ 0.x logs through its own Logger
    if isinstance(own, logging.Logger) and own not in loggers:
        loggers.append(own)
    saved = [(lg.handlers[:], lg.propagate) for lg in loggers]
    for lg in loggers:
        lg.handlers[:] = [handler]
        lg.propagate = False
    try:
        yield handler.records
    finally:
        for lg, (handlers, propagate) in zip(loggers, saved, strict=True):
            lg.handlers[:] = handlers
            lg.propagate = propagate


def _earlier_models(out: Path, exclude: set[str]) -> list[dict[str, Any]]:
    """Index lines of models an earlier report wrote into ``out`` (pages still there)."""
    try:
        earlier = json.loads((out / "results.json").read_text(encoding="utf-8"))["models"]
    except (OSError, ValueError, KeyError, TypeError):
        return []
    if not isinstance(earlier, Mapping):
        return []
    keep = []
    for name, m in earlier.items():
        if name in exclude or not isinstance(m, Mapping):
            continue
        if not {"name", "engines", "page"} <= set(m) or not isinstance(m["engines"], Mapping):
            continue
        if (out / f"{name}.html").is_file():
            keep.append(dict(m))
    return keep


def _move_into(tmp: Path, out: Path) -> None:
    """Move the finished files into ``out``: a rename of the whole directory when ``out`` does
    not exist yet, otherwise one atomic ``os.replace`` per file."""
    if not out.exists():
        try:
            os.rename(tmp, out)
            return
        except OSError:
            out.mkdir(parents=True, exist_ok=True)
    for path in sorted(tmp.iterdir(), key=lambda p: p.name.startswith("index.")):
        os.replace(path, out / path.name)  # index last: it links to the pages
