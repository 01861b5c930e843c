"""A corpus of "foreign" Pyro models, written the way Pyro's and NumPyro's examples write them.

None of these models was written for the zoo: each one is plain Pyro, as a user would copy it
from a tutorial (``X @ beta``, ``torch.stack`` of sampled scalars, indexing of sampled vectors,
``pyro.factor`` likelihoods, ``pyro.deterministic`` sites, Python loops with per-item sample
sites, ``pyro.markov`` HMMs with enumerated discrete states, Stan-style ``ImproperUniform``
priors, constrained supports, nested plates, mixtures, multivariate observations ...).  Each model
takes its data as keyword arguments (tensors, floats and ints) and runs under plain Pyro NUTS.

Every case carries the exact answer where one exists: posterior mean and sd per latent site and
the log evidence ``log p(data)``, computed here independently of Pyro with numpy/scipy (conjugate
closed forms, joint-Gaussian algebra, the forward-backward algorithm, or deterministic
Gauss-Legendre quadrature over one or two continuous dimensions).  Non-conjugate models without
a tractable reference have ``mean = sd = log_evidence = None``.

Data are tiny and synthetic, made deterministically from fixed numpy seeds, so the corpus builds
in well under a second.  Real data are float32 tensors (torch's default dtype); counts are float
tensors with integer values (what Pyro's Poisson/Binomial/Multinomial expect); category indices
are ``torch.long``.

Caveats a consumer should know (the models are deliberately left as users write them):

* ``ImproperUniform`` cannot be sampled, so even a bare ``poutine.trace(model).get_trace(**data)``
  raises ``NotImplementedError`` for the ``improper_flat_*`` cases, and so do Pyro's default
  ``init_to_uniform`` (every built-in init strategy calls ``fn.sample()``) and NUTS's own
  ``_guess_max_plate_nesting`` dry run.  Plain NUTS runs them with both
  ``init_strategy=init_to_value(values=...)`` and an explicit ``max_plate_nesting=1``.  Their
  posteriors are proper, but the evidence is undefined (``log_evidence=None``).
* Pyro's NUTS enumerates every discrete site itself (it wraps the model in ``config_enumerate``),
  so the enumeration annotations are optional for it; MCMC returns samples of the continuous
  sites only (and no ``pyro.deterministic`` sites: use ``Predictive`` for those).  The
  fixed-parameter HMMs have no continuous site at all: NUTS runs and returns an empty sample
  dict; their discrete posteriors come from enumeration (``infer_discrete``,
  ``TraceEnum_ELBO.compute_marginals``).
* The reference for a discrete site is the mean and sd of its integer value, e.g.
  ``E[x_t] = sum_k k P(x_t = k | data)``; for a Bernoulli/2-way assignment vector ``z`` the mean
  is ``P(z_i = 1 | data)``.
* A ``pyro.deterministic`` site has a reference only where it is a known function of a Gaussian
  posterior (``mu`` of ``conj_linreg_matmul``).
* References are computed from the float64 values of the float32 data, and probability tables
  are renormalised the way ``Categorical(probs)`` renormalises them, so they are exact for the
  model as written; they agree with Pyro's own log density to ~1e-13.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pyro
import pyro.distributions as dist
import torch
from pyro.distributions import constraints
from pyro.distributions.transforms import OrderedTransform
from pyro.infer import config_enumerate
from scipy import linalg, special, stats


@dataclass(frozen=True)
class ForeignCase:
    """One foreign model, its data and (where known) its exact posterior summaries."""

    name: str  # identifier, e.g. "conj_linreg_matmul"
    model: Callable  # the Pyro model, as a user writes it
    data: dict  # keyword arguments for model (tensors, floats, ints)
    mean: dict[str, np.ndarray] | None  # exact posterior mean per site (site's shape), or None
    sd: dict[str, np.ndarray] | None  # exact posterior sd per site, same shapes, or None
    log_evidence: float | None  # exact log p(data), every latent integrated out, or None
    features: tuple[str, ...]  # natural-model features it exercises
    discrete: bool = False  # has discrete (enumerable) latent sites
    notes: str = ""  # what the reference is


# --------------------------------------------------------------------------------------------
# Reference helpers (numpy / scipy only, float64)
# --------------------------------------------------------------------------------------------


def _t(a, dtype=torch.float32) -> torch.Tensor:
    return torch.tensor(np.asarray(a), dtype=dtype)


def _np(t) -> np.ndarray:
    """Exact float64 copy of a tensor (the reference uses the very values the model sees)."""
    if isinstance(t, torch.Tensor):
        return t.detach().double().numpy()
    return np.asarray(t, dtype=np.float64)


def _gauss_posterior(m, S, A, c, R, y):
    """z ~ N(m, S), y | z ~ N(A z + c, R): posterior mean, covariance and log p(y)."""
    m, S, A, c, R, y = (np.asarray(v, dtype=np.float64) for v in (m, S, A, c, R, y))
    V = A @ S @ A.T + R
    cho = linalg.cho_factor(V, lower=True)
    r = y - A @ m - c
    G = linalg.cho_solve(cho, A @ S).T  # S A^T V^-1
    mean = m + G @ r
    cov = S - G @ A @ S
    cov = 0.5 * (cov + cov.T)
    logdet = 2.0 * np.sum(np.log(np.diag(cho[0])))
    logz = -0.5 * (r @ linalg.cho_solve(cho, r) + logdet + len(y) * np.log(2.0 * np.pi))
    return mean, cov, float(logz)


def _split(vec, layout):
    """Cut a flat vector into named sites: layout is a list of (name, shape)."""
    out, i = {}, 0
    for name, shape in layout:
        size = int(np.prod(shape, dtype=int))
        out[name] = np.asarray(vec[i : i + size]).reshape(shape)
        i += size
    return out


def _gauss_summaries(mean, cov, layout):
    return _split(mean, layout), _split(np.sqrt(np.diag(cov)), layout)


def _normal_logpdf(x, loc, scale):
    return -0.5 * ((x - loc) / scale) ** 2 - np.log(scale) - 0.5 * np.log(2.0 * np.pi)


@functools.lru_cache(maxsize=8)
def _legendre_rule(n):
    return np.polynomial.legendre.leggauss(n)


def _leggauss(lo, hi, n):
    x, w = _legendre_rule(n)
    return 0.5 * (hi - lo) * x + 0.5 * (hi + lo), 0.5 * (hi - lo) * w


def _quad1d(logdens, lo, hi, n=301, refine=True):
    """Gauss-Legendre quadrature of exp(logdens) on [lo, hi].

    Returns (nodes, normalised posterior weights, log integral).  With ``refine`` the rule is
    rebuilt on mean +- 14 sd of the first pass (clipped to [lo, hi]).
    """
    x, w = _leggauss(lo, hi, n)
    lp = logdens(x) + np.log(w)
    if refine:
        p = np.exp(lp - special.logsumexp(lp))
        mu = np.sum(p * x)
        sd = np.sqrt(np.sum(p * (x - mu) ** 2))
        return _quad1d(logdens, max(lo, mu - 14 * sd), min(hi, mu + 14 * sd), n, refine=False)
    logz = special.logsumexp(lp)
    return x, np.exp(lp - logz), float(logz)


def _grid2d(logdens, box, n=201, refine=True):
    """Product Gauss-Legendre quadrature of exp(logdens(a, b)) over box = (a0, a1, b0, b1).

    Returns (means, sds, log integral); refined once to mean +- 14 sd per axis.
    """
    a0, a1, b0, b1 = box
    xa, wa = _leggauss(a0, a1, n)
    xb, wb = _leggauss(b0, b1, n)
    A, B = np.meshgrid(xa, xb, indexing="ij")
    lp = logdens(A, B) + np.log(wa)[:, None] + np.log(wb)[None, :]
    logz = special.logsumexp(lp)
    p = np.exp(lp - logz)
    mean = np.array([np.sum(p * A), np.sum(p * B)])
    sd = np.sqrt(np.array([np.sum(p * (A - mean[0]) ** 2), np.sum(p * (B - mean[1]) ** 2)]))
    if refine:
        new = (
            max(a0, mean[0] - 14 * sd[0]),
            min(a1, mean[0] + 14 * sd[0]),
            max(b0, mean[1] - 14 * sd[1]),
            min(b1, mean[1] + 14 * sd[1]),
        )
        return _grid2d(logdens, new, n, refine=False)
    return mean, sd, float(logz)


def _forward_backward(log_init, log_trans, loglik):
    """Exact HMM smoothing.

    ``loglik[..., t, k] = log p(y_t | x_t = k)`` (leading batch dims allowed).  Returns
    ``log p(y)`` of shape ``(...)`` and the marginals ``P(x_t = k | y)`` of shape ``(..., T, K)``.
    """
    T = loglik.shape[-2]
    alpha = [log_init + loglik[..., 0, :]]
    for t in range(1, T):
        step = special.logsumexp(alpha[-1][..., :, None] + log_trans, axis=-2)
        alpha.append(step + loglik[..., t, :])
    beta = [np.zeros_like(alpha[0])]
    for t in range(T - 2, -1, -1):
        nxt = (loglik[..., t + 1, :] + beta[0])[..., None, :]
        beta.insert(0, special.logsumexp(log_trans + nxt, axis=-1))
    alpha, beta = np.stack(alpha, axis=-2), np.stack(beta, axis=-2)
    logz = special.logsumexp(alpha[..., -1, :], axis=-1)
    marginals = np.exp(alpha + beta - logz[..., None, None])
    return (float(logz) if logz.ndim == 0 else logz), marginals


def _log_rows(probs):
    """log of probability rows normalised the way Categorical(probs) normalises them."""
    p = _np(probs)
    return np.log(p / p.sum(-1, keepdims=True))


def _state_summaries(marginals, prefix="x"):
    """Mean and sd of the integer state of each site ``x_t`` from its marginal pmf."""
    k = np.arange(marginals.shape[1])
    mean, sd = {}, {}
    for t, p in enumerate(marginals):
        m1 = np.sum(p * k)
        m2 = np.sum(p * k**2)
        mean[f"{prefix}_{t}"] = np.array(m1)
        sd[f"{prefix}_{t}"] = np.array(np.sqrt(max(m2 - m1**2, 0.0)))
    return mean, sd


def _scalar(d):
    return {k: np.array(float(v)) for k, v in d.items()}


# --------------------------------------------------------------------------------------------
# Conjugate Gaussian models
# --------------------------------------------------------------------------------------------


# Pyro "Bayesian regression" tutorial / NumPyro linear regression: X @ beta + alpha, with the
# linear predictor recorded as a pyro.deterministic site; known noise sigma.
def linreg(X, y, sigma=0.5):
    alpha = pyro.sample("alpha", dist.Normal(0.0, 10.0))
    beta = pyro.sample("beta", dist.Normal(0.0, 1.0).expand([X.shape[1]]).to_event(1))
    mu = pyro.deterministic("mu", X @ beta + alpha)
    with pyro.plate("data", X.shape[0]):
        pyro.sample("y", dist.Normal(mu, sigma), obs=y)


def _case_linreg():
    rng = np.random.default_rng(101)
    n, p = 20, 3
    X = rng.normal(size=(n, p))
    y = 0.7 + X @ np.array([1.0, -2.0, 0.5]) + 0.5 * rng.normal(size=n)
    data = {"X": _t(X), "y": _t(y), "sigma": 0.5}
    A = np.hstack([np.ones((n, 1)), _np(data["X"])])
    S = np.diag([10.0**2] + [1.0] * p)  # alpha ~ N(0, 10), beta ~ N(0, 1)
    R = data["sigma"] ** 2 * np.eye(n)
    mean, cov, logz = _gauss_posterior(np.zeros(p + 1), S, A, np.zeros(n), R, _np(data["y"]))
    m, s = _gauss_summaries(mean, cov, [("alpha", ()), ("beta", (p,))])
    mu_mean = A @ mean
    mu_sd = np.sqrt(np.einsum("ij,jk,ik->i", A, cov, A))
    m["mu"], s["mu"] = mu_mean, mu_sd
    return ForeignCase(
        "conj_linreg_matmul",
        linreg,
        data,
        m,
        s,
        logz,
        ("matmul", "expand", "to_event", "plate", "deterministic", "float_hyper"),
        notes="closed form: Gaussian posterior of (alpha, beta) and Gaussian marginal likelihood",
    )


# The textbook normal-normal model (e.g. NumPyro's "getting started"): known sigma, plate.
def normal_normal(y, mu0=0.0, tau0=1.0, sigma=1.0):
    mu = pyro.sample("mu", dist.Normal(mu0, tau0))
    with pyro.plate("obs", len(y)):
        pyro.sample("y", dist.Normal(mu, sigma), obs=y)


def _case_normal_normal():
    rng = np.random.default_rng(102)
    y = 2.3 + 1.5 * rng.normal(size=15)
    data = {"y": _t(y), "mu0": 1.0, "tau0": 2.0, "sigma": 1.5}
    n, d = len(y), data
    mean, cov, logz = _gauss_posterior(
        [d["mu0"]],
        [[d["tau0"] ** 2]],
        np.ones((n, 1)),
        np.zeros(n),
        d["sigma"] ** 2 * np.eye(n),
        _np(d["y"]),
    )
    m, s = _gauss_summaries(mean, cov, [("mu", ())])
    return ForeignCase(
        "normal_normal_known_sigma",
        normal_normal,
        data,
        m,
        s,
        logz,
        ("plate", "float_hyper"),
        notes="closed form: normal-normal conjugate posterior and evidence",
    )


# Likelihood added as a pyro.factor (the "potential"/Stan target += style of Pyro's forum and
# NumPyro's `numpyro.factor` examples): same joint density as a Normal observation site.
def factor_loglik(y, sigma=1.0):
    mu = pyro.sample("mu", dist.Normal(0.0, 5.0))
    pyro.factor("loglik", dist.Normal(mu, sigma).log_prob(y).sum())


def _case_factor():
    rng = np.random.default_rng(103)
    y = -1.2 + 0.8 * rng.normal(size=12)
    data = {"y": _t(y), "sigma": 0.8}
    n, R = len(y), data["sigma"] ** 2 * np.eye(len(y))
    mean, cov, logz = _gauss_posterior(
        [0.0], [[5.0**2]], np.ones((n, 1)), np.zeros(n), R, _np(data["y"])
    )
    m, s = _gauss_summaries(mean, cov, [("mu", ())])
    return ForeignCase(
        "factor_normal_loglik",
        factor_loglik,
        data,
        m,
        s,
        logz,
        ("factor", "float_hyper"),
        notes="closed form: normal-normal (the factor is the exact Normal log-likelihood)",
    )


# A Python for-loop over the data with one scalar observed site per item (Pyro's SVI intro
# writes `for i in range(len(data)): pyro.sample(f"obs_{i}", ..., obs=data[i])`).
def loop_normal(y, sigma=1.5):
    mu = pyro.sample("mu", dist.Normal(1.0, 3.0))
    for i in range(len(y)):
        pyro.sample(f"y_{i}", dist.Normal(mu, sigma), obs=y[i])


def _case_loop_normal():
    rng = np.random.default_rng(104)
    y = 3.0 + 1.5 * rng.normal(size=8)
    data = {"y": _t(y), "sigma": 1.5}
    n, R = len(y), data["sigma"] ** 2 * np.eye(len(y))
    mean, cov, logz = _gauss_posterior(
        [1.0], [[3.0**2]], np.ones((n, 1)), np.zeros(n), R, _np(data["y"])
    )
    m, s = _gauss_summaries(mean, cov, [("mu", ())])
    return ForeignCase(
        "loop_normal_scalar_sites",
        loop_normal,
        data,
        m,
        s,
        logz,
        ("python_loop", "float_hyper"),
        notes="closed form: normal-normal with one observed site per item",
    )


# Scalar coefficients sampled one by one and stacked into a weight vector (common in Pyro forum
# code and the "intro to Pyro" regression): torch.stack then X @ w.
def stack_linreg(X, y, sigma=0.3):
    w0 = pyro.sample("w0", dist.Normal(0.0, 1.0))
    w1 = pyro.sample("w1", dist.Normal(0.0, 1.0))
    w = torch.stack([w0, w1])
    with pyro.plate("N", len(y)):
        pyro.sample("obs", dist.Normal(X @ w, sigma), obs=y)


def _case_stack():
    rng = np.random.default_rng(105)
    n = 25
    X = rng.normal(size=(n, 2))
    y = X @ np.array([0.6, -0.4]) + 0.3 * rng.normal(size=n)
    data = {"X": _t(X), "y": _t(y), "sigma": 0.3}
    R = data["sigma"] ** 2 * np.eye(n)
    mean, cov, logz = _gauss_posterior(
        np.zeros(2), np.eye(2), _np(data["X"]), np.zeros(n), R, _np(data["y"])
    )
    m, s = _gauss_summaries(mean, cov, [("w0", ()), ("w1", ())])
    return ForeignCase(
        "stack_scalars_matmul",
        stack_linreg,
        data,
        m,
        s,
        logz,
        ("stack", "matmul", "plate", "float_hyper"),
        notes="closed form: Gaussian posterior of the stacked weights, Gaussian evidence",
    )


# Stan-style flat prior: `ImproperUniform(constraints.real, (), ())` (Pyro/NumPyro docs), known
# sigma.  Posterior N(ybar, sigma^2 / n).  Needs a non-default init strategy for NUTS.
def flat_mean(y, sigma=2.0):
    mu = pyro.sample("mu", dist.ImproperUniform(constraints.real, (), ()))
    with pyro.plate("data", y.shape[0]):
        pyro.sample("y", dist.Normal(mu, sigma), obs=y)


def _case_flat_mean():
    rng = np.random.default_rng(106)
    y = 4.0 + 2.0 * rng.normal(size=10)
    data = {"y": _t(y), "sigma": 2.0}
    yn = _np(data["y"])
    return ForeignCase(
        "improper_flat_mean",
        flat_mean,
        data,
        _scalar({"mu": yn.mean()}),
        _scalar({"mu": data["sigma"] / np.sqrt(len(yn))}),
        None,
        ("improper_uniform", "plate", "float_hyper"),
        notes="closed form: N(ybar, sigma^2/n); evidence undefined (improper prior)",
    )


# Both location and scale flat (Stan's default for unbounded/positive parameters):
# mu ~ ImproperUniform(real), sigma ~ ImproperUniform(positive).  Proper posterior for n > 2.
def flat_location_scale(y):
    mu = pyro.sample("mu", dist.ImproperUniform(constraints.real, (), ()))
    sigma = pyro.sample("sigma", dist.ImproperUniform(constraints.positive, (), ()))
    with pyro.plate("data", len(y)):
        pyro.sample("y", dist.Normal(mu, sigma), obs=y)


def _case_flat_loc_scale():
    rng = np.random.default_rng(107)
    y = -0.5 + 1.3 * rng.normal(size=12)
    data = {"y": _t(y)}
    yn = _np(data["y"])
    n = len(yn)
    sxx = np.sum((yn - yn.mean()) ** 2)
    # p(sigma | y) ∝ sigma^-(n-1) exp(-sxx / (2 sigma^2)), mu | sigma, y ~ N(ybar, sigma^2 / n):
    # E[sigma^k] = (sxx/2)^(k/2) Gamma((n-k-2)/2) / Gamma((n-2)/2).
    e1 = np.sqrt(sxx / 2) * np.exp(special.gammaln((n - 3) / 2) - special.gammaln((n - 2) / 2))
    e2 = sxx / (n - 4)
    return ForeignCase(
        "improper_flat_location_scale",
        flat_location_scale,
        data,
        _scalar({"mu": yn.mean(), "sigma": e1}),
        _scalar({"mu": np.sqrt(sxx / (n * (n - 4))), "sigma": np.sqrt(e2 - e1**2)}),
        None,
        ("improper_uniform", "positive", "plate"),
        notes="closed form: flat-prior normal (Student-t mu, scaled inv-chi sigma); no evidence",
    )


# Hierarchical normal with known variances and nested plates (groups x observations), the
# plate-nesting pattern of Pyro's tensor-shapes tutorial; y has shape (n_obs, n_groups).
def hier_normal(y, sigma=1.0, tau=0.8, mu_scale=3.0):
    mu = pyro.sample("mu", dist.Normal(0.0, mu_scale))
    with pyro.plate("groups", y.shape[1]):
        theta = pyro.sample("theta", dist.Normal(mu, tau))
        with pyro.plate("obs", y.shape[0]):
            pyro.sample("y", dist.Normal(theta, sigma), obs=y)


def _case_hier_nested():
    rng = np.random.default_rng(108)
    J, G = 5, 3
    theta = 1.0 + 0.8 * rng.normal(size=G)
    y = theta[None, :] + rng.normal(size=(J, G))
    data = {"y": _t(y), "sigma": 1.0, "tau": 0.8, "mu_scale": 3.0}
    s2, t2 = data["mu_scale"] ** 2, data["tau"] ** 2
    S = np.full((G + 1, G + 1), s2)
    S[1:, 1:] += t2 * np.eye(G)
    A = np.zeros((J * G, G + 1))
    for j in range(J):
        for g in range(G):
            A[j * G + g, 1 + g] = 1.0
    mean, cov, logz = _gauss_posterior(
        np.zeros(G + 1),
        S,
        A,
        np.zeros(J * G),
        data["sigma"] ** 2 * np.eye(J * G),
        _np(data["y"]).ravel(),
    )
    m, s = _gauss_summaries(mean, cov, [("mu", ()), ("theta", (G,))])
    return ForeignCase(
        "hier_normal_nested_plates",
        hier_normal,
        data,
        m,
        s,
        logz,
        ("nested_plates", "plate", "float_hyper"),
        notes="closed form: joint Gaussian of (mu, theta) via the joint covariance",
    )


# Varying-intercept regression, radon style (Pyro/NumPyro bayesian hierarchical regression):
# a sampled vector of group intercepts indexed by a long tensor of group ids.
def varying_intercepts(group, x, y, n_groups, sigma_a=1.0, sigma_y=0.5):
    mu_a = pyro.sample("mu_a", dist.Normal(0.0, 5.0))
    b = pyro.sample("b", dist.Normal(0.0, 2.0))
    with pyro.plate("groups", n_groups):
        a = pyro.sample("a", dist.Normal(mu_a, sigma_a))
    with pyro.plate("data", len(y)):
        pyro.sample("y", dist.Normal(a[group] + b * x, sigma_y), obs=y)


def _case_varying_intercepts():
    rng = np.random.default_rng(109)
    G, n = 3, 24
    group = rng.permutation(np.repeat(np.arange(G), n // G))
    a = np.array([-1.0, 0.5, 2.0])
    x = rng.normal(size=n)
    y = a[group] + 0.7 * x + 0.5 * rng.normal(size=n)
    data = {
        "group": _t(group, torch.long),
        "x": _t(x),
        "y": _t(y),
        "n_groups": G,
        "sigma_a": 1.0,
        "sigma_y": 0.5,
    }
    # latent order: mu_a, b, a[0..G-1]
    S = np.zeros((G + 2, G + 2))
    S[0, 0], S[1, 1] = 5.0**2, 2.0**2  # mu_a ~ N(0, 5), b ~ N(0, 2)
    S[0, 2:] = S[2:, 0] = 5.0**2
    S[2:, 2:] = 5.0**2 + data["sigma_a"] ** 2 * np.eye(G)
    xn = _np(data["x"])
    A = np.zeros((n, G + 2))
    A[:, 1] = xn
    A[np.arange(n), 2 + group] = 1.0
    mean, cov, logz = _gauss_posterior(
        np.zeros(G + 2), S, A, np.zeros(n), data["sigma_y"] ** 2 * np.eye(n), _np(data["y"])
    )
    m, s = _gauss_summaries(mean, cov, [("mu_a", ()), ("b", ()), ("a", (G,))])
    return ForeignCase(
        "varying_intercepts_indexing",
        varying_intercepts,
        data,
        m,
        s,
        logz,
        ("indexing", "plate", "multiple_plates", "long_data", "int_data", "float_hyper"),
        notes="closed form: joint Gaussian of (mu_a, b, a) via the joint covariance",
    )


# Hierarchical model written with a Python loop of latent scalar sites (the "centered eight
# schools" as a beginner writes it), known tau and per-item sigma.
def loop_hierarchical(y, sigma, tau=1.0):
    mu = pyro.sample("mu", dist.Normal(0.0, 5.0))
    for j in range(len(y)):
        theta_j = pyro.sample(f"theta_{j}", dist.Normal(mu, tau))
        pyro.sample(f"y_{j}", dist.Normal(theta_j, sigma[j]), obs=y[j])


def _case_loop_hier():
    rng = np.random.default_rng(110)
    J = 4
    sig = np.array([0.5, 1.0, 0.8, 1.5])
    y = 1.0 + rng.normal(size=J) + sig * rng.normal(size=J)
    data = {"y": _t(y), "sigma": _t(sig), "tau": 1.0}
    S = np.full((J + 1, J + 1), 5.0**2)  # mu ~ N(0, 5)
    S[1:, 1:] += data["tau"] ** 2 * np.eye(J)
    A = np.hstack([np.zeros((J, 1)), np.eye(J)])
    R = np.diag(_np(data["sigma"]) ** 2)
    mean, cov, logz = _gauss_posterior(np.zeros(J + 1), S, A, np.zeros(J), R, _np(data["y"]))
    m, s = _gauss_summaries(mean, cov, [("mu", ())] + [(f"theta_{j}", ()) for j in range(J)])
    return ForeignCase(
        "loop_hierarchical_latent_sites",
        loop_hierarchical,
        data,
        m,
        s,
        logz,
        ("python_loop", "float_hyper"),
        notes="closed form: joint Gaussian of (mu, theta_j) via the joint covariance",
    )


# Gaussian-process regression with the latent function sampled explicitly (Pyro GP tutorial
# kernels written by hand: x[:, None] - x[None, :], MultivariateNormal(zeros, covariance_matrix)).
def gp_latent(x, y, lengthscale=1.0, variance=1.0, noise=0.3, jitter=1e-4):
    n = x.shape[0]
    d = x[:, None] - x[None, :]
    K = variance * torch.exp(-0.5 * d**2 / lengthscale**2) + jitter * torch.eye(n)
    f = pyro.sample("f", dist.MultivariateNormal(torch.zeros(n), covariance_matrix=K))
    with pyro.plate("data", n):
        pyro.sample("y", dist.Normal(f, noise), obs=y)


def _case_gp():
    rng = np.random.default_rng(111)
    n = 7
    x = np.linspace(0.0, 6.0, n)
    y = np.sin(x) + 0.3 * rng.normal(size=n)
    data = {"x": _t(x), "y": _t(y), "lengthscale": 1.0, "variance": 1.0, "noise": 0.3}
    data["jitter"] = 1e-4
    xn, d = _np(data["x"]), data
    K = d["variance"] * np.exp(-0.5 * (xn[:, None] - xn[None, :]) ** 2 / d["lengthscale"] ** 2)
    K += d["jitter"] * np.eye(n)
    R = d["noise"] ** 2 * np.eye(n)
    mean, cov, logz = _gauss_posterior(np.zeros(n), K, np.eye(n), np.zeros(n), R, _np(d["y"]))
    m, s = _gauss_summaries(mean, cov, [("f", (n,))])
    return ForeignCase(
        "gp_latent_f_fixed_hypers",
        gp_latent,
        data,
        m,
        s,
        logz,
        ("gp_kernel", "mvn", "broadcast_diff", "plate", "float_hyper"),
        notes="closed form: GP posterior of f and the GP marginal likelihood N(y; 0, K + s^2 I)",
    )


# Multivariate-normal observations with unknown mean (NumPyro/Pyro MVN examples): conjugate.
def mvn_mean(y, prior_cov, obs_cov):
    d = y.shape[-1]
    mu = pyro.sample("mu", dist.MultivariateNormal(torch.zeros(d), covariance_matrix=prior_cov))
    with pyro.plate("data", y.shape[0]):
        pyro.sample("y", dist.MultivariateNormal(mu, covariance_matrix=obs_cov), obs=y)


def _case_mvn():
    rng = np.random.default_rng(112)
    d, n = 3, 10
    prior_cov = np.array([[4.0, 1.0, 0.0], [1.0, 4.0, 1.0], [0.0, 1.0, 4.0]])
    obs_cov = np.array([[1.0, 0.5, 0.2], [0.5, 1.5, 0.3], [0.2, 0.3, 0.8]])
    y = np.array([1.0, -1.0, 0.5]) + rng.normal(size=(n, d)) @ np.linalg.cholesky(obs_cov).T
    data = {"y": _t(y), "prior_cov": _t(prior_cov), "obs_cov": _t(obs_cov)}
    A = np.tile(np.eye(d), (n, 1))
    R = np.kron(np.eye(n), _np(data["obs_cov"]))
    mean, cov, logz = _gauss_posterior(
        np.zeros(d), _np(data["prior_cov"]), A, np.zeros(n * d), R, _np(data["y"]).ravel()
    )
    m, s = _gauss_summaries(mean, cov, [("mu", (d,))])
    return ForeignCase(
        "mvn_obs_unknown_mean",
        mvn_mean,
        data,
        m,
        s,
        logz,
        ("mvn", "mvn_obs", "plate"),
        notes="closed form: conjugate Gaussian posterior of the MVN mean and Gaussian evidence",
    )


# Two data sets in two separate plates sharing a parameter (the "several plates" pattern of
# Pyro's plate docs): instrument b has an unknown bias.
def two_instruments(y_a, y_b, sigma_a=0.5, sigma_b=1.0):
    mu = pyro.sample("mu", dist.Normal(0.0, 10.0))
    bias = pyro.sample("bias", dist.Normal(0.0, 1.0))
    with pyro.plate("a", len(y_a)):
        pyro.sample("y_a", dist.Normal(mu, sigma_a), obs=y_a)
    with pyro.plate("b", len(y_b)):
        pyro.sample("y_b", dist.Normal(mu + bias, sigma_b), obs=y_b)


def _case_two_plates():
    rng = np.random.default_rng(113)
    y_a = 3.0 + 0.5 * rng.normal(size=8)
    y_b = 3.6 + 1.0 * rng.normal(size=6)
    data = {"y_a": _t(y_a), "y_b": _t(y_b), "sigma_a": 0.5, "sigma_b": 1.0}
    A = np.vstack([np.tile([1.0, 0.0], (8, 1)), np.tile([1.0, 1.0], (6, 1))])
    R = np.diag([data["sigma_a"] ** 2] * 8 + [data["sigma_b"] ** 2] * 6)
    yy = np.concatenate([_np(data["y_a"]), _np(data["y_b"])])
    S = np.diag([10.0**2, 1.0])  # mu ~ N(0, 10), bias ~ N(0, 1)
    mean, cov, logz = _gauss_posterior(np.zeros(2), S, A, np.zeros(14), R, yy)
    m, s = _gauss_summaries(mean, cov, [("mu", ()), ("bias", ())])
    return ForeignCase(
        "two_plates_shared_mean",
        two_instruments,
        data,
        m,
        s,
        logz,
        ("multiple_plates", "plate", "float_hyper"),
        notes="closed form: joint Gaussian of (mu, bias)",
    )


# --------------------------------------------------------------------------------------------
# Other conjugate models
# --------------------------------------------------------------------------------------------


# Beta-binomial with Binomial counts (Pyro's "baseball"/coin examples): integer-valued floats.
def beta_binomial(counts, trials, a=2.0, b=2.0):
    p = pyro.sample("p", dist.Beta(a, b))
    with pyro.plate("trials", len(counts)):
        pyro.sample("obs", dist.Binomial(total_count=trials, probs=p), obs=counts)


def _case_beta_binomial():
    rng = np.random.default_rng(114)
    trials = np.array([10, 12, 8, 15, 10, 9])
    counts = rng.binomial(trials, 0.35)
    data = {"counts": _t(counts), "trials": _t(trials), "a": 2.0, "b": 2.0}
    a, b = data["a"], data["b"]
    k, n = counts.sum(), trials.sum()
    a1, b1 = a + k, b + n - k
    log_choose = np.sum(
        special.gammaln(trials + 1)
        - special.gammaln(counts + 1)
        - special.gammaln(trials - counts + 1)
    )
    logz = log_choose + special.betaln(a1, b1) - special.betaln(a, b)
    post = stats.beta(a1, b1)
    return ForeignCase(
        "beta_binomial_counts",
        beta_binomial,
        data,
        _scalar({"p": post.mean()}),
        _scalar({"p": post.std()}),
        float(logz),
        ("unit_interval", "int_data", "plate", "float_hyper"),
        notes="closed form: Beta(a + sum k, b + sum(n - k)) posterior, beta-binomial evidence",
    )


# Gamma-Poisson rate (NumPyro/Pyro count-data examples): integer counts as floats.
def gamma_poisson(counts, alpha=2.0, beta=0.5):
    rate = pyro.sample("rate", dist.Gamma(alpha, beta))
    with pyro.plate("data", len(counts)):
        pyro.sample("obs", dist.Poisson(rate), obs=counts)


def _case_gamma_poisson():
    rng = np.random.default_rng(115)
    counts = rng.poisson(3.2, size=15)
    data = {"counts": _t(counts), "alpha": 2.0, "beta": 0.5}
    a, b, n, s = data["alpha"], data["beta"], len(counts), counts.sum()
    logz = (
        a * np.log(b)
        - special.gammaln(a)
        + special.gammaln(a + s)
        - (a + s) * np.log(b + n)
        - np.sum(special.gammaln(counts + 1))
    )
    post = stats.gamma(a + s, scale=1.0 / (b + n))
    return ForeignCase(
        "gamma_poisson_counts",
        gamma_poisson,
        data,
        _scalar({"rate": post.mean()}),
        _scalar({"rate": post.std()}),
        float(logz),
        ("positive", "int_data", "plate", "float_hyper"),
        notes="closed form: Gamma(alpha + sum y, beta + n) posterior, negative-binomial evidence",
    )


# Dirichlet-categorical with torch.long category indices (Pyro's "Categorical" docs / LDA-style).
def dirichlet_categorical(y, concentration):
    theta = pyro.sample("theta", dist.Dirichlet(concentration))
    with pyro.plate("data", y.shape[0]):
        pyro.sample("y", dist.Categorical(theta), obs=y)


def _dirichlet_moments(alpha):
    a0 = alpha.sum()
    mean = alpha / a0
    sd = np.sqrt(alpha * (a0 - alpha) / (a0**2 * (a0 + 1)))
    return mean, sd


def _case_dirichlet_categorical():
    rng = np.random.default_rng(116)
    y = rng.choice(3, size=30, p=[0.2, 0.5, 0.3])
    conc = np.array([1.0, 2.0, 1.5])
    data = {"y": _t(y, torch.long), "concentration": _t(conc)}
    nk = np.bincount(y, minlength=3)
    post = conc + nk
    logz = (
        special.gammaln(conc.sum())
        - special.gammaln(conc.sum() + nk.sum())
        + np.sum(special.gammaln(post) - special.gammaln(conc))
    )
    mean, sd = _dirichlet_moments(post)
    return ForeignCase(
        "dirichlet_categorical_long",
        dirichlet_categorical,
        data,
        {"theta": mean},
        {"theta": sd},
        float(logz),
        ("simplex", "long_data", "int_data", "plate"),
        notes="closed form: Dirichlet(alpha + counts) posterior, Dirichlet-categorical evidence",
    )


# Dirichlet-multinomial: Multinomial count vectors with a fixed int total_count.
def dirichlet_multinomial(counts, total_count, concentration):
    probs = pyro.sample("probs", dist.Dirichlet(concentration))
    with pyro.plate("draws", counts.shape[0]):
        pyro.sample("counts", dist.Multinomial(total_count, probs), obs=counts)


def _case_dirichlet_multinomial():
    rng = np.random.default_rng(117)
    total = 10
    counts = rng.multinomial(total, [0.6, 0.1, 0.3], size=8)
    conc = np.ones(3)
    data = {"counts": _t(counts), "total_count": total, "concentration": _t(conc)}
    nk = counts.sum(0)
    post = conc + nk
    log_coef = np.sum(special.gammaln(total + 1) - special.gammaln(counts + 1).sum(-1))
    logz = (
        log_coef
        + special.gammaln(conc.sum())
        - special.gammaln(conc.sum() + nk.sum())
        + np.sum(special.gammaln(post) - special.gammaln(conc))
    )
    mean, sd = _dirichlet_moments(post)
    return ForeignCase(
        "dirichlet_multinomial_counts",
        dirichlet_multinomial,
        data,
        {"probs": mean},
        {"probs": sd},
        float(logz),
        ("simplex", "int_data", "plate", "int_hyper"),
        notes="closed form: Dirichlet(alpha + summed counts), Dirichlet-multinomial evidence",
    )


# Unknown precision with known mean: tau ~ Gamma, y ~ Normal(mu, 1/sqrt(tau)) (BUGS-style
# precision parameterisation seen in many ported models).
def normal_precision(y, mu=1.0, a=2.0, b=1.0):
    tau = pyro.sample("tau", dist.Gamma(a, b))
    with pyro.plate("data", len(y)):
        pyro.sample("y", dist.Normal(mu, 1.0 / torch.sqrt(tau)), obs=y)


def _case_normal_precision():
    rng = np.random.default_rng(118)
    y = 1.0 + 0.7 * rng.normal(size=20)
    data = {"y": _t(y), "mu": 1.0, "a": 2.0, "b": 1.0}
    yn = _np(data["y"])
    a, b = data["a"], data["b"]
    n, ss = len(yn), np.sum((yn - data["mu"]) ** 2)
    a1, b1 = a + n / 2, b + ss / 2
    logz = (
        a * np.log(b)
        - special.gammaln(a)
        + special.gammaln(a1)
        - a1 * np.log(b1)
        - 0.5 * n * np.log(2 * np.pi)
    )
    post = stats.gamma(a1, scale=1.0 / b1)
    return ForeignCase(
        "gamma_normal_precision",
        normal_precision,
        data,
        _scalar({"tau": post.mean()}),
        _scalar({"tau": post.std()}),
        float(logz),
        ("positive", "plate", "float_hyper"),
        notes="closed form: Gamma(a + n/2, b + SS/2) posterior of the precision, t evidence",
    )


# Normal-inverse-gamma, the conjugate unknown-mean-and-variance model (mu's prior scale depends
# on the sampled variance).
def normal_inverse_gamma(y, m0=0.0, k0=1.0, a0=3.0, b0=2.0):
    sigma2 = pyro.sample("sigma2", dist.InverseGamma(a0, b0))
    mu = pyro.sample("mu", dist.Normal(m0, torch.sqrt(sigma2 / k0)))
    with pyro.plate("data", len(y)):
        pyro.sample("y", dist.Normal(mu, torch.sqrt(sigma2)), obs=y)


def _case_nig():
    rng = np.random.default_rng(119)
    y = 2.0 + 1.2 * rng.normal(size=15)
    data = {"y": _t(y), "m0": 0.0, "k0": 1.0, "a0": 3.0, "b0": 2.0}
    yn = _np(data["y"])
    n, ybar = len(yn), yn.mean()
    m0, k0, a0, b0 = data["m0"], data["k0"], data["a0"], data["b0"]
    kn = k0 + n
    mn = (k0 * m0 + n * ybar) / kn
    an = a0 + n / 2
    bn = b0 + 0.5 * np.sum((yn - ybar) ** 2) + k0 * n * (ybar - m0) ** 2 / (2 * kn)
    logz = (
        special.gammaln(an)
        - special.gammaln(a0)
        + a0 * np.log(b0)
        - an * np.log(bn)
        + 0.5 * np.log(k0 / kn)
        - 0.5 * n * np.log(2 * np.pi)
    )
    mean = {"sigma2": bn / (an - 1), "mu": mn}
    sd = {"sigma2": bn / ((an - 1) * np.sqrt(an - 2)), "mu": np.sqrt(bn / (kn * (an - 1)))}
    return ForeignCase(
        "normal_inverse_gamma",
        normal_inverse_gamma,
        data,
        _scalar(mean),
        _scalar(sd),
        float(logz),
        ("positive", "plate", "float_hyper", "dependent_prior"),
        notes="closed form: NIG posterior (inv-gamma sigma2, Student-t mu) and evidence",
    )


# --------------------------------------------------------------------------------------------
# Continuous models with a 1-D / 2-D quadrature reference
# --------------------------------------------------------------------------------------------


# Unknown scale with a LogNormal prior (NumPyro's priors on scales), mean known to be 0.
def lognormal_scale(y, loc=0.0, scale=1.0):
    sigma = pyro.sample("sigma", dist.LogNormal(loc, scale))
    with pyro.plate("data", len(y)):
        pyro.sample("y", dist.Normal(0.0, sigma), obs=y)


def _case_lognormal_scale():
    rng = np.random.default_rng(120)
    y = 1.8 * rng.normal(size=20)
    data = {"y": _t(y), "loc": 0.0, "scale": 1.0}
    yn = _np(data["y"])

    def logdens(u):  # u = log sigma: LogNormal(loc, scale) density times e^u is N(u; loc, scale)
        sig = np.exp(u)
        return _normal_logpdf(u, data["loc"], data["scale"]) + np.sum(
            _normal_logpdf(yn[None, :], 0.0, sig[:, None]), axis=1
        )

    u, p, logz = _quad1d(logdens, -10.0, 10.0)
    e1, e2 = np.sum(p * np.exp(u)), np.sum(p * np.exp(2 * u))
    return ForeignCase(
        "lognormal_scale_quadrature",
        lognormal_scale,
        data,
        _scalar({"sigma": e1}),
        _scalar({"sigma": np.sqrt(e2 - e1**2)}),
        logz,
        ("positive", "plate", "float_hyper"),
        notes="1-D Gauss-Legendre quadrature over log sigma (posterior moments and evidence)",
    )


# Logistic regression, NumPyro/Pyro style: Bernoulli(logits=X @ w), intercept column in X.
def logistic_regression(X, y):
    w = pyro.sample("w", dist.Normal(torch.zeros(2), 2.0 * torch.ones(2)).to_event(1))
    with pyro.plate("data", X.shape[0]):
        pyro.sample("y", dist.Bernoulli(logits=X @ w), obs=y)


def _case_logistic():
    rng = np.random.default_rng(121)
    n = 40
    x = rng.normal(size=n)
    X = np.stack([np.ones(n), x], axis=1)
    y = rng.binomial(1, special.expit(X @ np.array([-0.5, 1.5])))
    data = {"X": _t(X), "y": _t(y)}
    Xn, yn = _np(data["X"]), _np(data["y"])

    def logdens(a, b):
        eta = a[..., None] * Xn[:, 0] + b[..., None] * Xn[:, 1]
        ll = np.sum(yn * eta - np.logaddexp(0.0, eta), axis=-1)
        return _normal_logpdf(a, 0.0, 2.0) + _normal_logpdf(b, 0.0, 2.0) + ll

    mean, sd, logz = _grid2d(logdens, (-10.0, 10.0, -10.0, 10.0))
    return ForeignCase(
        "logistic_regression_matmul",
        logistic_regression,
        data,
        {"w": mean},
        {"w": sd},
        logz,
        ("matmul", "to_event", "plate", "binary_data"),
        notes="2-D product Gauss-Legendre quadrature (non-conjugate)",
    )


# Poisson regression with a log link (NumPyro count regression): counts as floats.
def poisson_regression(x, counts):
    a = pyro.sample("a", dist.Normal(0.0, 2.0))
    b = pyro.sample("b", dist.Normal(0.0, 1.0))
    rate = torch.exp(a + b * x)
    with pyro.plate("data", len(counts)):
        pyro.sample("counts", dist.Poisson(rate), obs=counts)


def _case_poisson_regression():
    rng = np.random.default_rng(122)
    n = 25
    x = rng.uniform(-1.0, 1.0, size=n)
    counts = rng.poisson(np.exp(1.0 + 0.8 * x))
    data = {"x": _t(x), "counts": _t(counts)}
    xn, cn = _np(data["x"]), _np(data["counts"])
    lgc = special.gammaln(cn + 1)

    def logdens(a, b):
        eta = a[..., None] + b[..., None] * xn
        ll = np.sum(cn * eta - np.exp(eta) - lgc, axis=-1)
        return _normal_logpdf(a, 0.0, 2.0) + _normal_logpdf(b, 0.0, 1.0) + ll

    mean, sd, logz = _grid2d(logdens, (-8.0, 8.0, -6.0, 6.0))
    return ForeignCase(
        "poisson_regression_log_link",
        poisson_regression,
        data,
        _scalar({"a": mean[0], "b": mean[1]}),
        _scalar({"a": sd[0], "b": sd[1]}),
        logz,
        ("int_data", "plate"),
        notes="2-D product Gauss-Legendre quadrature (non-conjugate)",
    )


# --------------------------------------------------------------------------------------------
# Discrete latent sites: HMMs through pyro.markov, mixtures
# --------------------------------------------------------------------------------------------


# Pyro's examples/hmm.py "model_0" style: x = 0 then x_t ~ Categorical(probs_x[x]) inside
# pyro.markov, per-site infer={"enumerate": "parallel"}; x_0 therefore starts from probs_x[0].
def hmm_normal(y, probs_x, locs, scale=1.0):
    x = 0
    for t in pyro.markov(range(len(y))):
        x = pyro.sample(f"x_{t}", dist.Categorical(probs_x[x]), infer={"enumerate": "parallel"})
        pyro.sample(f"y_{t}", dist.Normal(locs[x], scale), obs=y[t])


def _simulate_hmm(rng, init, trans, T):
    xs = [rng.choice(len(init), p=init)]
    for _ in range(T - 1):
        xs.append(rng.choice(len(init), p=trans[xs[-1]]))
    return np.array(xs)


def _case_hmm_normal():
    rng = np.random.default_rng(208)
    trans = np.array([[0.8, 0.2], [0.3, 0.7]])
    locs = np.array([-1.0, 1.0])
    xs = _simulate_hmm(rng, trans[0], trans, 6)
    y = locs[xs] + rng.normal(size=6)
    data = {"y": _t(y), "probs_x": _t(trans), "locs": _t(locs), "scale": 1.0}
    log_tr, ln = _log_rows(data["probs_x"]), _np(data["locs"])
    loglik = _normal_logpdf(_np(data["y"])[:, None], ln[None, :], data["scale"])
    logz, marg = _forward_backward(log_tr[0], log_tr, loglik)
    mean, sd = _state_summaries(marg)
    return ForeignCase(
        "hmm_markov_enum_parallel",
        hmm_normal,
        data,
        mean,
        sd,
        logz,
        ("markov", "enumerate_parallel", "discrete_latent", "python_loop", "indexing"),
        discrete=True,
        notes="exact: forward algorithm (evidence), forward-backward marginals of x_t",
    )


# Same HMM written with the @config_enumerate decorator, explicit initial distribution and
# Poisson emissions (integer counts), three states.
@config_enumerate
def hmm_poisson(counts, init, trans, rates):
    x = pyro.sample("x_0", dist.Categorical(init))
    pyro.sample("y_0", dist.Poisson(rates[x]), obs=counts[0])
    for t in pyro.markov(range(1, len(counts))):
        x = pyro.sample(f"x_{t}", dist.Categorical(trans[x]))
        pyro.sample(f"y_{t}", dist.Poisson(rates[x]), obs=counts[t])


def _case_hmm_poisson():
    rng = np.random.default_rng(124)
    init = np.array([0.5, 0.3, 0.2])
    trans = np.array([[0.7, 0.2, 0.1], [0.15, 0.7, 0.15], [0.1, 0.2, 0.7]])
    rates = np.array([1.0, 4.0, 9.0])
    xs = _simulate_hmm(rng, init, trans, 5)
    counts = rng.poisson(rates[xs])
    data = {"counts": _t(counts), "init": _t(init), "trans": _t(trans), "rates": _t(rates)}
    rn = _np(data["rates"])
    loglik = stats.poisson.logpmf(counts[:, None], rn[None, :])
    logz, marg = _forward_backward(_log_rows(data["init"]), _log_rows(data["trans"]), loglik)
    mean, sd = _state_summaries(marg)
    return ForeignCase(
        "hmm_markov_config_enumerate",
        hmm_poisson,
        data,
        mean,
        sd,
        logz,
        ("markov", "config_enumerate", "discrete_latent", "int_data", "indexing"),
        discrete=True,
        notes="exact: forward algorithm (evidence), forward-backward marginals of x_t",
    )


# HMM through pyro.markov with no enumeration annotation at all, Categorical emissions with a
# torch.long observation sequence (Pyro's NUTS enumerates discrete sites by itself).
def hmm_categorical(y, init, trans, emit):
    x = pyro.sample("x_0", dist.Categorical(init))
    pyro.sample("y_0", dist.Categorical(emit[x]), obs=y[0])
    for t in pyro.markov(range(1, len(y))):
        x = pyro.sample(f"x_{t}", dist.Categorical(trans[x]))
        pyro.sample(f"y_{t}", dist.Categorical(emit[x]), obs=y[t])


def _case_hmm_categorical():
    rng = np.random.default_rng(125)
    init = np.array([0.6, 0.4])
    trans = np.array([[0.85, 0.15], [0.25, 0.75]])
    emit = np.array([[0.7, 0.2, 0.1], [0.1, 0.3, 0.6]])
    xs = _simulate_hmm(rng, init, trans, 6)
    y = np.array([rng.choice(3, p=emit[k]) for k in xs])
    data = {"y": _t(y, torch.long), "init": _t(init), "trans": _t(trans), "emit": _t(emit)}
    loglik = _log_rows(data["emit"])[:, y].T
    logz, marg = _forward_backward(_log_rows(data["init"]), _log_rows(data["trans"]), loglik)
    mean, sd = _state_summaries(marg)
    return ForeignCase(
        "hmm_markov_no_annotation",
        hmm_categorical,
        data,
        mean,
        sd,
        logz,
        ("markov", "discrete_latent", "long_data", "int_data", "indexing"),
        discrete=True,
        notes="exact: forward algorithm (evidence), forward-backward marginals of x_t",
    )


# HMM with one continuous parameter (a shift of the emission means) and enumerated states.
@config_enumerate
def hmm_shift(y, probs_x, locs, scale=0.8):
    shift = pyro.sample("shift", dist.Normal(0.0, 1.0))
    x = 0
    for t in pyro.markov(range(len(y))):
        x = pyro.sample(f"x_{t}", dist.Categorical(probs_x[x]))
        pyro.sample(f"y_{t}", dist.Normal(locs[x] + shift, scale), obs=y[t])


def _case_hmm_shift():
    rng = np.random.default_rng(126)
    trans = np.array([[0.75, 0.25], [0.25, 0.75]])
    locs = np.array([-1.0, 1.0])
    xs = _simulate_hmm(rng, trans[0], trans, 6)
    y = 0.4 + locs[xs] + 0.8 * rng.normal(size=6)
    data = {"y": _t(y), "probs_x": _t(trans), "locs": _t(locs), "scale": 0.8}
    yn, log_tr, ln = _np(data["y"]), _log_rows(data["probs_x"]), _np(data["locs"])

    def fb(shift):  # batched over the quadrature nodes
        loglik = _normal_logpdf(yn[:, None], ln[None, :] + shift[:, None, None], data["scale"])
        return _forward_backward(log_tr[0], log_tr, loglik)

    def logdens(s):
        return _normal_logpdf(s, 0.0, 1.0) + fb(s)[0]

    s, p, logz = _quad1d(logdens, -10.0, 10.0)
    marg = np.einsum("s,stk->tk", p, fb(s)[1])
    mean, sd = _state_summaries(marg)
    e1 = np.sum(p * s)
    mean["shift"] = np.array(e1)
    sd["shift"] = np.array(np.sqrt(np.sum(p * (s - e1) ** 2)))
    return ForeignCase(
        "hmm_markov_continuous_shift",
        hmm_shift,
        data,
        mean,
        sd,
        logz,
        ("markov", "config_enumerate", "discrete_latent", "indexing"),
        discrete=True,
        notes="1-D quadrature over shift x exact forward-backward over the states",
    )


# Two-component mixture with fixed components and an unknown weight, Pyro GMM tutorial style:
# weights = torch.stack([1 - w, w]), assignments enumerated with @config_enumerate.
@config_enumerate
def mixture_weight(y, locs, scale=1.0, a=2.0, b=2.0):
    w = pyro.sample("w", dist.Beta(a, b))
    weights = torch.stack([1.0 - w, w])
    with pyro.plate("data", len(y)):
        z = pyro.sample("z", dist.Categorical(weights))
        pyro.sample("y", dist.Normal(locs[z], scale), obs=y)


def _case_mixture_weight():
    rng = np.random.default_rng(127)
    n = 12
    locs = np.array([-1.5, 1.5])
    z = rng.binomial(1, 0.3, size=n)
    y = locs[z] + rng.normal(size=n)
    data = {"y": _t(y), "locs": _t(locs), "scale": 1.0, "a": 2.0, "b": 2.0}
    yn, ln = _np(data["y"]), _np(data["locs"])
    l0 = _normal_logpdf(yn, ln[0], data["scale"])
    l1 = _normal_logpdf(yn, ln[1], data["scale"])

    def logdens(w):
        w = w[:, None]
        ll = np.logaddexp(np.log1p(-w) + l0, np.log(w) + l1).sum(-1)
        return stats.beta(data["a"], data["b"]).logpdf(w[:, 0]) + ll

    w, p, logz = _quad1d(logdens, 0.0, 1.0, refine=False)
    resp = 1.0 / (1.0 + np.exp(np.log1p(-w[:, None]) + l0 - np.log(w[:, None]) - l1))
    pz = p @ resp
    e1 = np.sum(p * w)
    mean = {"w": np.array(e1), "z": pz}
    sd = {"w": np.array(np.sqrt(np.sum(p * (w - e1) ** 2))), "z": np.sqrt(pz * (1 - pz))}
    return ForeignCase(
        "mixture_fixed_components_weight",
        mixture_weight,
        data,
        mean,
        sd,
        logz,
        ("config_enumerate", "discrete_latent", "stack", "indexing", "plate", "unit_interval"),
        discrete=True,
        notes="1-D quadrature over w x exact sums over assignments (P(z_i = 1) as mean of z)",
    )


# Spike-plus-unknown-component mixture with Bernoulli assignments and no enumeration
# annotation (the "z * mu" idiom); NUTS enumerates z itself.
def mixture_unknown_loc(y, weight=0.5, sigma=1.0):
    mu = pyro.sample("mu", dist.Normal(0.0, 3.0))
    with pyro.plate("data", len(y)):
        z = pyro.sample("z", dist.Bernoulli(weight))
        pyro.sample("y", dist.Normal(z * mu, sigma), obs=y)


def _case_mixture_loc():
    rng = np.random.default_rng(128)
    n = 15
    z = rng.binomial(1, 0.5, size=n)
    y = 2.5 * z + rng.normal(size=n)
    data = {"y": _t(y), "weight": 0.5, "sigma": 1.0}
    yn = _np(data["y"])
    wt, sig = data["weight"], data["sigma"]
    l0 = np.log1p(-wt) + _normal_logpdf(yn, 0.0, sig)

    def l1(mu):
        return np.log(wt) + _normal_logpdf(yn[None, :], mu[:, None], sig)

    def logdens(mu):
        return _normal_logpdf(mu, 0.0, 3.0) + np.logaddexp(l0, l1(mu)).sum(-1)

    mu, p, logz = _quad1d(logdens, -20.0, 20.0)
    resp = special.expit(l1(mu) - l0)
    pz = p @ resp
    e1 = np.sum(p * mu)
    mean = {"mu": np.array(e1), "z": pz}
    sd = {"mu": np.array(np.sqrt(np.sum(p * (mu - e1) ** 2))), "z": np.sqrt(pz * (1 - pz))}
    return ForeignCase(
        "mixture_bernoulli_no_annotation",
        mixture_unknown_loc,
        data,
        mean,
        sd,
        logz,
        ("discrete_latent", "plate", "float_hyper", "bernoulli_latent"),
        discrete=True,
        notes="1-D quadrature over mu x exact sums over assignments (P(z_i = 1) as mean of z)",
    )


# --------------------------------------------------------------------------------------------
# Non-conjugate models without a reference
# --------------------------------------------------------------------------------------------


# Robust regression with Student-t noise and a HalfNormal scale (NumPyro/Stan user guides).
def robust_regression(x, y, nu=4.0):
    alpha = pyro.sample("alpha", dist.Normal(0.0, 5.0))
    beta = pyro.sample("beta", dist.Normal(0.0, 5.0))
    sigma = pyro.sample("sigma", dist.HalfNormal(2.0))
    with pyro.plate("data", len(y)):
        pyro.sample("y", dist.StudentT(nu, alpha + beta * x, sigma), obs=y)


def _case_robust():
    rng = np.random.default_rng(129)
    n = 30
    x = rng.uniform(-2.0, 2.0, size=n)
    y = 1.0 + 2.0 * x + 0.5 * rng.normal(size=n)
    y[[3, 11, 20]] += np.array([8.0, -7.0, 9.0])
    return ForeignCase(
        "student_t_robust_regression",
        robust_regression,
        {"x": _t(x), "y": _t(y), "nu": 4.0},
        None,
        None,
        None,
        ("positive", "plate", "float_hyper", "heavy_tails"),
        notes="no reference (non-conjugate)",
    )


# Pyro's LKJ tutorial, verbatim shape conventions: theta is a batch site of shape (d,) outside
# any plate, L_omega ~ LKJCholesky, MVN observations with scale_tril.
def lkj_mvn(y):
    d = y.shape[1]
    N = y.shape[0]
    options = dict(dtype=y.dtype, device=y.device)
    theta = pyro.sample("theta", dist.HalfCauchy(torch.ones(d, **options)))
    concentration = torch.ones((), **options)
    L_omega = pyro.sample("L_omega", dist.LKJCholesky(d, concentration))
    L_Omega = torch.mm(torch.diag(theta.sqrt()), L_omega)
    mu = torch.zeros(d, **options)
    with pyro.plate("observations", N):
        obs = pyro.sample("obs", dist.MultivariateNormal(mu, scale_tril=L_Omega), obs=y)
    return obs


def _case_lkj():
    rng = np.random.default_rng(130)
    cov = np.array([[2.0, 0.6, -0.3], [0.6, 1.0, 0.2], [-0.3, 0.2, 0.5]])
    y = rng.multivariate_normal(np.zeros(3), cov, size=30)
    return ForeignCase(
        "lkj_cholesky_mvn",
        lkj_mvn,
        {"y": _t(y)},
        None,
        None,
        None,
        ("lkj_cholesky", "positive", "mvn_obs", "batch_site_outside_plate", "plate"),
        notes="no reference (LKJ prior, non-conjugate)",
    )


# Ordinal regression with ordered cutpoints via TransformedDistribution(..., OrderedTransform())
# and OrderedLogistic observations (NumPyro's ordinal regression example), long categories.
def ordinal_regression(x, y, n_categories):
    beta = pyro.sample("beta", dist.Normal(0.0, 3.0))
    cutpoints = pyro.sample(
        "cutpoints",
        dist.TransformedDistribution(
            dist.Normal(0.0, 5.0).expand([n_categories - 1]).to_event(1), OrderedTransform()
        ),
    )
    with pyro.plate("data", len(y)):
        pyro.sample("y", dist.OrderedLogistic(x * beta, cutpoints), obs=y)


def _case_ordinal():
    rng = np.random.default_rng(131)
    n = 40
    x = rng.normal(size=n)
    eta = 1.2 * x + rng.logistic(size=n)
    y = np.digitize(eta, [-1.0, 0.3, 1.5])
    return ForeignCase(
        "ordinal_regression_ordered_cutpoints",
        ordinal_regression,
        {"x": _t(x), "y": _t(y, torch.long), "n_categories": 4},
        None,
        None,
        None,
        ("ordered", "transformed_distribution", "long_data", "int_hyper", "expand", "to_event"),
        notes="no reference (non-conjugate)",
    )


# NumPyro's eight schools, non-centered, with theta as a pyro.deterministic site (real data from
# Rubin 1981 / BDA); y is optional so the model also works as a prior predictive.
def eight_schools(J, sigma, y=None):
    mu = pyro.sample("mu", dist.Normal(0.0, 5.0))
    tau = pyro.sample("tau", dist.HalfCauchy(5.0))
    with pyro.plate("J", J):
        theta_tilde = pyro.sample("theta_tilde", dist.Normal(0.0, 1.0))
        theta = pyro.deterministic("theta", mu + tau * theta_tilde)
        pyro.sample("obs", dist.Normal(theta, sigma), obs=y)


def _case_eight_schools():
    data = {
        "J": 8,
        "sigma": _t([15.0, 10.0, 16.0, 11.0, 9.0, 11.0, 10.0, 18.0]),
        "y": _t([28.0, 8.0, -3.0, 7.0, -1.0, 1.0, 18.0, 12.0]),
    }
    return ForeignCase(
        "pyro_eight_schools",  # the zoo's own is eight_schools_noncentered
        eight_schools,
        data,
        None,
        None,
        None,
        ("deterministic", "positive", "plate", "int_hyper", "heavy_tails"),
        notes="no reference (HalfCauchy hyper-prior); classic data",
    )


# NumPyro's GP example: marginal likelihood with LogNormal kernel hyper-parameters, kernel built
# by hand with broadcasting and noise + jitter on the diagonal.
def gp_kernel(X, Z, var, length, noise, jitter=1.0e-6, include_noise=True):
    deltaXsq = torch.pow((X[:, None] - Z) / length, 2.0)
    k = var * torch.exp(-0.5 * deltaXsq)
    if include_noise:
        k = k + (noise + jitter) * torch.eye(X.shape[0])
    return k


def gp_marginal(X, Y):
    var = pyro.sample("kernel_var", dist.LogNormal(0.0, 1.0))
    noise = pyro.sample("kernel_noise", dist.LogNormal(-2.0, 1.0))
    length = pyro.sample("kernel_length", dist.LogNormal(0.0, 1.0))
    k = gp_kernel(X, X, var, length, noise)
    pyro.sample(
        "Y",
        dist.MultivariateNormal(loc=torch.zeros(X.shape[0]), covariance_matrix=k),
        obs=Y,
    )


def _case_gp_marginal():
    rng = np.random.default_rng(132)
    X = np.linspace(-2.0, 2.0, 15)
    Y = np.sin(2.0 * X) + 0.2 * rng.normal(size=15)
    return ForeignCase(
        "gp_marginal_lognormal_hypers",
        gp_marginal,
        {"X": _t(X), "Y": _t(Y)},
        None,
        None,
        None,
        ("gp_kernel", "mvn_obs", "positive", "broadcast_diff", "helper_function"),
        notes="no reference (non-conjugate kernel hyper-parameters)",
    )


_BUILDERS = (
    _case_linreg,
    _case_normal_normal,
    _case_factor,
    _case_loop_normal,
    _case_stack,
    _case_flat_mean,
    _case_flat_loc_scale,
    _case_hier_nested,
    _case_varying_intercepts,
    _case_loop_hier,
    _case_gp,
    _case_mvn,
    _case_two_plates,
    _case_beta_binomial,
    _case_gamma_poisson,
    _case_dirichlet_categorical,
    _case_dirichlet_multinomial,
    _case_normal_precision,
    _case_nig,
    _case_lognormal_scale,
    _case_logistic,
    _case_poisson_regression,
    _case_hmm_normal,
    _case_hmm_poisson,
    _case_hmm_categorical,
    _case_hmm_shift,
    _case_mixture_weight,
    _case_mixture_loc,
    _case_robust,
    _case_lkj,
    _case_ordinal,
    _case_eight_schools,
    _case_gp_marginal,
)

CORPUS: list[ForeignCase] = [build() for build in _BUILDERS]

CASES: dict[str, ForeignCase] = {case.name: case for case in CORPUS}

FEATURES: tuple[str, ...] = tuple(sorted({f for case in CORPUS for f in case.features}))
