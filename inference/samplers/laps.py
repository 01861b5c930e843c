"""LAPS, the Late Adjusted Parallel Sampler (Robnik et al.; arXiv:2601.16696, as the BlackJAX
sampling book cites it): MAMS (:mod:`.mams`) whose
warmup is an ensemble's. First an unadjusted microcanonical (MCLMC) burn-in of all chains
together, its step size set each step from the ensemble's energy-error variance against the
equipartition's bias, its momentum decoherence length ``L`` from the ensemble's variances, and
stopped once the ensemble's second moments have settled; then an adjusted (MAMS) phase,
preconditioned by the ensemble's variances, whose step size is found by bisection to the target
acceptance. The draws are then MAMS's at the adjusted phase's step size, ``L`` and
preconditioner. Follows BlackJAX 1.7.1: ``blackjax/adaptation/laps.py`` (``laps``, ``Adaptation``:
the split of the budget, the preconditioner's step-size rescaling, the adjusted phase),
``blackjax/adaptation/laps_burn_in.py`` (``initialize``: velocities along or against the
gradient by the equipartition; ``Adaptation.update`` and ``while_cond``: the burn-in's step
size, ``L`` and stopping rule; ``build_kernel``: the NaN rejection), ``blackjax/mcmc/mclmc.py``
with ``blackjax/mcmc/integrators.py`` (``partially_refresh_momentum``) for the burn-in step,
``blackjax/eca.py`` (``run_eca``, ``while_with_info``: ensemble averages each step, the early
stop) and ``blackjax/adaptation/step_size.py`` (``bisection_monotonic_fn``).

Where this differs, and why: both phases integrate with the leapfrog (velocity Verlet, one
gradient a step) that the draws use; the adjusted phase runs the draws' own transition
(:func:`.mams.transition`, at BlackJAX's fixed 15 steps: no partial refresh within a
trajectory) so that its bisection tunes the step size of the kernel that follows; the stopping
rule watches the ensemble's second moments (BlackJAX's default observable is the first moment,
whose relative fluctuation is undefined for a mean near zero); the bisection stops only on an
acceptance within the tolerance by more than its standard error over the chains (BlackJAX's
thousands of chains know their mean acceptance to well within the tolerance, the zoo's tens
do not: stopped on noise, the step size can be far off), and keeps the step size that met
the target (BlackJAX's moves it once more, to a step size never tried)."""

from __future__ import annotations

import math
from typing import Any

import torch

from .base import Density, Loop, Samples, StepFn
from .mams import isokinetic_leapfrog, leapfrog_with_normal, mams, transition, with_normal

ALPHA = 1.9  # BlackJAX's alpha: L = alpha sqrt(sum of the ensemble's variances)
C = 0.1  # BlackJAX's C: wanted energy-error variance per dimension = C bias^(3/8)
SAVE_FRAC = 0.2  # the stopping rule's window, a fraction of the burn-in's steps
R_END = 0.01  # stop once the window's relative fluctuation of every second moment is below
STEPS_PER_SAMPLE = 15  # BlackJAX's steps_per_sample: the adjusted phase's L / step
TOLERANCE = 0.03  # the bisection stops within this of the target acceptance
STEP_FACTOR_RANGE = (0.3, 3.0)  # the burn-in's step size changes at most this much a step


def burn_in_step(
    density: Density,
    q: torch.Tensor,
    u: torch.Tensor,
    grad: torch.Tensor,
    logp: torch.Tensor,
    eps: torch.Tensor,
    nu: torch.Tensor,
    z: torch.Tensor,
) -> tuple[torch.Tensor, ...]:
    """One unadjusted MCLMC step of every chain (a step, :meth:`~.base.Loop.step`): the
    isokinetic leapfrog by ``eps`` (chains, 1), then the velocity's partial refresh by the
    noise ``nu z`` (``nu`` from ``L``: 0 for no refresh). Returns ``(q, u, grad, logp,
    energy error)``."""
    zero = torch.zeros_like(logp)
    new_q, u, new_grad, new_logp, kin = isokinetic_leapfrog(
        density, q, u, grad, logp, zero, eps, torch.ones_like(q)
    )
    u = u + nu * z
    return new_q, u / u.norm(dim=-1, keepdim=True), new_grad, new_logp, logp - new_logp + kin


def burn_in_step_with_normal(density: Density, *state: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """:func:`burn_in_step` on :func:`.mams.with_normal` of ``density`` (a step)."""
    return burn_in_step(with_normal(density), *state)


def refresh_noise(step: float, L: float, D: int) -> float:
    """BlackJAX's ``partially_refresh_momentum``'s noise scale, ``sqrt((exp(2 step / L) - 1)
    / D)``: none for an infinite ``L`` (the first step), a full refresh for ``L`` zero."""
    ratio = min(2 * step / L, 50.0) if L > 0 else 50.0  # e^50: the old velocity is lost
    return math.sqrt(math.expm1(ratio) / D)


class Bisection:
    """BlackJAX's ``bisection_monotonic_fn``: the log step size moves by ``log 2`` towards the
    target acceptance (which falls as the step grows) until a bracket is found, then bisects
    it; it stops once an acceptance comes within :data:`TOLERANCE` of the target, its standard
    error over the chains included, at the step size that gave it."""

    def __init__(self, target: float) -> None:
        self.target, self.lower, self.upper, self.done = target, -math.inf, math.inf, False

    def update(self, step: float, accept: float, error: float = 0.0) -> float:
        """The next step size, given the acceptance at ``step`` and its standard error."""
        x = math.log(step)
        if accept > self.target:
            self.lower = max(self.lower, x)
            new = self.lower + math.log(2.0)
        else:
            self.upper = min(self.upper, x)
            new = self.upper - math.log(2.0)
        if math.isfinite(self.lower) and math.isfinite(self.upper):
            new = 0.5 * (self.lower + self.upper)
        self.done = self.done or abs(accept - self.target) + error < TOLERANCE
        return step if self.done else math.exp(new)


def burn_in(
    density: Density,
    q: torch.Tensor,
    num_steps: int,
    gen: torch.Generator,
    loop: Loop,
    fn: StepFn = burn_in_step,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, float, torch.Tensor, int]:
    """The unadjusted burn-in of the ensemble ``q`` (chains, D) on ``density`` for at most
    ``num_steps`` steps of ``fn`` (:func:`burn_in_step` on the loop's density, or its form
    with a standard normal beside it). Returns ``(q, logp, grad, step size, the ensemble's
    variances, steps)``."""
    B, D = q.shape
    dtype = q.dtype
    logp, grad = density(q)
    # the velocity along the gradient, turned against it where the equipartition is below 1
    sign = torch.where((-q * grad).mean(0) < 1.0, -1.0, 1.0).to(dtype)
    u = sign * grad / grad.norm(dim=-1, keepdim=True).clamp_min(1e-13)
    step, L, eevpd = 0.01 * math.sqrt(D), math.inf, 1e-3
    var = torch.ones(D, dtype=dtype)
    save = max(1, round(SAVE_FRAC * num_steps))
    window: list[torch.Tensor] = []  # the ensemble's second moments, the latest steps
    mcmc_step = loop.step(fn)
    done = 0
    while done < num_steps:
        eps = torch.full((B, 1), step, dtype=dtype)
        nu = torch.tensor(refresh_noise(step, L, D), dtype=dtype)
        z = torch.randn(B, D, generator=gen, dtype=dtype)
        new_q, new_u, new_grad, new_logp, error = mcmc_step(q, u, grad, logp, eps, nu, z)
        finite = new_q.isfinite().all(-1) & new_u.isfinite().all(-1)
        finite &= new_logp.isfinite() & error.isfinite()
        fresh = torch.randn(B, D, generator=gen, dtype=dtype)  # a reverted chain's new velocity
        fresh = fresh / fresh.norm(dim=-1, keepdim=True)
        f = finite[:, None]
        q, grad = torch.where(f, new_q, q), torch.where(f, new_grad, grad)
        u, logp = torch.where(f, new_u, fresh), torch.where(finite, new_logp, logp)
        error = torch.where(finite, error, torch.zeros_like(error))
        done += 1
        loop.done(done)
        # the ensemble's averages: the hyperparameters for the next step
        mean, second = q.mean(0), (q**2).mean(0)
        var = second - mean**2
        L = ALPHA * math.sqrt(float(var.mean()) * D)
        eevpd = float(error.var(unbiased=False)) / D
        bias = float(((1.0 - (-q * grad).mean(0)) ** 2).mean())
        wanted = C * bias ** (3.0 / 8.0)
        if not bool(finite.all()):
            factor = 0.5
        else:
            factor = (wanted / eevpd) ** (1 / 6) if eevpd > 0 else math.inf
            factor = min(max(factor, STEP_FACTOR_RANGE[0]), STEP_FACTOR_RANGE[1])
        if math.isfinite(step * factor):
            step *= factor
        window = [second, *window[: save - 1]]
        w = torch.stack(window)
        r = (w**2).mean(0) / w.mean(0) ** 2 - 1.0
        if done > save and float(r.max()) <= R_END:  # the second moments have settled
            break
    return q, logp, grad, step, var, done


class _After(Loop):
    """``loop`` with the iterations counted from ``offset`` on: the draws after the warmup."""

    def __init__(self, loop: Loop, offset: int) -> None:
        super().__init__(loop.density)
        self.loop, self.offset = loop, offset

    def step(self, fn: StepFn, eager: StepFn | None = None, **kwargs: Any) -> Any:
        return self.loop.step(fn, eager, **kwargs)

    def done(self, iterations: int) -> None:
        self.loop.done(self.offset + iterations)

    def pace_from(self, iterations: int) -> None:
        self.loop.pace_from(self.offset + iterations)


def mams_laps(
    density: Density,
    theta0: torch.Tensor,
    *,
    num_samples: int,
    warmup: int,
    gen: torch.Generator,
    loop: Loop,
    target_accept: float = 0.9,
    max_steps: int = 1000,
    resume: dict[str, Any] | None = None,
) -> Samples:
    """MAMS (:func:`.mams.mams`) after LAPS's ensemble warmup of ``warmup`` gradient
    evaluations a chain, split as the BlackJAX sampling book's LAPS example splits them
    (``num_steps1 = num_steps2``): half for the unadjusted burn-in (fewer once the ensemble's
    second moments settle: the rest is not spent), half for the adjusted phase, draws of
    :data:`STEPS_PER_SAMPLE` steps whose step size is bisected to ``target_accept`` (the mean
    acceptance probability over chains; the draws' jitter would make it noisier). The burn-in
    sets the step size from the equipartition (``C bias^(3/8)`` wanted energy-error variance
    per dimension) and ``L = 1.9 sqrt(sum var)`` from the ensemble's variances ``var``, which
    become the preconditioner (the step size divided by their mean's root). The draws follow at
    the adjusted phase's step size, ``L = 15 step`` and preconditioner; ``info
    ["warmup_gradient_evals"]`` counts every chain's every gradient of the warmup.

    ``resume``: a previous run's :attr:`Samples.state`, as :func:`.mams.mams` takes it."""
    if resume is not None or warmup == 0:
        return mams(
            density, theta0, num_samples=num_samples, warmup=warmup, gen=gen, loop=loop,
            target_accept=target_accept, max_steps=max_steps, resume=resume,
        )  # fmt: skip
    B, D0 = theta0.shape
    dtype = theta0.dtype
    fn: StepFn  # the plain steps, or those with a normal beside the density
    leapfrog: StepFn
    q, tuned, fn, leapfrog = theta0, density, burn_in_step, isokinetic_leapfrog
    if D0 == 1:  # a standard normal beside it, as :func:`.mams.mams` samples one dimension
        q = torch.cat([q, torch.randn(B, 1, generator=gen, dtype=dtype)], -1)
        tuned, fn, leapfrog = with_normal(density), burn_in_step_with_normal, leapfrog_with_normal
    loop.pace_from(warmup)
    burn_steps = warmup // 2
    q, logp, grad, step, var, used = burn_in(tuned, q, burn_steps, gen, loop, fn)
    calls = 1 + used
    inv_mass = torch.where(var > 0, var, torch.ones_like(var))  # a stuck coordinate: unscaled
    step /= math.sqrt(float(inv_mass.mean()))
    leap = loop.step(leapfrog, reuse_outputs=True)
    bisection = Bisection(target_accept)
    for _ in range((warmup - burn_steps) // STEPS_PER_SAMPLE):
        L = STEPS_PER_SAMPLE * step
        q, logp, grad, accept, _, n = transition(
            leap, q, logp, grad, step, L, inv_mass, gen, max_steps, STEPS_PER_SAMPLE
        )
        calls += n
        se = float(accept.std()) / math.sqrt(B) if B > 1 else math.inf
        step = bisection.update(step, float(accept.mean()), se)
        loop.done(min(burn_steps + calls, warmup))
    loop.done(warmup)
    state = {
        "step_size": step,
        "trajectory_length": STEPS_PER_SAMPLE * step,
        "inv_mass": inv_mass,
        "iterations": warmup,
    }
    s = mams(
        density, q[:, :D0], num_samples=num_samples, warmup=0, gen=gen,
        loop=_After(loop, warmup), target_accept=target_accept, max_steps=max_steps,
        resume=state,
    )  # fmt: skip
    s.gradient_evals += calls * B
    s.info["warmup_gradient_evals"] = calls * B
    s.info["burn_in_steps"] = used
    return s
