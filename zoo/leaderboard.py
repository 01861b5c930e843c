"""The leaderboard: any set of engines (built-in, a user's registered sampler) on every target of
a suite with a known answer, measured the same way for each.

>>> board = zoo.benchmark(["nuts", "mala"], suite="gym", seeds=(0, 1, 2))  # doctest: +SKIP
>>> board.ranking  # doctest: +SKIP

For each target x engine x seed (a *cell*), in a fresh process forked for it (so the model's
trace, compile and caches are cold, as a new user's first run finds them; imports excluded):

1. **Time to ESS**: ``zoo.run(target, engine, seed=seed, ess=N)`` at the engine's defaults (the
   run a user makes), its wall time, and whether it reached min bulk ESS >= N with every R-hat
   <= 1.01 (:data:`R_HAT_MAX`). An MCMC engine that cannot go on from its last draw, or takes
   no ``ess=``, climbs a ladder of cold runs instead; any other engine without ``ess=`` says so.
2. **A fixed budget** (the size's chains, warmup and draws): the gradients until the squared
   bias of every second moment stays below 0.01, max and average over parameters, with the MAMS
   paper's aggregation (:mod:`zoo_inference.bias`); effective draws per 1,000 gradients, warmup
   included; divergences; the run's verdict and its reasons.

Seeds give medians and their spread; a figure from one seed is shown as such. Every finished
cell is stored under ``out/cells/`` (keyed by the target, engine, seed, size, data and code, as
a report's cells are), so a leaderboard run again resumes. The published figures of the MAMS
paper (:mod:`zoo.published`) are rows of the same table. Timings depend on the machine and its
load: cells run one at a time by default (``workers=1``), each with every core.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import math
import os
import sys
import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from tqdm.auto import tqdm

import zoo_reports.leaderboard as pages
from zoo_inference import GENERIC_ENGINES, EngineSpec, ZooError
from zoo_inference.arviz_io import mcmc_convergence
from zoo_inference.bias import THRESHOLD, draw_gradients, flat_draws, measure, second_moments
from zoo_inference.parallel import in_child, may_fork_child
from zoo_inference.results import one_line
from zoo_inference.runtime import interactive

from .api import run as zoo_run
from .files import check_writable, locked, replace_file, write_atomically
from .published import PUBLISHED
from .registry import SUITES, get_model, list_models
from .store import CellStore, _key
from .sweep import executor

R_HAT_MAX = 1.01
CURVE_POINTS = 200  # of each b² curve kept for the target's figure
FORMAT = 1  # of a stored cell


@dataclass(frozen=True)
class Size:
    """How much a cell runs: the fixed budget (``num_chains`` x (``warmup`` + ``num_samples``);
    None: the engine's default) and the ESS target of the timed run (``ess_options``: what else
    it sets; empty, the engine's defaults, as a user runs it)."""

    num_chains: int
    warmup: int | None
    num_samples: int
    ess: int
    ess_options: Mapping[str, Any] = field(default_factory=dict)
    # draws a chain of each timed run of a sampler that cannot go on from its last draw
    ladder: tuple[int, ...] = (250, 350, 500, 700, 1000, 1400, 2000, 2800, 4000)

    def budget(self) -> dict[str, Any]:
        out = {"num_chains": self.num_chains, "num_samples": self.num_samples}
        return out if self.warmup is None else {**out, "warmup": self.warmup}


SIZES = {
    # tests and CI: every page renders; the figures mean little
    "smoke": Size(2, 60, 60, 40, {"num_chains": 2, "warmup": 60, "max_draws": 120}, (60, 120)),
    # the default: a look at every target in minutes a cell
    "quick": Size(4, 200, 1000, 400),
    # the MAMS paper's protocol: many chains, long runs
    "full": Size(16, None, 2000, 400),
}


@dataclass(frozen=True)
class BenchCell:
    model: str
    engine: str
    seed: int


@dataclass
class Leaderboard:
    """A leaderboard's figures: ``cells`` one row per target x engine x seed (the published
    figures as rows of engine ``published nuts`` / ``published mams``), ``table`` one row per
    target x engine (medians over seeds, their spread, the seeds), ``ranking`` one row per
    engine (its mean rank over the targets it applies to by gradients to b²_max < 0.01; a
    target it did not reach ranks it last there).
    ``curves``: each cell's median b² curves for the pages; ``out``: where it was written."""

    cells: pd.DataFrame
    table: pd.DataFrame
    ranking: pd.DataFrame
    size: str
    curves: dict[tuple[str, str, int], dict[str, list[float]]] = field(repr=False)
    out: Path | None = None

    def __repr__(self) -> str:
        where = f", written to {self.out}" if self.out else ""
        return (
            f"Leaderboard({self.table['target'].nunique()} targets, "
            f"{self.ranking.shape[0]} engines, size {self.size!r}{where})"
        )


# ------------------------------------------------------------------------------ planning
def suite_models(suite: str | Sequence[str]) -> list[str]:
    """The targets of ``suite`` (one of :data:`~zoo.registry.SUITES` or a list of models) that
    carry a ground truth on their data: a clear error for an unknown suite or model, or a model
    without a truth (there is nothing to measure bias against)."""
    if isinstance(suite, str):
        if suite not in SUITES:
            raise ZooError(f"unknown suite {suite!r}; the suites are {', '.join(SUITES)}")
        return [n for n in list_models(suite=suite) if get_model(n).ground_truth() is not None]
    names = list(dict.fromkeys(suite))
    if not names:
        raise ZooError("no targets to benchmark")
    for name in names:
        if get_model(name).ground_truth() is None:
            raise ZooError(f"model {name!r} has no ground truth to measure bias against")
    return names


def check_engines(engines: Sequence[str] | str, models: Sequence[str]) -> list[str]:
    """``engines`` as a list, each known to the zoo (a generic or registered engine, or one of a
    target's own): an unknown one is a :class:`ZooError` naming close matches."""
    engines = [engines] if isinstance(engines, str) else list(dict.fromkeys(engines))
    if not engines:
        raise ZooError("no engines to benchmark")
    known = set(GENERIC_ENGINES)
    for m in models:
        known |= set(get_model(m).reference_engines)
    for e in engines:
        if e not in known:
            close = difflib.get_close_matches(e, sorted(known), n=3)
            hint = f"; did you mean {' or '.join(map(repr, close))}?" if close else ""
            raise ZooError(f"unknown engine {e!r}{hint}")
    return engines


def _seeds(seeds: int | Sequence[int]) -> list[int]:
    seeds = [seeds] if isinstance(seeds, int) else list(dict.fromkeys(seeds))
    if not seeds or not all(isinstance(s, int) and not isinstance(s, bool) for s in seeds):
        raise ZooError(f"seeds must be integers, got {seeds!r}")
    return seeds


# ------------------------------------------------------------------------------ one cell
def time_to_ess(model: str, engine: str, seed: int, sz: Size, spec: EngineSpec) -> dict[str, Any]:
    """The wall time of ``zoo.run(..., ess=sz.ess)`` where it reached the target (inf where it
    stopped short, None where the engine takes no target), and why not. A sampler that cannot
    go on from its last draw (``spec.goes_on`` false: nutpie, a user's sampler without
    ``resume``), or an MCMC engine without ``ess=`` (draws and a warmup: stan, pyro_nuts),
    climbs a budget ladder instead (:func:`ladder_time`)."""
    takes = spec.defaults
    opts = {k: v for k, v in sz.ess_options.items() if k in takes}
    if "ess" not in takes and not {"num_samples", "warmup"} <= set(takes):
        return {"time_to_ess_s": None, "time_to_ess_reason": f"{engine} takes no ess= target"}
    if "ess" not in takes or (spec.sampler is not None and not spec.goes_on):
        opts.pop("max_draws", None)  # an ess= run's cap
        return ladder_time(model, engine, seed, sz, opts)
    try:
        r = timed_run(model, engine, seed, {**opts, "ess": sz.ess})
    except ZooError as e:  # an engine of a user's that refuses the target
        return {"time_to_ess_s": None, "time_to_ess_reason": one_line(e)}
    if reached(r, sz.ess):
        return {"time_to_ess_s": r["wall"], "timed_wall_s": r["wall"]}
    why = (
        f"failed: {r['error']}"
        if not r["ok"]
        else f"stopped at min ESS {r['ess']:.0f}, max R-hat {r['r_hat']:.3f} ({r['stopped']})"
    )
    return {"time_to_ess_s": math.inf, "timed_wall_s": r["wall"], "time_to_ess_reason": why}


def timed_run(model: str, engine: str, seed: int, options: Mapping[str, Any]) -> dict[str, Any]:
    """One timed ``zoo.run``: its wall time, whether it ran, its min bulk ESS and max R-hat."""
    start = time.perf_counter()
    with warnings.catch_warnings():  # what they say is kept in the reasons
        warnings.simplefilter("ignore")
        run = zoo_run(model, engine, seed=seed, progress=False, **options)
    d = run.diagnostics
    return {
        "wall": time.perf_counter() - start,
        "ok": run.ok,
        "error": run.error,
        "ess": float(d.get("min_ess_bulk", math.nan)),
        "r_hat": float(d.get("max_r_hat", math.nan)),
        "stopped": d.get("stopped"),
    }


def reached(r: Mapping[str, Any], ess: int) -> bool:
    return bool(r["ok"] and r["ess"] >= ess and r["r_hat"] <= R_HAT_MAX)


def ladder_time(
    model: str, engine: str, seed: int, sz: Size, options: Mapping[str, Any]
) -> dict[str, Any]:
    """The time to ESS of a sampler that cannot go on: runs of ``sz.ladder``'s draws a chain in
    turn (about sqrt(2) apart, the engine's warmup and chains otherwise), each in a process
    forked for it (cold, as a peer's budget ladder is in ``benchmarks/compare_peers.py``),
    until one reaches the target: its wall time, the rungs tried beside it."""
    tried = []
    for n in sz.ladder:
        r = forked(timed_run, model, engine, seed, {**options, "num_samples": n})
        if "wall" not in r:  # its process died
            return {"time_to_ess_s": math.inf, "time_to_ess_reason": f"{n} draws: {r['reason']}"}
        tried.append(f"{n} ({r['wall']:.1f} s)")
        if reached(r, sz.ess):
            how = f"the first cold run of a budget ladder (no ess= run) to reach it: {n} draws"
            return {
                "time_to_ess_s": r["wall"],
                "timed_wall_s": r["wall"],
                "time_to_ess_reason": f"{how} a chain; tried {', '.join(tried)}",
            }
        if not r["ok"]:
            break
    last = (
        f"failed: {r['error']}"
        if not r["ok"]
        else f"min ESS {r['ess']:.0f}, max R-hat {r['r_hat']:.3f}"
    )
    return {
        "time_to_ess_s": math.inf,
        "timed_wall_s": r["wall"],
        "time_to_ess_reason": f"no rung of the budget ladder reached it ({last}); "
        f"tried {', '.join(tried)}",
    }


def measure_cell(model: str, engine: str, seed: int, size: str) -> dict[str, Any]:
    """The figures of one cell, as plain data (see the module's doc); in this process."""
    entry, sz = get_model(model), SIZES[size]
    row: dict[str, Any] = {"target": model, "engine": engine, "seed": seed}
    try:
        spec = entry.engine_spec(engine)
    except ZooError as e:
        return {**row, "status": "does not apply", "reason": one_line(e)}
    row |= time_to_ess(model, engine, seed, sz, spec)
    opts = {k: v for k, v in sz.budget().items() if k in spec.defaults}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        run = zoo_run(model, engine, seed=seed, progress=False, **opts)
    row |= {"status": run.status, "reason": "; ".join(run.reasons)}
    idata = run.idata
    if not run.ok or idata is None:
        return row
    truth = entry.ground_truth()
    sites, ex2, var_x2, how = second_moments(truth)
    try:
        x = flat_draws(idata["posterior"], sites)
    except KeyError as e:
        return {**row, "status": "failed", "reason": f"cannot measure: no draws of {e}"}
    total = float(run.diagnostics.get("gradient_evals") or 0)
    try:
        stats = idata["sample_stats"] if "sample_stats" in idata.groups() else {}
        grads = draw_gradients(stats, engine)
    except ValueError as e:  # a sampler that counts only its total: spread over its iterations
        warmup = int({**spec.defaults, **run.options}.get("warmup") or 0)
        if total <= 0:
            return {**row, "status": "failed", "reason": f"cannot measure: {one_line(e)}"}
        per = total / (x.shape[0] * (warmup + x.shape[1]))
        grads = np.full(x.shape[:2], per)
        row["gradients_from"] = "the run's total, spread evenly over its iterations"
    m = measure(x, grads, ex2, var_x2)
    total = total or float(grads.sum())
    ess = mcmc_convergence(idata["posterior"][sites])["min_ess_bulk"]
    keep = np.unique(np.linspace(0, x.shape[1] - 1, CURVE_POINTS).astype(int))
    row |= {
        "chains": int(x.shape[0]),
        "draws": int(x.shape[1]),
        "parameters": int(x.shape[-1]),
        "gradients_b2_max": m.median_curve[0],
        "gradients_b2_avg": m.median_curve[1],
        "final_b2_max": m.final[0],
        "final_b2_avg": m.final[1],
        "ess_per_1000_gradients": 1000 * ess / total if total > 0 else math.nan,
        "min_ess_bulk": ess,
        "divergences": int(run.diagnostics.get("divergences") or 0),
        "gradients": total,
        "wall_s": run.wall_time_s,
        "var_x2_from": how,
        "curve": {
            "gradients": m.gradients[keep].tolist(),
            "b2_max": m.curve[0][keep].tolist(),
            "b2_avg": m.curve[1][keep].tolist(),
        },
    }
    return row


def can_fork() -> bool:
    """Whether a cell may fork: not in a daemonic Dask worker, not where fork is missing or
    unsafe (:func:`~zoo_inference.parallel.fork_is_safe`)."""
    return may_fork_child()


def _failed_as_a_cell(fn: Callable[..., dict[str, Any]], *args: Any) -> dict[str, Any]:
    try:
        return fn(*args)
    except BaseException as e:  # the caller records why the call gave nothing
        return {"status": "failed", "reason": f"{type(e).__name__}: {one_line(e)}"}


def forked(fn: Callable[..., dict[str, Any]], *args: Any) -> dict[str, Any]:
    """``fn(*args)`` in a process forked for it (cold: nothing of the model is traced,
    compiled or cached yet), or ``{"status": "failed", "reason": ...}`` where it raised or its
    process died; in this process where none may fork (:func:`can_fork`)."""
    if not can_fork():
        return fn(*args)
    try:
        return in_child(_failed_as_a_cell, fn, *args)
    except ChildProcessError:
        return {"status": "failed", "reason": "its process died without a result"}


def fresh_cell(model: str, engine: str, seed: int, size: str) -> dict[str, Any]:
    """:func:`measure_cell` in a process forked for it; in this process where it may not fork
    (a daemonic Dask worker), saying so in ``process``."""
    base = {"target": model, "engine": engine, "seed": seed}
    process = "fresh" if can_fork() else "the worker's"
    return {**base, **forked(measure_cell, model, engine, seed, size), "process": process}


# ------------------------------------------------------------------------------ the store
class BenchStore:
    """Finished cells under ``out/cells/<target>/<engine>-seed<seed>.bench.json``, each with the
    key of what decides it; a stale, torn or failed cell is run again."""

    def __init__(self, out: Path, *, reuse: bool = True) -> None:
        self.cells = CellStore(out)  # a report's key parts: data and code, hashed once a model
        self.root, self.reuse = self.cells.root, reuse

    def path(self, cell: BenchCell) -> Path:
        return self.root / cell.model / f"{cell.engine}-seed{cell.seed}.bench.json"

    def key(self, cell: BenchCell, size: str) -> str:
        size_options = dataclasses.asdict(SIZES[size])
        return _key(self.cells.key_parts(cell.model, cell.engine, cell.seed, size_options))

    def load(self, cell: BenchCell, size: str) -> dict[str, Any] | None:
        path = self.path(cell)
        if not self.reuse or not path.exists():
            return None
        try:
            record = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        if record.get("format") != FORMAT or record.get("key") != self.key(cell, size):
            return None
        row = record.get("row") or {}
        return None if row.get("status") == "failed" else row

    def save(self, cell: BenchCell, size: str, row: Mapping[str, Any]) -> None:
        path = self.path(cell)
        path.parent.mkdir(parents=True, exist_ok=True)
        record = {"format": FORMAT, "key": self.key(cell, size), "row": row}
        replace_file(path, json.dumps(record, allow_nan=True, indent=1))


# ------------------------------------------------------------------------------ the run
def benchmark(
    engines: Sequence[str] | str = ("nuts", "chees", "mams"),
    suite: str | Sequence[str] = "gym",
    *,
    seeds: int | Sequence[int] = (0,),
    size: str = "quick",
    out: str | os.PathLike[str] | None = "leaderboard",
    workers: int = 1,
    scheduler: str | None = None,
    fresh: bool = False,
    progress: bool | str | None = None,
) -> Leaderboard:
    """Measure ``engines`` on every target of ``suite`` (``gym``, ``posteriordb``, ``seeds``,
    ``user``, or a list of models) at each of ``seeds``, ``size`` one of :data:`SIZES`; see the
    module's doc for what is measured. ``out``: the folder of the leaderboard's pages
    (``index.html``, a page a target, ``leaderboard.csv`` / ``.json``) and its stored cells,
    read again unless ``fresh``; None writes nothing. ``workers`` > 1 runs cells side by side
    (their timings then share the cores), ``scheduler`` on a Dask cluster. Bad input raises a
    :class:`ZooError` before any work. ``progress``: a bar (default on a terminal or in
    Jupyter), ``"lines"`` a line a cell on stderr (a log), False nothing."""
    if size not in SIZES:
        raise ZooError(f"unknown size {size!r}; the sizes are {', '.join(SIZES)}")
    models = suite_models(suite)
    engines = check_engines(engines, models)
    seed_list = _seeds(seeds)
    if not isinstance(workers, int) or isinstance(workers, bool) or workers < 1:
        raise ZooError(f"workers must be a positive integer, got {workers!r}")
    folder = check_writable(out) if out is not None else None
    cells = [BenchCell(m, e, s) for m in models for e in engines for s in seed_list]
    rows: dict[BenchCell, dict[str, Any]] = {}
    store = BenchStore(folder, reuse=not fresh) if folder is not None else None
    todo = []
    for c in cells:
        found = store.load(c, size) if store is not None else None
        if found is not None:
            rows[c] = found
        else:
            todo.append(c)
    show = interactive() if progress is None else progress
    bar = tqdm(
        total=len(cells),
        initial=len(cells) - len(todo),
        desc="leaderboard",
        disable=show is not True,
        leave=False,
    )
    pool = executor(workers, scheduler)
    try:
        if pool is None:
            futures: list[tuple[BenchCell, Any]] = [(c, None) for c in todo]
        else:
            futures = [(c, pool.submit(fresh_cell, c.model, c.engine, c.seed, size)) for c in todo]
        for c, fut in futures:
            row = fresh_cell(c.model, c.engine, c.seed, size) if fut is None else _get(fut, c)
            rows[c] = row
            if store is not None and row.get("status") != "failed":
                store.save(c, size, row)
            bar.update(1)
            if show == "lines":
                print(_line(row), file=sys.stderr, flush=True)
            elif show:
                bar.write(_line(row))
    finally:
        bar.close()
        if pool is not None:
            pool.shutdown(cancel_futures=True)
    board = leaderboard([rows[c] for c in cells], models, size)
    if folder is not None:
        with locked(folder):
            write_atomically(folder, pages.render(_payload(board)))
        board.out = folder
    return board


def _get(fut: Future[dict[str, Any]], cell: BenchCell) -> dict[str, Any]:
    try:
        return fut.result()
    except Exception as e:  # a worker that died: the cell says so, the others go on
        why = f"{type(e).__name__}: {one_line(e)}"
        return {
            "target": cell.model,
            "engine": cell.engine,
            "seed": cell.seed,
            "status": "failed",
            "reason": why,
        }


def _line(row: Mapping[str, Any]) -> str:
    g = row.get("gradients_b2_max")
    figure = "" if g is None else f", {g:,.0f} gradients to b²_max < {THRESHOLD}"
    if g is not None and math.isinf(g):
        figure = f", b²_max not below {THRESHOLD} in its draws"
    if row.get("status") in ("failed", "does not apply"):
        figure = f": {row.get('reason')}"
    return f"{row['target']}/{row['engine']} seed {row['seed']}: {row.get('status')}{figure}"


# ------------------------------------------------------------------------------ the tables
def leaderboard(rows: Sequence[Mapping[str, Any]], models: Sequence[str], size: str) -> Leaderboard:
    """The tables of a leaderboard from its cells' rows (and the published figures of its
    targets)."""
    curves = {(r["target"], r["engine"], r["seed"]): r["curve"] for r in rows if "curve" in r}
    flat = [{k: v for k, v in r.items() if k != "curve"} for r in rows]
    for model in models:
        pub = PUBLISHED.get(model)
        for name, pair in (
            ("nuts", pub.nuts if pub else None),
            ("mams", pub.mams if pub else None),
        ):
            if pair is not None:
                flat.append(
                    {
                        "target": model,
                        "engine": f"published {name}",
                        "seed": None,
                        "status": "published",
                        "gradients_b2_max": pair[0],
                        "gradients_b2_avg": pair[1],
                        "reason": pub.source,  # type: ignore[union-attr]
                    }
                )
    cells = pd.DataFrame(flat)
    figures = [
        "gradients_b2_max",
        "gradients_b2_avg",
        "ess_per_1000_gradients",
        "time_to_ess_s",
        "divergences",
    ]
    for f in figures:
        if f not in cells:
            cells[f] = np.nan
    table_rows = []
    for (target, engine), g in cells.groupby(["target", "engine"], sort=False):
        entry: dict[str, Any] = {
            "target": target,
            "engine": engine,
            "seeds": int(g["seed"].notna().sum()) or None,
            "status": _worst(g["status"]),
        }
        for f in figures:
            v = pd.to_numeric(g[f], errors="coerce").dropna().to_numpy(dtype=float)
            entry[f] = float(np.median(v)) if len(v) else math.nan
            entry[f"{f}_low"] = float(v.min()) if len(v) else math.nan
            entry[f"{f}_high"] = float(v.max()) if len(v) else math.nan
        reasons = [r for r in g.get("reason", pd.Series(dtype=str)).dropna() if r]
        entry["reason"] = reasons[0] if reasons else ""
        table_rows.append(entry)
    table = pd.DataFrame(table_rows)
    ranks = []
    for _target, g in table.groupby("target", sort=False):
        own = g[~g["engine"].str.startswith("published ") & (g["status"] != "does not apply")]
        score = own["gradients_b2_max"].fillna(math.inf)
        ranks.append(
            pd.DataFrame(
                {
                    "engine": own["engine"],
                    "rank": score.rank(method="min"),
                    "reached": np.isfinite(score),
                }
            )
        )
    if ranks:
        r = pd.concat(ranks)
        ranking = (
            r.groupby("engine", sort=False)
            .agg(mean_rank=("rank", "mean"), targets=("rank", "size"), reached=("reached", "sum"))
            .reset_index()
            .sort_values(["mean_rank", "reached"], ascending=[True, False], kind="stable")
            .reset_index(drop=True)
        )
    else:
        ranking = pd.DataFrame(columns=["engine", "mean_rank", "targets", "reached"])
    return Leaderboard(cells, table, ranking, size, curves)


def _worst(statuses: pd.Series) -> str:
    order = ["failed", "does not apply", "unreliable", "ok", "published"]
    seen = [s for s in order if s in set(statuses.dropna())]
    return seen[0] if seen else ""


COUNTS = frozenset({"seed", "seeds", "chains", "draws", "parameters"})  # integers in a table


def _plain(v: Any, count: bool = False) -> Any:
    """A cell of a table as JSON has it: NaN as None, an infinite count as "inf" (not
    reached), NumPy scalars as Python's, a ``count`` as an int (pandas made it a float beside
    the published rows' None)."""
    if isinstance(v, np.generic):
        v = v.item()
    if count and isinstance(v, float) and v.is_integer():
        return int(v)
    if isinstance(v, float) and not math.isfinite(v):
        return None if math.isnan(v) else ("inf" if v > 0 else "-inf")
    return v


def _payload(board: Leaderboard) -> dict[str, Any]:
    """What the pages are rendered from: plain data."""

    def records(df: pd.DataFrame) -> list[dict[str, Any]]:
        return [{k: _plain(v, k in COUNTS) for k, v in r.items()} for r in df.to_dict("records")]

    return {
        "size": board.size,
        "sizes": dataclasses.asdict(SIZES[board.size]),
        "threshold": THRESHOLD,
        "r_hat_max": R_HAT_MAX,
        "cells": records(board.cells),
        "table": records(board.table),
        "ranking": records(board.ranking),
        "curves": [
            {"target": t, "engine": e, "seed": s, **c} for (t, e, s), c in board.curves.items()
        ],
        "csv": board.table.to_csv(index=False),
    }
