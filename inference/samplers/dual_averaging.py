"""Step-size adaptation: Nesterov dual averaging towards a target acceptance statistic
(Hoffman & Gelman 2014, §3.2.1) and Stan's heuristic for a first step size."""

from __future__ import annotations

import math

import torch

from .base import Density
from .integrator import kinetic, leapfrog, momentum


class DualAveraging:
    """Nesterov dual averaging of log step size (Hoffman & Gelman 2014, §3.2.1), one per row:
    the step size is pushed towards the one whose acceptance statistic hits ``target``. Each
    row keeps its own count, so ``rows`` (a mask) can update or restart some rows only."""

    def __init__(self, step: torch.Tensor, target: float) -> None:
        self.target = target
        z = torch.zeros_like(step)
        self.mu, self.h_bar, self.log_bar, self.t, self.log_step = z, z, z, z, z
        self.restart(step)

    def restart(self, step: torch.Tensor, rows: torch.Tensor | None = None) -> None:
        rows = torch.ones_like(step, dtype=torch.bool) if rows is None else rows
        self.mu = torch.where(rows, torch.log(10 * step), self.mu)
        self.h_bar = torch.where(rows, 0.0, self.h_bar)
        self.log_bar = torch.where(rows, 0.0, self.log_bar)
        self.t = torch.where(rows, 0.0, self.t)
        self.log_step = torch.where(rows, torch.log(step), self.log_step)

    def update(self, accept: torch.Tensor, rows: torch.Tensor | None = None) -> torch.Tensor:
        """One update of ``rows`` (default: all) from their acceptance statistics; returns the
        step sizes."""
        rows = torch.ones_like(self.t, dtype=torch.bool) if rows is None else rows
        t = self.t + 1
        eta = 1.0 / (t + 10.0)
        accept = torch.nan_to_num(accept, nan=0.0)
        h_bar = (1 - eta) * self.h_bar + eta * (self.target - accept)
        log_step = self.mu - t.sqrt() / 0.05 * h_bar
        w = t**-0.75
        log_bar = w * log_step + (1 - w) * self.log_bar
        self.t = torch.where(rows, t, self.t)
        self.h_bar = torch.where(rows, h_bar, self.h_bar)
        self.log_step = torch.where(rows, log_step, self.log_step)
        self.log_bar = torch.where(rows, log_bar, self.log_bar)
        return self.log_step.exp()

    @property
    def final(self) -> torch.Tensor:
        return self.log_bar.exp()


def find_step_size(
    density: Density,
    q: torch.Tensor,
    logp: torch.Tensor,
    grad: torch.Tensor,
    inv_mass: torch.Tensor,
    step: torch.Tensor,
    gen: torch.Generator,
) -> tuple[torch.Tensor, int]:
    """Stan's heuristic, per chain: double or halve the step size until the acceptance
    probability of one leapfrog step crosses 0.8. Returns the step sizes and the density calls."""
    calls = 0
    direction = None
    done = torch.zeros_like(logp, dtype=torch.bool)
    for _ in range(60):
        p = momentum(q, inv_mass, gen)
        h0 = -logp + kinetic(p, inv_mass)
        _, p1, logp1, _ = leapfrog(density, q, p, grad, step[:, None], inv_mass)
        calls += 1
        delta = h0 - (-logp1 + kinetic(p1, inv_mass))
        delta = torch.nan_to_num(delta, nan=-math.inf)
        up = delta > math.log(0.8)
        if direction is None:
            direction = up
        crossed = torch.where(direction, ~up, up)
        done = done | crossed
        if done.all():
            break
        factor = torch.where(direction, 2.0, 0.5).to(step.dtype)
        step = torch.where(done, step, step * factor)
        step = step.clamp(1e-8, 1e4)
    return step, calls
