"""Regression and classification: linear-Gaussian models (conjugate, ridge, recursive least
squares), linear regression with unknown noise, robust (Student-t) regression and logistic
regression.

The Gaussian posterior of linear weights under an isotropic prior (seed 002 §8.3), the closed
form of both ``bayesian_linear_regression`` and ``ridge_map``, recursive least squares (seed 002
ch. 6) and ridge regression live in :mod:`zoo_inference.algorithms.linear`. The Laplace
approximation, which applies to any model with continuous latent sites, is the generic engine
``laplace`` (inference/laplace.py).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pyro
import pyro.distributions as dist
import torch
from pyro.distributions import constraints

import zoo
from zoo_datasets import load_breast_cancer, load_diabetes, standardise
from zoo_inference.algorithms.linear import (
    gaussian_log_evidence,
    gaussian_posterior,
    ridge_dual,
    ridge_primal,
    rls,
)

# ------------------------------------------------------------------------------ shared helpers

LINE: dict[str, Any] = {"slope": 3.4, "intercept": 0.9, "noise_sd": 0.3, "n": 50}
"""The document's synthetic line (seed 002 §5.1, L1053-1057): y = 3.4 x + 0.9 + 0.3 eps."""


def _tensor(a: np.ndarray) -> torch.Tensor:
    return torch.tensor(np.asarray(a), dtype=torch.float32)


def line_data(seed: int, n: int = LINE["n"]) -> tuple[np.ndarray, np.ndarray]:
    """``(x, y)``: x ~ N(0, 1), y = 3.4 x + 0.9 + 0.3 eps (seed 002 §5.1), numpy generator
    ``default_rng(seed)``."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(n)
    y = LINE["slope"] * x + LINE["intercept"] + LINE["noise_sd"] * rng.standard_normal(n)
    return x, y


def linear_predictor(X: torch.Tensor, beta: torch.Tensor) -> torch.Tensor:
    """x_n^T beta for every row n of the design X (N, d): ``X @ beta`` for one beta (d,).

    Written as a broadcasting dot product over the last dim so that a batch of betas shaped
    (..., 1, d), as the engines' vectorised replay of many draws at once lays them out (the 1 is
    the data plate's slot), gives (..., N); ``X @ beta`` would make those engines replay the
    model one draw at a time."""
    return torch.einsum("...d,...d->...", X, beta)


def _mvn_guide(site: str, dim: int, init_scale: float) -> None:
    """q(w) = N(m, L L^T) with L lower-triangular: a full-rank Gaussian, which contains the exact
    posterior of a linear-Gaussian model (so SVI's optimum is exact and the ELBO is tight)."""
    loc = pyro.param(f"q_{site}_loc", torch.zeros(dim))
    tril = pyro.param(
        f"q_{site}_scale_tril",
        init_scale * torch.eye(dim),
        constraint=constraints.lower_cholesky,
    )
    pyro.sample(site, dist.MultivariateNormal(loc, scale_tril=tril))


# ------------------------------------------------------------------ bayesian_linear_regression


def _line_design(seed: int) -> dict[str, Any]:
    x, y = line_data(seed)
    # the document's design (L1058): columns (x, 1), so w = (slope, intercept)
    design = np.column_stack((x, np.ones_like(x)))
    return {"X": _tensor(design), "y": _tensor(y), "sigma": LINE["noise_sd"], "tau": 5.0}


def diabetes_data() -> dict[str, Any]:
    """scikit-learn's diabetes data for ``bayesian_linear_regression``: 442 patients, the 10
    features standardised (unit sd) plus a column of ones (the intercept, last), the target
    standardised. The noise sd is taken as known: sigma = 0.7, the least-squares residual sd
    (0.694; 0.703 with the N - 11 correction), a plug-in (empirical-Bayes) value."""
    X, y, _ = load_diabetes()
    design = np.column_stack((standardise(X), np.ones(len(y))))
    return {"X": _tensor(design), "y": _tensor(standardise(y)), "sigma": 0.7, "tau": 5.0}


@zoo.register(
    data=_line_design(0),
    engine_options={"svi": {"lr": 0.05}, "importance": {"lr": 0.05}},
    seed_ref="002 §8.3, §5.1, ch. 6",
    math=[
        r"\beta \sim \mathcal{N}(0,\, \tau^2 I)",
        r"y_n \mid \beta \sim \mathcal{N}(x_n^{\mathrm{T}} \beta,\, \sigma^2),"
        r" \quad n = 1, \ldots, N \quad (\sigma\ \mathrm{known})",
    ],
)
def bayesian_linear_regression(
    X: torch.Tensor, y: torch.Tensor, sigma: float = 0.3, tau: float = 5.0
) -> None:
    r"""Bayesian linear regression with known noise: Gaussian prior, Gaussian posterior.

    Generative story (seed 002 §8.3; data of §5.1, L1053-1058)::

        beta ~ N(0, tau^2 I)                    weights, intercept included (a column of ones)
        y_n  ~ N(x_n^T beta, sigma^2),  n = 1..N    sigma known

           tau                    sigma
            |                       |
          (beta) ----> [y_n] <------+        n = 1..N
                         ^
                        x_n

    Posterior N(mu_n, Sigma_n), Sigma_n = (I / tau^2 + X^T X / sigma^2)^-1,
    mu_n = Sigma_n X^T y / sigma^2 (L1814-1818); evidence N(y | 0, sigma^2 I + tau^2 X X^T);
    predictive N(x* mu_n, x* Sigma_n x*^T + sigma^2) (L1830, ``posterior_predictive``).
    Recursive least squares from theta_0 = 0, P_0 = tau^2 I, R = sigma^2 (ch. 6) reaches the
    same posterior one observation at a time (engine ``rls``).

    Default data: the document's line, N = 50, x ~ N(0, 1), y = 3.4 x + 0.9 + 0.3 eps, drawn
    with numpy's ``default_rng(0)``; X has columns (x, 1) as in the document, so beta =
    (slope, intercept). Real data: ``diabetes_data()`` (scikit-learn diabetes, 11 columns).
    """
    # tau = 5: slopes and intercepts of a few units are all plausible before seeing the data
    beta = pyro.sample("beta", dist.Normal(0.0, tau).expand([X.shape[1]]).to_event(1))
    with pyro.plate("data", len(y)):
        pyro.sample("y", dist.Normal(linear_predictor(X, beta), sigma), obs=y)


@bayesian_linear_regression.set_guide
def _(X: torch.Tensor) -> None:
    """Full-rank Gaussian q(beta) = N(m, L L^T): the posterior's own family (exact optimum)."""
    _mvn_guide("beta", X.shape[1], 0.1)


def gaussian_closed_form(
    X: torch.Tensor, y: torch.Tensor, sigma: float, tau: float
) -> tuple[dict, float]:
    """beta | y ~ N(mu_n, Sigma_n) (seed 002 §8.3) and log N(y | 0, sigma^2 I + tau^2 X X^T):
    the posterior of both Gaussian-prior regressions (``ridge_map``'s mean is the ridge MAP)."""
    mean, cov = gaussian_posterior(X, y, sigma, tau)
    post = dist.MultivariateNormal(mean, covariance_matrix=cov)
    return {"beta": post}, gaussian_log_evidence(X, y, sigma, tau)


@bayesian_linear_regression.posterior
def _(X: torch.Tensor, y: torch.Tensor, sigma: float, tau: float) -> tuple[dict, float]:
    return gaussian_closed_form(X, y, sigma, tau)


@bayesian_linear_regression.reference("rls")
def _(
    X: torch.Tensor, y: torch.Tensor, sigma: float, tau: float, *, shuffle: bool = False
) -> zoo.Estimate:
    """Recursive least squares (seed 002 ch. 6) from the prior: theta_0 = 0, P_0 = tau^2 I,
    R = sigma^2, one observation at a time (``shuffle``: in a random order; same answer)."""
    if not isinstance(shuffle, bool):
        raise zoo.ZooError(f"shuffle must be True or False, got {shuffle!r}")
    Xn, yn = X.double().numpy(), y.double().numpy()
    order = np.random.permutation(len(yn)) if shuffle else np.arange(len(yn))
    d = Xn.shape[1]
    thetas, Ps, log_pred = rls(Xn[order], yn[order], np.zeros(d), tau**2 * np.eye(d), sigma**2)
    return zoo.Estimate(
        {"beta": thetas[-1]},
        traces={
            "trace_P": np.trace(Ps, axis1=1, axis2=2).tolist(),
            "log_evidence": np.cumsum(log_pred).tolist(),
        },
        # prediction-error decomposition: sum_k log N(y_k | x_k theta_{k-1}, S_k) = log p(y)
        log_evidence=float(log_pred.sum()),
        evidence_kind="exact",
        extras={"P": Ps[-1], "theta_path": thetas, "P_path": Ps, "order": order},
    )


@bayesian_linear_regression.synthetic
def _(seed: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """The document's line (slope 3.4, intercept 0.9, noise sd 0.3, N = 50) from
    ``default_rng(seed)``."""
    return _line_design(seed), {"beta": torch.tensor([LINE["slope"], LINE["intercept"]])}


# --------------------------------------------------------------------------- linear_regression


def _diabetes_regression(seed: int = 0) -> dict[str, Any]:
    """Diabetes (scikit-learn): standardised features + intercept column, standardised target;
    the seed is unused (real data)."""
    data = diabetes_data()
    return {"X": data["X"], "y": data["y"], "tau": 5.0, "sigma_scale": 1.0}


@zoo.register(
    data=_diabetes_regression,
    # the diabetes serum measurements are collinear: NUTS's leapfrog steps an iteration fall
    # from 45 to 11 under a dense metric (quick budget)
    engine_options={
        "svi": {"lr": 0.02},
        "importance": {"lr": 0.02},
        "nuts": {"dense_mass": True},
    },
    seed_ref="002 §5.1",
    math=[
        r"\beta \sim \mathcal{N}(0,\, \tau^2 I)",
        r"\sigma \sim \mathrm{HalfNormal}(s_\sigma)",
        r"y_n \mid \beta, \sigma \sim \mathcal{N}(x_n^{\mathrm{T}} \beta,\, \sigma^2),"
        r" \quad n = 1, \ldots, N",
    ],
    known={
        "mams": zoo.Known("slow", "test_mams checks mams against closed forms and by SBC"),
        "nuts": zoo.Known("slow", "test_regression runs it against the truth"),
    },
)
def linear_regression(
    X: torch.Tensor, y: torch.Tensor, tau: float = 5.0, sigma_scale: float = 1.0
) -> None:
    r"""Linear regression with unknown noise: Gaussian weights, half-normal noise sd.

    Generative story (seed 002 §5.1, the likelihood of L1078-1079 made Bayesian)::

        beta  ~ N(0, tau^2 I)                   weights (the last column of X is the intercept)
        sigma ~ HalfNormal(sigma_scale)          noise sd
        y_n   ~ N(x_n^T beta, sigma^2),  n = 1..N

          beta ----> [y_n] <---- sigma      n = 1..N

    No closed form (sigma's half-normal prior is not conjugate); long NUTS is the reference.
    With weak priors the posterior mean of beta is the least-squares solution (X^T X)^-1 X^T y
    (L1046) and sigma is near the residual sd. Default data: scikit-learn diabetes, 442 x 10
    features standardised (unit sd) and the target standardised (sd 1), plus an intercept
    column (last).
    """
    # On standardised data a coefficient is the change in y (in sds) per sd of a feature: tau = 5
    # is flat over every plausible value (least-squares sds are 0.03-0.26 here).
    beta = pyro.sample("beta", dist.Normal(0.0, tau).expand([X.shape[1]]).to_event(1))
    # sigma_scale = 1: the noise sd cannot exceed the target's own sd (1) by much
    sigma = pyro.sample("sigma", dist.HalfNormal(sigma_scale))
    with pyro.plate("data", len(y)):
        pyro.sample("y", dist.Normal(linear_predictor(X, beta), sigma), obs=y)


@linear_regression.set_guide
def _(X: torch.Tensor) -> None:
    """q(beta) full-rank Gaussian (beta | sigma is Gaussian, with correlated coordinates),
    q(sigma) log-normal (a positive scale, near-Gaussian on the log scale for large N)."""
    _mvn_guide("beta", X.shape[1], 0.1)
    loc = pyro.param("q_sigma_loc", torch.tensor(0.0))
    scale = pyro.param("q_sigma_scale", torch.tensor(0.1), constraint=constraints.positive)
    pyro.sample("sigma", dist.LogNormal(loc, scale))


@linear_regression.synthetic
def _(seed: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """The diabetes design with a new target: beta ~ N(0, 0.3^2) per coordinate and sigma = 0.7
    (about the real data's), both from ``default_rng(seed)``."""
    rng = np.random.default_rng(seed)
    X = _diabetes_regression()["X"]
    beta = rng.normal(0.0, 0.3, X.shape[1])
    sigma = 0.7
    y = X.double().numpy() @ beta + sigma * rng.standard_normal(X.shape[0])
    data = {**_diabetes_regression(), "y": _tensor(y)}
    return data, {"beta": _tensor(beta), "sigma": torch.tensor(sigma)}


# ---------------------------------------------------------------------------------- ridge_map

RIDGE_SHAPE = (50, 10)  # n observations, d features


def _ridge_data(seed: int, sigma: float = 0.5, tau: float = 1.0) -> tuple[dict, np.ndarray]:
    rng = np.random.default_rng(seed)
    n, d = RIDGE_SHAPE
    X = rng.standard_normal((n, d))
    beta = tau * rng.standard_normal(d)
    y = X @ beta + sigma * rng.standard_normal(n)
    return {"X": _tensor(X), "y": _tensor(y), "sigma": sigma, "tau": tau}, beta


@zoo.register(
    data=_ridge_data(0)[0],
    engine_options={"svi": {"lr": 0.02}, "importance": {"lr": 0.02}},
    seed_ref="002 §5.4",
    math=[
        r"\beta \sim \mathcal{N}(0,\, \tau^2 I)",
        r"y_n \mid \beta \sim \mathcal{N}(x_n^{\mathrm{T}} \beta,\, \sigma^2),"
        r" \quad n = 1, \ldots, N \quad (\sigma\ \mathrm{known})",
        r"\hat{\beta}_{\mathrm{MAP}} = (X^{\mathrm{T}} X + \lambda I)^{-1} X^{\mathrm{T}} y,"
        r" \quad \lambda = \sigma^2 / \tau^2",
    ],
)
def ridge_map(X: torch.Tensor, y: torch.Tensor, sigma: float = 0.5, tau: float = 1.0) -> None:
    r"""Ridge regression as MAP: a Gaussian prior on the weights, known noise.

    Generative story (seed 002 §5.4, read probabilistically; §8.3 with mu_0 = 0)::

        beta ~ N(0, tau^2 I)                       d weights
        y_n  ~ N(x_n^T beta, sigma^2),  n = 1..N       sigma known

          tau ---> (beta) ---> [y_n] <--- x_n, sigma      n = 1..N

    -log p(beta | y) = ||y - X beta||^2 / (2 sigma^2) + ||beta||^2 / (2 tau^2) + const, the ridge
    objective (eq. 5.1) with lambda = sigma^2 / tau^2, so the MAP is
    (X^T X + lambda I)^-1 X^T y = X^T (X X^T + lambda I)^-1 y (primal = dual, eqs 5.6, 5.16).
    The posterior is Gaussian, so the MAP is also the posterior mean. The dual's n x n solve is
    the cheap one when d > n (the tests check both forms on such a design). Default data:
    synthetic, N = 50 observations of d = 10 standard-normal features, beta drawn from the prior
    (tau = 1), sigma = 0.5, numpy's ``default_rng(0)``; lambda = 0.25.
    """
    # tau = 1: each feature (unit sd) moves y by about one unit at most, a priori
    beta = pyro.sample("beta", dist.Normal(0.0, tau).expand([X.shape[1]]).to_event(1))
    with pyro.plate("data", len(y)):
        pyro.sample("y", dist.Normal(linear_predictor(X, beta), sigma), obs=y)


@ridge_map.set_guide
def _(X: torch.Tensor) -> None:
    """Full-rank Gaussian q(beta): the posterior's own family; its mean is the MAP (ridge)."""
    _mvn_guide("beta", X.shape[1], 0.1)


@ridge_map.posterior
def _(X: torch.Tensor, y: torch.Tensor, sigma: float, tau: float) -> tuple[dict, float]:
    """N(mu_n, Sigma_n) with mu_n the ridge solution, lambda = sigma^2 / tau^2."""
    return gaussian_closed_form(X, y, sigma, tau)


@ridge_map.reference("ridge")
def _(
    X: torch.Tensor, y: torch.Tensor, sigma: float, tau: float, *, form: str = "dual"
) -> zoo.Estimate:
    """The ridge solution with lambda = sigma^2 / tau^2 (seed 002 §5.4): the MAP, by the dual
    (default; an n x n solve) or the primal form (a d x d solve)."""
    if form not in ("dual", "primal"):
        raise zoo.ZooError(f"form must be 'dual' or 'primal', got {form!r}")
    lam = sigma**2 / tau**2
    solve = ridge_dual if form == "dual" else ridge_primal
    Xn, yn = X.double().numpy(), y.double().numpy()
    beta = solve(Xn, yn, lam)
    resid = yn - Xn @ beta
    log_lik = -0.5 * (len(yn) * math.log(2 * math.pi * sigma**2) + resid @ resid / sigma**2)
    return zoo.Estimate({"beta": beta}, log_evidence=float(log_lik), extras={"lambda": lam})


@ridge_map.synthetic
def _(seed: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """50 x 10 standard-normal design, beta ~ N(0, I), y = X beta + 0.5 eps (``default_rng``)."""
    data, beta = _ridge_data(seed)
    return data, {"beta": _tensor(beta)}


# ---------------------------------------------------------------------------- robust_regression

OUTLIER_FRACTION, OUTLIER_SHIFT = 0.1, -10.0


def _outlier_line(seed: int) -> dict[str, Any]:
    """The document's line (N = 50) with 10% gross outliers: the 5 points of largest x (the
    most leverage) moved down by 10 (33 noise sds)."""
    x, y = line_data(seed)
    bad = np.argsort(x)[-int(OUTLIER_FRACTION * x.size) :]
    y = y.copy()
    y[bad] += OUTLIER_SHIFT
    return {"x": _tensor(x), "y": _tensor(y), "nu": 4.0, "likelihood": "student"}


@zoo.register(
    data=_outlier_line(0),
    params=("intercept", "slope", "sigma"),
    engine_options={"svi": {"lr": 0.05}, "importance": {"lr": 0.05}},
    # the same priors with Gaussian noise, in the same comparison: the line the outliers pull
    variants={"nuts_gaussian": ("nuts", {}, {"likelihood": "gaussian"})},
    figures={"fit": {"x": "x", "y": "y", "mean": "line"}},
    seed_ref="002 §5.6 (motivation)",
    math=[
        r"a,\, b \sim \mathcal{N}(0,\, 10^2) \quad (\mathrm{intercept},\ \mathrm{slope})",
        r"\sigma \sim \mathrm{HalfNormal}(5)",
        r"y_n \mid a, b, \sigma \sim \mathrm{StudentT}(\nu = 4,\ a + b x_n,\ \sigma),"
        r" \quad n = 1, \ldots, N",
    ],
)
def robust_regression(
    x: torch.Tensor, y: torch.Tensor, nu: float = 4.0, likelihood: str = "student"
) -> None:
    r"""Robust linear regression: Student-t noise, so a few gross outliers cannot drag the line.

    Generative story (seed 002 §5.6 motivates it: squared error lets one outlier dominate; the
    document names no likelihood, Student-t is our choice)::

        intercept, slope ~ N(0, 10^2)
        sigma            ~ HalfNormal(5)                       noise scale
        y_n ~ StudentT(nu, intercept + slope x_n, sigma),  n = 1..N    (nu = 4, fixed)

          intercept, slope, sigma ----> [y_n] <---- x_n      n = 1..N

    ``likelihood="gaussian"`` swaps in N(intercept + slope x_n, sigma^2): the same model with the
    same priors and sites, so its runs compare one to one (a data flag, not a second entry); the
    ``nuts_gaussian`` engine is NUTS on that model, and the report's fit figure shows its line
    pulled down by the outliers beside the Student-t lines (``line``: intercept + slope x_n).
    nu is fixed at 4 (heavy tails, finite variance): a prior on nu is weakly identified from 50
    points and only slows the samplers. Default data: the document's line (slope 3.4,
    intercept 0.9, noise sd 0.3, N = 50, ``default_rng(0)``) with the 10% of points of largest
    x moved down by 10.
    """
    if likelihood not in ("student", "gaussian"):
        raise ValueError(f"likelihood must be 'student' or 'gaussian', got {likelihood!r}")
    # wide priors: y and x are O(1) to O(10); the data decide
    intercept = pyro.sample("intercept", dist.Normal(0.0, 10.0))
    slope = pyro.sample("slope", dist.Normal(0.0, 10.0))
    sigma = pyro.sample("sigma", dist.HalfNormal(5.0))
    mean = pyro.deterministic("line", intercept + slope * x)  # the fitted line at each x_n
    with pyro.plate("data", len(y)):
        if likelihood == "student":
            pyro.sample("y", dist.StudentT(nu, mean, sigma), obs=y)
        else:
            pyro.sample("y", dist.Normal(mean, sigma), obs=y)


@robust_regression.set_guide
def _() -> None:
    """Mean-field: Normal intercept and slope (x is near-centred, so they are near-independent),
    log-normal sigma."""
    for site in ("intercept", "slope"):
        loc = pyro.param(f"q_{site}_loc", torch.tensor(0.0))
        scale = pyro.param(f"q_{site}_scale", torch.tensor(0.1), constraint=constraints.positive)
        pyro.sample(site, dist.Normal(loc, scale))
    loc = pyro.param("q_sigma_loc", torch.tensor(0.0))
    scale = pyro.param("q_sigma_scale", torch.tensor(0.1), constraint=constraints.positive)
    pyro.sample("sigma", dist.LogNormal(loc, scale))


@robust_regression.synthetic
def _(seed: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """The outlier line from ``default_rng(seed)``. True values are the line's (intercept 0.9,
    slope 3.4); the data are not drawn from the Student-t model, so sigma has no true value."""
    truth = {"intercept": torch.tensor(LINE["intercept"]), "slope": torch.tensor(LINE["slope"])}
    return _outlier_line(seed), truth


# ------------------------------------------------------------------------- logistic_regression


def _breast_cancer(seed: int = 0) -> dict[str, Any]:
    """scikit-learn breast cancer, features standardised (569 x 30), y = 1 benign; the seed is
    unused (real data)."""
    X, y, _ = load_breast_cancer()
    return {"X": _tensor(standardise(X)), "y": _tensor(y), "prior_sd": 1.0, "intercept_sd": 5.0}


@zoo.register(
    data=_breast_cancer,
    # 30 collinear tumour measurements: a dense metric takes NUTS far fewer leapfrog steps
    engine_options={
        "svi": {"lr": 0.02},
        "importance": {"lr": 0.02},
        "nuts": {"dense_mass": True},
    },
    # svi fits the model's own full-rank guide; the mean-field one beside it shows the cost of
    # ignoring the correlations of the weights (laplace and nuts are the other approximations)
    variants={"svi_meanfield": ("svi", {"guide": "normal"})},
    seed_ref="002 §7.1",
    math=[
        r"\alpha \sim \mathcal{N}(0,\, s_\alpha^2), \quad s_\alpha = 5",
        r"\beta \sim \mathcal{N}(0,\, s_\beta^2 I), \quad s_\beta = 1",
        r"y_n \mid \alpha, \beta \sim "
        r"\mathrm{Bernoulli}(\mathrm{sigmoid}(\alpha + x_n^{\mathrm{T}} \beta)),"
        r" \quad n = 1, \ldots, N",
    ],
    known={
        "mams": zoo.Known("slow", "test_mams checks mams against closed forms and by SBC"),
        "nuts": zoo.Known("slow", "test_regression runs it against the truth"),
        "pathfinder": zoo.Known(
            "slow", "k-hat above 0.7 at check size: only shapes could be checked"
        ),
    },
)
def logistic_regression(
    X: torch.Tensor, y: torch.Tensor, prior_sd: float = 1.0, intercept_sd: float = 5.0
) -> None:
    r"""Bayesian logistic regression: Gaussian priors on the weights, Bernoulli labels.

    Generative story (seed 002 §7.1, L1651-1673, made Bayesian)::

        alpha ~ N(0, intercept_sd^2)                            intercept
        beta  ~ N(0, prior_sd^2 I)                              30 weights
        y_n   ~ Bernoulli(sigmoid(alpha + x_n^T beta)),  n = 1..N

          alpha, beta ----> [y_n] <---- x_n      n = 1..N

    No closed form: long NUTS is the reference; the generic ``laplace`` engine is N(MAP, H^-1)
    with H the Hessian of -log p(y, alpha, beta) (every site is real: no Jacobian). The MAP is
    L2-penalised logistic regression: scikit-learn's
    ``LogisticRegression(C=prior_sd^2, fit_intercept=False)`` on the design [X, c 1] with
    c = intercept_sd / prior_sd (its penalty ||w||^2 / 2 on that column's weight w
    is alpha^2 / (2 intercept_sd^2) with alpha = c w), i.e. exactly these priors.
    Default data: scikit-learn breast cancer, 569 tumours x 30 standardised features.
    """
    # Features have unit sd: a weight of 1 moves the log-odds by 1 per sd of a feature, so
    # N(0, 1) allows strong effects but not the unbounded ones of the near-separable MLE.
    # The intercept is the log-odds at the average tumour: N(0, 5^2) is flat over any base rate.
    alpha = pyro.sample("alpha", dist.Normal(0.0, intercept_sd))
    beta = pyro.sample("beta", dist.Normal(0.0, prior_sd).expand([X.shape[1]]).to_event(1))
    with pyro.plate("data", len(y)):
        pyro.sample("y", dist.Bernoulli(logits=alpha + linear_predictor(X, beta)), obs=y)


@logistic_regression.set_guide
def _(X: torch.Tensor) -> None:
    """Full-rank Gaussian over (alpha, beta) jointly: the weights of correlated features are
    correlated a posteriori, and so is the intercept with them (the likelihood weights
    p (1 - p) un-centre the features; a separate q(alpha) under-states alpha's sd by ~40%).
    One auxiliary MVN draw, split into the two sites."""
    d = X.shape[1] + 1
    loc = pyro.param("q_loc", torch.zeros(d))
    tril = pyro.param("q_scale_tril", 0.1 * torch.eye(d), constraint=constraints.lower_cholesky)
    theta = pyro.sample(
        "_theta", dist.MultivariateNormal(loc, scale_tril=tril), infer={"is_auxiliary": True}
    )
    pyro.sample("alpha", dist.Delta(theta[..., 0]))
    pyro.sample("beta", dist.Delta(theta[..., 1:], event_dim=1))


@logistic_regression.synthetic
def _(seed: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """The breast-cancer design with new labels: alpha = 0.5, beta ~ N(0, 0.3^2) per feature,
    y ~ Bernoulli(sigmoid(alpha + X beta)), from ``default_rng(seed)``."""
    rng = np.random.default_rng(seed)
    X = _breast_cancer()["X"]
    alpha, beta = 0.5, rng.normal(0.0, 0.3, X.shape[1])
    p = 1.0 / (1.0 + np.exp(-(alpha + X.double().numpy() @ beta)))
    y = (rng.random(p.size) < p).astype(float)
    data = {**_breast_cancer(), "y": _tensor(y)}
    return data, {"alpha": torch.tensor(alpha), "beta": _tensor(beta)}
