"""Mixtures and latent-variable models: a discrete latent per observation."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pyro
import pyro.distributions as dist
import torch
from pyro.distributions import constraints
from pyro.ops.indexing import Vindex
from scipy.special import logsumexp
from tqdm.auto import tqdm

import zoo
from datasets import load_faithful

# ------------------------------------------------------------------------------ three_coin


@zoo.register(
    data={"y": torch.tensor([1.0, 1, 0, 1, 0, 0, 1, 0, 1, 1])},
    params=("pi", "p", "q", "z"),
    seed_ref="001 §1.1, Example 1",
)
def three_coin(y: torch.Tensor) -> None:
    r"""Three-coin model: coin A picks which of coins B and C is tossed; only the toss is seen.

    Generative story (seed 001 §1.1, Example 1, eqs (1)-(2))::

        pi, p, q ~ Beta(1, 1)                         heads probabilities of coins A, B, C
        z_j      ~ Bernoulli(pi)                      coin A: heads (1) -> toss B, tails -> C
        y_j | z_j ~ Bernoulli(p if z_j = 1 else q)    j = 1..n

          pi ---> (z_j) ---> [y_j] <--- p, q      j = 1..n

    The document estimates (pi, p, q) by maximum likelihood with EM. The uniform priors make the
    Bayesian variant's posterior proportional to that likelihood, so MAP = MLE. The likelihood
    depends on theta only through s = pi p + (1 - pi) q = P(y = 1): the model is not identifiable
    and every MLE has s = mean(y).
    """
    pi = pyro.sample("pi", dist.Beta(1.0, 1.0))
    p = pyro.sample("p", dist.Beta(1.0, 1.0))
    q = pyro.sample("q", dist.Beta(1.0, 1.0))
    with pyro.plate("tosses", len(y)):
        z = pyro.sample("z", dist.Bernoulli(pi))
        pyro.sample("y", dist.Bernoulli(q + z * (p - q)), obs=y)


@three_coin.set_guide
def _() -> None:
    """Mean-field Beta factors for pi, p and q; z is enumerated exactly in the model."""
    for name in ("pi", "p", "q"):
        conc = pyro.param(
            f"q_{name}_conc", torch.tensor([2.0, 2.0]), constraint=constraints.positive
        )
        pyro.sample(name, dist.Beta(conc[0], conc[1]))


def three_coin_em_steps(
    y: np.ndarray, theta: Sequence[float], max_iter: int, tol: float
) -> tuple[np.ndarray, list[float], np.ndarray]:
    """EM of the document (eqs (4)-(5)); returns theta, the log-likelihood trace, responsibilities.

    E-step: mu_j = pi p^y (1-p)^(1-y) / [pi p^y (1-p)^(1-y) + (1-pi) q^y (1-q)^(1-y)].
    M-step: pi = mean(mu); p = sum(mu y) / sum(mu); q = sum((1-mu) y) / sum(1-mu).
    """
    pi, p, q = map(float, theta)
    trace: list[float] = []
    mu = np.full_like(y, pi)
    for _ in range(max_iter + 1):
        a = pi * p**y * (1 - p) ** (1 - y)
        c = (1 - pi) * q**y * (1 - q) ** (1 - y)
        trace.append(float(np.log(a + c).sum()))
        mu = a / (a + c)
        if len(trace) > 1 and abs(trace[-1] - trace[-2]) < tol:
            break
        if len(trace) == max_iter + 1:
            break
        pi = mu.mean()
        p = (mu * y).sum() / mu.sum()
        q = ((1 - mu) * y).sum() / (1 - mu).sum()
    return np.array([pi, p, q]), trace, mu


@three_coin.reference("em")
def _(
    y: torch.Tensor,
    *,
    init: Sequence[float] = (0.5, 0.5, 0.5),
    max_iter: int = 100,
    tol: float = 1e-12,
) -> zoo.Estimate:
    """EM for (pi, p, q) (seed 001 §1.1, eqs (4)-(5)): maximum likelihood, sensitive to ``init``."""
    init = tuple(float(v) for v in init)
    if len(init) != 3 or not all(0.0 < v < 1.0 for v in init):
        raise zoo.ZooError(f"init must be three probabilities (pi, p, q) in (0, 1), got {init}")
    theta, trace, mu = three_coin_em_steps(y.double().numpy(), init, max_iter, tol)
    return zoo.Estimate(
        dict(zip(("pi", "p", "q"), theta, strict=True)),
        traces={"log_likelihood": trace},
        log_evidence=trace[-1],
        extras={"responsibilities": mu, "init": list(init)},
    )


@three_coin.truth
def _(y: torch.Tensor) -> zoo.GroundTruth | None:
    """Exact posterior under the uniform priors by tensor Gauss–Legendre quadrature.

    The likelihood s^k (1-s)^(n-k), s = pi p + (1-pi) q, is a polynomial of degree <= n in each
    coordinate, and so are the integrands of every moment (P(z_j = 1 | y, theta) times the
    likelihood is too), so m > (n + 3) / 2 nodes per axis make the integrals exact.
    """
    y = y.double().numpy()
    n, k = y.size, int(y.sum())
    m = n // 2 + 4
    if m**3 > 3_000_000:
        return None
    x, w = zoo.gauss_legendre(m)
    pi, p, q = np.meshgrid(x, x, x, indexing="ij")
    s = pi * p + (1 - pi) * q
    log_w = np.log(w)[:, None, None] + np.log(w)[None, :, None] + np.log(w)[None, None, :]
    log_post = log_w + k * np.log(s) + (n - k) * np.log1p(-s)
    log_z = logsumexp(log_post)
    wt = np.exp(log_post - log_z)
    mean, sd = {}, {}
    for name, v in (("pi", pi), ("p", p), ("q", q)):
        mean[name] = float((wt * v).sum())
        sd[name] = float(np.sqrt(max((wt * v**2).sum() - mean[name] ** 2, 0.0)))
    z1 = float((wt * pi * p / s).sum())  # P(z_j = 1 | y) for y_j = 1
    z0 = float((wt * pi * (1 - p) / (1 - s)).sum())  # for y_j = 0
    mean["z"] = np.where(y == 1, z1, z0)
    sd["z"] = np.sqrt(mean["z"] * (1 - mean["z"]))

    def density(axis: int) -> Any:
        def pdf(t: np.ndarray) -> np.ndarray:
            t = np.asarray(t, dtype=float)
            a, b = np.meshgrid(x, x, indexing="ij")
            ww = np.outer(w, w)
            out = []
            for ti in np.ravel(t):
                coords = [a, b]
                coords.insert(axis, np.full_like(a, ti))
                sv = coords[0] * coords[1] + (1 - coords[0]) * coords[2]
                with np.errstate(divide="ignore"):
                    lp = k * np.log(sv) + (n - k) * np.log1p(-sv)
                out.append(float((ww * np.exp(lp - log_z)).sum()))
            return np.reshape(out, np.shape(t))

        return pdf

    return zoo.GroundTruth(
        mean=mean,
        sd=sd,
        log_evidence=float(log_z),
        density={"pi": density(0), "p": density(1), "q": density(2)},
        source=f"exact: Gauss–Legendre quadrature, {m}^3 nodes (uniform priors)",
    )


# ------------------------------------------------------------------------ gaussian_mixture


class SortedNormal(dist.TorchDistribution):
    """K iid Normal(loc, scale) draws, sorted: the law of their order statistics.

    Density K! prod_k N(x_k | loc, scale) on x_1 < ... < x_K. Used as the prior of mixture
    locations, it removes the K! label-switching modes without changing the model otherwise.
    """

    arg_constraints = {"loc": constraints.real, "scale": constraints.positive}
    support = constraints.ordered_vector

    def __init__(self, loc: torch.Tensor, scale: torch.Tensor, size: int, validate_args=None):
        self.loc, self.scale, self.size = torch.as_tensor(loc), torch.as_tensor(scale), size
        super().__init__(torch.Size(), torch.Size([size]), validate_args=validate_args)

    def sample(self, sample_shape: torch.Size | tuple = ()) -> torch.Tensor:
        with torch.no_grad():
            shape = torch.Size(sample_shape) + (self.size,)
            base = dist.Normal(self.loc, self.scale).sample(shape)
            return base.sort(-1).values

    def log_prob(self, value: torch.Tensor) -> torch.Tensor:
        lp = dist.Normal(self.loc, self.scale).log_prob(value).sum(-1)
        return lp + torch.lgamma(torch.tensor(self.size + 1.0))


def _faithful(seed: int = 0) -> dict:
    """Old Faithful eruption durations (minutes), 272 rows; the seed is unused (real data)."""
    return {"y": torch.tensor(load_faithful()["eruptions"].to_numpy(), dtype=torch.float), "K": 2}


@zoo.register(
    data=_faithful,
    engine_options={
        "nuts": {"num_samples": 300, "warmup": 300},
        "hmc": {"num_samples": 300, "warmup": 300},
    },
    seed_ref="002 §18.2–18.4; 001 §1.4",
)
def gaussian_mixture(y: torch.Tensor, K: int = 2) -> None:
    r"""Gaussian mixture (1-D): each observation comes from one of K normal components.

    Generative story (seed 002 §18.2, Algorithm 2; 001 §1.4, Definition 2)::

        w         ~ Dirichlet(1, ..., 1)                    mixing weights
        mu        ~ SortedNormal(3, 2; K)                   component means, mu_1 < ... < mu_K
        sigma_k   ~ LogNormal(log 0.5, 1),  k = 1..K        component standard deviations
        z_n       ~ Categorical(w)                          component of observation n
        y_n | z_n ~ Normal(mu_{z_n}, sigma_{z_n}),  n = 1..N

           w ---> (z_n) ---> [y_n] <--- mu_k, sigma_k     n = 1..N, k = 1..K

    Priors are sized for the default data, Old Faithful eruption durations in minutes: means
    within about 3 +- 4 minutes, spreads of a few seconds to a few minutes. Ordering the means
    removes label switching (the K! equivalent modes of 002 §18.2) so posteriors can be summarised.
    """
    weights = pyro.sample("weights", dist.Dirichlet(torch.ones(K)))
    locs = pyro.sample("locs", SortedNormal(torch.tensor(3.0), torch.tensor(2.0), K))
    scales = pyro.sample("scales", dist.LogNormal(np.log(0.5), 1.0).expand([K]).to_event(1))
    with pyro.plate("data", len(y)):
        z = pyro.sample("z", dist.Categorical(weights))
        # Vindex picks component z_n's parameters under any batch (enumeration, draws) dims
        pyro.sample("y", dist.Normal(Vindex(locs)[..., z], Vindex(scales)[..., z]), obs=y)


@gaussian_mixture.set_guide
def _(y: torch.Tensor, K: int = 2) -> None:
    """Mean-field guide on the globals: Dirichlet weights, LogNormal spreads, and the ordered means
    as a Normal on their unconstrained coordinates (first mean, log gaps) pushed through the
    ordering transform. The assignments z are enumerated exactly in the model. Means start at the
    data's quantiles, the usual EM start."""
    # start as if each component had N / K points, near where the posterior will be
    conc = pyro.param("q_w_conc", torch.full((K,), y.shape[0] / K), constraint=constraints.positive)
    pyro.sample("weights", dist.Dirichlet(conc))
    ordered = dist.transforms.OrderedTransform()
    start = torch.quantile(y, (torch.arange(K) + 0.5) / K)
    loc_mean = pyro.param("q_locs_loc", lambda: ordered.inv(start))
    loc_scale = pyro.param("q_locs_scale", torch.full((K,), 0.1), constraint=constraints.positive)
    base = dist.Normal(loc_mean, loc_scale).to_event(1)
    pyro.sample("locs", dist.TransformedDistribution(base, [ordered]))
    s_loc = pyro.param("q_scales_loc", torch.full((K,), np.log(0.5)))
    s_scale = pyro.param("q_scales_scale", torch.full((K,), 0.1), constraint=constraints.positive)
    pyro.sample("scales", dist.LogNormal(s_loc, s_scale).to_event(1))


def gmm_em_steps(
    y: np.ndarray,
    weights: np.ndarray,
    locs: np.ndarray,
    scales: np.ndarray,
    max_iter: int,
    tol: float,
    progress: bool = False,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[float], np.ndarray]:
    """EM for a 1-D Gaussian mixture (seed 001 §1.4 eqs (39), (42)-(44); 002 §18.2 Alg. 2).

    E-step: gamma_nk = w_k N(y_n | mu_k, s_k^2) / sum_j w_j N(y_n | mu_j, s_j^2).
    M-step: N_k = sum_n gamma_nk; mu_k = sum_n gamma_nk y_n / N_k;
            s_k^2 = sum_n gamma_nk (y_n - mu_k)^2 / N_k (with the *new* mu_k); w_k = N_k / N.
    """
    w, mu, s = weights.astype(float), locs.astype(float), scales.astype(float)
    trace: list[float] = []
    floor = 1e-6 * max(np.var(y), 1e-12)  # keeps a component from collapsing onto one point
    for _ in tqdm(range(max_iter + 1), desc="em", disable=not progress, leave=False):
        log_joint = np.log(w) - 0.5 * np.log(2 * np.pi * s**2) - 0.5 * ((y[:, None] - mu) / s) ** 2
        ll = logsumexp(log_joint, axis=1)
        trace.append(float(ll.sum()))
        gamma = np.exp(log_joint - ll[:, None])
        if (
            len(trace) > 1
            and abs(trace[-1] - trace[-2]) < tol * abs(trace[-1])
            or len(trace) == max_iter + 1
        ):
            break
        nk = gamma.sum(0)
        mu = (gamma * y[:, None]).sum(0) / nk
        s = np.sqrt(np.maximum((gamma * (y[:, None] - mu) ** 2).sum(0) / nk, floor))
        w = nk / y.size
    return w, mu, s, trace, gamma


@gaussian_mixture.reference("em")
def _(
    y: torch.Tensor,
    K: int,
    *,
    init: Mapping[str, Sequence[float]] | None = None,
    max_iter: int = 500,
    tol: float = 1e-10,
    progress: bool = False,
) -> zoo.Estimate:
    """EM for the maximum-likelihood mixture (seed 002 §18.2 Algorithm 2); init at quantiles."""
    y = y.double().numpy()
    if init is None:
        locs = np.quantile(y, (np.arange(K) + 0.5) / K)
        init = {"weights": np.full(K, 1.0 / K), "locs": locs, "scales": np.full(K, y.std())}
    arrays = {}
    for key in ("weights", "locs", "scales"):
        if not isinstance(init, Mapping) or key not in init or np.shape(init[key]) != (K,):
            raise zoo.ZooError(f"init must give {key!r} as {K} numbers (K={K})")
        arrays[key] = np.asarray(init[key], dtype=float)
    if np.any(arrays["scales"] <= 0) or np.any(arrays["weights"] <= 0):
        raise zoo.ZooError("init weights and scales must be positive")
    w, mu, s, trace, gamma = gmm_em_steps(
        y,
        arrays["weights"] / arrays["weights"].sum(),
        arrays["locs"],
        arrays["scales"],
        max_iter,
        tol,
        progress,
    )
    order = np.argsort(mu)  # the model's ordering convention for the labels
    return zoo.Estimate(
        {"weights": w[order], "locs": mu[order], "scales": s[order]},
        traces={"log_likelihood": trace},
        log_evidence=trace[-1],
        extras={"responsibilities": gamma[:, order]},
    )
