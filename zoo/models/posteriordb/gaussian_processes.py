"""Gaussian processes in posteriordb: Stan's benchmark GP regressions on the gp_pois_regr data,
one with the function values integrated out (gp_regr), one with them latent (gp_pois_regr)."""

from __future__ import annotations

from typing import Any

import pyro
import pyro.distributions as dist
import torch

from zoo.models.posteriordb.base import Tolerance, posterior
from zoo_datasets.posteriordb import posteriordb_data
from zoo_inference.algorithms.gp import rbf_kernel


def gp_exp_quad_cov(x: torch.Tensor, alpha: torch.Tensor, rho: torch.Tensor) -> torch.Tensor:
    """Stan's ``gp_exp_quad_cov(x, alpha, rho)``: alpha^2 exp(-(x_i - x_j)^2 / (2 rho^2))."""
    return rbf_kernel(x, x, rho, alpha**2)


def gp_regr(x: torch.Tensor, y: torch.Tensor) -> None:
    """Stan's gp_regr: a GP regression with the function integrated out::

        rho   ~ Gamma(25, 4)                     length-scale (shape 25, rate 4)
        alpha ~ Normal(0, 2),  alpha > 0         marginal sd
        sigma ~ Normal(0, 1),  sigma > 0
        y     ~ MVN(0, K + sigma I),  K_ij = alpha^2 exp(-(x_i - x_j)^2 / (2 rho^2))

            (rho, alpha, sigma) ----> [y]      (the N values jointly)

    The program adds ``sigma`` itself, not its square, to the covariance's diagonal: ``sigma``
    is the noise variance, whatever its name.
    """
    rho = pyro.sample("rho", dist.Gamma(torch.tensor(25.0), torch.tensor(4.0)))
    alpha = pyro.sample("alpha", dist.HalfNormal(torch.tensor(2.0)))
    sigma = pyro.sample("sigma", dist.HalfNormal(torch.tensor(1.0)))
    n = x.shape[-1]
    cov = gp_exp_quad_cov(x, alpha, rho) + sigma[..., None, None] * torch.eye(n)
    L_cov = torch.linalg.cholesky(cov)
    pyro.sample("y", dist.MultivariateNormal(torch.zeros(n), scale_tril=L_cov), obs=y)


def gp_pois_regr(x: torch.Tensor, k: torch.Tensor) -> None:
    """Stan's gp_pois_regr: a latent GP, non-centred, under Poisson counts::

        rho     ~ Gamma(25, 4)
        alpha   ~ Normal(0, 2),  alpha > 0
        f_tilde ~ Normal(0, I_N)
        f       = chol(K + 1e-10 I) f_tilde      (transformed parameter: f ~ GP(0, K))
        k_n     ~ Poisson(exp(f_n)),  n = 1..N

            (rho, alpha) --> f <-- f_tilde
                             |
                             v
                           [k_n]   n = 1..N

    posteriordb's reference holds ``f`` (a deterministic site here), not ``f_tilde``. The
    transformed parameter is computed in float64 in a float32 run too (the jitter needs it).
    """
    rho = pyro.sample("rho", dist.Gamma(torch.tensor(25.0), torch.tensor(4.0)))
    alpha = pyro.sample("alpha", dist.HalfNormal(torch.tensor(2.0)))
    n = x.shape[-1]
    f_tilde = pyro.sample("f_tilde", dist.Normal(torch.zeros(n), 1.0).to_event(1))
    # in float64 whatever the run's dtype: the program's jitter, 1e-10 against alpha^2, is below
    # float32's resolution, and the factor of the near-singular covariance would not exist
    x64, alpha64, rho64 = x.double(), alpha.double(), rho.double()
    cov = gp_exp_quad_cov(x64, alpha64, rho64) + 1e-10 * torch.eye(n, dtype=torch.float64)
    L_cov = torch.linalg.cholesky(cov)
    f64 = (L_cov @ f_tilde.double()[..., None])[..., 0]
    f = pyro.deterministic("f", f64.to(f_tilde.dtype), event_dim=1)
    with pyro.plate("n", n):
        pyro.sample("k", dist.Poisson(torch.exp(f)), obs=k)


def _columns(*names: str) -> dict[str, Any]:
    """The gp_pois_regr data's ``names`` in torch's default dtype (float64 as Stan's)."""
    raw = posteriordb_data("gp_pois_regr")
    dtype = torch.get_default_dtype()
    return {n: torch.tensor(raw[n], dtype=torch.float64).to(dtype) for n in names}


DATA_STORY = (
    "Data simulated from a Poisson GP model for Stan's performance benchmarks "
    "(stat_comp_benchmarks, gp_pois_regr): 11 inputs x = -10, -8, ..., 10 with a real response "
    "y and a count k at each. "
)

posterior(
    "gp_pois_regr-gp_regr",
    gp_regr,
    lambda: _columns("x", "y"),
    params=("rho", "alpha", "sigma"),
    math=[
        r"\rho \sim \mathrm{Gamma}(25, 4), \quad \alpha \sim \mathcal{N}^+(0, 2^2),"
        r" \quad \sigma \sim \mathcal{N}^+(0, 1)",
        r"K_{ij} = \alpha^2 \exp\!\left(-\frac{(x_i - x_j)^2}{2 \rho^2}\right)",
        r"y \sim \mathcal{N}_N(0,\, K + \sigma I)",
    ],
    story=DATA_STORY + "The real response regressed on x by a GP, the function integrated out.",
)

posterior(
    "gp_pois_regr-gp_pois_regr",
    gp_pois_regr,
    lambda: _columns("x", "k"),
    params=("rho", "alpha", "f"),
    math=[
        r"\rho \sim \mathrm{Gamma}(25, 4), \quad \alpha \sim \mathcal{N}^+(0, 2^2),"
        r" \quad \tilde f \sim \mathcal{N}_N(0, I)",
        r"f = L \tilde f, \quad L L^\top = K + 10^{-10} I,"
        r" \quad K_{ij} = \alpha^2 \exp\!\left(-\frac{(x_i - x_j)^2}{2 \rho^2}\right)",
        r"k_n \sim \mathrm{Poisson}(e^{f_n})",
    ],
    story=DATA_STORY + "The counts under a latent GP on the log rate, non-centred.",
    tolerance=Tolerance(
        log_density_sd=1e-8,
        gradient=1e-6,
        reason=(
            "the covariance's jitter is 1e-10 against alpha^2 of about 9: its Cholesky factor is "
            "ill-conditioned, and in float64 Stan's gradient and torch's are each up to 1e-7 "
            "off the exact one (at 60 digits); they differ by up to 1.3e-7 (relative to 1 + |grad|)"
        ),
    ),
    nuts_fails=(
        "the zoo's NUTS at its defaults (32 chains of 500 + 500 draws, seed 0) has 91 divergent "
        "transitions of 16,000 draws, and the run is judged unreliable"
    ),
)
