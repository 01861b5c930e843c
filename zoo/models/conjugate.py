"""Conjugate models: the posterior is in the prior's family, so everything is known exactly."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import pyro
import pyro.distributions as dist
import torch
from pyro.distributions import constraints
from scipy import special, stats

from inference import GroundTruth, Run, make_run, moment_rows
from zoo.registry import register

# --------------------------------------------------------------------------- beta_bernoulli


def beta_bernoulli(y: torch.Tensor, a: float = 1.0, b: float = 1.0) -> None:
    r"""Beta–Bernoulli: the heads probability of a coin under a conjugate Beta prior.

    Generative story (seed 000 §2.1.3, table of conjugate pairs; 002 §8.1)::

        p   ~ Beta(a, b)                 prior on the heads probability
        y_i ~ Bernoulli(p),  i = 1..N    independent tosses

            a, b
             |
            (p) ----> [y_i]   i = 1..N

    Posterior Beta(a + k, b + N - k) with k = sum_i y_i; log evidence of the sequence
    log B(a + k, b + N - k) - log B(a, b). Default data: 7 heads in 10 tosses under the uniform
    Beta(1, 1) prior, so the posterior is Beta(8, 4): mean 2/3, MAP 0.7.
    """
    # Beta(1, 1) is uniform on [0, 1]: no preference for any bias before seeing a toss.
    p = pyro.sample("p", dist.Beta(torch.as_tensor(a), torch.as_tensor(b)))
    with pyro.plate("tosses", y.shape[0]):
        pyro.sample("y", dist.Bernoulli(p), obs=y)


def beta_bernoulli_guide(y: torch.Tensor, a: float = 1.0, b: float = 1.0) -> None:
    """q(p) = Beta(alpha, beta): the conjugate family, so the optimum is the exact posterior."""
    alpha = pyro.param("q_alpha", torch.tensor(float(a)), constraint=constraints.positive)
    beta = pyro.param("q_beta", torch.tensor(float(b)), constraint=constraints.positive)
    pyro.sample("p", dist.Beta(alpha, beta))


def _beta_posterior(data: Mapping[str, Any]) -> tuple[float, float, float]:
    y = np.asarray(data["y"], dtype=float)
    k, n = y.sum(), y.size
    a, b = float(data["a"]), float(data["b"])
    log_evidence = special.betaln(a + k, b + n - k) - special.betaln(a, b)
    return a + k, b + n - k, float(log_evidence)


def beta_bernoulli_truth(data: Mapping[str, Any]) -> GroundTruth:
    a_n, b_n, log_z = _beta_posterior(data)
    post = stats.beta(a_n, b_n)
    return GroundTruth(
        mean={"p": float(post.mean())},
        sd={"p": float(post.std())},
        log_evidence=log_z,
        density={"p": post.pdf},
        source=f"closed form: Beta({a_n:g}, {b_n:g})",
    )


def beta_bernoulli_exact(
    data: Mapping[str, Any], *, seed: int = 0, progress: bool = False, num_samples: int = 4000
) -> Run:
    """Closed-form conjugate posterior Beta(a + k, b + N - k) and exact evidence."""
    a_n, b_n, log_z = _beta_posterior(data)
    draws = dist.Beta(torch.tensor(a_n), torch.tensor(b_n)).sample((num_samples,))
    post = stats.beta(a_n, b_n)
    map_ = (a_n - 1) / (a_n + b_n - 2) if a_n > 1 and b_n > 1 else float("nan")
    return make_run(
        "exact",
        {"p": draws[None]},
        observed_data=data,
        log_evidence=log_z,
        exact_moments=moment_rows("p", post.mean(), post.std()),
        diagnostics={"posterior": f"Beta({a_n:g}, {b_n:g})", "map": map_},
    )


register(
    "beta_bernoulli",
    model=beta_bernoulli,
    guide=beta_bernoulli_guide,
    data={"y": torch.tensor([1, 1, 0, 1, 1, 1, 0, 1, 1, 0], dtype=torch.float), "a": 1.0, "b": 1.0},
    ground_truth=beta_bernoulli_truth,
    reference_engines={"exact": beta_bernoulli_exact},
    seed_ref="000 §2.1.3; 002 §8.1",
)
