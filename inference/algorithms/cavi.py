"""Coordinate-ascent variational inference (CAVI) on plain arrays: mean-field updates in closed
form, each maximising the ELBO in its block, so the ELBO never decreases."""

from __future__ import annotations

import math

import numpy as np
from scipy.special import digamma, gammaln
from tqdm.auto import tqdm

from zoo_inference.algorithms.conjugate import normal_mean_update, tau_conditional


def dirichlet_expected_log(conc: np.ndarray) -> np.ndarray:
    """E[log x] under Dirichlet(conc) (last axis): digamma(conc) - digamma(sum conc)."""
    return digamma(conc) - digamma(conc.sum(-1, keepdims=True))


def lda_responsibilities(words: np.ndarray, lam: np.ndarray, gamma: np.ndarray) -> np.ndarray:
    """q(z_dn = k) ∝ exp(E[log theta_dk] + E[log phi_{k, w_dn}]) (seed 001 eq 113), (D, N, K),
    under q(phi_k) = Dir(lam_k) and q(theta_d) = Dir(gamma_d)."""
    log_r = dirichlet_expected_log(gamma)[:, None, :] + dirichlet_expected_log(lam).T[words]
    resp = np.exp(log_r - log_r.max(-1, keepdims=True))
    resp /= resp.sum(-1, keepdims=True)
    return resp


def lda_elbo(
    words: np.ndarray,
    alpha: float,
    eta: float,
    lam: np.ndarray,
    gamma: np.ndarray,
    resp: np.ndarray,
) -> float:
    """The mean-field ELBO of LDA in closed form (seed 001 eq 130, terms 123–129):
    E[log p(phi)] + E[log p(theta)] + E[log p(z | theta)] + E[log p(w | z, phi)]
    - E[log q(phi)] - E[log q(theta)] - E[log q(z)], with E[log x] from
    :func:`dirichlet_expected_log`. ``resp`` (D, N, K) are q(z_dn)'s probabilities."""
    K, V = lam.shape
    e_log_phi, e_log_theta = dirichlet_expected_log(lam), dirichlet_expected_log(gamma)

    def dirichlet_terms(conc: np.ndarray, prior: float, e_log: np.ndarray) -> float:
        # E_q[log Dir(x | prior)] - E_q[log Dir(x | conc)], summed over rows
        n = conc.shape[-1]
        e_prior = gammaln(n * prior) - n * gammaln(prior) + ((prior - 1) * e_log).sum(-1)
        e_q = gammaln(conc.sum(-1)) - gammaln(conc).sum(-1) + ((conc - 1) * e_log).sum(-1)
        return float((e_prior - e_q).sum())

    word_term = (resp * e_log_phi.T[words]).sum()  # e_log_phi.T[w_dn] is (D, N, K)
    topic_term = (resp * e_log_theta[:, None, :]).sum()
    entropy = -(resp * np.log(np.clip(resp, 1e-300, None))).sum()
    return float(
        dirichlet_terms(lam, eta, e_log_phi)
        + dirichlet_terms(gamma, alpha, e_log_theta)
        + word_term
        + topic_term
        + entropy
    )


def lda_cavi_steps(
    words: np.ndarray,
    K: int,
    V: int,
    alpha: float,
    eta: float,
    lam: np.ndarray,
    max_iter: int,
    tol: float,
    progress: bool = False,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[float]]:
    """Coordinate ascent for LDA (seed 001 §2.5.1, eqs 113, 117, 118):

        q(z_dn = k) ∝ exp(E[log theta_dk] + E[log phi_{k, w_dn}])              (113)
        gamma_d     = alpha + sum_n q(z_dn)                                      (117)
        lambda_kv   = eta + sum_{d,n} q(z_dn = k) 1[w_dn = v]                    (118)

    Each update maximises the ELBO in its block, so the ELBO never decreases."""
    D, N = words.shape
    gamma = np.full((D, K), alpha + N / K)
    trace: list[float] = []
    resp = np.full((D, N, K), 1.0 / K)
    for _ in tqdm(range(max_iter), desc="cavi", disable=not progress, leave=False):
        resp = lda_responsibilities(words, lam, gamma)
        gamma = alpha + resp.sum(1)
        counts = np.zeros((K, V))
        np.add.at(counts.T, words.ravel(), resp.reshape(-1, K))
        lam = eta + counts
        trace.append(lda_elbo(words, alpha, eta, lam, gamma, resp))
        if len(trace) > 1 and abs(trace[-1] - trace[-2]) < tol * abs(trace[-1]):
            break
    return lam, gamma, resp, trace


def normal_gamma_elbo(
    x: np.ndarray,
    mu0: float,
    kappa0: float,
    a0: float,
    b0: float,
    m: float,
    v: float,
    a: float,
    b: float,
) -> float:
    """ELBO of q(mu) q(tau) = N(m, v) Gamma(a, b) (rate b) for the Normal–Gamma model:
    E_q[log p(x | mu, tau) + log p(mu | tau) + log p(tau)] + H[q(mu)] + H[q(tau)]."""
    n = x.size
    e_tau, e_log_tau = a / b, digamma(a) - np.log(b)
    sq_data = float(((x - m) ** 2).sum()) + n * v  # E_q sum_i (x_i - mu)^2
    sq_prior = (m - mu0) ** 2 + v  # E_q (mu - mu0)^2
    log_lik = 0.5 * n * (e_log_tau - np.log(2 * np.pi)) - 0.5 * e_tau * sq_data
    log_p_mu = (
        0.5 * (np.log(kappa0) + e_log_tau - np.log(2 * np.pi)) - 0.5 * kappa0 * e_tau * sq_prior
    )
    log_p_tau = a0 * np.log(b0) - gammaln(a0) + (a0 - 1) * e_log_tau - b0 * e_tau
    h_mu = 0.5 * np.log(2 * np.pi * math.e * v)
    h_tau = a - np.log(b) + gammaln(a) + (1 - a) * digamma(a)
    return float(log_lik + log_p_mu + log_p_tau + h_mu + h_tau)


def normal_gamma_cavi(
    xs: np.ndarray, mu0: float, kappa0: float, a0: float, b0: float, max_iter: int, tol: float
) -> tuple[float, float, float, float, list[float]]:
    """CAVI for the mean-field q(mu) q(tau) = N(m, v) Gamma(a, b) of the Normal–Gamma model
    (seed 001 §2.3, eqs 84-87, shape corrected): q(mu) = N(mu_N, 1 / (kappa_N E[tau])) and
    q(tau) = Gamma(a0 + (N+1)/2, b0 + 1/2 E_q(mu)[sum_i (x_i - mu)^2 + kappa0 (mu - mu0)^2]).
    Starts at E[tau] = a0/b0 and stops when q(tau)'s rate changes by less than ``tol``
    (relative). Returns (m, v, a, b, ELBO after every sweep)."""
    n = xs.size
    # q(mu)'s mean is mu_N whatever q(tau) is; its precision is kappa_N E[tau]
    m, kappa_n = normal_mean_update(mu0, kappa0, float(xs.sum()), n, 1.0)
    e_tau, b = a0 / b0, b0
    trace: list[float] = []
    for _ in range(max_iter):
        v = 1.0 / (kappa_n * e_tau)
        # E_q(mu) of the conditional's rate: the squares at mu = m plus (N + kappa0) Var(mu)
        a, rate_at_m = tau_conditional(xs, m, mu0, kappa0, a0, b0)
        b, b_old = float(rate_at_m) + 0.5 * kappa_n * v, b
        e_tau = a / b
        trace.append(normal_gamma_elbo(xs, mu0, kappa0, a0, b0, m, v, a, b))
        if abs(b - b_old) <= tol * b:
            break
    return m, v, a, b, trace


def gaussian_mixture_elbo(
    y: np.ndarray,
    m0: np.ndarray,
    s0: float,
    sigma: float,
    alpha0: float,
    alpha: np.ndarray,
    m: np.ndarray,
    v: np.ndarray,
    phi: np.ndarray,
) -> float:
    """The mean-field ELBO of a Bayesian Gaussian mixture with known spread ``sigma`` in closed
    form: w ~ Dir(alpha0), mu_k ~ N(m0_k, s0^2), z_i ~ Cat(w), y_i ~ N(mu_{z_i}, sigma^2), under
    q(w) q(mu) q(z) = Dir(alpha) prod_k N(m_k, v_k) prod_i Cat(phi_i):
    E[log p(w) + log p(mu) + log p(z | w) + log p(y | z, mu)] - E[log q(w) q(mu) q(z)]."""
    K = alpha.size
    e_log_w = dirichlet_expected_log(alpha)
    p_w = gammaln(K * alpha0) - K * gammaln(alpha0) + (alpha0 - 1) * e_log_w.sum()
    q_w = gammaln(alpha.sum()) - gammaln(alpha).sum() + ((alpha - 1) * e_log_w).sum()
    p_mu = (-0.5 * np.log(2 * np.pi * s0**2) - ((m - m0) ** 2 + v) / (2 * s0**2)).sum()
    h_mu = 0.5 * np.log(2 * np.pi * math.e * v).sum()
    p_z = (phi * e_log_w).sum()
    sq = (y[:, None] - m) ** 2 + v  # E_q (y_i - mu_k)^2
    p_y = (phi * (-0.5 * np.log(2 * np.pi * sigma**2) - sq / (2 * sigma**2))).sum()
    h_z = -(phi * np.log(np.clip(phi, 1e-300, None))).sum()
    return float(p_w - q_w + p_mu + h_mu + p_z + p_y + h_z)


def gaussian_mixture_cavi(
    y: np.ndarray,
    m0: np.ndarray,
    s0: float,
    sigma: float,
    alpha0: float,
    m: np.ndarray,
    max_iter: int,
    tol: float,
    progress: bool = False,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, list[float]]:
    """CAVI for the Bayesian Gaussian mixture of :func:`gaussian_mixture_elbo` (seed 000
    §2.2.3, L506/L524: log q_j = E_{q_-j} log p(X, theta) + const), from q(mu_k) = N(m_k, s0^2)
    and q(w) = Dir(alpha0 + N/K). Each sweep:

        phi_ik  ∝ exp(E[log w_k] + (y_i m_k - (m_k^2 + v_k) / 2) / sigma^2)
        alpha_k = alpha0 + sum_i phi_ik
        v_k     = 1 / (1/s0^2 + N_k / sigma^2),  N_k = sum_i phi_ik
        m_k     = v_k (m0_k / s0^2 + sum_i phi_ik y_i / sigma^2)

    Each update maximises the ELBO in its block, so the ELBO (traced after every sweep) never
    decreases; stops when it changes by less than ``tol`` (relative). Returns (alpha, m, v,
    phi, ELBO trace)."""
    K, N = m.size, y.size
    alpha, v = np.full(K, alpha0 + N / K), np.full(K, s0**2)
    m = np.asarray(m, dtype=float)
    trace: list[float] = []
    phi = np.full((N, K), 1.0 / K)
    for _ in tqdm(range(max_iter), desc="cavi", disable=not progress, leave=False):
        log_phi = dirichlet_expected_log(alpha) + (y[:, None] * m - 0.5 * (m**2 + v)) / sigma**2
        phi = np.exp(log_phi - log_phi.max(1, keepdims=True))
        phi /= phi.sum(1, keepdims=True)
        nk = phi.sum(0)
        alpha = alpha0 + nk
        v = 1 / (1 / s0**2 + nk / sigma**2)
        m = v * (m0 / s0**2 + (phi * y[:, None]).sum(0) / sigma**2)
        trace.append(gaussian_mixture_elbo(y, m0, s0, sigma, alpha0, alpha, m, v, phi))
        if len(trace) > 1 and abs(trace[-1] - trace[-2]) < tol * abs(trace[-1]):
            break
    return alpha, m, v, phi, trace
