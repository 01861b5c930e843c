"""Hidden Markov models in posteriordb (the Stan case study's bball-hmm, Imad Ali): a two-state
example and two models of a basketball drive, the hidden states summed out by the forward
algorithm; their exact posterior state marginals, averaged over the reference draws, join the
truth."""

from __future__ import annotations

from collections.abc import Callable
from functools import cache
from typing import Any

import numpy as np
import pyro
import pyro.distributions as dist
import pyro.poutine as poutine
import torch
from pyro.distributions import constraints

from zoo.models.posteriordb.base import flat, posterior, stan_positive_ordered
from zoo_datasets.posteriordb import posteriordb_data, posteriordb_reference
from zoo_inference.algorithms.hmm import forward_backward
from zoo_inference.reference import default_dtype


def _log_matmul_exp(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """log(exp(x) @ exp(y)) by logsumexp: the forward algorithm's step on log matrices."""
    return (x.unsqueeze(-1) + y.unsqueeze(-3)).logsumexp(-2)


class ForwardAlgorithm(dist.DiscreteHMM):
    """Pyro's DiscreteHMM with its log density by logsumexp alone: Pyro's own goes through a
    custom autograd function (its safe log) that torch's vmap cannot batch, so the zoo's
    samplers would evaluate the chains one by one."""

    def log_prob(self, value: torch.Tensor) -> torch.Tensor:
        obs = self.observation_dist
        log_b = obs.log_prob(value.unsqueeze(-1 - obs.event_dim))  # (..., T, K)
        m = self.transition_logits + log_b.unsqueeze(-2)  # (..., T, old K, new K)
        while m.size(-3) > 1:  # the product over time, pairwise: log2 T levels
            even = m.size(-3) // 2 * 2
            pairs = _log_matmul_exp(m[..., 0:even:2, :, :], m[..., 1:even:2, :, :])
            m = torch.cat([pairs, m[..., even:, :, :]], -3)
        return (self.initial_logits + m[..., 0, :, :].logsumexp(-1)).logsumexp(-1)


def forward_algorithm(
    theta1: torch.Tensor, theta2: torch.Tensor, emission: dist.Distribution, T: int
) -> ForwardAlgorithm:
    """The programs' forward algorithm as a distribution of the T observations::

        gamma_1(k) = log p(obs_1 | k)
        gamma_t(k) = log_sum_exp_j [gamma_{t-1}(j) + log theta[j, k]] + log p(obs_t | k)
        target += log_sum_exp_k gamma_T(k)          theta[j, k] = P(z_t = k | z_{t-1} = j)

    ``emission`` has the states as its last batch dimension, time (size 1) the one before. Pyro's
    DiscreteHMM takes one transition before the first observation; the programs start with
    weight 1 on every state, so that first transition is uniform (and the log density is Stan's
    minus log K)."""
    theta = torch.stack([theta1, theta2], -2)  # rows: theta[1], theta[2]
    K = theta.shape[-1]
    steps = theta.log().unsqueeze(-3).expand(*theta.shape[:-2], T - 1, K, K)
    first = theta.new_zeros(*theta.shape[:-2], 1, K, K)
    return ForwardAlgorithm(theta.new_zeros(K), torch.cat([first, steps], -3), emission)


def hmm_example(y: torch.Tensor, K: int) -> None:
    """Stan's simple HMM (hmm_example.stan): one output, two states::

        theta1, theta2 simplexes (flat),  theta[j] = theta_j: P(z_t = k | z_{t-1} = j)
        mu positive_ordered,  mu_1 ~ Normal(3, 1),  mu_2 ~ Normal(10, 1)
        y_t | z_t = k ~ Normal(mu_k, 1),   z summed out by the forward algorithm

            theta ---> (z_1) ---> (z_2) ---> ... ---> (z_N)
                         |          |                   |
            mu    ---> [y_1]      [y_2]               [y_N]

    The priors on mu are densities on the ordered vector, added to the target as in Stan.
    """
    theta1 = pyro.sample("theta1", flat(constraints.simplex, K))
    theta2 = pyro.sample("theta2", flat(constraints.simplex, K))
    mu = pyro.sample("mu", flat(stan_positive_ordered, K))
    # target += normal_lpdf(mu[1] | 3, 1) + normal_lpdf(mu[2] | 10, 1)
    pyro.factor("mu_prior", dist.Normal(y.new_tensor([3.0, 10.0]), 1.0).log_prob(mu).sum(-1))
    emission = dist.Normal(mu.unsqueeze(-2), 1.0)  # (..., 1, K): a slot for time
    pyro.sample("y", forward_algorithm(theta1, theta2, emission, y.shape[0]), obs=y)


def hmm_drive(
    u: torch.Tensor,
    v: torch.Tensor,
    alpha: torch.Tensor,
    K: int,
    tau: float | None = None,
    rho: float | None = None,
) -> None:
    """Stan's basketball-drive HMMs (hmm_drive_0.stan, hmm_drive_1.stan): state 1 no drive,
    state 2 a drive, seen through 1/speed u and the distance to the hoop v::

        theta_k ~ Dirichlet(alpha[k, :]),   theta[j] = theta_j: P(z_t = k | z_{t-1} = j)
        phi_1 ~ Normal(0, 1), phi_2 ~ Normal(3, 1); lambda likewise        (phi, lambda ordered)
        drive_0: phi, lambda positive_ordered; u_t ~ Exponential(phi_k), v_t ~ Exponential(lambda_k)
        drive_1: phi, lambda ordered;  u_t ~ Normal(phi_k, tau),  v_t ~ Normal(lambda_k, rho)
        (u_t, v_t) | z_t = k  independent,  z summed out by the forward algorithm

            theta ---> (z_1) ---> (z_2) ---> ... ---> (z_N)
                         |          |                   |
            phi, lambda [u_1,v_1] [u_2,v_2]           [u_N,v_N]

    Without ``tau`` and ``rho`` the emissions are drive_0's exponentials, with them drive_1's
    normals (sds tau of u and rho of v). The pair (u_t, v_t) is one observation of the chain.
    """
    normal = tau is not None
    theta1 = pyro.sample("theta1", dist.Dirichlet(alpha[0]))
    theta2 = pyro.sample("theta2", dist.Dirichlet(alpha[1]))
    support = constraints.ordered_vector if normal else stan_positive_ordered
    phi = pyro.sample("phi", flat(support, K))
    lambda_ = pyro.sample("lambda", flat(support, K))
    prior = dist.Normal(u.new_tensor([0.0, 3.0]), 1.0)
    pyro.factor("phi_prior", prior.log_prob(phi).sum(-1))
    pyro.factor("lambda_prior", prior.log_prob(lambda_).sum(-1))
    # (..., 1, K, 2): state k's parameters of u and v, with a slot for time
    rates = torch.stack([phi, lambda_], -1).unsqueeze(-3)
    if normal:
        emission = dist.Normal(rates, u.new_tensor([tau, rho])).to_event(1)
    else:
        emission = dist.Exponential(rates).to_event(1)
    uv = torch.stack([u, v], -1)
    pyro.sample("uv", forward_algorithm(theta1, theta2, emission, u.shape[0]), obs=uv)


def state_marginals(
    model: Callable[..., Any], data: dict[str, Any], values: dict[str, Any]
) -> np.ndarray:
    """P(z_t = k | observations, parameters), (T, K), by forward-backward at Stan's parameter
    ``values``: the emission log-densities from the model's own observation distribution, the
    transitions theta, and the programs' uniform start."""
    with default_dtype(torch.float64), pyro.validation_enabled(False):
        given = {k: torch.as_tensor(np.asarray(v, dtype=float)) for k, v in values.items()}
        trace = poutine.trace(poutine.condition(model, data=given)).get_trace(**data)
    (site,) = [s for s in trace.nodes.values() if isinstance(s.get("fn"), dist.DiscreteHMM)]
    hmm_dist, value = site["fn"], site["value"]
    assert isinstance(hmm_dist, dist.DiscreteHMM) and value is not None  # the site just found
    emission = hmm_dist.observation_dist
    log_b = emission.log_prob(value.unsqueeze(-1 - emission.event_dim))
    A = np.stack([np.asarray(values["theta1"]), np.asarray(values["theta2"])])
    K = A.shape[-1]
    return forward_backward(np.full(K, 1.0 / K), A, log_b.detach().numpy()).gamma


@cache
def _states_truth(name: str, model: Callable[..., Any], data: Callable[[], dict[str, Any]]) -> Any:
    ref = posteriordb_reference(name)
    draws = ref["thinned"]
    n = len(next(iter(draws.values())))
    with default_dtype(torch.float64):
        given = data()
    per_draw = []
    for i in range(n):
        values: dict[str, Any] = {}
        for element, column in draws.items():  # vectors' 1-based elements, in order
            values.setdefault(element.partition("[")[0], []).append(column[i])
        per_draw.append(state_marginals(model, given, values))
    gamma = np.stack(per_draw)  # (draw, T, K)
    labels = np.arange(gamma.shape[-1])
    z = gamma @ labels  # E[z_t | y, draw], the states 0-based
    mean = z.mean(0)
    sd = np.sqrt(np.maximum((gamma @ labels**2).mean(0) - mean**2, 0.0))
    # the 200 draws, 50 apart in chains of bulk ESS near their length, are close to independent
    se = z.std(0, ddof=1) / np.sqrt(n)
    return {"z": (mean, sd, se)}


def states_truth(
    name: str, model: Callable[..., Any], data: Callable[[], dict[str, Any]]
) -> Callable[[], dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]]]:
    """The hidden states' exact posterior: E[z_t | y] (states 0-based, so for K = 2 the
    probability of Stan's state 2), its sd, and the mean's Monte-Carlo standard error, from
    forward-backward at each of the reference's thinned draws, averaged."""
    return lambda: _states_truth(name, model, data)


def _data(source: str, *reals: str) -> Callable[[], dict[str, Any]]:
    def data() -> dict[str, Any]:
        raw = posteriordb_data(source)
        dtype = torch.get_default_dtype()
        out: dict[str, Any] = {"K": int(raw["K"])}
        for key in reals:
            out[key] = torch.tensor(raw[key], dtype=torch.float64).to(dtype)
        return out | {k: float(raw[k]) for k in ("tau", "rho") if k in raw}

    return data


HMM: dict[str, tuple[Callable[..., Any], Any, tuple[str, ...], list[str], str, str | None]] = {
    # posterior: (model, data, parameters, math, story, why nuts misses the reference or None)
    "hmm_example-hmm_example": (
        hmm_example,
        _data("hmm_example", "y"),
        ("theta1", "theta2", "mu"),
        [
            r"\theta_1, \theta_2 \sim \mathrm{flat\ on\ the\ simplex}, \quad"
            r" \mu_1 < \mu_2,\ \mu_1 \sim \mathcal{N}(3, 1),\ \mu_2 \sim \mathcal{N}(10, 1)",
            r"z_t \mid z_{t-1} = j \sim \mathrm{Categorical}(\theta_j), \quad"
            r" y_t \mid z_t = k \sim \mathcal{N}(\mu_k, 1)",
        ],
        "A two-state hidden Markov model with normal emissions on 100 simulated points: the "
        "example of Imad Ali's Stan case study on HMMs (bball-hmm).",
        None,
    ),
    "bball_drive_event_0-hmm_drive_0": (
        hmm_drive,
        _data("bball_drive_event_0", "u", "v", "alpha"),
        ("theta1", "theta2", "phi", "lambda"),
        [
            r"\theta_k \sim \mathrm{Dirichlet}(\alpha_k), \quad 0 < \phi_1 < \phi_2,"
            r"\ 0 < \lambda_1 < \lambda_2, \quad \phi_k, \lambda_k \sim \mathcal{N}(3(k-1), 1)",
            r"u_t \mid z_t = k \sim \mathrm{Exp}(\phi_k), \quad"
            r" v_t \mid z_t = k \sim \mathrm{Exp}(\lambda_k)",
        ],
        "A basketball drive as a two-state hidden Markov model (no drive, drive) of a player's "
        "1/speed and distance to the hoop over 416 SportVU frames, exponential emissions: Imad "
        "Ali's Stan case study (bball-hmm).",
        "multimodal (posteriordb's keyword): the zoo's nuts (seed 0) ends with R-hat 1.073 and "
        "55 divergent transitions, its status unreliable",
    ),
    "bball_drive_event_1-hmm_drive_1": (
        hmm_drive,
        _data("bball_drive_event_1", "u", "v", "alpha"),
        ("theta1", "theta2", "phi", "lambda"),
        [
            r"\theta_k \sim \mathrm{Dirichlet}(\alpha_k), \quad \phi_1 < \phi_2,"
            r"\ \lambda_1 < \lambda_2, \quad \phi_k, \lambda_k \sim \mathcal{N}(3(k-1), 1)",
            r"u_t \mid z_t = k \sim \mathcal{N}(\phi_k, \tau^2), \quad"
            r" v_t \mid z_t = k \sim \mathcal{N}(\lambda_k, \rho^2)",
        ],
        "The same basketball drive on the log scale (log 1/speed, log distance to the hoop), "
        "normal emissions of known sd: Imad Ali's Stan case study (bball-hmm).",
        None,
    ),
}

for _name, (_model, _source, _params, _math, _story, _nuts_fails) in HMM.items():
    posterior(
        _name,
        _model,
        _source,
        params=_params,
        math=_math,
        story=_story,
        hidden=states_truth(_name, _model, _source),
        nuts_fails=_nuts_fails,
    )
