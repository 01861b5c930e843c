"""Hamiltonian dynamics for every chain at once: velocities and kinetic energy under a metric
(:mod:`~zoo_inference.samplers.metric`), fresh momenta, and the leapfrog (velocity Verlet) step,
plain or masked to the chains still moving."""

from __future__ import annotations

import torch

from .base import Density
from .metric import momentum_map

MAX_DELTA_ENERGY = 1000.0  # an energy error above this is a divergence (Stan, NumPyro)


def velocity(p: torch.Tensor, inv_mass: torch.Tensor) -> torch.Tensor:
    """dq/dt = M^-1 p: ``inv_mass`` is diagonal, shaped like ``p`` (chains, D), or dense, one
    dimension more (``(1 | chains, D, D)``)."""
    if inv_mass.dim() > p.dim():
        return torch.matmul(inv_mass, p.unsqueeze(-1)).squeeze(-1)
    return inv_mass * p


def kinetic(p: torch.Tensor, inv_mass: torch.Tensor) -> torch.Tensor:
    return 0.5 * (p * velocity(p, inv_mass)).sum(-1)


def draw_momenta(z: torch.Tensor, factor: torch.Tensor) -> torch.Tensor:
    """Momenta from standard normals ``z`` (chains, D) and
    :func:`~zoo_inference.samplers.metric.momentum_map`'s ``factor``."""
    if factor.dim() > z.dim():
        return torch.matmul(factor, z.unsqueeze(-1)).squeeze(-1)
    return z / factor


def momentum(q: torch.Tensor, inv_mass: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    """Fresh momenta p ~ N(0, M), one row per chain of ``q``: for a dense ``M^-1 = L L^T``,
    ``p = L^-T z`` (its covariance is ``(L L^T)^-1``)."""
    z = torch.randn(q.shape, generator=gen, dtype=q.dtype)
    return draw_momenta(z, momentum_map(inv_mass))


def leapfrog(
    density: Density,
    q: torch.Tensor,
    p: torch.Tensor,
    grad: torch.Tensor,
    eps: torch.Tensor,
    inv_mass: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """One velocity-Verlet step of size ``eps`` (chains, 1) for every chain."""
    half = 0.5 * eps
    p = torch.addcmul(p, half, grad)
    q = torch.addcmul(q, eps, velocity(p, inv_mass))
    logp, grad = density(q)
    p = torch.addcmul(p, half, grad)
    return q, p, logp, grad


def masked_leapfrog(
    density: Density,
    q: torch.Tensor,
    p: torch.Tensor,
    grad: torch.Tensor,
    logp: torch.Tensor,
    eps: torch.Tensor,
    inv_mass: torch.Tensor,
    live: torch.Tensor,
) -> tuple[torch.Tensor, ...]:
    """A leapfrog step for the ``live`` chains; the others keep their state. A step
    (:meth:`~zoo_inference.samplers.base.Loop.step`): ``(q, p, grad, logp)`` in and out."""
    nq, np_, nlp, ng = leapfrog(density, q, p, grad, eps, inv_mass)
    lv = live[:, None]
    return (
        torch.where(lv, nq, q),
        torch.where(lv, np_, p),
        torch.where(lv, ng, grad),
        torch.where(live, nlp, logp),
    )
