"""ChEES-HMC (Hoffman, Radul & Sountsov 2021): all chains share one step size (dual averaging
on the harmonic mean of the acceptance probabilities) and one trajectory length (Adam on the
ChEES criterion, :mod:`~zoo_inference.samplers.trajectory`), the step count jittered by a Halton
sequence, and one mass matrix for all chains (their within-chain variances, averaged)."""

from __future__ import annotations

import math
from typing import Any

import torch

from .base import Density, Loop, Samples
from .dual_averaging import DualAveraging, find_step_size
from .hmc import transition
from .integrator import masked_leapfrog
from .metric import metric_kind, per_chain_metric, regularised_covariance, regularised_variance
from .trajectory import TrajectoryLength, halton, stuck_chains
from .windows import first_window_start, stan_windows


def chees(
    density: Density,
    theta0: torch.Tensor,
    *,
    num_samples: int,
    warmup: int,
    gen: torch.Generator,
    loop: Loop,
    target_accept: float = 0.651,
    learning_rate: float = 0.05,
    max_steps: int = 1000,
    dense_mass: bool | None = None,
    metric: str | None = None,
    criterion: str = "chees",
    resume: dict[str, Any] | None = None,
) -> Samples:
    """ChEES-HMC: one step size and one trajectory length T for all chains, adapted in warmup;
    each draw integrates for ``2 u T`` (``u`` from a Halton sequence) with the Metropolis
    correction. Warmup: dual averaging of the step size on the harmonic mean of the chains'
    acceptance probabilities; T by :class:`~zoo_inference.samplers.trajectory.TrajectoryLength`; a
    diagonal mass matrix shared by the chains (their within-chain variances over each of
    Stan's warmup windows, averaged), then the step size found afresh. ``dense_mass``: the same
    pooled estimate as a full covariance (``None``: dense up to
    :data:`~zoo_inference.samplers.metric.DENSE_MAX_DIM` dimensions). ``metric``: ``"diag"``,
    ``"dense"`` or ``"low_rank"`` (nutpie's estimate,
    :func:`~zoo_inference.samplers.metric.low_rank_metric`, from the window's draws and gradients,
    each chain's centred on its own means, pooled); None: as ``dense_mass`` says, which must be
    left at its default or agree with ``metric``. ``criterion``: what T's adaptation maximises,
    ``"chees"`` (the ChEES criterion) or ``"chees_per_grad"`` (ChEES per gradient, as fun_mc's
    ``chees_per_grad_criterion``: shorter trajectories where ChEES gains little from long ones).

    At each window's end a chain stuck far below the others
    (:func:`~zoo_inference.samplers.trajectory.stuck_chains`) is restarted where a chain that is not
    stuck is, and its window is left out of the metric: one step size and one T for every
    chain cannot suit a narrow basin and the posterior at once (gaussian_mixture's chains in a
    one-wide-component basin held the shared step size down). Warmup only, so the draws keep their
    stationary law; but restarted chains share a start with their donors, which nested R-hat's
    superchains assume independent: ``restarted_chains`` in the diagnostics counts them.

    ``resume``: a previous run's :attr:`Samples.state` (step size, T, metric and the Halton
    sequence's place): no warmup, the chains go on from ``theta0`` (their last draws)."""
    q = theta0
    logp, grad = density(q)
    B, D = q.shape
    dtype = q.dtype
    kind = metric_kind(D, metric, dense_mass, None)
    dense = kind != "diag"  # a low-rank metric is held dense
    calls, done = 1, 0  # done: iterations of the runs this one continues
    if resume is None:
        # dense from the start: a compiled step is traced for one shape of the metric
        inv_mass = torch.eye(D, dtype=dtype)[None] if dense else torch.ones(B, D, dtype=dtype)
        ones = torch.ones(B, dtype=dtype)
        step_b, c = find_step_size(density, q, logp, grad, inv_mass, ones, gen)
        calls += c
        step = float(step_b.median())
    else:
        step, inv_mass, done = resume["step_size"], resume["inv_mass"], resume["iterations"]
    da = DualAveraging(torch.tensor([step], dtype=dtype), target_accept)
    trajectory = TrajectoryLength(step, learning_rate, max_steps, criterion)
    ends = set(stan_windows(warmup))
    window_start = first_window_start(warmup)  # the fast initial buffer feeds no metric
    window: list[torch.Tensor] = []
    window_lp: list[torch.Tensor] = []
    window_grad: list[torch.Tensor] = []
    restarted = 0
    draws = torch.empty(B, num_samples, D, dtype=dtype)
    stats: dict[str, list[torch.Tensor]] = {}
    # each call's outputs are the next call's inputs; the last are read before the next draw
    leap = loop.step(masked_leapfrog, reuse_outputs=True)
    # the compile is weighed on the draws' own pace, from the end of warmup: the iterations
    # before the metric settles cost several times the draws, and would overstate the run
    loop.pace_from(warmup)
    T = trajectory.T if resume is None else resume["trajectory_length"]
    for it in range(warmup + num_samples):
        u = halton(done + it + 1)
        n_steps = torch.full((B,), max(1.0, math.ceil(2 * u * T / step)), dtype=dtype)
        steps = torch.full((B,), step, dtype=dtype)
        q_new, lp_new, g_new, st, c, proposal, p_end = transition(
            q, logp, grad, steps, inv_mass, gen, n_steps, max_steps, leap
        )
        calls += c
        if it < warmup:
            acc = st["accept"]
            ok = ~st["diverging"] & torch.isfinite(proposal).all(-1)
            # step size: dual averaging on the harmonic mean of acceptance
            # (a chain stuck far out accepts nothing: 0.01 keeps it from zeroing the mean)
            harmonic = 1.0 / (1.0 / acc[ok].clamp(min=0.01)).mean() if ok.any() else 0.0
            leap_step = step
            step = float(da.update(torch.as_tensor([float(harmonic)], dtype=dtype))[0])
            trajectory.update(u, q, proposal, p_end, acc, ok, inv_mass, step, leap_step)
            T = trajectory.T
            if it >= window_start:
                window.append(q_new)
                window_lp.append(lp_new)
                if kind == "low_rank":
                    window_grad.append(g_new)
            if it + 1 in ends:
                stuck = stuck_chains(torch.stack(window_lp, 1), D)
                if stuck.any():  # restarted where a chain that is not stuck is, chosen at random
                    donors, n = (~stuck).nonzero()[:, 0], int(stuck.sum())
                    src = torch.arange(B)
                    src[stuck] = donors[torch.randint(len(donors), (n,), generator=gen)]
                    q_new, lp_new, g_new = q_new[src], lp_new[src], g_new[src]
                    restarted += n
                # the chains' own variances over the window, averaged across chains: early in
                # warmup the chains have not met, and the spread between them is no scale
                drawn = torch.stack(window, 1)[~stuck]
                if kind == "low_rank":
                    inv_mass = pooled_low_rank(drawn, torch.stack(window_grad, 1)[~stuck])
                elif dense:
                    inv_mass = regularised_covariance(drawn).mean(0, keepdim=True)
                else:
                    inv_mass = regularised_variance(drawn, 1).mean(0).expand(B, D).clone()
                window, window_lp, window_grad = [], [], []
                steps_b, c = find_step_size(
                    density, q_new, lp_new, g_new, inv_mass, torch.full((B,), step), gen
                )
                calls += c
                step = float(steps_b.median())
                da.restart(torch.tensor([step], dtype=dtype))
            if it + 1 == warmup:
                step = float(da.final[0])
                T = min(max(T, step), max_steps * step)
        else:
            draws[:, it - warmup] = q_new
            for k, v in st.items():
                stats.setdefault(k, []).append(v)
        q, logp, grad = q_new, lp_new, g_new
        loop.done(it + 1)
    out = {k: torch.stack(v, 1) for k, v in stats.items()}
    info = {
        "step_size": step,
        "trajectory_length": T,
        "dense_mass": kind == "dense",
        "metric": kind,
        "restarted_chains": restarted,
    }
    state = {
        "step_size": step,
        "trajectory_length": T,
        "inv_mass": inv_mass,
        "iterations": done + warmup + num_samples,
    }
    return Samples(draws, out, calls * B, info, state)


def pooled_low_rank(draws: torch.Tensor, grads: torch.Tensor) -> torch.Tensor:
    """One low-rank metric (1, D, D) for all chains from their window's draws and gradients
    (chains, n, D): each chain's centred on its own means (early in warmup the chains have not
    met, and the spread between them is no scale), then pooled as one window."""
    D = draws.shape[-1]
    xc = (draws - draws.mean(1, keepdim=True)).reshape(1, -1, D)
    gc = (grads - grads.mean(1, keepdim=True)).reshape(1, -1, D)
    return per_chain_metric(xc, "low_rank", gc)
