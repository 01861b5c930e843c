"""Linear-Gaussian regression in closed form (seed 002 ch. 5, 6, 8): the Gaussian posterior of
linear weights under an isotropic prior, its evidence and predictive, recursive least squares,
and ridge regression in its primal and dual forms."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pyro.distributions as dist
import torch


def gaussian_posterior(
    X: torch.Tensor, y: torch.Tensor, sigma: float, tau: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """Posterior ``(mean, cov)`` of w in y ~ N(X w, sigma^2 I), w ~ N(0, tau^2 I) (seed 002 §8.3,
    L1814-1818 with mu_0 = 0, Sigma_0 = tau^2 I)::

        Sigma_n = (I / tau^2 + X^T X / sigma^2)^-1,    mu_n = Sigma_n X^T y / sigma^2.

    mu_n is the ridge solution with lambda = sigma^2 / tau^2 (seed 002 §5.4)."""
    d = X.shape[-1]
    precision = torch.eye(d, dtype=X.dtype) / tau**2 + X.T @ X / sigma**2
    cov = torch.cholesky_inverse(torch.linalg.cholesky(precision))
    cov = (cov + cov.T) / 2
    return cov @ (X.T @ y) / sigma**2, cov


def gaussian_log_evidence(X: torch.Tensor, y: torch.Tensor, sigma: float, tau: float) -> float:
    """log p(y | X) = log N(y | 0, sigma^2 I + tau^2 X X^T): w integrated out."""
    n = X.shape[0]
    cov = sigma**2 * torch.eye(n, dtype=X.dtype) + tau**2 * X @ X.T
    return float(dist.MultivariateNormal(torch.zeros(n, dtype=X.dtype), cov).log_prob(y))


def posterior_predictive(
    X_new: Any, mean: Any, cov: Any, sigma: float
) -> tuple[np.ndarray, np.ndarray]:
    """Predictive mean and variance of new observations (seed 002 §8.3, L1830)::

    p(y* | x*, y) = N(y* | x* mu_n, x* Sigma_n x*^T + sigma^2).
    """
    X_new, mean, cov = (np.asarray(a, dtype=float) for a in (X_new, mean, cov))
    return X_new @ mean, np.einsum("ij,jk,ik->i", X_new, cov, X_new) + sigma**2


def rls(
    X: Any, y: Any, theta0: Any, P0: Any, R: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Recursive least squares (seed 002 ch. 6, L1298-1336), one observation x_k (a row) at a
    time::

        S_k     = x_k P_{k-1} x_k^T + R                    innovation variance
        K_k     = P_{k-1} x_k^T / S_k                      gain
        theta_k = theta_{k-1} + K_k (y_k - x_k theta_{k-1})
        P_k     = (I - K_k x_k) P_{k-1} (I - K_k x_k)^T + K_k R K_k^T   (Joseph form, eq. 6.1)

    With theta_0 = mu_0, P_0 = Sigma_0 and R = sigma^2, (theta_k, P_k) is the Bayesian posterior
    (mu_n, Sigma_n) of the first k observations. Returns theta_k (n, d), P_k (n, d, d) and the
    log predictive densities log N(y_k | x_k theta_{k-1}, S_k), whose sum is log p(y)."""
    X, y = np.asarray(X, dtype=float), np.asarray(y, dtype=float)
    theta, P = np.array(theta0, dtype=float), np.array(P0, dtype=float)
    eye = np.eye(theta.size)
    thetas, Ps, log_pred = [], [], []
    for x_k, y_k in zip(X, y, strict=True):
        s = float(x_k @ P @ x_k) + R
        gain = P @ x_k / s
        err = y_k - float(x_k @ theta)
        log_pred.append(-0.5 * (math.log(2 * math.pi * s) + err**2 / s))
        theta = theta + gain * err
        a = eye - np.outer(gain, x_k)
        P = a @ P @ a.T + R * np.outer(gain, gain)
        thetas.append(theta)
        Ps.append(P)
    return np.array(thetas), np.array(Ps), np.array(log_pred)


def rls_scalar(y: Any, theta0: float, P0: float, R: float) -> tuple[np.ndarray, np.ndarray]:
    """The document's scalar example (seed 002 ch. 6, L1369-1431): x_k = 1, so
    K_k = P_{k-1} / (P_{k-1} + R), theta_k = theta_{k-1} + K_k (y_k - theta_{k-1}),
    P_k = P_{k-1} R / (P_{k-1} + R). Returns (theta_1..n, P_1..n)."""
    y = np.asarray(y, dtype=float)
    thetas, Ps, _ = rls(np.ones((y.size, 1)), y, [theta0], [[P0]], R)
    return thetas[:, 0], Ps[:, 0, 0]


def ridge_primal(X: Any, y: Any, lam: float) -> np.ndarray:
    """Ridge regression (seed 002 §5.4, eq. 5.6): (X^T X + lambda I)^-1 X^T y; O(n d^2 + d^3)."""
    X, y = np.asarray(X, dtype=float), np.asarray(y, dtype=float)
    return np.linalg.solve(X.T @ X + lam * np.eye(X.shape[1]), X.T @ y)


def ridge_dual(X: Any, y: Any, lam: float) -> np.ndarray:
    """The dual form (seed 002 §5.4, eqs 5.15-5.16): X^T alpha with alpha = (X X^T + lambda I)^-1 y
    (the document omits the I); O(n^2 d + n^3), the cheap side when d > n."""
    X, y = np.asarray(X, dtype=float), np.asarray(y, dtype=float)
    return X.T @ np.linalg.solve(X @ X.T + lam * np.eye(X.shape[0]), y)
