"""Gaussian-process regression: a prior over functions, the function values integrated out."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pyro
import pyro.distributions as dist
import torch
from pyro.distributions import constraints
from scipy import optimize

import zoo
from zoo_inference.algorithms.gp import (
    DEFAULT_STARTS,
    HYPERS,
    as_float64,
    cholesky_normal_log_pdf,
    fit_hyperparameters,
    gp_predict,
    log_marginal_likelihood,
    rbf_kernel,
)

JITTER = 1e-5


def hyperpriors() -> dict[str, dist.TorchDistribution]:
    """Priors of the hyper-parameters, sized for inputs in [0, 5] and outputs of order one."""
    return {
        # median 1 input unit, 95% in (0.14, 7.1): from wiggles a little slower than the spacing of
        # 30 points on [0, 5] to a function that is almost linear across the whole range
        "lengthscale": dist.LogNormal(0.0, 1.0),
        # signal variance sigma_f^2: median 1 (function values of order +-1), 95% in (0.14, 7.1)
        "variance": dist.LogNormal(0.0, 1.0),
        # noise sd: half-normal on the output's scale; most mass below 1, none excluded near 0
        "noise": dist.HalfNormal(1.0),
    }


def _noisy_sine(seed: int = 0) -> dict[str, torch.Tensor]:
    """30 inputs uniform on [0, 5] (sorted), y = sin(x) + N(0, 0.1^2) (seed notes 002 M12)."""
    rng = np.random.default_rng(seed)
    x = np.sort(rng.uniform(0.0, 5.0, 30))
    y = np.sin(x) + 0.1 * rng.standard_normal(30)
    return {"x": torch.tensor(x, dtype=torch.float32), "y": torch.tensor(y, dtype=torch.float32)}


@zoo.register(
    data=_noisy_sine,
    params=HYPERS,
    figures={"fit": {"x": "x", "y": "y", "mean": "f_mean", "sd": "f_sd"}},
    engine_options={
        "svi": {"num_steps": 1500, "lr": 0.05},
        "nuts": {"num_samples": 500, "warmup": 500},
    },
    seed_ref="002 ch. 10 (L1937–2056), ch. 9 (L1852)",
    math=[
        r"\ell \sim \mathrm{LogNormal}(0,\, 1),"
        r" \quad \sigma_f^2 \sim \mathrm{LogNormal}(0,\, 1),"
        r" \quad \sigma_n \sim \mathrm{HalfNormal}(1)",
        r"f \sim \mathcal{GP}(0,\, k), \quad k(x, x') = \sigma_f^2 \exp(-(x - x')^2 / 2\ell^2)",
        r"y_i = f(x_i) + \epsilon_i, \quad \epsilon_i \sim \mathcal{N}(0,\, \sigma_n^2)",
        r"\Rightarrow\ y \sim \mathcal{N}(0,\, K + \sigma_n^2 I), \quad K_{ik} = k(x_i, x_k)",
    ],
    known={
        "mams": zoo.Known("slow", "test_mams checks mams against closed forms and by SBC"),
    },
)
def gaussian_process(x: torch.Tensor, y: torch.Tensor) -> None:
    r"""GP regression with an RBF kernel; f integrated out, the hyper-parameters inferred.

    Generative story (seed 002 ch. 10: L2004, L2035–2037; f marginalised, L1933)::

        l        ~ LogNormal(0, 1)          lengthscale (input units)
        sigma_f2 ~ LogNormal(0, 1)          signal variance
        sigma_n  ~ HalfNormal(1)            noise sd
        f        ~ GP(0, k),  k(x, x') = sigma_f2 exp(-(x - x')^2 / (2 l^2))
        y_i      = f(x_i) + eps_i,  eps_i ~ N(0, sigma_n^2)
        =>  y    ~ MVN(0, K + sigma_n^2 I),  K_ik = k(x_i, x_k)

            l, sigma_f2, sigma_n ---> [y]     (f integrated out analytically)

    No closed form over the hyper-parameters: NUTS samples them; SVI with ``guide="delta"``
    maximises log p(y | theta) + log p(theta), the type-II MAP (type-II maximum likelihood when
    the priors are flat); the ``gp_posterior`` engine conditions on hyper-parameters (default:
    the type-II ML estimate) and returns the closed-form posterior of f (L2023, L2027) in its
    extras (f is not a site). The deterministic sites ``f_mean`` and ``f_sd`` are f's posterior
    mean and sd at the inputs given each draw of the hyper-parameters: averaged over a sampler's
    draws they give the fit and band the report draws over the data. Ground truth: the
    three-dimensional posterior by quadrature.
    """
    prior = hyperpriors()
    lengthscale = pyro.sample("lengthscale", prior["lengthscale"])
    variance = pyro.sample("variance", prior["variance"])
    noise = pyro.sample("noise", prior["noise"])
    n = len(x)
    K = rbf_kernel(x, x, lengthscale, variance)  # uses x[:, None] - x[None, :]
    # JITTER (1e-5, in squared units of y) keeps the float32 Cholesky stable where a sampler
    # tries sigma_n near 0; against sigma_n^2 of about 0.01 it changes nothing that is measured
    L = torch.linalg.cholesky(K + (noise**2 + JITTER)[..., None, None] * torch.eye(n))
    # f at the inputs given the hyper-parameters (L2023, L2027): mean K (K + s^2 I)^-1 y and
    # variance diag(K - K (K + s^2 I)^-1 K); the report draws them as the fit over the data
    v = torch.linalg.solve_triangular(L, K, upper=False)
    pyro.deterministic("f_mean", (K @ torch.cholesky_solve(y[:, None], L))[..., 0])
    f_var = K.diagonal(dim1=-2, dim2=-1) - (v**2).sum(-2)
    pyro.deterministic("f_sd", f_var.clamp(min=0.0).sqrt())
    pyro.sample("y", dist.MultivariateNormal(torch.zeros(n), scale_tril=L), obs=y)


@gaussian_process.set_guide
def _() -> None:
    """Mean-field LogNormal factors for the three positive hyper-parameters."""
    start = {"lengthscale": 0.0, "variance": 0.0, "noise": float(np.log(0.3))}
    for name in HYPERS:
        loc = pyro.param(f"q_{name}_loc", torch.tensor(start[name]))
        scale = pyro.param(f"q_{name}_scale", torch.tensor(0.2), constraint=constraints.positive)
        pyro.sample(name, dist.LogNormal(loc, scale))


@gaussian_process.synthetic
def _(seed: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """f drawn from the GP prior with l = 1, sigma_f2 = 1 at 30 sorted inputs on [0, 5], noise
    sd 0.1: data with known hyper-parameters and f (torch's generator, seeded by the runner)."""
    truth = {"lengthscale": 1.0, "variance": 1.0, "noise": 0.1}
    x = torch.sort(5.0 * torch.rand(30)).values.double()
    K = rbf_kernel(x, x, truth["lengthscale"], truth["variance"]) + 1e-8 * torch.eye(30)
    f = torch.linalg.cholesky(K) @ torch.randn(30, dtype=torch.float64)
    y = f + truth["noise"] * torch.randn(30, dtype=torch.float64)
    values = {k: torch.tensor(v) for k, v in truth.items()}
    values["f"] = f.float()
    return {"x": x.float(), "y": y.float()}, values


# -------------------------------------------------------------- closed forms given theta


@gaussian_process.reference("gp_posterior")
def _(
    x: torch.Tensor,
    y: torch.Tensor,
    *,
    lengthscale: float | None = None,
    variance: float | None = None,
    noise: float | None = None,
    objective: str = "ml",
    x_new: Sequence[float] | None = None,
) -> zoo.Estimate:
    """Closed-form posterior of f given hyper-parameters (L2023, L2027); missing ones by
    type-II ML (``objective="ml"``) or MAP (``"map"``).

    The estimate holds the hyper-parameters it conditions on; ``extras`` hold the posterior of f
    at the data (``f_mean``, ``f_sd``, ``f_cov``) and at ``x_new`` if given (``f_new_*``). The
    evidence is log p(y | theta), conditional on them."""
    if objective not in ("ml", "map"):
        raise zoo.ZooError(f"objective must be 'ml' or 'map', got {objective!r}")
    given = {"lengthscale": lengthscale, "variance": variance, "noise": noise}
    for k, v in given.items():
        number = isinstance(v, int | float) and not isinstance(v, bool)
        if v is not None and not (number and np.isfinite(v) and v > 0):
            raise zoo.ZooError(f"{k} must be a positive number, got {v!r}")
    if x_new is not None:
        xn = np.asarray(x_new, dtype=float).reshape(-1)
        if xn.size == 0 or not np.all(np.isfinite(xn)):
            raise zoo.ZooError("x_new must be a non-empty sequence of finite numbers")
    fixed = {k: float(v) for k, v in given.items() if v is not None}
    trace: list[float]
    if len(fixed) == len(HYPERS):
        theta, trace = fixed, []
    else:
        theta, trace = fit_hyperparameters(
            x, y, objective=objective, fixed=fixed, prior=hyperpriors()
        )
    mean, cov = gp_predict(x, y, x, **theta)
    extras: dict[str, Any] = {
        "f_mean": mean,
        "f_sd": np.sqrt(np.clip(np.diag(cov), 0.0, None)),
        "f_cov": cov,
        "hyperparameters_source": "given"
        if not trace
        else f"type-II {'ML' if objective == 'ml' else 'MAP'} (L-BFGS)",
    }
    if x_new is not None:
        m_new, c_new = gp_predict(x, y, xn, **theta)
        extras.update(
            x_new=xn, f_new_mean=m_new, f_new_sd=np.sqrt(np.clip(np.diag(c_new), 0, None))
        )
        extras["f_new_cov"] = c_new
    return zoo.Estimate(
        values=theta,
        # the optimiser's objective per iteration: log p(y | theta) (+ log p(theta) for MAP)
        traces={"log_likelihood" if objective == "ml" else "log_posterior": trace} if trace else {},
        log_evidence=log_marginal_likelihood(x, y, **theta),
        extras=extras,
    )


# ------------------------------------------------------------------ ground truth by quadrature
def log_posterior_in_logs(x: torch.Tensor, y: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """Unnormalised log density of u = (log l, log sigma_f2, log sigma_n), shape (..., 3):
    log p(y | theta) + log p(theta) + sum(u) (the Jacobian of theta = exp(u)); the likelihood
    is the model's own, jitter included. Batched over leading dims, float64."""
    theta = u.exp()
    ls, var, noise = theta[..., 0], theta[..., 1], theta[..., 2]
    n = len(x)
    cov = rbf_kernel(x, x, ls, var) + (noise**2 + JITTER)[..., None, None] * torch.eye(
        n, dtype=torch.float64
    )
    log_lik = cholesky_normal_log_pdf(torch.linalg.cholesky(cov), y)
    prior = hyperpriors()
    log_prior = sum(prior[h].log_prob(theta[..., i]) for i, h in enumerate(HYPERS))
    return log_lik + log_prior + u.sum(-1)


@gaussian_process.truth
def _(x: torch.Tensor, y: torch.Tensor) -> zoo.GroundTruth:
    """Posterior means and sds of (l, sigma_f2, sigma_n) by 3-D quadrature (memoised per data)."""
    key = (as_float64(x).numpy().tobytes(), as_float64(y).numpy().tobytes())
    if key not in _TRUTHS:
        _TRUTHS.clear()  # one dataset at a time is enough
        _TRUTHS[key] = hyperposterior_quadrature(x, y)
    return _TRUTHS[key]


_TRUTHS: dict[tuple[bytes, bytes], zoo.GroundTruth] = {}


def hyperposterior_quadrature(
    x: Any, y: Any, points: int = 30, width: float = 7.5
) -> zoo.GroundTruth:
    """Posterior means and sds of (l, sigma_f2, sigma_n) by quadrature on a 3-D grid in their logs.

    The grid is centred at the mode of the density in log coordinates and spans +-``width``
    Laplace sds (from the Hessian there) per axis with ``points`` nodes (about 0.5 sd apart): for
    a smooth, fast-decaying integrand the equal-weight rule converges geometrically (40 nodes and
    +-8 sds, or 56 and +-12, change the default data's moments by < 1e-6). Evidence: log p(y) =
    log of the grid sum times the cell volume."""
    xt, yt = as_float64(x), as_float64(y)

    def neg(u: np.ndarray) -> tuple[float, np.ndarray]:
        t = torch.tensor(u, dtype=torch.float64, requires_grad=True)
        value = -log_posterior_in_logs(xt, yt, t)
        value.backward()
        assert t.grad is not None  # filled by backward()
        return float(value.detach()), t.grad.numpy()

    best = min(
        (optimize.minimize(neg, np.log(s), jac=True, method="L-BFGS-B") for s in DEFAULT_STARTS),
        key=lambda r: r.fun,
    )
    mode = torch.tensor(best.x, dtype=torch.float64)
    hess = torch.autograd.functional.hessian(lambda u: -log_posterior_in_logs(xt, yt, u), mode)
    sd = torch.linalg.inv(hess).diagonal().sqrt()
    axes = [
        mode[i] + sd[i] * torch.linspace(-width, width, points, dtype=torch.float64)
        for i in range(3)
    ]
    grid = torch.stack(torch.meshgrid(*axes, indexing="ij"), -1).reshape(-1, 3)
    with torch.no_grad():
        log_p = torch.cat([log_posterior_in_logs(xt, yt, g) for g in grid.split(4096)])
    posterior = zoo.grid_posterior(log_p.numpy())
    mean, sds = posterior.moments(grid.exp().numpy())
    cell = float(torch.prod(2 * width * sd / (points - 1)))
    return zoo.GroundTruth(
        mean={h: float(mean[i]) for i, h in enumerate(HYPERS)},
        sd={h: float(sds[i]) for i, h in enumerate(HYPERS)},
        log_evidence=posterior.log_z + np.log(cell),
        source=f"quadrature: {points}^3 grid in log coordinates, +-{width} Laplace sds",
    )
