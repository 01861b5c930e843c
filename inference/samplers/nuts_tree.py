"""NUTS's step: one leapfrog step in every chain's own tree and the tree's bookkeeping
(multinomial sampling, U-turn checks at Betancourt's checkpoints, subtree merges, a finished
tree's draw and the next tree), branch-free so that the driver may run it as one compiled graph
(:func:`tree_step`). The loop around it, and warmup, are :mod:`zoo_inference.samplers.nuts`'s."""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Annotated, Any, NamedTuple

import torch

from .base import Density, PackedState
from .integrator import MAX_DELTA_ENERGY, draw_momenta, kinetic, leapfrog, velocity


def is_turning(
    p_left: torch.Tensor, p_right: torch.Tensor, p_sum: torch.Tensor, inv_mass: torch.Tensor
) -> torch.Tensor:
    """The generalised no-U-turn criterion (Betancourt 2017, A.4.2) on the momenta at the two
    ends of a (sub)trajectory and their sum."""
    rho = p_sum - 0.5 * (p_left + p_right)
    left, right = velocity(p_left, inv_mass), velocity(p_right, inv_mass)
    return ((left * rho).sum(-1) <= 0) | ((right * rho).sum(-1) <= 0)


def checkpoints(leaf: int) -> tuple[int, int]:
    """Which stored momenta the new leaf ``leaf`` (0-based, within its subtree) closes a
    sub-subtree with: the checks run from index ``hi`` down to ``lo`` (NumPyro's iterative
    form: ``hi`` is the number of set bits of ``leaf >> 1``; ``hi - lo + 1`` the number of
    trailing one bits of ``leaf``)."""
    hi = bin(leaf >> 1).count("1")
    trailing = len(bin(leaf)) - len(bin(leaf).rstrip("1")) if leaf & 1 else 0
    return hi - trailing + 1, hi


def leaf_step(
    density: Density,
    st: TreeState,
    eps: torch.Tensor,
    inv_mass: torch.Tensor,
    live: torch.Tensor,
    u: torch.Tensor,
    write: torch.Tensor,
    check: torch.Tensor,
    eager: bool = False,
) -> None:
    """One leaf of the subtree being built, for the ``live`` chains (the others keep their
    state): a leapfrog step of size ``eps`` (signed) from the subtree's edge, multinomial
    sampling of the subtree's proposal with uniform ``u``, its log weight and momentum sum, the
    acceptance statistic and divergence, all updated in ``st``. U-turn checkpoints: ``write``
    (max_depth,) marks the row of ``p_ck`` / ``sum_ck`` this leaf stores (even leaves),
    ``check`` the rows it is checked against (odd leaves; :func:`checkpoints`). ``eager``: skip
    the masking that changes nothing (every chain live, no proposal taken, no checkpoint written
    or checked)."""
    nq, np_, nlp, ng = leapfrog(density, st.cq, st.cp, st.cg, eps, inv_mass)
    lv = live[:, None]
    every = eager and bool(live.all())

    def live_only(mask: torch.Tensor, new: Any, old: Any) -> Any:  # where the chain is live
        return new if every else torch.where(mask, new, old)

    st.cq, st.cp = live_only(lv, nq, st.cq), live_only(lv, np_, st.cp)
    st.cg, st.clp = live_only(lv, ng, st.cg), live_only(live, nlp, st.clp)
    delta = torch.nan_to_num(kinetic(st.cp, inv_mass) - st.clp - st.h0, nan=math.inf)
    new_logw = torch.logaddexp(st.s_logw, -delta)
    take = live_only(live, u < (-delta - new_logw).exp(), False)
    if not eager or bool(take.any()):
        tk = take[:, None]
        st.sq, st.slp = torch.where(tk, st.cq, st.sq), torch.where(take, st.clp, st.slp)
        st.sg = torch.where(tk, st.cg, st.sg)
    st.s_logw = live_only(live, new_logw, st.s_logw)
    st.s_sum = live_only(lv, st.s_sum + st.cp, st.s_sum)
    st.sum_acc = st.sum_acc + live_only(live, torch.clamp(torch.exp(-delta), max=1.0), 0.0)
    st.n_leaves = st.n_leaves + live_only(live, 1.0, 0.0)
    st.s_div = st.s_div | live_only(live, delta > MAX_DELTA_ENERGY, False)
    if not eager or bool(write.any()):
        stored = write[:, :, None] & lv[None]
        st.p_ck = torch.where(stored, st.cp[None], st.p_ck)
        st.sum_ck = torch.where(stored, st.s_sum[None], st.sum_ck)
    if not eager or bool(check.any()):
        p_sum = st.s_sum[None] - st.sum_ck + st.p_ck
        turned = is_turning(st.p_ck, st.cp[None], p_sum, inv_mass[None])
        st.s_turn = st.s_turn | ((turned & check).any(0) & live)


@functools.cache
def checkpoint_masks(max_depth: int) -> tuple[torch.Tensor, torch.Tensor]:
    """For each leaf index below 2**(max_depth - 1), the checkpoint rows it writes and the rows
    it checks: two boolean tensors (leaves, max_depth)."""
    write, check = [], []
    rows = torch.arange(max_depth)
    none = torch.zeros(max_depth, dtype=torch.bool)
    for leaf in range(2 ** max(max_depth - 1, 0)):
        lo, hi = checkpoints(leaf)
        write.append(rows == hi if leaf % 2 == 0 else none)
        check.append(none if leaf % 2 == 0 else (rows >= lo) & (rows <= hi))
    return torch.stack(write), torch.stack(check)


Vector = Annotated[torch.Tensor, "vector"]  # (chains, D), the draws' dtype
Scalar = Annotated[torch.Tensor, "scalar"]  # (chains,), the draws' dtype
Count = Annotated[torch.Tensor, "count"]  # (chains,) long
Flag = Annotated[torch.Tensor, "flag"]  # (chains,) bool
Checkpoints = Annotated[torch.Tensor, "checkpoints"]  # (max_depth, chains, D)


@dataclass(slots=True)
class TreeState(PackedState):
    """Every chain's state in the asynchronous sampler (:mod:`zoo_inference.samplers.nuts`),
    between two calls of :func:`tree_step`. Edges and proposals are points of phase space:
    position ``q``, momentum ``p`` (``pm`` on the tree's edges), gradient ``g``, log density
    ``lp``. A compiled step's call costs per tensor passed in and out (inductor's wrapper checks
    each input's strides and allocates each output), so the 36 fields cross it as the five
    tensors of their kinds (:class:`~zoo_inference.samplers.base.PackedState`)."""

    q: Vector  # the chain's current draw, and its gradient
    g: Vector
    lq: Vector  # the tree's left edge
    lpm: Vector
    lg: Vector
    rq: Vector  # the tree's right edge
    rpm: Vector
    rg: Vector
    pq: Vector  # the tree's proposal
    pg: Vector
    p_sum: Vector  # the tree's momentum sum
    cq: Vector  # the subtree's edge: where its next leapfrog step starts
    cp: Vector
    cg: Vector
    s_sum: Vector  # the subtree's momentum sum, and its proposal
    sq: Vector
    sg: Vector
    lp: Scalar  # the current draw's log density, and the tree's initial energy
    h0: Scalar
    llp: Scalar  # the edges' and the proposal's log densities
    rlp: Scalar
    plp: Scalar
    log_w: Scalar  # the tree's log weight
    clp: Scalar
    s_logw: Scalar  # the subtree's log weight, and its proposal's log density
    slp: Scalar
    sum_acc: Scalar  # the tree's acceptance sum and leaf count
    n_leaves: Scalar
    depth: Count  # the tree's depth, and the subtree's leaf index
    n: Count
    right_way: Flag  # the subtree grows to the right
    s_turn: Flag  # the subtree turned, diverged; the tree diverged
    s_div: Flag
    diverging: Flag
    p_ck: Checkpoints  # the U-turn checkpoints: stored momenta and momentum sums
    sum_ck: Checkpoints


class TreeInfo(NamedTuple):
    """The statistics a chain's finished tree emits with its draw."""

    accept: torch.Tensor  # mean acceptance probability over the tree's leaves
    diverging: torch.Tensor
    tree_depth: torch.Tensor
    n_steps: torch.Tensor  # leapfrog steps
    energy: torch.Tensor


def new_trees(st: TreeState, start: torch.Tensor, p0: torch.Tensor, inv_mass: torch.Tensor) -> None:
    """Chains in ``start`` begin a new iteration at their current draw with momentum ``p0``."""
    s, m = start, start[:, None]
    h0 = -st.lp + kinetic(p0, inv_mass)
    st.h0 = torch.where(s, h0, st.h0)
    st.lq, st.lpm = torch.where(m, st.q, st.lq), torch.where(m, p0, st.lpm)
    st.lg, st.llp = torch.where(m, st.g, st.lg), torch.where(s, st.lp, st.llp)
    st.rq, st.rpm = torch.where(m, st.q, st.rq), torch.where(m, p0, st.rpm)
    st.rg, st.rlp = torch.where(m, st.g, st.rg), torch.where(s, st.lp, st.rlp)
    st.pq, st.pg = torch.where(m, st.q, st.pq), torch.where(m, st.g, st.pg)
    st.plp = torch.where(s, st.lp, st.plp)
    st.log_w = torch.where(s, 0.0, st.log_w)
    st.p_sum = torch.where(m, p0, st.p_sum)
    st.depth = torch.where(s, 0, st.depth)
    st.sum_acc = torch.where(s, 0.0, st.sum_acc)
    st.n_leaves = torch.where(s, 0.0, st.n_leaves)
    st.diverging = st.diverging & ~s


def new_subtrees(st: TreeState, start: torch.Tensor, coin: torch.Tensor) -> None:
    """Chains in ``start`` begin a subtree of 2**depth leaves from the edge a coin picks."""
    s, m = start, start[:, None]
    st.right_way = torch.where(s, coin < 0.5, st.right_way)
    rw = st.right_way[:, None]
    st.cq = torch.where(m, torch.where(rw, st.rq, st.lq), st.cq)
    st.cp = torch.where(m, torch.where(rw, st.rpm, st.lpm), st.cp)
    st.cg = torch.where(m, torch.where(rw, st.rg, st.lg), st.cg)
    edge_lp = torch.where(st.right_way, st.rlp, st.llp)
    st.clp = torch.where(s, edge_lp, st.clp)
    st.n = torch.where(s, 0, st.n)
    st.s_logw = torch.where(s, -math.inf, st.s_logw)
    st.s_sum = torch.where(m, 0.0, st.s_sum)
    st.sq, st.sg = torch.where(m, st.cq, st.sq), torch.where(m, st.cg, st.sg)
    st.slp = torch.where(s, st.clp, st.slp)
    st.s_turn = st.s_turn & ~s
    st.s_div = st.s_div & ~s


# The nodes NUTS's tree bookkeeping adds to the density's graph in the fused step, priced into
# the decision to compile: the density's graph alone under-priced NUTS's compiles.
NUTS_STEP_NODES = 280


def tree_step(
    density: Density, *args: torch.Tensor, eager: bool = False
) -> tuple[torch.Tensor, ...]:
    """One leapfrog step for every active chain in its own tree, then, per chain: a finished
    subtree merged into its tree (biased progressive sampling), a finished tree emitted as the
    chain's next draw and a new tree begun, a new subtree begun. No chain waits for another:
    every density call advances every active chain. Branch-free, so it runs as one fused graph;
    ``eager`` (run uncompiled) skips the bookkeeping no chain needs in this call (the same
    results: most calls finish no subtree). Takes the packed :class:`TreeState`, then
    ``eps, inv_mass, active, uniforms, normals, factor, write_tab, check_tab``; returns the new
    state packed, whether each chain emitted a draw, and its :class:`TreeInfo`."""
    k = len(TreeState.layout())
    st = TreeState.unpack(args[:k])
    eps, inv_mass, active, uniforms, normals, factor, write_tab, check_tab = args[k:]
    u, coin_merge, coin_dir = uniforms.unbind(0)
    p_new = draw_momenta(normals, factor)  # a new tree's momenta, for chains whose tree ends
    max_depth = write_tab.shape[1]
    n = st.n.clamp(max=write_tab.shape[0] - 1)
    write, check = write_tab[n].T, check_tab[n].T  # (max_depth, chains)
    signed = torch.where(st.right_way[:, None], eps, -eps)
    leaf_step(density, st, signed, inv_mass, active, u, write, check, eager=eager)
    full = st.n + 1 >= torch.ones_like(st.depth) << st.depth
    sub_done = active & (st.s_turn | st.s_div | full)
    if eager and not bool(sub_done.any()):  # no subtree finished: no merge, no draw
        st.n = st.n + 1
        return (*st.pack(), torch.zeros_like(sub_done), *tree_info(st))
    # merge the finished subtrees: never take a proposal from one that turned or diverged
    bad = st.s_turn | st.s_div
    accept = torch.where(bad, 0.0, torch.clamp(torch.exp(st.s_logw - st.log_w), max=1.0))
    take = sub_done & (coin_merge < accept)
    st.pq = torch.where(take[:, None], st.sq, st.pq)
    st.pg = torch.where(take[:, None], st.sg, st.pg)
    st.plp = torch.where(take, st.slp, st.plp)
    right, left = sub_done & st.right_way, sub_done & ~st.right_way  # the edge the subtree grew
    r, l_ = right[:, None], left[:, None]
    st.rq, st.rpm = torch.where(r, st.cq, st.rq), torch.where(r, st.cp, st.rpm)
    st.rg, st.rlp = torch.where(r, st.cg, st.rg), torch.where(right, st.clp, st.rlp)
    st.lq, st.lpm = torch.where(l_, st.cq, st.lq), torch.where(l_, st.cp, st.lpm)
    st.lg, st.llp = torch.where(l_, st.cg, st.lg), torch.where(left, st.clp, st.llp)
    st.log_w = torch.where(sub_done, torch.logaddexp(st.log_w, st.s_logw), st.log_w)
    st.p_sum = torch.where(sub_done[:, None], st.p_sum + st.s_sum, st.p_sum)
    turning = is_turning(st.lpm, st.rpm, st.p_sum, inv_mass)
    st.diverging = st.diverging | (sub_done & st.s_div)
    st.depth = st.depth + sub_done.long()
    tree_done = sub_done & (bad | turning | (st.depth >= max_depth))
    emitted = tree_info(st)
    if not eager or bool(tree_done.any()):
        # a finished tree: its proposal is the chain's next draw, and a new tree starts there
        st.q = torch.where(tree_done[:, None], st.pq, st.q)
        st.g = torch.where(tree_done[:, None], st.pg, st.g)
        st.lp = torch.where(tree_done, st.plp, st.lp)
        new_trees(st, tree_done, p_new, inv_mass)
    st.n = st.n + 1
    new_subtrees(st, sub_done, coin_dir)
    return (*st.pack(), tree_done, *emitted)


def tree_info(st: TreeState) -> TreeInfo:
    """The statistics of each chain's current tree, emitted with its draw."""
    return TreeInfo(
        accept=st.sum_acc / st.n_leaves.clamp(min=1),
        diverging=st.diverging,
        tree_depth=st.depth,
        n_steps=st.n_leaves,
        energy=st.h0.clone(),  # a tensor of its own, not a view into the state passed on
    )
