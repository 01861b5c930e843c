"""Exact samplers of low-dimensional posteriors (seed 003 L28–60): rejection sampling and
inverse-CDF sampling, generic engines on the model's own log density.

Rejection sampling (L34–60): with a proposal q and a bound M >= p(y, theta) / q(theta) for every
theta, draw theta ~ q and u ~ U(0, 1) and accept theta when u < p(y, theta) / (M q(theta)); the
accepted draws are exact draws of p(theta | y), and the acceptance probability is p(y) / M, so
the acceptance rate times M estimates the evidence. Two envelopes:

``prior``      q = the prior (the model run forward), p(y, theta) / q(theta) = the likelihood
               L(theta) with discrete sites summed out, M = its maximum (the document's form);
``student_t``  q = a multivariate Student-t (``DF`` degrees of freedom) on the unconstrained
               space, centred at the posterior mode with ``T_SCALE`` times Laplace's sds: heavier
               tails than any posterior whose log density falls at least linearly, so the ratio
               is bounded; M its maximum.

M is found by optimisation (L-BFGS from the best of a pilot batch of proposals, and the mode),
times a safety factor e^``MARGIN``. A proposal whose ratio exceeds M proves M wrong: M is raised
past it (re-optimised from there), the draws accepted so far are discarded, and sampling
restarts (``diagnostics["restarts"]``); after ``MAX_RESTARTS`` the run fails.

Inverse-CDF sampling (L28–32) of a one-dimensional posterior: the log density on the
unconstrained line is interpolated linearly between ``GRID`` nodes spanning all but e^-``TAIL``
of the mass, so the density is piecewise exponential; its CDF is exact on that interpolant and
inverted in closed form, x = F^-1(u) for u ~ U(0, 1). The interpolant's mass is the evidence by
quadrature.
"""

from __future__ import annotations

import dataclasses
import math
import warnings
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import pyro
import pyro.distributions as dist
import torch
from pyro.poutine.messenger import Messenger
from pyro.poutine.runtime import Message
from pyro.poutine.util import site_is_subsample
from scipy.special import logsumexp

from .algorithms.univariate import exp_segment_draw, exp_segment_log_mass
from .arviz_io import make_run
from .context import EngineContext
from .density import BatchedDensity, batched_density
from .importance import unsampled_prior_site
from .joint import log_joint_draws
from .laplace import fit_laplace, lbfgs
from .posterior import complete
from .reference import in_float64
from .replay import VectorisationWarning, guide_draws
from .results import Evidence, NumericalFailure, Run, ZooError
from .sites import site_dist

ENVELOPES = ("prior", "student_t")
LOW_DIMENSION = 4  # continuous latent elements a model may have for these engines
DF = 4.0  # the Student-t envelope's degrees of freedom
T_SCALE = 1.5  # its scale over Laplace's sd
MARGIN = 0.05  # log of the safety factor on the optimised bound M
MAX_RESTARTS = 5
SMALL = 8  # batches the log joint is evaluated draw by draw when the vectorised path fails
PILOT = 1000  # proposals that seed the search for M (not used as draws)
STARTS = 4  # optimiser starts from the best pilot proposals
GRID = 8193  # inverse-CDF interpolation nodes
TAIL = 50.0  # the grid ends where log p is this far below its maximum


# ----------------------------------------------------------------------------- the target
class _PriorOnly(Messenger):
    """The model with its observations (and ``pyro.factor`` terms) masked out: the joint of the
    latent sites the forward run draws from, discrete ones summed out by the density."""

    def _pyro_sample(self, msg: Message) -> None:
        if msg["is_observed"] and not site_is_subsample(msg):
            msg["fn"] = site_dist(msg).mask(False)  # log_prob 0 wherever it is read


_PRIORS: dict[Callable[..., Any], Callable[..., Any]] = {}


def prior_model(model: Callable[..., Any]) -> Callable[..., Any]:
    """``model`` with its observations masked (one wrapper per model: densities are cached by
    the model)."""
    if model not in _PRIORS:
        _PRIORS[model] = _PriorOnly()(model)
    return _PRIORS[model]


@dataclasses.dataclass
class _Target:
    """log p(y, u) on the unconstrained space: ``one`` at a point (differentiable), ``many``
    at a batch (the model's vectorised log joint plus the transforms' log-Jacobians)."""

    ctx: EngineContext
    data: Mapping[str, Any]
    density: BatchedDensity  # one chain: the point form, the sites' blocks and transforms

    def one(self, u: torch.Tensor) -> torch.Tensor:
        return self.density.log_density(u)

    def constrain(self, u: torch.Tensor) -> dict[str, torch.Tensor]:
        return self.density.constrain(u)

    def unconstrain(self, values: Mapping[str, torch.Tensor]) -> torch.Tensor:
        return self.density.unconstrain(values)

    def log_joint(
        self, values: Mapping[str, torch.Tensor], model: Callable[..., Any]
    ) -> np.ndarray:
        """log p of constrained draws under ``model`` (the model or its prior), no Jacobian; -inf
        at a draw the model cannot evaluate (a Cholesky factor of a matrix that is not positive
        definite, far out in a proposal's tail), found by halving the batch."""
        n = len(next(iter(values.values())))
        with warnings.catch_warnings():
            warnings.simplefilter("error", VectorisationWarning)  # halve, not draw by draw
            try:
                return self._log_joint(values, model)
            except (VectorisationWarning, RuntimeError):
                if n > SMALL:
                    halves = [{k: v[sl] for k, v in values.items()} for sl in _halves(n)]
                    return np.concatenate([self.log_joint(h, model) for h in halves])
            warnings.simplefilter("ignore", VectorisationWarning)
            out = np.empty(n)
            for i in range(n):
                try:
                    out[i] = self._log_joint({k: v[i : i + 1] for k, v in values.items()}, model)[0]
                except RuntimeError:
                    out[i] = -np.inf
            return out

    def _log_joint(
        self, values: Mapping[str, torch.Tensor], model: Callable[..., Any]
    ) -> np.ndarray:
        return log_joint_draws(
            model, self.data, dict(values), self.ctx.structure, name=self.ctx.name
        )

    def many(self, u: torch.Tensor) -> np.ndarray:
        values = self.constrain(u)
        log_jac = torch.zeros(len(u), dtype=torch.float64)
        for b in self.density.blocks:
            t = self.density.transforms[b.name].inv
            site_u = u[:, b.start : b.stop].reshape((-1, *b.ushape))
            log_jac += t.log_abs_det_jacobian(site_u, values[b.name]).reshape(len(u), -1).sum(1)
        with np.errstate(invalid="ignore"):
            out = self.log_joint(values, self.ctx.model) + log_jac.numpy()
        return np.where(np.isnan(out), -np.inf, out)


def _halves(n: int) -> tuple[slice, slice]:
    return slice(0, n // 2), slice(n // 2, n)


def _target(ctx: EngineContext, data: Mapping[str, Any]) -> _Target:
    density = batched_density(ctx.model, data, ctx.structure, 1, dtype=torch.float64)
    return _Target(ctx, data, density)


def _maximise(
    f: Callable[[torch.Tensor], torch.Tensor], starts: torch.Tensor
) -> tuple[float, torch.Tensor]:
    """The largest f found by L-BFGS from each start (f's gradient by autograd)."""

    def value_grad(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x = x.detach().clone().requires_grad_(True)
        with torch.enable_grad():
            value = f(x)
            if not torch.isfinite(value):
                return torch.tensor(-math.inf, dtype=x.dtype), torch.zeros_like(x)
            (grad,) = torch.autograd.grad(value, x)
        return value.detach(), grad

    best, where = -math.inf, starts[0]
    for start in starts:
        x, trace = lbfgs(value_grad, start, 200, 1e-9)
        if trace[-1] > best:
            best, where = trace[-1], x
    return best, where


# ------------------------------------------------------------------------------ envelopes
@dataclasses.dataclass
class _Envelope:
    """Proposals: ``draw(n) -> (u (n, D), log ratio p(y, u) / q(u) (n,))``; ``log_ratio`` the
    same ratio at one point, differentiable (the optimiser's)."""

    name: str
    draw: Callable[[int], tuple[torch.Tensor, np.ndarray]]
    log_ratio: Callable[[torch.Tensor], torch.Tensor]
    start: torch.Tensor | None = None  # a point worth starting the optimiser from


def _prior_envelope(ctx: EngineContext, target: _Target) -> _Envelope:
    """q = the prior: the ratio is the likelihood, p(y, theta) / p(theta) on either space."""
    prior = prior_model(ctx.model)
    prior_density = batched_density(prior, target.data, ctx.structure, 1, dtype=torch.float64)
    continuous = ctx.structure.continuous

    def draw(n: int) -> tuple[torch.Tensor, np.ndarray]:
        values, _ = guide_draws(ctx.model, target.data, n, continuous, name="the prior")
        values = {k: v.to(torch.float64) for k, v in values.items()}
        with np.errstate(invalid="ignore"):
            ratio = target.log_joint(values, ctx.model) - target.log_joint(values, prior)
        return target.unconstrain(values), np.where(np.isnan(ratio), -np.inf, ratio)

    def log_ratio(u: torch.Tensor) -> torch.Tensor:
        return target.one(u) - prior_density.log_density(u)

    return _Envelope("prior", draw, log_ratio)


def _student_t_envelope(ctx: EngineContext, target: _Target) -> _Envelope:
    """q = a Student-t around the posterior mode, Laplace's covariance scaled by T_SCALE^2."""
    fit = fit_laplace(target.density, torch.Generator().manual_seed(ctx.seed), starts=2,
                      max_iter=500, tol=1e-9)  # fmt: skip
    scale_tril = T_SCALE * torch.linalg.cholesky(fit.cov)
    q = dist.MultivariateStudentT(torch.tensor(DF, dtype=torch.float64), fit.mode, scale_tril)

    def draw(n: int) -> tuple[torch.Tensor, np.ndarray]:
        u = q.sample((n,))
        return u, target.many(u) - q.log_prob(u).numpy()

    def log_ratio(u: torch.Tensor) -> torch.Tensor:
        return target.one(u) - q.log_prob(u)

    return _Envelope("student_t", draw, log_ratio, start=fit.mode)


# ------------------------------------------------------------------------------ rejection
def rejection_engine(
    ctx: EngineContext,
    *,
    num_samples: int = 1000,
    max_proposals: int = 1_000_000,
    envelope: str = "student_t",
) -> Run:
    """Rejection sampling (seed 003 L34–60): ``num_samples`` exact posterior draws of a model
    with a few continuous dimensions, proposals from ``envelope`` ("student_t": a Student-t
    around the mode; "prior": the prior, accepted with probability L(theta) / max L) accepted
    with probability p(y, theta) / (M q(theta)), M found by optimisation. At most
    ``max_proposals`` proposals: a run that reaches it with fewer draws stops, ``unreliable``,
    saying so (none accepted: failed). Diagnostics: ``acceptance_rate``, ``proposals``,
    ``accepted``, ``log_bound`` (log M), ``restarts`` (bounds found wrong and raised); the
    evidence estimate is log M + log(acceptance rate), its SE ``log_evidence_se``. The pilot
    proposals and those before the last restart count in ``proposals`` only."""
    if envelope not in ENVELOPES:
        raise ZooError(f"option 'envelope' must be one of {list(ENVELOPES)}, got {envelope!r}")
    if max_proposals < num_samples:
        raise ZooError(
            f"max_proposals ({max_proposals}) must be at least num_samples ({num_samples})"
        )
    site = unsampled_prior_site(ctx) if envelope == "prior" else None
    if site is not None:
        raise ZooError(
            f"the prior of site {site!r} of model {ctx.name!r} cannot be sampled; use "
            "envelope='student_t'"
        )
    with pyro.validation_enabled(False):
        out = in_float64(lambda **data: _rejection(ctx, data, num_samples, max_proposals,
                                                   envelope), ctx.data)  # fmt: skip
    return _finish(ctx, "rejection", out)


@dataclasses.dataclass
class _Drawn:
    """What a sampler found (in float64): constrained draws of the continuous sites, the
    evidence, diagnostics and, for a run cut short, why its numbers are few."""

    draws: dict[str, torch.Tensor]
    evidence: Evidence
    diagnostics: dict[str, Any]
    caveat: str | None = None


def _finish(ctx: EngineContext, engine: str, out: _Drawn) -> Run:
    """The Run, its discrete and deterministic sites completed in the model's own dtype."""
    draws = {k: v.float().numpy()[None] for k, v in out.draws.items()}
    posterior, log_lik, omitted = complete(ctx, draws, recover=ctx.structure.discrete)
    n = len(next(iter(out.draws.values())))
    diagnostics = {**out.diagnostics, "num_samples": n, "ess": float(n)}  # independent draws
    if omitted:
        diagnostics["omitted"] = omitted
    run = make_run(
        engine,
        posterior,
        log_likelihood=log_lik,
        observed_data=ctx.data,
        evidence=out.evidence,
        diagnostics=diagnostics,
    )
    if out.caveat is None:
        return run
    return dataclasses.replace(run, status="unreliable", caveat=out.caveat)


def _rejection(
    ctx: EngineContext,
    data: Mapping[str, Any],
    num_samples: int,
    max_proposals: int,
    envelope_name: str,
) -> _Drawn:
    target = _target(ctx, data)
    make = _prior_envelope if envelope_name == "prior" else _student_t_envelope
    env = make(ctx, target)
    pilot_u, pilot_r = env.draw(min(PILOT, max_proposals))
    starts = pilot_u[np.argsort(-pilot_r)[:STARTS].copy()]
    if env.start is not None:
        starts = torch.cat([env.start[None], starts])
    best, _ = _maximise(env.log_ratio, starts)
    log_m = max(best, float(pilot_r.max())) + MARGIN
    if not math.isfinite(log_m):
        raise NumericalFailure("rejection: the ratio p(y, theta) / q(theta) is not finite anywhere")
    proposals, accepted, restarts = len(pilot_u), 0, 0
    since, accepted_since = 0, 0  # proposals and acceptances under the current bound
    kept: list[torch.Tensor] = []
    rate = float(np.mean(np.exp(np.minimum(pilot_r - log_m, 0.0))))  # expected acceptance
    while accepted_since < num_samples and proposals < max_proposals:
        want = (num_samples - accepted_since) / max(rate, 1e-6) * 1.2
        n = int(min(max(want, 256), 65536, max_proposals - proposals))
        u, r = env.draw(n)
        proposals += n
        if r.max() > log_m:  # a ratio above M: the bound was wrong
            restarts += 1
            if restarts > MAX_RESTARTS:
                raise NumericalFailure(
                    f"rejection: the bound M was exceeded {restarts} times (log ratio "
                    f"{r.max():.4g} > log M {log_m:.4g}); the ratio may be unbounded"
                )
            found, _ = _maximise(env.log_ratio, u[int(np.argmax(r))][None])
            log_m = max(found, float(r.max())) + MARGIN
            since, accepted_since, kept = 0, 0, []
            continue
        take = np.log(np.random.uniform(size=n)) < r - log_m
        kept.append(u[torch.as_tensor(take)])
        since += n
        accepted_since += int(take.sum())
        accepted += int(take.sum())
        rate = accepted_since / since
    if accepted_since == 0:
        raise NumericalFailure(
            f"rejection: no proposal accepted in {proposals} (max_proposals); the envelope "
            f"({envelope_name}) is far too wide for this posterior"
        )
    u = torch.cat(kept)[:num_samples]
    rate = accepted_since / since
    diagnostics = {
        "envelope": envelope_name,
        "acceptance_rate": rate,
        "proposals": proposals,
        "accepted": accepted_since,
        "log_bound": log_m,
        "restarts": restarts,
        # the evidence estimate's Monte-Carlo SE: log of a binomial proportion over `since`
        "log_evidence_se": math.sqrt((1 - rate) / (rate * since)),
    }
    caveat = None
    if len(u) < num_samples:
        caveat = (
            f"stopped at max_proposals={max_proposals}: {len(u)} of {num_samples} draws "
            f"accepted (acceptance rate {rate:.3g}); the draws are exact but few"
        )
    evidence = Evidence(log_m + math.log(rate), "estimate")
    return _Drawn(target.constrain(u), evidence, diagnostics, caveat)


# ------------------------------------------------------------------------------ inverse CDF
def inverse_cdf_engine(ctx: EngineContext, *, num_samples: int = 4000) -> Run:
    """Inverse-CDF sampling (seed 003 L28–32) of a one-dimensional posterior: its log density
    on the unconstrained line interpolated linearly between 8193 nodes (a piecewise-exponential
    density, exact CDF), ``num_samples`` draws x = F^-1(u), u ~ U(0, 1). Evidence: the
    interpolant's mass (quadrature, exact to about 1e-6)."""
    with pyro.validation_enabled(False):
        out = in_float64(lambda **data: _inverse_cdf(ctx, data, num_samples), ctx.data)
    return _finish(ctx, "inverse_cdf", out)


def _inverse_cdf(ctx: EngineContext, data: Mapping[str, Any], num_samples: int) -> _Drawn:
    target = _target(ctx, data)
    if target.density.dim != 1:
        raise ZooError(
            f"inverse_cdf needs one unconstrained dimension, model has {target.density.dim}"
        )
    fit = fit_laplace(target.density, torch.Generator().manual_seed(ctx.seed), starts=2,
                      max_iter=500, tol=1e-9)  # fmt: skip
    mode, sd = float(fit.mode[0]), float(fit.cov[0, 0].sqrt())
    top = fit.log_joint

    def at(x: np.ndarray) -> np.ndarray:
        return target.many(torch.as_tensor(x, dtype=torch.float64)[:, None])

    ends = np.array([mode - 10 * sd, mode + 10 * sd])
    for _ in range(60):  # out until the density at each end is negligible
        lp = at(ends)
        wide = lp > top - TAIL
        if not wide.any():
            break
        ends = np.where(wide, ends + np.array([-1.0, 1.0]) * np.abs(ends - mode), ends)
    else:
        raise NumericalFailure("inverse_cdf: the posterior's tails do not fall off")
    grid = np.linspace(ends[0], ends[1], GRID)
    lp = at(grid)
    if not np.isfinite(lp).all():
        raise NumericalFailure("inverse_cdf: the log density is not finite on the grid")
    width = grid[1] - grid[0]
    slope = np.diff(lp) / width
    log_mass = exp_segment_log_mass(np.maximum(lp[:-1], lp[1:]), np.abs(slope), width)
    log_z = float(logsumexp(log_mass))
    cdf = np.cumsum(np.exp(log_mass - log_z))
    u = np.random.uniform(size=num_samples) * cdf[-1]
    j = np.minimum(np.searchsorted(cdf, u, side="right"), GRID - 2)
    below = np.where(j > 0, cdf[np.maximum(j - 1, 0)], 0.0)
    v = np.clip((u - below) / np.exp(log_mass[j] - log_z), 0.0, 1.0)  # the CDF within piece j
    rising = slope[j] > 0
    s = exp_segment_draw(np.abs(slope[j]), width, np.where(rising, 1 - v, v))
    x = np.where(rising, grid[j + 1] - s, grid[j] + s)
    values = target.constrain(torch.as_tensor(x, dtype=torch.float64)[:, None])
    diagnostics = {"grid": [float(ends[0]), float(ends[1])], "nodes": GRID}
    return _Drawn(values, Evidence(log_z, "exact"), diagnostics)
