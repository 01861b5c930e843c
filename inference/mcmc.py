"""Markov chain Monte Carlo: NUTS, fixed-length HMC and random-walk Metropolis–Hastings, with
discrete sites marginalised out of the target and recovered afterwards. Chains run in parallel
worker processes when the machine has the cores, each seeded from the run's seed and its index."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import pyro
import torch
from pyro.infer import HMC, MCMC, NUTS, RandomWalkKernel
from pyro.infer.mcmc.util import initialize_model

from .arviz_io import make_run, mcmc_convergence
from .context import EngineContext
from .discrete import enumerated
from .parallel import can_fork, cores, map_indices
from .posterior import complete
from .results import NumericalFailure, Run
from .structure import init_strategy


class CappedHMC(HMC):
    """Pyro's HMC takes trajectory_length / step_size leapfrog steps, which explodes while warmup
    tries tiny step sizes; this caps the count at ``max_steps``."""

    def __init__(self, *args: Any, max_steps: int = 100, **kwargs: Any) -> None:
        self.max_steps = max_steps
        super().__init__(*args, **kwargs)

    @property
    def num_steps(self) -> int:
        return min(self.max_steps, max(1, int(self.trajectory_length / self.step_size)))


class AdaptiveRandomWalk(RandomWalkKernel):
    """Random-walk Metropolis–Hastings on the unconstrained space (002 ch. 15): Gaussian
    proposals theta' = theta + step * scale * N(0, I), accepted with probability
    min(1, p(theta' | y) / p(theta | y)) (Jacobians of the transforms included).

    During warmup the step size follows a Robbins–Monro rule towards the target acceptance rate
    (0.234, optimal for random walks in many dimensions), and the per-coordinate ``scale`` is
    set to the posterior sd estimated from the draws of each warmup window (halves): a diagonal
    proposal adapted to the posterior's scales. Both are frozen after warmup."""

    def __init__(
        self,
        model: Callable[..., Any],
        *,
        max_plate_nesting: int,
        init_strategy: Callable[..., Any],
        init_step_size: float = 0.5,
        target_accept_prob: float = 0.234,
    ) -> None:
        super().__init__(
            model, init_step_size=init_step_size, target_accept_prob=target_accept_prob
        )
        self.max_plate_nesting = max_plate_nesting
        self.init_strategy = init_strategy

    def setup(self, warmup_steps: int, *args: Any, **kwargs: Any) -> None:
        self._warmup_steps = warmup_steps
        (
            self._initial_params,
            self.potential_fn,
            self.transforms,
            self._prototype_trace,
        ) = initialize_model(
            self.model,
            model_args=args,
            model_kwargs=kwargs,
            max_plate_nesting=self.max_plate_nesting,
            init_strategy=self.init_strategy,
        )
        self._energy_last = self.potential_fn(self._initial_params)
        self._scale = {k: torch.ones_like(v) for k, v in self._initial_params.items()}
        self._window: list[dict[str, torch.Tensor]] = []
        self._ends = {max(1, warmup_steps // 2), warmup_steps}

    def sample(self, params: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        step = math.exp(self._log_step_size)
        proposal = {
            k: v + step * self._scale[k] * torch.randn(v.shape, dtype=v.dtype)
            for k, v in params.items()
        }
        energy = self.potential_fn(proposal)
        delta = float(energy - self._energy_last)
        accept_prob = math.exp(min(0.0, -delta)) if math.isfinite(delta) else 0.0
        accepted = float(torch.rand(())) < accept_prob
        if accepted:
            params, self._energy_last = proposal, energy
        self._t += 1
        if self._t <= self._warmup_steps:
            rate = max(0.001, 0.1 / math.sqrt(self._t))
            self._log_step_size += rate * (accept_prob - self.target_accept_prob)
            self._window.append({k: v.detach().clone() for k, v in params.items()})
            if self._t in self._ends and len(self._window) >= 10:
                for k in self._scale:
                    sd = torch.stack([w[k] for w in self._window]).std(0)
                    self._scale[k] = torch.where(sd > 0, sd, self._scale[k])
                self._log_step_size = math.log(2.38 / math.sqrt(self._dimension()))
                self._window = []
            n = self._t
        else:
            n = self._t - self._warmup_steps
            self._accept_cnt += int(accepted)
        self._mean_accept_prob += (accept_prob - self._mean_accept_prob) / n
        return params.copy()

    def _dimension(self) -> int:
        return max(1, sum(int(v.numel()) for v in self._scale.values()))

    def diagnostics(self) -> dict[str, float]:
        kept = max(1, self._t - self._warmup_steps)
        return {"acceptance rate": self._accept_cnt / kept}


def chain_seed(seed: int, chain: int) -> int:
    """Chain ``chain``'s own seed, derived from the run's seed: the same wherever it runs."""
    return int(np.random.SeedSequence([seed, chain]).generate_state(1)[0])


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


def nuts_engine(
    ctx: EngineContext,
    *,
    num_samples: int = 500,
    warmup: int = 500,
    num_chains: int = 2,
    jit: bool = False,
    target_accept: float = 0.8,
    max_tree_depth: int = 10,
    parallel: bool = True,
) -> Run:
    """No-U-Turn sampler (Hoffman & Gelman 2014): trajectories end where they turn back."""

    def kernel(model: Callable[..., Any]) -> NUTS:
        return NUTS(
            model,
            max_plate_nesting=ctx.structure.max_plate_nesting,
            jit_compile=jit,
            ignore_jit_warnings=True,
            target_accept_prob=target_accept,
            max_tree_depth=max_tree_depth,
            init_strategy=init_strategy,
        )

    return mcmc_run(
        ctx,
        "nuts",
        kernel,
        num_samples=num_samples,
        warmup=warmup,
        num_chains=num_chains,
        parallel=parallel,
    )


def hmc_engine(
    ctx: EngineContext,
    *,
    num_samples: int = 500,
    warmup: int = 500,
    num_chains: int = 2,
    jit: bool = False,
    target_accept: float = 0.8,
    trajectory_length: float = 2.0,
    max_steps: int = 100,
    parallel: bool = True,
) -> Run:
    """Static Hamiltonian Monte Carlo: a fixed integration time per draw (step size and mass
    matrix adapted in warmup; trajectory_length / step_size leapfrog steps, at most max_steps)."""

    def kernel(model: Callable[..., Any]) -> CappedHMC:
        return CappedHMC(
            model,
            max_plate_nesting=ctx.structure.max_plate_nesting,
            jit_compile=jit,
            ignore_jit_warnings=True,
            target_accept_prob=target_accept,
            trajectory_length=trajectory_length,
            max_steps=max_steps,
            init_strategy=init_strategy,
        )

    return mcmc_run(
        ctx,
        "hmc",
        kernel,
        num_samples=num_samples,
        warmup=warmup,
        num_chains=num_chains,
        parallel=parallel,
    )


def mh_engine(
    ctx: EngineContext,
    *,
    num_samples: int = 2000,
    warmup: int = 2000,
    num_chains: int = 2,
    target_accept: float = 0.234,
    parallel: bool = True,
) -> Run:
    """Random-walk Metropolis–Hastings with a diagonal proposal adapted in warmup."""

    def kernel(model: Callable[..., Any]) -> AdaptiveRandomWalk:
        return AdaptiveRandomWalk(
            model,
            max_plate_nesting=ctx.structure.max_plate_nesting,
            init_strategy=init_strategy,
            target_accept_prob=target_accept,
        )

    return mcmc_run(
        ctx,
        "mh",
        kernel,
        num_samples=num_samples,
        warmup=warmup,
        num_chains=num_chains,
        parallel=parallel,
    )
