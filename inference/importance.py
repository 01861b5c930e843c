"""Self-normalised importance sampling (002 ch. 14): draws from a proposal q, weights
w_i = p(y, theta_i) / q(theta_i), the evidence estimate log mean(w) and posterior expectations
sum_i w_i f(theta_i) / sum_i w_i. The proposal is the prior, the model's own guide or an
autoguide fitted by SVI first; the Pareto k-hat of the weights says whether the estimate can be
trusted (k-hat <= 0.7), and the default proposal follows it."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from scipy.special import logsumexp

from .arviz_io import RELIABLE_K, make_run, psis_pareto_k, systematic_resample
from .context import EngineContext
from .optim import AUTOGUIDES
from .posterior import complete
from .results import Evidence, NumericalFailure, Run, ZooError
from .sites import site_dist
from .structure import trace_model
from .svi import fit_guide, weighted_draws

PROPOSALS = ("prior", "model", *AUTOGUIDES)
FITTED = "mvn"
"""The autoguide fitted as the proposal when the prior cannot be sampled or is a poor proposal:
a full-rank Gaussian, which follows a posterior's correlations (a mean-field proposal is too
narrow along them and its weights' tails too heavy)."""


def unsampled_prior_site(ctx: EngineContext) -> str | None:
    """The first latent site whose prior cannot be sampled (ImproperUniform, ...), or None."""
    trace = trace_model(ctx.model, ctx.data)
    for name in ctx.structure.latent:
        try:
            with torch.no_grad():
                site_dist(trace.nodes[name]).sample()
        except NotImplementedError:
            return name
    return None


def importance_engine(
    ctx: EngineContext,
    *,
    proposal: str | None = None,
    num_samples: int = 10000,
    fit_steps: int = 1000,
    lr: float = 0.05,
) -> Run:
    """Self-normalised importance sampling with ``num_samples`` proposals; the posterior group
    holds ``num_samples`` draws resampled by weight, the summary the weighted moments. The
    evidence is an estimate, log (1/n) sum_i w_i; the diagnostics give the effective sample size
    (sum w)^2 / sum w^2 and the Pareto k-hat of the weights (PSIS).

    ``proposal``: ``prior``, ``model`` (the model's own guide, the default when there is one) or
    an autoguide name, fitted for ``fit_steps`` SVI steps. Without a guide of the model's own the
    default tries the prior first and keeps it if its k-hat is at most 0.7; otherwise (or when
    the prior cannot be sampled) a fitted ``mvn`` guide is the proposal (a model with only
    discrete latent sites keeps the prior: no autoguide fits it). ``diagnostics`` say which
    (``proposal``; ``prior_pareto_k`` when the prior was tried) and, for a fitted proposal,
    whether Pyro's JIT ELBO fitted it (``jit``; ``jit_fallback`` says why not, as for ``svi``).
    A run whose k-hat is above 0.7 (or undefined: ten or fewer finite weights) has status
    ``unreliable``, its caveat says why."""
    unsampled = unsampled_prior_site(ctx)
    if proposal is not None and proposal not in PROPOSALS:
        raise ZooError(f"option 'proposal' must be one of {list(PROPOSALS)}, got {proposal!r}")
    if proposal == "prior" and unsampled is not None:
        raise ZooError(
            f"the prior of site {unsampled!r} of model {ctx.name!r} cannot be sampled; use "
            f"proposal={FITTED!r} (an autoguide fitted first)"
        )
    name = proposal or (
        "model" if ctx.guide is not None else "prior" if unsampled is None else FITTED
    )
    diagnostics: dict[str, Any] = {}
    weighted = _weighted(ctx, name, num_samples, fit_steps, lr)
    if proposal is None and name == "prior":
        prior_k = weighted.pareto_k
        diagnostics["prior_pareto_k"] = prior_k
        # NaN too: too few finite weights to tell; an autoguide needs a continuous site to fit
        if not prior_k <= RELIABLE_K and ctx.structure.continuous:
            name = FITTED
            weighted = _weighted(ctx, name, num_samples, fit_steps, lr)
    values, log_w, k = weighted.values, weighted.log_w, weighted.pareto_k
    finite = np.isfinite(log_w)
    log_w = np.where(finite, log_w, -np.inf)
    log_z = float(logsumexp(log_w) - np.log(num_samples))
    w = np.exp(log_w - logsumexp(log_w))
    ess = float(1.0 / np.sum(w**2))
    idx = systematic_resample(log_w, num_samples, np.random.default_rng(ctx.seed))
    posterior = {key: v.numpy()[idx][None] for key, v in values.items()}
    posterior, log_lik, omitted = complete(ctx, posterior, recover=weighted.recover)
    exact = {}
    for key, v in values.items():
        x = v.double().numpy()
        wk = w.reshape((-1,) + (1,) * (x.ndim - 1))
        mean = (wk * x).sum(0)
        exact[key] = (mean, np.sqrt(np.clip((wk * (x - mean) ** 2).sum(0), 0, None)))
    diagnostics.update(
        proposal=name,
        **weighted.fit,
        ess=ess,
        ess_fraction=ess / num_samples,
        pareto_k=k,
        num_samples=num_samples,
    )
    if omitted:
        diagnostics["omitted"] = omitted
    run = make_run(
        "importance",
        posterior,
        log_likelihood=log_lik,
        observed_data=ctx.data,
        evidence=Evidence(log_z, "estimate"),
        traces=weighted.traces,
        diagnostics=diagnostics,
        exact_moments=exact,
    )
    caveat = unreliable(k, name, diagnostics.get("prior_pareto_k"))
    if caveat is None:
        return run
    return dataclasses.replace(run, status="unreliable", caveat=caveat)


def unreliable(k: float, proposal: str, prior_k: float | None = None) -> str | None:
    """Why importance weights with Pareto k-hat ``k`` make a run unreliable, or None when
    k <= 0.7."""
    if k <= RELIABLE_K:
        return None
    q = {"prior": "the prior", "model": "the model's guide"}.get(
        proposal, f"a fitted {proposal} guide"
    )
    what = (
        f"Pareto k\u0302 {k:.2f} > {RELIABLE_K}" if np.isfinite(k) else "ten or fewer finite values"
    )
    text = (
        f"importance weights with {q} as proposal have {what}: a few draws carry most of the "
        "weight, so the means, sds and evidence estimate are not to be trusted"
    )
    if prior_k is not None and proposal != "prior":
        text += f" (the prior, tried first, had k\u0302 {prior_k:.2f})"
    return text


@dataclass
class _Weighted:
    """Draws of a proposal, their log weights, the weights' Pareto k-hat and the fit's traces."""

    values: dict[str, torch.Tensor]
    log_w: np.ndarray
    pareto_k: float
    recover: tuple[str, ...]
    traces: dict[str, list[float]]
    fit: dict[str, Any]  # how a fitted proposal was fitted: Pyro's JIT ELBO or not, and why not


def non_finite_parameters(guide: Any) -> list[str]:
    """The names of a fitted autoguide's parameters holding a NaN or an infinity (a guide of
    the model's own is not a module: its draws are checked as they are weighed)."""
    if not isinstance(guide, torch.nn.Module):
        return []
    return [k for k, v in guide.named_parameters() if not bool(torch.isfinite(v).all())]


def _weighted(ctx: EngineContext, name: str, n: int, fit_steps: int, lr: float) -> _Weighted:
    """``n`` draws from proposal ``name`` (the prior, the model's guide or an autoguide fitted
    first) and log weights log p(y, theta) - log q(theta); NumericalFailure if none is finite."""
    if name == "prior":
        # the prior as a guide: every latent site drawn forward, discrete ones included
        latent = ctx.structure.latent
        values, log_w = weighted_draws(ctx, ctx.model, latent, (), n, name="prior")
        recover: tuple[str, ...] = ()
        traces: dict[str, list[float]] = {}
        fit: dict[str, Any] = {}
    else:
        advice = "try a smaller lr, or proposal='prior'"
        try:
            fitted = fit_guide(ctx, guide=name, elbo=None, num_steps=fit_steps, lr=lr, jit=None)
        except ValueError as err:  # a step left a parameter NaN: the next step's check fails
            if "found invalid values" not in str(err):
                raise
            raise NumericalFailure(
                f"the {name} proposal's fit diverged: a parameter left its support within "
                f"{fit_steps} SVI steps (lr={lr}); {advice}"
            ) from err
        bad = non_finite_parameters(fitted.guide)
        if bad:  # drawing from it would fail on a distribution's argument check
            raise NumericalFailure(
                f"the {name} proposal's fit diverged: {len(bad)} of its parameters are not "
                f"finite after {fit_steps} SVI steps (lr={lr}; first: {bad[0]}); {advice}"
            )
        values, log_w = weighted_draws(
            ctx, fitted.guide, fitted.sampled, fitted.enumerated, n, name=f"the {name} guide"
        )
        recover, traces = fitted.enumerated, {"elbo": fitted.trace}
        fit = fitted.jit_diagnostics
    finite = np.isfinite(log_w)
    if not finite.any():
        raise NumericalFailure(f"every importance weight is zero or NaN (proposal {name!r})")
    k = psis_pareto_k(log_w[finite]) if finite.sum() > 10 else float("nan")
    return _Weighted(values, log_w, k, recover, traces, fit)
