"""The report sweep: plan the cells (model x engine with a profile's options), run them on a
``concurrent.futures`` executor, and hand the results to :mod:`reports` to render.

A cell is independent of every other: each runs in its own worker process when ``workers > 1``
(the registry is inherited by forking, so models registered in a script or notebook work too),
with one torch thread per worker, or on a Dask cluster (``scheduler``). A report stores every
finished cell under its folder (:mod:`zoo.store`), so a report run again (after a kill, a crash,
or to add a model) reads the cells it finished instead of recomputing them.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
import json
import logging
import multiprocessing
import os
import sys
import warnings
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import Executor, ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import numpy as np
import torch
from tqdm.auto import tqdm

import zoo_reports as reports
from zoo_inference import GENERIC_ENGINES, Comparison, Run, ZooError, check_options
from zoo_inference.config import Config, config, configure
from zoo_inference.parallel import cores, map_indices, mark_worker
from zoo_inference.results import one_line
from zoo_inference.runtime import interactive

from .api import check_seed, comparison, execute, prepare
from .files import check_writable, locked, remove_leftovers, write_atomically
from .profiles import check_profile, engine_options
from .registry import ModelEntry, get_model, list_models
from .store import CellStore, log, stored_form


@dataclass(frozen=True)
class Cell:
    model: str
    engine: str
    options: Mapping[str, Any]


def plan_report(
    names: str | Sequence[str] | None = None,
    *,
    profile: str = "quick",
    options: Mapping[str, Mapping[str, Any]] | None = None,
    engines: Sequence[str] | None = None,
) -> list[Cell]:
    """The cells a report would run; validates everything first.

    Raises :class:`ZooError` (a ValueError) for an unknown model (naming close matches), an
    unknown profile (naming the valid ones), ``options`` or ``engines`` naming an unknown engine,
    an unknown option, or a named model none of ``engines`` applies to (a whole-zoo report,
    ``names=None``, leaves such models out). ``options`` override the profile: an engine name
    maps to that engine's options (``{"svi": {"lr": 0.01}}``), any other key is an option for
    every engine that takes it (``{"num_samples": 200}``); ``engines`` keeps only those engines
    (default: every engine that applies to each model).
    """
    check_profile(profile)
    every = names is None
    if names is None:
        names = list_models()
    elif isinstance(names, str):
        names = [names]
    entries = [get_model(n) for n in dict.fromkeys(names)]
    if every:  # a broken model (a user's, a plugin's) does not stop a whole-zoo report
        entries = [e for e in entries if not e.opt_in and _runs_on_its_data(e)]
    if not entries:
        raise ZooError("no models to report")
    known = set(GENERIC_ENGINES).union(*(e.engines for e in entries))
    if isinstance(engines, str):
        engines = [engines]
    if engines is not None and not list(engines):
        raise ZooError("engines is empty: name at least one engine (or leave it out for all)")
    unknown = [e for e in engines or () if e not in known]
    if unknown:
        raise ZooError(f"unknown engine(s) {unknown}; engines of these models: {sorted(known)}")
    if options is not None and not isinstance(options, Mapping):
        raise ZooError(
            f"options must be a dict (engine -> options, or option -> value), got {options!r}"
        )
    per_engine: dict[str, dict[str, Any]] = {}
    shared: dict[str, Any] = {}
    for key, value in dict(options or {}).items():
        if isinstance(value, Mapping):
            if key not in known:
                raise ZooError(f"options name unknown engine {key!r}; engines: {sorted(known)}")
            per_engine[key] = dict(value)
        elif key in known:
            raise ZooError(f"options for engine {key!r} must be a dict, got {value!r}")
        else:
            shared[key] = value
    cells: list[Cell] = []
    taken: set[str] = set()
    for entry in entries:
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
            model_defaults = entry.registered_options(engine)
            mine = {k: v for k, v in shared.items() if k in spec.defaults}
            taken |= set(mine)
            override = {**mine, **per_engine.get(engine, {})}
            # a variant (svi_meanfield) is sized by its base engine's profile options
            base = entry.base_engine(engine)
            opts = engine_options(profile, base, spec.defaults, model_defaults, override)
            check_options(spec, {**model_defaults, **opts})
            cells.append(Cell(entry.name, engine, opts))
    if not cells:
        raise ZooError(f"none of the engines {list(engines or ())} applies to any model")
    unused = sorted(set(shared) - taken)
    if unused:
        raise ZooError(f"option(s) {unused} are taken by none of the engines in this report")
    return cells


def _runs_on_its_data(entry: ModelEntry) -> bool:
    """Whether the model runs on its default data; if not, a warning says it is left out."""
    try:
        _ = entry.engines  # runs the model once
    except ZooError as e:
        warnings.warn(f"the report leaves out model {entry.name!r}: {e}", RuntimeWarning, 3)
        return False
    return True


def run_cell(cell: Cell, seed: int) -> Run:
    """One cell, with the warnings and log records it raised kept in ``run.warnings``, as a
    report keeps it (:func:`zoo.store.stored_form`: its LOO, not its log-likelihood)."""
    with warnings.catch_warnings(record=True) as caught, _collect_logs() as logged:
        warnings.simplefilter("always")
        run = execute(prepare(cell.model, cell.engine, seed=seed, progress=False, **cell.options))
    seen = {f"{w.category.__name__}: {w.message}" for w in caught}
    seen |= {f"{r.name}: {r.getMessage()}" for r in logged}
    return stored_form(dataclasses.replace(run, warnings=tuple(sorted(seen))))


def executor(workers: int, scheduler: str | None = None) -> Executor | None:
    """Local worker processes (forked: models registered in this process are known to them), a
    Dask cluster at ``scheduler`` (a :class:`DaskExecutor`), or None for in-process.

    Whatever is submitted must be picklable by reference (a module-level function of an
    importable module) for a Dask cluster, whose workers import the package. ``shutdown``
    releases the workers (and the cluster connection)."""
    if scheduler:
        return DaskExecutor(scheduler)
    if workers <= 1:
        return None
    ctx = multiprocessing.get_context("fork")
    return ProcessPoolExecutor(max_workers=workers, mp_context=ctx, initializer=mark_worker)


class DaskExecutor(Executor):
    """An executor on a Dask distributed cluster: each task runs as in a local worker process
    (one torch thread, no nested process pools: a Dask worker is a daemon process, which may not
    start its own), and a task whose worker dies is run again on another (Dask retries it while
    fewer than ``distributed.scheduler.allowed-failures`` workers died under it, 3 by default).
    ``shutdown`` cancels what is left (with ``cancel_futures``) and closes the connection."""

    def __init__(self, address: str, *, timeout: float = 20.0) -> None:
        try:
            distributed = importlib.import_module("dask.distributed")  # optional dependency
        except ImportError:
            raise ZooError(
                "a scheduler needs dask[distributed] (pip install 'dask[distributed]')"
            ) from None
        try:
            self.client = distributed.Client(address, timeout=timeout, set_as_default=False)
        except (OSError, TimeoutError, ValueError) as e:
            raise ZooError(
                f"cannot reach the Dask scheduler at {address!r}: {one_line(e)}"
            ) from None
        self.address = address
        self._pool = self.client.get_executor(pure=False)

    def submit(self, fn: Any, /, *args: Any, **kwargs: Any) -> Any:
        return self._pool.submit(_on_dask_worker, config(), fn, *args, **kwargs)

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        try:
            self._pool.shutdown(wait=wait and not cancel_futures)
        finally:
            self.client.close()

    def __repr__(self) -> str:
        return f"DaskExecutor({self.address!r})"


def _on_dask_worker(settings: Config, fn: Any, /, *args: Any, **kwargs: Any) -> Any:
    """``fn(*args, **kwargs)`` in a Dask worker, set up as a local worker process is and under
    the submitting process's ``settings`` (``zoo.config()``); a wrong call says it happened on
    the cluster (a model registered in a script is unknown there)."""
    mark_worker()
    try:
        with configure(**dataclasses.asdict(settings)):
            return fn(*args, **kwargs)
    except ZooError as e:
        raise ZooError(
            f"on a Dask worker: {e} (workers know the models of installed packages only)"
        ) from None


def default_workers() -> int:
    return max(1, min(cores(), 8))


def run_cells(
    cells: Sequence[Cell],
    seed: int,
    *,
    workers: int = 1,
    progress: bool | str = False,
    scheduler: str | None = None,
    store: CellStore | None = None,
) -> dict[tuple[str, str], Run]:
    """Every cell's Run, keyed by (model, engine); a failed cell is a failed Run.
    ``progress``: a bar on stderr (True), or ``"lines"``: a line per finished cell (a log file
    or CI, where a bar would be one unreadable line). ``store``: cells it holds (whole, with
    the current key) are read instead of run, and every cell run is saved to it as it
    finishes; a stored cell that cannot be used is run, with a line on logger ``zoo.store``:
    a warning when its files are corrupt, info when it is stale or failed last time."""
    results: dict[tuple[str, str], Run] = {}
    todo: list[Cell] = []
    unused: dict[str, int] = {}  # stored cells not used, by kind (stale, failed, corrupt)
    for cell in cells:
        found = store.load(cell.model, cell.engine, seed, cell.options) if store else None
        if found is not None and found.run is not None:
            results[(cell.model, cell.engine)] = found.run
            continue
        todo.append(cell)
        if found is not None and found.kind is not None:
            unused[found.kind] = unused.get(found.kind, 0) + 1
            level = logging.WARNING if found.kind == "corrupt" else logging.INFO
            log.log(level, "cell %s/%s: %s; recomputing", cell.model, cell.engine, found.why)
    if store is not None and (results or unused):
        why = "".join(f", {n} {kind}" for kind, n in sorted(unused.items()))
        note = (
            f"resumed {len(results)} of {len(cells)} cells from {store.root} "
            f"({len(todo)} to run{why})"
        )
        log.info(note)
        if progress:
            print(f"zoo report: {note}", file=sys.stderr, flush=True)
    if workers > 1 or scheduler:  # the longest cells first: none starts last and runs alone
        todo = largest_first(todo)
    pool = executor(workers if len(todo) > 1 else 1, scheduler) if todo else None
    bar = tqdm(total=len(cells), desc="zoo report", unit="cell", disable=progress is not True)
    bar.update(len(results))

    def done(cell: Cell, run: Run) -> None:
        if store is not None:
            store.save(cell.model, cell.engine, seed, cell.options, run)
        results[(cell.model, cell.engine)] = run
        bar.set_postfix_str(f"{cell.model}/{cell.engine}")
        bar.update()
        if progress == "lines":
            why = f" ({run.caveat or run.error})" if run.caveat or run.error else ""
            wall = run.diagnostics.get("wall_time_s", float("nan"))
            print(
                f"[{len(results)}/{len(cells)}] {cell.model}/{cell.engine}: {run.status} "
                f"{wall:.1f} s{why}",
                file=sys.stderr,
                flush=True,
            )

    try:
        if pool is None:
            for cell in todo:
                done(cell, run_cell(cell, seed))
        else:
            futures = {pool.submit(run_cell, cell, seed): cell for cell in todo}
            for fut in as_completed(futures):
                done(futures[fut], _result(fut, futures[fut], seed))
    finally:
        bar.close()
        if pool is not None:
            pool.shutdown(cancel_futures=True)
    return {(c.model, c.engine): results[(c.model, c.engine)] for c in cells}


# Relative cost of a cell by its engine (a variant, ``nuts_states``, by its base), the order
# cells are handed to workers in: the samplers that build trees or run many chains first, the
# closed forms (1) last.
ENGINE_COST = {"nuts": 4, "hmc": 3, "chees": 2, "mams": 2, "svi": 2}


def largest_first(cells: Sequence[Cell]) -> list[Cell]:
    """``cells`` by :data:`ENGINE_COST`, largest first; equal costs keep their order."""
    return sorted(
        cells,
        key=lambda c: ENGINE_COST.get(get_model(c.model).base_engine(c.engine), 1),
        reverse=True,
    )


def _result(fut: Any, cell: Cell, seed: int) -> Run:
    try:
        return fut.result()
    except ZooError:
        raise
    except Exception as e:  # noqa: BLE001 - a worker that died: a failed cell, not a traceback
        error = f"{type(e).__name__}: {e}"
        return Run(
            engine=cell.engine,
            model=cell.model,
            seed=seed,
            options=dict(cell.options),
            diagnostics={"wall_time_s": float("nan")},
            status="failed",
            error=error,
            reasons=(error,),
        )


Reportable = str | Run | Comparison


def held_comparisons(results: Sequence[Run | Comparison]) -> list[Comparison]:
    """The comparisons of results a user holds: a Comparison as it is; Runs grouped by model into
    one comparison each (a single Run: a one-engine comparison), tabulated against the truth on
    the data they ran on. Raises :class:`ZooError` for a Run of an unregistered model, two results
    for one model (or one engine of a model), or Runs of one model on different data or seeds."""
    comparisons = [r for r in results if isinstance(r, Comparison)]
    by_model: dict[str, list[Run]] = {}
    for r in results:
        if isinstance(r, Run):
            if not r.model:
                raise ZooError(
                    f"a Run of engine {r.engine!r} names no model (Run.model is empty): only runs "
                    "from zoo.run / zoo.compare can be reported"
                )
            by_model.setdefault(r.model, []).append(r)
    for name, runs in by_model.items():
        entry = get_model(name)
        engines = [r.engine for r in runs]
        twice = sorted({e for e in engines if engines.count(e) > 1})
        if twice:
            raise ZooError(f"model {name!r} has more than one Run of engine(s) {twice}")
        seeds = sorted({r.seed for r in runs})
        if len(seeds) > 1:
            raise ZooError(
                f"the Runs of model {name!r} used different seeds {seeds}; a page states one seed"
            )
        data = runs[0].data or entry.load_data()
        for r in runs[1:]:
            if not same_data(r.data or entry.load_data(), data):
                raise ZooError(
                    f"the Runs of model {name!r} ran on different data ({runs[0].engine} and "
                    f"{r.engine}); one page compares engines on one dataset"
                )
        comparisons.append(comparison(entry, {r.engine: r for r in runs}, data, seed=seeds[0]))
    names = [c.model.name for c in comparisons]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise ZooError(f"model(s) {twice} appear in more than one result; one page per model")
    return comparisons


def same_data(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    """Whether two sets of model arguments are equal (tensors: same shape and values)."""
    if set(a) != set(b):
        return False
    for k, x in a.items():
        y = b[k]
        if isinstance(x, torch.Tensor) or isinstance(y, torch.Tensor):
            if not (
                isinstance(x, torch.Tensor)
                and isinstance(y, torch.Tensor)
                and x.shape == y.shape
                and bool(torch.equal(x, y))
            ):
                return False
        elif not bool(np.all(np.asarray(x == y))):
            return False
    return True


def write_report(
    names: Reportable | Sequence[Reportable] | None = None,
    *,
    out: str | os.PathLike[str],
    profile: str | None = None,
    seed: int | None = None,
    progress: bool | str | None = None,
    options: Mapping[str, Mapping[str, Any]] | None = None,
    engines: Sequence[str] | None = None,
    workers: int | None = None,
    scheduler: str | None = None,
    fresh: bool | None = None,
) -> Path:
    """Write ``out/index.html`` and, per model, ``NAME.html``, ``NAME.md``, ``NAME.json`` and
    ``NAME.csv``, plus ``index.md``, ``results.json`` and ``results.csv``; return the index path.

    ``names``: models to run and report (default: every registered model), or results already
    held: a :class:`Comparison` from ``zoo.compare``, a :class:`Run` from ``zoo.run`` (a
    one-engine page; Runs of one model share a page), or a list of them. Held results are
    written as they are, nothing is run again; the options below that size a run are then
    refused.

    ``profile``: ``"quick"`` (default), ``"full"`` or ``"smoke"`` (see :mod:`zoo.profiles`).
    ``seed``: default 0. ``options``: per-engine overrides of the profile, e.g. ``{"svi":
    {"num_steps": 500}}``. ``engines``: only these engines (default: every engine that
    applies). ``workers``: worker processes for the cells (default: the machine's cores).
    ``progress``: a bar over the cells on stderr (None: when it is a terminal), or ``"lines"``:
    a line per finished cell with its status and time. ``scheduler``: the address of a Dask
    scheduler to run the cells on (``tcp://host:8786``; needs ``dask[distributed]``).

    Every finished cell is stored in ``out/cells`` (:mod:`zoo.store`), and a report run again
    into ``out`` reads the cells it finished instead of running them: an interrupted report
    resumes. A cell is run again when its model, engine, seed, options, data or the code
    changed, when its files are corrupt or partial (a log line says so), and when it failed.
    ``fresh=True`` runs every cell and replaces what the store held.

    Everything is validated, and ``out`` checked writable, before any work starts. Files are
    staged inside ``out`` and moved into place only when every page is written; files of ``out``
    this report does not write are left alone, and models reported earlier into the same ``out``
    stay in its index. Two reports into one folder at once: the second is refused. A failed
    engine does not stop the report: it shows as a failed cell with its reason.
    """
    held = _held_results(names)
    if held is not None:
        sizing = {
            "profile": profile,
            "seed": seed,
            "options": options,
            "engines": engines,
            "workers": workers,
            "scheduler": scheduler,
            "fresh": fresh,
        }
        given = [k for k, v in sizing.items() if v is not None]
        if given:
            raise ZooError(
                f"{', '.join(given)} size the runs of models a report runs; results you hold "
                "are written as they ran"
            )
        comparisons = held_comparisons(held)
        out = check_writable(out)
        with locked(out):
            _write_pages(out, comparisons, workers=default_workers())
        return out / "index.html"
    profile = "quick" if profile is None else profile
    # no results among names (held is None): names, which plan_report checks
    cells = plan_report(
        cast("str | Sequence[str] | None", names), profile=profile, options=options, engines=engines
    )
    seed = check_seed(0 if seed is None else seed)
    if progress is None:
        progress = interactive()
    workers = default_workers() if workers is None else workers
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise ZooError(f"workers must be a positive integer, got {workers!r}")
    out = check_writable(out)  # last: a wrong call leaves no new folder behind
    with locked(out):
        remove_leftovers(out)  # a killed report's staging folder
        store = CellStore(out, reuse=not fresh)
        store.clean()
        results = run_cells(
            cells, seed, workers=workers, progress=progress, scheduler=scheduler, store=store
        )
        comparisons = []
        for name in dict.fromkeys(c.model for c in cells):
            entry = get_model(name)
            runs = {c.engine: results[(c.model, c.engine)] for c in cells if c.model == name}
            comparisons.append(
                comparison(entry, runs, entry.load_data(), seed=seed, profile=profile)
            )
        _write_pages(out, comparisons, workers=workers)
    return out / "index.html"


def _held_results(
    names: Reportable | Sequence[Reportable] | None,
) -> list[Run | Comparison] | None:
    """The results in ``names`` if it holds results (and nothing else), None if it holds names."""
    if names is None or isinstance(names, str):
        return None
    try:
        items = [names] if isinstance(names, Run | Comparison) else list(names)
    except TypeError:
        raise ZooError(
            f"a report takes a model name, a list of names or results (Comparison, Run), "
            f"got {names!r}"
        ) from None
    held = [x for x in items if isinstance(x, Run | Comparison)]
    if not held:
        return None
    if len(held) < len(items):
        others = [x for x in items if not isinstance(x, Run | Comparison)]
        raise ZooError(
            f"a report takes model names (run now) or results you hold (Comparison, Run), not "
            f"both: got {others!r} beside {len(held)} result(s)"
        )
    return held


def _write_pages(out: Path, comparisons: Sequence[Comparison], *, workers: int = 1) -> None:
    """Every comparison's page and the index (keeping models reported earlier into ``out``),
    written atomically. The pages are rendered on ``workers`` forked processes (a page's
    figures, LOO and findings take seconds each)."""
    generated = reports.now_utc()
    files: dict[str, str] = {}
    summaries = []

    # the pages with the most runs (figures, LOO, findings) first: none starts last and runs
    # alone while the other workers wait
    order = sorted(range(len(comparisons)), key=lambda i: -len(comparisons[i].runs))

    def render(j: int) -> dict[str, str]:
        return reports.render_model_page(comparisons[order[j]], generated=generated)

    pages = dict(zip(order, map_indices(render, len(comparisons), workers), strict=True))
    for i in range(len(comparisons)):
        page = pages[i]
        summaries.append(json.loads(page.pop("summary")))
        files.update(page)
    summaries += reports.earlier_models(out, exclude={s["name"] for s in summaries})
    first = comparisons[0]
    index = reports.render_index(
        summaries, profile=first.profile, seed=first.seed, generated=generated
    )
    files.update(index)
    write_atomically(out, files, last=tuple(index))


report = write_report


class _Collect(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@contextlib.contextmanager
def _collect_logs(names: Sequence[str] = ("arviz", "pyro")) -> Iterator[list[logging.LogRecord]]:
    """Collect (instead of print) what the engines' libraries log while a cell runs."""
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
