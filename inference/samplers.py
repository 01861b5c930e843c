"""Many-chain samplers on a batched log density: the state of every chain is one row of a
``(chains, D)`` tensor and each step advances all chains at once.

* :func:`nuts` — the No-U-Turn sampler (Hoffman & Gelman 2014) in its multinomial form with
  iterative tree doubling (Betancourt 2017; as Stan and NumPyro build it), the chains
  asynchronous: each call of the density takes one leapfrog step in every chain's own tree, and
  no chain waits for another's. Per-chain step size by dual averaging and per-chain diagonal
  mass matrix by Stan's windowed warmup, each chain on its own clock.
* :func:`chees` — ChEES-HMC (Hoffman, Radul & Sountsov 2021): all chains share one step size
  (dual averaging on the harmonic mean of the acceptance probabilities) and one trajectory
  length (Adam on the ChEES criterion), the step count jittered by a Halton sequence, and one
  diagonal mass matrix for all chains (their within-chain variances, averaged).
* :func:`hmc` — static HMC, its integration time jittered around a fixed mean, adapted like
  :func:`nuts`.
* :func:`rwmh` — random-walk Metropolis–Hastings with a diagonal proposal.

Every function takes ``density(theta) -> (log_p, grad)`` and returns a :class:`Samples`.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from tqdm.auto import tqdm

Density = Callable[[torch.Tensor], tuple[torch.Tensor, torch.Tensor]]
MAX_DELTA_ENERGY = 1000.0  # an energy error above this is a divergence (Stan, NumPyro)


@dataclass
class Samples:
    """Draws on the unconstrained space and per-draw statistics, each ``(chains, draws, ...)``."""

    theta: torch.Tensor  # (chains, draws, D)
    stats: dict[str, torch.Tensor] = field(default_factory=dict)  # name -> (chains, draws)
    gradient_evals: int = 0  # density calls x chains, warmup included
    info: dict[str, float | list[float]] = field(default_factory=dict)


# --------------------------------------------------------------------------- shared pieces


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


def regularised_variance(x: torch.Tensor, dim: int | tuple[int, ...]) -> torch.Tensor:
    """Stan's shrunk variance estimate ``n/(n+5) var + 1e-3 * 5/(n+5)`` over ``dim``."""
    n = x.shape[dim] if isinstance(dim, int) else math.prod(x.shape[d] for d in dim)
    var = x.var(dim=dim, unbiased=True) if n > 1 else torch.ones_like(x.select(0, 0))
    return (n / (n + 5.0)) * var + 1e-3 * (5.0 / (n + 5.0))


def velocity(p: torch.Tensor, inv_mass: torch.Tensor) -> torch.Tensor:
    """dq/dt = M^-1 p: ``inv_mass`` is diagonal, shaped like ``p`` (chains, D), or dense, one
    dimension more (``(1 | chains, D, D)``)."""
    if inv_mass.dim() > p.dim():
        return torch.matmul(inv_mass, p.unsqueeze(-1)).squeeze(-1)
    return inv_mass * p


def regularised_covariance(x: torch.Tensor) -> torch.Tensor:
    """Each chain's covariance of its draws ``x`` (chains, n, D), as (chains, D, D), shrunk
    towards ``1e-3 I`` as Stan shrinks its dense metric: ``n/(n+5) S + 1e-3 * 5/(n+5) I``."""
    B, n, D = x.shape
    xc = x - x.mean(1, keepdim=True)
    cov = torch.einsum("bnd,bne->bde", xc, xc) / max(n - 1, 1)
    eye = torch.eye(D, dtype=x.dtype)
    return (n / (n + 5.0)) * cov + 1e-3 * (5.0 / (n + 5.0)) * eye


# ChEES's metric is dense up to this many dimensions by default (NUTS's with dense_mass=None):
# a D x D product per leapfrog step costs less than the density there, and ChEES's first window
# pools 32 chains x 25 draws (eight per dimension at 100). On logistic regression (31 correlated
# coefficients) ChEES's gradients per effective draw fall from 64 to 8; on eight schools and the
# mixtures they stay within noise.
DENSE_MAX_DIM = 100

# NUTS estimates each chain's dense metric from its own window only where the window
# holds at least this many draws per dimension (else its variances, as a diagonal): a covariance
# from fewer draws than dimensions is singular, and the directions it misses would get almost no
# velocity, so the next window could not see them either.
DENSE_DRAWS_PER_DIM = 2


def per_chain_metric(window: torch.Tensor, dense: bool) -> torch.Tensor:
    """Each chain's inverse mass matrix from its own warmup window (chains, n, D): Stan's
    regularised variances (chains, D), or with ``dense`` its regularised covariance (chains, D,
    D), diagonal while the window is shorter than ``DENSE_DRAWS_PER_DIM`` draws a dimension."""
    if not dense:
        return regularised_variance(window, 1)
    if window.shape[1] < DENSE_DRAWS_PER_DIM * window.shape[2]:
        return torch.diag_embed(regularised_variance(window, 1))
    return regularised_covariance(window)


def momentum_map(inv_mass: torch.Tensor) -> torch.Tensor:
    """What turns standard normals ``z`` into momenta ``p ~ N(0, M)`` (:func:`draw_momenta`):
    the diagonal's square roots (``p = z / s``), or for a dense ``M^-1 = L L^T`` the matrix
    ``L^-T`` (``p = L^-T z``, whose covariance is ``(L L^T)^-1``)."""
    if inv_mass.dim() == 3:
        chol = torch.linalg.cholesky(inv_mass)
        eye = torch.eye(inv_mass.shape[-1], dtype=inv_mass.dtype).expand_as(chol)
        return torch.linalg.solve_triangular(chol.mT, eye, upper=True)
    return inv_mass.sqrt()


def draw_momenta(z: torch.Tensor, factor: torch.Tensor) -> torch.Tensor:
    """Momenta from standard normals ``z`` (chains, D) and :func:`momentum_map`'s ``factor``."""
    if factor.dim() > z.dim():
        return torch.matmul(factor, z.unsqueeze(-1)).squeeze(-1)
    return z / factor


def kinetic(p: torch.Tensor, inv_mass: torch.Tensor) -> torch.Tensor:
    return 0.5 * (p * velocity(p, inv_mass)).sum(-1)


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


def _progress(total: int, show: bool, desc: str) -> tqdm:
    return tqdm(total=total, disable=not show, desc=desc, leave=False, mininterval=0.5)


# --------------------------------------------------------------------------------- NUTS


def _is_turning(
    p_left: torch.Tensor, p_right: torch.Tensor, p_sum: torch.Tensor, inv_mass: torch.Tensor
) -> torch.Tensor:
    """The generalised no-U-turn criterion (Betancourt 2017, A.4.2) on the momenta at the two
    ends of a (sub)trajectory and their sum."""
    rho = p_sum - 0.5 * (p_left + p_right)
    left, right = velocity(p_left, inv_mass), velocity(p_right, inv_mass)
    return ((left * rho).sum(-1) <= 0) | ((right * rho).sum(-1) <= 0)


def _checkpoints(leaf: int) -> tuple[int, int]:
    """Which stored momenta the new leaf ``leaf`` (0-based, within its subtree) closes a
    sub-subtree with: the checks run from index ``hi`` down to ``lo`` (NumPyro's iterative
    form: ``hi`` is the number of set bits of ``leaf >> 1``; ``hi - lo + 1`` the number of
    trailing one bits of ``leaf``)."""
    hi = bin(leaf >> 1).count("1")
    trailing = len(bin(leaf)) - len(bin(leaf).rstrip("1")) if leaf & 1 else 0
    return hi - trailing + 1, hi


class Step:
    """A sampler's step ``fn(density, *tensors) -> tensors``, written without Python branches on
    values: run as one graph through the density where the density offers it (``density.fuse``
    of :class:`inference.density.BatchedDensity`: compiled, or TorchScript where the density is
    traced), else eagerly, calling the density (``eager``: a form of ``fn`` that may skip work
    by branching on values, with the same results). A step's arguments keep their shapes and
    dtypes from call to call (one sampler run), so its fused form, once there, is looked up
    again only when the density's mode changes (a traced density compiled mid-run).
    ``reuse_outputs``: the caller is done with a call's outputs by the call after next (a
    sampler's state passed on from step to step), so a compiled step may write into the buffers
    of two calls before (see :meth:`inference.density.BatchedDensity.fuse`)."""

    def __init__(
        self,
        density: Density,
        fn: Callable[..., tuple[torch.Tensor, ...]],
        eager: Callable[..., tuple[torch.Tensor, ...]] | None = None,
        *,
        reuse_outputs: bool = False,
    ) -> None:
        self.density, self.fn, self.reuse_outputs = density, fn, reuse_outputs
        self.eager = eager or fn  # the same step, free to branch on values: run uncompiled
        self._fuse = getattr(density, "fuse", None)
        self._fused: Callable[..., tuple[torch.Tensor, ...]] | None = None
        self._mode: object = ()  # the density's mode the fused form was asked for

    def __call__(self, *args: torch.Tensor) -> tuple[torch.Tensor, ...]:
        mode = getattr(self.density, "mode", None)
        if self._fuse is not None and (self._fused is None or mode != self._mode):
            # asked again while there is none, or the density compiled mid-run
            fused = self._fuse(self.fn, args, reuse_outputs=self.reuse_outputs)
            self._fused, self._mode = fused, mode
        fused = self._fused
        if fused is not None:
            try:
                return fused(*args)
            except RuntimeError:  # a chain's point breaks the model: the eager step copes
                pass
        return self.eager(self.density, *args)


def _nuts_leaf(
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
    against (odd leaves; :func:`_checkpoints`). ``eager``: skip the masking that changes nothing
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
        turned = _is_turning(p_ck, cp[None], s_sum[None] - sum_ck + p_ck, inv_mass[None])
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
def _checkpoint_masks(max_depth: int) -> tuple[torch.Tensor, torch.Tensor]:
    """For each leaf index below 2**(max_depth - 1), the checkpoint rows it writes and the rows
    it checks: two boolean tensors (leaves, max_depth)."""
    write, check = [], []
    rows = torch.arange(max_depth)
    none = torch.zeros(max_depth, dtype=torch.bool)
    for leaf in range(2 ** max(max_depth - 1, 0)):
        lo, hi = _checkpoints(leaf)
        write.append(rows == hi if leaf % 2 == 0 else none)
        check.append(none if leaf % 2 == 0 else (rows >= lo) & (rows <= hi))
    return torch.stack(write), torch.stack(check)


# The state of every chain in the asynchronous sampler (:func:`nuts_sample`): the current draw
# (q, lp, g) and the initial energy h0; the tree's left and right edges (position, momentum,
# gradient, log density), its proposal, log weight and momentum sum; its depth, the subtree's
# leaf index n and direction; the subtree's edge (c*) and its own weight, momentum sum,
# proposal, turned and diverged flags; the U-turn checkpoints; the acceptance sum, leaf count
# and divergence of the tree. Held between steps as five tensors, one per shape and dtype: a
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


def _unpack(groups: Sequence[torch.Tensor]) -> dict[str, torch.Tensor]:
    """The packed state (:data:`ASYNC_GROUPS`) as one tensor a name (views)."""
    return {
        name: t for names, g in zip(ASYNC_GROUPS, groups, strict=True)
        for name, t in zip(names, g.unbind(0), strict=True)
    }  # fmt: skip


def _pack(st: Mapping[str, torch.Tensor]) -> tuple[torch.Tensor, ...]:
    """The state as :data:`ASYNC_GROUPS`' five tensors."""
    return tuple(torch.stack([st[name] for name in names]) for names in ASYNC_GROUPS)


def _new_trees(
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


def _new_subtrees(st: dict[str, torch.Tensor], start: torch.Tensor, coin: torch.Tensor) -> None:
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


# The nodes NUTS's tree bookkeeping adds to the density's graph in the fused step (naive_bayes:
# 893 against the density's 612; eight_schools: 455 against 176), priced into the decision to
# compile: NUTS's compiles took 5.0-20.5 s in a cold quick report where the density alone
# predicted 4.5-11.2 s, and mid-sized runs compiled that ran faster traced (dirichlet_bigram
# 26.2 s against 13.0, gaussian_process 21.7 against 16.0). Priced so, two of the next cold
# report's NUTS cells stayed traced (three_coin 15.0 s -> 10.9, normal_gamma 8.1 -> 5.5).
NUTS_STEP_NODES = 280
# NUTS's calls whose random numbers (three uniforms and D normals a chain) are drawn at once:
# a call's share is two views, not two draws, an unbind and the momenta's product in Python
RANDOM_BLOCK = 64


def _nuts_async_step(
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
    st = _unpack(args[:k])
    eps, inv_mass, active, uniforms, normals, factor, write_tab, check_tab = args[k:]
    u, coin_merge, coin_dir = uniforms.unbind(0)
    p_new = draw_momenta(normals, factor)  # a new tree's momenta, for chains whose tree ends
    max_depth = write_tab.shape[1]
    n = st["n"].clamp(max=write_tab.shape[0] - 1)
    write, check = write_tab[n].T, check_tab[n].T  # (max_depth, chains)
    signed = torch.where(st["right_way"][:, None], eps, -eps)
    out = _nuts_leaf(
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
        return (*_pack(st), torch.zeros_like(sub_done), *_emitted(st))
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
    turning = _is_turning(st["lpm"], st["rpm"], st["p_sum"], inv_mass)
    st["diverging"] = st["diverging"] | (sub_done & st["s_div"])
    st["depth"] = st["depth"] + sub_done.long()
    tree_done = sub_done & (bad | turning | (st["depth"] >= max_depth))
    emitted = _emitted(st)
    if not eager or bool(tree_done.any()):
        # a finished tree: its proposal is the chain's next draw, and a new tree starts there
        st["q"] = torch.where(tree_done[:, None], st["pq"], st["q"])
        st["g"] = torch.where(tree_done[:, None], st["pg"], st["g"])
        st["lp"] = torch.where(tree_done, st["plp"], st["lp"])
        _new_trees(st, tree_done, p_new, inv_mass)
    st["n"] = st["n"] + 1
    _new_subtrees(st, sub_done, coin_dir)
    return (*_pack(st), tree_done, *emitted)


def _emitted(st: Mapping[str, torch.Tensor]) -> tuple[torch.Tensor, ...]:
    """The statistics of each chain's current tree, emitted with its draw: acceptance,
    divergence, depth, leapfrog steps, energy."""
    return (
        st["sum_acc"] / st["n_leaves"].clamp(min=1),
        st["diverging"],
        st["depth"],
        st["n_leaves"],
        st["h0"].clone(),  # a tensor of its own, not a view into the state passed on
    )


class PerChainAdaptation:
    """Stan's warmup for chains that reach their iterations at different times: each chain's
    dual averaging of its step size (:class:`DualAveraging`, updated only in the rows whose
    chain emitted a warmup draw), its mass matrix re-estimated from its own draws at the end of
    each of Stan's windows (then the step-size heuristic and a restart), its final step size
    the dual average's."""

    def __init__(self, step: torch.Tensor, warmup: int, target: float, D: int) -> None:
        self.da, self.warmup = DualAveraging(step, target), warmup
        self.ends = stan_windows(warmup)
        first = 0 if not self.ends else (75 if warmup >= 150 else int(0.15 * warmup))
        # (a warmup shorter than 20 iterations has no window)
        self.starts = dict(zip(self.ends, [first, *self.ends], strict=False))
        self.window = torch.zeros(step.shape[0], max(warmup, 1), D, dtype=step.dtype)


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
    bar: tqdm | None = None,
    warmup: int = 0,
    target_accept: float = 0.8,
) -> tuple[torch.Tensor, dict[str, torch.Tensor], int, torch.Tensor]:
    """``warmup`` adapting iterations, then ``num_samples`` NUTS draws, per chain, the chains
    asynchronous: each density call takes one leapfrog step in every chain's own tree, and a
    chain whose tree ends emits its draw and starts the next tree in the same call (in
    lockstep, every chain would wait for the longest tree of the batch). Warmup is Stan's, per
    chain (:class:`PerChainAdaptation`). Each chain follows the sequential sampler; only the
    order of the random numbers differs. Returns the draws (chains, num_samples, D), their
    statistics, the number of density calls (the step-size heuristic's included) and the final
    step sizes."""
    B, D = q.shape
    dtype = q.dtype
    tables = _checkpoint_masks(max_tree_depth)
    n = [len(names) for names in ASYNC_GROUPS]
    st = _unpack(
        (
            torch.zeros(n[0], B, D, dtype=dtype),
            torch.zeros(n[1], B, dtype=dtype),
            torch.zeros(n[2], B, dtype=torch.long),
            torch.zeros(n[3], B, dtype=torch.bool),
            torch.zeros(n[4], max_tree_depth, B, D, dtype=dtype),
        )
    )
    st.update(q=q, lp=logp, g=grad)

    began = [False]  # whether begin() changed st since it was last packed
    factor = momentum_map(inv_mass)

    def begin(rows: torch.Tensor, inv_mass: torch.Tensor) -> None:  # momenta under inv_mass
        nonlocal factor
        factor = momentum_map(inv_mass)
        p0 = draw_momenta(torch.randn(B, D, generator=gen, dtype=dtype), factor)
        _new_trees(st, rows, p0, inv_mass)
        _new_subtrees(st, rows, torch.rand(B, generator=gen, dtype=dtype))
        began[0] = True

    begin(torch.ones(B, dtype=torch.bool), inv_mass)
    packed = _pack(st)
    adapt = PerChainAdaptation(step, warmup, target_accept, D) if warmup else None
    eager = functools.partial(_nuts_async_step, eager=True)
    # a call's outputs are the state the next call takes, and read before the call after it
    step_fn = Step(density, _nuts_async_step, eager, reuse_outputs=True)
    getattr(density, "expect_step", lambda nodes: None)(NUTS_STEP_NODES)  # the compile's price
    total = warmup + num_samples
    draws = torch.empty(B, num_samples, D, dtype=dtype)
    names = ("accept", "diverging", "tree_depth", "n_steps", "energy")
    stats = {k: torch.zeros(B, num_samples, dtype=dtype) for k in names}
    stats["diverging"] = torch.zeros(B, num_samples, dtype=torch.bool)
    stats["tree_depth"] = torch.zeros(B, num_samples, dtype=torch.long)
    count = torch.zeros(B, dtype=torch.long)  # iterations done, warmup included
    calls, shown = 0, 0
    tick = getattr(density, "tick", lambda it, total: None)
    k = len(ASYNC_GROUPS)
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
        done, emitted = out[k], out[k + 1 :]  # done: a tree ended, only ever in active chains
        if not done.any():
            continue
        st = _unpack(packed)
        it = count
        warm = done & (it < warmup)
        if adapt is not None and warm.any():
            inv_mass, c = _adapt_rows(
                adapt, warm, it, st, emitted[0], density, inv_mass, gen, begin
            )
            calls += c
            if began[0]:  # a window's end restarted some chains' trees
                packed, began[0] = _pack(st), False
            final = warm & (it + 1 == warmup)  # warmup's end: the dual average's step size
            step = torch.where(final, adapt.da.final, adapt.da.log_step.exp())
            adapt.da.restart(step, final)  # done adapting: log_step holds the final step
            eps = step[:, None]
        keep = done & (it >= warmup)
        if keep.any():
            rows = keep.nonzero().squeeze(1)
            at = it[rows] - warmup
            draws[rows, at] = st["q"][rows]
            for name, value in zip(names, emitted, strict=True):
                stats[name][rows, at] = value[rows].to(stats[name].dtype)
        count = count + done.long()
        active = count < total
        running = bool(active.any())
        least = int(count.min())
        if least > shown:
            tick(least - 1, total)
            if bar is not None:
                bar.update(least - shown)
            shown = least
    return draws, stats, calls, step


def _adapt_rows(
    adapt: PerChainAdaptation,
    rows: torch.Tensor,
    it: torch.Tensor,
    st: dict[str, torch.Tensor],
    accept: torch.Tensor,
    density: Density,
    inv_mass: torch.Tensor,
    gen: torch.Generator,
    begin: Callable[[torch.Tensor, torch.Tensor], None],
) -> tuple[torch.Tensor, int]:
    """Warmup bookkeeping for the chains in ``rows``, which just finished iteration ``it``:
    dual averaging; the draw into the chain's window; at a window's end, the chain's mass
    matrix from its window, the step-size heuristic, a restart of its dual averaging and of the
    tree it began (its momentum was drawn under the old mass matrix). Returns the mass
    matrices and the density calls spent."""
    adapt.da.update(accept, rows)
    idx = rows.nonzero().squeeze(1)
    adapt.window[idx, it[idx]] = st["q"][idx]
    calls = 0
    for end in adapt.ends:
        at_end = rows & (it + 1 == end)
        if not at_end.any():
            continue
        r = at_end.nonzero().squeeze(1)
        window = adapt.window[r, adapt.starts[end] : end]
        inv_mass = inv_mass.clone()
        inv_mass[r] = per_chain_metric(window, inv_mass.dim() == 3)
        current = adapt.da.log_step.exp()
        found, c = find_step_size(density, st["q"], st["lp"], st["g"], inv_mass, current, gen)
        calls += c
        adapt.da.restart(found, at_end)
        begin(at_end, inv_mass)
    return inv_mass, calls


def _start(
    density: Density, theta0: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    logp, grad = density(theta0)
    return theta0, logp, grad


def nuts(
    density: Density,
    theta0: torch.Tensor,
    *,
    num_samples: int,
    warmup: int,
    gen: torch.Generator,
    target_accept: float = 0.8,
    max_tree_depth: int = 10,
    dense_mass: bool | None = False,
    progress: bool = False,
) -> Samples:
    """NUTS for every chain of ``theta0`` (chains, D), the chains asynchronous in warmup and
    sampling alike (:func:`nuts_sample`): each chain's step size by dual averaging and its
    mass matrix re-estimated at the ends of Stan's windows, on its own clock: Stan's
    ``diag_e``, or with ``dense_mass`` its ``dense_e`` (:func:`per_chain_metric`; ``None``:
    dense up to :data:`DENSE_MAX_DIM` dimensions). Diagonal by default, as in Stan: estimated
    from one chain's window, a dense metric pays only where the posterior is correlated
    (linear_regression, quick budget: 10.6 leapfrog steps an iteration against 44.7) and
    costs elsewhere (naive_bayes 12.9 a draw against 7.0, eight_schools 25 against 16)."""
    q, logp, grad = _start(density, theta0)
    B, D = q.shape
    inv_mass = _initial_metric(B, D, dense_mass, q.dtype)
    step, calls = find_step_size(
        density, q, logp, grad, inv_mass, torch.ones(B, dtype=q.dtype), gen
    )
    bar = _progress(warmup + num_samples, progress, "nuts")
    draws, stats, c, step = nuts_sample(
        density, q, logp, grad, step, inv_mass, gen, num_samples, max_tree_depth, bar,
        warmup=warmup, target_accept=target_accept,
    )  # fmt: skip
    bar.close()
    stats["step_size"] = step[:, None].expand(B, num_samples)
    info = {"step_size": step.tolist(), "dense_mass": inv_mass.dim() == 3}
    return Samples(draws, stats, (1 + calls + c) * B, info)


def _dense(D: int, dense_mass: bool | None) -> bool:
    """Whether a sampler's metric is dense: as asked, or (None) up to :data:`DENSE_MAX_DIM`."""
    return D <= DENSE_MAX_DIM if dense_mass is None else bool(dense_mass)


def _initial_metric(B: int, D: int, dense_mass: bool | None, dtype: torch.dtype) -> torch.Tensor:
    """Every chain's first inverse mass matrix, the identity: (chains, D) ones, or dense
    (chains, D, D) from the start (a compiled step is traced for one shape of the metric)."""
    if _dense(D, dense_mass):
        return torch.eye(D, dtype=dtype).expand(B, D, D).clone()
    return torch.ones(B, D, dtype=dtype)


def hmc(
    density: Density,
    theta0: torch.Tensor,
    *,
    num_samples: int,
    warmup: int,
    gen: torch.Generator,
    target_accept: float = 0.8,
    trajectory_length: float = 2.0,
    max_steps: int = 100,
    progress: bool = False,
) -> Samples:
    """Static HMC: each draw integrates for ``2 u trajectory_length``, ``u`` from a Halton
    sequence shared by the chains (as :func:`chees` jitters its T), in ``2 u trajectory_length
    / step`` leapfrog steps (at most ``max_steps``), all chains together (the chains' step
    counts differ: a chain that has done its steps waits, masked). Adapted like :func:`nuts`.

    The jitter keeps the mean integration time and breaks the periodicity of a fixed one
    (Neal 2011, §5.4.2.3): a fixed time near half a period of a direction lands each draw
    near the mirror image of the last, so the draws anti-correlate (bulk ESS above the draws)
    while their distance from the centre stays put, and the folded R-hat saw it. In the quick
    report, fixed: R-hat 1.010-1.022 with bulk ESS 2347-6602 from 2000 draws on 7 models."""

    def transition(q, lp, g, step, im, it):  # noqa: ANN001, ANN202 - local
        duration = 2 * halton(it + 1) * trajectory_length
        return hmc_transition(density, q, lp, g, step, im, gen, duration / step, max_steps)

    return _adapted_chain(
        density,
        theta0,
        num_samples=num_samples,
        warmup=warmup,
        gen=gen,
        target_accept=target_accept,
        progress=progress,
        desc="hmc",
        transition=transition,
    )


def hmc_transition(
    density: Density,
    q: torch.Tensor,
    logp: torch.Tensor,
    grad: torch.Tensor,
    step: torch.Tensor,
    inv_mass: torch.Tensor,
    gen: torch.Generator,
    n_steps: torch.Tensor,
    max_steps: int,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, dict[str, torch.Tensor], int]:
    """``n_steps`` (per chain, rounded up, capped at ``max_steps``) leapfrog steps and a
    Metropolis correction, every chain at once (a chain whose steps are done waits, masked)."""
    *state, stats, calls, _, _ = _hmc_with_proposal(
        density, q, logp, grad, step, inv_mass, gen, n_steps, max_steps
    )
    return (*state, stats, calls)


def _adapted_chain(
    density: Density,
    theta0: torch.Tensor,
    *,
    num_samples: int,
    warmup: int,
    gen: torch.Generator,
    target_accept: float,
    progress: bool,
    desc: str,
    transition: Callable[..., tuple],
) -> Samples:
    """Warmup (Stan's: dual averaging of each chain's step size, its diagonal mass matrix from
    the draws of each slow window, the step size heuristic and a restart after each) and
    sampling, for a per-chain transition kernel, the chains in lockstep. ``transition(q, logp,
    grad, step, inv_mass, iteration)`` (iteration from 0, warmup included) returns the new
    ``q, logp, grad``, its statistics and its density calls."""
    q, logp, grad = _start(density, theta0)
    B, D = q.shape
    inv_mass = torch.ones(B, D, dtype=q.dtype)
    calls = 1
    step, c = find_step_size(density, q, logp, grad, inv_mass, torch.ones(B, dtype=q.dtype), gen)
    calls += c
    da = DualAveraging(step, target_accept)
    ends = stan_windows(warmup)
    window_start = 0 if not ends else (75 if warmup >= 150 else int(0.15 * warmup))
    window: list[torch.Tensor] = []
    draws = torch.empty(B, num_samples, D, dtype=q.dtype)
    stats: dict[str, list[torch.Tensor]] = {}
    bar = _progress(warmup + num_samples, progress, desc)
    tick = getattr(density, "tick", lambda it, total: None)
    for it in range(warmup + num_samples):
        q, logp, grad, st, c = transition(q, logp, grad, step, inv_mass, it)
        calls += c
        tick(it, warmup + num_samples)
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
        bar.update(1)
    bar.close()
    out = {k: torch.stack(v, 1) for k, v in stats.items()}
    out["step_size"] = step[:, None].expand(B, num_samples)
    return Samples(draws, out, calls * B, {"step_size": step.tolist()})


# --------------------------------------------------------------------------------- ChEES


def halton(i: int, base: int = 2) -> float:
    """The ``i``-th element (from 1) of the van der Corput sequence in ``base``: low-discrepancy
    jitter in (0, 1)."""
    f, r = 1.0, 0.0
    while i > 0:
        f /= base
        r += f * (i % base)
        i //= base
    return r


class Adam:
    """Adam on a scalar (Kingma & Ba 2015), maximising."""

    def __init__(self, lr: float, beta1: float = 0.0, beta2: float = 0.95) -> None:
        self.lr, self.b1, self.b2 = lr, beta1, beta2
        self.m = self.v = 0.0
        self.t = 0

    def step(self, x: float, grad: float) -> float:
        self.t += 1
        self.m = self.b1 * self.m + (1 - self.b1) * grad
        self.v = self.b2 * self.v + (1 - self.b2) * grad * grad
        m_hat = self.m / (1 - self.b1**self.t)
        v_hat = self.v / (1 - self.b2**self.t)
        return x + self.lr * m_hat / (math.sqrt(v_hat) + 1e-8)


CHEES_LOG_CLIP = 0.35  # the largest move of log T per warmup iteration (TFP's log(2) / 2)


def chees(
    density: Density,
    theta0: torch.Tensor,
    *,
    num_samples: int,
    warmup: int,
    gen: torch.Generator,
    target_accept: float = 0.651,
    learning_rate: float = 0.05,
    max_steps: int = 1000,
    dense_mass: bool | None = None,
    progress: bool = False,
) -> Samples:
    """ChEES-HMC: one step size and one trajectory length T for all chains, adapted in warmup;
    each draw integrates for ``2 u T`` (``u`` from a Halton sequence) with the Metropolis
    correction. Warmup: dual averaging of the step size on the harmonic mean of the chains'
    acceptance probabilities; Adam on log T along the gradient of the ChEES criterion
    E[(|q' - E q'|^2 - |q - E q|^2)^2] / 4, each chain's term weighted by its acceptance
    probability, T starting at one step size, each move of log T clipped to ``CHEES_LOG_CLIP``
    and the T used the running average of log T with weights ``t**-0.5`` (as TFP and BlackJAX
    do: Adam's raw iterate is a random walk on the noisy gradient, which drifted to 60-200
    leapfrog steps a draw on eight schools); a diagonal mass matrix shared by the chains
    (their within-chain variances over each of Stan's warmup windows, averaged), then the
    step size found afresh. ``dense_mass``: the same pooled estimate as a full covariance
    (``None``: dense up to :data:`DENSE_MAX_DIM` dimensions).

    At each window's end a chain stuck far below the others (:func:`stuck_chains`) is restarted
    where a chain that is not stuck is, and its window is left out of the metric: one step size
    and one T for every chain cannot suit a narrow basin and the posterior at once (on
    gaussian_mixture, chains in a one-wide-component basin 150 nats down held the shared step
    size at 0.1-0.2 against 0.7, and R-hat at 1.8-4.0 at seeds 1-3). Warmup only, so the draws
    keep their stationary law; but restarted chains share a start with their donors, which
    nested R-hat's superchains assume independent: ``restarted_chains`` in the diagnostics
    counts them."""
    q, logp, grad = _start(density, theta0)
    B, D = q.shape
    dtype = q.dtype
    dense = _dense(D, dense_mass)
    # dense from the start: a compiled step is traced for one shape of the metric
    inv_mass = torch.eye(D, dtype=dtype)[None] if dense else torch.ones(B, D, dtype=dtype)
    calls = 1
    step_b, c = find_step_size(density, q, logp, grad, inv_mass, torch.ones(B, dtype=dtype), gen)
    calls += c
    step = float(step_b.median())
    da = DualAveraging(torch.tensor([step], dtype=dtype), target_accept)
    log_T = math.log(step)  # one leapfrog step; Adam grows it from there
    adam = Adam(learning_rate)
    log_T_avg, updates = log_T, 0
    ends = set(stan_windows(warmup))
    window: list[torch.Tensor] = []
    window_lp: list[torch.Tensor] = []
    restarted = 0
    draws = torch.empty(B, num_samples, D, dtype=dtype)
    stats: dict[str, list[torch.Tensor]] = {}
    bar = _progress(warmup + num_samples, progress, "chees")
    # the compile is weighed on the draws' own pace, from the end of warmup: the iterations
    # before the metric settles cost several times the draws (naive_bayes, 32 chains, traced:
    # the first 150 of 800 iterations took 5.0 of 8.2 s), so projected from the first 2% the
    # run looked four times its length, and a 13 s compile was made for a 13 s traced run
    tick = getattr(density, "tick", lambda it, total: None)
    restart_pace = getattr(density, "restart_pace", lambda: None)
    T = math.exp(log_T)
    for it in range(warmup + num_samples):
        if it == warmup:
            restart_pace()
        u = halton(it + 1)
        n_steps = torch.full((B,), max(1.0, math.ceil(2 * u * T / step)), dtype=dtype)
        steps = torch.full((B,), step, dtype=dtype)
        q_new, lp_new, g_new, st, c, proposal, p_end = _hmc_with_proposal(
            density, q, logp, grad, steps, inv_mass, gen, n_steps, max_steps
        )
        calls += c
        if it >= warmup:
            tick(it - warmup, num_samples)
        if it < warmup:
            acc = st["accept"]
            ok = ~st["diverging"] & torch.isfinite(proposal).all(-1)
            # step size: dual averaging on the harmonic mean of acceptance
            # (a chain stuck far out accepts nothing: 0.01 keeps it from zeroing the mean)
            harmonic = 1.0 / (1.0 / acc[ok].clamp(min=0.01)).mean() if ok.any() else 0.0
            step = float(da.update(torch.as_tensor([float(harmonic)], dtype=dtype))[0])
            # trajectory length: the ChEES gradient
            if ok.sum() > 1:
                qc = proposal[ok] - proposal[ok].mean(0)
                q0 = q[ok] - q[ok].mean(0)
                diff = (qc * qc).sum(-1) - (q0 * q0).sum(-1)
                v = velocity(p_end[ok], inv_mass if dense else inv_mass[ok])
                g = 2 * u * diff * (qc * v).sum(-1)  # d/dT of the criterion, per chain
                w = acc[ok]
                grad_log_T = float((w * g).sum() / w.sum().clamp(min=1e-10)) * T
                if math.isfinite(grad_log_T):
                    moved = adam.step(log_T, grad_log_T) - log_T
                    updates += 1
                    weight = updates**-0.5
                    log_T_avg = (1 - weight) * log_T_avg + weight * (
                        log_T + max(-CHEES_LOG_CLIP, min(CHEES_LOG_CLIP, moved))
                    )
                    log_T = min(max(log_T_avg, math.log(step)), math.log(max_steps * step))
            T = math.exp(log_T)
            window.append(q_new)
            window_lp.append(lp_new)
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
                if dense:
                    inv_mass = regularised_covariance(drawn).mean(0, keepdim=True)
                else:
                    inv_mass = regularised_variance(drawn, 1).mean(0).expand(B, D).clone()
                window, window_lp = [], []
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
        bar.update(1)
    bar.close()
    out = {k: torch.stack(v, 1) for k, v in stats.items()}
    info = {
        "step_size": step,
        "trajectory_length": T,
        "dense_mass": dense,
        "restarted_chains": restarted,
    }
    return Samples(draws, out, calls * B, info)


# ChEES restarts a chain at a warmup window's end when its mean log density over the window is
# this many nats (plus 4 sds of a typical set's log density, 4 sqrt(D / 2)) below the best
# chain's: gaussian_mixture's chains in the one-wide-component basin sat 145-155 nats below.
STUCK_NATS = 20.0


def stuck_chains(window_lp: torch.Tensor, dim: int) -> torch.Tensor:
    """Chains (rows of ``window_lp``, their log densities over a warmup window) whose mean is
    more than ``STUCK_NATS + 4 sqrt(dim / 2)`` below the best chain's. Where a chain sits that
    far down, the posterior has exp(-20) times the mass per volume of where the best one is:
    a basin the chain fell into from its start, not a part of the posterior to keep sampling;
    and it drags the step size and trajectory length that every chain shares. A chain whose
    log density is not finite is stuck too, unless every chain's is."""
    mean = window_lp.mean(1)
    finite = torch.isfinite(mean)
    if not finite.any():
        return torch.zeros_like(finite)
    best = mean[finite].max()
    return ~finite | (mean < best - (STUCK_NATS + 4 * math.sqrt(dim / 2)))


def _masked_leapfrog(
    density: Density,
    q: torch.Tensor,
    p: torch.Tensor,
    grad: torch.Tensor,
    logp: torch.Tensor,
    eps: torch.Tensor,
    inv_mass: torch.Tensor,
    live: torch.Tensor,
) -> tuple[torch.Tensor, ...]:
    """A leapfrog step for the ``live`` chains; the others keep their state."""
    nq, np_, nlp, ng = leapfrog(density, q, p, grad, eps, inv_mass)
    lv = live[:, None]
    return (
        torch.where(lv, nq, q),
        torch.where(lv, np_, p),
        torch.where(lv, ng, grad),
        torch.where(live, nlp, logp),
    )


def _hmc_with_proposal(
    density: Density,
    q: torch.Tensor,
    logp: torch.Tensor,
    grad: torch.Tensor,
    step: torch.Tensor,
    inv_mass: torch.Tensor,
    gen: torch.Generator,
    n_steps: torch.Tensor,
    max_steps: int,
    leapfrog_step: Step | None = None,
) -> tuple:
    """:func:`hmc_transition` that also returns the proposal and its momentum (for ChEES)."""
    # each call's outputs are the next call's inputs; the last are read before the next draw
    leapfrog_step = leapfrog_step or Step(density, _masked_leapfrog, reuse_outputs=True)
    B, D = q.shape
    n = torch.ceil(n_steps).clamp(1, max_steps).long()
    p0 = momentum(q, inv_mass, gen)
    h0 = -logp + kinetic(p0, inv_mass)
    cq, cp, cg, clp = q, p0, grad, logp
    eps = step[:, None]
    calls = int(n.max())
    for i in range(calls):
        cq, cp, cg, clp = leapfrog_step(cq, cp, cg, clp, eps, inv_mass, i < n)
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


# ----------------------------------------------------------------------------------- RWMH


def rwmh(
    density: Density,
    theta0: torch.Tensor,
    *,
    num_samples: int,
    warmup: int,
    gen: torch.Generator,
    target_accept: float = 0.234,
    progress: bool = False,
) -> Samples:
    """Random-walk Metropolis–Hastings, every chain at once: proposals theta + s * scale * z,
    accepted with probability min(1, p(theta')/p(theta)). In warmup the step s follows a
    Robbins–Monro rule towards ``target_accept`` and ``scale`` is each chain's posterior sd
    from the draws of the first and second half of warmup; both frozen after."""
    q, logp, _ = _start(density, theta0)
    B, D = q.shape
    dtype = q.dtype
    log_step = torch.zeros(B, dtype=dtype) + math.log(0.5)
    scale = torch.ones(B, D, dtype=dtype)
    ends = {max(1, warmup // 2), warmup}
    window: list[torch.Tensor] = []
    draws = torch.empty(B, num_samples, D, dtype=dtype)
    accepted = torch.zeros(B, dtype=dtype)
    bar = _progress(warmup + num_samples, progress, "mh")
    tick = getattr(density, "tick", lambda it, total: None)
    calls = 1
    for it in range(warmup + num_samples):
        tick(it, warmup + num_samples)
        z = torch.randn(B, D, generator=gen, dtype=dtype)
        prop = q + log_step.exp()[:, None] * scale * z
        lp, _ = density(prop)
        calls += 1
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
        bar.update(1)
    bar.close()
    rate = accepted / max(1, num_samples)
    stats = {"diverging": torch.zeros(B, num_samples, dtype=torch.bool)}
    return Samples(draws, stats, calls * B, {"acceptance_rate": rate.tolist()})
