"""Hidden Markov models' exact algorithms (seed 002 ch. 19): evaluation, forward–backward,
Viterbi and Baum–Welch.

Written once on a matrix of emission log-likelihoods ``log_b[t, k] = log p(x_t | z_t = k)``, so
categorical and Gaussian emissions (or any other) share them. Everything is vectorised over
states (one small matrix operation per time step) or over time (the evaluation problem as a
product of matrices, reduced pairwise in log2 T steps).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy.stats import norm


def hmm_log_likelihood(pi: np.ndarray, A: np.ndarray, log_b: np.ndarray) -> np.ndarray:
    """The evaluation problem, log p(x_1..x_T) (002 §19.4), as a product of matrices::

        p(x) = pi' D_1 A D_2 A ... A D_T 1,     D_t = diag(b_{., x_t})

    which is the forward recursion alpha_t = (alpha_{t-1} A) D_t unrolled. The T - 1 matrices
    M_t = A D_t are multiplied pairwise (a tree of log2 T batched matrix products), each level
    rescaled by its largest entry so that nothing underflows; the scales add up in log space.
    ``log_b`` is (..., T, K): leading dimensions are independent sequences.
    """
    log_b = np.asarray(log_b, dtype=float)
    shift = log_b.max(-1, keepdims=True)  # per-step scale of the emissions
    b = np.exp(log_b - shift)
    log_scale = shift[..., 0].sum(-1)
    v = pi * b[..., 0, :]  # alpha_1 up to scale
    M = A * b[..., 1:, None, :]  # M_t[i, j] = a_ij b_j(x_t), t = 2..T
    while M.shape[-3] > 1:
        if M.shape[-3] % 2:  # odd count: the last matrix waits a level
            last, M = M[..., -1:, :, :], M[..., :-1, :, :]
        else:
            last = None
        M = M[..., 0::2, :, :] @ M[..., 1::2, :, :]
        s = M.max(axis=(-2, -1), keepdims=True)
        M = M / s
        log_scale = log_scale + np.log(s[..., 0, 0]).sum(-1)
        if last is not None:
            M = np.concatenate([M, last], axis=-3)
    if M.shape[-3] == 1:
        v = (v[..., None, :] @ M[..., 0, :, :])[..., 0, :]
    return log_scale + np.log(v.sum(-1))


@dataclass
class HMMPosterior:
    """What forward–backward gives: the scaled forward and backward variables, log p(x), the
    one-slice posteriors gamma_t(k) = p(z_t = k | x) and the summed two-slice posteriors
    sum_t xi_t(i, j) = sum_t p(z_{t-1} = i, z_t = j | x)."""

    alpha: np.ndarray  # (T, K) p(z_t | x_1..x_t): the normalised forward variables
    beta: np.ndarray  # (T, K) beta_t / prod_{s > t} c_s
    log_likelihood: float
    gamma: np.ndarray  # (T, K)
    xi_sum: np.ndarray  # (K, K)


def forward_backward(pi: np.ndarray, A: np.ndarray, log_b: np.ndarray) -> HMMPosterior:
    """Forward–backward with per-step normalisation (002 §19.4.3–19.4.4)::

        alpha_1 = pi * b_1,   alpha_t = (alpha_{t-1} A) * b_t          c_t = sum_k alpha_t(k)
        beta_T = 1,           beta_t = A (b_{t+1} * beta_{t+1}) / c_{t+1}
        gamma_t = alpha_t * beta_t,   xi_t(i, j) = alpha_{t-1}(i) a_ij b_t(j) beta_t(j) / c_t

    with every alpha_t divided by its sum c_t as it is made, so that log p(x) = sum_t log c_t
    (plus the emission shifts) and nothing underflows. The backward step uses
    b_{t+1} (the document's line 3544 prints b_{x_t}: a typo).
    """
    log_b = np.asarray(log_b, dtype=float)
    T, K = log_b.shape
    shift = log_b.max(1, keepdims=True)
    b = np.exp(log_b - shift)
    alpha, beta, c = np.empty((T, K)), np.empty((T, K)), np.empty(T)
    a = pi * b[0]
    for t in range(T):
        if t:
            a = (alpha[t - 1] @ A) * b[t]
        c[t] = a.sum()
        alpha[t] = a / c[t]
    beta[T - 1] = 1.0
    for t in range(T - 2, -1, -1):
        beta[t] = A @ (b[t + 1] * beta[t + 1]) / c[t + 1]
    gamma = alpha * beta
    # sum over t of xi_t = A * sum_t alpha_{t-1}^T (b_t beta_t / c_t), one matrix product
    xi_sum = A * (alpha[:-1].T @ (b[1:] * beta[1:] / c[1:, None]))
    return HMMPosterior(alpha, beta, float(np.log(c).sum() + shift.sum()), gamma, xi_sum)


def viterbi(pi: np.ndarray, A: np.ndarray, log_b: np.ndarray) -> tuple[np.ndarray, float]:
    """The decoding problem, argmax_z p(z, x) (002 §19.5, Algorithm 5), in log space::

        V_1(k) = log pi_k + log b_k(x_1)
        V_t(k) = log b_k(x_t) + max_i [V_{t-1}(i) + log a_ik],   psi_t(k) = argmax_i [...]

    then backtracking from argmax_k V_T(k). (The document's recursion prints V_t for V_{t-1} and
    returns the pointer, not the path: typos.) Returns (path, log p(path, x))."""
    with np.errstate(divide="ignore"):
        log_pi, log_A = np.log(pi), np.log(A)
    log_b = np.asarray(log_b, dtype=float)
    T, K = log_b.shape
    psi = np.zeros((T, K), dtype=int)
    V = log_pi + log_b[0]
    for t in range(1, T):
        scores = V[:, None] + log_A  # (previous i, next k)
        psi[t] = scores.argmax(0)
        V = scores.max(0) + log_b[t]
    path = np.empty(T, dtype=int)
    path[-1] = int(V.argmax())
    for t in range(T - 1, 0, -1):
        path[t - 1] = psi[t, path[t]]
    return path, float(V.max())


def baum_welch(
    pi: np.ndarray,
    A: np.ndarray,
    emission: Any,
    log_emission: Callable[[Any], np.ndarray],
    m_step_emission: Callable[[np.ndarray], Any],
    max_iter: int,
    tol: float,
) -> tuple[np.ndarray, np.ndarray, Any, list[float], HMMPosterior]:
    """Baum–Welch, EM for an HMM (002 §19.6, M-step at L3667–3671)::

        E: gamma_t, xi_t by forward_backward at theta_old
        M: pi_i = gamma_1(i);   a_ij = sum_{t>=2} xi_t(i, j) / sum_{t>=2} gamma_{t-1}(i)
           emissions from gamma (``m_step_emission``: b_ij = sum_t gamma_t(i) I(x_t = j) /
           sum_t gamma_t(i) for symbols; weighted means and variances for Gaussians)

    Returns the parameters, the log-likelihood trace (one value per E-step, at the parameters
    before that step's M-step) and the last E-step's posterior."""
    trace: list[float] = []
    while True:
        post = forward_backward(pi, A, log_emission(emission))
        trace.append(post.log_likelihood)
        done = len(trace) > max_iter or (len(trace) > 1 and abs(trace[-1] - trace[-2]) < tol)
        if done:
            return pi, A, emission, trace, post
        pi = post.gamma[0]
        A = post.xi_sum / post.xi_sum.sum(1, keepdims=True)
        emission = m_step_emission(post.gamma)


def posterior_decoding(gamma: np.ndarray) -> np.ndarray:
    """The most probable state at each step on its own, argmax_k p(z_t = k | x) (002 L3552): it
    can differ from the Viterbi path, and need not even be a possible path."""
    return gamma.argmax(1)


def decode(pi: np.ndarray, A: np.ndarray, log_b: np.ndarray) -> dict[str, Any]:
    """The three problems at given parameters: log p(x), marginals, both decodings."""
    post = forward_backward(pi, A, log_b)
    path, log_joint = viterbi(pi, A, log_b)
    return {
        "log_likelihood": post.log_likelihood,
        "marginals": post.gamma,
        "filtered": post.alpha,
        "viterbi": path,
        "viterbi_log_joint": log_joint,
        "posterior_decoding": posterior_decoding(post.gamma),
    }


def sticky_start(K: int) -> np.ndarray:
    """Baum–Welch's starting transition matrix: stay with probability 0.7, the rest spread
    evenly over the other states."""
    A = np.full((K, K), 0.3 / max(K - 1, 1)) + np.eye(K) * (0.7 - 0.3 / max(K - 1, 1))
    return A / A.sum(1, keepdims=True)


def gaussian_log_b(x: np.ndarray, mu: np.ndarray, sigma: np.ndarray) -> np.ndarray:
    """The emission log-likelihoods log b_k(x_t) = log N(x_t | mu_k, sigma_k), shape (T, K)."""
    return norm.logpdf(x[:, None], mu, sigma)


def categorical_baum_welch(
    xs: np.ndarray, pi: np.ndarray, A: np.ndarray, B: np.ndarray, max_iter: int, tol: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[float]]:
    """:func:`baum_welch` with categorical emissions on the symbols ``xs`` (0..M-1) from
    (pi, A, B): log b_i(x_t) = log B[i, x_t]; M-step b_ij = sum_t gamma_t(i) I(x_t = j) /
    sum_t gamma_t(i). Returns (pi, A, B, log-likelihood trace)."""
    onehot = np.eye(B.shape[1])[xs]  # (T, M)

    def m_step(gamma: np.ndarray) -> np.ndarray:
        return (gamma.T @ onehot) / gamma.sum(0)[:, None]

    with np.errstate(divide="ignore"):
        pi, A, B, trace, _ = baum_welch(
            pi, A, B, lambda b: np.log(b[:, xs].T), m_step, max_iter, tol
        )
    return pi, A, B, trace


def gaussian_baum_welch(
    xs: np.ndarray,
    pi: np.ndarray,
    A: np.ndarray,
    mu: np.ndarray,
    sigma: np.ndarray,
    max_iter: int,
    tol: float,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, list[float]]:
    """:func:`baum_welch` with Gaussian emissions on the series ``xs`` from (pi, A, mu, sigma),
    M-step from the one-slice posteriors::

        N_k = sum_t gamma_t(k),   mu_k = sum_t gamma_t(k) x_t / N_k,
        sigma_k^2 = sum_t gamma_t(k) (x_t - mu_k)^2 / N_k      (with the new mu_k)

    sigma_k^2 floored at 1e-6 Var(x) (a state on a single point would make the likelihood
    unbounded; the floor is the constrained maximum, so the trace stays monotone).
    Returns (pi, A, mu, sigma, log-likelihood trace), the states in the fit's own order."""
    floor = 1e-6 * max(float(xs.var()), 1e-12)

    def m_step(gamma: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        nk = np.maximum(gamma.sum(0), 1e-300)
        mean = gamma.T @ xs / nk
        var = (gamma * (xs[:, None] - mean) ** 2).sum(0) / nk
        return mean, np.sqrt(np.maximum(var, floor))

    pi, A, (mu, sigma), trace, _ = baum_welch(
        pi, A, (mu, sigma), lambda e: gaussian_log_b(xs, *e), m_step, max_iter, tol
    )
    return pi, A, mu, sigma, trace


def sample_hmm(
    rng: np.random.Generator, pi: np.ndarray, A: np.ndarray, B: np.ndarray, T: int
) -> tuple[np.ndarray, np.ndarray]:
    """Ancestral sampling of a categorical HMM: (symbols, states)."""
    z = np.empty(T, dtype=int)
    x = np.empty(T, dtype=int)
    for t in range(T):
        z[t] = rng.choice(len(pi), p=pi if t == 0 else A[z[t - 1]])
        x[t] = rng.choice(B.shape[1], p=B[z[t]])
    return x, z


def sample_gaussian_hmm(
    rng: np.random.Generator,
    pi: np.ndarray,
    A: np.ndarray,
    mu: np.ndarray,
    sigma: np.ndarray,
    T: int,
) -> tuple[np.ndarray, np.ndarray]:
    """Ancestral sampling of an HMM with Gaussian emissions: (observations, states)."""
    z = np.empty(T, dtype=int)
    for t in range(T):
        z[t] = rng.choice(len(pi), p=pi if t == 0 else A[z[t - 1]])
    return mu[z] + sigma[z] * rng.standard_normal(T), z


def categorical_start(x: np.ndarray, K: int, M: int) -> dict[str, np.ndarray]:
    """Baum–Welch's deterministic asymmetric start with categorical emissions on the symbols
    ``x`` (0..M-1): uniform pi, sticky A, B tilted towards a different symbol per state (EM
    cannot leave a start where every state is the same)."""
    tilt = np.exp(-0.5 * (np.arange(M)[None, :] - np.linspace(0, M - 1, K)[:, None]) ** 2)
    counts = np.bincount(x, minlength=M) + 1.0
    B = counts * (0.5 + tilt)
    return {"pi": np.full(K, 1.0 / K), "A": sticky_start(K), "B": B / B.sum(1)[:, None]}


def gaussian_start(xs: np.ndarray, K: int) -> dict[str, np.ndarray]:
    """Baum–Welch's deterministic start with Gaussian emissions: uniform pi, sticky A, means at
    the data's quantiles, spreads at its sd."""
    return {
        "pi": np.full(K, 1.0 / K),
        "A": sticky_start(K),
        "mu": np.quantile(xs, (np.arange(K) + 0.5) / K),
        "sigma": np.full(K, max(float(xs.std()), 1e-3)),
    }
