"""Self-normalised importance sampling (002 ch. 14): draws from a proposal q, weights
w_i = p(y, theta_i) / q(theta_i), the evidence estimate log mean(w) and posterior expectations
sum_i w_i f(theta_i) / sum_i w_i. The proposal is the prior, the model's own guide or an
autoguide fitted by SVI first."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from scipy.special import logsumexp

from .arviz_io import make_run, psis_pareto_k
from .context import EngineContext
from .optim import AUTOGUIDES
from .posterior import complete
from .results import Evidence, NumericalFailure, Run, ZooError
from .structure import trace_model
from .svi import fit_guide, weighted_draws

PROPOSALS = ("prior", "model", *AUTOGUIDES)


def systematic_resample(log_w: np.ndarray, n: int, rng: np.random.Generator) -> np.ndarray:
    """Indices of ``n`` equally weighted draws (systematic resampling: low variance)."""
    w = np.exp(log_w - logsumexp(log_w))
    positions = (rng.random() + np.arange(n)) / n
    return np.minimum(np.searchsorted(np.cumsum(w), positions), len(w) - 1)


def _prior_can_sample(ctx: EngineContext) -> str | None:
    """The first latent site whose prior cannot be sampled (ImproperUniform, ...), or None."""
    trace = trace_model(ctx.model, ctx.data)
    for name in ctx.structure.latent:
        try:
            with torch.no_grad():
                trace.nodes[name]["fn"].sample()
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
    (sum w)^2 / sum w^2 and the Pareto k-hat of the weights (PSIS: above 0.7 the estimate is
    unreliable). ``proposal``: ``prior`` (default without a guide of the model's own),
    ``model`` (that guide, the default when there is one) or an autoguide name, fitted for
    ``fit_steps`` SVI steps (the default for a model whose prior cannot be sampled)."""
    s = ctx.structure
    unsampled = _prior_can_sample(ctx)
    name = proposal or (
        "model" if ctx.guide is not None else "prior" if unsampled is None else "normal"
    )
    if name not in PROPOSALS:
        raise ZooError(f"option 'proposal' must be one of {list(PROPOSALS)}, got {proposal!r}")
    traces: dict[str, list[float]] = {}
    if name == "prior":
        if unsampled is not None:
            raise ZooError(
                f"the prior of site {unsampled!r} of model {ctx.name!r} cannot be sampled; use "
                "proposal='normal' (an autoguide fitted first)"
            )
        # the prior as a guide: every latent site drawn forward, discrete ones included
        values, log_w = weighted_draws(ctx, ctx.model, s.latent, (), num_samples, name="prior")
        recover: tuple[str, ...] = ()
    else:
        fitted = fit_guide(ctx, guide=name, elbo=None, num_steps=fit_steps, lr=lr)
        traces["elbo"] = fitted.trace
        values, log_w = weighted_draws(
            ctx,
            fitted.guide,
            fitted.sampled,
            fitted.enumerated,
            num_samples,
            name=f"the {name} guide",
        )
        recover = fitted.enumerated
    finite = np.isfinite(log_w)
    if not finite.any():
        raise NumericalFailure("every importance weight is zero or NaN")
    log_w = np.where(finite, log_w, -np.inf)
    log_z = float(logsumexp(log_w) - np.log(num_samples))
    w = np.exp(log_w - logsumexp(log_w))
    ess = float(1.0 / np.sum(w**2))
    idx = systematic_resample(log_w, num_samples, np.random.default_rng(ctx.seed))
    posterior = {k: v.numpy()[idx][None] for k, v in values.items()}
    posterior, log_lik, omitted = complete(ctx, posterior, recover=recover)
    exact = {}
    for k, v in values.items():
        x = v.double().numpy()
        wk = w.reshape((-1,) + (1,) * (x.ndim - 1))
        mean = (wk * x).sum(0)
        exact[k] = (mean, np.sqrt(np.clip((wk * (x - mean) ** 2).sum(0), 0, None)))
    diagnostics: dict[str, Any] = {
        "proposal": name,
        "ess": ess,
        "ess_fraction": ess / num_samples,
        "pareto_k": psis_pareto_k(log_w[finite]) if finite.sum() > 10 else float("nan"),
        "num_samples": num_samples,
    }
    if omitted:
        diagnostics["omitted"] = omitted
    return make_run(
        "importance",
        posterior,
        log_likelihood=log_lik,
        observed_data=ctx.data,
        evidence=Evidence(log_z, "estimate"),
        traces=traces,
        diagnostics=diagnostics,
        exact_moments=exact,
    )
