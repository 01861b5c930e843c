"""The No-U-Turn sampler (Hoffman & Gelman 2014) in its multinomial form with iterative tree
doubling (Betancourt 2017; as Stan and NumPyro build it), the chains asynchronous: each call of
the density takes one leapfrog step in every chain's own tree (:func:`~zoo_inference.samplers.
nuts_tree.tree_step`), and no chain waits for another's. Per-chain step size by dual averaging
and per-chain mass matrix by Stan's windowed warmup, each chain on its own clock."""

from __future__ import annotations

import functools
from typing import Any

import torch

from .base import Density, Loop, Samples
from .dual_averaging import find_step_size
from .integrator import draw_momenta
from .metric import initial_metric, metric_kind, momentum_map
from .nuts_tree import (
    NUTS_STEP_NODES,
    TreeInfo,
    TreeState,
    checkpoint_masks,
    new_subtrees,
    new_trees,
    tree_step,
)
from .windows import PerChainAdaptation, first_window_start

# NUTS's calls whose random numbers (three uniforms and D normals a chain) are drawn at once:
# a call's share is two views, not two draws, an unbind and the momenta's product in Python
RANDOM_BLOCK = 64


def nuts_sample(
    density: Density,
    q: torch.Tensor,
    logp: torch.Tensor,
    grad: torch.Tensor,
    step: torch.Tensor,
    inv_mass: torch.Tensor,
    gen: torch.Generator,
    num_samples: int,
    max_tree_depth: int = 10,
    *,
    loop: Loop | None = None,
    warmup: int = 0,
    target_accept: float = 0.8,
    metric: str | None = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor], int, torch.Tensor, torch.Tensor]:
    """``warmup`` adapting iterations, then ``num_samples`` NUTS draws, per chain, the chains
    asynchronous: each density call takes one leapfrog step in every chain's own tree, and a
    chain whose tree ends emits its draw and starts the next tree in the same call (in
    lockstep, every chain would wait for the longest tree of the batch). Warmup is Stan's, per
    chain (:class:`~zoo_inference.samplers.windows.PerChainAdaptation`). Each chain follows the
    sequential sampler; only the order of the random numbers differs. Returns the draws
    (chains, num_samples, D), their statistics, the number of density calls (the step-size
    heuristic's included), the final step sizes and the final metric. ``loop``: the driver's
    hook (default: the step runs as written). ``metric``: the kind warmup adapts (one of
    :data:`~zoo_inference.samplers.metric.METRICS`; None: dense or diagonal as ``inv_mass`` is)."""
    loop = loop or Loop(density)
    B, D = q.shape
    dtype = q.dtype
    tables = checkpoint_masks(max_tree_depth)
    st = TreeState.zeros(
        {
            "vector": ((B, D), dtype),
            "scalar": ((B,), dtype),
            "count": ((B,), torch.long),
            "flag": ((B,), torch.bool),
            "checkpoints": ((max_tree_depth, B, D), dtype),
        }
    )
    st.q, st.lp, st.g = q, logp, grad

    began = [False]  # whether begin() changed st since it was last packed
    factor = momentum_map(inv_mass)

    def begin(rows: torch.Tensor, inv_mass: torch.Tensor) -> None:  # momenta under inv_mass
        nonlocal factor
        factor = momentum_map(inv_mass)
        p0 = draw_momenta(torch.randn(B, D, generator=gen, dtype=dtype), factor)
        new_trees(st, rows, p0, inv_mass)
        new_subtrees(st, rows, torch.rand(B, generator=gen, dtype=dtype))
        began[0] = True

    begin(torch.ones(B, dtype=torch.bool), inv_mass)
    packed = st.pack()
    adapt = PerChainAdaptation(step, warmup, target_accept, D, metric) if warmup else None
    eager = functools.partial(tree_step, eager=True)
    # a call's outputs are the state the next call takes, and read before the call after it
    step_fn = loop.step(tree_step, eager, reuse_outputs=True, nodes=NUTS_STEP_NODES)
    # the compile is weighed from the first metric window on: in the fast initial buffer (a unit
    # metric, the step size settling) trees run far deeper than the run's later ones
    loop.pace_from(first_window_start(warmup))
    total = warmup + num_samples
    draws = torch.empty(B, num_samples, D, dtype=dtype)
    stats = {k: torch.zeros(B, num_samples, dtype=dtype) for k in TreeInfo._fields}
    stats["diverging"] = torch.zeros(B, num_samples, dtype=torch.bool)
    stats["tree_depth"] = torch.zeros(B, num_samples, dtype=torch.long)
    count = torch.zeros(B, dtype=torch.long)  # iterations done, warmup included
    calls = 0
    k = len(packed)
    # what changes only when a chain emits a draw is computed then, not at every call
    active, eps = count < total, step[:, None]
    running, block = bool(active.any()), RANDOM_BLOCK
    while running:
        if block == RANDOM_BLOCK:  # the random numbers of the next calls, drawn at once
            uniforms = torch.rand(RANDOM_BLOCK, 3, B, generator=gen, dtype=dtype)
            normals = torch.randn(RANDOM_BLOCK, B, D, generator=gen, dtype=dtype)
            block = 0
        out = step_fn(
            *packed, eps, inv_mass, active, uniforms[block], normals[block], factor, *tables
        )
        block += 1
        calls += 1
        # a compiled step's outputs may come back with other strides than it was traced with
        packed = tuple(t.contiguous() for t in out[:k])
        done, emitted = out[k], TreeInfo(*out[k + 1 :])  # done: only ever in active chains
        if not done.any():
            continue
        st = TreeState.unpack(packed)
        it = count
        warm = done & (it < warmup)
        if adapt is not None and warm.any():
            inv_mass, c = adapt.update(
                warm, it, st.q, st.lp, st.g, emitted.accept, density, inv_mass, gen, begin
            )
            calls += c
            if began[0]:  # a window's end restarted some chains' trees
                packed, began[0] = st.pack(), False
            final = warm & (it + 1 == warmup)  # warmup's end: the dual average's step size
            step = torch.where(final, adapt.da.final, adapt.da.log_step.exp())
            adapt.da.restart(step, final)  # done adapting: log_step holds the final step
            eps = step[:, None]
        keep = done & (it >= warmup)
        if keep.any():
            rows = keep.nonzero().squeeze(1)
            at = it[rows] - warmup
            draws[rows, at] = st.q[rows]
            for name, value in emitted._asdict().items():
                stats[name][rows, at] = value[rows].to(stats[name].dtype)
        count = count + done.long()
        active = count < total
        running = bool(active.any())
        loop.done(int(count.min()))  # the slowest chain's iterations
    return draws, stats, calls, step, inv_mass


def nuts(
    density: Density,
    theta0: torch.Tensor,
    *,
    num_samples: int,
    warmup: int,
    gen: torch.Generator,
    loop: Loop,
    target_accept: float = 0.8,
    max_tree_depth: int = 10,
    dense_mass: bool | None = False,
    metric: str | None = None,
    resume: dict[str, Any] | None = None,
) -> Samples:
    """NUTS for every chain of ``theta0`` (chains, D), the chains asynchronous in warmup and
    sampling alike (:func:`nuts_sample`): each chain's step size by dual averaging and its
    mass matrix re-estimated at the ends of Stan's windows, on its own clock: Stan's
    ``diag_e``, or with ``dense_mass`` its ``dense_e``
    (:func:`~zoo_inference.samplers.metric.per_chain_metric`; ``None``: dense up to
    :data:`~zoo_inference.samplers.metric.DENSE_MAX_DIM` dimensions). Diagonal by default, as in
    Stan: estimated from one chain's window, a dense metric pays only where the posterior is
    correlated (linear_regression asks for it) and costs leapfrog steps elsewhere.
    ``metric``: ``"diag"``, ``"dense"`` or ``"low_rank"`` (nutpie's low-rank-plus-diagonal
    estimate from each window's draws and gradients,
    :func:`~zoo_inference.samplers.metric.low_rank_metric`); None: as ``dense_mass`` says, which
    must be left at its default or agree with ``metric``.

    ``resume``: a previous run's :attr:`Samples.state` (its step sizes and metrics): no
    warmup, the chains go on from ``theta0`` (their last draws) with them."""
    q = theta0
    logp, grad = density(q)
    B, D = q.shape
    kind = metric_kind(D, metric, dense_mass, False)
    if resume is None:
        inv_mass = initial_metric(B, D, kind != "diag", q.dtype)  # a low-rank one held dense
        step, calls = find_step_size(
            density, q, logp, grad, inv_mass, torch.ones(B, dtype=q.dtype), gen
        )
    else:
        step, inv_mass, calls = resume["step_size"], resume["inv_mass"], 0
    draws, stats, c, step, inv_mass = nuts_sample(
        density, q, logp, grad, step, inv_mass, gen, num_samples, max_tree_depth,
        loop=loop, warmup=warmup, target_accept=target_accept, metric=kind,
    )  # fmt: skip
    stats["step_size"] = step[:, None].expand(B, num_samples)
    info = {"step_size": step.tolist(), "dense_mass": kind == "dense", "metric": kind}
    state = {"step_size": step, "inv_mass": inv_mass}
    return Samples(draws, stats, (1 + calls + c) * B, info, state)
