"""Laplace's approximation of any model whose latent sites are all continuous (seed 002 §7.1).

On the unconstrained space u (every latent site mapped to R^d by its support's bijection, the
log-Jacobian part of the density), with L(u) = log p(y, u)::

    u*     = argmax L(u)                        L-BFGS from a few starts, then Newton steps
    H      = d^2 L / du^2 at u*                 (autograd), -H positive definite
    p(u | y) ~= N(u*, (-H)^-1)
    log p(y) ~= L(u*) + (D / 2) log 2 pi - (1 / 2) log det(-H)

The Gaussian is on the unconstrained space: its draws are mapped to each site's support, so a
positive or simplex-valued site gets a log-normal-like or logistic-normal-like marginal, not a
Gaussian one. Exact (means, covariance and evidence) for a Gaussian posterior on real sites.
Everything is computed in float64 from the model's own log density (:mod:`zoo_inference.density`).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyro
import torch
from torch.distributions.transforms import ComposeTransform, IndependentTransform, Transform

from .arviz_io import make_run, psis_pareto_k
from .context import EngineContext
from .density import BatchedDensity, batched_density
from .importance import RELIABLE_K
from .posterior import complete
from .reference import in_float64
from .results import Evidence, NumericalFailure, Run

SPACE = "unconstrained"
"""Where the Gaussian lives: the samplers' unconstrained space (log-Jacobians included)."""
CHECK_DRAWS = 4000  # draws of the Gaussian its Pareto k-hat is estimated from
NEWTON_STEPS = 20  # Newton's method after L-BFGS: quadratic convergence to the exact mode
ROUNDING = 1e-12  # relative rounding of a log density's value, below which steps go by gradient


@dataclass
class LaplaceFit:
    """The mode u* (D,), the covariance (-H)^-1 and its Cholesky factor of -H, the log density
    at the mode, the Laplace evidence estimate, the trace of L per iteration of the best start
    and the largest |gradient| left at the mode."""

    mode: torch.Tensor
    cov: torch.Tensor
    chol_precision: torch.Tensor
    log_joint: float
    log_evidence: float
    trace: list[float]
    max_abs_grad: float


def _value_grad(f: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor) -> tuple[float, Any]:
    x = x.detach().clone().requires_grad_(True)
    with torch.enable_grad():
        value = f(x)
        (grad,) = torch.autograd.grad(value, x, allow_unused=True)
    grad = torch.zeros_like(x) if grad is None else grad
    return float(value.detach()), grad.detach()


def _hessian(f: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor) -> torch.Tensor:
    hess = torch.autograd.functional.hessian(f, x.detach())
    return (hess + hess.T) / 2


def lbfgs(
    value_grad: Callable[[torch.Tensor], tuple[torch.Tensor, torch.Tensor]],
    start: torch.Tensor,
    max_iter: int,
    tol: float,
) -> tuple[torch.Tensor, list[float]]:
    """Maximise L from ``start`` by L-BFGS with a strong-Wolfe line search, ``value_grad(u)``
    giving L(u) and its gradient (-inf and a zero gradient where L is not finite). The trace is
    the best L found after each evaluation (monotone); the point returned is where it was found
    (a line search that strays out of the support never loses it)."""
    x = start.detach().clone().requires_grad_(True)
    opt = torch.optim.LBFGS(
        [x],
        lr=1.0,
        max_iter=max_iter,
        max_eval=max_iter * 5,
        history_size=20,
        tolerance_grad=tol,
        tolerance_change=1e-14,
        line_search_fn="strong_wolfe",
    )
    trace: list[float] = []
    best = start.detach().clone()

    def closure() -> torch.Tensor:
        nonlocal best
        lp, grad = value_grad(x.detach())
        x.grad = -grad
        value = float(lp)
        loss = torch.as_tensor(-value, dtype=x.dtype)
        if math.isfinite(value) and (not trace or value > trace[-1]):
            trace.append(value)
            best = x.detach().clone()
        elif trace:
            trace.append(trace[-1])
        return loss

    opt.step(closure)
    return best, trace or [-math.inf]


def _newton(
    f: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor, trace: list[float], tol: float
) -> torch.Tensor:
    """Newton steps u <- u - H^-1 g with backtracking while -H is positive definite and the step
    raises L: the mode to machine precision (one step on a Gaussian posterior). Where the
    predicted rise is below L's rounding (a GP's Cholesky leaves about 1e-13 on L, near the
    mode rises of 1e-15 are predicted) L cannot judge a step, and a step that shrinks the
    gradient is taken."""
    value, grad = _value_grad(f, x)
    for _ in range(NEWTON_STEPS):
        chol, info = torch.linalg.cholesky_ex(-_hessian(f, x))
        if int(info) != 0:
            return x
        step = torch.cholesky_solve(grad[:, None], chol)[:, 0]
        decrement = float(grad @ step)  # squared Newton decrement: 2 x the predicted increase
        if not decrement > tol**2:
            return x
        t = 1.0
        while t > 1e-10:
            new = x + t * step
            new_value, new_grad = _value_grad(f, new)
            rises = new_value >= value + 1e-4 * t * decrement
            if decrement < ROUNDING * (1 + abs(value)):  # below L's rounding: the gradient says
                rises = bool(new_grad.norm() < grad.norm())
            if math.isfinite(new_value) and rises:
                break
            t /= 2
        else:
            return x
        x, value, grad = new, new_value, new_grad
        trace.append(value)
    return x


def fit_laplace(
    density: BatchedDensity, generator: torch.Generator, *, starts: int, max_iter: int, tol: float
) -> LaplaceFit:
    """The Laplace approximation of ``density`` (float64): the best mode over ``starts`` L-BFGS
    runs from the density's initial points, polished by Newton's method. NumericalFailure when
    no start reaches a point where the gradient vanishes and -H is positive definite (an
    unbounded density, as a funnel's as its scale goes to 0, has no mode)."""
    f = density.log_density

    def batched_value_grad(u: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        # the batched density's fastest form (traced, checked against f) for the line searches:
        # faster than f's autograd, to the same modes
        lp, grad = density(u[None])
        return lp[0], grad[0]

    best: tuple[torch.Tensor, list[float]] | None = None
    for _ in range(starts):
        x, trace = lbfgs(batched_value_grad, density.initial_points(generator)[0], max_iter, tol)
        if math.isfinite(trace[-1]) and (best is None or trace[-1] > best[1][-1]):
            best = (x, trace)
    if best is None:
        raise NumericalFailure("Laplace: the log density is not finite at any start")
    x, trace = best
    x = _newton(f, x, trace, tol)
    value, grad = _value_grad(f, x)
    max_abs_grad = float(grad.abs().max())
    if not max_abs_grad <= 1e-4 * (1 + abs(value)):
        raise NumericalFailure(
            f"Laplace: no mode found (|gradient| {max_abs_grad:.3g} after {max_iter} L-BFGS "
            f"iterations from {starts} starts); the log density may be unbounded (a funnel)"
        )
    neg_h = -_hessian(f, x)
    chol, info = torch.linalg.cholesky_ex(neg_h)
    if int(info) != 0:
        raise NumericalFailure(
            "Laplace: the Hessian of the log density at the mode is not negative definite"
        )
    cov = torch.cholesky_inverse(chol)
    d = x.numel()
    log_det = 2 * float(chol.diagonal().log().sum())
    log_z = value + 0.5 * d * math.log(2 * math.pi) - 0.5 * log_det
    return LaplaceFit(x, (cov + cov.T) / 2, chol, value, log_z, trace, max_abs_grad)


def _is_identity(t: Transform) -> bool:
    """``t`` (constrained -> unconstrained, as the density stores it) is the identity."""
    t = t.inv
    while isinstance(t, IndependentTransform):
        t = t.base_transform
    return isinstance(t, ComposeTransform) and not t.parts


def laplace_engine(
    ctx: EngineContext,
    *,
    num_samples: int = 4000,
    starts: int = 4,
    max_iter: int = 500,
    tol: float = 1e-9,
) -> Run:
    """Laplace approximation N(u*, (-H)^-1) on the unconstrained space: the mode by L-BFGS
    (``max_iter`` iterations, gradient tolerance ``tol``) from ``starts`` random points, the best
    polished by Newton's method; ``num_samples`` draws of the Gaussian mapped to each site's
    support. Evidence: the estimate L(u*) + (D/2) log 2 pi - (1/2) log det(-H). Sites with real
    support get the Gaussian's exact moments in the summary (all real: ``closed_form``). The
    run checks itself: ``diagnostics["pareto_k"]``, the Pareto k-hat of its draws' importance
    weights (:func:`_pareto_k`); above 0.7 it is ``unreliable``, with the reason.
    ``extras``: ``mode`` and ``cov`` (unconstrained, sites in ``sites`` order), ``space``."""
    with pyro.validation_enabled(False):  # a line search may try a point outside the support
        density, fit = in_float64(lambda **data: _fit(ctx, data, starts, max_iter, tol), ctx.data)
    gen = torch.Generator().manual_seed(ctx.seed)
    z = torch.randn(num_samples, density.dim, generator=gen, dtype=torch.float64)
    # u = u* + L^-T z has covariance L^-T L^-1 = (L L^T)^-1 = (-H)^-1
    u = fit.mode + torch.linalg.solve_triangular(fit.chol_precision.T, z.T, upper=True).T
    with torch.no_grad():
        values = density.constrain(u)
        pareto_k = _pareto_k(density, fit, gen)
    posterior = {k: v.float().numpy()[None] for k, v in values.items()}
    posterior, log_lik, omitted = complete(ctx, posterior)
    sd = fit.cov.diagonal().sqrt()
    exact = {}
    for b in density.blocks:
        if _is_identity(density.transforms[b.name]):
            exact[b.name] = (
                fit.mode[b.start : b.stop].reshape(b.shape).numpy(),
                sd[b.start : b.stop].reshape(b.shape).numpy(),
            )
    diagnostics: dict[str, Any] = {
        "iterations": len(fit.trace) - 1,
        "max_abs_grad": fit.max_abs_grad,
        "log_joint_at_mode": fit.log_joint,
        "num_samples": num_samples,
        # the Gaussian's own check: its draws as importance proposals for the posterior
        "pareto_k": pareto_k,
        "approximation": "Laplace's Gaussian",
    }
    if omitted:
        diagnostics["omitted"] = omitted
    run = make_run(
        "laplace",
        posterior,
        log_likelihood=log_lik,
        observed_data=ctx.data,
        evidence=Evidence(fit.log_evidence, "estimate"),
        traces={"log_joint": fit.trace},
        diagnostics=diagnostics,
        exact_moments=exact,
        closed_form=len(exact) == len(density.blocks),
        extras={
            "mode": fit.mode.numpy(),
            "cov": fit.cov.numpy(),
            "sites": [b.name for b in density.blocks],
            "space": SPACE,
        },
    )
    if not pareto_k > RELIABLE_K:
        return run
    caveat = (
        f"Laplace's Gaussian is far from the posterior: importance weights of its draws have "
        f"Pareto k\u0302 {pareto_k:.2f} > {RELIABLE_K} (a skewed, heavy-tailed or funnel-shaped "
        "posterior), so its means, sds and evidence estimate are not to be trusted"
    )
    return dataclasses.replace(run, status="unreliable", caveat=caveat)


def _pareto_k(density: BatchedDensity, fit: LaplaceFit, gen: torch.Generator) -> float:
    """Pareto k-hat (PSIS) of the weights p(y, u) / q(u) of :data:`CHECK_DRAWS` draws of the
    Gaussian, ``u = u* + L^-T z``: how far the posterior is from the Gaussian, seen from the run
    alone (Yao et al. 2018, "Yes, but did it work?"). About 0 or below on a Gaussian posterior;
    above 0.7 the Gaussian misses mass the posterior has (a skewed or heavy-tailed posterior, a
    funnel), and its moments cannot be trusted. Draws of their own, as many whatever the run's
    ``num_samples``: k-hat from a few hundred draws is noise (beta_bernoulli's 0.39 at 4000
    draws read above 0.7 at 100). log q(u) = -D/2 log 2 pi + sum log diag L - |z|^2 / 2."""
    z = torch.randn(CHECK_DRAWS, density.dim, generator=gen, dtype=torch.float64)
    u = fit.mode + torch.linalg.solve_triangular(fit.chol_precision.T, z.T, upper=True).T
    log_q = (
        -0.5 * z.pow(2).sum(1)
        - 0.5 * density.dim * math.log(2 * math.pi)
        + fit.chol_precision.diagonal().log().sum()
    )
    log_w = (density.values(u) - log_q).numpy()
    finite = np.isfinite(log_w)
    return psis_pareto_k(log_w[finite]) if finite.sum() > 10 else float("nan")


def _fit(
    ctx: EngineContext, data: Mapping[str, Any], starts: int, max_iter: int, tol: float
) -> tuple[BatchedDensity, LaplaceFit]:
    density = batched_density(ctx.model, data, ctx.structure, 1, dtype=torch.float64)
    gen = torch.Generator().manual_seed(ctx.seed)
    return density, fit_laplace(density, gen, starts=starts, max_iter=max_iter, tol=tol)
