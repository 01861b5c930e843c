"""posteriordb's hierarchical models: eight schools, non-centred (Rubin 1981; Gelman et al.
2013, BDA3 section 5.5)."""

from __future__ import annotations

import pyro
import pyro.distributions as dist
import torch

from zoo.models.posteriordb.base import posterior
from zoo_datasets.posteriordb import posteriordb_data


def eight_schools_noncentered(y: torch.Tensor, sigma: torch.Tensor) -> None:
    """Eight schools, non-centred: each school's effect theta_j is mu + tau theta_trans_j::

        theta_trans_j ~ Normal(0, 1),  j = 1..J
        mu            ~ Normal(0, 5)
        tau           ~ HalfCauchy(5)
        theta_j       = theta_trans_j tau + mu        (transformed parameter)
        y_j           ~ Normal(theta_j, sigma_j)

            (theta_trans_j), mu, tau ---> theta_j ---> [y_j] <--- sigma_j     j = 1..J

    The reference holds theta, mu and tau (Stan's transformed parameter theta, not its
    parameter theta_trans): theta is the deterministic site ``theta``.
    """
    schools = pyro.plate("schools", y.shape[0])
    # theta_trans before mu and tau: Stan's order of parameters, which the gradient check keeps
    with schools:
        theta_trans = pyro.sample("theta_trans", dist.Normal(torch.zeros_like(y), 1.0))
    mu = pyro.sample("mu", dist.Normal(torch.zeros((), dtype=y.dtype), 5.0))
    tau = pyro.sample("tau", dist.HalfCauchy(torch.tensor(5.0, dtype=y.dtype)))
    theta = pyro.deterministic("theta", theta_trans * tau + mu)
    with schools:
        pyro.sample("y", dist.Normal(theta, sigma), obs=y)


def _schools() -> dict[str, torch.Tensor]:
    raw = posteriordb_data("eight_schools")
    dtype = torch.get_default_dtype()
    return {k: torch.tensor(raw[k], dtype=torch.float64).to(dtype) for k in ("y", "sigma")}


posterior(
    "eight_schools-eight_schools_noncentered",
    eight_schools_noncentered,
    _schools,
    params=("theta", "mu", "tau"),
    math=[
        r"\tilde\theta_j \sim \mathcal{N}(0, 1), \quad \mu \sim \mathcal{N}(0, 5^2), "
        r"\quad \tau \sim \mathrm{HalfCauchy}(5)",
        r"\theta_j = \mu + \tau \tilde\theta_j, \quad y_j \sim \mathcal{N}(\theta_j,\, \sigma_j^2)",
    ],
    story=(
        "The SAT coaching experiments of eight schools (Rubin 1981; BDA3 section 5.5): each "
        "school's estimated coaching effect y_j with its standard error sigma_j, partially pooled "
        "by a normal population of effects, written non-centred."
    ),
    nuts_fails=(
        "5 divergent transitions in 32 chains x 500 draws (target_accept 0.8), so the run is "
        "unreliable by its own check; its means (|z| < 3) and sds (within 3%) agree with the "
        "reference"
    ),
)
