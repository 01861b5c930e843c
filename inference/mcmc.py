"""Hamiltonian Monte Carlo (NUTS and fixed-length HMC) with discrete sites marginalised."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from pyro.infer import HMC, MCMC, NUTS

from .arviz_io import make_run, mcmc_convergence
from .context import EngineContext
from .enumeration import draw_discrete, enumerated, pointwise_log_likelihood
from .results import NumericalFailure, Run


class CappedHMC(HMC):
    """Pyro's HMC takes trajectory_length / step_size leapfrog steps, which explodes while warmup
    tries tiny step sizes; this caps the count at ``max_steps``."""

    def __init__(self, *args: Any, max_steps: int = 100, **kwargs: Any) -> None:
        self.max_steps = max_steps
        super().__init__(*args, **kwargs)

    @property
    def num_steps(self) -> int:
        return min(self.max_steps, max(1, int(self.trajectory_length / self.step_size)))


KERNELS = {"nuts": NUTS, "hmc": CappedHMC}


def mcmc_engine(
    ctx: EngineContext,
    *,
    kernel: str,
    num_samples: int,
    warmup: int,
    num_chains: int,
    jit: bool,
    target_accept: float,
    **kernel_options: Any,
) -> Run:
    """Run ``num_chains`` chains one after another (same seed, same numbers on any machine).

    Discrete latent sites are enumerated out of the potential energy, then recovered for every
    draw from their exact conditional posterior (``infer_discrete``), so they appear in the
    posterior too.
    """
    s = ctx.structure
    model = enumerated(ctx.model) if s.discrete else ctx.model
    chains: list[dict[str, torch.Tensor]] = []
    diverging = np.zeros((num_chains, num_samples), dtype=bool)
    accept = []
    for c in range(num_chains):
        k = KERNELS[kernel](
            model,
            max_plate_nesting=s.max_plate_nesting,
            jit_compile=jit,
            ignore_jit_warnings=True,
            target_accept_prob=target_accept,
            **kernel_options,
        )
        mcmc = MCMC(
            k,
            num_samples=num_samples,
            warmup_steps=warmup,
            num_chains=1,
            disable_progbar=not ctx.progress,
        )
        mcmc.run(**ctx.data)
        chains.append({n: v.detach() for n, v in mcmc.get_samples().items()})
        diag = mcmc.diagnostics()
        idx = [i for i in diag["divergences"]["chain 0"] if 0 <= i < num_samples]
        diverging[c, idx] = True
        accept.append(float(diag["acceptance rate"]["chain 0"]))
    if diverging.all():
        raise NumericalFailure("every transition diverged")
    posterior = {n: np.stack([ch[n].numpy() for ch in chains]) for n in chains[0]}
    if s.discrete:
        n = num_chains * num_samples
        draws = {k: torch.as_tensor(v).reshape((n,) + v.shape[2:]) for k, v in posterior.items()}
        recovered = draw_discrete(ctx.model, ctx.data, draws, n, s, progress=ctx.progress)
        posterior.update(
            {k: v.reshape((num_chains, num_samples) + v.shape[1:]) for k, v in recovered.items()}
        )
    log_lik = None if s.discrete else pointwise_log_likelihood(ctx.model, ctx.data, posterior, s)
    run = make_run(
        kernel,
        posterior,
        mcmc=True,
        log_likelihood=log_lik,
        sample_stats={"diverging": diverging},
        observed_data=ctx.data,
        diagnostics={
            "divergences": int(diverging.sum()),
            "acceptance_rate": accept,
            "num_chains": num_chains,
            "num_samples": num_samples,
            "warmup": warmup,
        },
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
) -> Run:
    """No-U-Turn sampler (Hoffman & Gelman 2014): trajectories end where they turn back."""
    return mcmc_engine(
        ctx,
        kernel="nuts",
        num_samples=num_samples,
        warmup=warmup,
        num_chains=num_chains,
        jit=jit,
        target_accept=target_accept,
        max_tree_depth=max_tree_depth,
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
) -> Run:
    """Static Hamiltonian Monte Carlo: a fixed integration time per draw (step size and mass
    matrix adapted in warmup; trajectory_length / step_size leapfrog steps, at most max_steps)."""
    return mcmc_engine(
        ctx,
        kernel="hmc",
        num_samples=num_samples,
        warmup=warmup,
        num_chains=num_chains,
        jit=jit,
        target_accept=target_accept,
        trajectory_length=trajectory_length,
    )
