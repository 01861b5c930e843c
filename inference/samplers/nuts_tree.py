"""NUTS's step: one leapfrog step in every chain's own tree and the tree's bookkeeping
(multinomial sampling, U-turn checks at Betancourt's checkpoints, subtree merges, a finished
tree's draw and the next tree), branch-free so that the driver may run it as one compiled graph
(:func:`tree_step`). The loop around it, and warmup, are :mod:`zoo_inference.samplers.nuts`'s."""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping, Sequence
from typing import Any

import torch

from .base import Density
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
    cq: torch.Tensor,
    cp: torch.Tensor,
    cg: torch.Tensor,
    clp: torch.Tensor,
    eps: torch.Tensor,
    inv_mass: torch.Tensor,
    h0: torch.Tensor,
    s_logw: torch.Tensor,
    s_sum: torch.Tensor,
    sq: torch.Tensor,
    slp: torch.Tensor,
    sg: torch.Tensor,
    s_turn: torch.Tensor,
    s_div: torch.Tensor,
    p_ck: torch.Tensor,
    sum_ck: torch.Tensor,
    sum_acc: torch.Tensor,
    n_leaves: torch.Tensor,
    live: torch.Tensor,
    u: torch.Tensor,
    write: torch.Tensor,
    check: torch.Tensor,
    eager: bool = False,
) -> tuple[torch.Tensor, ...]:
    """One leaf of the subtree being built, for the ``live`` chains (the others keep their
    state): a leapfrog step from the edge (cq, cp, cg, clp), multinomial sampling of the
    subtree's proposal (sq, slp, sg) with uniform ``u``, its log weight and momentum sum, the
    acceptance statistic and divergence. U-turn checkpoints: ``write`` (max_depth,) marks the
    row of ``p_ck`` / ``sum_ck`` this leaf stores (even leaves), ``check`` the rows it is checked
    against (odd leaves; :func:`checkpoints`). ``eager``: skip the masking that changes nothing
    (every chain live, no proposal taken, no checkpoint written or checked)."""
    nq, np_, nlp, ng = leapfrog(density, cq, cp, cg, eps, inv_mass)
    lv = live[:, None]
    every = eager and bool(live.all())

    def live_only(mask: torch.Tensor, new: Any, old: Any) -> Any:  # where the chain is live
        return new if every else torch.where(mask, new, old)

    cq, cp, cg = live_only(lv, nq, cq), live_only(lv, np_, cp), live_only(lv, ng, cg)
    clp = live_only(live, nlp, clp)
    delta = torch.nan_to_num(kinetic(cp, inv_mass) - clp - h0, nan=math.inf)
    new_logw = torch.logaddexp(s_logw, -delta)
    take = live_only(live, u < (-delta - new_logw).exp(), False)
    if not eager or bool(take.any()):
        tk = take[:, None]
        sq, slp = torch.where(tk, cq, sq), torch.where(take, clp, slp)
        sg = torch.where(tk, cg, sg)
    s_logw = live_only(live, new_logw, s_logw)
    s_sum = live_only(lv, s_sum + cp, s_sum)
    sum_acc = sum_acc + live_only(live, torch.clamp(torch.exp(-delta), max=1.0), 0.0)
    n_leaves = n_leaves + live_only(live, 1.0, 0.0)
    s_div = s_div | live_only(live, delta > MAX_DELTA_ENERGY, False)
    if not eager or bool(write.any()):
        stored = write[:, :, None] & lv[None]
        p_ck = torch.where(stored, cp[None], p_ck)
        sum_ck = torch.where(stored, s_sum[None], sum_ck)
    if not eager or bool(check.any()):
        turned = is_turning(p_ck, cp[None], s_sum[None] - sum_ck + p_ck, inv_mass[None])
        s_turn = s_turn | ((turned & check).any(0) & live)
    return (
        cq,
        cp,
        cg,
        clp,
        s_logw,
        s_sum,
        sq,
        slp,
        sg,
        s_turn,
        s_div,
        p_ck,
        sum_ck,
        sum_acc,
        n_leaves,
        live & ~s_turn & ~s_div,
    )


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


# The state of every chain in the asynchronous sampler (:mod:`zoo_inference.samplers.nuts`): the
# current draw (q, lp, g) and the initial energy h0; the tree's left and right edges (position,
# momentum, gradient, log density), its proposal, log weight and momentum sum; its depth, the
# subtree's leaf index n and direction; the subtree's edge (c*) and its own weight, momentum
# sum, proposal, turned and diverged flags; the U-turn checkpoints; the acceptance sum, leaf
# count and divergence of the tree. Held between steps as five tensors, one per shape and dtype: a
# compiled step's call costs per tensor passed in and out (inductor's wrapper checks each
# input's strides and allocates each output; AOT autograd's runtime wrapper, no longer used,
# visited each), and 36 tensors cost more than the step's own kernels (probabilistic_pca's
# NUTS: a step took about 520 us, its kernels 145).
ASYNC_GROUPS = (
    ("q", "g", "lq", "lpm", "lg", "rq", "rpm", "rg", "pq", "pg", "p_sum",
     "cq", "cp", "cg", "s_sum", "sq", "sg"),  # (chains, D)
    ("lp", "h0", "llp", "rlp", "plp", "log_w", "clp", "s_logw", "slp", "sum_acc", "n_leaves"),
    ("depth", "n"),  # long (chains,)
    ("right_way", "s_turn", "s_div", "diverging"),  # bool (chains,)
    ("p_ck", "sum_ck"),  # (max_depth, chains, D)
)  # fmt: skip


def unpack(groups: Sequence[torch.Tensor]) -> dict[str, torch.Tensor]:
    """The packed state (:data:`ASYNC_GROUPS`) as one tensor a name (views)."""
    return {
        name: t for names, g in zip(ASYNC_GROUPS, groups, strict=True)
        for name, t in zip(names, g.unbind(0), strict=True)
    }  # fmt: skip


def pack(st: Mapping[str, torch.Tensor]) -> tuple[torch.Tensor, ...]:
    """The state as :data:`ASYNC_GROUPS`' five tensors."""
    return tuple(torch.stack([st[name] for name in names]) for names in ASYNC_GROUPS)


def new_trees(
    st: dict[str, torch.Tensor], start: torch.Tensor, p0: torch.Tensor, inv_mass: torch.Tensor
) -> None:
    """Chains in ``start`` begin a new iteration at their current draw with momentum ``p0``."""
    s, m = start, start[:, None]
    h0 = -st["lp"] + kinetic(p0, inv_mass)
    st["h0"] = torch.where(s, h0, st["h0"])
    for side in "lr":
        st[f"{side}q"] = torch.where(m, st["q"], st[f"{side}q"])
        st[f"{side}pm"] = torch.where(m, p0, st[f"{side}pm"])
        st[f"{side}g"] = torch.where(m, st["g"], st[f"{side}g"])
        st[f"{side}lp"] = torch.where(s, st["lp"], st[f"{side}lp"])
    st["pq"], st["pg"] = torch.where(m, st["q"], st["pq"]), torch.where(m, st["g"], st["pg"])
    st["plp"] = torch.where(s, st["lp"], st["plp"])
    st["log_w"] = torch.where(s, 0.0, st["log_w"])
    st["p_sum"] = torch.where(m, p0, st["p_sum"])
    st["depth"] = torch.where(s, 0, st["depth"])
    st["sum_acc"] = torch.where(s, 0.0, st["sum_acc"])
    st["n_leaves"] = torch.where(s, 0.0, st["n_leaves"])
    st["diverging"] = st["diverging"] & ~s


def new_subtrees(st: dict[str, torch.Tensor], start: torch.Tensor, coin: torch.Tensor) -> None:
    """Chains in ``start`` begin a subtree of 2**depth leaves from the edge a coin picks."""
    s, m = start, start[:, None]
    st["right_way"] = torch.where(s, coin < 0.5, st["right_way"])
    rw = st["right_way"][:, None]
    for c, side in (("cq", "q"), ("cp", "pm"), ("cg", "g")):
        edge = torch.where(rw, st[f"r{side}"], st[f"l{side}"])
        st[c] = torch.where(m, edge, st[c])
    edge_lp = torch.where(st["right_way"], st["rlp"], st["llp"])
    st["clp"] = torch.where(s, edge_lp, st["clp"])
    st["n"] = torch.where(s, 0, st["n"])
    st["s_logw"] = torch.where(s, -math.inf, st["s_logw"])
    st["s_sum"] = torch.where(m, 0.0, st["s_sum"])
    st["sq"], st["sg"] = torch.where(m, st["cq"], st["sq"]), torch.where(m, st["cg"], st["sg"])
    st["slp"] = torch.where(s, st["clp"], st["slp"])
    st["s_turn"] = st["s_turn"] & ~s
    st["s_div"] = st["s_div"] & ~s


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
    results: most calls finish no subtree). Returns the new state, then per chain: whether it
    emitted a draw, and the draw's statistics (acceptance, divergence, depth, leapfrog steps,
    energy)."""
    k = len(ASYNC_GROUPS)
    st = unpack(args[:k])
    eps, inv_mass, active, uniforms, normals, factor, write_tab, check_tab = args[k:]
    u, coin_merge, coin_dir = uniforms.unbind(0)
    p_new = draw_momenta(normals, factor)  # a new tree's momenta, for chains whose tree ends
    max_depth = write_tab.shape[1]
    n = st["n"].clamp(max=write_tab.shape[0] - 1)
    write, check = write_tab[n].T, check_tab[n].T  # (max_depth, chains)
    signed = torch.where(st["right_way"][:, None], eps, -eps)
    out = leaf_step(
        density,
        *(st[x] for x in ("cq", "cp", "cg", "clp")),
        signed,
        inv_mass,
        st["h0"],
        *(st[x] for x in ("s_logw", "s_sum", "sq", "slp", "sg", "s_turn", "s_div")),
        st["p_ck"],
        st["sum_ck"],
        st["sum_acc"],
        st["n_leaves"],
        active,
        u,
        write,
        check,
        eager=eager,
    )
    names = ("cq", "cp", "cg", "clp", "s_logw", "s_sum", "sq", "slp", "sg", "s_turn", "s_div")
    st.update(zip(names, out[:11], strict=True))
    st["p_ck"], st["sum_ck"], st["sum_acc"], st["n_leaves"] = out[11:15]
    full = st["n"] + 1 >= torch.ones_like(st["depth"]) << st["depth"]
    sub_done = active & (st["s_turn"] | st["s_div"] | full)
    if eager and not bool(sub_done.any()):  # no subtree finished: no merge, no draw
        st["n"] = st["n"] + 1
        return (*pack(st), torch.zeros_like(sub_done), *tree_statistics(st))
    # merge the finished subtrees: never take a proposal from one that turned or diverged
    bad = st["s_turn"] | st["s_div"]
    accept = torch.where(bad, 0.0, torch.clamp(torch.exp(st["s_logw"] - st["log_w"]), max=1.0))
    take = sub_done & (coin_merge < accept)
    st["pq"] = torch.where(take[:, None], st["sq"], st["pq"])
    st["pg"] = torch.where(take[:, None], st["sg"], st["pg"])
    st["plp"] = torch.where(take, st["slp"], st["plp"])
    for side, mask in (("r", sub_done & st["right_way"]), ("l", sub_done & ~st["right_way"])):
        m = mask[:, None]
        st[f"{side}q"] = torch.where(m, st["cq"], st[f"{side}q"])
        st[f"{side}pm"] = torch.where(m, st["cp"], st[f"{side}pm"])
        st[f"{side}g"] = torch.where(m, st["cg"], st[f"{side}g"])
        st[f"{side}lp"] = torch.where(mask, st["clp"], st[f"{side}lp"])
    st["log_w"] = torch.where(sub_done, torch.logaddexp(st["log_w"], st["s_logw"]), st["log_w"])
    st["p_sum"] = torch.where(sub_done[:, None], st["p_sum"] + st["s_sum"], st["p_sum"])
    turning = is_turning(st["lpm"], st["rpm"], st["p_sum"], inv_mass)
    st["diverging"] = st["diverging"] | (sub_done & st["s_div"])
    st["depth"] = st["depth"] + sub_done.long()
    tree_done = sub_done & (bad | turning | (st["depth"] >= max_depth))
    emitted = tree_statistics(st)
    if not eager or bool(tree_done.any()):
        # a finished tree: its proposal is the chain's next draw, and a new tree starts there
        st["q"] = torch.where(tree_done[:, None], st["pq"], st["q"])
        st["g"] = torch.where(tree_done[:, None], st["pg"], st["g"])
        st["lp"] = torch.where(tree_done, st["plp"], st["lp"])
        new_trees(st, tree_done, p_new, inv_mass)
    st["n"] = st["n"] + 1
    new_subtrees(st, sub_done, coin_dir)
    return (*pack(st), tree_done, *emitted)


def tree_statistics(st: Mapping[str, torch.Tensor]) -> tuple[torch.Tensor, ...]:
    """The statistics of each chain's current tree, emitted with its draw: acceptance,
    divergence, depth, leapfrog steps, energy."""
    return (
        st["sum_acc"] / st["n_leaves"].clamp(min=1),
        st["diverging"],
        st["depth"],
        st["n_leaves"],
        st["h0"].clone(),  # a tensor of its own, not a view into the state passed on
    )
