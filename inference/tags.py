"""Measured tags of a model: what its posterior is like to sample, from what the zoo measures on
it, never typed in.

- ``dimension``: the unconstrained continuous coordinates a gradient sampler moves in;
- ``discrete``: the discrete latent sites (summed out by enumeration, or drawn);
- ``ode``: whether one evaluation of the log density calls an ODE solver (profiled);
- ``scale_ratio``: over draws of default nuts, how far one coordinate sets another's spread (the
  widest over the narrowest conditional sd across its range; 1 for a Gaussian): a funnel's
  scale changes across the posterior, so no one step size fits;
- ``modes``: the distinct optima that L-BFGS reaches from dispersed starts, more than one
  posterior sd apart in some coordinate (label switching, separated modes, or a ridge);
- ``excess_kurtosis``: the largest excess kurtosis of a coordinate over nuts's draws (0 for a
  Gaussian, 3 for a Laplace);
- ``nuts``: default nuts at seed 0: its status, divergences, largest R-hat, smallest bulk ESS.

:func:`labels` turns the figures into words with the thresholds below. The measuring is slow
(a nuts run); ``benchmarks/model_tags.py`` runs it over the zoo into the file
``zoo.model_tags`` reads.
"""

from __future__ import annotations

import math
import sys
import warnings
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import torch
from scipy import stats

from .density import batched_density

FUNNEL = 3.0  # scale ratio: a coordinate's spread changing 3-fold across another's range
BINS = 10  # of each coordinate, for the scale ratio
MAX_PAIRED = 400  # coordinates whose pairs the scale ratio reads (evenly spaced above it)
HEAVY_TAILS = 2.0  # excess kurtosis (Laplace: 3); a Gaussian's from 400 effective draws: sd 0.25
STARTS = 12  # L-BFGS starts for the modes
ODE_MODULES = ("torchdiffeq", "torchode", "scipy.integrate")
TAGS = ("discrete", "ode", "funnel", "multimodal", "heavy tails", "divergences", "r-hat")


def calls_ode_solver(fn: Callable[[], Any]) -> bool:
    """Whether ``fn()`` calls into an ODE solver's module (a profile of the call's frames)."""
    seen = False

    def profile(frame: Any, event: str, arg: Any) -> None:
        nonlocal seen
        if event == "call" and not seen:
            module = str(frame.f_globals.get("__name__", ""))
            seen = module.startswith(ODE_MODULES)

    previous = sys.getprofile()
    sys.setprofile(profile)
    try:
        fn()
    finally:
        sys.setprofile(previous)
    return seen


def scale_ratio(u: torch.Tensor, *, bins: int = BINS) -> float:
    """How far one coordinate sets another's spread, over the draws ``u`` (n, dim): for each
    pair i != j, the draws cut into ``bins`` equal bins of u_i, in each the sd of u_j about
    its line on u_i; the largest ratio of the widest bin's sd to the narrowest. A Gaussian's
    conditional sd is the same everywhere (ratio 1 but for noise); Neal's funnel's grows as
    e^{v/2} with v."""
    x = u.double().numpy()
    if x.shape[1] > MAX_PAIRED:  # the cost grows as dim^2
        x = x[:, np.linspace(0, x.shape[1] - 1, MAX_PAIRED).round().astype(int)]
    n, dim = x.shape
    if dim < 2 or n < 4 * bins:
        return 1.0
    m = n // bins
    worst = 1.0
    for i in range(dim):
        order = np.argsort(x[:, i], kind="stable")[: m * bins]
        xi = x[order, i].reshape(bins, m, 1)
        y = np.delete(x[order], i, axis=1).reshape(bins, m, dim - 1)
        xc, yc = xi - xi.mean(1, keepdims=True), y - y.mean(1, keepdims=True)
        sxx = (xc**2).sum(1, keepdims=True)
        slope = np.divide(
            (xc * yc).sum(1, keepdims=True), sxx, out=np.zeros((bins, 1, dim - 1)), where=sxx > 0
        )
        sd = np.sqrt(((yc - slope * xc) ** 2).mean(1))  # (bins, dim - 1)
        low, high = sd.min(0), sd.max(0)
        keep = low > 0
        if keep.any():
            worst = max(worst, float((high[keep] / low[keep]).max()))
    return worst


def excess_kurtosis(u: torch.Tensor) -> float:
    """The largest excess kurtosis over the columns of ``u`` (n, dim) that vary."""
    x = u.double().numpy()
    varies = x.std(0) > 0
    return float(stats.kurtosis(x[:, varies], axis=0).max()) if varies.any() else 0.0


def distinct_optima(
    log_density: Callable[[torch.Tensor], torch.Tensor],
    starts: torch.Tensor,
    scale: torch.Tensor,
    *,
    max_iter: int = 500,
) -> int | None:
    """How many distinct optima L-BFGS reaches from the rows of ``starts``: converged points
    (gradient norm below 1e-3) more than ``scale`` apart in some coordinate. None when no
    start converges (the density grows without bound, as at a funnel's neck)."""
    found: list[torch.Tensor] = []
    for start in starts:
        point = climb(log_density, start, max_iter)
        if point is not None and all(float(((point - f).abs() / scale).max()) > 1 for f in found):
            found.append(point)
    return len(found) or None


def climb(
    log_density: Callable[[torch.Tensor], torch.Tensor], start: torch.Tensor, max_iter: int
) -> torch.Tensor | None:
    """The optimum L-BFGS reaches from ``start``, or None where it does not converge (gradient
    norm above 1e-3) or the model breaks on the way."""
    x = start.detach().clone().requires_grad_(True)
    opt = torch.optim.LBFGS(
        [x], max_iter=max_iter, line_search_fn="strong_wolfe", tolerance_grad=1e-7
    )

    def closure() -> torch.Tensor:
        opt.zero_grad()
        loss = -log_density(x)
        if torch.isfinite(loss):
            loss.backward()
        return loss

    try:
        opt.step(closure)
    except (RuntimeError, ValueError):  # the model breaks on the way (a Cholesky, a nan scale)
        return None
    x = x.detach().requires_grad_(True)
    value = log_density(x)
    if not torch.isfinite(value):
        return None
    (g,) = torch.autograd.grad(value, x)
    if not torch.isfinite(g).all() or float(g.norm()) > 1e-3:
        return None
    return x.detach()


def measure(entry: Any, nuts: Callable[[], Any], *, seed: int = 0) -> dict[str, Any]:
    """Every tag of a registered model's ``entry`` (its model, data, structure and engines);
    ``nuts()`` makes its default nuts run (called only where nuts applies)."""
    s = entry.structure
    tags: dict[str, Any] = {
        "dimension": None,
        "discrete": len(s.discrete),
        "ode": None,
        "scale_ratio": None,
        "modes": None,
        "excess_kurtosis": None,
        "nuts": None,
    }
    why = entry.why_not("nuts")
    if why is not None:
        tags["nuts"] = {"status": "does not apply", "reason": why}
        return tags
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        density = batched_density(entry.model, entry.load_data(), s, 1, dtype=torch.float64)
    tags["dimension"] = density.dim
    probe = density.random_points(density.generator(seed), scale=0.5)[0]
    tags["ode"] = calls_ode_solver(lambda: density.log_density(probe))
    run = nuts()
    d = run.diagnostics
    tags["nuts"] = {
        "status": run.status,
        "divergences": int(d.get("divergences", 0) or 0),
        "max_r_hat": _finite(run.summary["r_hat"].max()) if "r_hat" in run.summary else None,
        "min_ess_bulk": _finite(run.summary["ess_bulk"].min())
        if "ess_bulk" in run.summary
        else None,
        "reasons": list(run.reasons),
    }
    if run.idata is None or not hasattr(run.idata, "posterior"):
        return tags
    post = run.idata.posterior
    n = post.sizes["chain"] * post.sizes["draw"]
    u = density.unconstrain(
        {b.name: post[b.name].values.reshape(n, *b.shape) for b in density.blocks}
    )
    tags["excess_kurtosis"] = excess_kurtosis(u)
    tags["scale_ratio"] = scale_ratio(u)
    g = torch.Generator().manual_seed(seed)
    starts = (2 * torch.rand(STARTS, density.dim, generator=g, dtype=torch.float64) - 1) * 2
    sd = u.double().std(0).clamp_min(1e-6)
    tags["modes"] = distinct_optima(density.log_density, starts, sd)
    return tags


def labels(tags: Mapping[str, Any]) -> tuple[str, ...]:
    """The measured figures as words (:data:`TAGS`, in its order): discrete, ode, funnel,
    multimodal, heavy tails, divergences, r-hat (above 1.01 under default nuts)."""
    out = []
    if tags.get("discrete"):
        out.append("discrete")
    if tags.get("ode"):
        out.append("ode")
    if (tags.get("scale_ratio") or 0) >= FUNNEL:
        out.append("funnel")
    if (tags.get("modes") or 0) >= 2:
        out.append("multimodal")
    if (tags.get("excess_kurtosis") or 0) >= HEAVY_TAILS:
        out.append("heavy tails")
    nuts = tags.get("nuts") or {}
    if nuts.get("divergences"):
        out.append("divergences")
    if (nuts.get("max_r_hat") or 0) > 1.01:
        out.append("r-hat")
    return tuple(out)


def _finite(x: Any) -> float | None:
    x = float(x)
    return x if math.isfinite(x) else None
