"""Pathfinder (Zhang, Carpenter, Gelman & Vehtari 2022, "Pathfinder: Parallel quasi-Newton
variational inference", JMLR 23(306)): L-BFGS on -log p, a Gaussian at every iterate, the one
with the highest ELBO kept, draws of several paths pooled and importance-resampled.

On the samplers' unconstrained space (discrete sites summed out, :mod:`zoo_inference.density`):

* one path (the paper's Algorithm 1): L-BFGS from a Uniform(-2, 2) point (Stan's start), its
  inverse Hessian at iterate l the compact form of Byrd, Nocedal & Schnabel (1994) over the
  last J updates (s, y), with a diagonal initial matrix updated as Gilbert & Lemarechal (1989)
  do: Sigma_l = diag(a) + B G B^T; the Gaussian N(mu_l, Sigma_l), mu_l = x_l + Sigma_l grad
  log p(x_l) (a Newton step), and its ELBO estimated from K draws; the path's approximation is
  the iterate with the highest ELBO, and M draws of it with log p - log q are its output. The
  L-BFGS direction is Sigma_l grad log p itself (so the optimiser and the approximation are the
  same matrix), its step length by backtracking to Armijo's condition; an update whose
  curvature s.y is not positive is skipped, as the paper does.
* several paths (Algorithm 2): the paths run in lockstep (one density call moves them all),
  their draws are pooled and ``num_samples`` resampled by their Pareto-smoothed importance
  weights (PSIS); the weights' Pareto k-hat says whether the result can be trusted.

Draws come from N(mu, Sigma) through a thin QR of diag(a)^-1/2 B (the paper's Algorithm 4):
O(D J^2) a Gaussian, no D x D matrix. Also the MCMC engines' initialisation
(``init="pathfinder"``, :func:`initial_points`).
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

from .arviz_io import RELIABLE_K, arviz, make_run, systematic_resample
from .context import EngineContext
from .density import BatchedDensity, batched_density
from .posterior import complete
from .reference import in_float64
from .results import NumericalFailure, Run, ZooError
from .structure import ModelStructure

ARMIJO = 1e-4  # sufficient increase of log p along a step, relative to the slope
HALVINGS = 40  # backtracking steps before a path's line search gives up
CURVATURE = 2.2e-16  # an update (s, y) is kept when s.y > this times |y|^2 (the paper's test)
REL_TOL = 1e-11  # a path has converged when log p changes by less than this relatively
GRAD_TOL = 1e-8  # ... or when every |gradient| is below this
EVAL_BATCH = 100  # points a density call evaluates: the paths' steps and the ELBOs' draws


@dataclass
class Gaussian:
    """N(mu, diag(a) + B G B^T) on the unconstrained space: ``mu`` (D,), ``a`` (D,), ``b``
    (D, 2m), ``g`` (2m, 2m) over the m updates kept."""

    mu: torch.Tensor
    a: torch.Tensor
    b: torch.Tensor
    g: torch.Tensor

    def covariance(self) -> torch.Tensor:
        return torch.diag(self.a) + self.b @ self.g @ self.b.T

    def times(self, v: torch.Tensor) -> torch.Tensor:
        """Sigma v for a vector v (D,)."""
        return self.a * v + self.b @ (self.g @ (self.b.T @ v))

    def sample(self, n: int, gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        """``n`` draws (n, D) and their log q (n,); raises ``NumericalFailure`` when Sigma is
        not positive definite."""
        d = self.mu.numel()
        u = torch.randn(n, d, generator=gen, dtype=self.mu.dtype)
        root = self.a.sqrt()
        log_det = self.a.log().sum()
        if self.b.shape[1] == 0:
            x = self.mu + root * u
        else:
            q, r = torch.linalg.qr(self.b / root[:, None])  # thin: q (D, k), r (k, 2m)
            inner = torch.eye(r.shape[0], dtype=r.dtype) + r @ self.g @ r.T
            chol, info = torch.linalg.cholesky_ex((inner + inner.T) / 2)
            if int(info) != 0:
                raise NumericalFailure("Pathfinder: an inverse-Hessian estimate is not positive")
            uq = u @ q
            x = self.mu + root * (uq @ chol.T @ q.T + u - uq @ q.T)
            log_det = log_det + 2 * chol.diagonal().log().sum()
        log_q = -0.5 * (log_det + u.pow(2).sum(1) + d * math.log(2 * math.pi))
        return x, log_q


def _diagonal(a: torch.Tensor, s: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Gilbert & Lemarechal's update of the diagonal inverse Hessian ``a`` by one pair (the
    paper's Form-Diag-Hessian): exact on a diagonal quadratic, s / y in one dimension."""
    pa, b, c = (y * a * y).sum(), (y * s).sum(), (s * s / a).sum()
    return 1.0 / (pa / (b * a) + y * y / b - pa * s * s / (b * c * a * a))


def _gaussian(x: torch.Tensor, grad: torch.Tensor, a: torch.Tensor, pairs: list) -> Gaussian:
    """The Gaussian at a point ``x`` with gradient ``grad`` of log p, from the diagonal ``a`` and
    the kept updates ``pairs`` [(s, y)], y the change of the gradient of -log p (Byrd, Nocedal &
    Schnabel's compact inverse Hessian: B = [S, diag(a) Y], G = [[R^-T (E + Y^T diag(a) Y) R^-1,
    -R^-T], [-R^-1, 0]], R the upper triangle of S^T Y, E its diagonal)."""
    if not pairs:
        empty = x.new_zeros(x.numel(), 0)
        sigma = Gaussian(x, a, empty, x.new_zeros(0, 0))
    else:
        s = torch.stack([p[0] for p in pairs], 1)
        y = torch.stack([p[1] for p in pairs], 1)
        sy = s.T @ y
        r_inv = torch.linalg.inv(torch.triu(sy))
        m = len(pairs)
        top = r_inv.T @ (torch.diag(sy.diagonal()) + y.T @ (a[:, None] * y)) @ r_inv
        g = torch.cat([torch.cat([top, -r_inv.T], 1), torch.cat([-r_inv, x.new_zeros(m, m)], 1)], 0)
        sigma = Gaussian(x, a, torch.cat([s, a[:, None] * y], 1), g)
    return dataclasses.replace(sigma, mu=x + sigma.times(grad))


@dataclass
class Path:
    """One path: the Gaussian at its best iterate, that iterate, the ELBO of every iterate
    (-inf where its Gaussian could not be formed), its iterations and gradient evaluations."""

    best: Gaussian
    best_iteration: int
    elbos: list[float]
    iterations: int
    gradient_evals: int

    @property
    def elbo(self) -> float:
        return self.elbos[self.best_iteration - 1]


@dataclass
class Pathfinder:
    """Multi-path Pathfinder's output: ``draws`` (num_samples, D) resampled from the pooled
    draws by PSIS weights, each path, the pooled draws' log weights (log p - log q, float64),
    their Pareto k-hat and effective sample size (of the smoothed weights), and the density
    evaluations of the ELBOs and of the pooled draws."""

    draws: torch.Tensor
    paths: list[Path]
    log_w: np.ndarray
    pareto_k: float
    ess: float
    density_evals: int

    @property
    def gradient_evals(self) -> int:
        return sum(p.gradient_evals for p in self.paths)


class _Evaluator:
    """The density at any number of points: chunks of the density's batch, the last padded."""

    def __init__(self, density: BatchedDensity) -> None:
        self.density = density

    def __call__(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        n, values, grads = self.density.chains, [], []
        for chunk in x.split(n):
            k = len(chunk)
            if k < n:
                chunk = torch.cat([chunk, chunk[:1].expand(n - k, -1)])
            v, g = self.density(chunk.to(self.density.dtype))
            values.append(v[:k].double())
            grads.append(g[:k].double())
        return torch.cat(values), torch.cat(grads)


def run_paths(
    value_grad: Callable[[torch.Tensor], tuple[torch.Tensor, torch.Tensor]],
    starts: torch.Tensor,
    gen: torch.Generator,
    *,
    max_iter: int,
    history: int,
    elbo_draws: int,
) -> list[Path]:
    """Single-path Pathfinder from each row of ``starts`` (P, D), the paths in lockstep:
    ``value_grad(x)`` gives log p and its gradient at any number of points (n, D). A path
    whose every iterate failed (none with a finite ELBO) is left out."""
    x = starts.double().clone()
    p, d = x.shape
    f, g = value_grad(x)
    evals = [1] * p
    if not torch.isfinite(f).all():
        raise NumericalFailure("Pathfinder: the log density is not finite at a path's start")
    a = [x.new_ones(d) for _ in range(p)]
    pairs: list[list[tuple[torch.Tensor, torch.Tensor]]] = [[] for _ in range(p)]
    gaussians: list[list[Gaussian | None]] = [[] for _ in range(p)]
    elbos: list[list[float]] = [[] for _ in range(p)]
    active = [True] * p
    direction = g.clone()  # Sigma_0 = I: the first step goes up the gradient
    for _ in range(max_iter):
        idx = [i for i in range(p) if active[i]]
        if not idx:
            break
        # backtracking line search, the active paths in lockstep
        t = x.new_ones(p)
        slope = (g * direction).sum(1)
        uphill = slope > 0  # else (Sigma's rounding) the path goes up its gradient
        direction = torch.where(uphill[:, None], direction, g)
        slope = torch.where(uphill, slope, (g * g).sum(1))
        accepted = [False] * p
        new_x, new_f, new_g = x.clone(), f.clone(), g.clone()
        for _ in range(HALVINGS):
            trying = [i for i in idx if not accepted[i]]
            if not trying:
                break
            pts = x[trying] + t[trying, None] * direction[trying]
            fv, gv = value_grad(pts)
            for j, i in enumerate(trying):
                evals[i] += 1
                ok = bool(torch.isfinite(fv[j])) and bool(fv[j] >= f[i] + ARMIJO * t[i] * slope[i])
                if ok:
                    accepted[i] = True
                    new_x[i], new_f[i], new_g[i] = pts[j], fv[j], gv[j]
                else:
                    t[i] /= 2
        formed = []  # the paths that moved, each with its new iterate's Gaussian
        for i in idx:
            if not accepted[i]:  # no ascent left
                active[i] = False
                continue
            s, y = new_x[i] - x[i], g[i] - new_g[i]  # y: the change of grad(-log p)
            if float(s @ y) > CURVATURE * float(y @ y):
                a_new = _diagonal(a[i], s, y)
                if bool(torch.isfinite(a_new).all() and (a_new > 0).all()):
                    a[i] = a_new
                pairs[i] = [*pairs[i], (s, y)][-history:]
            try:
                gaussian: Gaussian | None = _gaussian(new_x[i], new_g[i], a[i], pairs[i])
            except RuntimeError:  # a singular R: the iterate gets no Gaussian
                gaussian = None
            gaussians[i].append(gaussian)
            formed.append(i)
            change = abs(float(new_f[i] - f[i]))
            scale = max(abs(float(f[i])), abs(float(new_f[i])), 1.0)
            if change <= REL_TOL * scale or float(new_g[i].abs().max()) <= GRAD_TOL:
                active[i] = False
        # the ELBO of this iteration's Gaussians, every path's draws in one batch
        latest = [(i, gaussians[i][-1]) for i in formed]
        fresh = [i for i, gi in latest if gi is not None]
        formed_now = [gi for _, gi in latest if gi is not None]
        _elbos(fresh, formed_now, value_grad, gen, elbo_draws, elbos)
        x, f, g = new_x, new_f, new_g
        for i in formed:
            gi = gaussians[i][-1]
            if gi is None:
                elbos[i].append(-math.inf)
            direction[i] = gi.mu - x[i] if gi is not None else g[i]
    paths = []
    for i in range(p):
        scores = elbos[i]
        if not any(math.isfinite(e) for e in scores):  # a path stuck at its start: left out
            continue
        best = int(np.argmax(np.where(np.isfinite(scores), scores, -np.inf)))
        gaussian = gaussians[i][best]
        assert gaussian is not None
        paths.append(Path(gaussian, best + 1, scores, len(scores), evals[i]))
    if not paths:
        raise NumericalFailure(
            "Pathfinder: no iterate of any path gave a Gaussian with a finite ELBO (the log "
            "density may be unbounded or not smooth)"
        )
    return paths


def _elbos(
    idx: list[int],
    gaussians: list[Gaussian],
    value_grad: Callable[[torch.Tensor], tuple[torch.Tensor, torch.Tensor]],
    gen: torch.Generator,
    k: int,
    out: list[list[float]],
) -> None:
    """Append to ``out[i]`` the ELBO estimate (mean of log p - log q over ``k`` draws) of the
    Gaussian of path ``i``; -inf for one that cannot be sampled."""
    drawn, keep = [], []
    for i, gaussian in zip(idx, gaussians, strict=True):
        try:
            drawn.append(gaussian.sample(k, gen))
            keep.append(i)
        except NumericalFailure:
            out[i].append(-math.inf)
    if not keep:
        return
    log_p, _ = value_grad(torch.cat([x for x, _ in drawn]))
    for j, i in enumerate(keep):
        diff = log_p[j * k : (j + 1) * k] - drawn[j][1]
        elbo = float(diff.mean())
        out[i].append(elbo if math.isfinite(elbo) else -math.inf)


def pathfinder(
    density: BatchedDensity,
    gen: torch.Generator,
    *,
    num_paths: int = 4,
    num_samples: int = 1000,
    max_iter: int = 1000,
    history: int = 6,
    elbo_draws: int = 25,
    draws_per_path: int = 1000,
) -> Pathfinder:
    """Multi-path Pathfinder on ``density`` (one data set): ``num_paths`` paths from the
    density's initial points, ``draws_per_path`` draws of each path's best Gaussian pooled and
    ``num_samples`` of them resampled by their PSIS-smoothed weights."""
    if density.batch:
        raise ZooError("Pathfinder needs one data set: this density has one per chain")
    evaluate = _Evaluator(density)
    starts = torch.cat(
        [density.initial_points(gen) for _ in range(-(-num_paths // density.chains))]
    )[:num_paths]
    paths = run_paths(
        evaluate, starts, gen, max_iter=max_iter, history=history, elbo_draws=elbo_draws
    )
    pooled, log_q = zip(*(p.best.sample(draws_per_path, gen) for p in paths), strict=True)
    x = torch.cat(pooled)
    log_p, _ = evaluate(x)
    log_w = (log_p - torch.cat(log_q)).numpy()
    finite = np.isfinite(log_w)
    if finite.sum() <= 10:
        raise NumericalFailure("Pathfinder: ten or fewer of the pooled draws have a finite weight")
    smoothed = np.full_like(log_w, -np.inf)
    with np.errstate(all="ignore"):
        smoothed[finite], k = arviz().psislw(log_w[finite].copy())
    if not np.isfinite(smoothed[finite]).all():  # equal weights (an exact Gaussian): no tail
        smoothed = np.where(finite, log_w, -np.inf)
    w = np.exp(smoothed - smoothed.max())
    w /= w.sum()
    rng = np.random.default_rng(int(torch.randint(2**62, (1,), generator=gen)))
    idx = systematic_resample(smoothed, num_samples, rng)
    return Pathfinder(
        draws=x[idx],
        paths=paths,
        log_w=log_w,
        pareto_k=float(k),
        ess=float(1.0 / np.sum(w**2)),
        density_evals=len(x) + sum(len(p.elbos) * elbo_draws for p in paths),
    )


def pathfinder_density(
    model: Callable[..., Any],
    data: Mapping[str, Any],
    structure: ModelStructure,
    points: int = EVAL_BATCH,
) -> BatchedDensity:
    """The model's batched density in double precision, evaluating ``points`` points a call
    (at most :data:`EVAL_BATCH`): one call evaluates an iteration's ELBO draws of every path
    (``num_paths * elbo_draws``) where they are that few."""
    size = min(points, EVAL_BATCH)
    with pyro.validation_enabled(False):  # a line search may try a point outside the support
        return in_float64(
            lambda **d: batched_density(model, d, structure, size, dtype=torch.float64), data
        )


def initial_points(
    model: Callable[..., Any],
    data: Mapping[str, Any],
    structure: ModelStructure,
    gen: torch.Generator,
    like: BatchedDensity,
) -> tuple[torch.Tensor, int]:
    """Starts for the chains of the density ``like``, ``(chains, D)`` in its dtype and on its
    device: draws of one multi-path Pathfinder run (default options) on the model's density,
    seeded from ``gen``; and the gradient evaluations the run took."""
    seed = int(torch.randint(2**62, (1,), generator=gen, device=gen.device))
    cpu = torch.Generator().manual_seed(seed)  # Pathfinder draws on the CPU, in float64
    with pyro.validation_enabled(False):
        fit = pathfinder(pathfinder_density(model, data, structure), cpu, num_samples=like.chains)
    return fit.draws.to(dtype=like.dtype, device=like.device), fit.gradient_evals


def pathfinder_engine(
    ctx: EngineContext,
    *,
    num_paths: int = 4,
    num_samples: int = 1000,
    max_iter: int = 1000,
    history: int = 6,
    elbo_draws: int = 25,
    draws_per_path: int = 1000,
) -> Run:
    """Multi-path Pathfinder (Zhang et al. 2022): ``num_paths`` L-BFGS paths (``max_iter``
    iterations, inverse Hessian from the last ``history`` updates), on each the Gaussian with
    the highest ELBO (``elbo_draws`` draws an iterate), ``draws_per_path`` draws of each pooled
    and ``num_samples`` resampled by Pareto-smoothed importance weights. The diagnostics give
    the weights' Pareto k-hat (above 0.7 the run is ``unreliable``), their ESS, each path's
    best ELBO and iterations, and the gradient evaluations of the paths. Discrete sites are
    summed out of the density, as for the samplers, and drawn afterwards given each draw."""
    density = pathfinder_density(ctx.model, ctx.data, ctx.structure, num_paths * elbo_draws)
    gen = torch.Generator().manual_seed(ctx.seed)
    with pyro.validation_enabled(False):
        fit = pathfinder(
            density,
            gen,
            num_paths=num_paths,
            num_samples=num_samples,
            max_iter=max_iter,
            history=history,
            elbo_draws=elbo_draws,
            draws_per_path=draws_per_path,
        )
        values = density.constrain(fit.draws)
    posterior = {k: v.float().numpy()[None] for k, v in values.items()}
    pyro.set_rng_seed(ctx.seed)  # discrete sites recovered from their own stream
    posterior, log_lik, omitted = complete(ctx, posterior, recover=ctx.structure.discrete)
    diagnostics: dict[str, Any] = {
        "pareto_k": fit.pareto_k,
        "ess": fit.ess,
        "num_samples": num_samples,
        "num_paths": len(fit.paths),
        "elbo_per_path": [p.elbo for p in fit.paths],
        "iterations_per_path": [p.iterations for p in fit.paths],
        "best_iteration_per_path": [p.best_iteration for p in fit.paths],
        "gradient_evals": fit.gradient_evals,
        "density_evals": fit.density_evals,
    }
    if len(fit.paths) < num_paths:
        diagnostics["paths_left_out"] = num_paths - len(fit.paths)  # stuck at their starts
    if omitted:
        diagnostics["omitted"] = omitted
    best = max(fit.paths, key=lambda p: p.elbo)
    run = make_run(
        "pathfinder",
        posterior,
        log_likelihood=log_lik,
        observed_data=ctx.data,
        traces={"elbo": best.elbos},
        diagnostics=diagnostics,
    )
    if not fit.pareto_k > RELIABLE_K:
        return run
    caveat = (
        f"Pathfinder's Gaussians are far from the posterior: importance weights of their "
        f"draws have Pareto k\u0302 {fit.pareto_k:.2f} > {RELIABLE_K}, so the resampled draws' "
        "means and sds are not to be trusted (run an MCMC engine, perhaps init='pathfinder')"
    )
    return dataclasses.replace(run, status="unreliable", caveat=caveat)
