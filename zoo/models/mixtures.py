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

import zoo
from zoo_datasets import load_faithful
from zoo_inference.algorithms.cavi import gaussian_mixture_cavi
from zoo_inference.algorithms.em import (
    EMResult,
    bernoulli_mixture_em,
    e_draws_of,
    gaussian_mixture_em,
    kmeans,
)
from zoo_inference.algorithms.gibbs import gaussian_mixture_gibbs
from zoo_inference.algorithms.imputation import (
    bernoulli_mixture_impute,
    bernoulli_mixture_posterior,
    gaussian_mixture_impute,
    gaussian_mixture_posterior,
    imputation_posterior,
)
from zoo_inference.distributions import IndexCategorical, SortedNormal
from zoo_inference.peers import sklearn as sklearn_peer

# ------------------------------------------------------------------------------ three_coin

COIN_PRIOR = (1.0, 1.0)  # Beta prior of each coin's heads probability (model and IP engine)


@zoo.register(
    data={"y": torch.tensor([1.0, 1, 0, 1, 0, 0, 1, 0, 1, 1])},
    params=("pi", "p", "q", "z"),
    seed_ref="001 §1.1, Example 1",
    math=[
        r"\pi,\, p,\, q \sim \mathrm{Beta}(1,\, 1)",
        r"z_j \mid \pi \sim \mathrm{Bernoulli}(\pi)",
        r"y_j \mid z_j \sim \mathrm{Bernoulli}(z_j\, p + (1 - z_j)\, q), \quad j = 1, \ldots, n",
    ],
    known={
        "importance": zoo.Known(
            "slow", "test_importance checks the engine; the slow run keeps this cell"
        ),
    },
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

    Default data: ten observed tosses, six of them heads (1, 1, 0, 1, 0, 0, 1, 0, 1, 1).
    """
    pi = pyro.sample("pi", dist.Beta(*COIN_PRIOR))
    p = pyro.sample("p", dist.Beta(*COIN_PRIOR))
    q = pyro.sample("q", dist.Beta(*COIN_PRIOR))
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


@three_coin.reference("em")
def _(
    y: torch.Tensor,
    *,
    init: Sequence[float] = (0.5, 0.5, 0.5),
    max_iter: int = 100,
    tol: float = 1e-12,
    m_step: str = "full",
    e_step: str = "exact",
    e_draws: int | None = None,
    gradient_steps: int = 1,
) -> zoo.Estimate:
    """EM for (pi, p, q) (seed 001 §1.1, eqs (4)-(5)): maximum likelihood, sensitive to ``init``.
    ``m_step``/``e_step``: the generalised and sampled variants (see :mod:`em <zoo_inference.
    algorithms.em>`); a sampled E-step runs ``max_iter`` iterations."""
    e_draws_of(e_step, e_draws, m_step)
    init = tuple(float(v) for v in init)
    if len(init) != 3 or not all(0.0 < v < 1.0 for v in init):
        raise zoo.ZooError(f"init must be three probabilities (pi, p, q) in (0, 1), got {init}")
    out = bernoulli_mixture_em(
        y.double().numpy(), init, max_iter, tol,
        m_step=m_step, e_step=e_step, e_draws=e_draws, gradient_steps=gradient_steps,
    )  # fmt: skip
    return em_estimate(("pi", "p", "q"), out, {"init": list(init)})


@three_coin.reference("ip")
def _(
    y: torch.Tensor,
    *,
    num_samples: int = 1000,
    warmup: int = 200,
    imputations: int = 4,
    progress: bool = False,
) -> zoo.Draws:
    """IP algorithm (data augmentation, seed 003 L185–187): coin labels imputed given (pi, p,
    q), then (pi, p, q) drawn from their Beta posterior given a random imputation's labels;
    each imputation starts from a prior draw and is reported as a chain."""
    yn = y.double().numpy()
    theta = np.random.beta(*COIN_PRIOR, size=(imputations, 3))
    thetas, z = imputation_posterior(
        theta,
        lambda th: bernoulli_mixture_impute(yn, th),
        lambda zs, _: bernoulli_mixture_posterior(yn, zs, COIN_PRIOR),
        num_samples, warmup, progress,
    )  # fmt: skip
    draws = {name: thetas[..., i] for i, name in enumerate(("pi", "p", "q"))}
    return zoo.Draws({**draws, "z": z.astype(np.int64)}, chains=True)


@three_coin.truth
def _(y: torch.Tensor) -> zoo.GroundTruth | None:
    """Exact posterior under the uniform priors by tensor Gauss–Legendre quadrature.

    The likelihood s^k (1-s)^(n-k), s = pi p + (1-pi) q, is a polynomial of degree <= n in each
    coordinate, and so are the integrands of every moment (P(z_j = 1 | y, theta) times the
    likelihood is too), so m > (n + 3) / 2 nodes per axis make the integrals exact.
    """
    yn = y.double().numpy()
    n, k = yn.size, int(yn.sum())
    m = n // 2 + 4
    if m**3 > 3_000_000:
        return None
    x, w = zoo.gauss_legendre(m)
    pi, p, q = np.meshgrid(x, x, x, indexing="ij")
    s = pi * p + (1 - pi) * q
    log_w = np.log(w)[:, None, None] + np.log(w)[None, :, None] + np.log(w)[None, None, :]
    grid = zoo.grid_posterior(log_w + k * np.log(s) + (n - k) * np.log1p(-s))
    log_z = grid.log_z
    mean: dict[str, Any] = {}
    sd: dict[str, Any] = {}
    for name, v in (("pi", pi), ("p", p), ("q", q)):
        m_, s_ = grid.moments(v)
        mean[name], sd[name] = float(m_), float(s_)
    z1 = float(grid.expect(pi * p / s))  # P(z_j = 1 | y) for y_j = 1
    z0 = float(grid.expect(pi * (1 - p) / (1 - s)))  # for y_j = 0
    mean["z"] = np.where(yn == 1, z1, z0)
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


def _faithful(seed: int = 0) -> dict:
    """Old Faithful eruption durations (minutes), 272 rows; the seed is unused (real data)."""
    return {"y": torch.tensor(load_faithful()["eruptions"].to_numpy(), dtype=torch.float), "K": 2}


# gaussian_mixture's priors, read by the model and by its Gibbs sampler: means around the middle
# of the eruption durations (3 min, sd 2), spreads around half a minute (log-normal, sd 1 in log)
LOC_PRIOR = (3.0, 2.0)
SCALE_PRIOR = (float(np.log(0.5)), 1.0)


@zoo.register(
    data=_faithful,
    figures={"clusters": {"data": "y", "assignment": "z"}},  # eruptions by component
    engine_options={"hmc": {"num_samples": 300, "warmup": 300}},  # nuts: its defaults
    seed_ref="002 §18.2–18.4; 001 §1.4",
    math=[
        r"w \sim \mathrm{Dirichlet}(1, \ldots, 1)",
        r"\mu \sim \mathrm{SortedNormal}(3,\, 2;\ K), \quad \mu_1 < \cdots < \mu_K",
        r"\sigma_k \sim \mathrm{LogNormal}(\log 0.5,\, 1), \quad k = 1, \ldots, K",
        r"z_n \mid w \sim \mathrm{Categorical}(w)",
        r"y_n \mid z_n \sim \mathcal{N}(\mu_{z_n},\, \sigma_{z_n}^2), \quad n = 1, \ldots, N",
    ],
    known={
        "hmc": zoo.Known("slow", "enumerated components at every gradient; its chees cell stays"),
        "nuts": zoo.Known(
            "slow",
            "enumerated components at every gradient; test_gaussian_mixture runs it "
            "against the truth",
        ),
        "mams": zoo.Known(
            "slow",
            "enumerated components at every gradient; test_mams checks mams against "
            "closed forms and by SBC",
        ),
        "importance": zoo.Known(
            "slow",
            "many proposals through the enumerated components; test_importance checks the engine",
        ),
        "mh": zoo.Known("slow", "enumerated components at every step; its chees cell stays"),
        "pathfinder": zoo.Known("slow", "enumerated components at every gradient of every path"),
    },
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

    Default data: the 272 eruption durations (minutes) of R's ``datasets::faithful`` (Azzalini
    and Bowman 1990; Härdle 1991), vendored as ``datasets/faithful.csv`` (see its README).
    """
    weights = pyro.sample("weights", dist.Dirichlet(torch.ones(K)))
    locs = pyro.sample(
        "locs", SortedNormal(torch.tensor(LOC_PRIOR[0]), torch.tensor(LOC_PRIOR[1]), K)
    )
    scales = pyro.sample("scales", dist.LogNormal(*SCALE_PRIOR).expand([K]).to_event(1))
    with pyro.plate("data", len(y)):
        z = pyro.sample("z", dist.Categorical(weights))
        # Vindex picks component z_n's parameters under any batch (enumeration, draws) dims
        pyro.sample("y", dist.Normal(Vindex(locs)[..., z], Vindex(scales)[..., z]), obs=y)


@gaussian_mixture.set_guide
def _(y: torch.Tensor, K: int) -> None:
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


@gaussian_mixture.reference("em")
def _(
    y: torch.Tensor,
    K: int,
    *,
    init: Mapping[str, Sequence[float] | np.ndarray] | None = None,
    max_iter: int = 500,
    tol: float = 1e-10,
    progress: bool = False,
    m_step: str = "full",
    e_step: str = "exact",
    e_draws: int | None = None,
    gradient_steps: int = 1,
) -> zoo.Estimate:
    """EM for the maximum-likelihood mixture (seed 002 §18.2 Algorithm 2); init at quantiles.
    ``m_step``/``e_step``: the generalised and sampled variants (see :mod:`em <zoo_inference.
    algorithms.em>`); a sampled E-step runs ``max_iter`` iterations."""
    e_draws_of(e_step, e_draws, m_step)
    yn = y.double().numpy()
    if init is None:
        locs = np.quantile(yn, (np.arange(K) + 0.5) / K)
        init = {"weights": np.full(K, 1.0 / K), "locs": locs, "scales": np.full(K, yn.std())}
    arrays = {}
    for key in ("weights", "locs", "scales"):
        if not isinstance(init, Mapping) or key not in init or np.shape(init[key]) != (K,):
            raise zoo.ZooError(f"init must give {key!r} as {K} numbers (K={K})")
        arrays[key] = np.asarray(init[key], dtype=float)
    if np.any(arrays["scales"] <= 0) or np.any(arrays["weights"] <= 0):
        raise zoo.ZooError("init weights and scales must be positive")
    out = gaussian_mixture_em(
        yn,
        arrays["weights"] / arrays["weights"].sum(),
        arrays["locs"],
        arrays["scales"],
        max_iter,
        tol,
        progress,
        m_step=m_step,
        e_step=e_step,
        e_draws=e_draws,
        gradient_steps=gradient_steps,
    )
    return em_estimate(("weights", "locs", "scales"), out, {}, K)


def em_estimate(
    names: Sequence[str], out: EMResult, extras: dict[str, Any], K: int | None = None
) -> zoo.Estimate:
    """An EM run as an Estimate: with ``K``, theta is (weights, locs, scales) and the components
    are relabelled by increasing location (the model's ordering convention)."""
    theta, gamma = out.theta, out.responsibilities
    if K is None:  # the three coins: P(z_j = 1 | y, theta), as the document's mu_j
        values, gamma = dict(zip(names, theta, strict=True)), gamma[:, 0]
    else:
        order = np.argsort(theta[K : 2 * K])
        values = {n: theta[i * K : (i + 1) * K][order] for i, n in enumerate(names)}
        gamma = gamma[:, order]
    return zoo.Estimate(
        values,
        traces={"log_likelihood": out.trace},
        log_evidence=out.log_likelihood,
        extras={"responsibilities": gamma, "chain": out.chain, **extras},
    )


def check_mixture_data(y: torch.Tensor, K: int) -> None:
    """A clear error for data or a number of components a 1-D mixture fit cannot take."""
    if y.ndim != 1:
        raise zoo.ZooError(f"y must be a vector of observations, got shape {tuple(y.shape)}")
    if isinstance(K, bool) or not (isinstance(K, int) and 1 <= K <= y.shape[0]):
        raise zoo.ZooError(f"K must be an integer with 1 <= K <= N = {y.shape[0]}, got {K!r}")


@gaussian_mixture.reference("sklearn")
def _(
    y: torch.Tensor,
    K: int,
    *,
    n_init: int = 5,
    max_iter: int = 1000,
    tol: float = 1e-10,
    reg_covar: float = 1e-6,
) -> zoo.Estimate:
    """scikit-learn's GaussianMixture (EM), the peer: maximum likelihood, best of n_init starts.

    In 1-D every covariance type but "tied" is this model (a variance per component); "spherical"
    is used. k-means starts (``random_state`` from the run's seed); ``tol`` bounds the last
    step's change of the mean log-likelihood per point; ``reg_covar`` is added to every variance
    (its shift of a scale s is reg_covar / 2s). Components are listed by increasing location
    (the model's order). log_evidence = ``score(y) * N``, the log-likelihood at the estimate
    (conditional on it, as ``em``'s); the responsibilities are in the extras, as ``em``'s.
    """
    check_mixture_data(y, K)
    x = y.double().numpy()[:, None]
    values, log_evidence, extras = sklearn_peer.gaussian_mixture(
        x, K, n_init=n_init, max_iter=max_iter, tol=tol, reg_covar=reg_covar
    )
    return zoo.Estimate(values, log_evidence=log_evidence, extras=extras)


def kmeans_start(y: torch.Tensor, K: int, init: Sequence[float] | None) -> np.ndarray:
    """K-means' starting centres: ``init``, else the data's quantiles (EM's start)."""
    check_mixture_data(y, K)
    x = y.double().numpy()
    if init is None:
        return np.quantile(x, (np.arange(K) + 0.5) / K)
    if np.shape(init) != (K,) or not np.all(np.isfinite(np.asarray(init, dtype=float))):
        raise zoo.ZooError(f"init must give {K} finite centres (K={K}), got {init!r}")
    return np.asarray(init, dtype=float)


def clusters_estimate(centres: np.ndarray, labels: np.ndarray, extras: dict) -> zoo.Estimate:
    """A clustering as an Estimate: the centres as ``locs`` and the hard assignments as ``z``,
    both relabelled by increasing centre (the model's ordering convention)."""
    order = np.argsort(centres)
    rank = np.argsort(order)
    return zoo.Estimate({"locs": centres[order], "z": rank[labels]}, extras=extras)


@gaussian_mixture.reference("kmeans")
def _(
    y: torch.Tensor,
    K: int,
    *,
    init: Sequence[float] | None = None,
    max_iter: int = 300,
    tol: float = 1e-12,
) -> zoo.Estimate:
    """K-means (Lloyd's algorithm) as hard EM: centres as ``locs``, assignments as ``z``.

    EM's zero-spread limit with equal weights (seed 003 L169–171; 000 §2.1: K-means is a
    special case of the Gaussian mixture): each point belongs wholly to its nearest centre.
    Starts at ``init`` (default: the data's quantiles, EM's start). Gives no weights nor
    spreads and no likelihood; extras: the inertia (sum of squared distances), minus it at
    every iteration as the trace, cluster sizes."""
    start = kmeans_start(y, K, init)
    out = kmeans(y.double().numpy(), start, max_iter, tol)
    labels = out.responsibilities.argmax(1)
    return clusters_estimate(
        out.theta,
        labels,
        {
            "inertia": -out.log_likelihood,
            "inertia_trace": [-v for v in out.trace],
            "sizes": np.bincount(labels, minlength=K)[np.argsort(out.theta)],
            "n_iter": len(out.trace) - 1,
        },
    )


@gaussian_mixture.reference("sklearn_kmeans")
def _(
    y: torch.Tensor,
    K: int,
    *,
    init: Sequence[float] | None = None,
    max_iter: int = 300,
    tol: float = 0.0,
) -> zoo.Estimate:
    """scikit-learn's KMeans (Lloyd), the kmeans engine's peer, from the same start.

    One start at ``init`` (default: the data's quantiles, as ``kmeans``); ``tol`` bounds the
    centres' last move relative to the data's variance (0: until the assignments stop
    changing). Centres as ``locs`` and assignments as ``z``, by increasing centre; extras: the
    inertia and the iterations taken."""
    start = kmeans_start(y, K, init)
    x = y.double().numpy()[:, None]
    centres, labels, inertia, n_iter = sklearn_peer.kmeans(
        x, start[:, None], max_iter=max_iter, tol=tol
    )
    return clusters_estimate(centres.ravel(), labels, {"inertia": inertia, "n_iter": n_iter})


@gaussian_mixture.reference("gibbs")
def _(
    y: torch.Tensor,
    K: int,
    *,
    num_samples: int = 1000,
    warmup: int = 500,
    num_chains: int = 4,
    spread_step: str = "slice",
    progress: bool = False,
) -> zoo.Draws:
    """Gibbs sampler on the model's own posterior (ordered means, LogNormal spreads drawn by
    ``spread_step``: "slice", one slice-sampling step, or "ars", an exact draw by adaptive
    rejection sampling); chains start from random data points."""
    if spread_step not in ("slice", "ars"):
        raise zoo.ZooError(f"option 'spread_step' must be 'slice' or 'ars', got {spread_step!r}")
    prior = (*LOC_PRIOR, *SCALE_PRIOR)
    out = gaussian_mixture_gibbs(
        y.double().numpy(), K, prior, num_samples, warmup, num_chains, progress, spread_step
    )
    return zoo.Draws(out, chains=True)


@gaussian_mixture.reference("ip")
def _(
    y: torch.Tensor,
    K: int,
    *,
    num_samples: int = 1000,
    warmup: int = 200,
    imputations: int = 4,
    progress: bool = False,
) -> zoo.Draws:
    """IP algorithm (data augmentation, seed 003 L185–187) on the model's own posterior:
    assignments imputed given the parameters, then weights, ordered means and spreads drawn
    exactly given a random imputation's assignments; imputations start at random data points
    and are reported as chains."""
    check_mixture_data(y, K)
    x = y.double().numpy()
    prior = (*LOC_PRIOR, *SCALE_PRIOR)
    locs = np.sort(np.stack([np.random.choice(x, K, replace=False) for _ in range(imputations)]))
    theta = np.concatenate(
        [np.full((imputations, K), 1.0 / K), locs, np.full((imputations, K), x.std())], 1
    )
    thetas, z = imputation_posterior(
        theta,
        lambda th: gaussian_mixture_impute(x, th),
        lambda zs, th: gaussian_mixture_posterior(x, zs, th, prior),
        num_samples, warmup, progress,
    )  # fmt: skip
    names = ("weights", "locs", "scales")
    draws = {name: thetas[..., i * K : (i + 1) * K] for i, name in enumerate(names)}
    return zoo.Draws({**draws, "z": z}, chains=True)


# ------------------------------------------------------------ gaussian_mixture_known_spread


def _faithful_eruptions(seed: int = 0) -> dict:
    """Old Faithful eruption durations (minutes), 272 rows; the seed is unused (real data)."""
    return {"y": _faithful(seed)["y"]}


@zoo.register(
    data=_faithful_eruptions,
    figures={"clusters": {"data": "y", "assignment": "z"}},
    params=("weights", "locs"),
    seed_ref="000 §2.2.3 (L459–539); 002 §18.2",
    math=[
        r"w \sim \mathrm{Dirichlet}(\alpha_0, \ldots, \alpha_0)",
        r"\mu_k \sim \mathcal{N}(m_{0k},\, s_0^2), \quad k = 1, \ldots, K",
        r"z_n \mid w \sim \mathrm{Categorical}(w)",
        r"y_n \mid z_n \sim \mathcal{N}(\mu_{z_n},\, \sigma^2), \quad n = 1, \ldots, N",
    ],
    known=dict.fromkeys(
        ("hmc", "mh"),
        zoo.Known("slow", "as costly as gaussian_mixture's; its own tests check cavi against svi"),
    ),
)
def gaussian_mixture_known_spread(
    y: torch.Tensor,
    loc_means: tuple[float, ...] = (2.0, 4.5),
    loc_sd: float = 0.5,
    sigma: float = 0.35,
    concentration: float = 1.0,
) -> None:
    r"""Bayesian Gaussian mixture with a known spread: the conditionally conjugate mixture of CAVI.

    Generative story (seed 000 §2.2.3's mean-field setting with the document's factors q(mu_k)
    Gaussian and q(c_i) categorical, plus the weights' Dirichlet)::

        w         ~ Dirichlet(alpha0, ..., alpha0)          mixing weights (K = len(loc_means))
        mu_k      ~ N(m0_k, s0^2),  k = 1..K                component means
        z_n       ~ Categorical(w)                          component of observation n
        y_n | z_n ~ N(mu_{z_n}, sigma^2),  n = 1..N         sigma known

           w ---> (z_n) ---> [y_n] <--- mu_k      n = 1..N, k = 1..K

    Every full conditional is in the prior's family (Dirichlet, normal, categorical), so each
    CAVI update is closed form. ``gaussian_mixture`` learns a spread per component under a
    LogNormal prior and orders its means; this model keeps the spread known (0.35 min, about the
    components' pooled spread) and tells the components apart by their prior means (short
    eruptions near 2 min, long ones near 4.5, sd 0.5: the swapped labelling is e^-20 less
    likely a priori), which keeps the means' prior conjugate.

    Default data: the 272 Old Faithful eruption durations (minutes), as ``gaussian_mixture``.
    """
    m0 = torch.as_tensor(loc_means, dtype=y.dtype)
    weights = pyro.sample("weights", dist.Dirichlet(torch.full_like(m0, concentration)))
    locs = pyro.sample("locs", dist.Normal(m0, loc_sd).to_event(1))
    with pyro.plate("data", len(y)):
        z = pyro.sample("z", dist.Categorical(weights))
        pyro.sample("y", dist.Normal(Vindex(locs)[..., z], sigma), obs=y)


@gaussian_mixture_known_spread.set_guide
def _(y: torch.Tensor, loc_means: tuple[float, ...]) -> None:
    """CAVI's mean-field family: q(w) = Dirichlet, q(mu_k) = N(m_k, v_k), q(z_n) = Categorical
    (enumerated exactly in the guide by TraceEnum_ELBO). Starts where CAVI does."""
    K, N = len(loc_means), y.shape[0]
    conc = pyro.param("q_w_conc", torch.full((K,), 1.0 + N / K), constraint=constraints.positive)
    pyro.sample("weights", dist.Dirichlet(conc))
    m = pyro.param("q_locs_loc", lambda: torch.as_tensor(loc_means, dtype=y.dtype))
    s = pyro.param("q_locs_scale", torch.full((K,), 0.1), constraint=constraints.positive)
    pyro.sample("locs", dist.Normal(m, s).to_event(1))
    phi = pyro.param("q_z_probs", torch.full((N, K), 1.0 / K), constraint=constraints.simplex)
    with pyro.plate("data", N):
        pyro.sample("z", dist.Categorical(phi), infer={"enumerate": "parallel"})


def check_known_spread(y: torch.Tensor, loc_means: Any, loc_sd: float, sigma: float) -> int:
    """K = len(loc_means), after a clear error for what the model cannot take."""
    K = len(loc_means) if isinstance(loc_means, Sequence | torch.Tensor | np.ndarray) else 0
    check_mixture_data(y, max(K, 1))
    if K < 1:
        raise zoo.ZooError(f"loc_means must give one prior mean per component, got {loc_means!r}")
    if not (loc_sd > 0 and sigma > 0):
        raise zoo.ZooError(f"loc_sd and sigma must be positive, got {loc_sd!r} and {sigma!r}")
    return K


@gaussian_mixture_known_spread.reference("cavi")
def _(
    y: torch.Tensor,
    loc_means: tuple[float, ...],
    loc_sd: float,
    sigma: float,
    concentration: float,
    *,
    max_iter: int = 1000,
    tol: float = 1e-12,
    progress: bool = False,
) -> zoo.Factors:
    """Mean-field CAVI (seed 000 §2.2.3): Dirichlet, normal and categorical factors, ELBO in
    closed form (never decreasing, traced after every sweep); q(mu_k) starts at the prior."""
    K = check_known_spread(y, loc_means, loc_sd, sigma)
    m0 = np.asarray(loc_means, dtype=float)
    alpha, m, v, phi, trace = gaussian_mixture_cavi(
        y.double().numpy(), m0, loc_sd, sigma, concentration, m0.copy(), max_iter, tol, progress
    )
    f64: dict[str, Any] = dict(dtype=torch.float64)
    return zoo.Factors(
        {
            "weights": dist.Dirichlet(torch.tensor(alpha, **f64)),
            "locs": dist.Normal(torch.tensor(m, **f64), torch.tensor(np.sqrt(v), **f64)).to_event(
                1
            ),
            "z": IndexCategorical(torch.tensor(phi, **f64)),
        },
        traces={"elbo": trace},
        log_evidence=trace[-1],
        evidence_kind="lower_bound",
        extras={"q_w": alpha, "q_locs": (m, v), "q_z": phi, "K": K},
    )


@gaussian_mixture_known_spread.reference("em")
def _(
    y: torch.Tensor,
    loc_means: tuple[float, ...],
    loc_sd: float,
    sigma: float,
    *,
    max_iter: int = 500,
    tol: float = 1e-12,
) -> zoo.Estimate:
    """EM for the maximum-likelihood weights and means at the known spread; starts at the prior
    means with equal weights."""
    K = check_known_spread(y, loc_means, loc_sd, sigma)
    start = (np.full(K, 1.0 / K), np.asarray(loc_means, dtype=float), np.full(K, float(sigma)))
    out = gaussian_mixture_em(y.double().numpy(), *start, max_iter, tol, fixed_scales=True)
    return zoo.Estimate(
        {"weights": out.theta[:K], "locs": out.theta[K : 2 * K]},
        traces={"log_likelihood": out.trace},
        log_evidence=out.log_likelihood,
        extras={"responsibilities": out.responsibilities},
    )
