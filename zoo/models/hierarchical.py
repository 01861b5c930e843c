"""Hierarchical models: group-level parameters drawn from a population distribution."""

from __future__ import annotations

from typing import Any

import numpy as np
import pyro
import pyro.distributions as dist
import torch
from pyro.distributions import constraints

import zoo

# --------------------------------------------------------------------------- eight_schools

# Rubin (1981), "Estimation in parallel randomized experiments", Table 2: estimated effects of
# SAT-V coaching programmes in eight high schools and their standard errors (SAT points).
SCHOOLS_Y = (28.0, 8.0, -3.0, 7.0, -1.0, 1.0, 18.0, 12.0)
SCHOOLS_SIGMA = (15.0, 10.0, 16.0, 11.0, 9.0, 11.0, 10.0, 18.0)
MU_SCALE = 5.0  # prior sd of the population mean effect mu (SAT points)
TAU_SCALE = 5.0  # HalfCauchy scale of the between-school sd tau (SAT points)


def _schools_data() -> dict[str, torch.Tensor]:
    return {"y": torch.tensor(SCHOOLS_Y), "sigma": torch.tensor(SCHOOLS_SIGMA)}


def _population() -> tuple[torch.Tensor, torch.Tensor]:
    """mu ~ N(0, 5), tau ~ HalfCauchy(5): the priors both parameterisations share."""
    # Coaching effects on the SAT-V scale (200-800) are a few points either way: N(0, 5) keeps mu
    # within about +-10 points. HalfCauchy(5) on tau is the standard weakly informative choice
    # (Gelman 2006; the Stan and PyMC eight-schools examples): median 5 points, yet a heavy
    # tail that lets the schools differ by tens of points if the data ask for it.
    mu = pyro.sample("mu", dist.Normal(0.0, MU_SCALE))
    tau = pyro.sample("tau", dist.HalfCauchy(TAU_SCALE))
    return mu, tau


@zoo.register(
    data=_schools_data(),
    params=("mu", "tau", "theta"),
    figures={"pairs": [("theta[0]", "tau")]},  # the funnel: where the divergences sit
    seed_ref="beyond the seeds: Rubin (1981); Gelman et al., BDA3 §5.5",
    math=[
        r"\mu \sim \mathcal{N}(0,\, 5^2), \quad \tau \sim \mathrm{HalfCauchy}(5)",
        r"\theta_j \mid \mu, \tau \sim \mathcal{N}(\mu,\, \tau^2), \quad j = 1, \ldots, 8",
        r"y_j \mid \theta_j \sim \mathcal{N}(\theta_j,\, \sigma_j^2)"
        r" \quad (\sigma_j\ \mathrm{known})",
    ],
    known={
        "nuts": zoo.Known(
            "slow",
            "the centred funnel takes deep trees; test_eight_schools runs it against the truth",
        ),
        "laplace": zoo.Known(
            "fails",
            "the centred funnel's density is unbounded as tau -> 0, so it has no mode",
            error="no mode found",
        ),
        "pathfinder": zoo.Known(
            "approximate",
            "the centred funnel has no mode: every L-BFGS path heads into its neck (tau "
            "-> 0), far from the posterior's bulk, where no draw reaches for k-hat to see",
        ),
    },
)
def eight_schools(y: torch.Tensor, sigma: torch.Tensor) -> None:
    r"""Eight schools, centred: each school's coaching effect drawn around a population mean.

    Generative story (Rubin 1981; BDA3 §5.5)::

        mu      ~ Normal(0, 5)                   population mean effect (SAT points)
        tau     ~ HalfCauchy(5)                  between-school sd
        theta_j ~ Normal(mu, tau),  j = 1..8     true effect of school j
        y_j     ~ Normal(theta_j, sigma_j)       its estimate; sigma_j is the known standard error

            mu, tau ---> (theta_j) ---> [y_j] <--- sigma_j     j = 1..8

    The canonical test of a sampler's geometry: as tau -> 0 the theta_j are squeezed onto mu
    (Neal's funnel), the curvature there is too high for one step size and NUTS reports
    divergent transitions. ``eight_schools_noncentered`` is the same model written so that the
    sampler sees independent standard normals. No closed form: the ground truth integrates
    theta and mu out analytically and tau by quadrature (see ``schools_truth``).

    Default data: the SAT coaching experiments of eight schools (Rubin 1981; BDA3 Table 5.2):
    each school's estimated coaching effect y_j and its standard error sigma_j, SAT points.
    """
    mu, tau = _population()
    with pyro.plate("schools", len(y)):
        theta = pyro.sample("theta", dist.Normal(mu, tau))
        pyro.sample("y", dist.Normal(theta, sigma), obs=y)


@zoo.register(
    data=_schools_data(),
    params=("mu", "tau", "theta", "eta"),
    figures={"pairs": [("theta[0]", "tau")]},  # the funnel: where the divergences sit
    seed_ref="beyond the seeds: Rubin (1981); Papaspiliopoulos et al. (2007)",
    math=[
        r"\mu \sim \mathcal{N}(0,\, 5^2), \quad \tau \sim \mathrm{HalfCauchy}(5)",
        r"\eta_j \sim \mathcal{N}(0,\, 1), \quad \theta_j = \mu + \tau \eta_j,"
        r" \quad j = 1, \ldots, 8",
        r"y_j \mid \theta_j \sim \mathcal{N}(\theta_j,\, \sigma_j^2)"
        r" \quad (\sigma_j\ \mathrm{known})",
    ],
)
def eight_schools_noncentered(y: torch.Tensor, sigma: torch.Tensor) -> None:
    r"""Eight schools, non-centred: theta_j = mu + tau eta_j with standard-normal eta_j.

    Generative story (the same joint law of mu, tau, theta, y as ``eight_schools``)::

        mu      ~ Normal(0, 5)
        tau     ~ HalfCauchy(5)
        eta_j   ~ Normal(0, 1),  j = 1..8        standardised school effect
        theta_j = mu + tau * eta_j               (deterministic)
        y_j     ~ Normal(theta_j, sigma_j)

            mu, tau, (eta_j) ---> theta_j ---> [y_j] <--- sigma_j     j = 1..8

    A priori mu, tau and eta are independent, so the sampler no longer meets the funnel: with
    data this weak the posterior of (tau, eta) is close to its prior and NUTS runs without
    divergences. Ground truth: the same quadrature as the centred model, plus eta's moments.

    Default data: the SAT coaching experiments of eight schools (Rubin 1981; BDA3 Table 5.2):
    each school's estimated coaching effect y_j and its standard error sigma_j, SAT points.
    """
    mu, tau = _population()
    with pyro.plate("schools", len(y)):
        eta = pyro.sample("eta", dist.Normal(0.0, 1.0))
        theta = pyro.deterministic("theta", mu + tau * eta)
        pyro.sample("y", dist.Normal(theta, sigma), obs=y)


def _population_guide() -> None:
    """q(mu) = Normal, q(tau) = LogNormal (tau > 0), started near the prior's centre."""
    m = pyro.param("q_mu_loc", torch.tensor(0.0))
    s = pyro.param("q_mu_scale", torch.tensor(2.0), constraint=constraints.positive)
    pyro.sample("mu", dist.Normal(m, s))
    lm = pyro.param("q_tau_loc", torch.tensor(1.0))
    ls = pyro.param("q_tau_scale", torch.tensor(0.5), constraint=constraints.positive)
    pyro.sample("tau", dist.LogNormal(lm, ls))


def _school_guide(site: str, n: int, loc: float, scale: float) -> None:
    """q(site_j) = Normal(loc_j, scale_j), independent across schools."""
    loc_p = pyro.param(f"q_{site}_loc", torch.full((n,), loc))
    scale_p = pyro.param(
        f"q_{site}_scale", torch.full((n,), scale), constraint=constraints.positive
    )
    with pyro.plate("schools", n):
        pyro.sample(site, dist.Normal(loc_p, scale_p))


@eight_schools.set_guide
def _(y: torch.Tensor) -> None:
    """Mean-field: Normal mu, LogNormal tau, Normal theta_j. It cannot follow the funnel (theta's
    spread shrinks with tau): on the default data its sd of mu is about half the exact one and
    its ELBO about 2 nats below log p(y); the non-centred guide's gap is under one nat."""
    _population_guide()
    _school_guide("theta", len(y), 5.0, 5.0)


@eight_schools_noncentered.set_guide
def _(y: torch.Tensor) -> None:
    """Mean-field: Normal mu, LogNormal tau, Normal eta_j (theta follows deterministically)."""
    _population_guide()
    _school_guide("eta", len(y), 0.0, 1.0)


def _simulate_schools(seed: int, noncentered: bool) -> tuple[dict[str, Any], dict[str, Any]]:
    """Eight schools with the real standard errors and known effects: mu = 4, tau = 6 (points),
    theta_j = mu + tau eta_j, y_j ~ N(theta_j, sigma_j); the runner seeds torch's generator."""
    sigma = torch.tensor(SCHOOLS_SIGMA)
    mu, tau = torch.tensor(4.0), torch.tensor(6.0)
    eta = torch.randn(len(sigma))
    theta = mu + tau * eta
    y = theta + sigma * torch.randn(len(sigma))
    truth = {"mu": mu, "tau": tau, "theta": theta}
    if noncentered:
        truth["eta"] = eta
    return {"y": y, "sigma": sigma}, truth


@eight_schools.synthetic
def _(seed: int) -> tuple[dict[str, Any], dict[str, Any]]:
    return _simulate_schools(seed, noncentered=False)


@eight_schools_noncentered.synthetic
def _(seed: int) -> tuple[dict[str, Any], dict[str, Any]]:
    return _simulate_schools(seed, noncentered=True)


def schools_conditional(
    y: np.ndarray, sigma: np.ndarray, tau: float
) -> tuple[float, np.ndarray, np.ndarray]:
    """Everything about (mu, eta) given tau, in closed form.

    Given tau the model is linear-Gaussian in z = (mu, eta_1..eta_J): prior N(0, diag(25, 1..1)),
    y = A z + e with A = [1 | tau I] and e ~ N(0, diag(sigma^2)). Returns log p(y | tau) =
    log N(y | 0, 25 11' + diag(sigma^2 + tau^2)) and the posterior mean and covariance of z
    (well conditioned for every tau >= 0, tau = 0 included).
    """
    J = y.size
    a = np.hstack([np.ones((J, 1)), tau * np.eye(J)])
    prior_var = np.r_[MU_SCALE**2, np.ones(J)]
    prec = np.diag(1.0 / prior_var) + a.T @ (a / sigma[:, None] ** 2)
    cov = np.linalg.inv(prec)
    mean = cov @ (a.T @ (y / sigma**2))
    marg = MU_SCALE**2 * np.ones((J, J)) + np.diag(sigma**2 + tau**2)
    sign, logdet = np.linalg.slogdet(marg)
    log_lik = -0.5 * (J * np.log(2 * np.pi) + logdet + y @ np.linalg.solve(marg, y))
    return float(log_lik), mean, cov


def schools_truth(y: torch.Tensor, sigma: torch.Tensor, nodes: int = 400) -> zoo.GroundTruth:
    """Posterior moments of mu, tau, theta_j and eta_j by 1-D quadrature over tau.

    mu and eta (hence theta = mu + tau eta) are Gaussian given tau (:func:`schools_conditional`),
    so only tau needs a numerical integral. With u = F(tau) = (2 / pi) arctan(tau / 5), the
    HalfCauchy(5) CDF, the prior becomes uniform on (0, 1): E[g | y] = int_0^1 g p(y | tau(u)) du
    / int_0^1 p(y | tau(u)) du, by Gauss–Legendre in u (the integrand is smooth on [0, 1] and
    p(y | tau) decays like tau^-7). Moments of each quantity mix its conditional moments over the
    nodes: E[x] = sum_k w_k m_k, E[x^2] = sum_k w_k (v_k + m_k^2).
    """
    yv, sv = y.double().numpy(), sigma.double().numpy()
    J = yv.size
    u, w = zoo.gauss_legendre(nodes)
    taus = TAU_SCALE * np.tan(np.pi * u / 2)
    log_lik = np.empty(nodes)
    means = np.empty((nodes, 1 + 2 * J))  # mu, eta_1..J, theta_1..J
    variances = np.empty((nodes, 1 + 2 * J))
    for k, t in enumerate(taus):
        log_lik[k], m, c = schools_conditional(yv, sv, float(t))
        lin = np.zeros((J, J + 1))  # theta = mu + tau eta
        lin[:, 0], lin[:, 1:] = 1.0, t * np.eye(J)
        means[k] = np.r_[m, lin @ m]
        variances[k] = np.r_[np.diag(c), np.einsum("ij,jk,ik->i", lin, c, lin)]
    grid = zoo.grid_posterior(np.log(w) + log_lik)
    log_z, wt = grid.log_z, grid.weights
    mean, sd = grid.moments(means, variances)
    tau_mean, tau_sd = map(float, grid.moments(taus))

    def tau_density(t: np.ndarray) -> np.ndarray:
        t = np.asarray(t, dtype=float)
        out = np.zeros(t.shape)
        for i, ti in np.ndenumerate(t):
            if ti >= 0:
                prior = 2.0 / (np.pi * TAU_SCALE * (1 + (ti / TAU_SCALE) ** 2))
                out[i] = prior * np.exp(schools_conditional(yv, sv, float(ti))[0] - log_z)
        return out

    def mu_density(m: np.ndarray) -> np.ndarray:
        m = np.asarray(m, dtype=float)[..., None]
        loc, scale = means[:, 0], np.sqrt(variances[:, 0])
        pdf = np.exp(-0.5 * ((m - loc) / scale) ** 2) / (np.sqrt(2 * np.pi) * scale)
        return pdf @ wt

    return zoo.GroundTruth(
        mean={
            "mu": mean[0],
            "tau": tau_mean,
            "eta": mean[1 : J + 1],
            "theta": mean[J + 1 :],
        },
        sd={"mu": sd[0], "tau": tau_sd, "eta": sd[1 : J + 1], "theta": sd[J + 1 :]},
        # the prior of u is uniform, so log p(y) = log int_0^1 p(y | tau(u)) du
        log_evidence=float(log_z),
        density={"mu": mu_density, "tau": tau_density},
        source=f"quadrature: mu, eta Gaussian given tau, Gauss–Legendre over tau ({nodes} nodes)",
    )


@eight_schools.truth
def _(y: torch.Tensor, sigma: torch.Tensor) -> zoo.GroundTruth:
    """Quadrature truth for mu, tau and theta (eta is not a site of the centred model)."""
    t = schools_truth(y, sigma)
    keep = ("mu", "tau", "theta")
    return zoo.GroundTruth(
        mean={k: t.mean[k] for k in keep},
        sd={k: t.sd[k] for k in keep},
        log_evidence=t.log_evidence,
        density=t.density,
        source=t.source,
    )


@eight_schools_noncentered.truth
def _(y: torch.Tensor, sigma: torch.Tensor) -> zoo.GroundTruth:
    """Quadrature truth for mu, tau, eta and theta."""
    return schools_truth(y, sigma)
