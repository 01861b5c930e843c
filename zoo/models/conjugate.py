"""Conjugate models: the posterior is in the prior's family, so everything is known exactly."""

from __future__ import annotations

import pyro
import pyro.distributions as dist
import torch
from pyro.distributions import constraints
from scipy.special import betaln

import zoo


@zoo.register(
    data={"y": torch.tensor([1.0, 1, 0, 1, 1, 1, 0, 1, 1, 0]), "a": 1.0, "b": 1.0},
    seed_ref="000 §2.1.3; 002 §8.1",
)
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
    p = pyro.sample("p", dist.Beta(a, b))
    with pyro.plate("tosses", len(y)):
        pyro.sample("y", dist.Bernoulli(p), obs=y)


@beta_bernoulli.set_guide
def _(y: torch.Tensor, a: float = 1.0, b: float = 1.0) -> None:
    """q(p) = Beta(alpha, beta): the conjugate family, so the optimum is the exact posterior."""
    alpha = pyro.param("q_alpha", torch.tensor(float(a)), constraint=constraints.positive)
    beta = pyro.param("q_beta", torch.tensor(float(b)), constraint=constraints.positive)
    pyro.sample("p", dist.Beta(alpha, beta))


@beta_bernoulli.posterior
def _(y: torch.Tensor, a: float = 1.0, b: float = 1.0) -> tuple[dict, float]:
    """Beta(a + k, b + N - k) and log p(y) = log B(a + k, b + N - k) - log B(a, b)."""
    k, n = float(y.sum()), len(y)
    return {"p": dist.Beta(a + k, b + n - k)}, float(betaln(a + k, b + n - k) - betaln(a, b))
