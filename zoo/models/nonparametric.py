"""Bayesian nonparametric mixtures: the Dirichlet process, by truncated stick-breaking."""

from __future__ import annotations

from typing import Any

import numpy as np
import pyro
import pyro.distributions as dist
import torch
from pyro.distributions import constraints
from pyro.ops.indexing import Vindex

import zoo
from zoo_inference.algorithms.gibbs import crp_gibbs
from zoo_inference.peers import sklearn as sklearn_peer


def stick_breaking(v: torch.Tensor) -> torch.Tensor:
    """Truncated stick-breaking (seed 000 §2.3.1, L549–556): pi_k = v_k prod_{j<k} (1 - v_j) for
    k < T, and pi_T = prod_{j<T} (1 - v_j), the rest of the stick, so the T weights sum to one.
    ``v`` (..., T - 1) -> (..., T)."""
    rest = torch.cumprod(1 - v, dim=-1)  # what is left of the stick after each break
    ones = torch.ones_like(v[..., :1])
    return torch.cat([v, ones], -1) * torch.cat([ones, rest], -1)


def ranked(weights: torch.Tensor, locs: torch.Tensor) -> dict[str, torch.Tensor]:
    """The components relabelled by decreasing weight (``ranked_weights``, ``ranked_locs``): the
    one labelling every engine of the DP mixture reports, so that their summaries compare."""
    order = torch.argsort(weights, dim=-1, descending=True, stable=True)
    return {
        "ranked_weights": torch.gather(weights, -1, order),
        "ranked_locs": torch.gather(locs, -1, order),
    }


def crp_expected_clusters(n: int, alpha: float) -> float:
    """E[number of tables after n customers] = sum_{i=1}^n alpha / (alpha + i - 1): customer i
    opens a new table with probability alpha / (alpha + i - 1) (seed 000 §2.3.3, L622)."""
    return float(sum(alpha / (alpha + i - 1) for i in range(1, n + 1)))


def crp_partition(n: int, alpha: float, rng: np.random.Generator) -> np.ndarray:
    """Table labels of n customers seated by the Chinese restaurant process (the Pólya urn of
    000 §2.3.3): customer i joins table h with probability n_h / (alpha + i - 1) and opens a new
    one with probability alpha / (alpha + i - 1)."""
    labels = np.zeros(n, dtype=np.int64)
    counts: list[int] = []
    for i in range(n):
        p = np.array([*counts, alpha], dtype=float) / (alpha + i)
        h = int(rng.choice(len(p), p=p))
        if h == len(counts):
            counts.append(0)
        counts[h] += 1
        labels[i] = h
    return labels


def _three_clusters(seed: int = 0) -> dict[str, Any]:
    """80 points from three clusters (the synthetic generator, at its default truth)."""
    return _dp_synthetic(seed)[0]


DP_TRUTH = {"weights": (0.5, 0.3, 0.2), "locs": (-2.5, 0.5, 3.0)}


def _dp_synthetic(seed: int, n: int = 80) -> tuple[dict[str, Any], dict[str, Any]]:
    rng = np.random.default_rng(seed)
    z = rng.choice(3, size=n, p=DP_TRUTH["weights"])
    y = np.asarray(DP_TRUTH["locs"])[z] + 0.5 * rng.standard_normal(n)
    truth = {
        "num_clusters": 3,
        "z": torch.tensor(z),
        **{k: torch.tensor(v) for k, v in DP_TRUTH.items()},
    }
    return {"y": torch.tensor(y, dtype=torch.float32), "alpha": 1.0, "T": 10}, truth


@zoo.register(
    data=_three_clusters,
    figures={"clusters": {"data": "y", "assignment": "z"}},
    engines=("svi", "nuts"),
    params=("ranked_weights", "ranked_locs"),
    engine_options={"svi": {"num_steps": 1500, "lr": 0.05}},
    seed_ref="000 §2.3 (L543–647)",
    math=[
        r"v_k \sim \mathrm{Beta}(1,\, \alpha), \quad k = 1, \ldots, T - 1",
        r"\pi_k = v_k \prod_{j < k} (1 - v_j)",
        r"\theta_k \sim \mathcal{N}(\mu_0,\, \tau_0^2), \quad k = 1, \ldots, T",
        r"z_i \mid \pi \sim \mathrm{Categorical}(\pi)",
        r"y_i \mid z_i \sim \mathcal{N}(\theta_{z_i},\, \sigma^2), \quad i = 1, \ldots, N",
    ],
    known={
        "nuts": zoo.Known("slow", "10 components enumerated for 80 points"),
    },
)
def dirichlet_process_mixture(
    y: torch.Tensor,
    alpha: float = 1.0,
    T: int = 10,
    sigma: float = 0.5,
    mu0: float = 0.0,
    tau0: float = 3.0,
) -> None:
    r"""Dirichlet-process mixture of normals (known spread), truncated stick-breaking form.

    Generative story (seed 000 §2.3.1 L549–556 and §2.3.3 L614; truncated at T components)::

        v_k       ~ Beta(1, alpha),  k = 1..T-1          stick breaks
        pi        = stick_breaking(v)                     pi_k = v_k prod_{j<k} (1 - v_j)
        theta_k   ~ N(mu0, tau0^2),  k = 1..T             atoms from the base measure P0
        z_i       ~ Categorical(pi)                       component of observation i
        y_i | z_i ~ N(theta_{z_i}, sigma^2),  i = 1..N    the kernel K(y | theta)

             alpha --> v --> pi --> (z_i) --> [y_i] <-- theta_k <-- P0     i = 1..N, k = 1..T

    With T -> infinity this is y_i ~ K(theta_i), theta_i ~ P, P ~ DP(alpha, P0); integrating
    P out gives the Chinese restaurant process, whose expected number of occupied tables after
    n draws is sum_i alpha / (alpha + i - 1) (2.93 at alpha = 1, n = 10). alpha = 1 says "a few
    clusters" (about 5 for 80 points a priori); P0 = N(0, 3^2) covers the data's range, and
    sigma = 0.5 is the known within-cluster spread (the conjugate case of the seed's Gibbs
    sampler: a new cluster's predictive is N(y | mu0, sigma^2 + tau0^2), L636). T = 10 leaves
    the last component a prior mass E[pi_T] = (alpha / (1 + alpha))^(T-1) = 0.002.

    Label switching: the stick prior favours early components but does not fix their order,
    so the compared sites are relabelled: ``ranked_weights`` are the weights in decreasing
    order and ``ranked_locs`` the atoms in that order (the same relabelling for every engine;
    the Gibbs sampler, which keeps no labels, reports its clusters by decreasing size).

    Default data: 80 synthetic points from three clusters (weights 0.5, 0.3, 0.2 at -2.5, 0.5
    and 3, sd 0.5), drawn with numpy's ``default_rng(seed)``.
    """
    v = pyro.sample("v", dist.Beta(1.0, alpha).expand([T - 1]).to_event(1))
    weights = pyro.deterministic("weights", stick_breaking(v), event_dim=1)
    locs = pyro.sample("locs", dist.Normal(mu0, tau0).expand([T]).to_event(1))
    for name, value in ranked(weights, locs).items():
        pyro.deterministic(name, value, event_dim=1)
    with pyro.plate("data", len(y)):
        z = pyro.sample("z", dist.Categorical(weights))
        pyro.sample("y", dist.Normal(Vindex(locs)[..., z], sigma), obs=y)


@dirichlet_process_mixture.set_guide
def _(y: torch.Tensor, alpha: float, T: int) -> None:
    """Mean-field: q(v_k) = Beta(a_k, b_k), q(theta_k) = N(m_k, s_k^2); z enumerated exactly in
    the model (TraceEnum_ELBO). Sticks start at the prior and every atom near the data's mean:
    the fit then opens components one by one, where atoms spread over the data's quantiles
    leave it at a local optimum that splits every cluster."""
    a = pyro.param("q_v_a", torch.ones(T - 1), constraint=constraints.positive)
    b = pyro.param("q_v_b", torch.full((T - 1,), float(alpha)), constraint=constraints.positive)
    pyro.sample("v", dist.Beta(a, b).to_event(1))
    m = pyro.param("q_locs_loc", lambda: y.mean() + 0.1 * torch.randn(T))
    s = pyro.param("q_locs_scale", torch.full((T,), 0.3), constraint=constraints.positive)
    pyro.sample("locs", dist.Normal(m, s).to_event(1))


@dirichlet_process_mixture.reference("gibbs")
def _(
    y: torch.Tensor,
    alpha: float,
    T: int,
    sigma: float,
    mu0: float,
    tau0: float,
    *,
    num_samples: int = 500,
    warmup: int = 500,
    num_chains: int = 2,
    progress: bool = False,
) -> zoo.Draws:
    """Chinese-restaurant Gibbs sampler (Neal's algorithm 2, seed 000 §2.3.4) on the untruncated
    DP mixture; chains start with every point at one table. Draws are reported in the truncated
    model's coordinates (clusters by decreasing size). Single-site updates split and merge
    clusters slowly (two clusters on one location trade points by a random walk): hence the
    long warmup."""
    if not alpha > 0:
        raise zoo.ZooError(f"alpha must be positive, got {alpha!r}")
    out, clusters = crp_gibbs(
        y.double().numpy(), alpha, T, sigma, mu0, tau0, num_samples, warmup, num_chains, progress
    )
    weights = stick_breaking(torch.as_tensor(out["v"]))
    out["weights"] = weights.numpy()
    out.update({k: v.numpy() for k, v in ranked(weights, torch.as_tensor(out["locs"])).items()})
    return zoo.Draws(out, chains=True, extras={"num_clusters": clusters})


@dirichlet_process_mixture.reference("sklearn")
def _(
    y: torch.Tensor,
    alpha: float,
    T: int,
    sigma: float,
    mu0: float,
    tau0: float,
    *,
    num_samples: int = 1000,
    n_init: int = 10,
    max_iter: int = 1000,
    tol: float = 1e-6,
    spread_dof: float = 1e6,
) -> zoo.Draws:
    """scikit-learn's BayesianGaussianMixture (Dirichlet process, variational), the peer.

    Mean-field variational Bayes on the truncated stick-breaking mixture with T components,
    weight_concentration_prior = alpha (sticks Beta(1, alpha), as the model's), best bound of
    n_init k-means starts (``random_state`` from the run's seed; with 3 starts, 2 synthetic
    data sets in 60 kept a local optimum that splits a cluster; with 10, none in 150). Its
    Normal–Wishart prior is set to the model's as far as it maps: the model's spread sigma is
    known, scikit-learn learns a variance per component, so its prior on them is pinned at
    sigma^2 (degrees_of_freedom_prior
    = ``spread_dof``, covariance_prior = spread_dof sigma^2: the precision's prior sd is
    sqrt(2 / spread_dof) of its mean); mean_precision_prior = sigma^2 / tau0^2 and mean_prior =
    mu0 then make the atoms' prior N(mu0, tau0^2), the model's.

    Sites, from its variational factors (``num_samples`` independent draws, so the compared
    ranked_* sites get rows as every engine's do; the sds are those of q): v_k ~
    Beta(weight_concentration_[0][k], [1][k]) for k < T (its own T-th stick is dropped: the
    model's pi_T is the rest of the stick); locs_k ~ N(means_k, covariances_k /
    mean_precision_k) (q(mu_k | precision) at the pinned precision); z_i ~
    Categorical(predict_proba); weights and ranked_* as the model computes them. What does
    not map: its lower bound omits constant terms (in the extras, not the evidence), and the
    learned spreads (extras "scales", equal to sigma to about 1e-5). extras["num_clusters"]:
    components with weight > 1% (its weights_, expectations under q; a small cluster for a few
    tail points counts too); "cluster_sizes": points per component by largest responsibility.
    """
    if y.ndim != 1:
        raise zoo.ZooError(f"y must be a vector of observations, got shape {tuple(y.shape)}")
    if not alpha > 0:
        raise zoo.ZooError(f"alpha must be positive, got {alpha!r}")
    if isinstance(T, bool) or not (isinstance(T, int) and 2 <= T <= y.shape[0]):
        raise zoo.ZooError(f"T must be an integer with 2 <= T <= N = {y.shape[0]}, got {T!r}")
    if not (sigma > 0 and tau0 > 0):
        raise zoo.ZooError(f"sigma and tau0 must be positive, got {sigma!r} and {tau0!r}")
    x = y.double().numpy()[:, None]
    bgm = sklearn_peer.dp_gaussian_mixture(
        x,
        T,
        alpha=alpha,
        sigma=sigma,
        mu0=mu0,
        tau0=tau0,
        n_init=n_init,
        max_iter=max_iter,
        tol=tol,
        spread_dof=spread_dof,
    )
    a, b = bgm.weight_concentration_
    f64: dict[str, Any] = dict(dtype=torch.float64)
    n = torch.Size([num_samples])
    v = dist.Beta(torch.tensor(a[: T - 1], **f64), torch.tensor(b[: T - 1], **f64)).sample(n)
    loc_sd = np.sqrt(bgm.covariances_ / bgm.mean_precision_)
    locs = dist.Normal(torch.tensor(bgm.means_.ravel(), **f64), torch.tensor(loc_sd, **f64))
    locs = locs.sample(n)
    resp = bgm.predict_proba(x)
    z = dist.Categorical(torch.tensor(resp, **f64)).sample(n)
    weights = stick_breaking(v)
    return zoo.Draws(
        {"v": v, "locs": locs, "z": z, "weights": weights, **ranked(weights, locs)},
        extras={
            "num_clusters": int((bgm.weights_ > 0.01).sum()),
            "cluster_sizes": np.bincount(resp.argmax(1), minlength=T),
            "peer_weights": bgm.weights_,
            "peer_locs": bgm.means_.ravel(),
            "scales": np.sqrt(bgm.covariances_),
            "lower_bound": float(bgm.lower_bound_),
            "converged": bool(bgm.converged_),
        },
    )


@dirichlet_process_mixture.synthetic
def _(seed: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """80 points from weights (0.5, 0.3, 0.2) on atoms (-2.5, 0.5, 3), spread 0.5 (the model's
    sigma); numpy's generator seeded by ``seed``."""
    return _dp_synthetic(seed)
