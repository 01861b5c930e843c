"""Gaussian-process regression with an RBF kernel in closed form (seed 002 ch. 10): the kernel,
the marginal likelihood and the posterior of f given the hyper-parameters, by Cholesky in
float64, and their type-II maximum likelihood or MAP."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pyro.distributions as dist
import torch
from scipy import optimize

HYPERS = ("lengthscale", "variance", "noise")
"""The RBF GP's hyper-parameters: l, the signal variance sigma_f^2 and the noise sd sigma_n."""
DEFAULT_STARTS = ((1.0, 1.0, 0.3), (0.3, 1.0, 0.1), (3.0, 1.0, 0.5))  # (l, sigma_f2, sigma_n)


def rbf_kernel(x1: torch.Tensor, x2: torch.Tensor, lengthscale: Any, variance: Any) -> torch.Tensor:
    """RBF kernel k(x, x') = sigma_f^2 exp(-(x - x')^2 / (2 l^2)) (seed 002 ch. 10, L2035).

    ``x1`` (N,), ``x2`` (M,) -> (..., N, M); the hyper-parameters may carry leading batch dims
    (one kernel matrix per draw)."""
    ls = torch.as_tensor(lengthscale, dtype=x1.dtype)[..., None, None]
    var = torch.as_tensor(variance, dtype=x1.dtype)[..., None, None]
    return var * torch.exp(-0.5 * (x1[:, None] - x2[None, :]) ** 2 / ls**2)


def as_float64(v: Any) -> torch.Tensor:
    """``v`` as a float64 tensor."""
    return torch.as_tensor(np.asarray(v, dtype=float), dtype=torch.float64)


def rbf_cholesky(
    x: torch.Tensor,
    lengthscale: float | torch.Tensor,
    variance: float | torch.Tensor,
    noise: float | torch.Tensor,
) -> torch.Tensor:
    """Lower Cholesky factor of K + sigma_n^2 I (float64)."""
    eye = torch.eye(len(x), dtype=torch.float64)
    return torch.linalg.cholesky(rbf_kernel(x, x, lengthscale, variance) + noise**2 * eye)


def cholesky_normal_log_pdf(L: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """log N(y | 0, L L') from the Cholesky factor L (batched over leading dims)."""
    a = torch.linalg.solve_triangular(L, y.expand(L.shape[:-1])[..., None], upper=False)[..., 0]
    log_det = torch.log(torch.diagonal(L, dim1=-2, dim2=-1)).sum(-1)
    return -0.5 * (a**2).sum(-1) - log_det - 0.5 * L.shape[-1] * np.log(2 * np.pi)


def log_marginal_likelihood(
    x: Any, y: Any, lengthscale: float, variance: float, noise: float
) -> float:
    """log p(y | theta) = -1/2 y' (K + s^2 I)^-1 y - sum log diag(L) - n/2 log 2 pi, with
    L L' = K + s^2 I (Cholesky), in float64."""
    return float(
        cholesky_normal_log_pdf(
            rbf_cholesky(as_float64(x), lengthscale, variance, noise), as_float64(y)
        )
    )


def gp_predict(
    x: Any, y: Any, x_new: Any, lengthscale: float, variance: float, noise: float
) -> tuple[np.ndarray, np.ndarray]:
    """Posterior of f at ``x_new`` given theta (seed 002 L2023, L2027):
    E[f*] = K*' (K + s^2 I)^-1 y,  Cov[f*] = K** - K*' (K + s^2 I)^-1 K*,  by Cholesky."""
    xt, yt, xs = as_float64(x), as_float64(y), as_float64(x_new)
    L = rbf_cholesky(xt, lengthscale, variance, noise)
    k_star = rbf_kernel(xt, xs, lengthscale, variance)  # (n, m)
    alpha = torch.cholesky_solve(yt[:, None], L)[:, 0]
    v = torch.linalg.solve_triangular(L, k_star, upper=False)
    mean = k_star.T @ alpha
    cov = rbf_kernel(xs, xs, lengthscale, variance) - v.T @ v
    return mean.numpy(), cov.numpy()


def fit_hyperparameters(
    x: Any,
    y: Any,
    *,
    objective: str = "ml",
    fixed: dict[str, float] | None = None,
    starts: Sequence[Sequence[float]] = DEFAULT_STARTS,
    prior: Mapping[str, dist.TorchDistribution] | None = None,
) -> tuple[dict[str, float], list[float]]:
    """Type-II maximum likelihood (``objective="ml"``: max log p(y | theta)) or type-II MAP
    (``"map"``: + log p(theta), ``prior`` giving each hyper-parameter's distribution) of the
    hyper-parameters not in ``fixed``, by L-BFGS on their logs with exact gradients (torch
    autograd), best of a few starts. Returns the estimate and the objective's trace along the
    best run."""
    fixed = dict(fixed or {})
    free = [h for h in HYPERS if h not in fixed]
    xt, yt = as_float64(x), as_float64(y)
    if objective == "map" and prior is None:
        raise ValueError("type-II MAP needs the hyper-parameters' prior")
    seen: dict[bytes, float] = {}

    def neg(z: np.ndarray) -> tuple[float, np.ndarray]:
        log_free = torch.tensor(z, dtype=torch.float64, requires_grad=True)
        theta = {h: torch.tensor(float(v), dtype=torch.float64) for h, v in fixed.items()}
        theta.update({h: log_free[i].exp() for i, h in enumerate(free)})
        value = cholesky_normal_log_pdf(rbf_cholesky(xt, *(theta[h] for h in HYPERS)), yt)
        if objective == "map":
            assert prior is not None  # checked above
            value = value + sum(prior[h].log_prob(theta[h]) for h in HYPERS)
        (-value).backward()
        seen[z.tobytes()] = float(value.detach())
        assert log_free.grad is not None  # filled by backward()
        return -seen[z.tobytes()], log_free.grad.numpy()

    best = None
    for start in starts:
        z0 = np.log([dict(zip(HYPERS, start, strict=True))[h] for h in free])
        trace: list[float] = []
        res = optimize.minimize(
            neg,
            z0,
            jac=True,
            method="L-BFGS-B",
            callback=lambda z, tr=trace: tr.append(seen.get(z.tobytes(), np.nan)),
            options={"gtol": 1e-10, "ftol": 1e-14, "maxiter": 1000},
        )
        trace.append(-float(res.fun))
        if best is None or res.fun < best[0].fun:
            best = (res, trace)
    if best is None:
        raise ValueError("fit_hyperparameters needs at least one start")
    res, trace = best
    est = {h: float(v) for h, v in fixed.items()}
    est.update({h: float(np.exp(res.x[i])) for i, h in enumerate(free)})
    return {h: est[h] for h in HYPERS}, trace
