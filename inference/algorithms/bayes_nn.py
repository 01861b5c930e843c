"""A network whose weights are latent: a N(0, prior_scale^2 I) prior over all of them as one
Pyro sample site, a mean-field Gaussian posterior q(theta) = N(m, diag s^2) in the guide (full
variational Bayes, seed 001 §3.3, eqs 155–162), and the network run with drawn weights. Used
by vae's Bayesian decoder; any ``torch.nn.Module`` whose forward pass uses only its
parameters will do.

Under TraceMeanField_ELBO the weights' term of the ELBO is the closed-form KL(q(theta) ||
p(theta)) (eq 162), counted once per step, while the data terms carry the minibatch's N/B:
f = N (log p(x | z, theta) + log p(z) - log q(z | x)) + log p(theta) - log q(theta) (eq 160)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import pyro
import pyro.distributions as dist
import pyro.poutine as poutine
import torch
from pyro.distributions import constraints
from torch import nn
from torch.func import functional_call

from ..sites import site_value


def weight_shapes(module: nn.Module) -> dict[str, torch.Size]:
    """The module's parameters' names and shapes, in its own order."""
    return {k: v.shape for k, v in module.named_parameters()}


def flatten(module: nn.Module) -> torch.Tensor:
    """All the module's parameter values in one vector (detached), in :func:`weight_shapes`'
    order."""
    return torch.cat([p.detach().reshape(-1) for p in module.parameters()])


def unflatten(vector: torch.Tensor, shapes: Mapping[str, torch.Size]) -> dict[str, torch.Tensor]:
    """One weight vector as the module's named parameters."""
    size = sum(s.numel() for s in shapes.values())
    if vector.shape != (size,):
        raise ValueError(f"a weight vector of shape {tuple(vector.shape)} for {size} weights")
    out, start = {}, 0
    for name, shape in shapes.items():
        out[name] = vector[start : start + shape.numel()].reshape(shape)
        start += shape.numel()
    return out


def sample_weights(site: str, module: nn.Module, prior_scale: float = 1.0) -> Callable[..., Any]:
    """Model side: theta ~ N(0, prior_scale^2 I) over ``module``'s weights as the sample site
    ``site`` (outside every plate: global); returns ``module``'s forward pass with theta."""
    shapes = weight_shapes(module)
    size = sum(s.numel() for s in shapes.values())
    prior = dist.Normal(torch.zeros(size), prior_scale).to_event(1)
    theta = unflatten(pyro.sample(site, prior), shapes)
    return lambda *inputs: functional_call(module, theta, inputs)


def weight_posterior(site: str, init: Callable[[], torch.Tensor], init_scale: float) -> None:
    """Guide side: q(theta) = N(m, diag s^2) at ``site``, m started at ``init()`` (e.g. a freshly
    built network's weights) and every s at ``init_scale``; the parameters ``{site}_loc`` and
    ``{site}_scale``."""
    loc = pyro.param(f"{site}_loc", init)
    scale = pyro.param(
        f"{site}_scale", lambda: torch.full_like(loc, init_scale), constraint=constraints.positive
    )
    pyro.sample(site, dist.Normal(loc, scale).to_event(1))


def with_weights(fn: Callable[..., Any], site: str, theta: torch.Tensor) -> Callable[..., Any]:
    """``fn`` (a model or guide) with the weights held at ``theta`` and their site hidden from
    the trace: what is left is a model of the data given theta."""
    return poutine.block(poutine.condition(fn, data={site: theta}), hide=[site])


def posterior_weights(
    guide: Callable[..., Any], site: str, data: Mapping[str, Any]
) -> torch.Tensor:
    """One draw theta ~ q(theta) from ``guide``."""
    with torch.no_grad(), pyro.validation_enabled(False):
        trace = poutine.trace(poutine.block(guide, expose=[site])).get_trace(**data)
    return site_value(trace.nodes[site])
