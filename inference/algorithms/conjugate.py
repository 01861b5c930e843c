"""Conjugate updates in closed form: the posterior of a normal mean, the Normal–Gamma
conditional of a precision, per-class Normal–Gamma and Beta posteriors with their marginal
likelihoods, the Dirichlet–categorical evidence, and naive Bayes' posterior predictive."""

from __future__ import annotations

from typing import Any

import numpy as np
import pyro.distributions as dist
import torch
from scipy.special import betaln, gammaln, logsumexp


def normal_mean_update(
    prior_mean: Any, prior_prec: Any, x_sum: Any, n: int, noise_prec: Any
) -> tuple[Any, Any]:
    """Posterior (mean, precision) of a normal mean: prior N(m0, 1/p0), n observations with
    precision p each and sum S: precision p0 + n p, mean (p0 m0 + p S) / (p0 + n p).

    The closed form of a normal-normal posterior, the Normal–Gamma posterior's location, the
    Gibbs conditional mu | tau and CAVI's q(mu); works on floats, arrays and tensors.
    """
    prec = prior_prec + n * noise_prec
    return (prior_prec * prior_mean + noise_prec * x_sum) / prec, prec


def tau_conditional(
    x: np.ndarray, mu: Any, mu0: float, kappa0: float, a0: float, b0: float
) -> tuple[float, np.ndarray]:
    """(shape, rate) of the exact conditional p(tau | mu, x) (seed 001 eq 88, corrected):
    tau^(a0-1) e^(-b0 tau) * tau^(1/2) e^(-kappa0 tau (mu-mu0)^2 / 2) * tau^(N/2)
    e^(-tau sum_i (x_i-mu)^2 / 2), so Gamma(a0 + (N+1)/2, b0 + 1/2 [sum_i (x_i - mu)^2 +
    kappa0 (mu - mu0)^2]). The document's a0 + N/2 drops the tau^(1/2) of p(mu | tau).
    Vectorised over an array of mu."""
    mu = np.asarray(mu, dtype=float)
    ss = ((x - mu[..., None]) ** 2).sum(-1) + kappa0 * (mu - mu0) ** 2
    return a0 + (x.size + 1) / 2, b0 + 0.5 * ss


def dirichlet_log_ml(labels: np.ndarray, C: int, alpha: float) -> float:
    """log p(labels) under pi ~ Dirichlet(alpha 1), labels ~ Categorical(pi) (Dirichlet–
    categorical): log G(C a) - log G(C a + N) + sum_c [log G(a + N_c) - log G(a)]."""
    n_c = np.bincount(labels, minlength=C)
    return float(
        gammaln(C * alpha)
        - gammaln(C * alpha + len(labels))
        + (gammaln(alpha + n_c) - gammaln(alpha)).sum()
    )


def normal_gamma_update(
    X: np.ndarray, labels: np.ndarray, C: int, m0: float, kappa0: float, a0: float, b0: float
) -> tuple[dict[str, np.ndarray], float]:
    """Per class c and feature j, the Normal–Gamma posterior of (mu_cj, tau_cj) and the log
    marginal likelihood of the features given the labels.

    With n, xbar, S = sum (x - xbar)^2 of class c's values of feature j:
    kappa_n = kappa0 + n, m_n = (kappa0 m0 + n xbar) / kappa_n, a_n = a0 + n / 2,
    b_n = b0 + S / 2 + kappa0 n (xbar - m0)^2 / (2 kappa_n);
    log p(x) = log G(a_n) - log G(a0) + a0 log b0 - a_n log b_n + 1/2 log(kappa0 / kappa_n)
               - n / 2 log(2 pi).
    """
    D = X.shape[1]
    n = np.bincount(labels, minlength=C).astype(float)[:, None] * np.ones(D)
    total = np.zeros((C, D))
    np.add.at(total, labels, X)
    xbar = np.divide(total, n, out=np.zeros((C, D)), where=n > 0)
    S = np.zeros((C, D))
    np.add.at(S, labels, (X - xbar[labels]) ** 2)
    kappa = kappa0 + n
    m = (kappa0 * m0 + n * xbar) / kappa
    a = a0 + n / 2
    b = b0 + S / 2 + kappa0 * n * (xbar - m0) ** 2 / (2 * kappa)
    log_ml = normal_gamma_log_evidence(n, kappa0, a0, b0, kappa, a, b)
    return {"m": m, "kappa": kappa, "a": a, "b": b}, float(log_ml.sum())


def normal_gamma_log_evidence(
    n: Any, kappa0: float, a0: float, b0: float, kappa_n: Any, a_n: Any, b_n: Any
) -> Any:
    """log p(x) of n Normal draws under a Normal–Gamma(m0, kappa0, a0, b0) prior, from the
    posterior's (kappa_n, a_n, b_n): log G(a_n) - log G(a0) + a0 log b0 - a_n log b_n
    + 1/2 log(kappa0 / kappa_n) - n / 2 log(2 pi). Elementwise on arrays."""
    return (
        gammaln(a_n)
        - gammaln(a0)
        + a0 * np.log(b0)
        - a_n * np.log(b_n)
        + 0.5 * np.log(kappa0 / kappa_n)
        - n / 2 * np.log(2 * np.pi)
    )


def beta_update(
    X: np.ndarray, labels: np.ndarray, C: int, a: float, b: float
) -> tuple[dict[str, np.ndarray], float]:
    """Per class c and feature j, theta_cj | x ~ Beta(a + N_jc, b + N_c - N_jc) (N_jc: class-c
    flowers with x_j = 1) and log p(x | labels) = sum log B(a + N_jc, b + N_c - N_jc) - log B(a, b).
    """
    D = X.shape[1]
    n = np.bincount(labels, minlength=C).astype(float)[:, None] * np.ones(D)
    ones = np.zeros((C, D))
    np.add.at(ones, labels, X)
    post_a, post_b = a + ones, b + n - ones
    return {"a": post_a, "b": post_b}, float((betaln(post_a, post_b) - betaln(a, b)).sum())


def gaussian_nb_predict_proba(
    X: Any,
    y: Any,
    X_test: Any,
    C: int,
    alpha: float,
    m0: float,
    kappa0: float,
    a0: float,
    b0: float,
) -> np.ndarray:
    """Gaussian naive Bayes with a Dirichlet(alpha) class prior and Normal–Gamma(m0, kappa0, a0,
    b0) features: posterior predictive class probabilities of each test point on its own
    (parameters integrated out): p(c | x, data) propto (alpha + N_c) prod_j t_{2 a_n}(x_j | m_n,
    sqrt(b_n (kappa_n + 1) / (a_n kappa_n))) with the Normal–Gamma posterior of class c."""
    X, y, Xt = np.asarray(X, float), np.asarray(y, int), np.atleast_2d(np.asarray(X_test, float))
    p, _ = normal_gamma_update(X, y, C, m0, kappa0, a0, b0)
    scale = np.sqrt(p["b"] * (p["kappa"] + 1) / (p["a"] * p["kappa"]))
    with torch.no_grad():
        lp = dist.StudentT(
            torch.as_tensor(2 * p["a"]), torch.as_tensor(p["m"]), torch.as_tensor(scale)
        ).log_prob(torch.as_tensor(Xt)[:, None, :])
    log_post = lp.sum(-1).numpy() + np.log(alpha + np.bincount(y, minlength=C))
    return np.exp(log_post - logsumexp(log_post, axis=1, keepdims=True))


def bernoulli_nb_predict_proba(
    X: Any, y: Any, X_test: Any, C: int, alpha: float, a: float, b: float
) -> np.ndarray:
    """Bernoulli naive Bayes with a Dirichlet(alpha) class prior and Beta(a, b) features:
    posterior predictive class probabilities of each test point on its own, p(c | x, data)
    propto (alpha + N_c) prod_j tbar_cj^x_j (1 - tbar_cj)^(1 - x_j), with tbar_cj =
    (a + N_jc) / (a + b + N_c) the posterior mean of theta_cj."""
    X, y, Xt = np.asarray(X, float), np.asarray(y, int), np.atleast_2d(np.asarray(X_test, float))
    p, _ = beta_update(X, y, C, a, b)
    tbar = p["a"] / (p["a"] + p["b"])
    log_post = Xt @ np.log(tbar).T + (1 - Xt) @ np.log1p(-tbar).T
    log_post = log_post + np.log(alpha + np.bincount(y, minlength=C))
    return np.exp(log_post - logsumexp(log_post, axis=1, keepdims=True))
