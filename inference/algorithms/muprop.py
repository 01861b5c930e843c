"""MuProp (Gu et al. 2016; seed 000 §3.4, L1086–1092): the score-function gradient of an ELBO
over discrete latents with the control variate of a first-order Taylor expansion of the
learning signal around the mean field, plus that control variate's exact expectation.

For guide sites z_s ~ q_phi (Bernoulli or one-hot categorical) and the learning signal
f(z) = log p(x, z) - log q(z | x), one draw of the gradient of E_q f is

    (f(z) - b(z)) grad log q(z) + grad_phi [f'(mu)^T mu(phi)] + grad f(z)|_z fixed,
    b(z) = f(mu) + f'(mu)^T (z - mu),   mu = E_q z (held fixed in b),

where f(mu) scores the mean-field vector mu with the densities' multilinear extension (for a
Bernoulli z log p + (1 - z) log(1 - p), for a one-hot z sum_k z_k log p_k, which agree with
the log-probabilities on the vertices). b is linear in z, so E_q b = f(mu) + f'(mu)^T (mu(phi) -
mu) has the gradient of the middle term: the estimator is unbiased for any b, and b removes the
part of f that is linear in z."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pyro
import pyro.distributions as dist
import pyro.poutine as poutine
import torch
from pyro.distributions.util import sum_rightmost
from pyro.infer import ELBO
from pyro.infer.util import MultiFrameTensor, torch_item
from pyro.poutine.runtime import Message
from pyro.poutine.util import prune_subsample_sites, site_is_subsample

from ..results import ZooError
from ..sites import site_dist, site_value

DISCRETE = (dist.Bernoulli, dist.OneHotCategorical)


def base_of(fn: Any) -> tuple[Any, int]:
    """The Bernoulli or one-hot categorical under ``Independent`` wrappers, and how many batch
    dimensions the wrappers reinterpreted as event dimensions."""
    extra = 0
    while isinstance(fn, torch.distributions.Independent):
        extra += fn.reinterpreted_batch_ndims
        fn = fn.base_dist
    if not isinstance(fn, DISCRETE):
        raise ZooError(
            "MuProp needs the guide's sampled sites to be Bernoulli or OneHotCategorical "
            f"(possibly .to_event); got {type(fn).__name__}"
        )
    return fn, extra


def linear_log_prob(fn: Any, value: torch.Tensor) -> torch.Tensor:
    """log fn(value) extended multilinearly to the cube or simplex: exact at 0/1 or one-hot
    values, linear in ``value`` between them."""
    base, extra = base_of(fn)
    if isinstance(base, dist.Bernoulli):
        lp = value * base.logits - torch.nn.functional.softplus(base.logits)
    else:
        lp = (value * torch.log_softmax(base.logits, -1)).sum(-1)
    return sum_rightmost(lp, extra)


def mean_of(fn: Any) -> torch.Tensor:
    """E z of a Bernoulli or one-hot categorical site (its probabilities)."""
    base, _ = base_of(fn)
    return base.probs


def weighted(site: Message, log_prob: torch.Tensor) -> torch.Tensor:
    """A site's log density with its plate scale and mask applied."""
    if site["mask"] is not None:
        log_prob = log_prob * site["mask"]
    return log_prob * site["scale"]


def sampled_sites(trace: poutine.Trace) -> list[str]:
    """The guide's latent sample sites, each checked to be a non-reparameterised discrete one."""
    names = []
    for name, site in trace.nodes.items():
        if site["type"] != "sample" or site["is_observed"] or site_is_subsample(site):
            continue
        base_of(site["fn"])
        names.append(name)
    if not names:
        raise ZooError("MuProp needs a guide that samples at least one discrete latent site")
    return names


class MuPropELBO(ELBO):
    """Pyro's ELBO interface with MuProp's gradient (:mod:`this module's docstring
    <zoo_inference.algorithms.muprop>`). Each guide latent site must be a Bernoulli or
    OneHotCategorical (under ``.to_event`` if need be) whose parameters depend on the data and
    parameters only, not on another latent's draw (one stochastic layer; checked on every step),
    and the model must accept the mean-field values (probabilities) at those sites, as a model
    that uses the one-hot or 0/1 values arithmetically does. Each site's learning signal is
    Rao-Blackwellised over plates as in TraceGraph_ELBO: only the terms in the site's own plate
    elements (and the global ones) multiply its score."""

    def _cost_terms(
        self, model_trace: poutine.Trace, guide_trace: poutine.Trace, linear: set[str]
    ) -> MultiFrameTensor:
        """log p - log q of every site by plate frames; the sites in ``linear`` (the latents)
        scored with :func:`linear_log_prob`."""
        costs = MultiFrameTensor()
        for sign, trace in ((1.0, model_trace), (-1.0, guide_trace)):
            for name, site in trace.nodes.items():
                if site["type"] != "sample":
                    continue
                if name in linear and not site["is_observed"]:
                    lp = linear_log_prob(site["fn"], site_value(site))
                else:
                    lp = site_dist(site).log_prob(site_value(site))
                costs.add((site["cond_indep_stack"], sign * weighted(site, lp)))
        return costs

    def _get_trace(
        self, model: Callable[..., Any], guide: Callable[..., Any], args: Any, kwargs: Any
    ) -> tuple[poutine.Trace, poutine.Trace]:
        guide_trace = poutine.trace(guide).get_trace(*args, **kwargs)
        model_trace = poutine.trace(poutine.replay(model, trace=guide_trace)).get_trace(
            *args, **kwargs
        )
        return prune_subsample_sites(model_trace), guide_trace

    def surrogate(
        self, model: Callable[..., Any], guide: Callable[..., Any], *args: Any, **kwargs: Any
    ) -> tuple[torch.Tensor, float]:
        """One particle's surrogate loss (its gradient is minus MuProp's estimate) and its
        -ELBO."""
        model_trace, guide_trace = self._get_trace(model, guide, args, kwargs)
        latents = sampled_sites(guide_trace)
        guide_pruned = prune_subsample_sites(guide_trace)
        # the mean field: every latent at its mean, leaves that f is differentiated in
        mf_trace = guide_trace.copy()
        means = {}
        for name in latents:
            site = guide_trace.nodes[name].copy()
            means[name] = mean_of(site["fn"]).detach().clone().requires_grad_(True)
            site["value"] = means[name]
            mf_trace.nodes[name] = site
        mf_guide = poutine.trace(poutine.replay(guide, trace=mf_trace)).get_trace(*args, **kwargs)
        for name in latents:
            moved = mean_of(mf_guide.nodes[name]["fn"]).detach()
            if not torch.allclose(moved, means[name].detach()):
                raise ZooError(
                    f"MuProp here needs one stochastic layer: q({name}) changed when the other "
                    "latents were set to their means (a guide site depends on another's draw)"
                )
        mf_model = poutine.trace(poutine.replay(model, trace=mf_trace)).get_trace(*args, **kwargs)
        mf_costs = self._cost_terms(
            prune_subsample_sites(mf_model), prune_subsample_sites(mf_guide), set(latents)
        )
        # f'(mu): the slope of the whole (detached) signal; the sites' signals are separable
        mf_total = sum(t.sum() for t in mf_costs.values())
        slopes = torch.autograd.grad(mf_total, [means[n] for n in latents], allow_unused=True)
        costs = self._cost_terms(model_trace, guide_pruned, set())
        elbo = sum(t.sum() for t in costs.values())
        surrogate = elbo  # its gradient: f's own (pathwise) dependence on the parameters
        for name, slope in zip(latents, slopes, strict=True):
            site = guide_pruned.nodes[name]
            frames = site["cond_indep_stack"]
            mu = means[name].detach()
            slope = torch.zeros_like(mu) if slope is None else slope.detach()
            event_dim = site_dist(site).event_dim
            signal = costs.sum_to(frames).detach()
            baseline = mf_costs.sum_to(frames).detach() + sum_rightmost(
                slope * (site_value(site) - mu), event_dim
            )
            # unscaled: the signal carries the scale
            score = site_dist(site).log_prob(site_value(site))
            if site["mask"] is not None:
                score = score * site["mask"]
            surrogate = surrogate + ((signal - baseline) * score).sum()
            surrogate = surrogate + self.control_variate_mean(slope, site["fn"])
        return -surrogate, torch_item(elbo)

    def control_variate_mean(self, slope: torch.Tensor, fn: Any) -> torch.Tensor:
        """The part of E_q b that depends on phi, f'(mu)^T mu(phi): its gradient puts back the
        mean that subtracting b from the signal took out."""
        return (slope * mean_of(fn)).sum()

    def loss(
        self, model: Callable[..., Any], guide: Callable[..., Any], *args: Any, **kwargs: Any
    ) -> float:
        """-ELBO estimated with ``num_particles`` draws."""
        total = 0.0
        with torch.no_grad():
            for _ in range(self.num_particles):
                model_trace, guide_trace = self._get_trace(model, guide, args, kwargs)
                costs = self._cost_terms(model_trace, prune_subsample_sites(guide_trace), set())
                total -= torch_item(sum(t.sum() for t in costs.values()))
        return total / self.num_particles

    def loss_and_grads(
        self, model: Callable[..., Any], guide: Callable[..., Any], *args: Any, **kwargs: Any
    ) -> float:
        """-ELBO over ``num_particles`` draws; MuProp's gradient accumulated into the
        parameters' ``.grad``."""
        total = 0.0
        for _ in range(self.num_particles):
            surrogate, elbo = self.surrogate(model, guide, *args, **kwargs)
            (surrogate / self.num_particles).backward()
            total -= elbo
        pyro.util.warn_if_nan(total, "loss")  # type: ignore[call-overload]  # pyro: numbers.Number, not float
        return total / self.num_particles
