"""Mixture models in posteriordb (Stan's stat_comp_benchmarks): a two-component Gaussian mixture
with ordered means."""

from __future__ import annotations

from typing import Any

import pyro
import pyro.distributions as dist
import torch
from pyro.distributions import constraints

from zoo.models.posteriordb.base import flat, posterior
from zoo_datasets.posteriordb import posteriordb_data


def gauss_mix(y: torch.Tensor) -> None:
    """Stan's low-dimensional Gaussian mixture (low_dim_gauss_mix.stan)::

        mu    ordered (mu_1 < mu_2),  mu_k ~ Normal(0, 2)     (the ordering names the components)
        sigma_k ~ Normal(0, 2), sigma_k > 0,   theta ~ Beta(5, 5)
        y_n ~ theta Normal(mu_1, sigma_1) + (1 - theta) Normal(mu_2, sigma_2),  n = 1..N

            (mu, sigma, theta) ----> [y_n]   n = 1..N       (the components summed out)

    ``mu ~ normal(0, 2)`` is a density on the ordered vector: Stan adds it to the target, as the
    factor here does on the flat ordered site (Pyro's ordered bijection is Stan's: y_1 = x_1,
    y_k = y_{k-1} + exp(x_k)).
    """
    mu = pyro.sample("mu", flat(constraints.ordered_vector, 2))
    pyro.factor("mu_prior", dist.Normal(0.0, 2.0).log_prob(mu).sum(-1))
    sigma = pyro.sample("sigma", dist.HalfNormal(y.new_full((2,), 2.0)).to_event(1))
    theta = pyro.sample("theta", dist.Beta(y.new_tensor(5.0), 5.0))
    with pyro.plate("n", y.shape[0]):
        weights = torch.stack([theta, 1 - theta], -1)
        pyro.sample(
            "y",
            dist.MixtureSameFamily(dist.Categorical(weights), dist.Normal(mu, sigma)),
            obs=y,
        )


def _mixture_data() -> dict[str, Any]:
    raw = posteriordb_data("low_dim_gauss_mix")
    return {"y": torch.tensor(raw["y"], dtype=torch.float64).to(torch.get_default_dtype())}


posterior(
    "low_dim_gauss_mix-low_dim_gauss_mix",
    gauss_mix,
    _mixture_data,
    params=("mu", "sigma", "theta"),
    math=[
        r"\mu_1 < \mu_2, \quad \mu_k \sim \mathcal{N}(0, 2^2), \quad"
        r" \sigma_k \sim \mathrm{HalfNormal}(2), \quad \theta \sim \mathrm{Beta}(5, 5)",
        r"y_n \sim \theta\, \mathcal{N}(\mu_1, \sigma_1^2)"
        r" + (1 - \theta)\, \mathcal{N}(\mu_2, \sigma_2^2), \quad n = 1, \ldots, N",
    ],
    story=(
        "A two-component Gaussian mixture with ordered means fitted to 1,000 simulated, "
        "well-separated points: Stan's stat_comp_benchmarks (low_dim_gauss_mix)."
    ),
)
