"""Model-specific reference engines (``exact``, ``em``, ``gibbs``, ``cavi``, ...): a model's own
algorithm returns plain data (:mod:`zoo_inference.outputs`); this module turns it into a Run.

A reference function is called with the model's keyword arguments (its data) plus keyword-only
options (the registry binds it so that the function itself names only the parameters it uses),
and returns an :class:`Estimate`, :class:`Draws` or :class:`Factors`. The runner times and seeds
it; a function that declares a ``progress`` keyword also gets the progress flag.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import pyro.distributions as dist
import torch

from .arviz_io import make_run, mcmc_convergence
from .context import EngineContext
from .outputs import Draws, Estimate, Factors, Output, check_values
from .results import Evidence, GroundTruth, Run
from .runtime import default_dtype

RUNNER_OPTIONS = ("seed", "progress")


def _numpy(value: Any) -> np.ndarray:
    if isinstance(value, torch.Tensor):
        return value.detach().cpu().numpy()
    return np.asarray(value)


def options_of(fn: Callable[..., Any]) -> dict[str, Any]:
    """A reference function's options and defaults: its keyword-only parameters."""
    return {
        p.name: p.default
        for p in inspect.signature(fn).parameters.values()
        if p.kind == p.KEYWORD_ONLY and p.name not in RUNNER_OPTIONS
    }


def call_reference(fn: Callable[..., Any], ctx: EngineContext, options: Mapping[str, Any]) -> Any:
    params = inspect.signature(fn).parameters
    extra = {"progress": ctx.progress} if "progress" in params else {}
    return fn(**ctx.data, **options, **extra)


def moments(d: Any) -> tuple[np.ndarray, np.ndarray]:
    """Exact mean and sd of a distribution (per element of its batch + event shape)."""
    return _numpy(d.mean), _numpy(d.variance.clamp(min=0).sqrt())


def to_run(engine: str, out: Output, ctx: EngineContext, *, num_samples: int = 4000) -> Run:
    """The Run of a reference algorithm's output."""
    traces = {k: list(map(float, v)) for k, v in out.traces.items()}
    s = ctx.structure
    if isinstance(out, Estimate):
        values = {k: _numpy(v) for k, v in out.values.items()}
        check_values(engine, "an Estimate", values, s, ())
        held = tuple(values)
        evidence = None
        if out.log_evidence is not None:
            cond = held if out.evidence_kind == "conditional" else ()
            evidence = Evidence(float(out.log_evidence), out.evidence_kind, cond)
        return make_run(
            engine,
            {k: v[None, None] for k, v in values.items()},
            kind="point",
            conditional_on=held,
            observed_data=ctx.data,
            evidence=evidence,
            traces=traces,
            diagnostics={
                "iterations": max((len(v) for v in traces.values()), default=0),
                **out.diagnostics,
            },
            exact_moments={k: (v, np.zeros(v.shape)) for k, v in values.items()},
            extras={
                "estimate": {k: float(v) if v.ndim == 0 else v for k, v in values.items()},
                **out.extras,
            },
        )
    evidence = (
        None if out.log_evidence is None else Evidence(float(out.log_evidence), out.evidence_kind)
    )
    if isinstance(out, Draws):
        values = {k: _numpy(v) for k, v in out.values.items()}
        lead = ("chain", "draw") if out.chains else ("draw",)
        check_values(engine, "Draws", values, s, lead)
        posterior = values if out.chains else {k: v[None] for k, v in values.items()}
        run = make_run(
            engine,
            posterior,
            mcmc=out.chains,
            observed_data=ctx.data,
            evidence=evidence,
            traces=traces,
            extras=dict(out.extras),
        )
        if out.chains:
            assert run.idata is not None  # make_run gives a run its idata
            post = run.idata.posterior  # type: ignore[attr-defined]  # arviz sets groups as attributes
            run.diagnostics.update(mcmc_convergence(post))
        return run
    if isinstance(out, Factors):
        shapes = {k: (*d.batch_shape, *d.event_shape) for k, d in out.dists.items()}
        check_values(engine, "Factors", shapes, s, ())
        exact = {k: moments(d) for k, d in out.dists.items()}
        posterior = {k: _numpy(d.sample((num_samples,)))[None] for k, d in out.dists.items()}
        return make_run(
            engine,
            posterior,
            observed_data=ctx.data,
            evidence=evidence,
            traces=traces,
            exact_moments=exact,
            closed_form=True,
            extras={"distributions": dict(out.dists), **out.extras},
        )
    raise TypeError(
        f"reference engine {engine!r} returned {type(out).__name__}; expected an Estimate, "
        "Draws or Factors"
    )


# ------------------------------------------------------------------ closed-form posteriors
def in_float64(fn: Callable[..., Any], data: Mapping[str, Any]) -> Any:
    """``fn(**data)`` with floating tensors in double precision and float64 as torch's default
    dtype (restored afterwards): closed forms are exact to the last digit, not to float32's."""
    with default_dtype(torch.float64):
        return fn(**as_dtype(data, torch.float64))


def as_dtype(data: Mapping[str, Any], dtype: torch.dtype) -> dict[str, Any]:
    """``data`` with its floating tensors cast to ``dtype`` (everything else as it is)."""
    return {
        k: v.to(dtype) if isinstance(v, torch.Tensor) and v.is_floating_point() else v
        for k, v in data.items()
    }


def marginal_density(d: Any) -> Callable[[np.ndarray], np.ndarray] | None:
    """Exact marginal density of every element of a distribution's value: grid (G,) ->
    (G, *shape); None for a family whose marginals are not known here."""
    base = d
    while isinstance(base, dist.Independent):
        base = base.base_dist
    if isinstance(base, dist.MultivariateNormal):
        base = dist.Normal(base.loc, base.covariance_matrix.diagonal(dim1=-2, dim2=-1).sqrt())
    elif isinstance(base, dist.Dirichlet):
        c = base.concentration
        base = dist.Beta(c, c.sum(-1, keepdim=True) - c)
    elif base.event_shape != ():
        return None
    shape = tuple(base.batch_shape)

    def pdf(x: np.ndarray) -> np.ndarray:
        t = torch.as_tensor(np.asarray(x, dtype=float), dtype=torch.float64)
        t = t.reshape((-1,) + (1,) * len(shape)).expand((-1, *shape))
        with torch.no_grad():
            inside = base.support.check(t)
            safe = torch.where(inside, t, base.mean.expand_as(t))
            lp = torch.where(inside, base.log_prob(safe), torch.tensor(-float("inf")))
        return lp.exp().double().numpy()

    return pdf


def truth_from_distributions(
    dists: Mapping[str, Any], log_evidence: float | None, source: str = "closed form"
) -> GroundTruth:
    """The ground truth of a closed-form posterior given as per-site distributions."""
    mean, sd, density = {}, {}, {}
    for site, d in dists.items():
        mean[site], sd[site] = moments(d)
        pdf = marginal_density(d)
        if pdf is not None:
            density[site] = pdf
    le = None if log_evidence is None else float(log_evidence)
    return GroundTruth(mean, sd, log_evidence=le, density=density, source=source)


def describe_distributions(dists: Mapping[str, Any]) -> str:
    """``"closed form: p ~ Beta(8, 4)"`` for scalar parameters, the family name otherwise."""
    parts = []
    for site, d in dists.items():
        params = {k: getattr(d, k) for k in getattr(d, "arg_constraints", {}) if k in d.__dict__}
        scalars = all(isinstance(v, torch.Tensor) and v.numel() == 1 for v in params.values())
        if params and scalars:
            args = ", ".join(f"{float(v):.6g}" for v in params.values())
            parts.append(f"{site} ~ {type(d).__name__}({args})")
        else:
            parts.append(f"{site} ~ {type(d).__name__}")
    return "closed form: " + "; ".join(parts)
