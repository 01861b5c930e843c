"""Probabilistic PCA on plain arrays (Tipping & Bishop 1999; seed 000 §3.3.1): the marginal
density, the closed-form maximum likelihood, EM, and EM for a mixture of PPCA."""

from __future__ import annotations

import numpy as np
from scipy.special import logsumexp
from tqdm.auto import tqdm


def canonical_loadings(W: np.ndarray) -> np.ndarray:
    """W rotated to principal axes: W = U S V^T  ->  U S, columns by decreasing norm, each
    column's largest entry positive (the PPCA likelihood is invariant under W -> W R, R
    orthogonal: this picks one representative so estimates can be compared entry by entry)."""
    u, s, _ = np.linalg.svd(W, full_matrices=False)
    out = u * s
    signs = np.sign(out[np.abs(out).argmax(0), np.arange(out.shape[1])])
    return out * np.where(signs == 0, 1.0, signs)


def ppca_log_density(X: np.ndarray, W: np.ndarray, mu: np.ndarray, sigma2: float) -> np.ndarray:
    """log N(x_i | mu, C) for each row x_i of X, C = W W^T + s^2 I: x_i's density with z_i
    integrated out. With C = L L^T (Cholesky) and u_i = L^-1 (x_i - mu):
    -1/2 [D ln 2 pi + ln|C| + |u_i|^2]."""
    D = X.shape[1]
    L = np.linalg.cholesky(W @ W.T + sigma2 * np.eye(D))
    u = (X - mu) @ np.linalg.inv(L).T
    return -0.5 * (D * np.log(2 * np.pi) + 2 * np.log(np.diag(L)).sum() + (u**2).sum(1))


def ppca_log_likelihood(X: np.ndarray, W: np.ndarray, mu: np.ndarray, sigma2: float) -> float:
    """log p(X | W, mu, sigma^2) = -N/2 [D ln 2 pi + ln|C| + tr(C^-1 S_mu)], C = W W^T + s^2 I,
    S_mu = (1/N) sum_i (x_i - mu)(x_i - mu)^T: x_i ~ N(mu, C) with z_i integrated out."""
    return float(ppca_log_density(X, W, mu, sigma2).sum())


def ppca_ml(X: np.ndarray, d: int) -> tuple[np.ndarray, np.ndarray, float]:
    """Tipping & Bishop's closed-form maximum likelihood: (W on principal axes, mu, sigma^2).

    mu = x_bar; S = (1/N) sum (x_i - x_bar)(x_i - x_bar)^T = U L U^T (eigenvalues descending);
    sigma^2 = (1 / (D - d)) sum_{j > d} L_j;  W = U_d (L_d - sigma^2 I)^(1/2).
    """
    mu = X.mean(0)
    R = X - mu
    lam, U = np.linalg.eigh(R.T @ R / X.shape[0])
    lam, U = lam[::-1], U[:, ::-1]
    sigma2 = float(lam[d:].mean())
    W = U[:, :d] * np.sqrt(np.maximum(lam[:d] - sigma2, 0.0))
    return canonical_loadings(W), mu, sigma2


def ppca_em_steps(
    X: np.ndarray,
    W: np.ndarray,
    sigma2: float,
    max_iter: int,
    tol: float,
    progress: bool = False,
) -> tuple[np.ndarray, np.ndarray, float, list[float]]:
    """EM for PPCA (seed 000 §3.3.1 L784, §3.2; Tipping & Bishop 1999, eqs 25-26, 29-30).

    mu = x_bar once (its M-step does not depend on the z_i). Then, with M = W^T W + s^2 I:
    E-step: <z_i> = M^-1 W^T (x_i - mu),  <z_i z_i^T> = s^2 M^-1 + <z_i><z_i>^T.
    M-step: W = [sum (x_i - mu) <z_i>^T] [sum <z_i z_i^T>]^-1,
            s^2 = 1/(N D) sum [ |x_i - mu|^2 - 2 <z_i>^T W^T (x_i - mu) + tr(<z_i z_i^T> W^T W) ]
    (with the new W). Cost O(N D d) per iteration against O(N D^2) for the covariance (L786).
    """
    n, D = X.shape
    d = W.shape[1]
    mu = X.mean(0)
    R = X - mu
    trace = [ppca_log_likelihood(X, W, mu, sigma2)]
    for _ in tqdm(range(max_iter), desc="em", disable=not progress, leave=False):
        M_inv = np.linalg.inv(W.T @ W + sigma2 * np.eye(d))
        Ez = R @ W @ M_inv  # (N, d); M_inv is symmetric
        sum_Ezz = n * sigma2 * M_inv + Ez.T @ Ez
        W = (R.T @ Ez) @ np.linalg.inv(sum_Ezz)
        sigma2 = float(
            ((R**2).sum() - 2 * np.sum(Ez * (R @ W)) + np.trace(sum_Ezz @ W.T @ W)) / (n * D)
        )
        trace.append(ppca_log_likelihood(X, W, mu, sigma2))
        if abs(trace[-1] - trace[-2]) < tol * abs(trace[-1]):
            break
    return W, mu, sigma2, trace


def mppca_responsibilities(
    X: np.ndarray, pi: np.ndarray, mu: np.ndarray, W: np.ndarray, sigma2: np.ndarray
) -> tuple[np.ndarray, float]:
    """E-step over t (seed L802, summed over t_n with z_n integrated out): R_nc = P(t_n = c |
    x_n) = pi_c N(x_n | mu_c, C_c) / sum_k pi_k N(x_n | mu_k, C_k), C_c = W_c W_c^T + s_c^2 I;
    and log p(X | theta) = sum_n log sum_k pi_k N(x_n | mu_k, C_k)."""
    log_joint = np.log(pi) + np.stack(
        [ppca_log_density(X, W[c], mu[c], sigma2[c]) for c in range(len(pi))], axis=1
    )
    log_px = logsumexp(log_joint, axis=1, keepdims=True)
    return np.exp(log_joint - log_px), float(log_px.sum())


def mppca_em_steps(
    X: np.ndarray,
    pi: np.ndarray,
    mu: np.ndarray,
    W: np.ndarray,
    sigma2: np.ndarray,
    max_iter: int,
    tol: float,
    progress: bool = False,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, list[float], np.ndarray]:
    """EM for a mixture of PPCA (seed 000 §3.3.1 L802–809; Tipping & Bishop 1999, Appendix C).
    Returns (pi, mu, W, sigma^2, log-likelihood per iteration, responsibilities).

    Each iteration is two cycles, each an E-step and a partial M-step (Meng & van Dyk's AECM:
    neither can lower the log-likelihood):

    cycle 1, t_n missing: R_nc = P(t_n = c | x_n, theta) (:func:`mppca_responsibilities`);
        N_c = sum_n R_nc,  pi_c = N_c / N,  mu_c = sum_n R_nc x_n / N_c.
    cycle 2, t_n and z_n missing: R_nc again at the new (pi, mu); then each component's PPCA
        EM step on its responsibility-weighted covariance, with M_c = W_c^T W_c + s_c^2 I:
        S_c   = sum_n R_nc (x_n - mu_c)(x_n - mu_c)^T / N_c
        W_c  <- S_c W_c (s_c^2 I + M_c^-1 W_c^T S_c W_c)^-1
        s_c^2 <- tr(S_c - S_c W_c M_c^-1 W_c(new)^T) / D
    (the E-step's <z_n | t_n = c> = M_c^-1 W_c^T (x_n - mu_c) summed into S_c). s_c^2 is kept
    above 1e-6 of the data's variance, so a component cannot collapse onto a point.
    """
    n, D = X.shape
    C, _, d = W.shape
    pi, mu, W, sigma2 = (np.array(a, dtype=float) for a in (pi, mu, W, sigma2))
    floor = 1e-6 * float(X.var())
    R, log_lik = mppca_responsibilities(X, pi, mu, W, sigma2)
    trace = [log_lik]
    for _ in tqdm(range(max_iter), desc="em", disable=not progress, leave=False):
        Nc = R.sum(0)  # cycle 1
        pi = Nc / n
        mu = (R.T @ X) / Nc[:, None]
        R, _ = mppca_responsibilities(X, pi, mu, W, sigma2)  # cycle 2
        Nc = R.sum(0)
        for c in range(C):
            Xc = X - mu[c]
            S = (R[:, c, None] * Xc).T @ Xc / Nc[c]
            M_inv = np.linalg.inv(W[c].T @ W[c] + sigma2[c] * np.eye(d))
            SW = S @ W[c]
            W_new = SW @ np.linalg.inv(sigma2[c] * np.eye(d) + M_inv @ W[c].T @ SW)
            sigma2[c] = max(float(np.trace(S - SW @ M_inv @ W_new.T)) / D, floor)
            W[c] = W_new
        R, log_lik = mppca_responsibilities(X, pi, mu, W, sigma2)
        trace.append(log_lik)
        if abs(trace[-1] - trace[-2]) < tol * abs(trace[-1]):
            break
    return pi, mu, W, sigma2, trace, R
