"""Markov chain Monte Carlo engines: NUTS, ChEES-HMC, fixed-length HMC and random-walk
Metropolis–Hastings on the model's batched log density (:mod:`inference.density`), all chains of
a group advanced together (:mod:`inference.samplers`, whose driver lays the chains out in
groups, each seeded from the run's seed and its index, in parallel worker processes when the
machine has the cores); discrete sites are summed out of the target and recovered afterwards,
and the draws packaged as a Run. Pyro's own NUTS stays reachable (``backend="pyro"``) as the
independent check.

Every sampler engine here can run to a target instead of a fixed number of draws: ``ess=400``
warms up once, then draws in blocks until every continuous parameter has a bulk ESS of 400 and
an R-hat of at most 1.01, or the chains hold ``max_draws`` draws each (default ten times the
engine's ``num_samples``; given no ``num_samples``, the first block is short and the chains
at most 8: :func:`~inference.samplers.driver.target_sizes`); the Run's diagnostics say how
many draws it took (``draws_per_chain``, ``blocks``) and why it stopped (``stopped``), and a
run stopped by the limit warns. With ``init="pathfinder"`` the chains start from draws of a
Pathfinder run (:mod:`inference.pathfinder`)
instead of Uniform(-2, 2) on the unconstrained space."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import pyro
import torch
from pyro.infer import MCMC, NUTS

from . import samplers
from .arviz_io import make_run, mcmc_convergence
from .context import EngineContext
from .discrete import enumerated
from .parallel import can_fork, cores, map_indices
from .posterior import complete
from .results import NumericalFailure, Run, ZooError
from .runtime import device_of
from .samplers import Samples
from .samplers.driver import chain_seed, sample_chains
from .samplers.metric import check_metric
from .structure import init_strategy

# Chains in lockstep share each step's Python work and compiled call: 32 cost little more time
# than 4, for 8x the effective draws (benchmarks/results/compare_peers.md)
LOCKSTEP_CHAINS = 32
MAMS_TUNINGS = {"default": samplers.mams, "laps": samplers.mams_laps}  # mams's warmups
SUPERCHAIN = 4  # ChEES: chains started together, for nested R-hat
CHEES_GROUP = 16  # ChEES and MAMS adapt on the chains together: no group smaller than this


@dataclass
class Chain:
    samples: dict[str, np.ndarray]  # site -> (draw, *shape)
    diverging: np.ndarray  # (draw,) bool
    accept: float


def run_chain(
    ctx: EngineContext,
    make_kernel: Callable[[Callable[..., Any]], Any],
    chain: int,
    num_samples: int,
    warmup: int,
) -> Chain:
    """One chain, seeded from the run's seed and its index."""
    pyro.set_rng_seed(chain_seed(ctx.seed, chain))
    model = enumerated(ctx.model) if ctx.structure.discrete else ctx.model
    mcmc = MCMC(
        make_kernel(model),
        num_samples=num_samples,
        warmup_steps=warmup,
        num_chains=1,
        disable_progbar=not ctx.progress,
    )
    mcmc.run(**ctx.data)
    diag = mcmc.diagnostics()
    diverging = np.zeros(num_samples, dtype=bool)
    idx = [i for i in diag.get("divergences", {}).get("chain 0", []) if 0 <= i < num_samples]
    diverging[idx] = True
    samples = {n: v.detach().numpy() for n, v in mcmc.get_samples().items()}
    return Chain(samples, diverging, float(diag["acceptance rate"]["chain 0"]))


def mcmc_run(
    ctx: EngineContext,
    engine: str,
    make_kernel: Callable[[Callable[..., Any]], Any],
    *,
    num_samples: int,
    warmup: int,
    num_chains: int,
    parallel: bool = True,
) -> Run:
    """Run ``num_chains`` chains (each seeded from the run's seed and its index, in parallel
    worker processes when the machine has the cores: the same numbers either way) and package
    them: R-hat and ESS over chains, divergences, discrete and deterministic sites, pointwise
    log-likelihood."""
    s = ctx.structure
    workers = cores() if parallel else 1

    def one(c: int) -> Chain:
        return run_chain(
            ctx if workers == 1 else replace(ctx, progress=False),
            make_kernel,
            c,
            num_samples,
            warmup,
        )

    chains = map_indices(one, num_chains, workers)
    diverging = np.stack([c.diverging for c in chains])
    if diverging.all():
        raise NumericalFailure("every transition diverged")
    posterior = {n: np.stack([c.samples[n] for c in chains]) for n in chains[0].samples}
    # the recovery of discrete sites draws too: from its own stream, wherever the chains ran
    pyro.set_rng_seed(chain_seed(ctx.seed, num_chains))
    posterior, log_lik, omitted = complete(ctx, posterior, recover=s.discrete)
    diagnostics: dict[str, Any] = {
        "divergences": int(diverging.sum()),
        "acceptance_rate": [c.accept for c in chains],
        "num_chains": num_chains,
        "num_samples": num_samples,
        "warmup": warmup,
        "chains_in_parallel": workers > 1 and num_chains > 1 and can_fork(),
    }
    if omitted:
        diagnostics["omitted"] = omitted
    run = make_run(
        engine,
        posterior,
        mcmc=True,
        log_likelihood=log_lik,
        sample_stats={"diverging": diverging},
        observed_data=ctx.data,
        diagnostics=diagnostics,
    )
    continuous = [n for n in posterior if n in s.continuous]
    run.diagnostics.update(mcmc_convergence(run.idata.posterior[continuous]))
    return run


# --------------------------------------------------------------------- the batched samplers


def failed_chains(theta: torch.Tensor | np.ndarray, diverging: np.ndarray) -> str | None:
    """Why a run's chains give no posterior ("every transition diverged", "NaN draws"), or None."""
    if diverging.all():
        return "every transition diverged"
    return None if np.isfinite(np.asarray(theta)).all() else "NaN draws"


def grouped_run(
    ctx: EngineContext,
    engine: str,
    sampler: Callable[..., Samples],
    *,
    num_samples: int,
    warmup: int,
    num_chains: int,
    superchain: int = 1,
    **options: Any,
) -> Run:
    """:func:`sample_chains` (``options`` go to it), packaged as a Run: R-hat and ESS over the
    chains, divergences, discrete and deterministic sites recovered, pointwise log-likelihood."""
    s = ctx.structure
    sampled = sample_chains(
        ctx, sampler, num_samples=num_samples, warmup=warmup, num_chains=num_chains,
        superchain=superchain, **options,
    )  # fmt: skip
    posterior, stats, parts = sampled.posterior, sampled.stats, sampled.parts
    groups, workers = sampled.groups, sampled.workers
    if sampled.stopping:  # a run to an ESS target: the draws it took
        num_samples = sampled.stopping["draws_per_chain"]
    diverging = stats.pop("diverging").astype(bool)
    if why := failed_chains(sampled.theta, diverging):
        raise NumericalFailure(why)
    pyro.set_rng_seed(chain_seed(ctx.seed, num_chains))
    posterior, log_lik, omitted = complete(ctx, posterior, recover=s.discrete)
    sample_stats = {"diverging": diverging}
    sample_stats.update({"acceptance_rate" if k == "accept" else k: v for k, v in stats.items()})
    diagnostics: dict[str, Any] = {
        "divergences": int(diverging.sum()),
        "num_chains": num_chains,
        "num_samples": num_samples,
        "warmup": warmup,
        "gradient_evals": int(sum(p.gradient_evals for p in parts)),
        "chain_groups": groups,
        "chains_in_parallel": workers > 1 and can_fork(),
    }
    if "accept" in stats:
        diagnostics["acceptance_rate"] = [float(a) for a in stats["accept"].mean(1)]
    for key in parts[0].info:
        values = [p.info[key] for p in parts]  # per chain (lists: joined) or per group
        if key == "compile_s":  # wall seconds: groups side by side overlap, one after another
            # add up (those share a density and its compiled step: the first compiles)
            together = diagnostics["chains_in_parallel"]
            diagnostics[key] = round(max(values) if together else sum(values), 3)
        elif all(isinstance(v, list) for v in values):
            diagnostics[key] = [x for v in values for x in v]
        elif all(v == values[0] for v in values):
            diagnostics[key] = values[0]
        else:
            diagnostics[key] = values[0] if len(values) == 1 else values
    if omitted:
        diagnostics["omitted"] = omitted
    diagnostics.update(sampled.stopping or {})
    run = make_run(
        engine,
        posterior,
        mcmc=True,
        log_likelihood=log_lik,
        sample_stats=sample_stats,
        observed_data=ctx.data,
        diagnostics=diagnostics,
    )
    continuous = [n for n in posterior if n in s.continuous]
    run.diagnostics.update(mcmc_convergence(run.idata.posterior[continuous]))
    if superchain > 1 and num_chains >= 2 * superchain:
        run.diagnostics["max_nested_r_hat"] = max_nested_rhat(
            {k: posterior[k] for k in continuous}, superchain
        )
    if sampled.stopping and not sampled.stopping["stopped"].startswith("target"):
        warnings.warn(
            f"{engine} stopped at its {sampled.stopping['stopped']} short of ess="
            f"{sampled.stopping['ess_target']:g}: least bulk ESS "
            f"{run.diagnostics.get('min_ess_bulk', float('nan')):.0f}, largest R-hat "
            f"{run.diagnostics.get('max_r_hat', float('nan')):.3f} (raise max_draws, or see the "
            "traces: a multimodal or stuck posterior may never get there)",
            RuntimeWarning,
            stacklevel=2,
        )
    return run


def max_nested_rhat(posterior: dict[str, np.ndarray], superchain: int) -> float:
    """Nested R-hat (Margossian et al. 2022) over every scalar: chains in consecutive groups of
    ``superchain`` (started at one point); sqrt(1 + B/W) with B the variance between superchain
    means and W the mean over superchains of the variance of their chain means plus the mean
    within-chain variance."""
    worst = 1.0
    for x in posterior.values():
        chains, draws = x.shape[:2]
        k = chains // superchain
        x = x[: k * superchain].reshape((k, superchain, draws, -1))
        chain_means = x.mean(2)  # (k, m, p)
        super_means = chain_means.mean(1)  # (k, p)
        between = super_means.var(0, ddof=1)
        within_chain = x.var(2, ddof=1).mean(1) if draws > 1 else 0.0
        within = (chain_means.var(1, ddof=1) + within_chain).mean(0)
        with np.errstate(divide="ignore", invalid="ignore"):
            r = np.sqrt(1 + between / within)
        if np.isfinite(r).any():
            worst = max(worst, float(np.nanmax(r)))
    return worst


# ----------------------------------------------------------------------------------- engines


def _check_metric(metric: str | None, dense_mass: bool | None, default: bool | None) -> None:
    """:func:`~inference.samplers.metric.check_metric`, before any work, as the run's error."""
    try:
        check_metric(metric, dense_mass, default)
    except ValueError as e:
        raise ZooError(str(e)) from None


def nuts_engine(
    ctx: EngineContext,
    *,
    num_samples: int = 500,
    warmup: int = 500,
    num_chains: int | None = None,
    jit: bool | None = None,
    target_accept: float = 0.8,
    max_tree_depth: int = 10,
    dense_mass: bool | None = False,
    metric: str | None = None,
    backend: str = "zoo",
    parallel: bool = True,
    device: str = "cpu",
    chain_groups: int | None = None,
    ess: float | None = None,
    max_draws: int | None = None,
    init: str | None = None,
) -> Run:
    """No-U-Turn sampler (Hoffman & Gelman 2014): trajectories end where they turn back. The
    zoo's sampler runs the chains in lockstep on the compiled batched density; ``backend=
    "pyro"`` runs Pyro's own NUTS (one chain per process), the independent check.
    ``num_chains``: 32 in lockstep; with Pyro's NUTS one per core. ``device``: where the zoo's
    chains run (``"cuda"``: every chain in one batch on the GPU). ``chain_groups``: the batches
    the chains run in (None: one per core, side by side; 1: one batch, fewest steps, where the
    cores are busy anyway, as in a report). The layout fixes the numbers, not the cores.
    ``dense_mass``: each chain's full-covariance metric, for correlated posteriors (Stan's
    ``dense_e``; default diagonal, Stan's ``diag_e``; ``None``: dense up to 100 dimensions;
    Pyro's NUTS: its ``full_mass``). ``metric``: ``"diag"``, ``"dense"`` or ``"low_rank"``
    (nutpie's low-rank-plus-diagonal adaptation); None: as ``dense_mass`` says."""
    _check_metric(metric, dense_mass, False)
    if backend == "pyro":
        if metric == "low_rank":
            raise ZooError("metric='low_rank' applies to the zoo's samplers (backend='zoo')")
        dense_mass = dense_mass if metric is None else metric == "dense"
        if ess is not None or max_draws is not None or init is not None:
            raise ZooError("ess, max_draws and init apply to the zoo's samplers (backend='zoo')")
        if chain_groups is not None and chain_groups > 1:
            raise ZooError(
                "chain_groups applies to the zoo's samplers; Pyro's NUTS runs a chain a process"
            )
        if device_of(device).type != "cpu":
            raise ZooError("device applies to the zoo's samplers (backend='zoo'), not Pyro's NUTS")
        num_chains = num_chains or cores()
        return pyro_nuts(
            ctx,
            num_samples=num_samples,
            warmup=warmup,
            num_chains=num_chains,
            jit=bool(jit),
            target_accept=target_accept,
            max_tree_depth=max_tree_depth,
            full_mass=bool(dense_mass),
            parallel=parallel,
        )
    return grouped_run(
        ctx,
        "nuts",
        samplers.nuts,
        num_samples=num_samples,
        warmup=warmup,
        num_chains=num_chains or LOCKSTEP_CHAINS,
        jit=jit,
        parallel=parallel,
        device=device,
        chain_groups=chain_groups,
        ess=ess,
        max_draws=max_draws,
        init=init,
        target_accept=target_accept,
        max_tree_depth=max_tree_depth,
        dense_mass=dense_mass,
        metric=metric,
    )


def chees_engine(
    ctx: EngineContext,
    *,
    num_samples: int = 1000,
    warmup: int = 300,
    num_chains: int = 32,
    jit: bool | None = None,
    target_accept: float = 0.651,
    max_steps: int = 1000,
    dense_mass: bool | None = None,
    metric: str | None = None,
    criterion: str = "chees",
    parallel: bool = True,
    device: str = "cpu",
    chain_groups: int | None = None,
    ess: float | None = None,
    max_draws: int | None = None,
    init: str | None = None,
) -> Run:
    """ChEES-HMC (Hoffman, Radul & Sountsov 2021): many chains sharing one step size and one
    jittered trajectory length, both adapted in a short warmup; nested R-hat over superchains of
    four chains started together. ``dense_mass``: a full-covariance metric (``None``: dense up to
    100 dimensions, diagonal above). ``metric``: ``"diag"``, ``"dense"`` or ``"low_rank"``
    (nutpie's low-rank-plus-diagonal adaptation, pooled over the chains); None: as
    ``dense_mass`` says. ``criterion``: what the trajectory length's adaptation maximises,
    ``"chees"`` (the ChEES criterion, as TFP's GradientBasedTrajectoryLengthAdaptation) or
    ``"chees_per_grad"``: ChEES per gradient, E[ChEES / (2 u T + h / 2)] (the same authors'
    fun_mc library, ``chees_per_grad_criterion`` in tensorflow/probability
    spinoffs/fun_mc/fun_mc/sga_hmc.py), which weighs ChEES against the leapfrog steps it
    costs and so keeps away from long trajectories that gain little."""
    _check_metric(metric, dense_mass, None)
    return grouped_run(
        ctx,
        "chees",
        samplers.chees,
        num_samples=num_samples,
        warmup=warmup,
        num_chains=num_chains,
        jit=jit,
        parallel=parallel,
        device=device,
        chain_groups=chain_groups,
        ess=ess,
        max_draws=max_draws,
        init=init,
        superchain=SUPERCHAIN,
        min_group=CHEES_GROUP,
        target_accept=target_accept,
        max_steps=max_steps,
        dense_mass=dense_mass,
        metric=metric,
        criterion=criterion,
    )


def hmc_engine(
    ctx: EngineContext,
    *,
    num_samples: int = 500,
    warmup: int = 500,
    num_chains: int = LOCKSTEP_CHAINS,
    jit: bool | None = None,
    target_accept: float = 0.8,
    trajectory_length: float = 2.0,
    max_steps: int = 100,
    parallel: bool = True,
    device: str = "cpu",
    chain_groups: int | None = None,
    ess: float | None = None,
    max_draws: int | None = None,
    init: str | None = None,
) -> Run:
    """Static Hamiltonian Monte Carlo: no U-turn check, each draw integrates for ``2 u
    trajectory_length`` (``u`` from a Halton sequence: the mean time is ``trajectory_length``,
    the jitter breaks a fixed time's periodicity), step size and mass matrix adapted in
    warmup; at most max_steps leapfrog steps a draw."""
    return grouped_run(
        ctx,
        "hmc",
        samplers.hmc,
        num_samples=num_samples,
        warmup=warmup,
        num_chains=num_chains,
        jit=jit,
        parallel=parallel,
        device=device,
        chain_groups=chain_groups,
        ess=ess,
        max_draws=max_draws,
        init=init,
        target_accept=target_accept,
        trajectory_length=trajectory_length,
        max_steps=max_steps,
    )


def mams_engine(
    ctx: EngineContext,
    *,
    num_samples: int = 1000,
    warmup: int = 500,
    num_chains: int = LOCKSTEP_CHAINS,
    jit: bool | None = None,
    target_accept: float = 0.9,
    max_steps: int = 1000,
    parallel: bool = True,
    device: str = "cpu",
    chain_groups: int | None = None,
    ess: float | None = None,
    max_draws: int | None = None,
    init: str | None = None,
    tuning: str = "default",
) -> Run:
    """MAMS, the Metropolis-adjusted microcanonical sampler (Robnik, Cohn-Gordon & Seljak
    2025): isokinetic dynamics from a fresh velocity each draw, a jittered number of steps, the
    step size, trajectory length and diagonal preconditioner shared by the chains and tuned in
    warmup as BlackJAX tunes them; at most max_steps steps a draw. ``tuning="laps"``: tuned
    instead by LAPS's ensemble warmup (:mod:`inference.samplers.laps`), ``warmup`` then
    counting gradient evaluations a chain."""
    return grouped_run(
        ctx,
        "mams",
        MAMS_TUNINGS[tuning],
        num_samples=num_samples,
        warmup=warmup,
        num_chains=num_chains,
        jit=jit,
        parallel=parallel,
        device=device,
        chain_groups=chain_groups,
        ess=ess,
        max_draws=max_draws,
        init=init,
        min_group=CHEES_GROUP,
        target_accept=target_accept,
        max_steps=max_steps,
    )


def mh_engine(
    ctx: EngineContext,
    *,
    num_samples: int = 2000,
    warmup: int = 2000,
    num_chains: int = 2,
    target_accept: float = 0.234,
    parallel: bool = True,
    device: str = "cpu",
    chain_groups: int | None = None,
    ess: float | None = None,
    max_draws: int | None = None,
    init: str | None = None,
) -> Run:
    """Random-walk Metropolis–Hastings with a diagonal proposal adapted in warmup."""
    return grouped_run(
        ctx,
        "mh",
        samplers.rwmh,
        num_samples=num_samples,
        warmup=warmup,
        num_chains=num_chains,
        jit=None,
        parallel=parallel,
        device=device,
        chain_groups=chain_groups,
        ess=ess,
        max_draws=max_draws,
        init=init,
        target_accept=target_accept,
    )


# --------------------------------------------------------------------- Pyro's NUTS, the check


def pyro_nuts(
    ctx: EngineContext,
    *,
    num_samples: int,
    warmup: int,
    num_chains: int,
    jit: bool,
    target_accept: float,
    max_tree_depth: int,
    full_mass: bool,
    parallel: bool,
) -> Run:
    """Pyro's own NUTS kernel, one chain per worker process."""

    def kernel(model: Callable[..., Any]) -> NUTS:
        return NUTS(
            model,
            max_plate_nesting=ctx.structure.max_plate_nesting,
            jit_compile=jit,
            ignore_jit_warnings=True,
            target_accept_prob=target_accept,
            max_tree_depth=max_tree_depth,
            full_mass=full_mass,
            init_strategy=init_strategy,
        )

    run = mcmc_run(
        ctx,
        "nuts",
        kernel,
        num_samples=num_samples,
        warmup=warmup,
        num_chains=num_chains,
        parallel=parallel,
    )
    run.diagnostics["backend"] = "pyro"
    return run
