"""Static HMC: each draw integrates for a jittered time around a fixed mean, in lockstep, with a
Metropolis correction (:func:`transition`, which ChEES shares); adapted by Stan's windowed
warmup (:func:`~zoo_inference.samplers.windows.adapted_chains`)."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch

from .base import Density, Loop, Samples
from .integrator import MAX_DELTA_ENERGY, kinetic, masked_leapfrog, momentum
from .trajectory import halton
from .windows import adapted_chains


def hmc(
    density: Density,
    theta0: torch.Tensor,
    *,
    num_samples: int,
    warmup: int,
    gen: torch.Generator,
    loop: Loop,
    target_accept: float = 0.8,
    trajectory_length: float = 2.0,
    max_steps: int = 100,
    resume: dict[str, Any] | None = None,
) -> Samples:
    """Static HMC: each draw integrates for ``2 u trajectory_length``, ``u`` from a Halton
    sequence shared by the chains (as ChEES jitters its T), in ``2 u trajectory_length / step``
    leapfrog steps (at most ``max_steps``), all chains together (the chains' step counts
    differ: a chain that has done its steps waits, masked). Adapted like NUTS.

    The jitter keeps the mean integration time and breaks the periodicity of a fixed one
    (Neal 2011, §5.4.2.3): a fixed time near half a period of a direction lands each draw
    near the mirror image of the last, so the draws anti-correlate (bulk ESS above the draws)
    while their distance from the centre stays put, and the folded R-hat saw it. In the quick
    report, fixed: R-hat 1.010-1.022 with bulk ESS 2347-6602 from 2000 draws on 7 models.
    ``resume``: a previous run's :attr:`Samples.state` (see :func:`~zoo_inference.samplers.windows.
    adapted_chains`)."""
    # each call's outputs are the next call's inputs; the last are read before the next draw
    leap = loop.step(masked_leapfrog, reuse_outputs=True)

    def jittered(q, lp, g, step, im, it):  # noqa: ANN001, ANN202 - adapted_chains' transition
        duration = 2 * halton(it + 1) * trajectory_length
        return transition(q, lp, g, step, im, gen, duration / step, max_steps, leap)[:5]

    return adapted_chains(
        density,
        theta0,
        num_samples=num_samples,
        warmup=warmup,
        gen=gen,
        loop=loop,
        target_accept=target_accept,
        transition=jittered,
        resume=resume,
    )


def transition(
    q: torch.Tensor,
    logp: torch.Tensor,
    grad: torch.Tensor,
    step: torch.Tensor,
    inv_mass: torch.Tensor,
    gen: torch.Generator,
    n_steps: torch.Tensor,
    max_steps: int,
    leap: Callable[..., tuple[torch.Tensor, ...]],
) -> tuple:
    """``n_steps`` (per chain, rounded up, capped at ``max_steps``) leapfrog steps and a
    Metropolis correction, every chain at once (a chain whose steps are done waits, masked).
    ``leap``: the declared :func:`~zoo_inference.samplers.integrator.masked_leapfrog` step. Returns
    the new ``q, logp, grad``, the statistics, the density calls, and the proposal and its
    momentum (for ChEES)."""
    B, D = q.shape
    n = torch.ceil(n_steps).clamp(1, max_steps).long()
    p0 = momentum(q, inv_mass, gen)
    h0 = -logp + kinetic(p0, inv_mass)
    cq, cp, cg, clp = q, p0, grad, logp
    eps = step[:, None]
    calls = int(n.max())
    for i in range(calls):
        cq, cp, cg, clp = leap(cq, cp, cg, clp, eps, inv_mass, i < n)
    delta = torch.nan_to_num(-clp + kinetic(cp, inv_mass) - h0, nan=math.inf)
    accept = torch.clamp(torch.exp(-delta), max=1.0)
    take = torch.rand(B, generator=gen, dtype=q.dtype) < accept
    tk = take[:, None]
    stats = {
        "accept": accept,
        "diverging": delta > MAX_DELTA_ENERGY,
        "n_steps": n.to(q.dtype),
        "energy": h0,
    }
    new = (torch.where(tk, cq, q), torch.where(take, clp, logp), torch.where(tk, cg, grad))
    return (*new, stats, calls, cq, cp)
