"""What an engine needs to know about a model, read off one trace of it."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, cast

import pyro
import pyro.distributions as dist
import pyro.poutine as poutine
import torch
from pyro.distributions import constraints
from pyro.infer.autoguide.initialization import InitMessenger, init_to_median, init_to_sample
from pyro.infer.inspect import site_is_deterministic
from pyro.poutine.runtime import Message
from pyro.poutine.util import site_is_subsample
from torch.distributions import transform_to

from .sites import site_dist, site_support, site_value


@dataclass(frozen=True)
class ModelStructure:
    """Latent, observed and deterministic sites of a model run on a dataset.

    ``discrete`` sites have finite support (they can be enumerated); ``nonenumerable`` are discrete
    latents with infinite support (Poisson, ...), which no generic engine handles.
    ``deterministic`` are ``pyro.deterministic`` sites: functions of the latents, reported in the
    posterior, never treated as observations. ``factors`` are ``pyro.factor`` sites.
    ``subsampled`` names the plates that draw a subsample of their data points each time the
    model runs (``pyro.plate(name, N, subsample_size=B)``: minibatches); the shapes of the sites
    inside them are those of one subsample.
    """

    continuous: tuple[str, ...]
    discrete: tuple[str, ...]
    nonenumerable: tuple[str, ...]
    observed: tuple[str, ...]
    max_plate_nesting: int
    shapes: Mapping[str, tuple[int, ...]]
    deterministic: tuple[str, ...] = ()
    factors: tuple[str, ...] = ()
    subsampled: tuple[str, ...] = ()
    # each continuous latent site's support_bounds: (lower, upper) per element
    bounds: Mapping[str, tuple[float, float]] = field(default_factory=dict)

    @property
    def latent(self) -> tuple[str, ...]:
        return self.continuous + self.discrete + self.nonenumerable


def init_strategy(site: Message | None = None) -> Any:
    """Start from a prior draw where the prior can be sampled, else from a feasible point (sites
    drawn from ``ImproperUniform`` and other distributions without a sampler)."""
    try:
        return init_to_sample(site)
    except NotImplementedError:
        assert site is not None  # init_to_sample(None) returns an initialiser, raising nothing
        return feasible(site)


def fit_init(site: Message | None = None) -> Any:
    """Where an optimiser starts (MAP, autoguides): the prior median (of 15 draws, Pyro's
    ``init_to_median``), not one prior draw, which under a diffuse prior lands far enough out
    that a few hundred steps do not come back; a feasible point where the prior has no sampler."""
    try:
        return init_to_median(site, num_samples=15)
    except NotImplementedError:
        assert site is not None  # init_to_median(None) returns an initialiser, raising nothing
        return feasible(site)


def feasible(site: Message) -> torch.Tensor:
    """A point of the site's support that needs no sampler: the image of zeros under the
    transform from the unconstrained space (0 for real, 1 for positive, ...)."""
    fn = site_dist(site)
    t = transform_to(fn.support)
    shape = t.inverse_shape(fn.batch_shape + fn.event_shape)
    return t(torch.zeros(shape)).detach()


def traceable(model: Callable[..., Any]) -> Callable[..., Any]:
    """``model`` with every latent site that is not given a value initialised by
    :func:`init_strategy`: it can be traced even where a prior has no sampler."""
    return InitMessenger(init_strategy)(model)


def trace_model(
    model: Callable[..., Any], data: Mapping[str, Any], *, validate: bool = False
) -> poutine.Trace:
    """One trace of ``model(**data)`` (latents drawn from the prior where it can be sampled),
    params hidden; ``validate`` turns Pyro's argument and support checks on."""
    with pyro.validation_enabled(validate), torch.no_grad():
        blocked = poutine.block(traceable(model), hide_types=["param"])
        return poutine.trace(blocked).get_trace(**data)


def support_bounds(support: Any) -> tuple[float, float]:
    """The (lower, upper) bounds of a distribution's support, per element (a simplex's and a
    correlation matrix's elements: [0, 1] and [-1, 1]); unbounded ends are infinite."""
    while hasattr(support, "base_constraint"):  # independent(...): the element's constraint
        support = support.base_constraint
    if support is constraints.simplex:
        return 0.0, 1.0
    if support in (constraints.corr_cholesky, constraints.corr_matrix):
        return -1.0, 1.0
    lo = getattr(support, "lower_bound", -math.inf)
    hi = getattr(support, "upper_bound", math.inf)
    try:
        return float(lo), float(hi)
    except (TypeError, ValueError, RuntimeError):  # bounds that are tensors of several values
        return -math.inf, math.inf


def inspect_model(model: Callable[..., Any], data: Mapping[str, Any]) -> ModelStructure:
    """Trace ``model(**data)`` once (prior draw) and classify its sample sites."""
    trace = trace_model(model, data)
    continuous: list[str] = []
    discrete: list[str] = []
    nonenum: list[str] = []
    observed: list[str] = []
    determ: list[str] = []
    factors: list[str] = []
    shapes: dict[str, tuple[int, ...]] = {}
    bounds: dict[str, tuple[float, float]] = {}
    nesting = 0
    for name, site in trace.nodes.items():
        if site["type"] != "sample" or site_is_subsample(site):
            continue
        dims = [-f.dim for f in site["cond_indep_stack"] if f.dim is not None]  # the vectorized
        nesting = max([nesting, *dims])
        if site_is_deterministic(site):  # type: ignore[arg-type]  # pyro: msg: dict, not Message
            determ.append(name)
            shapes[name] = tuple(site_value(site).shape)
        elif site["is_observed"]:
            (factors if isinstance(site["fn"], dist.Unit) else observed).append(name)
        else:
            shapes[name] = tuple(site_value(site).shape)
            fn = site_dist(site)
            support = site_support(site)
            if support.is_discrete:
                (discrete if fn.has_enumerate_support else nonenum).append(name)
            else:
                continuous.append(name)
                bounds[name] = support_bounds(support)
    return ModelStructure(
        tuple(continuous),
        tuple(discrete),
        tuple(nonenum),
        tuple(observed),
        nesting,
        shapes,
        tuple(determ),
        tuple(factors),
        tuple(subsampled(trace)),
        bounds,
    )


def subsampled(trace: poutine.Trace) -> dict[str, tuple[int, int]]:
    """The plates of a trace that drew a subsample smaller than their size: name -> (size,
    subsample size)."""
    out = {}
    for name, site in trace.nodes.items():
        if site["type"] == "sample" and site_is_subsample(site):
            fn = cast(Any, site["fn"])  # pyro's private _Subsample: its size is the plate's
            size, sub = int(fn.size), int(site_value(site).shape[0])
            if sub < size:
                out[name] = (size, sub)
    return out
