"""Expectation–maximisation for mixtures on plain arrays: a two-component Bernoulli mixture
(the three-coin problem) and a 1-D Gaussian mixture."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from scipy.special import logsumexp
from tqdm.auto import tqdm


def bernoulli_mixture_em(
    y: np.ndarray, theta: Sequence[float], max_iter: int, tol: float
) -> tuple[np.ndarray, list[float], np.ndarray]:
    """EM for a two-component Bernoulli mixture, theta = (pi, p, q): the three-coin problem of
    seed 001 §1.1, eqs (4)-(5). Returns theta, the log-likelihood trace, responsibilities.

    E-step: mu_j = pi p^y (1-p)^(1-y) / [pi p^y (1-p)^(1-y) + (1-pi) q^y (1-q)^(1-y)].
    M-step: pi = mean(mu); p = sum(mu y) / sum(mu); q = sum((1-mu) y) / sum(1-mu).
    """
    pi, p, q = map(float, theta)
    trace: list[float] = []
    mu = np.full_like(y, pi)
    for _ in range(max_iter + 1):
        a = pi * p**y * (1 - p) ** (1 - y)
        c = (1 - pi) * q**y * (1 - q) ** (1 - y)
        trace.append(float(np.log(a + c).sum()))
        mu = a / (a + c)
        if len(trace) > 1 and abs(trace[-1] - trace[-2]) < tol:
            break
        if len(trace) == max_iter + 1:
            break
        pi = mu.mean()
        p = (mu * y).sum() / mu.sum()
        q = ((1 - mu) * y).sum() / (1 - mu).sum()
    return np.array([pi, p, q]), trace, mu


def gaussian_mixture_em(
    y: np.ndarray,
    weights: np.ndarray,
    locs: np.ndarray,
    scales: np.ndarray,
    max_iter: int,
    tol: float,
    progress: bool = False,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[float], np.ndarray]:
    """EM for a 1-D Gaussian mixture (seed 001 §1.4 eqs (39), (42)-(44); 002 §18.2 Alg. 2).

    E-step: gamma_nk = w_k N(y_n | mu_k, s_k^2) / sum_j w_j N(y_n | mu_j, s_j^2).
    M-step: N_k = sum_n gamma_nk; mu_k = sum_n gamma_nk y_n / N_k;
            s_k^2 = sum_n gamma_nk (y_n - mu_k)^2 / N_k (with the *new* mu_k); w_k = N_k / N.
    """
    w, mu, s = weights.astype(float), locs.astype(float), scales.astype(float)
    trace: list[float] = []
    floor = 1e-6 * max(np.var(y), 1e-12)  # keeps a component from collapsing onto one point
    for _ in tqdm(range(max_iter + 1), desc="em", disable=not progress, leave=False):
        log_joint = np.log(w) - 0.5 * np.log(2 * np.pi * s**2) - 0.5 * ((y[:, None] - mu) / s) ** 2
        ll = logsumexp(log_joint, axis=1)
        trace.append(float(ll.sum()))
        gamma = np.exp(log_joint - ll[:, None])
        if (
            len(trace) > 1
            and abs(trace[-1] - trace[-2]) < tol * abs(trace[-1])
            or len(trace) == max_iter + 1
        ):
            break
        nk = gamma.sum(0)
        mu = (gamma * y[:, None]).sum(0) / nk
        s = np.sqrt(np.maximum((gamma * (y[:, None] - mu) ** 2).sum(0) / nk, floor))
        w = nk / y.size
    return w, mu, s, trace, gamma
