"""MAMS, the Metropolis-adjusted microcanonical sampler (Robnik, Cohn-Gordon & Seljak 2025,
"Metropolis Adjusted Microcanonical Hamiltonian Monte Carlo", arXiv:2503.01707): isokinetic
dynamics (unit-speed velocity, the ESH momentum update of Ver Steeg & Galstyan 2021) integrated
by leapfrog from a fresh uniform velocity each draw, for a uniformly jittered number of steps
about ``L / step``, with a Metropolis correction on the energy error (the log density's change
less the kinetic term's). Follows BlackJAX: ``blackjax/mcmc/adjusted_mclmc_dynamic.py`` (the
transition, the jitter's ``rescale``), ``blackjax/mcmc/integrators.py``
(``esh_dynamics_momentum_update_one_step``) and
``blackjax/adaptation/adjusted_mclmc_adaptation.py`` (``adjusted_mclmc_find_L_and_step_size``,
``adjusted_mclmc_make_adaptation_L``): the tuning's five stages, written here for many chains
sharing one step size, one ``L`` and one diagonal preconditioner."""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from .base import Density, Loop, Samples, StepFn
from .dual_averaging import DualAveraging
from .integrator import MAX_DELTA_ENERGY
from .metric import regularised_variance

L_FACTOR = 1.3  # BlackJAX's tuning_factor: L from the variances, sqrt(sum var) x 1.3
ESS_L_FACTOR = 0.5  # BlackJAX's l_factor: L = 0.5 L / (ESS per draw) after the ESS stretch
MIN_STEP = 1e-5
MIN_ESS_DRAWS = 8  # fewer draws a chain give no autocorrelation to go by


def esh_update(
    u: torch.Tensor, g: torch.Tensor, eps: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """The isokinetic (ESH) velocity update by time ``eps`` (chains, 1) under the preconditioned
    gradient ``g``: the unit velocity turns towards ``g``; returns it and the kinetic energy's
    change. Needs two dimensions or more (in one, a unit velocity cannot turn)."""
    d1 = u.shape[-1] - 1
    norm = g.norm(dim=-1, keepdim=True)
    e = g / norm.clamp_min(1e-13)
    ue = (u * e).sum(-1, keepdim=True)
    delta = eps * norm / d1
    zeta = torch.exp(-delta)
    new = e * (1 - zeta) * (1 + zeta + ue * (1 - zeta)) + 2 * zeta * u
    kinetic = (delta - math.log(2) + torch.log(1 + ue + (1 - ue) * zeta**2)) * d1
    return new / new.norm(dim=-1, keepdim=True), kinetic.squeeze(-1)


def isokinetic_leapfrog(
    density: Density,
    q: torch.Tensor,
    u: torch.Tensor,
    grad: torch.Tensor,
    logp: torch.Tensor,
    kinetic: torch.Tensor,
    eps: torch.Tensor,
    sigma: torch.Tensor,
) -> tuple[torch.Tensor, ...]:
    """One leapfrog step (half velocity update, position, half velocity update) of every chain
    in the coordinates ``q / sigma``; ``kinetic`` accumulates the kinetic energy's change.
    A step (:meth:`~zoo_inference.samplers.base.Loop.step`): ``(q, u, grad, logp, kinetic)``."""
    u, k1 = esh_update(u, grad * sigma, 0.5 * eps)
    q = q + eps * u * sigma
    logp, grad = density(q)
    u, k2 = esh_update(u, grad * sigma, 0.5 * eps)
    return q, u, grad, logp, kinetic + k1 + k2


def with_normal(density: Density) -> Density:
    """``density`` times a standard normal in one more coordinate, the last: a one-dimensional
    target gets a second dimension, the isokinetic velocity room to turn."""

    def joint(q: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        logp, grad = density(q[:, :-1])
        z = q[:, -1:]
        return logp - 0.5 * z.squeeze(-1) ** 2, torch.cat([grad, -z], -1)

    return joint


def leapfrog_with_normal(density: Density, *state: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """:func:`isokinetic_leapfrog` on :func:`with_normal` of ``density`` (a step)."""
    return isokinetic_leapfrog(with_normal(density), *state)


def rescale(mu: float) -> float:
    """BlackJAX's ``rescale``: ``s`` such that ``ceil(U s)``, U uniform, averages about ``mu``."""
    k = math.floor(2 * mu - 1)
    return k + k * (mu - 0.5 * (k + 1)) / (k + 1 - mu)


def transition(
    leap: Callable[..., tuple[torch.Tensor, ...]],
    q: torch.Tensor,
    logp: torch.Tensor,
    grad: torch.Tensor,
    step: float,
    L: float,
    inv_mass: torch.Tensor,
    gen: torch.Generator,
    max_steps: int,
    steps: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, int]:
    """One MAMS draw of every chain: ``max(1, ceil(U rescale(L / step)))`` steps (``U``
    uniform, shared by the chains; at most ``max_steps``; ``steps``: that many, no jitter) of
    ``leap`` (the declared :func:`isokinetic_leapfrog`) from a fresh uniform velocity, then a
    Metropolis correction on the energy error. Returns ``(q, logp, grad, accept probability,
    energy error, steps)``."""
    B, D = q.shape
    dtype = q.dtype
    sigma = inv_mass.sqrt().expand(B, D)
    n = steps
    if n is None:
        s = rescale(L / step)
        jitter = float(torch.rand((), generator=gen, dtype=dtype))
        n = min(max(1, math.ceil(jitter * s)), max_steps)
    u0 = torch.randn(B, D, generator=gen, dtype=dtype)
    u = u0 / u0.norm(dim=-1, keepdim=True)
    cq, cg, clp, kin = q, grad, logp, torch.zeros(B, dtype=dtype)
    eps = torch.full((B, 1), step, dtype=dtype)
    for _ in range(n):
        cq, u, cg, clp, kin = leap(cq, u, cg, clp, kin, eps, sigma)
    error = torch.nan_to_num(logp - clp + kin, nan=math.inf)
    accept = torch.exp(-error).clamp(max=1.0)
    take = torch.rand(B, generator=gen, dtype=dtype) < accept
    q = torch.where(take[:, None], cq, q)
    logp, grad = torch.where(take, clp, logp), torch.where(take[:, None], cg, grad)
    return q, logp, grad, accept, error, n


def mams(
    density: Density,
    theta0: torch.Tensor,
    *,
    num_samples: int,
    warmup: int,
    gen: torch.Generator,
    loop: Loop,
    target_accept: float = 0.9,
    max_steps: int = 1000,
    resume: dict[str, Any] | None = None,
) -> Samples:
    """MAMS: each draw integrates the isokinetic dynamics from a fresh uniform velocity for
    ``max(1, ceil(U s))`` steps (``U`` uniform, shared by the chains; ``s`` from ``L / step``;
    at most ``max_steps``), then accepts or rejects on the energy error. One step size, one
    ``L`` and one diagonal preconditioner for all chains, tuned in warmup as BlackJAX's
    ``adjusted_mclmc_find_L_and_step_size`` with its ESS stretch, in five equal stretches:
    (1) dual averaging of the step size to ``target_accept`` (the mean acceptance probability
    over chains), ``L / step`` held; (2) draws at fixed settings, whose variances (within
    chains, averaged) set ``L = 1.3 sqrt(sum var)``, then the preconditioner and ``L = sqrt(D)``,
    the step size (1)'s average; (3) dual averaging afresh, ``L`` held; (4) draws at fixed
    settings: ``L = 0.5 L / (ESS per draw)`` (at most twice ``L``); (5) dual averaging afresh,
    ``L`` held. A one-dimensional target is sampled beside an independent standard normal
    (:func:`with_normal`).

    ``resume``: a previous run's :attr:`Samples.state` (step size, L, preconditioner and
    iteration count): no warmup, the chains go on from ``theta0`` (their last draws)."""
    B, D0 = theta0.shape
    dtype = theta0.dtype
    leapfrog: StepFn  # the plain step, or one with a normal beside the density
    q, leapfrog = theta0, isokinetic_leapfrog
    if D0 == 1:  # a standard normal beside it, independent, drawn afresh on resuming
        q = torch.cat([q, torch.randn(B, 1, generator=gen, dtype=dtype)], -1)
        density, leapfrog = with_normal(density), leapfrog_with_normal
    D = q.shape[1]
    logp, grad = density(q)
    calls = 1
    if resume is None:
        step, L, inv_mass, done = 0.2 * math.sqrt(D), math.sqrt(D), torch.ones(D, dtype=dtype), 0
    else:
        step, L, inv_mass = resume["step_size"], resume["trajectory_length"], resume["inv_mass"]
        done = resume["iterations"]
    ends = [round(warmup * k / 5) for k in range(1, 6)]
    da = DualAveraging(torch.tensor([step], dtype=dtype), target_accept)
    kept: list[torch.Tensor] = []
    draws = torch.empty(B, num_samples, D0, dtype=dtype)
    stats: dict[str, list[torch.Tensor]] = {}
    leap = loop.step(leapfrog, reuse_outputs=True)
    loop.pace_from(warmup)
    warmup_calls = 0
    for it in range(warmup + num_samples):
        q, logp, grad, accept, error, n = transition(
            leap, q, logp, grad, step, L, inv_mass, gen, max_steps
        )
        calls += n
        if it < warmup:
            stage = next(k for k, end in enumerate(ends) if it < end)
            if stage % 2 == 0:  # dual averaging, L held (stage 0: L / step held)
                new = float(da.update(accept.mean().reshape(1))[0])
                new = min(max(new, MIN_STEP), L / 1.1)
                L, step = (L * new / step if stage == 0 else L), new
            if stage in (1, 3):
                kept.append(q)
            if it + 1 in ends and it + 1 != ends[0]:
                if stage != 3 and float(da.t[0]) > 0:  # the last dual averaging's mean
                    step = float(da.final[0])
                if stage == 1:  # the variances: L, then the preconditioner
                    var = regularised_variance(torch.stack(kept, 1), 1).mean(0)
                    step *= min(max(L_FACTOR * float(var.sum().sqrt()) / L, 0.0), 2.0)
                    inv_mass, L = var, math.sqrt(D)
                elif stage == 3 and len(kept) >= MIN_ESS_DRAWS:  # L from the autocorrelation
                    ess = effective_per_draw(torch.stack(kept, 1))
                    L = min(ESS_L_FACTOR * L / ess, 2 * L) if ess > 0 else L
                kept = []
                step = min(step, L / 1.1)
                da.restart(torch.tensor([step], dtype=dtype))
            if it + 1 == warmup:
                warmup_calls = calls
        else:
            draws[:, it - warmup] = q[:, :D0]
            st = {"accept": accept, "diverging": error > MAX_DELTA_ENERGY, "energy_error": error}
            st["n_steps"] = torch.full((B,), float(n), dtype=dtype)
            for k, v in st.items():
                stats.setdefault(k, []).append(v)
        loop.done(it + 1)
    info = {"step_size": step, "trajectory_length": L, "warmup_gradient_evals": warmup_calls * B}
    state = {
        "step_size": step,
        "trajectory_length": L,
        "inv_mass": inv_mass,
        "iterations": done + warmup + num_samples,
    }
    out = {k: torch.stack(v, 1) for k, v in stats.items()}
    return Samples(draws, out, calls * B, info, state)


def effective_per_draw(x: torch.Tensor) -> float:
    """The mean over coordinates of the ESS of the chains' draws ``x`` (chains, n, D), per draw."""
    # many chains of a short stretch: ArviZ warns that chains outnumber draws, as meant here
    with warnings.catch_warnings(), np.errstate(invalid="ignore", divide="ignore"):
        warnings.simplefilter("ignore")
        import arviz as az  # on first use: its import is most of a second

        data = az.convert_to_dataset({"x": x.cpu().numpy().astype(np.float64)})
        ess = az.ess(data, method="mean")["x"].values
    return float(np.nanmean(ess)) / (x.shape[0] * x.shape[1])
