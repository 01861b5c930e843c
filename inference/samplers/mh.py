"""Random-walk Metropolis–Hastings with a diagonal proposal, every chain at once."""

from __future__ import annotations

import math
from typing import Any

import torch

from .base import Density, Loop, Samples


def rwmh(
    density: Density,
    theta0: torch.Tensor,
    *,
    num_samples: int,
    warmup: int,
    gen: torch.Generator,
    loop: Loop,
    target_accept: float = 0.234,
    resume: dict[str, Any] | None = None,
) -> Samples:
    """Random-walk Metropolis–Hastings, every chain at once: proposals theta + s * scale * z,
    accepted with probability min(1, p(theta')/p(theta)). In warmup the step s follows a
    Robbins–Monro rule towards ``target_accept`` and ``scale`` is each chain's posterior sd
    from the draws of the first and second half of warmup; both frozen after. ``resume``: a
    previous run's :attr:`Samples.state` (step and scale): no warmup, the chains go on from
    ``theta0``."""
    q = theta0
    logp, _ = density(q)
    B, D = q.shape
    dtype = q.dtype
    if resume is None:
        log_step = torch.zeros(B, dtype=dtype) + math.log(0.5)
        scale = torch.ones(B, D, dtype=dtype)
    else:
        log_step, scale = resume["log_step"], resume["scale"]
    ends = {max(1, warmup // 2), warmup}
    window: list[torch.Tensor] = []
    draws = torch.empty(B, num_samples, D, dtype=dtype)
    accepted = torch.zeros(B, dtype=dtype)
    calls = 1
    for it in range(warmup + num_samples):
        z = torch.randn(B, D, generator=gen, dtype=dtype)
        prop = q + log_step.exp()[:, None] * scale * z
        lp, _ = density(prop)
        calls += 1
        loop.done(it + 1)
        ratio = torch.nan_to_num(lp - logp, nan=-math.inf).clamp(max=0.0).exp()
        take = torch.rand(B, generator=gen, dtype=dtype) < ratio
        q = torch.where(take[:, None], prop, q)
        logp = torch.where(take, lp, logp)
        if it < warmup:
            rate = max(0.001, 0.1 / math.sqrt(it + 1))
            log_step = log_step + rate * (ratio - target_accept)
            window.append(q)
            if it + 1 in ends and len(window) >= 10:
                sd = torch.stack(window, 1).std(1)
                scale = torch.where(sd > 0, sd, scale)
                log_step = torch.full_like(log_step, math.log(2.38 / math.sqrt(D)))
                window = []
        else:
            draws[:, it - warmup] = q
            accepted += take.to(dtype)
    acceptance = accepted / max(1, num_samples)
    stats = {"diverging": torch.zeros(B, num_samples, dtype=torch.bool)}
    state = {"log_step": log_step, "scale": scale}
    return Samples(draws, stats, calls * B, {"acceptance_rate": acceptance.tolist()}, state)
