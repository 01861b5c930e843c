"""Simulation-based calibration (Talts et al. 2018): ``zoo.sbc`` and ``zoo sbc``.

For each replication: draw every latent site from the prior and the observations given them (the
registered model, on its bundled data's shapes), run the engine on the simulated data through
the same path as ``zoo.run``, and record the rank of each true value (each scalar element of
each continuous latent site) among the posterior draws, thinned to near-independence
(:mod:`inference.calibration`). A calibrated engine gives uniform ranks; a posterior too narrow
piles them at both ends, one too wide in the middle, a biased one at one end. For ``svi`` the
draws are the fitted guide's: the calibration of a variational fit.

Replications are independent: they run on the report sweep's executor (worker processes, or a
Dask cluster with ``scheduler``). Each is seeded from ``(seed, rep)``, so a result does not
depend on the number of workers.
"""

from __future__ import annotations

import dataclasses
import json
import math
import sys
import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import as_completed
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyro
import pyro.distributions as dist
import pyro.poutine as poutine
import torch
from matplotlib.figure import Figure
from pyro.infer.inspect import site_is_deterministic
from pyro.poutine.uncondition_messenger import UnconditionMessenger
from pyro.poutine.util import site_is_subsample
from scipy import stats
from tqdm.auto import tqdm

from zoo_inference import Run, ZooError, check_options, mcmc, samplers
from zoo_inference.arviz_io import make_run
from zoo_inference.calibration import (
    UNIFORM_SD,
    bin_edges,
    binned,
    ecdf_difference,
    normalised,
    ranks,
    uniformity,
)
from zoo_inference.context import EngineContext
from zoo_inference.engines import budget
from zoo_inference.results import one_line, site_rows
from zoo_inference.runtime import interactive, seeded, threads
from zoo_inference.serialize import dumps
from zoo_reports.figures import FigureImage, to_base64_png
from zoo_reports.render import now_utc, render, to_csv, versions

from . import api
from .files import check_writable, locked, write_atomically
from .profiles import COUNT_OPTIONS
from .registry import ModelEntry, get_model, list_models
from .sweep import default_workers, executor

# Engine options an SBC replication runs with unless the model or the caller says otherwise:
# enough for a fair posterior on the zoo's small models, small enough for 100 replications.
SBC_BUDGETS: dict[str, dict[str, Any]] = {
    "svi": {"num_steps": 1000, "num_samples": 1000},
    "nuts": {"num_samples": 200, "warmup": 200, "num_chains": 4},
    "hmc": {"num_samples": 200, "warmup": 200, "num_chains": 4},
    "chees": {"num_samples": 50, "warmup": 300, "num_chains": 16},
}
MAX_PANELS = 12  # parameters drawn in the figures (those with the smallest p-values)
PAGE_PREFIX = "sbc-"
Transform = Callable[[Run], Run]


# --------------------------------------------------------------------------- simulation
def simulate(entry: ModelEntry, seed: int) -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
    """One draw from the model's joint prior on its bundled data's shapes: ``(data, truth)``,
    ``data`` the model's keyword arguments with every observation replaced by its draw, ``truth``
    the latent sites' values. An observation may be a data argument or a view of one
    (``obs=x[t]``, ``obs=x.reshape(...)``). Raises :class:`ZooError` for a model whose prior
    cannot be sampled or whose observations cannot be written back into its data."""
    template = {
        k: v.detach().clone().contiguous() if isinstance(v, torch.Tensor) else v
        for k, v in entry.load_data().items()
    }
    with seeded(seed), torch.no_grad(), pyro.validation_enabled(False):
        try:
            free = poutine.trace(_Uncondition()(entry.model)).get_trace(**template)
            given = poutine.trace(entry.model).get_trace(**template)
        except Exception as e:  # noqa: BLE001 - the user's model: name it and the problem
            raise ZooError(
                f"cannot simulate from model {entry.name!r}: its prior predictive raised "
                f"{one_line(e)}"
            ) from None
    data = {k: v.clone() if isinstance(v, torch.Tensor) else v for k, v in template.items()}
    observed = [n for n, s in given.nodes.items() if _is_observation(s)]
    for name in observed:
        key, view = _data_view(entry.name, name, given.nodes[name]["value"], template, data)
        view.copy_(free.nodes[name]["value"].to(view.dtype).expand_as(view))
    latent = {
        n: s["value"]
        for n, s in free.nodes.items()
        if s["type"] == "sample"
        and n in given.nodes
        and n not in observed
        and not site_is_deterministic(given.nodes[n])
    }
    _check_consistent(entry, free, latent, observed, data)
    truth = {n: latent[n].detach().clone() for n in entry.structure.continuous if n in latent}
    return data, truth


class _Uncondition(UnconditionMessenger):
    """Pyro's ``uncondition``, leaving ``pyro.deterministic`` sites as they are (functions of
    the latents, not observations to draw)."""

    def _pyro_sample(self, msg: dict) -> None:
        if not msg["infer"].get("_deterministic"):
            super()._pyro_sample(msg)


def _is_observation(site: dict) -> bool:
    return (
        site["type"] == "sample"
        and site["is_observed"]
        and not site_is_subsample(site)
        and not site_is_deterministic(site)
        and not isinstance(site["fn"], dist.Unit)  # pyro.factor
    )


def _data_view(
    model: str,
    site: str,
    value: Any,
    template: Mapping[str, Any],
    data: Mapping[str, Any],
) -> tuple[str, torch.Tensor]:
    """The data argument an observation is (a view of), and the same view of ``data``'s copy."""
    if isinstance(value, torch.Tensor):
        ptr = value.untyped_storage().data_ptr()
        for key, t in template.items():
            if not isinstance(t, torch.Tensor) or t.untyped_storage().data_ptr() != ptr:
                continue
            if value.dtype != t.dtype or any(
                s == 0 and n > 1 for s, n in zip(value.stride(), value.shape, strict=True)
            ):
                break
            target = data[key]
            return key, target.as_strided(value.size(), value.stride(), value.storage_offset())
    raise ZooError(
        f"cannot simulate data for model {model!r}: its observed site {site!r} is not one of its "
        "data arguments nor a view of one (SBC writes each simulated observation back into the "
        "model's data)"
    )


def _check_consistent(
    entry: ModelEntry,
    free: poutine.Trace,
    latent: Mapping[str, torch.Tensor],
    observed: Sequence[str],
    data: Mapping[str, Any],
) -> None:
    """The model run on the simulated data, at the simulated latents, must reproduce the
    simulation: the same observations and the same joint density. A model that reads its data
    where it should read a site's value (an autoregression on ``x[t - 1]``) would not."""
    with torch.no_grad(), pyro.validation_enabled(False):
        try:
            again = poutine.trace(poutine.condition(entry.model, data=dict(latent))).get_trace(
                **data
            )
            lp_free = float(free.log_prob_sum())
            lp_again = float(again.log_prob_sum())
        except Exception as e:  # noqa: BLE001 - the user's model
            raise ZooError(
                f"cannot simulate data for model {entry.name!r}: it raised {one_line(e)} on its "
                "own simulated data"
            ) from None
    same = all(
        n in again.nodes
        and torch.allclose(
            again.nodes[n]["value"].double(), free.nodes[n]["value"].double(), atol=1e-6
        )
        for n in observed
    )
    if not same or not math.isclose(lp_free, lp_again, rel_tol=1e-5, abs_tol=1e-4):
        raise ZooError(
            f"cannot simulate data for model {entry.name!r}: run on its own simulated data it does "
            "not reproduce the simulation (does it read an observation from its data arguments "
            "where it should use the sampled value?)"
        )


# --------------------------------------------------------------------------- one replication
@dataclass(frozen=True)
class _Task:
    model: str
    engine: str
    options: Mapping[str, Any]
    rep: int
    data_seed: int
    run_seed: int
    num_draws: int
    sites: tuple[str, ...]
    transform: Transform | None = None


@dataclass
class _Outcome:
    rep: int
    ok: bool
    wall_time_s: float
    ranks: np.ndarray | None = None
    ess: np.ndarray | None = None
    kept: np.ndarray | None = None
    reason: str | None = None
    fatal: str | None = None  # an error of the whole SBC (the engine gives no draws)


def _seeds(seed: int, rep: int) -> tuple[int, int]:
    """Independent data and run seeds of replication ``rep``."""
    data_seed, run_seed = np.random.SeedSequence([seed, rep]).generate_state(2)
    return int(data_seed), int(run_seed)


def _run_rep(task: _Task, entry: ModelEntry | None = None) -> _Outcome:
    """Simulate, run the engine, rank the true values; numerical failures are a failed
    replication, an engine that gives no posterior draws is fatal."""
    entry = entry if entry is not None else get_model(task.model)
    start = time.perf_counter()
    data, truth = simulate(entry, task.data_seed)

    def failed(reason: str) -> _Outcome:
        return _Outcome(task.rep, False, time.perf_counter() - start, reason=reason)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a replication's failure is recorded with its reason
        try:
            prepared = api.prepare(
                entry, task.engine, data=data, seed=task.run_seed, progress=False, **task.options
            )
        except ZooError as e:
            return failed(f"simulated data rejected: {e}")
        run = api.execute(prepared)
    return _ranked(task, run, truth, start)


def _ranked(task: _Task, run: Run, truth: Mapping[str, torch.Tensor], start: float) -> _Outcome:
    """The replication's outcome from its Run: the rank of each true value among the draws
    (after ``task.transform``)."""
    if task.transform is not None and run.ok:
        run = task.transform(run)
    if not run.ok:
        return _Outcome(task.rep, False, time.perf_counter() - start, reason=str(run.error))
    if run.kind != "draws":
        what = "a point estimate" if run.kind == "point" else "draws conditional on fixed sites"
        fatal = (
            f"engine {task.engine!r} gives {what} of model {task.model!r}, not posterior draws: "
            "SBC ranks the true values among posterior draws"
        )
        return _Outcome(task.rep, False, 0.0, fatal=fatal)
    post = run.idata.posterior
    columns, values = [], []
    for site in task.sites:
        shape = tuple(truth[site].shape)
        if site not in post or tuple(post[site].shape[2:]) != shape:
            return _Outcome(
                task.rep,
                False,
                0.0,
                fatal=f"engine {task.engine!r} gives no draws of site {site!r} (shape {shape})",
            )
        arr = np.asarray(post[site].values, dtype=float)
        columns.append(arr.reshape(arr.shape[0], arr.shape[1], -1))
        values.append(truth[site].double().numpy().reshape(-1))
    draws = np.concatenate(columns, axis=2)
    rng = np.random.default_rng([task.data_seed, task.run_seed])
    mcmc = "sample_stats" in run.idata.groups()
    r, ess, kept = ranks(np.concatenate(values), draws, task.num_draws, rng, mcmc=mcmc)
    return _Outcome(task.rep, True, time.perf_counter() - start, r, ess, kept)


# --------------------------------------------------------------------------- replications batched
def batchable(entry: ModelEntry, engine: str, options: Mapping[str, Any]) -> bool:
    """Whether the replications can run as the chains of one sampler: the zoo's own ``nuts``
    (each chain adapts its step size and mass matrix alone, so a chain's posterior, given its
    own data set, is all it sees)."""
    spec = entry.engine_spec(engine)
    opts = {**spec.defaults, **entry.registered_options(engine), **options}
    return spec.fn is mcmc.nuts_engine and opts.get("backend") == "zoo"


def _run_batched(
    entry: ModelEntry, tasks: Sequence[_Task], workers: int, progress: bool | str
) -> list[_Outcome]:
    """Every replication at once: each simulated data set becomes ``num_chains`` chains of one
    batched log density (:class:`~inference.density.BatchedDensity`'s per-chain data), one
    sampler advances them all (in ``workers`` forked groups), and each replication's chains are
    ranked as its own run. The sampler's seed comes from the SBC's seed; the ranks' tie-breaking
    from each replication's seeds, as in the one-by-one path."""
    start = time.perf_counter()
    first = tasks[0]
    outcomes: dict[int, _Outcome] = {}
    sims: dict[int, tuple[api.Prepared, dict[str, torch.Tensor]]] = {}
    for task in tasks:
        data, truth = simulate(entry, task.data_seed)
        try:
            checked = api.prepare(
                entry, task.engine, data=data, seed=task.run_seed, progress=False, **task.options
            )
        except ZooError as e:
            reason = f"simulated data rejected: {e}"
            outcomes[task.rep] = _Outcome(task.rep, False, 0.0, reason=reason)
            continue
        sims[task.rep] = (checked, truth)
    kept = [t for t in tasks if t.rep in sims]
    if kept:
        # every replication has the same engine options, defaults filled in by api.prepare
        opts = sims[kept[0].rep][0].options
        chains = int(opts["num_chains"] or mcmc.LOCKSTEP_CHAINS)
        datasets = [sims[t.rep][0].data for t in kept]
        template = datasets[0]
        varying = [
            k
            for k, v in template.items()
            if isinstance(v, torch.Tensor) and any(not torch.equal(v, d[k]) for d in datasets[1:])
        ]
        batch = {
            k: torch.stack([d[k] for d in datasets]).repeat_interleave(chains, 0) for k in varying
        }
        seed = int(np.random.SeedSequence([first.run_seed, len(tasks)]).generate_state(1)[0])
        ctx = EngineContext(
            entry.name, entry.model, entry.guide, template, entry.structure, seed,
            progress is True and workers == 1,
        )  # fmt: skip
        if progress == "lines":
            print(
                f"{entry.name}/{first.engine}: {len(kept)} replications as {len(kept)} x "
                f"{chains} chains of one batched sampler",
                file=sys.stderr,
                flush=True,
            )
        with seeded(seed), threads(1), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            sampled = mcmc.sample_chains(
                ctx,
                samplers.nuts,
                num_samples=opts["num_samples"],
                warmup=opts["warmup"],
                num_chains=chains * len(kept),
                jit=opts["jit"],
                parallel=bool(opts["parallel"]) and workers > 1,
                device=opts["device"],
                batch=batch,
                target_accept=opts["target_accept"],
                max_tree_depth=opts["max_tree_depth"],
            )
        each = (time.perf_counter() - start) / len(kept)
        for i, task in enumerate(kept):
            rows = slice(i * chains, (i + 1) * chains)
            diverging = sampled.stats["diverging"][rows].astype(bool)
            if why := mcmc.failed_chains(sampled.theta[rows], diverging):
                outcomes[task.rep] = _Outcome(task.rep, False, each, reason=why)
                continue
            run = make_run(
                task.engine,
                {k: v[rows] for k, v in sampled.posterior.items()},
                mcmc=True,
                sample_stats={"diverging": diverging},
            )
            outcome = _ranked(task, run, sims[task.rep][1], time.perf_counter())
            outcome.wall_time_s = each
            outcomes[task.rep] = outcome
    return [outcomes[t.rep] for t in tasks]


# --------------------------------------------------------------------------- the result
@dataclass
class SBCResult:
    """Ranks of the true values over the replications that finished, and their uniformity.

    ``ranks`` is ``(replications, parameters)`` on ``0..num_draws``, rows in ``rep_ids`` order,
    columns named by ``params`` (``"theta[3]"``, as in ``Run.summary``); ``ess`` the effective
    sizes the draws were thinned by (NaN: independent draws), ``kept`` how many draws were left
    to rank among; ``failures`` the replications that failed and why. The test is Pearson's
    chi-square on the ranks in ``bins`` equal bins, per parameter; the verdict is Bonferroni's:
    ``miscalibrated`` when a p-value is below ``alpha / len(params)``.
    """

    model: str
    engine: str
    options: dict[str, Any]
    seed: int
    reps: int
    num_draws: int
    alpha: float
    params: tuple[str, ...]
    rep_ids: np.ndarray
    ranks: np.ndarray
    ess: np.ndarray
    kept: np.ndarray
    wall_time_s: np.ndarray
    failures: dict[int, str] = field(default_factory=dict)
    bins: int | None = None
    total_time_s: float = float("nan")
    statistic: np.ndarray = field(init=False, repr=False)
    p_values: np.ndarray = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.statistic, self.p_values, self.bins = uniformity(self.ranks, self.num_draws, self.bins)

    @property
    def threshold(self) -> float:
        """The per-parameter level: ``alpha`` over the number of parameters (Bonferroni)."""
        return self.alpha / max(1, len(self.params))

    @property
    def verdict(self) -> str:
        """``calibrated``, ``miscalibrated``, or ``failed`` (no replication finished)."""
        if len(self.rep_ids) == 0:
            return "failed"
        return "miscalibrated" if bool(np.any(self.p_values < self.threshold)) else "calibrated"

    @property
    def calibrated(self) -> bool:
        return self.verdict == "calibrated"

    @property
    def table(self) -> pd.DataFrame:
        """Per parameter: the test's p-value and statistic, the normalised ranks' mean and sd
        (0.5 and 0.289 when uniform), the shape they suggest and whether it is flagged."""
        u = normalised(self.ranks, self.num_draws)
        n = len(self.rep_ids)
        mean = u.mean(axis=0) if n else np.full(len(self.params), np.nan)
        sd = u.std(axis=0, ddof=1) if n > 1 else np.full(len(self.params), np.nan)
        with np.errstate(invalid="ignore"):
            min_kept = self.kept.min(axis=0) if n else np.full(len(self.params), np.nan)
        frame = pd.DataFrame(
            {
                "p_value": self.p_values,
                "chi2": self.statistic,
                "rank_mean": mean,
                "rank_sd": sd,
                "shape": [_shape(m, s, n) for m, s in zip(mean, sd, strict=True)],
                "flagged": self.p_values < self.threshold,
                "min_draws_kept": min_kept,
            },
            index=pd.Index(self.params, name="parameter"),
        )
        return frame

    def findings(self) -> list[str]:
        """Plain-language lines: the verdict and what the flagged parameters' ranks suggest."""
        n, p = len(self.rep_ids), len(self.params)
        lines = [
            f"{self.engine} on {self.model}: {self.verdict} ({n} of {self.reps} replications, "
            f"{p} parameter{'s' if p != 1 else ''}; chi-square on {self.bins} rank bins, "
            f"Bonferroni level {self.alpha:g}/{p} = {self.threshold:.3g})."
        ]
        table = self.table
        flagged = table[table["flagged"]].sort_values("p_value")
        for row, t in flagged.head(8).iterrows():
            lines.append(f"{row}: p = {t['p_value']:.2g}, {t['shape']}.")
        if len(flagged) > 8:
            lines.append(f"... and {len(flagged) - 8} more flagged parameters.")
        if self.failures:
            first = next(iter(self.failures.values()))
            lines.append(
                f"{len(self.failures)} replication(s) failed and are left out (first: {first}); "
                "failures that depend on the simulated parameters bias the ranks."
            )
        short = int(np.sum(self.kept < self.num_draws)) if n else 0
        if short:
            lines.append(
                f"{short} rank(s) came from fewer than {self.num_draws} near-independent draws "
                "(an ESS below it): spread onto the rank scale, valid but coarser; more draws "
                "would sharpen the test."
            )
        return lines

    def ranks_frame(self) -> pd.DataFrame:
        """The ranks as a table: a column ``rep`` and one column per parameter."""
        frame = pd.DataFrame(self.ranks, columns=list(self.params))
        frame.insert(0, "rep", np.asarray(self.rep_ids, dtype=int))
        return frame

    def shown_params(self, limit: int = MAX_PANELS) -> list[int]:
        """Column indices of the parameters drawn: all, or the ``limit`` smallest p-values."""
        order = np.argsort(np.nan_to_num(self.p_values, nan=1.0), kind="stable")
        return sorted(int(j) for j in order[:limit])

    def figures(self, limit: int = MAX_PANELS) -> list[FigureImage]:
        """ECDF-difference plots with simultaneous 95% bands and rank histograms, one panel per
        parameter (up to ``limit``: those with the smallest p-values)."""
        if len(self.rep_ids) == 0:
            return []
        shown = self.shown_params(limit)
        some = (
            ""
            if len(shown) == len(self.params)
            else f" The {len(shown)} of {len(self.params)} parameters with the smallest p-values."
        )
        return [
            FigureImage(
                "ecdf",
                "Rank ECDF minus uniform CDF",
                "The ECDF of the normalised ranks minus the uniform CDF (line) and the "
                "simultaneous 95% band of a uniform ECDF (shaded; ArviZ's optimised band). A "
                "curve leaving the band is miscalibration: a rise then a fall (ranks in the "
                "middle) is a posterior too wide, a fall then a rise (ranks at both ends) one "
                "too narrow, a curve on one side a biased one." + some,
                to_base64_png(self._ecdf_figure(shown)),
            ),
            FigureImage(
                "ranks",
                "Rank histograms",
                f"Ranks in {self.bins} bins; the line is the expected count under uniformity and "
                "the dashed lines its 99% binomial range per bin." + some,
                to_base64_png(self._histogram_figure(shown)),
            ),
        ]

    def _grid(self, n: int) -> tuple[Figure, list[Any]]:
        cols = min(4, n)
        rows = math.ceil(n / cols)
        fig = Figure(figsize=(3.1 * cols, 2.4 * rows), layout="constrained")
        axes = fig.subplots(rows, cols, squeeze=False).ravel().tolist()
        for ax in axes[n:]:
            ax.set_visible(False)
        return fig, axes[:n]

    def _ecdf_figure(self, shown: Sequence[int]) -> Figure:
        fig, axes = self._grid(len(shown))
        for ax, j in zip(axes, shown, strict=True):
            e = ecdf_difference(self.ranks[:, j], self.num_draws)
            ax.fill_between(e["z"], e["lower"], e["upper"], color="#d9dee3", lw=0)
            ax.step(e["z"], e["difference"], where="mid", color="#1f77b4", lw=1.3)
            ax.axhline(0.0, color="#5b6570", lw=0.7)
            ax.set_xlim(0, 1)
            ax.set_title(f"{self.params[j]}  (p = {self.p_values[j]:.2g})", fontsize=9)
            ax.tick_params(labelsize=7)
        axes[0].set_ylabel("ECDF − uniform", fontsize=8)
        return fig

    def _histogram_figure(self, shown: Sequence[int]) -> Figure:
        fig, axes = self._grid(len(shown))
        edges = bin_edges(self.num_draws, int(self.bins))
        n = len(self.rep_ids)
        counts, probs = binned(self.ranks, self.num_draws, int(self.bins))
        lo, hi = stats.binom.interval(0.99, n, probs)
        for ax, j in zip(axes, shown, strict=True):
            ax.stairs(counts[j], edges, fill=True, color="#1f77b4", alpha=0.75)
            ax.stairs(probs * n, edges, color="#5b6570", lw=0.9)
            for bound in (lo, hi):
                ax.stairs(bound, edges, color="#5b6570", lw=0.7, ls="--")
            ax.set_xlim(0, self.num_draws + 1)
            ax.set_title(f"{self.params[j]}", fontsize=9)
            ax.tick_params(labelsize=7)
        axes[0].set_ylabel("replications", fontsize=8)
        return fig

    # ------------------------------------------------------------------- files
    @property
    def stem(self) -> str:
        return f"{PAGE_PREFIX}{self.model}-{self.engine}"

    def record(self) -> dict[str, Any]:
        """Everything the result says, as plain data (the page's JSON)."""
        table = self.table.reset_index()
        return {
            "model": self.model,
            "engine": self.engine,
            "verdict": self.verdict,
            "options": self.options,
            "seed": self.seed,
            "reps": self.reps,
            "reps_ok": len(self.rep_ids),
            "num_draws": self.num_draws,
            "bins": self.bins,
            "alpha": self.alpha,
            "threshold": self.threshold,
            "test": "Pearson chi-square of the ranks in equal bins, per parameter; Bonferroni",
            "min_p_value": float(np.nanmin(self.p_values)) if len(self.rep_ids) else None,
            "total_time_s": self.total_time_s,
            "mean_rep_time_s": float(np.mean(self.wall_time_s)) if len(self.rep_ids) else None,
            "findings": self.findings(),
            "parameters": table.to_dict(orient="records"),
            "failures": {str(k): v for k, v in self.failures.items()},
            "rep_ids": self.rep_ids,
            "ranks": self.ranks,
            "ess": self.ess,
            "draws_kept": self.kept,
            "rep_time_s": self.wall_time_s,
            "page": f"{self.stem}.html",
        }

    def page(self, *, generated: str | None = None) -> dict[str, str]:
        """The result's files: ``sbc-MODEL-ENGINE.html``, ``.md``, ``.json`` (everything) and
        ``.csv`` (the ranks), as ``{filename: text}``."""
        generated = generated or now_utc()
        record = {**self.record(), "generated": generated, "versions": versions()}
        ctx = _context([record], details=[self._details()], generated=generated)
        return {
            f"{self.stem}.html": render("sbc.html.j2", **ctx),
            f"{self.stem}.md": render("sbc.md.j2", **ctx),
            f"{self.stem}.json": dumps(record),
            f"{self.stem}.csv": to_csv(self.ranks_frame()),
        }

    def _details(self) -> dict[str, Any]:
        table = self.table
        shown = table.sort_values("p_value").head(40)
        return {
            "stem": self.stem,
            "rows": [{"name": str(k), **v} for k, v in shown.to_dict(orient="index").items()],
            "more_rows": max(0, len(table) - len(shown)),
            "figures": self.figures(),
        }

    def write(self, out: str | Path) -> Path:
        """Write the result's page and files into ``out`` and refresh its SBC index
        (``sbc.html``, ``sbc.md``: every SBC result in ``out``); return the page's path."""
        out = check_writable(out)
        with locked(out):
            write_pages(out, [self])
        return out / f"{self.stem}.html"

    def __repr__(self) -> str:
        n = len(self.rep_ids)
        low = f", min p {np.nanmin(self.p_values):.2g}" if n else ""
        return (
            f"SBCResult({self.model!r}, {self.engine!r}, {self.verdict}, {n}/{self.reps} reps{low})"
        )


def _shape(mean: float, sd: float, n: int) -> str:
    """What the normalised ranks' mean and sd suggest, in words."""
    if n < 2 or not np.isfinite(sd):
        return "too few replications"
    se_mean = UNIFORM_SD / math.sqrt(n)
    se_sd = math.sqrt(1.0 / 60.0 / n)  # sd of the sample sd of n uniform draws (delta method)
    words = []
    if sd > UNIFORM_SD + 3 * se_sd:
        words.append("∪-shaped ranks: posterior too narrow (overconfident)")
    elif sd < UNIFORM_SD - 3 * se_sd:
        words.append("∩-shaped ranks: posterior too wide (underconfident)")
    if mean > 0.5 + 3 * se_mean:
        words.append("high ranks: posterior biased low")
    elif mean < 0.5 - 3 * se_mean:
        words.append("low ranks: posterior biased high")
    return "; ".join(words) or "no clear shape"


def _context(
    records: Sequence[Mapping[str, Any]],
    *,
    details: Sequence[Mapping[str, Any]] | None,
    generated: str,
) -> dict[str, Any]:
    first = records[0]
    return {
        "records": list(records),
        "details": list(details) if details is not None else None,
        "single": details is not None and len(records) == 1,
        "generated": generated,
        "profile": "sbc",
        "seed": first["seed"] if len({r["seed"] for r in records}) == 1 else "various",
        "versions": versions(),
    }


def write_pages(out: Path, results: Sequence[SBCResult]) -> None:
    """Every result's files, and the index of every SBC result in ``out`` (earlier ones kept),
    written atomically."""
    generated = now_utc()
    files: dict[str, str] = {}
    fresh = {}
    for res in results:
        files.update(res.page(generated=generated))
        fresh[res.stem] = json.loads(files[f"{res.stem}.json"])
    records = dict(fresh)
    for path in sorted(out.glob(f"{PAGE_PREFIX}*.json")):
        if path.stem in records:
            continue
        try:
            rec = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if isinstance(rec, dict) and {"model", "engine", "verdict", "page"} <= set(rec):
            records[path.stem] = rec
    ordered = [records[k] for k in sorted(records)]
    ctx = _context(ordered, details=None, generated=generated)
    files["sbc.html"] = render("sbc.html.j2", **ctx)
    files["sbc.md"] = render("sbc.md.j2", **ctx)
    write_atomically(out, files, last=("sbc.html", "sbc.md"))


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
        _Task(entry.name, engine, opts, r, *_seeds(seed, r), draws, sites, transform)
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
    tasks: Sequence[_Task],
    workers: int,
    scheduler: str | None,
    progress: bool | str,
    batch: bool = False,
) -> list[_Outcome]:
    """Every replication's outcome, in order: all at once as chains of one sampler (``batch``),
    or the first in this process (it proves the model simulates and the engine gives draws
    before workers start) and the rest on the executor."""
    label = f"sbc {entry.name}/{tasks[0].engine}"
    bar = tqdm(total=len(tasks), desc=label, unit="rep", disable=progress is not True)
    outcomes: dict[int, _Outcome] = {}

    def done(o: _Outcome) -> None:
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


def _collect(fut: Any, task: _Task) -> _Outcome:
    try:
        return fut.result()
    except ZooError:
        raise
    except Exception as e:  # noqa: BLE001 - a worker that died: a failed replication
        return _Outcome(task.rep, False, float("nan"), reason=one_line(e))


def scaled(run: Run, factor: float) -> Run:
    """``run`` with every posterior draw moved ``factor`` times as far from its site's mean
    (per element, over all chains): a posterior ``factor`` times as wide. For demonstrating SBC
    (and testing it): ``factor=2`` inflates the variance, ``0.5`` halves a guide's scale."""
    if run.idata is None:
        return run
    idata = run.idata.copy()
    post = idata.posterior
    for name in list(post.data_vars):
        mean = post[name].mean(dim=("chain", "draw"))
        post[name] = mean + factor * (post[name] - mean)
    return dataclasses.replace(run, idata=idata)


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
