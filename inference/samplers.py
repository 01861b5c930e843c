"""Many-chain samplers on a batched log density: the state of every chain is one row of a
``(chains, D)`` tensor and each step advances all chains at once.

* :func:`nuts` — the No-U-Turn sampler (Hoffman & Gelman 2014) in its multinomial form with
  iterative tree doubling (Betancourt 2017; as Stan and NumPyro build it), the chains in
  lockstep: a chain whose tree has ended waits, masked, while the others finish theirs. Per-chain
  step size by dual averaging and per-chain diagonal mass matrix by Stan's windowed warmup.
* :func:`chees` — ChEES-HMC (Hoffman, Radul & Sountsov 2021): all chains share one step size
  (dual averaging on the harmonic mean of the acceptance probabilities) and one trajectory
  length (Adam on the ChEES criterion), the step count jittered by a Halton sequence, and one
  diagonal mass matrix for all chains (their within-chain variances, averaged).
* :func:`hmc` — static HMC with a fixed integration time, adapted like :func:`nuts`.
* :func:`rwmh` — random-walk Metropolis–Hastings with a diagonal proposal.

Every function takes ``density(theta) -> (log_p, grad)`` and returns a :class:`Samples`.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass, field

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
    the step size is pushed towards the one whose acceptance statistic hits ``target``."""

    def __init__(self, step: torch.Tensor, target: float) -> None:
        self.target = target
        self.restart(step)

    def restart(self, step: torch.Tensor) -> None:
        self.mu = torch.log(10 * step)
        self.h_bar = torch.zeros_like(step)
        self.log_bar = torch.zeros_like(step)
        self.t = 0
        self.log_step = torch.log(step)

    def update(self, accept: torch.Tensor) -> torch.Tensor:
        """One update from the acceptance statistic; returns the next step size."""
        self.t += 1
        eta = 1.0 / (self.t + 10.0)
        accept = torch.nan_to_num(accept, nan=0.0)
        self.h_bar = (1 - eta) * self.h_bar + eta * (self.target - accept)
        self.log_step = self.mu - math.sqrt(self.t) / 0.05 * self.h_bar
        w = self.t**-0.75
        self.log_bar = w * self.log_step + (1 - w) * self.log_bar
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


def kinetic(p: torch.Tensor, inv_mass: torch.Tensor) -> torch.Tensor:
    return 0.5 * (p * p * inv_mass).sum(-1)


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
    q = torch.addcmul(q, eps * inv_mass, p)
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
        p = torch.randn(q.shape, generator=gen, dtype=q.dtype) / inv_mass.sqrt()
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
    return ((inv_mass * p_left * rho).sum(-1) <= 0) | ((inv_mass * p_right * rho).sum(-1) <= 0)


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
    values: run as one compiled graph through the density where the density offers it
    (``density.fuse``, the compiled form of :class:`inference.density.BatchedDensity`), else
    eagerly, calling the density."""

    def __init__(self, density: Density, fn: Callable[..., tuple[torch.Tensor, ...]]) -> None:
        self.density, self.fn = density, fn
        self._fuse = getattr(density, "fuse", None)

    def __call__(self, *args: torch.Tensor) -> tuple[torch.Tensor, ...]:
        fused = self._fuse(self.fn, args) if self._fuse is not None else None
        if fused is not None:
            try:
                return fused(*args)
            except RuntimeError:  # a chain's point breaks the model: the eager step copes
                pass
        return self.fn(self.density, *args)


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
) -> tuple[torch.Tensor, ...]:
    """One leaf of the subtree being built, for the ``live`` chains (the others keep their
    state): a leapfrog step from the edge (cq, cp, cg, clp), multinomial sampling of the
    subtree's proposal (sq, slp, sg) with uniform ``u``, its log weight and momentum sum, the
    acceptance statistic and divergence. U-turn checkpoints: ``write`` (max_depth,) marks the
    row of ``p_ck`` / ``sum_ck`` this leaf stores (even leaves), ``check`` the rows it is checked
    against (odd leaves; :func:`_checkpoints`)."""
    nq, np_, nlp, ng = leapfrog(density, cq, cp, cg, eps, inv_mass)
    lv = live[:, None]
    cq, cp, cg = torch.where(lv, nq, cq), torch.where(lv, np_, cp), torch.where(lv, ng, cg)
    clp = torch.where(live, nlp, clp)
    delta = torch.nan_to_num(kinetic(cp, inv_mass) - clp - h0, nan=math.inf)
    new_logw = torch.logaddexp(s_logw, -delta)
    take = (u < (-delta - new_logw).exp()) & live
    tk = take[:, None]
    sq, slp, sg = torch.where(tk, cq, sq), torch.where(take, clp, slp), torch.where(tk, cg, sg)
    s_logw = torch.where(live, new_logw, s_logw)
    s_sum = torch.where(lv, s_sum + cp, s_sum)
    sum_acc = sum_acc + torch.where(live, torch.clamp(torch.exp(-delta), max=1.0), 0.0)
    n_leaves = n_leaves + live.to(n_leaves.dtype)
    s_div = s_div | ((delta > MAX_DELTA_ENERGY) & live)
    stored = write[:, None, None] & lv[None]
    p_ck = torch.where(stored, cp[None], p_ck)
    sum_ck = torch.where(stored, s_sum[None], sum_ck)
    turned = _is_turning(p_ck, cp[None], s_sum[None] - sum_ck + p_ck, inv_mass[None])
    s_turn = s_turn | ((turned & check[:, None]).any(0) & live)
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
def _checkpoint_masks(max_depth: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """For each leaf index below 2**max_depth: the rows it writes and the rows it checks."""
    masks = []
    rows = torch.arange(max_depth)
    for leaf in range(2 ** max(max_depth - 1, 0)):
        lo, hi = _checkpoints(leaf)
        if leaf % 2 == 0:
            masks.append((rows == hi, torch.zeros(max_depth, dtype=torch.bool)))
        else:
            masks.append((torch.zeros(max_depth, dtype=torch.bool), (rows >= lo) & (rows <= hi)))
    return masks


def nuts_transition(
    density: Density,
    q: torch.Tensor,
    logp: torch.Tensor,
    grad: torch.Tensor,
    step: torch.Tensor,
    inv_mass: torch.Tensor,
    gen: torch.Generator,
    max_tree_depth: int = 10,
    leaf: Step | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, dict[str, torch.Tensor], int]:
    """One NUTS iteration for every chain (multinomial sampling, biased progressive sampling
    between subtrees, uniform within). Returns the new state, per-chain statistics and the
    number of density calls (the longest tree's leaves)."""
    leaf = leaf or Step(density, _nuts_leaf)
    masks = _checkpoint_masks(max_tree_depth)
    B, D = q.shape
    dtype = q.dtype
    p0 = torch.randn(B, D, generator=gen, dtype=dtype) / inv_mass.sqrt()
    h0 = -logp + kinetic(p0, inv_mass)
    left = [q, p0, grad, logp]
    right = [q, p0, grad, logp]
    prop = [q, logp, grad]
    log_w = torch.zeros(B, dtype=dtype)
    p_sum = p0.clone()
    done = torch.zeros(B, dtype=torch.bool)
    diverging = torch.zeros(B, dtype=torch.bool)
    depth = torch.zeros(B, dtype=torch.long)
    sum_acc = torch.zeros(B, dtype=dtype)
    n_leaves = torch.zeros(B, dtype=dtype)
    eps = step[:, None]
    p_ck = torch.zeros(max_tree_depth, B, D, dtype=dtype)
    sum_ck = torch.zeros(max_tree_depth, B, D, dtype=dtype)
    calls = 0
    for d in range(max_tree_depth):
        building = ~done
        right_way = torch.rand(B, generator=gen, dtype=dtype) < 0.5
        rw = right_way[:, None]
        cq, cp, cg = (
            _where_rows(right_way, r, l) for r, l in zip(right[:3], left[:3], strict=True)
        )
        clp = torch.where(right_way, right[3], left[3])
        signed = torch.where(rw, eps, -eps)
        sub = [
            torch.full((B,), -math.inf, dtype=dtype),  # log weight
            torch.zeros(B, D, dtype=dtype),  # momentum sum
            cq,
            clp,
            cg,  # proposal
            torch.zeros(B, dtype=torch.bool),  # turned
            torch.zeros(B, dtype=torch.bool),  # diverged
        ]
        live = building
        for n in range(2**d):
            write, check = masks[n]
            u = torch.rand(B, generator=gen, dtype=dtype)
            out = leaf(
                cq,
                cp,
                cg,
                clp,
                signed,
                inv_mass,
                h0,
                *sub,
                p_ck,
                sum_ck,
                sum_acc,
                n_leaves,
                live,
                u,
                write,
                check,
            )
            cq, cp, cg, clp = out[:4]
            sub = list(out[4:11])
            p_ck, sum_ck, sum_acc, n_leaves, live = out[11:]
            calls += 1
            if not live.any():
                break
        s_logw, s_sum, sq, slp, sg, s_turn, s_div = sub
        # merge the subtree into the tree: biased progressive sampling, never from a subtree
        # that turned or diverged
        accept = torch.where(
            s_turn | s_div, 0.0, torch.clamp(torch.exp(s_logw - log_w), max=1.0)
        ).to(dtype)
        take = building & (torch.rand(B, generator=gen, dtype=dtype) < accept)
        tk = take[:, None]
        prop = [
            torch.where(tk, sq, prop[0]),
            torch.where(take, slp, prop[1]),
            torch.where(tk, sg, prop[2]),
        ]
        edge = [cq, cp, cg, clp]
        to_right, to_left = building & right_way, building & ~right_way
        right = [_where_rows(to_right, n, o) for n, o in zip(edge, right, strict=True)]
        left = [_where_rows(to_left, n, o) for n, o in zip(edge, left, strict=True)]
        log_w = torch.where(building, torch.logaddexp(log_w, s_logw), log_w)
        p_sum = torch.where(building[:, None], p_sum + s_sum, p_sum)
        turning = _is_turning(left[1], right[1], p_sum, inv_mass)
        diverging = diverging | (building & s_div)
        depth = depth + building.long()
        done = done | (building & (s_turn | s_div | turning))
        if done.all():
            break
    stats = {
        "accept": sum_acc / n_leaves.clamp(min=1),
        "diverging": diverging,
        "tree_depth": depth,
        "n_steps": n_leaves,
        "energy": h0,
    }
    return prop[0], prop[1], prop[2], stats, calls


def _where_rows(mask: torch.Tensor, new: torch.Tensor, old: torch.Tensor) -> torch.Tensor:
    """``new`` in the rows (chains) where ``mask``, ``old`` elsewhere."""
    return torch.where(mask.reshape((-1,) + (1,) * (new.dim() - 1)), new, old)


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
    progress: bool = False,
) -> Samples:
    """NUTS for every chain of ``theta0`` (chains, D), in lockstep. Warmup: step size by dual
    averaging, diagonal mass matrix re-estimated at the ends of Stan's windows."""
    leaf = Step(density, _nuts_leaf)
    return _adapted_chain(
        density,
        theta0,
        num_samples=num_samples,
        warmup=warmup,
        gen=gen,
        target_accept=target_accept,
        progress=progress,
        desc="nuts",
        transition=lambda q, lp, g, step, im: nuts_transition(
            density, q, lp, g, step, im, gen, max_tree_depth, leaf
        ),
    )


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
    """Static HMC: ``trajectory_length / step`` leapfrog steps (at most ``max_steps``) per
    draw, all chains together (the chains' step counts differ: a chain that has done its steps
    waits, masked). Adapted like :func:`nuts`."""

    def transition(q, lp, g, step, im):  # noqa: ANN001, ANN202 - local
        return hmc_transition(density, q, lp, g, step, im, gen, trajectory_length / step, max_steps)

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
    sampling, for a per-chain transition kernel."""
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
        q, logp, grad, st, c = transition(q, logp, grad, step, inv_mass)
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
    progress: bool = False,
) -> Samples:
    """ChEES-HMC: one step size and one trajectory length T for all chains, adapted in warmup;
    each draw integrates for ``2 u T`` (``u`` from a Halton sequence) with the Metropolis
    correction. Warmup: dual averaging of the step size on the harmonic mean of the chains'
    acceptance probabilities; Adam on log T along the gradient of the ChEES criterion
    E[(|q' - E q'|^2 - |q - E q|^2)^2] / 4, each chain's term weighted by its acceptance
    probability; a diagonal mass matrix shared by the chains (their within-chain variances
    over each of Stan's warmup windows, averaged), then the step size found afresh."""
    q, logp, grad = _start(density, theta0)
    B, D = q.shape
    dtype = q.dtype
    inv_mass = torch.ones(B, D, dtype=dtype)
    calls = 1
    step_b, c = find_step_size(density, q, logp, grad, inv_mass, torch.ones(B, dtype=dtype), gen)
    calls += c
    step = float(step_b.median())
    da = DualAveraging(torch.tensor([step], dtype=dtype), target_accept)
    log_T = math.log(10 * step)  # start at ten leapfrog steps; Adam moves it from there
    adam = Adam(learning_rate)
    log_T_avg = log_T
    ends = set(stan_windows(warmup))
    window: list[torch.Tensor] = []
    draws = torch.empty(B, num_samples, D, dtype=dtype)
    stats: dict[str, list[torch.Tensor]] = {}
    bar = _progress(warmup + num_samples, progress, "chees")
    tick = getattr(density, "tick", lambda it, total: None)
    T = math.exp(log_T)
    for it in range(warmup + num_samples):
        u = halton(it + 1)
        n_steps = torch.full((B,), max(1.0, math.ceil(2 * u * T / step)), dtype=dtype)
        steps = torch.full((B,), step, dtype=dtype)
        q_new, lp_new, g_new, st, c, proposal, p_end = _hmc_with_proposal(
            density, q, logp, grad, steps, inv_mass, gen, n_steps, max_steps
        )
        calls += c
        tick(it, warmup + num_samples)
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
                velocity = inv_mass[ok] * p_end[ok]
                g = 2 * u * diff * (qc * velocity).sum(-1)  # d/dT of the criterion, per chain
                w = acc[ok]
                grad_log_T = float((w * g).sum() / w.sum().clamp(min=1e-10)) * T
                if math.isfinite(grad_log_T):
                    log_T = min(adam.step(log_T, grad_log_T), math.log(max_steps * step))
            # the trajectory length kept after warmup: a moving average of the late iterates
            log_T_avg = 0.9 * log_T_avg + 0.1 * log_T
            T = math.exp(log_T)
            window.append(q_new)
            if it + 1 in ends:
                # the chains' own variances over the window, averaged across chains: early in
                # warmup the chains have not met, and the spread between them is no scale
                within = regularised_variance(torch.stack(window, 1), 1).mean(0)
                inv_mass = within.expand(B, D).clone()
                window = []
                steps_b, c = find_step_size(
                    density, q_new, lp_new, g_new, inv_mass, torch.full((B,), step), gen
                )
                calls += c
                step = float(steps_b.median())
                da.restart(torch.tensor([step], dtype=dtype))
            if it + 1 == warmup:
                step = float(da.final[0])
                T = math.exp(log_T_avg)
        else:
            draws[:, it - warmup] = q_new
            for k, v in st.items():
                stats.setdefault(k, []).append(v)
        q, logp, grad = q_new, lp_new, g_new
        bar.update(1)
    bar.close()
    out = {k: torch.stack(v, 1) for k, v in stats.items()}
    info = {"step_size": step, "trajectory_length": T}
    return Samples(draws, out, calls * B, info)


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
    leapfrog_step = leapfrog_step or Step(density, _masked_leapfrog)
    B, D = q.shape
    n = torch.ceil(n_steps).clamp(1, max_steps).long()
    p0 = torch.randn(B, D, generator=gen, dtype=q.dtype) / inv_mass.sqrt()
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
