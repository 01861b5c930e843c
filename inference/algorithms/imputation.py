"""The IP (imputation–posterior) algorithm, Tanner and Wong's data augmentation (seed 003
L185–187), on plain arrays, drawing from numpy's global stream (which the runner seeds).

With L imputations, each iteration:

    I-step: Z^l ~ p(Z | theta^l, X)                      l = 1..L
    P-step: theta^l ~ p(theta | Z^l, X)

The seed's P-step draws from the mixture (1/L) sum_j p(theta | Z^j, X); the L imputations'
draws together are draws from that mixture, and each keeps its own imputation as parent so that
the L chains stay independent (with parents drawn at random their genealogies coalesce in a few
iterations and an ESS counted over chains overstates the information). At stationarity every
(theta^l, Z^l) is a draw from p(theta, Z | X); each chain is two-block Gibbs. The P-step needs
the complete-data posterior p(theta | Z, X) in closed form, here the three coins' Beta
factors and the Gaussian mixture's Dirichlet weights with exact draws of each component's
(mean, spread) (:func:`normal_lognormal_draw`).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from tqdm.auto import tqdm

from zoo_inference.algorithms.univariate import truncated_normal


def imputation_posterior(
    theta: np.ndarray,
    impute: Callable[[np.ndarray], np.ndarray],
    posterior: Callable[[np.ndarray, np.ndarray], np.ndarray],
    num_samples: int,
    warmup: int,
    progress: bool = False,
) -> tuple[np.ndarray, np.ndarray]:
    """Run the IP algorithm from ``theta`` (L, D), one row per imputation: ``impute(theta)`` ->
    Z (L, N) draws Z^l ~ p(Z | theta^l, X); ``posterior(Z, theta)`` -> theta (L, D) draws
    theta^l ~ p(theta | Z^l, X) (``theta``, the current values, for a P-step that must fall
    back on a move that leaves p(theta | Z^l, X) invariant). Returns the draws after
    ``warmup`` iterations: theta (L, num_samples, D) and the imputations drawn given them
    (L, num_samples, N)."""
    thetas, imputed = [], []
    bar = tqdm(range(warmup + num_samples), desc="ip", disable=not progress, leave=False)
    for t in bar:
        z = impute(theta)
        if t >= warmup:
            thetas.append(theta)
            imputed.append(z)
        theta = posterior(z, theta)
    return np.stack(thetas, 1), np.stack(imputed, 1)


# ------------------------------------------------------------------ the three coins


def bernoulli_mixture_impute(y: np.ndarray, theta: np.ndarray) -> np.ndarray:
    """z_j ~ Bernoulli(mu_j), mu_j = pi p^y (1-p)^(1-y) / [... + (1-pi) q^y (1-q)^(1-y)] (seed
    001 eq (5)) for every row (pi, p, q) of ``theta`` (L, 3); -> (L, n) in {0, 1}."""
    pi, p, q = (theta[:, i : i + 1] for i in range(3))
    a = pi * p**y * (1 - p) ** (1 - y)
    c = (1 - pi) * q**y * (1 - q) ** (1 - y)
    return (np.random.uniform(size=a.shape) < a / (a + c)).astype(float)


def bernoulli_mixture_posterior(
    y: np.ndarray, z: np.ndarray, prior: tuple[float, float]
) -> np.ndarray:
    """(pi, p, q) | z, y under iid Beta(a, b) priors: pi ~ Beta(a + sum z, b + n - sum z),
    p ~ Beta(a + heads of B, b + tails of B), q likewise with coin C; ``z`` (L, n) -> (L, 3)."""
    a, b = prior
    heads_b, tails_b = (z * y).sum(1), (z * (1 - y)).sum(1)
    heads_c, tails_c = ((1 - z) * y).sum(1), ((1 - z) * (1 - y)).sum(1)
    return np.stack(
        [
            np.random.beta(a + z.sum(1), b + (1 - z).sum(1)),
            np.random.beta(a + heads_b, b + tails_b),
            np.random.beta(a + heads_c, b + tails_c),
        ],
        1,
    )


# ------------------------------------------------------------------ 1-D Gaussian mixture


def gaussian_mixture_impute(y: np.ndarray, theta: np.ndarray) -> np.ndarray:
    """z_n ~ Categorical(w_k N(y_n | mu_k, s_k^2)) for every row (w, mu, s) of ``theta``
    (L, 3K); -> (L, N) labels."""
    K = theta.shape[1] // 3
    w, mu, s = theta[:, :K], theta[:, K : 2 * K], theta[:, 2 * K :]
    log_r = np.log(w / s)[:, None] - 0.5 * ((y[None, :, None] - mu[:, None]) / s[:, None]) ** 2
    r = np.exp(log_r - log_r.max(-1, keepdims=True))
    r /= r.sum(-1, keepdims=True)
    return (r.cumsum(-1) > np.random.uniform(size=r.shape[:2])[..., None]).argmax(-1)


def grid_draw(
    log_density: Callable[[np.ndarray], np.ndarray], lo: float, hi: float, grid: int
) -> float:
    """One draw from a 1-D density known up to a constant, by inverse-CDF on a grid: a coarse
    grid over (lo, hi) finds where ``log_density`` is within e^-40 of its top, a fine grid
    there gives the CDF (trapezoids), interpolated linearly at a uniform draw. Exact up to the
    quadrature's error, far below any Monte-Carlo error."""
    coarse = np.linspace(lo, hi, grid)
    lh = log_density(coarse)
    inside = np.flatnonzero(lh > lh.max() - 40)
    fine = np.linspace(coarse[max(inside[0] - 1, 0)], coarse[min(inside[-1] + 1, grid - 1)], grid)
    lf = log_density(fine)
    dens = np.exp(lf - lf.max())
    cdf = np.concatenate([[0.0], np.cumsum(0.5 * (dens[1:] + dens[:-1]) * np.diff(fine))])
    return float(np.interp(np.random.uniform() * cdf[-1], cdf, fine))


def normal_lognormal_draw(
    y: np.ndarray, prior: tuple[float, float, float, float], grid: int = 4001
) -> tuple[float, float]:
    """One exact draw of (mu, s) from N(mu | m0, s0^2) LogNormal(s | l0, ls) prod_i N(y_i | mu,
    s^2): t = log s from its marginal (mu integrated out in closed form) by inverse-CDF on a
    grid, then mu | s from its normal conditional. In t the marginal is, up to a constant,

        N(t | l0, ls^2) e^{-(n-1) t} exp(-SS e^{-2t} / 2) N(ybar | m0, s0^2 + e^{2t} / n),

    SS = sum (y_i - ybar)^2 (the prior alone for n = 0), drawn by :func:`grid_draw`."""
    m0, s0, l0, ls = prior
    n = y.size
    if n == 0:
        t = l0 + ls * np.random.standard_normal()
        return m0 + s0 * np.random.standard_normal(), float(np.exp(t))
    ybar = float(y.mean())
    ss = float(((y - ybar) ** 2).sum())

    def log_h(t: np.ndarray) -> np.ndarray:
        v = s0**2 + np.exp(2 * t) / n
        return (
            -0.5 * ((t - l0) / ls) ** 2
            - (n - 1) * t
            - 0.5 * ss * np.exp(-2 * t)
            - 0.5 * np.log(v)
            - 0.5 * (ybar - m0) ** 2 / v
        )

    spread = np.log(max(np.sqrt(ss / n), 1e-8))
    t = grid_draw(log_h, min(l0 - 10 * ls, spread - 10), max(l0 + 10 * ls, spread + 10), grid)
    s2 = np.exp(2 * t)
    prec = 1 / s0**2 + n / s2
    mu = (m0 / s0**2 + y.sum() / s2) / prec + np.random.standard_normal() / np.sqrt(prec)
    return float(mu), float(np.exp(t))


def gaussian_mixture_posterior(
    y: np.ndarray,
    z: np.ndarray,
    theta: np.ndarray,
    prior: tuple[float, float, float, float],
    proposals: int = 20,
) -> np.ndarray:
    """(w, mu, s) | z, y for a 1-D mixture with flat Dirichlet weights, means iid N(m0, s0^2)
    constrained to increase (the prior's ordering) and LogNormal(l0, ls) spreads, one row per
    row of ``z`` (L, N) -> (L, 3K). w ~ Dirichlet(1 + N_k); the components' (mu_k, s_k) are
    drawn independently (:func:`normal_lognormal_draw`) until the means come out increasing,
    an exact draw of the ordered conditional (rejection from the unordered one). Where
    ``proposals`` draws all fail (overlapping components whose imputed groups' means are in
    the wrong order), one Gibbs sweep from the current ``theta`` (L, 3K) replaces the draw:
    s_k | mu_k by :func:`grid_draw`, then mu_k | s, mu_-k, truncated to keep the order. The
    fallback happens with a probability that does not depend on ``theta`` and leaves
    p(theta | z, y) invariant, so the chain keeps the posterior."""
    m0, s0, l0, ls = prior
    K = theta.shape[1] // 3
    out = np.empty((z.shape[0], 3 * K))
    for row, labels in enumerate(z):
        out[row, :K] = np.random.dirichlet(1.0 + np.bincount(labels, minlength=K))
        groups = [y[labels == k] for k in range(K)]
        for _ in range(proposals):
            mu, s = np.array([normal_lognormal_draw(g, prior) for g in groups]).T
            if np.all(np.diff(mu) > 0):
                break
        else:
            mu, s = theta[row, K : 2 * K].copy(), np.empty(K)
            for k, g in enumerate(groups):
                sq = float(((g - mu[k]) ** 2).sum())

                def log_cond(t: np.ndarray, n: int = g.size, sq: float = sq) -> np.ndarray:
                    return -0.5 * ((t - l0) / ls) ** 2 - n * t - 0.5 * sq * np.exp(-2 * t)

                s[k] = np.exp(grid_draw(log_cond, l0 - 10 * ls - 10, l0 + 10 * ls + 10, 4001))
            for k, g in enumerate(groups):
                prec = 1 / s0**2 + g.size / s[k] ** 2
                loc = (m0 / s0**2 + g.sum() / s[k] ** 2) / prec
                low = mu[k - 1] if k > 0 else -np.inf
                high = mu[k + 1] if k < K - 1 else np.inf
                mu[k] = truncated_normal(
                    np.array([loc]),
                    np.array([1 / np.sqrt(prec)]),
                    np.array([low]),
                    np.array([high]),
                )[0]
        out[row, K:] = np.concatenate([mu, s])
    return out
