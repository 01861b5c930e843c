"""Gradient estimators of an ELBO studied on their own: independent draws of a Pyro ELBO's
gradient at fixed parameters, their variance, signal-to-noise and bias against the exact
gradient, and the score-function (REINFORCE) estimator of a Bernoulli toy problem."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import pyro
import pyro.distributions as dist
import torch
from pyro.infer import ELBO


def score_function_draws(
    phi: float, f: Callable[[torch.Tensor], torch.Tensor], num_draws: int, baseline: float = 0.0
) -> torch.Tensor:
    """The seed's REINFORCE estimator (000 L970) for q(z) = Bernoulli(sigmoid(phi)), one draw
    each: g_m = (f(z_m) - b) d/dphi log q(z_m; phi), z_m ~ q, by autograd. Their mean estimates
    d/dphi E_q f(z) = sigmoid'(phi) [f(1) - f(0)] for any constant baseline b (L1058–1068)."""
    phis = torch.full((num_draws,), float(phi), dtype=torch.float64, requires_grad=True)
    q = dist.Bernoulli(logits=phis)
    z = q.sample()
    (scores,) = torch.autograd.grad(q.log_prob(z).sum(), phis)  # z_m - sigmoid(phi)
    return ((f(z) - baseline) * scores).detach()


def gradient_draws(
    model: Callable[..., Any],
    guide: Callable[..., Any],
    data: Mapping[str, Any],
    elbo: ELBO,
    params: Sequence[str],
    num_draws: int,
    before_each: Callable[[], None] = lambda: None,
) -> torch.Tensor:
    """``num_draws`` independent draws of ``elbo``'s gradient of -ELBO with respect to the named
    parameters, at the parameters in Pyro's param store, shaped (num_draws, total size);
    ``before_each`` runs before every draw. The gradients are cleared afterwards."""
    store = pyro.get_param_store()
    draws = []
    for _ in range(num_draws):
        before_each()
        for _, p in store.named_parameters():
            p.grad = None
        elbo.loss_and_grads(model, guide, **data)  # type: ignore[attr-defined]  # pyro's ELBO base class omits it
        named = dict(store.named_parameters())
        grads = [named[p].grad for p in params]
        if any(g is None for g in grads):
            missing = [p for p, g in zip(params, grads, strict=True) if g is None]
            raise ValueError(f"the ELBO does not depend on parameters {missing}")
        draws.append(torch.cat([g.reshape(-1).clone() for g in grads if g is not None]))
    for _, p in store.named_parameters():
        p.grad = None
    return torch.stack(draws)


def gradient_statistics(g: torch.Tensor, exact: torch.Tensor) -> dict[str, float | None]:
    """Draws ``g`` (num_draws, size) of an estimator's gradient against the ``exact`` one:

    - ``grad_variance``: the summed variance of its coordinates (trace of the covariance);
      ``grad_log10_variance`` its log10 (None where it is 0);
    - ``grad_snr``: |exact|^2 / variance, the signal-to-noise ratio of one draw;
    - ``grad_bias_z``: the mean draw's error along the exact gradient, in Monte-Carlo standard
      errors (about N(0, 1) for an unbiased estimator);
    - ``grad_relative_bias``: |mean - exact| / |exact| (for an unbiased estimator about
      sqrt(variance / draws) / |exact|, its noise floor)."""
    num_draws = g.shape[0]
    mean, var = g.mean(0), float(g.var(0).sum())
    u = exact / exact.norm()
    along = g @ u
    se = float(along.std()) / math.sqrt(num_draws)
    err = float(mean @ u - exact @ u)
    return {
        "grad_draws": num_draws,
        "grad_variance": var,
        "grad_log10_variance": math.log10(var) if var > 0 else None,
        "grad_exact_norm": float(exact.norm()),
        "grad_snr": float(exact @ exact) / var if var > 0 else None,
        "grad_bias_z": err / se if se > 0 else 0.0 if err == 0 else math.copysign(math.inf, err),
        "grad_relative_bias": float((mean - exact).norm() / exact.norm()),
    }
