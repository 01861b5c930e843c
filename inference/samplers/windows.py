"""Stan's windowed warmup: where its windows end (:func:`stan_windows`); its warmup for chains
in lockstep around any transition that takes a step size and a metric
(:func:`adapted_chains`, HMC's); and for chains that reach their iterations at different times
(:class:`PerChainAdaptation`, NUTS's)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from .base import Density, Loop, Samples
from .dual_averaging import DualAveraging, find_step_size
from .metric import per_chain_metric, regularised_variance


def stan_windows(warmup: int) -> list[int]:
    """Iterations (1-based counts) after which Stan's windowed warmup re-estimates the mass
    matrix: a fast initial buffer (75), slow windows doubling from 25, a terminal buffer (50);
    15% / 75% / 10% of a warmup shorter than 150."""
    if warmup < 20:
        return []
    init, term, base = 75, 50, 25
    if warmup < init + term + base:
        init, term = int(0.15 * warmup), int(0.1 * warmup)
        base = warmup - init - term
    ends, start, size = [], init, base
    last = warmup - term
    while start < last:
        end = start + size
        if end + 2 * size > last:  # the next window would not fit: stretch this one
            end = last
        ends.append(end)
        start, size = end, 2 * size
    return ends


def first_window_start(warmup: int) -> int:
    """The iteration (0-based) where the first of :func:`stan_windows` begins: after the fast
    initial buffer (0 for a warmup shorter than 20 iterations, which has no window)."""
    if not stan_windows(warmup):
        return 0
    return 75 if warmup >= 150 else int(0.15 * warmup)


# transition(q, logp, grad, step, inv_mass, iteration) -> (q, logp, grad, statistics, calls)
Transition = Callable[..., tuple]


def adapted_chains(
    density: Density,
    theta0: torch.Tensor,
    *,
    num_samples: int,
    warmup: int,
    gen: torch.Generator,
    loop: Loop,
    target_accept: float,
    transition: Transition,
    resume: dict[str, Any] | None = None,
) -> Samples:
    """Warmup (Stan's: dual averaging of each chain's step size, its diagonal mass matrix from
    the draws of each slow window, the step size heuristic and a restart after each) and
    sampling, for a per-chain transition kernel, the chains in lockstep. ``transition(q, logp,
    grad, step, inv_mass, iteration)`` (iteration from 0, warmup included) returns the new
    ``q, logp, grad``, its statistics (``accept`` among them) and its density calls.
    ``resume``: a previous run's :attr:`Samples.state`: no warmup, the chains go on from
    ``theta0`` with its step sizes and metric, the iterations counted on from its own."""
    q = theta0
    logp, grad = density(q)
    B, D = q.shape
    calls, done = 1, 0  # done: iterations of the runs this one continues
    if resume is None:
        inv_mass = torch.ones(B, D, dtype=q.dtype)
        ones = torch.ones(B, dtype=q.dtype)
        step, c = find_step_size(density, q, logp, grad, inv_mass, ones, gen)
        calls += c
    else:
        step, inv_mass, done = resume["step_size"], resume["inv_mass"], resume["iterations"]
    da = DualAveraging(step, target_accept)
    ends = stan_windows(warmup)
    window_start = first_window_start(warmup)
    loop.pace_from(window_start)  # the fast initial buffer's steps say little about the rest
    window: list[torch.Tensor] = []
    draws = torch.empty(B, num_samples, D, dtype=q.dtype)
    stats: dict[str, list[torch.Tensor]] = {}
    for it in range(warmup + num_samples):
        q, logp, grad, st, c = transition(q, logp, grad, step, inv_mass, done + it)
        calls += c
        loop.done(it + 1)
        if it < warmup:
            step = da.update(st["accept"])
            if it >= window_start:
                window.append(q)
            if it + 1 in ends:
                inv_mass = regularised_variance(torch.stack(window, 1), 1)
                window = []
                step, c = find_step_size(density, q, logp, grad, inv_mass, step, gen)
                calls += c
                da.restart(step)
            if it + 1 == warmup:
                step = da.final
        else:
            draws[:, it - warmup] = q
            for k, v in st.items():
                stats.setdefault(k, []).append(v)
    out = {k: torch.stack(v, 1) for k, v in stats.items()}
    out["step_size"] = step[:, None].expand(B, num_samples)
    state = {"step_size": step, "inv_mass": inv_mass, "iterations": done + warmup + num_samples}
    return Samples(draws, out, calls * B, {"step_size": step.tolist()}, state)


class PerChainAdaptation:
    """Stan's warmup for chains that reach their iterations at different times: each chain's
    dual averaging of its step size (:class:`DualAveraging`, updated only in the rows whose
    chain emitted a warmup draw), its mass matrix re-estimated from its own draws at the end of
    each of Stan's windows (then the step-size heuristic and a restart), its final step size
    the dual average's. ``kind``: the metric, one of
    :data:`~zoo_inference.samplers.metric.METRICS` (a low-rank one keeps the draws' gradients too;
    None: dense or diagonal as the metric it is given is)."""

    def __init__(
        self, step: torch.Tensor, warmup: int, target: float, D: int, kind: str | None = None
    ) -> None:
        self.da, self.warmup, self.kind = DualAveraging(step, target), warmup, kind
        self.ends = stan_windows(warmup)
        self.starts = dict(zip(self.ends, [first_window_start(warmup), *self.ends], strict=False))
        self.window = torch.zeros(step.shape[0], max(warmup, 1), D, dtype=step.dtype)
        self.grads = torch.zeros_like(self.window) if kind == "low_rank" else None

    def update(
        self,
        rows: torch.Tensor,
        it: torch.Tensor,
        q: torch.Tensor,
        logp: torch.Tensor,
        grad: torch.Tensor,
        accept: torch.Tensor,
        density: Density,
        inv_mass: torch.Tensor,
        gen: torch.Generator,
        restart: Callable[[torch.Tensor, torch.Tensor], None],
    ) -> tuple[torch.Tensor, int]:
        """Warmup bookkeeping for the chains in ``rows``, which just finished iteration ``it``
        at ``q`` (with ``logp``, ``grad``): dual averaging; the draw into the chain's window; at
        a window's end, the chain's mass matrix from its window, the step-size heuristic, a
        restart of its dual averaging and ``restart(rows, inv_mass)`` of its transition (its
        momentum was drawn under the old mass matrix). Returns the mass matrices and the
        density calls spent."""
        self.da.update(accept, rows)
        idx = rows.nonzero().squeeze(1)
        self.window[idx, it[idx]] = q[idx]
        if self.grads is not None:
            self.grads[idx, it[idx]] = grad[idx]
        calls = 0
        for end in self.ends:
            at_end = rows & (it + 1 == end)
            if not at_end.any():
                continue
            r = at_end.nonzero().squeeze(1)
            span = slice(self.starts[end], end)
            grads = None if self.grads is None else self.grads[r, span]
            inv_mass = inv_mass.clone()
            kind = self.kind or ("dense" if inv_mass.dim() == 3 else "diag")
            inv_mass[r] = per_chain_metric(self.window[r, span], kind, grads)
            current = self.da.log_step.exp()
            found, c = find_step_size(density, q, logp, grad, inv_mass, current, gen)
            calls += c
            self.da.restart(found, at_end)
            restart(at_end, inv_mass)
        return inv_mass, calls
