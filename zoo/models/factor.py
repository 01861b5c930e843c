"""Continuous latent factors: probabilistic PCA and the mixture of PPCA (seed 000 §3.3.1)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pyro
import pyro.distributions as dist
import torch
from pyro.distributions import constraints
from pyro.ops.indexing import Vindex

import zoo
from zoo_datasets import load_digits
from zoo_inference.algorithms.ppca import (
    canonical_loadings,
    mppca_em_steps,
    ppca_em_steps,
    ppca_log_likelihood,
    ppca_ml,
)
from zoo_inference.distributions import SortedPointsNormal, first_column_increasing
from zoo_inference.peers import sklearn as sklearn_peer

# ------------------------------------------------------------------------------- shared


def ppca_mean(W: torch.Tensor, z: torch.Tensor, mu: torch.Tensor) -> torch.Tensor:
    """x_i's mean W z_i + mu. ``W`` (..., D, d) and ``z`` (..., N, d): the leading batch dims
    (draws, enumeration) line up with z's plate dim, as Pyro's plates broadcast them."""
    return torch.einsum("...jk,...k->...j", W, z) + mu


def check_rank(X: torch.Tensor, d: int) -> None:
    if X.ndim != 2:
        raise zoo.ZooError(f"X must be a matrix (N, D), got shape {tuple(X.shape)}")
    if not (isinstance(d, int) and 1 <= d < X.shape[1]):
        raise zoo.ZooError(f"d must be an integer with 1 <= d < D = {X.shape[1]}, got {d!r}")


# ---------------------------------------------------------------------- probabilistic_pca


def _low_rank(seed: int = 0) -> dict[str, Any]:
    """100 points in R^6 near a 2-D subspace: the default data (see the synthetic generator)."""
    return ppca_synthetic(seed)[0]


def ppca_synthetic(seed: int, n: int = 100, D: int = 6, d: int = 2) -> tuple[dict, dict]:
    """x_i = W z_i + mu + sigma eps_i with known W (entries N(0, 1.5^2)), mu ~ N(0, 1), sigma =
    0.5, z_i, eps_i ~ N(0, I); numpy's generator seeded by ``seed`` (same seed, same data)."""
    rng = np.random.default_rng(seed)
    W = 1.5 * rng.standard_normal((D, d))
    mu = rng.standard_normal(D)
    z = rng.standard_normal((n, d))
    X = z @ W.T + mu + 0.5 * rng.standard_normal((n, D))
    f32: dict[str, Any] = dict(dtype=torch.float32)
    truth = {
        "W": torch.tensor(W, **f32),
        "mu": torch.tensor(mu, **f32),
        "sigma": torch.tensor(0.5),
        "z": torch.tensor(z, **f32),
    }
    return {"X": torch.tensor(X, **f32), "d": d}, truth


def ppca_digits(n: int | None = None) -> dict[str, Any]:
    """scikit-learn's digits (1797 x 64 grey levels 0..16) as data for the model, the first
    ``n`` images (all by default), d = 2."""
    X, _ = load_digits()
    X = X if n is None else X[:n]
    return {"X": torch.tensor(X, dtype=torch.float32), "d": 2}


@zoo.register(
    data=_low_rank,
    engines=("svi", "nuts"),
    params=("mu", "sigma"),
    engine_options={"svi": {"num_steps": 1000, "lr": 0.05}},
    seed_ref="000 §3.3.1 (L766–790)",
    math=[
        r"W_{jk} \sim \mathcal{N}(0,\, 10^2), \quad \mu_j \sim \mathcal{N}(0,\, 10^2),"
        r" \quad \sigma \sim \mathrm{LogNormal}(0,\, 2)",
        r"z_i \sim \mathcal{N}(0,\, I_d),"
        r" \quad x_i \mid z_i \sim \mathcal{N}(W z_i + \mu,\, \sigma^2 I_D)",
        r"\Rightarrow\ x_i \sim \mathcal{N}(\mu,\, W W^{\mathrm{T}} + \sigma^2 I)",
    ],
    known={
        "nuts": zoo.Known("slow", "216 dimensions along the loadings' rotation ridge"),
    },
)
def probabilistic_pca(X: torch.Tensor, d: int = 2) -> None:
    r"""Probabilistic PCA: each D-dim observation is a linear image of a d-dim Gaussian factor
    plus isotropic noise (Tipping & Bishop 1999).

    Generative story (seed 000 §3.3.1, L780–784)::

        W_jk  ~ N(0, 10^2)          loadings, j = 1..D, k = 1..d
        mu_j  ~ N(0, 10^2)          mean
        sigma ~ LogNormal(0, 2)     noise sd (isotropic: the seed's "sigma in R^D" is a typo)
        z_i   ~ N(0, I_d)                                   i = 1..N
        x_i | z_i ~ N(W z_i + mu, sigma^2 I_D)
        =>  x_i ~ N(mu, C),  C = W W^T + sigma^2 I          (z_i integrated out)

             W, mu, sigma
                  |
           (z_i) ---> [x_i]      i = 1..N

    The seed estimates (W, mu, sigma) by maximum likelihood with EM; the priors are weak enough
    (sd 10 against data of order one; a noise sd anywhere in (0.02, 50)) that the posterior mode
    sits on the ML solution, which has a closed form (engine ``ml``): mu = mean of x, sigma^2 =
    the mean of the D - d smallest eigenvalues of the sample covariance, W = U_d (L_d -
    sigma^2 I)^(1/2) R for any rotation R. W is identified only up to that rotation (and so are
    the z_i): tables compare mu and sigma; the ``em`` and ``ml`` engines report W on its
    principal axes (:func:`canonical_loadings`); compare W W^T or the subspace across engines.
    """
    check_rank(X, d)
    N, D = X.shape
    W = pyro.sample("W", dist.Normal(0.0, 10.0).expand([D, d]).to_event(2))
    mu = pyro.sample("mu", dist.Normal(0.0, 10.0).expand([D]).to_event(1))
    sigma = pyro.sample("sigma", dist.LogNormal(0.0, 2.0))
    with pyro.plate("data", N):
        z = pyro.sample("z", dist.Normal(0.0, 1.0).expand([d]).to_event(1))
        # sigma's batch dims (draws) line up with the plate's, its last dim with x_i's D entries
        pyro.sample("X", dist.Normal(ppca_mean(W, z, mu), sigma.unsqueeze(-1)).to_event(1), obs=X)


@probabilistic_pca.set_guide
def ppca_guide(X: torch.Tensor, d: int) -> None:
    """Variational EM, the guide of the seed's derivation: point masses on (W, mu, sigma) (the
    M-step's parameters) and each z_i's exact conditional posterior given them (the E-step):

        z_i | x_i ~ N(M^-1 W^T (x_i - mu), sigma^2 M^-1),  M = W^T W + sigma^2 I_d.

    With the E-step exact the ELBO is log p(X | theta) + log p(theta): SVI climbs to the MAP,
    which the weak priors put on the ML solution."""
    N, D = X.shape
    W = pyro.param("q_W", lambda: 0.1 * torch.randn(D, d))
    mu = pyro.param("q_mu", lambda: torch.zeros(D))
    sigma = pyro.param("q_sigma", lambda: X.std(), constraint=constraints.positive)
    pyro.sample("W", dist.Delta(W, event_dim=2))
    pyro.sample("mu", dist.Delta(mu, event_dim=1))
    pyro.sample("sigma", dist.Delta(sigma))
    M = W.T @ W + sigma**2 * torch.eye(d)
    M_inv = torch.linalg.inv(M)
    with pyro.plate("data", N):
        mean = (X - mu) @ W @ M_inv.T
        pyro.sample("z", dist.MultivariateNormal(mean, sigma**2 * M_inv))


@probabilistic_pca.reference("ml")
def ppca_ml_engine(X: torch.Tensor, d: int) -> zoo.Estimate:
    """Closed-form maximum likelihood (Tipping & Bishop 1999): eigen-decomposition of S."""
    check_rank(X, d)
    x = X.double().numpy()
    W, mu, sigma2 = ppca_ml(x, d)
    return zoo.Estimate(
        {"W": W, "mu": mu, "sigma": np.sqrt(sigma2)},
        log_evidence=ppca_log_likelihood(x, W, mu, sigma2),
        extras={"sigma2": sigma2},
    )


@probabilistic_pca.reference("em")
def ppca_em_engine(
    X: torch.Tensor,
    d: int,
    *,
    max_iter: int = 2000,
    tol: float = 1e-12,
    progress: bool = False,
) -> zoo.Estimate:
    """EM for (W, mu, sigma^2) from random loadings (seed 000 §3.3.1; Tipping & Bishop 1999)."""
    check_rank(X, d)
    x = X.double().numpy()
    W0 = np.random.standard_normal((x.shape[1], d)) * x.std()
    W, mu, sigma2, trace = ppca_em_steps(x, W0, float(x.var()), max_iter, tol, progress)
    W = canonical_loadings(W)
    return zoo.Estimate(
        {"W": W, "mu": mu, "sigma": np.sqrt(sigma2)},
        traces={"log_likelihood": trace},
        log_evidence=trace[-1],
        extras={"sigma2": sigma2},
    )


@probabilistic_pca.reference("sklearn")
def ppca_sklearn_engine(
    X: torch.Tensor, d: int, *, fa_max_iter: int = 10000, fa_tol: float = 1e-6
) -> zoo.Estimate:
    """scikit-learn's PCA (PPCA maximum likelihood), the peer; FactorAnalysis in the extras.

    PCA(n_components=d) (exact SVD) is Tipping & Bishop's solution: mu = mean_, W = components_^T
    (L_d - sigma^2 I)^(1/2) on principal axes (:func:`canonical_loadings`), sigma^2 =
    noise_variance_. scikit-learn's variances divide by N - 1; the ML divides by N, so they are
    rescaled by (N - 1) / N, and log_evidence = score(X) N at the rescaled fit (the ML
    log-likelihood; extras["score_unbiased"]: score(X) N at scikit-learn's own N - 1 fit).
    extras["factor_analysis"]: FactorAnalysis(d) by scikit-learn (lapack SVD, ``fa_tol`` on the
    log-likelihood's change), a different model: a noise variance per coordinate (Psi diagonal,
    not sigma^2 I), which nests PPCA, so its maximum log-likelihood is at least PPCA's. Its fit
    converges slowly where a noise variance heads for zero (a Heywood case: 5000 iterations, a
    second, on some synthetic draws).
    """
    check_rank(X, d)
    n = X.shape[0]
    if n <= d:
        raise zoo.ZooError(f"PCA of rank d = {d} needs more than d points, got N = {n}")
    x = X.double().numpy()
    values, log_evidence, extras = sklearn_peer.ppca(x, d, fa_max_iter=fa_max_iter, fa_tol=fa_tol)
    return zoo.Estimate(values, log_evidence=log_evidence, extras=extras)


@probabilistic_pca.synthetic
def _(seed: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """100 points in R^6 from known W (2 factors), mu and sigma = 0.5 (see ppca_synthetic)."""
    return ppca_synthetic(seed)


probabilistic_pca_digits = zoo.register(
    "probabilistic_pca_digits",
    model=probabilistic_pca.model,
    data=lambda seed: ppca_digits(),
    guide=ppca_guide,
    references={"ml": ppca_ml_engine, "em": ppca_em_engine, "sklearn": ppca_sklearn_engine},
    # svi and nuts run on the synthetic page: here, 1797 x 2 local factors make SVI's 1000
    # steps and its draws' importance weights cost minutes against the closed form's 0.7 s
    engines=(),
    params=("mu", "sigma"),
    seed_ref="000 §3.3.1 (L766–790)",
    math=probabilistic_pca.math,
    doc="""The probabilistic_pca model on scikit-learn's digits: 1797 images of 8 x 8 grey levels
    (0..16) as points of R^64, d = 2 factors (the same model, guide and engines; only the data
    differ). The closed-form ML (engine ``ml``), EM and scikit-learn's PCA reach one maximum of
    the likelihood (-318859.63); the page compares their log-likelihoods and the noise sd sigma
    (the 62 discarded directions' mean variance). From Python, ``zoo.run("probabilistic_pca",
    "svi", data=ppca_digits())`` fits SVI with the variational-EM guide on the same data.""",
)

# --------------------------------------------------------------------------- mixture_ppca


def check_mixture(X: torch.Tensor, C: int, d: int) -> None:
    """A clear error for data or sizes the mixture of PPCA cannot take."""
    check_rank(X, d)
    if isinstance(C, bool) or not (isinstance(C, int) and C >= 1):
        raise zoo.ZooError(f"C (the number of components) must be an integer >= 1, got {C!r}")
    if X.shape[0] < C * (d + 2):
        raise zoo.ZooError(
            f"C = {C} components of rank d = {d} need at least C (d + 2) = {C * (d + 2)} "
            f"points, got N = {X.shape[0]}"
        )


def mppca_synthetic(
    seed: int, n: int = 200, D: int = 6, d: int = 2, C: int = 2
) -> tuple[dict[str, Any], dict[str, Any]]:
    """n points near C planes (d-dim) in R^D with known truth; numpy's generator seeded by
    ``seed``. Weights proportional to (1.5 .. 1) (0.6, 0.4 for C = 2); means N(0, I) with
    first coordinates 8 apart (-4, 4), so the components keep the model's order; W_c = U_c
    diag(2 .. 1), U_c a random orthonormal D x d frame; noise sd (0.3 .. 0.5)."""
    rng = np.random.default_rng(seed)
    pi = np.linspace(1.5, 1.0, C)
    pi /= pi.sum()
    mu = rng.standard_normal((C, D))
    mu[:, 0] = 8.0 * (np.arange(C) - (C - 1) / 2)
    frames = [np.linalg.qr(rng.standard_normal((D, d)))[0] for _ in range(C)]
    W = np.stack([U * np.linspace(2.0, 1.0, d) for U in frames])
    sigma = np.linspace(0.3, 0.5, C)
    t = rng.choice(C, size=n, p=pi)
    z = rng.standard_normal((n, d))
    X = np.einsum("njk,nk->nj", W[t], z) + mu[t] + sigma[t, None] * rng.standard_normal((n, D))
    f32: dict[str, Any] = dict(dtype=torch.float32)
    truth = {
        "pi": torch.tensor(pi, **f32),
        "mu": torch.tensor(mu, **f32),
        "W": torch.tensor(W, **f32),
        "sigma": torch.tensor(sigma, **f32),
        "t": torch.tensor(t),
        "z": torch.tensor(z, **f32),
    }
    return {"X": torch.tensor(X, **f32), "C": C, "d": d}, truth


def _two_planes(seed: int = 0) -> dict[str, Any]:
    """200 points in R^6 near two planes: the default data (see the synthetic generator)."""
    return mppca_synthetic(seed)[0]


@zoo.register(
    data=_two_planes,
    figures={"clusters": {"data": "X", "assignment": "t"}},  # on the first two PCs
    engines=("svi",),
    params=("pi", "mu", "sigma"),
    engine_options={"svi": {"num_steps": 500, "lr": 0.05}},
    seed_ref="000 §3.3.1 (L790–817)",
    math=[
        r"\pi \sim \mathrm{Dirichlet}(1, \ldots, 1),"
        r" \quad \mu_c \sim \mathcal{N}(0,\, 10^2 I_D),"
        r" \quad W_{c,jk} \sim \mathcal{N}(0,\, 10^2),"
        r" \quad \sigma_c \sim \mathrm{LogNormal}(0,\, 2)",
        r"t_n \sim \mathrm{Categorical}(\pi), \quad z_n \sim \mathcal{N}(0,\, I_d)",
        r"x_n \mid t_n = c, z_n \sim \mathcal{N}(W_c z_n + \mu_c,\, \sigma_c^2 I_D)",
    ],
)
def mixture_ppca(X: torch.Tensor, C: int = 2, d: int = 2) -> None:
    r"""Mixture of probabilistic PCA: each observation comes from one of C PPCA models, each with
    its own mean, d-dim loadings and noise level (Tipping & Bishop 1999).

    Generative story (seed 000 §3.3.1, L791–795)::

        pi            ~ Dirichlet(1, ..., 1)           mixing weights
        mu_c          ~ N(0, 10^2 I_D), c = 1..C,      means, with mu_11 < ... < mu_C1 (below)
        W_c,jk        ~ N(0, 10^2)                     loadings, D x d each
        sigma_c       ~ LogNormal(0, 2)                noise sd of component c
        t_n           ~ Categorical(pi)                component of x_n      n = 1..N
        z_n           ~ N(0, I_d)                      its factor coordinates
        x_n | t_n = c, z_n ~ N(W_c z_n + mu_c, sigma_c^2 I_D)
        =>  x_n | t_n = c ~ N(mu_c, W_c W_c^T + sigma_c^2 I)    (z_n integrated out)

           pi ---> (t_n) ---> [x_n] <--- (z_n)          n = 1..N
                                ^
                    mu_c, W_c, sigma_c                  c = 1..C

    z_n is integrated out analytically (``LowRankMultivariateNormal``: the covariance is never
    formed) and t_n is enumerated (summed out exactly: by ``TraceEnum_ELBO`` in svi, by the
    E-step in em; drawn afterwards from its exact conditional), so no local latent is sampled.
    The seed writes one sigma^2 I shared by the components while listing a sigma_k per component
    "in R^D" (isotropic: a typo, as in PPCA); here each component has its own sigma_c, as in
    Tipping & Bishop. The seed's E-step denominator "sum_i ∫ ..." (L802) should read sum over
    t_i of ∫ ... dz_i.

    Label switching: the means' prior is ordered by their first coordinate (mu_11 < mu_21 < ...,
    :class:`SortedPointsNormal`), which removes the C! relabelled copies of every mode; the EM
    engine lists its components in the same order. So pi_c, mu_c and sigma_c compare across
    engines as long as the components' first coordinates are apart (on other data, put the
    coordinate that separates them first). Each W_c is identified only up to a rotation W_c R:
    tables compare pi, mu and sigma; ``em`` reports each W_c on its principal axes
    (:func:`canonical_loadings`). The priors are weak, as in :func:`probabilistic_pca`, so the
    posterior mode sits near the maximum-likelihood fit that EM finds.

    Engines: ``em`` and ``svi`` with the guide below (the seed's pair). NUTS is not registered:
    started from a prior draw its chain settles where two components share one cluster (the
    ordering keeps their means from passing each other), and each loadings' rotation is a flat
    circle its trajectories run around, at the deepest trees.
    """
    check_mixture(X, C, d)
    N, D = X.shape
    pi = pyro.sample("pi", dist.Dirichlet(torch.ones(C)))
    mu = pyro.sample("mu", SortedPointsNormal(0.0, 10.0, C, D))
    W = pyro.sample("W", dist.Normal(0.0, 10.0).expand([C, D, d]).to_event(3))
    sigma = pyro.sample("sigma", dist.LogNormal(0.0, 2.0).expand([C]).to_event(1))
    with pyro.plate("data", N):
        t = pyro.sample("t", dist.Categorical(pi), infer={"enumerate": "parallel"})
        # Vindex picks component t_n's parameters under any batch (enumeration, draws) dims
        s2 = Vindex(sigma)[..., t] ** 2
        noise = s2.unsqueeze(-1).expand(*s2.shape, D)  # sigma_t^2 I as LowRank's diagonal
        x_dist = dist.LowRankMultivariateNormal(
            Vindex(mu)[..., t, :], Vindex(W)[..., t, :, :], noise
        )
        pyro.sample("X", x_dist, obs=X)


def mppca_start(X: np.ndarray, C: int, d: int) -> dict[str, np.ndarray]:
    """Where EM and the guide start: the points ranked by their projection on the data's first
    principal axis and cut into C equal groups, each group fitted by the PPCA closed form
    (:func:`ppca_ml`) for (W_c, mu_c, sigma_c^2), pi = 1/C; components in the model's order."""
    R = X - X.mean(0)
    axis = np.linalg.svd(R, full_matrices=False)[2][0]
    fits = [ppca_ml(X[g], d) for g in np.array_split(np.argsort(R @ axis), C)]
    order = np.argsort([mu[0] for _, mu, _ in fits])
    floor = 1e-6 * float(X.var())
    return {
        "pi": np.full(C, 1.0 / C),
        "mu": np.stack([fits[c][1] for c in order]),
        "W": np.stack([fits[c][0] for c in order]),
        "sigma2": np.array([max(fits[c][2], floor) for c in order]),
    }


@mixture_ppca.set_guide
def _(X: torch.Tensor, C: int, d: int) -> None:
    """Variational EM, the guide of the seed's derivation (L802–809): point masses on the
    parameters (the M-step's theta), with t_n enumerated exactly in the model and z_n integrated
    out (the E-step, exact), so the ELBO is log p(X | theta) + log p(theta) and SVI climbs to the
    MAP. Starts where EM does (:func:`mppca_start`)."""
    start: dict[str, np.ndarray] = {}

    def init(name: str) -> torch.Tensor:
        if not start:  # only when a parameter is first created
            start.update(mppca_start(X.detach().double().numpy(), C, d))
        value = np.sqrt(start["sigma2"]) if name == "sigma" else start[name]
        return torch.tensor(value, dtype=X.dtype)

    pi = pyro.param("q_pi", lambda: init("pi"), constraint=constraints.simplex)
    mu = pyro.param("q_mu", lambda: init("mu"), constraint=first_column_increasing)
    W = pyro.param("q_W", lambda: init("W"))
    sigma = pyro.param("q_sigma", lambda: init("sigma"), constraint=constraints.positive)
    pyro.sample("pi", dist.Delta(pi, event_dim=1))
    pyro.sample("mu", dist.Delta(mu, event_dim=2))
    pyro.sample("W", dist.Delta(W, event_dim=3))
    pyro.sample("sigma", dist.Delta(sigma, event_dim=1))


@mixture_ppca.reference("em")
def _(
    X: torch.Tensor,
    C: int,
    d: int,
    *,
    max_iter: int = 1000,
    tol: float = 1e-10,
    progress: bool = False,
) -> zoo.Estimate:
    """EM for the maximum-likelihood mixture (Tipping & Bishop 1999), from :func:`mppca_start`;
    components listed by increasing first coordinate of their means (the model's order)."""
    check_mixture(X, C, d)
    x = X.double().numpy()
    s = mppca_start(x, C, d)
    pi, mu, W, sigma2, trace, R = mppca_em_steps(
        x, s["pi"], s["mu"], s["W"], s["sigma2"], max_iter, tol, progress
    )
    o = np.argsort(mu[:, 0])
    return zoo.Estimate(
        {
            "pi": pi[o],
            "mu": mu[o],
            "W": np.stack([canonical_loadings(W[c]) for c in o]),
            "sigma": np.sqrt(sigma2[o]),
        },
        traces={"log_likelihood": trace},
        log_evidence=trace[-1],
        extras={"responsibilities": R[:, o], "sigma2": sigma2[o]},
    )


@mixture_ppca.synthetic
def _(seed: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """200 points in R^6 near two planes with known weights, means, loadings and noise (see
    mppca_synthetic)."""
    return mppca_synthetic(seed)
