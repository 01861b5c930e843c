"""Simulation-based calibration (Talts et al. 2018): simulation, ranks and verdicts.

For each replication: draw every latent site from the prior and the observations given them (a
model, on its data's shapes: :func:`simulate`), run an engine on the simulated data, and rank
each true value (each scalar element of each continuous latent site) among the posterior draws
thinned to near-independence (:func:`rank`, with the rank statistics below:
:func:`ranks`, :func:`uniformity`). A calibrated engine gives uniform ranks; a posterior too narrow
piles them at both ends, one too wide in the middle, a biased one at one end.
:class:`Calibration` holds the ranks of every replication and the verdict. Which model, engine
and options, and where replications run, is the caller's (``zoo.sbc``, :mod:`zoo.calibrate`);
the pages are :mod:`zoo_reports.sbc`'s: one module a layer.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
import pyro
import pyro.distributions as dist
import pyro.poutine as poutine
import torch
from pyro.infer.inspect import site_is_deterministic
from pyro.poutine.runtime import Message
from pyro.poutine.uncondition_messenger import UnconditionMessenger
from pyro.poutine.util import site_is_subsample
from scipy import stats

from . import mcmc, samplers
from .arviz_io import _quiet, arviz, make_run
from .context import EngineContext
from .engines import SAMPLER_DEFAULTS, EngineSpec
from .results import Run, ZooError, one_line
from .runtime import seeded
from .sites import site_infer, site_value

# --------------------------------------------------------------------------- the statistics
# Simulation-based calibration statistics (Talts et al. 2018): the rank of a true value among
# posterior draws thinned to near-independence, and a test of the ranks' uniformity.
#
# Plain numpy on arrays shaped like the Run contract's posterior, ``(chain, draw, *site_shape)``;
# nothing here runs a model or an engine (:mod:`zoo_inference.sbc` simulates, ``zoo.sbc`` runs).
#
# Ranks are on a fixed scale ``0..L`` (``L`` draws): under a calibrated engine the rank of the
# value the data were simulated from is uniform on those ``L + 1`` values. Draws of a Markov chain
# are first thinned by their effective sample size (keep about ESS of them, so the kept draws are
# near-independent); ``L`` of the kept draws are then chosen at random. Where fewer than ``L``
# remain (an ESS below ``L``), the rank ``r`` among the ``M`` kept draws is spread onto the ``0..L``
# scale as ``floor((r + V) (L + 1) / (M + 1))`` with ``V ~ U(0, 1)``, which is uniform again
# whenever ``r`` is: the test stays valid and only loses resolution.
#
# The uniformity test is Pearson's chi-square on the ranks binned into ``B`` bins, each an equal
# share (up to rounding) of the ``L + 1`` rank values, against their exact probabilities.

UNIFORM_SD = 1.0 / math.sqrt(12.0)  # sd of U(0, 1): that of a normalised rank when calibrated


def effective_sizes(draws: np.ndarray) -> np.ndarray:
    """Per scalar parameter, ``min(ess_bulk, ess_tail)`` of MCMC draws ``(chain, draw, P)``
    (ArviZ's estimators; NaN where undefined, as for a constant chain)."""
    az = arviz()
    data = az.convert_to_dataset(np.asarray(draws, dtype=float))
    with _quiet():
        bulk = np.asarray(az.ess(data, method="bulk")["x"].values, dtype=float).reshape(-1)
        tail = np.asarray(az.ess(data, method="tail")["x"].values, dtype=float).reshape(-1)
    return np.fmin(bulk, tail)


def thin(chains: np.ndarray, ess: float, rng: np.random.Generator) -> np.ndarray:
    """Draws ``(chain, draw)`` of one scalar thinned by ``ceil(total / ess)`` within each chain
    (from a random offset): about ``ess`` near-independent draws, flattened."""
    chains = np.asarray(chains, dtype=float)
    total = chains.size
    per_chain = chains.shape[1]
    if np.isfinite(ess) and ess > 0:
        stride = min(per_chain, max(1, math.ceil(total / ess)))
    else:
        stride = per_chain  # no usable ESS (a stuck chain): one draw per chain
    offset = int(rng.integers(stride))
    return chains[:, offset::stride].reshape(-1)


def rank_of(value: float, draws: np.ndarray, rng: np.random.Generator) -> int:
    """How many ``draws`` lie below ``value``, ties broken at random (0..len(draws))."""
    below = int(np.sum(draws < value))
    ties = int(np.sum(draws == value))
    return below + (int(rng.integers(ties + 1)) if ties else 0)


def rank_among(value: float, pool: np.ndarray, num_draws: int, rng: np.random.Generator) -> int:
    """The rank (0..``num_draws``) of ``value`` among ``num_draws`` draws chosen at random from
    ``pool``; from fewer draws, the rank spread uniformly onto that scale (module docstring)."""
    pool = np.asarray(pool, dtype=float)
    m = pool.size
    if m >= num_draws:
        chosen = pool[rng.choice(m, size=num_draws, replace=False)] if m > num_draws else pool
        return rank_of(value, chosen, rng)
    r = rank_of(value, pool, rng)
    u = (r + rng.random()) / (m + 1)
    return min(num_draws, int(math.floor(u * (num_draws + 1))))


def ranks(
    truth: np.ndarray,
    draws: np.ndarray,
    num_draws: int,
    rng: np.random.Generator,
    *,
    mcmc: bool,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Ranks of the true values ``truth`` ``(P,)`` among posterior ``draws`` ``(chain, draw, P)``:
    ``(ranks, ess, kept)`` per parameter. ``mcmc``: thin by the ESS first (independent draws,
    as from a variational guide or a closed form, are used as they are; their ESS is NaN)."""
    truth = np.asarray(truth, dtype=float).reshape(-1)
    draws = np.asarray(draws, dtype=float)
    p = truth.size
    ess = effective_sizes(draws) if mcmc else np.full(p, np.nan)
    out = np.zeros(p, dtype=np.int64)
    kept = np.zeros(p, dtype=np.int64)
    for j in range(p):
        pool = thin(draws[:, :, j], ess[j], rng) if mcmc else draws[:, :, j].reshape(-1)
        pool = pool[np.isfinite(pool)]
        kept[j] = pool.size
        out[j] = rank_among(truth[j], pool, num_draws, rng)
    return out, ess, kept


def default_bins(reps: int, num_draws: int) -> int:
    """Bins for the chi-square test: about 10 ranks expected in each (so its p-values hold far
    into the tail), between 2 and 20, and no more than the ``L + 1`` rank values."""
    return int(max(2, min(20, reps // 10, num_draws + 1)))


def bin_edges(num_draws: int, bins: int) -> np.ndarray:
    """Rank-value edges of ``bins`` bins over ``0..num_draws`` (each an equal share, up to
    rounding): bin ``b`` holds ranks ``edges[b] <= r < edges[b + 1]``."""
    return np.floor(np.arange(bins + 1) * (num_draws + 1) / bins).astype(np.int64)


def binned(ranks_: np.ndarray, num_draws: int, bins: int) -> tuple[np.ndarray, np.ndarray]:
    """Counts ``(P, bins)`` of ranks ``(reps, P)`` in the bins of :func:`bin_edges`, and each
    bin's probability ``(bins,)`` under uniform ranks."""
    arr = np.asarray(ranks_, dtype=np.int64)
    edges = bin_edges(num_draws, bins)
    counts = [
        np.bincount(np.searchsorted(edges, col, side="right") - 1, minlength=bins) for col in arr.T
    ]
    probs = np.diff(edges) / (num_draws + 1)
    return np.array(counts, dtype=np.int64).reshape(arr.shape[1], bins), probs


def uniformity(
    ranks_: np.ndarray, num_draws: int, bins: int | None = None
) -> tuple[np.ndarray, np.ndarray, int]:
    """Pearson's chi-square test of uniform ranks per parameter: ``(statistic, p_value, bins)``
    for ranks ``(reps, P)`` on ``0..num_draws`` (NaN where there are no ranks)."""
    arr = np.asarray(ranks_, dtype=np.int64)
    reps = arr.shape[0]
    bins = default_bins(reps, num_draws) if bins is None else int(bins)
    if reps == 0:
        nan = np.full(arr.shape[1], np.nan)
        return nan, nan.copy(), bins
    counts, probs = binned(arr, num_draws, bins)
    res = stats.chisquare(counts, f_exp=probs * reps, axis=1)
    return np.asarray(res.statistic, dtype=float), np.asarray(res.pvalue, dtype=float), bins


def normalised(ranks_: np.ndarray, num_draws: int) -> np.ndarray:
    """Ranks as points of (0, 1): ``(r + 1/2) / (L + 1)``, uniform when calibrated."""
    return (np.asarray(ranks_, dtype=float) + 0.5) / (num_draws + 1)


def ecdf_difference(
    ranks_: np.ndarray, num_draws: int, prob: float = 0.95, points: int = 100
) -> dict[str, Any]:
    """The ECDF of the ranks minus the uniform CDF at evaluation points ``z_i = i / (L + 1)``
    (where the uniform CDF of a rank, P(r < i), is exact), with ArviZ's simultaneous ``prob``
    band (``method="optimized"``, Säilynoja et al. 2022) minus the same CDF.

    Returns ``{"z", "difference", "lower", "upper"}``; ``ranks_`` is one parameter's ``(reps,)``.
    """
    ecdf_utils = arviz().stats.ecdf_utils  # through arviz(): imported quietly
    r = np.sort(np.asarray(ranks_, dtype=np.int64))
    n = r.size
    steps = np.unique(np.linspace(1, num_draws, min(points, num_draws)).round().astype(int))
    z = steps / (num_draws + 1)
    ecdf = np.searchsorted(r, steps, side="left") / max(n, 1)  # fraction with rank < step
    lower, upper = ecdf_utils.ecdf_confidence_band(n, z, z, prob=prob, method="optimized")
    return {"z": z, "difference": ecdf - z, "lower": lower - z, "upper": upper - z}


PAGE_PREFIX = "sbc-"
Transform = Callable[[Run], Run]


# --------------------------------------------------------------------------- simulation
def simulate(
    model: Callable[..., Any],
    template: Mapping[str, Any],
    seed: int,
    *,
    name: str,
    continuous: Sequence[str],
) -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
    """One draw from the model's joint prior on the shapes of its data ``template``:
    ``(data, truth)``, ``data`` the model's keyword arguments with every observation replaced by
    its draw, ``truth`` the values of the ``continuous`` latent sites. An observation may be a
    data argument or a view of one (``obs=x[t]``, ``obs=x.reshape(...)``). Raises
    :class:`ZooError` for a model (``name``) whose prior cannot be sampled or whose observations
    cannot be written back into its data."""
    template = {
        k: v.detach().clone().contiguous() if isinstance(v, torch.Tensor) else v
        for k, v in template.items()
    }
    with seeded(seed), torch.no_grad(), pyro.validation_enabled(False):
        try:
            free = poutine.trace(_Uncondition()(model)).get_trace(**template)
            given = poutine.trace(model).get_trace(**template)
        except Exception as e:  # noqa: BLE001 - the user's model: name it and the problem
            raise ZooError(
                f"cannot simulate from model {name!r}: its prior predictive raised {one_line(e)}"
            ) from None
    data = {k: v.clone() if isinstance(v, torch.Tensor) else v for k, v in template.items()}
    observed = [n for n, s in given.nodes.items() if _is_observation(s)]
    for site in observed:
        key, view = _data_view(name, site, site_value(given.nodes[site]), template, data)
        view.copy_(site_value(free.nodes[site]).to(view.dtype).expand_as(view))
    latent = {
        n: site_value(s)
        for n, s in free.nodes.items()
        if s["type"] == "sample"
        and n in given.nodes
        and n not in observed
        and not site_is_deterministic(given.nodes[n])  # type: ignore[arg-type]  # pyro: msg: dict
    }
    _check_consistent(model, name, free, latent, observed, data)
    truth = {n: latent[n].detach().clone() for n in continuous if n in latent}
    return data, truth


class _Uncondition(UnconditionMessenger):
    """Pyro's ``uncondition``, leaving ``pyro.deterministic`` sites as they are (functions of
    the latents, not observations to draw)."""

    def _pyro_sample(self, msg: Message) -> None:
        if not site_infer(msg).get("_deterministic"):
            super()._pyro_sample(msg)


def _is_observation(site: Message) -> bool:
    return (
        site["type"] == "sample"
        and site["is_observed"]
        and not site_is_subsample(site)
        and not site_is_deterministic(site)  # type: ignore[arg-type]  # pyro: msg: dict
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
    model: Callable[..., Any],
    name: str,
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
            again = poutine.trace(poutine.condition(model, data=dict(latent))).get_trace(**data)
            lp_free = float(free.log_prob_sum())
            lp_again = float(again.log_prob_sum())
        except Exception as e:  # noqa: BLE001 - the user's model
            raise ZooError(
                f"cannot simulate data for model {name!r}: it raised {one_line(e)} on its "
                "own simulated data"
            ) from None
    same = all(
        n in again.nodes
        and torch.allclose(
            site_value(again.nodes[n]).double(), site_value(free.nodes[n]).double(), atol=1e-6
        )
        for n in observed
    )
    if not same or not math.isclose(lp_free, lp_again, rel_tol=1e-5, abs_tol=1e-4):
        raise ZooError(
            f"cannot simulate data for model {name!r}: run on its own simulated data it does "
            "not reproduce the simulation (does it read an observation from its data arguments "
            "where it should use the sampled value?)"
        )


# --------------------------------------------------------------------------- one replication
@dataclass(frozen=True)
class Task:
    """One replication: its model and engine (names), options, seeds, the number of draws to
    rank among and the continuous sites ranked; ``transform`` is applied to its Run first."""

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
class Outcome:
    """A replication's ranks (one per scalar parameter), or why it failed."""

    rep: int
    ok: bool
    wall_time_s: float
    ranks: np.ndarray | None = None
    ess: np.ndarray | None = None
    kept: np.ndarray | None = None
    reason: str | None = None
    fatal: str | None = None  # an error of the whole SBC (the engine gives no draws)


def seeds(seed: int, rep: int) -> tuple[int, int]:
    """Independent data and run seeds of replication ``rep``."""
    data_seed, run_seed = np.random.SeedSequence([seed, rep]).generate_state(2)
    return int(data_seed), int(run_seed)


def rank(task: Task, run: Run, truth: Mapping[str, torch.Tensor], start: float) -> Outcome:
    """The replication's outcome from its Run: the rank of each true value among the draws
    (after ``task.transform``)."""
    if task.transform is not None and run.ok:
        run = task.transform(run)
    if not run.ok:
        return Outcome(task.rep, False, time.perf_counter() - start, reason=str(run.error))
    if run.kind != "draws":
        what = "a point estimate" if run.kind == "point" else "draws conditional on fixed sites"
        fatal = (
            f"engine {task.engine!r} gives {what} of model {task.model!r}, not posterior draws: "
            "SBC ranks the true values among posterior draws"
        )
        return Outcome(task.rep, False, 0.0, fatal=fatal)
    assert run.idata is not None  # a run that did not fail has its draws
    post = run.idata.posterior  # type: ignore[attr-defined]  # arviz sets groups as attributes
    columns, values = [], []
    for site in task.sites:
        shape = tuple(truth[site].shape)
        if site not in post or tuple(post[site].shape[2:]) != shape:
            return Outcome(
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
    chains = "sample_stats" in run.idata.groups()
    r, ess, kept = ranks(np.concatenate(values), draws, task.num_draws, rng, mcmc=chains)
    return Outcome(task.rep, True, time.perf_counter() - start, r, ess, kept)


# --------------------------------------------------------------------------- replications batched
def batchable(spec: EngineSpec, options: Mapping[str, Any]) -> bool:
    """Whether replications can run as the chains of one sampler: the zoo's own ``nuts``
    (each chain adapts its step size and mass matrix alone, so a chain's posterior, given its
    own data set, is all it sees). ``options``: the engine's, defaults filled in."""
    return spec.sampler is samplers.nuts


def sample_batched(
    ctx: EngineContext,
    engine: str,
    datasets: Sequence[Mapping[str, Any]],
    options: Mapping[str, Any],
    *,
    parallel: bool,
) -> list[Run | str]:
    """One Run (or the reason it failed) per data set: each data set becomes ``num_chains``
    chains of one batched log density (per-chain data), one ``nuts`` sampler advances them all,
    seeded by ``ctx.seed``; ``ctx.data`` is the template whose other arguments every data set
    shares."""
    chains = int(options["num_chains"])
    template = datasets[0]
    varying = [
        k
        for k, v in template.items()
        if isinstance(v, torch.Tensor) and any(not torch.equal(v, d[k]) for d in datasets[1:])
    ]
    batch = {k: torch.stack([d[k] for d in datasets]).repeat_interleave(chains, 0) for k in varying}
    with seeded(ctx.seed):
        sampled = mcmc.sample_chains(
            ctx,
            samplers.nuts,
            num_samples=options["num_samples"],
            warmup=options["warmup"],
            num_chains=chains * len(datasets),
            jit=options["jit"],
            parallel=bool(options["parallel"]) and parallel,
            device=options["device"],
            batch=batch,
            **{k: v for k, v in options.items() if k not in SAMPLER_DEFAULTS},  # nuts's own
        )
    out: list[Run | str] = []
    for i in range(len(datasets)):
        rows = slice(i * chains, (i + 1) * chains)
        diverging = sampled.stats["diverging"][rows].astype(bool)
        if why := mcmc.failed_chains(sampled.theta[rows], diverging):
            out.append(why)
            continue
        out.append(
            make_run(
                engine,
                {k: v[rows] for k, v in sampled.posterior.items()},
                mcmc=True,
                sample_stats={"diverging": diverging},
            )
        )
    return out


# --------------------------------------------------------------------------- the result
@dataclass
class Calibration:
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

    def __repr__(self) -> str:
        n = len(self.rep_ids)
        low = f", min p {np.nanmin(self.p_values):.2g}" if n else ""
        what = f"{self.model!r}, {self.engine!r}, {self.verdict}, {n}/{self.reps} reps{low}"
        return f"{type(self).__name__}({what})"


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


def scaled(run: Run, factor: float) -> Run:
    """``run`` with every posterior draw moved ``factor`` times as far from its site's mean
    (per element, over all chains): a posterior ``factor`` times as wide. For demonstrating SBC
    (and testing it): ``factor=2`` inflates the variance, ``0.5`` halves a guide's scale."""
    if run.idata is None:
        return run
    idata = run.idata.copy()
    post = idata.posterior  # type: ignore[attr-defined]  # arviz sets groups as attributes
    for name in list(post.data_vars):
        mean = post[name].mean(dim=("chain", "draw"))
        post[name] = mean + factor * (post[name] - mean)
    return dataclasses.replace(run, idata=idata)
