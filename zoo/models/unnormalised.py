"""A model fitted as an unnormalised density: noise-contrastive estimation (seed 000 Ch. 7)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pyro
import pyro.distributions as dist
import torch

import zoo
from zoo.models.conjugate import normal_gamma_marginals
from zoo_inference.algorithms.nce import delta_method, nce_exponential_family

TRUE_MU, TRUE_TAU = 1.0, 1.0  # the default data's generating mean and precision
NUM_POINTS = 1000
DATA_SEED = 2010  # Gutmann & Hyvärinen's year: the default data's fixed stream


def gaussian_points(seed: int, n: int = NUM_POINTS) -> torch.Tensor:
    """n draws of N(TRUE_MU, 1/TRUE_TAU) from numpy's generator seeded by ``seed`` (float64)."""
    rng = np.random.default_rng(seed)
    return torch.tensor(TRUE_MU + rng.standard_normal(n) / math.sqrt(TRUE_TAU))


def sufficient_statistics(u: torch.Tensor) -> torch.Tensor:
    """T(u) = (u, u^2): log p(u) = eta . T(u) + c with eta = (tau mu, -tau/2)."""
    return torch.stack([u, u * u], -1)


def natural_to_sites(beta: torch.Tensor) -> torch.Tensor:
    """(eta_1, eta_2, c') -> (mu, tau, c): tau = -2 eta_2, mu = eta_1 / tau, and the energy's
    own log-normaliser c = c' + tau mu^2 / 2 (c' absorbs the constant of -tau (u - mu)^2 / 2)."""
    tau = -2 * beta[1]
    mu = beta[0] / tau
    return torch.stack([mu, tau, beta[2] + tau * mu**2 / 2])


def log_normaliser(tau: float) -> float:
    """-log Z(tau) = 1/2 log(tau / (2 pi)): what the free constant c should reach."""
    return 0.5 * math.log(tau / (2 * math.pi))


@zoo.register(
    data={"x": gaussian_points(DATA_SEED), "mu0": 0.0, "kappa0": 1.0, "a0": 2.0, "b0": 1.0},
    params=("mu", "tau"),
    seed_ref="000 Ch. 7 (L1291–1367)",
    math=[
        r"\tau \sim \mathrm{Gamma}(a_0,\, b_0), \quad "
        r"\mu \mid \tau \sim \mathcal{N}(\mu_0,\, (\kappa_0 \tau)^{-1})",
        r"p(x_i \mid \mu, \tau) = \exp(-E(x_i;\, \mu, \tau) + c), \quad "
        r"E = \frac{\tau}{2}(x_i - \mu)^2",
        r"c = -\log Z(\tau) = \frac{1}{2} \log \frac{\tau}{2\pi}, \quad i = 1, \ldots, N",
    ],
    known=dict.fromkeys(
        ("hmc", "importance", "svi", "chees", "laplace", "mh"),
        zoo.Known(
            "slow",
            "normal_gamma's posterior at 1000 points; its nuts, exact and nce cells stay "
            "(test_nce checks nce)",
        ),
    ),
)
def unnormalised_gaussian(
    x: torch.Tensor, mu0: float = 0.0, kappa0: float = 1.0, a0: float = 2.0, b0: float = 1.0
) -> None:
    r"""A Gaussian written as an energy with a free log-normaliser, the seed's example for
    noise-contrastive estimation (000 Ch. 7: p_m(u; theta) = p_m^0(u; alpha) / c, L1315).

    Generative story::

        tau      ~ Gamma(a0, b0)                          precision
        mu | tau ~ N(mu0, 1 / (kappa0 tau))
        x_i      ~ exp(-E(x_i; mu, tau) + c),  E = tau (x_i - mu)^2 / 2,   i = 1..N
                   c = -log Z(tau) = 1/2 log(tau / (2 pi))  (so x_i ~ N(mu, 1 / tau))

          (tau) ---> (mu) ---> [x_i] <--- (tau)      i = 1..N

    The Bayesian model has the Normal–Gamma prior of ``normal_gamma``, so its posterior is
    exact (``exact``; tau ~ Gamma(a_N, b_N), mu ~ Student-t) and every generic engine applies.
    The point of the model is the ``nce`` engine: it sees only the energy, an exponential
    family log p = eta . (u, u^2) + c with eta = (tau mu, -tau/2), and treats c as a free
    parameter (maximum likelihood would send it to +infinity, L1319). NCE classifies the data
    against noise, nu draws a data point from N(xbar, (2 s)^2) (the seed's noise N(0, 2^2) for
    unit-variance data; ``noise_ratio`` nu = 1 is the seed's equal sizes, L1337), by logistic
    regression (:func:`~zoo_inference.algorithms.nce.nce_exponential_family`), and so estimates
    mu, tau and c; c is checked against the true -log Z at the estimated tau, which nothing in
    the fit imposes, and mu, tau against the generating values and the MLE
    (tests/inference/algorithms/test_nce.py).

    Default data: N = 1000 draws of N(1, 1) (mu = 1, tau = 1; numpy's generator seeded 2010),
    prior mu0 = 0, kappa0 = 1, a0 = 2, b0 = 1 (worth about one observation).
    """
    tau = pyro.sample("tau", dist.Gamma(a0, b0))
    mu = pyro.sample("mu", dist.Normal(mu0, (kappa0 * tau) ** -0.5))
    with pyro.plate("data", len(x)):
        pyro.sample("x", dist.Normal(mu, tau**-0.5), obs=x)


@unnormalised_gaussian.posterior
def _(x: torch.Tensor, mu0: float, kappa0: float, a0: float, b0: float) -> tuple[dict, float]:
    """The exact Normal–Gamma marginals and evidence (as ``normal_gamma``'s)."""
    return normal_gamma_marginals(x, mu0, kappa0, a0, b0)


@unnormalised_gaussian.synthetic
def _(seed: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """1000 draws of N(1, 1) from numpy's generator seeded by ``seed``; the default prior."""
    truth = {"mu": torch.tensor(TRUE_MU), "tau": torch.tensor(TRUE_TAU)}
    return {"x": gaussian_points(seed), "mu0": 0.0, "kappa0": 1.0, "a0": 2.0, "b0": 1.0}, truth


@unnormalised_gaussian.reference("nce")
def _(
    x: torch.Tensor,
    *,
    noise_ratio: int = 1,
    noise_scale: float = 2.0,
    max_iter: int = 100,
    tol: float = 1e-10,
) -> zoo.Estimate:
    """Noise-contrastive estimation of (mu, tau) and the log-normaliser c (seed 000 Ch. 7).

    ``noise_ratio`` nu noise draws a data point from N(xbar, (noise_scale s)^2); Newton's
    method on the concave NCE objective (the trace ``nce_objective``). The diagnostics hold c
    (``log_normaliser``) with its sandwich standard error, the true -log Z at the estimated
    tau (``log_normaliser_of_estimate``) and the z-score of their difference; the sites'
    standard errors by the delta method (``mu_se``, ``tau_se``)."""
    x = x.double()
    if len(x) < 2 or float(x.std()) == 0.0:
        raise zoo.ZooError("nce needs at least 2 distinct data points")
    noise = dist.Normal(float(x.mean()), noise_scale * float(x.std()))
    y = noise.sample((noise_ratio * len(x),)).double()
    fit = nce_exponential_family(
        sufficient_statistics, x, y, noise.log_prob, max_iter=max_iter, tol=tol
    )
    if not float(fit.beta[1]) < 0:
        raise zoo.ZooError("nce: the fitted energy is not normalisable (tau <= 0)")
    sites, cov = delta_method(fit.beta, fit.cov, natural_to_sites)
    mu, tau, c = (float(v) for v in sites)
    # c - (-log Z(tau)) as a function of beta, for the standard error of their difference
    gap, gap_var = delta_method(
        fit.beta, fit.cov, lambda b: natural_to_sites(b)[2] - 0.5 * torch.log(-b[1] / math.pi)
    )
    se = cov.diag().sqrt()
    return zoo.Estimate(
        {"mu": mu, "tau": tau},
        traces={"nce_objective": fit.objective},
        diagnostics={
            "log_normaliser": c,
            "log_normaliser_se": float(se[2]),
            "log_normaliser_of_estimate": log_normaliser(tau),
            "log_normaliser_gap_z": float(gap) / float(gap_var.sqrt()),
            "mu_se": float(se[0]),
            "tau_se": float(se[1]),
            "noise_ratio": noise_ratio,
            "classifier_accuracy": fit.accuracy,
            "converged": fit.converged,
        },
        extras={"natural_parameters": fit.beta.tolist(), "covariance": cov.tolist()},
    )
