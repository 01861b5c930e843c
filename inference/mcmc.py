"""Markov chain Monte Carlo runs: a sampler's chains on the model's batched log density
(:mod:`zoo_inference.density`), laid out in groups by the driver
(:mod:`zoo_inference.samplers.driver`: each group seeded from the run's seed and its index,
in worker processes when the machine has the cores; the nuts chains asynchronous, the
ensemble samplers' chains adapting together), packaged as a Run (:func:`grouped_run`):
discrete sites summed out of the target and recovered afterwards, R-hat and ESS, divergences,
pointwise log-likelihood. Every sampler engine, the zoo's and a user's, is
:func:`grouped_run` of a registered sampler (:func:`zoo_inference.engines.register_sampler`).
Pyro's own NUTS stays reachable as the opt-in engine ``pyro_nuts`` (:func:`pyro_nuts_engine`),
the independent check.

Every sampler engine can run to a target instead of a fixed number of draws: ``ess=400``
warms up once, then draws in blocks until every continuous parameter has a bulk ESS of 400 and
an R-hat of at most 1.01, or the chains hold ``max_draws`` draws each (default ten times the
engine's ``num_samples``; given no ``num_samples``, the first block is short and the chains
at most 8: :func:`~zoo_inference.samplers.driver.target_sizes`); the Run's diagnostics say how
many draws it took (``draws_per_chain``, ``blocks``) and why it stopped (``stopped``), and a
run stopped by the limit warns. With ``init="pathfinder"`` the chains start from draws of a
Pathfinder run (:mod:`zoo_inference.pathfinder`) instead of Uniform(-2, 2) on the unconstrained
space."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import pyro
import torch
from pyro.infer import MCMC, NUTS

from .arviz_io import make_run, mcmc_convergence
from .context import EngineContext
from .discrete import enumerated
from .parallel import can_fork, cores, map_indices
from .posterior import complete
from .results import NumericalFailure, Run
from .samplers import Samples
from .samplers.driver import chain_seed, sample_chains
from .structure import init_strategy

# Chains in lockstep share each step's Python work and compiled call: 32 cost little more time
# than 4, for 8x the effective draws (benchmarks/results/compare_peers.md)
LOCKSTEP_CHAINS = 32
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
    diagnostics: dict[str, Any] = {
        "divergences": int(diverging.sum()),
        "acceptance_rate": [c.accept for c in chains],
        "num_chains": num_chains,
        "num_samples": num_samples,
        "warmup": warmup,
        "chains_in_parallel": workers > 1 and num_chains > 1 and can_fork(),
    }
    return chains_run(ctx, engine, posterior, {"diverging": diverging}, diagnostics)


def chains_run(
    ctx: EngineContext,
    engine: str,
    draws: dict[str, np.ndarray],
    sample_stats: dict[str, Any],
    diagnostics: dict[str, Any],
) -> Run:
    """An MCMC engine's chains as a Run: ``draws`` (site -> (chain, draw, *shape)) of the sites
    it drew, completed by the model (discrete and deterministic sites, the pointwise
    log-likelihood), then R-hat and ESS over chains of the continuous sites."""
    s = ctx.structure
    posterior, log_lik, omitted = complete(ctx, draws, recover=s.discrete)
    if omitted:
        diagnostics["omitted"] = omitted
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
    assert run.idata is not None  # make_run gives a run its idata
    run.diagnostics.update(mcmc_convergence(run.idata["posterior"][continuous]))
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
    keys = dict.fromkeys(k for p in parts for k in p.info)  # a key some groups lack: None there
    for key in keys:
        values = [p.info.get(key) for p in parts]  # per chain (lists: joined) or per group
        if key == "compile_s":  # wall seconds: groups side by side overlap, one after another
            # add up (those share a density and its compiled step: the first compiles)
            together = diagnostics["chains_in_parallel"]
            seconds = [float(v) for v in values if v is not None]
            diagnostics[key] = round(max(seconds) if together else sum(seconds), 3)
        elif all(isinstance(v, list) for v in values):
            diagnostics[key] = [x for v in values if isinstance(v, list) for x in v]
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
    assert run.idata is not None  # make_run gives a run its idata
    run.diagnostics.update(mcmc_convergence(run.idata["posterior"][continuous]))
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


# --------------------------------------------------------------------- Pyro's NUTS, the check


def pyro_nuts_engine(
    ctx: EngineContext,
    *,
    num_samples: int = 500,
    warmup: int = 500,
    num_chains: int | None = None,
    jit: bool = False,
    target_accept: float = 0.8,
    max_tree_depth: int = 10,
    dense_mass: bool = False,
    parallel: bool = True,
) -> Run:
    """Pyro's own NUTS kernel (``pyro.infer.NUTS``), one chain per worker process
    (``num_chains``: one per core): the independent check of the zoo's ``nuts``. ``jit``:
    Pyro's ``jit_compile``; ``dense_mass``: its ``full_mass``."""
    num_chains = num_chains or cores()

    def kernel(model: Callable[..., Any]) -> NUTS:
        return NUTS(
            model,
            max_plate_nesting=ctx.structure.max_plate_nesting,
            jit_compile=jit,
            ignore_jit_warnings=True,
            target_accept_prob=target_accept,
            max_tree_depth=max_tree_depth,
            full_mass=dense_mass,
            init_strategy=init_strategy,
        )

    run = mcmc_run(
        ctx,
        "pyro_nuts",
        kernel,
        num_samples=num_samples,
        warmup=warmup,
        num_chains=num_chains,
        parallel=parallel,
    )
    run.diagnostics["backend"] = "pyro"
    return run
