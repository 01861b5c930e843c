"""Expectation–maximisation for mixtures on plain arrays: a two-component Bernoulli mixture
(the three-coin problem) and a 1-D Gaussian mixture, with the E- and M-step variants the seed
documents teach, run by one loop (:func:`em_loop`):

- M-step (seed 001 §1.5.2): ``"full"`` maximises Q (Algorithm 1); ``"gradient"`` only improves
  it, by gradient-ascent steps with a backtracking line search (Algorithm 3, eq 59);
  ``"coordinatewise"`` maximises it one block at a time, the others held (Algorithm 4, ECM).
  Each raises Q(theta | theta_old) above Q(theta_old | theta_old), so the log-likelihood never
  decreases.
- E-step (seed 003 L180–187): ``"exact"`` responsibilities; ``"monte_carlo"`` (MCEM) their
  average over ``e_draws`` draws of every latent from p(z | y, theta); ``"stochastic"`` (SEM)
  one draw, a hard assignment.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from scipy.special import logsumexp
from tqdm.auto import tqdm

from zoo_inference.results import ZooError

E_STEPS = ("exact", "monte_carlo", "stochastic")
M_STEPS = ("full", "gradient", "coordinatewise")
MC_DRAWS = 100  # MCEM's draws per latent when ``e_draws`` is left unset


@dataclass
class EMResult:
    """What :func:`em_loop` returns: the estimate, the log-likelihood at every iterate, the
    exact responsibilities at the estimate, every iterate (``chain``,
    (iterations, D)). A sampled E-step's estimate: MCEM's last iterate; SEM's chain averaged
    over its second half (the chain hovers around the fixed point; its mean is the estimate)."""

    theta: np.ndarray
    trace: list[float]
    responsibilities: np.ndarray
    chain: np.ndarray
    log_likelihood: float  # at the estimate


def e_draws_of(e_step: str, e_draws: int | None, m_step: str = "full") -> int:
    """The number of draws per latent of an E-step (0: exact), the options checked together."""
    if m_step not in M_STEPS:
        raise ZooError(f"option 'm_step' must be one of {list(M_STEPS)}, got {m_step!r}")
    if e_step not in E_STEPS:
        raise ZooError(f"option 'e_step' must be one of {list(E_STEPS)}, got {e_step!r}")
    if e_step == "exact":
        if e_draws is not None:
            raise ZooError("option 'e_draws' is for a sampled E-step (e_step='monte_carlo')")
        return 0
    if e_step == "stochastic":
        if e_draws not in (None, 1):
            raise ZooError(f"stochastic EM draws one value per latent, got e_draws={e_draws}")
        return 1
    return MC_DRAWS if e_draws is None else int(e_draws)


def sampled_responsibilities(gamma: np.ndarray, draws: int) -> np.ndarray:
    """The E-step by Monte Carlo: the frequencies of each value among ``draws`` draws of every
    latent from its posterior row ``gamma`` (N, K) (numpy's global stream). The counts of
    ``draws`` categorical draws are multinomial, drawn as successive binomials."""
    out = np.zeros_like(gamma)
    left = np.full(gamma.shape[0], draws)
    rest = np.ones(gamma.shape[0])
    for k in range(gamma.shape[1] - 1):
        p = np.clip(np.divide(gamma[:, k], rest, out=np.zeros_like(rest), where=rest > 0), 0, 1)
        out[:, k] = np.random.binomial(left, p)
        left = left - out[:, k].astype(int)
        rest = rest - gamma[:, k]
    out[:, -1] = left
    return out / draws


def ascend(
    objective: Callable[[torch.Tensor], torch.Tensor], x: np.ndarray, steps: int
) -> np.ndarray:
    """Algorithm 3's partial M-step: ``steps`` gradient-ascent steps on ``objective`` (a torch
    function of an unconstrained vector), each step halved until it raises the objective by
    Armijo's margin (1e-4 of the first-order gain), so the objective never decreases."""
    t = torch.as_tensor(x, dtype=torch.float64)
    for _ in range(steps):
        t = t.detach().requires_grad_(True)
        value = objective(t)
        (grad,) = torch.autograd.grad(value, t)
        t, gain, eta = t.detach(), float(grad @ grad), 1.0
        if not gain > 0:
            break
        target = float(value.detach())
        with torch.no_grad():
            while (
                eta > 1e-12 and not float(objective(t + eta * grad)) >= target + 1e-4 * eta * gain
            ):
                eta /= 2
        if eta <= 1e-12:
            break
        t = t + eta * grad
    return t.numpy()


def em_loop(
    theta: np.ndarray,
    e_step: Callable[[np.ndarray], tuple[float, np.ndarray]],
    m_step: Callable[[np.ndarray, np.ndarray], np.ndarray],
    *,
    max_iter: int,
    tol: float,
    relative: bool,
    draws: int = 0,
    progress: bool = False,
) -> EMResult:
    """EM's iteration: ``e_step(theta) -> (log-likelihood, responsibilities (N, K))``, then
    ``m_step(theta, responsibilities) -> theta``. Exact E-step (``draws`` = 0): stops when the
    log-likelihood changes by less than ``tol`` (times its size if ``relative``) or after
    ``max_iter`` M-steps. Sampled E-step: ``max_iter`` M-steps on the responsibilities'
    ``draws``-draw estimate (:func:`sampled_responsibilities`)."""
    trace: list[float] = []
    chain = [np.array(theta, dtype=float)]
    for _ in tqdm(range(max_iter + 1), desc="em", disable=not progress, leave=False):
        ll, gamma = e_step(theta)
        trace.append(ll)
        scale = abs(ll) if relative else 1.0
        converged = not draws and len(trace) > 1 and abs(trace[-1] - trace[-2]) < tol * scale
        if converged or len(trace) == max_iter + 1:
            break
        theta = m_step(theta, sampled_responsibilities(gamma, draws) if draws else gamma)
        chain.append(np.array(theta, dtype=float))
    iterates = np.stack(chain)
    if draws == 1:
        theta = iterates[len(iterates) // 2 :].mean(0)
        ll, gamma = e_step(theta)
    return EMResult(np.asarray(theta, dtype=float), trace, gamma, iterates, ll)


# ------------------------------------------------------------------ two-component Bernoulli


def bernoulli_mixture_em(
    y: np.ndarray,
    theta: Sequence[float],
    max_iter: int,
    tol: float,
    *,
    m_step: str = "full",
    e_step: str = "exact",
    e_draws: int | None = None,
    gradient_steps: int = 1,
) -> EMResult:
    """EM for a two-component Bernoulli mixture, theta = (pi, p, q): the three-coin problem of
    seed 001 §1.1, eqs (4)-(5). ``responsibilities`` are mu_j = P(z_j = 1 | y_j, theta).

    E-step: mu_j = pi p^y (1-p)^(1-y) / [pi p^y (1-p)^(1-y) + (1-pi) q^y (1-q)^(1-y)].
    M-step: pi = mean(mu); p = sum(mu y) / sum(mu); q = sum((1-mu) y) / sum(1-mu).
    Q separates into a term in pi, one in p and one in q, so the coordinate-wise M-step
    (Algorithm 4) is the full one. A sampled E-step that gives coin B (or C) no toss leaves p
    (or q) where it was: Q does not depend on it.
    """
    draws = e_draws_of(e_step, e_draws, m_step)

    def expect(th: np.ndarray) -> tuple[float, np.ndarray]:
        pi, p, q = th
        a = pi * p**y * (1 - p) ** (1 - y)
        c = (1 - pi) * q**y * (1 - q) ** (1 - y)
        return float(np.log(a + c).sum()), np.stack([a / (a + c), c / (a + c)], 1)

    def maximise(th: np.ndarray, gamma: np.ndarray) -> np.ndarray:
        mu = gamma[:, 0]
        if m_step == "gradient":
            return _sigmoid(ascend(_bernoulli_q(y, mu), _logit(th), gradient_steps))
        heads_b, heads_c = mu.sum(), (1 - mu).sum()
        p = (mu * y).sum() / heads_b if heads_b > 0 else th[1]
        q = ((1 - mu) * y).sum() / heads_c if heads_c > 0 else th[2]
        return np.array([mu.mean(), p, q])

    return em_loop(
        np.asarray(theta, dtype=float), expect, maximise,
        max_iter=max_iter, tol=tol, relative=False, draws=draws,
    )  # fmt: skip


def _logit(p: np.ndarray) -> np.ndarray:
    return np.log(p) - np.log1p(-p)


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 1 / (1 + np.exp(-x))


def _bernoulli_q(y: np.ndarray, mu: np.ndarray) -> Callable[[torch.Tensor], torch.Tensor]:
    """Q(theta | theta_old) per toss as a function of logit(pi, p, q) (eq (4)'s expectation)."""
    yt, m = torch.as_tensor(y, dtype=torch.float64), torch.as_tensor(mu, dtype=torch.float64)

    def q(x: torch.Tensor) -> torch.Tensor:
        lp = torch.nn.functional.logsigmoid(x)  # log pi, log p, log q
        lq = torch.nn.functional.logsigmoid(-x)  # their complements
        coin = lambda i: yt * lp[i] + (1 - yt) * lq[i]  # noqa: E731
        return (m * (lp[0] + coin(1)) + (1 - m) * (lq[0] + coin(2))).mean()

    return q


# ------------------------------------------------------------------ 1-D Gaussian mixture


def gaussian_mixture_em(
    y: np.ndarray,
    weights: np.ndarray,
    locs: np.ndarray,
    scales: np.ndarray,
    max_iter: int,
    tol: float,
    progress: bool = False,
    *,
    m_step: str = "full",
    e_step: str = "exact",
    e_draws: int | None = None,
    gradient_steps: int = 1,
    fixed_scales: bool = False,
) -> EMResult:
    """EM for a 1-D Gaussian mixture (seed 001 §1.4 eqs (39), (42)-(44); 002 §18.2 Alg. 2);
    ``theta`` = (weights, locs, scales) concatenated, (3K,).

    E-step: gamma_nk = w_k N(y_n | mu_k, s_k^2) / sum_j w_j N(y_n | mu_j, s_j^2).
    M-step: N_k = sum_n gamma_nk; mu_k = sum_n gamma_nk y_n / N_k;
            s_k^2 = sum_n gamma_nk (y_n - mu_k)^2 / N_k (with the *new* mu_k); w_k = N_k / N.
    Coordinate-wise (ECM): s_k^2 given the *old* means first, then mu_k given s, then w: the
    means' maximiser does not depend on the spreads, so the other order is the full M-step.
    Gradient: ascent steps on Q in (log w up to a constant, mu, log s).
    A sampled E-step that leaves a component no point is an error (too few draws).
    ``fixed_scales``: the spreads are known, held at ``scales`` (the M-step's other blocks are
    unchanged: the means' maximiser does not depend on them).
    """
    draws = e_draws_of(e_step, e_draws, m_step)
    K = weights.size
    floor = 1e-6 * max(np.var(y), 1e-12)  # keeps a component from collapsing onto one point

    def expect(th: np.ndarray) -> tuple[float, np.ndarray]:
        w, mu, s = th[:K], th[K : 2 * K], th[2 * K :]
        log_joint = np.log(w) - 0.5 * np.log(2 * np.pi * s**2) - 0.5 * ((y[:, None] - mu) / s) ** 2
        ll = logsumexp(log_joint, axis=1)
        return float(ll.sum()), np.exp(log_joint - ll[:, None])

    def maximise(th: np.ndarray, gamma: np.ndarray) -> np.ndarray:
        nk = gamma.sum(0)
        if np.any(nk <= 0):
            raise ZooError(
                f"the sampled E-step left component(s) {np.flatnonzero(nk <= 0).tolist()} "
                "no observation: use more e_draws"
            )
        if m_step == "gradient":
            held = np.log(th[2 * K :]) if fixed_scales else None
            x = np.concatenate([np.log(th[:K]), th[K : 2 * K], np.log(th[2 * K :])])
            x = ascend(
                _gaussian_q(y, gamma, held), x[: 2 * K] if fixed_scales else x, gradient_steps
            )
            w = np.exp(x[:K] - logsumexp(x[:K]))
            s = th[2 * K :] if fixed_scales else np.exp(x[2 * K :])
            return np.concatenate([w, x[K : 2 * K], s])
        centre = th[K : 2 * K] if m_step == "coordinatewise" else None
        mu = (gamma * y[:, None]).sum(0) / nk
        around = mu if centre is None else centre
        s = np.sqrt(np.maximum((gamma * (y[:, None] - around) ** 2).sum(0) / nk, floor))
        if fixed_scales:
            s = th[2 * K :]
        return np.concatenate([nk / y.size, mu, s])

    theta = np.concatenate([weights, locs, scales]).astype(float)
    return em_loop(
        theta, expect, maximise,
        max_iter=max_iter, tol=tol, relative=True, draws=draws, progress=progress,
    )  # fmt: skip


def _gaussian_q(
    y: np.ndarray, gamma: np.ndarray, log_scales: np.ndarray | None = None
) -> Callable[[torch.Tensor], torch.Tensor]:
    """Q(theta | theta_old) per observation as a function of (weight logits, mu, log s), or of
    (weight logits, mu) with the spreads held at ``log_scales``."""
    yt, g = torch.as_tensor(y, dtype=torch.float64)[:, None], torch.as_tensor(gamma)
    K = g.shape[1]
    held = None if log_scales is None else torch.as_tensor(log_scales, dtype=torch.float64)

    def q(x: torch.Tensor) -> torch.Tensor:
        log_w = torch.log_softmax(x[:K], 0)
        mu, log_s = x[K : 2 * K], (x[2 * K :] if held is None else held)
        log_joint = log_w - log_s - 0.5 * ((yt - mu) * torch.exp(-log_s)) ** 2
        return (g * log_joint).sum(1).mean()

    return q


# ------------------------------------------------------------------ K-means as hard EM


def kmeans(y: np.ndarray, centres: np.ndarray, max_iter: int, tol: float = 0.0) -> EMResult:
    """Lloyd's algorithm as hard EM (seed 003 L169–171): EM for a mixture of equal weights and
    one shared spread s, in the limit s -> 0, where each responsibility is 1 for the nearest
    centre and 0 for the others. E-step: assign each row of ``y`` (N, D) or value (N,) to its
    nearest centre (ties to the first); M-step: each centre moves to its points' mean (a centre
    left without points stays). The trace is minus the inertia (the sum of squared distances
    to the assigned centres), which never decreases; it stops when the assignments no longer
    change it (by more than ``tol``, relative) or after ``max_iter`` M-steps."""
    x = y.reshape(y.shape[0], -1)
    c0 = np.asarray(centres, dtype=float).reshape(-1, x.shape[1])
    K, D = c0.shape

    def assign(c: np.ndarray) -> tuple[float, np.ndarray]:
        d2 = ((x[:, None, :] - c.reshape(K, D)[None]) ** 2).sum(-1)
        hard = np.eye(K)[d2.argmin(1)]
        return -float((hard * d2).sum()), hard

    def centre(c: np.ndarray, hard: np.ndarray) -> np.ndarray:
        n = hard.sum(0)
        means = (hard.T @ x) / np.maximum(n, 1)[:, None]
        return np.where(n[:, None] > 0, means, c.reshape(K, D)).ravel()

    return em_loop(c0.ravel(), assign, centre, max_iter=max_iter, tol=tol, relative=True)
