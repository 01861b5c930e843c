"""Stochastic variational inference: the model's own guide or an autoguide, any of Pyro's ELBOs."""

from __future__ import annotations

import copy
import warnings
from collections.abc import Callable
from dataclasses import dataclass, replace
from numbers import Real
from typing import Any

import numpy as np
import pyro
import pyro.poutine as poutine
import torch
from pyro.infer import Trace_ELBO, TraceEnum_ELBO, TraceGraph_ELBO, TraceMeanField_ELBO
from scipy.special import logsumexp

from .advi import FAMILIES, advi
from .algorithms.muprop import MuPropELBO
from .amortised import SubsampledRenyiELBO, first_subsample, pointwise_log_weights
from .arviz_io import make_run, psis_pareto_k, psis_pareto_k_each
from .backend import has_compiler, jit_elbo
from .context import EngineContext
from .density import BatchedDensity, DensityWarning, batched_density
from .discrete import enumerated
from .joint import log_joint_draws
from .mcmc import chain_seed
from .optim import AUTOGUIDES, autoguide, fit
from .posterior import complete
from .replay import guide_draws
from .results import Evidence, Run, ZooError, one_line
from .sites import site_infer
from .structure import subsampled, trace_model

ELBOS = ("trace", "meanfield", "enum", "graph", "muprop", "iwae", "renyi")
GUIDES = ("model", *AUTOGUIDES)
# the ELBOs the batched path fits (its entropy is exact, its expectation reparameterised)
BATCHED_ELBOS = (None, "trace", "meanfield", "enum")
JIT_ELBOS = ("trace", "meanfield", "enum", "graph")  # those Pyro has a JIT-compiled form of


def make_elbo(
    name: str,
    *,
    num_particles: int,
    max_plate_nesting: int,
    jit: bool = False,
    minibatches: bool = False,
) -> pyro.infer.ELBO:
    """ELBO by name: ``muprop`` is the score-function gradient with MuProp's control variate
    (discrete guide sites; :class:`~zoo_inference.algorithms.muprop.MuPropELBO`), ``iwae`` is the
    importance-weighted bound (Rényi alpha=0), ``renyi`` has alpha=0.5, both right under data
    subsampling (:class:`SubsampledRenyiELBO`); with ``minibatches`` (the data subsampled)
    their particles are vectorised, so that they share one minibatch."""
    kw = dict(num_particles=num_particles, max_plate_nesting=max_plate_nesting)
    jitted = jit_elbo(name, **kw) if jit and name in JIT_ELBOS else None
    if jitted is not None:
        return jitted
    if name == "trace":
        return Trace_ELBO(**kw)
    if name == "meanfield":
        return TraceMeanField_ELBO(**kw)
    if name == "enum":
        return TraceEnum_ELBO(**kw)
    if name == "graph":
        return TraceGraph_ELBO(**kw)
    if name == "muprop":
        return MuPropELBO(**kw)
    if name in ("iwae", "renyi"):
        if num_particles < 2:
            raise ZooError(f"elbo={name!r} needs num_particles >= 2 (got {num_particles})")
        alpha = 0.0 if name == "iwae" else 0.5
        return SubsampledRenyiELBO(alpha=alpha, vectorize_particles=minibatches, **kw)
    raise ZooError(f"unknown elbo {name!r}; choose one of {list(ELBOS)}")


def guide_sites(guide: Callable[..., Any], data: dict[str, Any]) -> set[str]:
    """Names of the latent sites a guide samples."""
    with torch.no_grad(), pyro.validation_enabled(False):
        trace = poutine.trace(guide).get_trace(**data)
    return {
        n
        for n, s in trace.nodes.items()
        if s["type"] == "sample" and not s["is_observed"] and not site_infer(s).get("is_auxiliary")
    }


def build_guide(ctx: EngineContext, name: str) -> Callable[..., Any]:
    """The model's own guide (``"model"``) or an autoguide over the continuous latent sites."""
    if name == "model":
        if ctx.guide is None:
            raise ZooError(
                f"model {ctx.name!r} has no guide of its own; use an autoguide {list(AUTOGUIDES)}"
            )
        return ctx.guide
    if name == "flow":
        dim = sum(int(np.prod(ctx.structure.shapes[s])) for s in ctx.structure.continuous)
        if dim < 2:
            raise ZooError("guide='flow' needs at least 2 continuous latent dimensions")
    return autoguide(ctx, name)


@dataclass
class FittedGuide:
    """A guide fitted by SVI, and what the fit decided."""

    guide: Callable[..., Any]
    name: str
    elbo: str
    trace: list[float]
    sampled: tuple[str, ...]  # latent sites the guide draws
    enumerated: tuple[str, ...]  # discrete sites summed out in the model instead
    jit: bool = False  # fitted with Pyro's JIT-compiled ELBO
    jit_fallback: str | None = None  # why the JIT ELBO was asked for (jit=None) but not used

    @property
    def jit_diagnostics(self) -> dict[str, Any]:
        """How it was fitted, for a run's diagnostics: ``jit``, and ``jit_fallback`` if any."""
        return {
            "jit": self.jit,
            **({"jit_fallback": self.jit_fallback} if self.jit_fallback else {}),
        }


def fit_guide(
    ctx: EngineContext,
    *,
    guide: str | None,
    elbo: str | None,
    num_steps: int,
    lr: float,
    num_particles: int = 1,
    jit: bool | None = False,
    subsample_size: int | None = None,
) -> FittedGuide:
    """Fit the model's own guide or an autoguide; discrete sites the guide does not sample are
    enumerated in the model (``elbo="enum"``, the default then). ``subsample_size``: minibatches
    of the plates (:class:`~zoo_inference.optim.Subsample`), for the model's own guide only.
    ``jit``: Pyro's JIT-compiled ELBO (True), the plain one (False), or (None) the JIT one where
    it has one and it agrees with the plain one at two fresh random states
    (:func:`~zoo_inference.optim.jit_disagrees`; several times faster a fit, the check included),
    else the plain one."""
    s = ctx.structure
    guide_name = guide or ("model" if ctx.guide is not None else "normal")
    if subsample_size is not None and guide_name != "model":
        raise ZooError(
            "subsample_size needs the model's own guide (guide='model'), written to index its "
            "data by the plate's indices"
        )
    if guide_name == "flow" and jit:
        raise ZooError(
            "jit=True does not work with guide='flow' (Pyro's JIT cannot trace the "
            "flow's network parameters); use jit=False"
        )
    q = build_guide(ctx, guide_name)
    data = dict(ctx.data)
    sampled = guide_sites(q, data) if guide_name == "model" else set(s.continuous)
    enum_sites = tuple(n for n in s.discrete if n not in sampled)
    elbo_name = elbo or (
        "enum" if enum_sites else "graph" if set(s.discrete) & sampled else "trace"
    )
    if enum_sites and elbo_name != "enum":
        raise ZooError(
            f"discrete sites {list(enum_sites)} are not sampled by the guide and must be "
            f"enumerated: use elbo='enum' (got elbo={elbo_name!r})"
        )
    model = enumerated(ctx.model) if enum_sites else ctx.model
    options: dict[str, Any] = dict(
        num_particles=num_particles,
        max_plate_nesting=s.max_plate_nesting,
        minibatches=subsample_size is not None or bool(s.subsampled),
    )
    auto = jit is None and guide_name != "flow" and elbo_name in JIT_ELBOS
    loss = make_elbo(elbo_name, jit=bool(jit) or auto, **options)
    trace, why = fit(
        model,
        q,
        data,
        loss,
        num_steps=num_steps,
        lr=lr,
        progress=ctx.progress,
        desc=f"{ctx.name} svi[{guide_name},{elbo_name}]",
        check_shapes=elbo_name == "enum",
        subsample_size=subsample_size,
        plain=make_elbo(elbo_name, **options) if auto else None,
    )
    drawn = tuple(n for n in s.latent if n in sampled)
    used = bool(jit) or (auto and why is None)
    return FittedGuide(q, guide_name, elbo_name, trace, drawn, enum_sites, used, why)


def weighted_draws(
    ctx: EngineContext,
    q: Callable[..., Any],
    sites: tuple[str, ...],
    summed: tuple[str, ...],
    n: int,
    *,
    name: str,
) -> tuple[dict[str, torch.Tensor], np.ndarray]:
    """``n`` draws of ``sites`` from ``q`` and their log importance weights
    log p(y, draw) - log q(draw), the ``summed`` discrete sites summed out of p."""
    values, log_q = guide_draws(q, ctx.data, n, sites, name=name)
    s = replace(ctx.structure, discrete=summed)
    return values, log_joint_draws(ctx.model, ctx.data, values, s, name=ctx.name) - log_q


def batched_backend(ctx: EngineContext, guide: str | None, elbo: str | None) -> str | None:
    """None if the zoo's batched ADVI (:mod:`zoo_inference.advi`) fits this guide and ELBO, else why
    not (then Pyro's SVI does)."""
    name = guide or ("model" if ctx.guide is not None else "normal")
    if name not in FAMILIES:
        return f"guide={name!r} is fitted by Pyro's SVI (the batched path fits {list(FAMILIES)})"
    if elbo not in BATCHED_ELBOS:
        return (
            f"elbo={elbo!r} is fitted by Pyro's SVI (the batched path fits trace, meanfield, enum)"
        )
    if not ctx.structure.continuous:
        return "the model has no continuous latent sites"
    if ctx.structure.subsampled:
        return f"the model subsamples its data (plates {list(ctx.structure.subsampled)})"
    return None


def svi_engine(
    ctx: EngineContext,
    *,
    guide: str | None = None,
    elbo: str | None = None,
    num_steps: int = 2000,
    lr: float = 0.05,
    num_particles: int = 1,
    num_samples: int = 1000,
    jit: bool | None = None,
    backend: str | None = None,
    subsample_size: int | None = None,
) -> Run:
    """Fit a guide by SVI, then draw ``num_samples`` from it as a one-chain posterior.

    Gaussian autoguides (``normal``, ``mvn``) are fitted by the zoo's batched ADVI on the model's
    compiled log density (``backend="zoo"``, the default where it applies: the particles are the
    batch, one fused step per iteration); the model's own guide and the other autoguides and
    ELBOs by Pyro's SVI (``backend="pyro"``, which also fits the Gaussian guides on request).
    ``jit``: for the zoo, compile the density (None: once the run shows it pays); for Pyro, its
    JIT-compiled ELBO (None: where it has one and it agrees with the plain one, else the plain
    one, with ``diagnostics["jit_fallback"]`` saying why).

    Discrete sites the guide does not sample are enumerated in the model (``elbo="enum"``, the
    default then) and recovered afterwards from their exact conditional posterior given each guide
    draw. Importance weights p(y, z)/q(z) of the draws give Pareto k-hat and an evidence estimate;
    the run's evidence is the ELBO averaged over those draws (a lower bound).

    ``subsample_size``: each step fits minibatches of the model's plates of more elements (the
    model's own guide, Pyro's SVI); the draws afterwards are of all the data. A model that
    subsamples its own data (``pyro.plate(name, N, subsample_size=B)``, an amortised model: its
    sites shaped by one minibatch) is fitted on its minibatches, and its draws afterwards are of
    its first minibatch (the first B data points; the posterior group grows with B, not N); its
    evidence, importance estimate and Pareto k-hat come from ``num_samples`` draws of the guide
    for each of the N data points (:func:`pointwise_evidence`). After a fit by
    Pyro, the model's own scores of it (``evaluate``, see ``ModelEntry.evaluate``) join the
    diagnostics (numbers and words; image grids and other arrays join the extras), and
    ``extras["param_state"]`` holds the fitted parameters (Pyro's
    ``ParamStoreDict.get_state()``; ``set_state`` restores them).
    """
    why_not = batched_backend(ctx, guide, elbo)
    if why_not is None and subsample_size is not None:
        why_not = "subsample_size is fitted by Pyro's SVI"
    if backend == "zoo" and why_not:
        raise ZooError(f"backend='zoo' does not apply: {why_not}; use backend='pyro'")
    if backend != "pyro" and why_not is None:
        compile_ = bool(jit) and has_compiler()
        try:
            density = batched_density(
                ctx.model, ctx.data, ctx.structure, num_particles, compile=compile_
            )
        except (ValueError, RuntimeError) as e:  # no point of finite density was found, ...
            if backend == "zoo":
                raise
            warnings.warn(
                f"svi: the batched log density cannot be built ({one_line(e)}); fitting with "
                "Pyro's SVI instead",
                DensityWarning,
                stacklevel=2,
            )
        else:
            return _batched_svi(
                ctx,
                density,
                guide=guide or "normal",
                elbo=elbo,
                num_steps=num_steps,
                lr=lr,
                num_particles=num_particles,
                num_samples=num_samples,
                jit=jit,
            )
    fitted = fit_guide(
        ctx,
        guide=guide,
        elbo=elbo,
        num_steps=num_steps,
        lr=lr,
        num_particles=num_particles,
        jit=jit,
        subsample_size=subsample_size,
    )
    param_state = copy.deepcopy(pyro.get_param_store().get_state())
    scores = dict(ctx.evaluate(**ctx.data)) if ctx.evaluate is not None else {}
    # numbers and words join the diagnostics; the rest (image grids, arrays) the extras
    shown = {k: v for k, v in scores.items() if v is None or isinstance(v, str | Real)}
    drawn, q, pointwise = ctx, fitted.guide, None
    if ctx.structure.subsampled:  # the model draws its own minibatches (an amortised model)
        drawn, q, pointwise = _amortised(ctx, fitted.guide, num_samples)
    values, log_w = weighted_draws(
        drawn,
        q,
        fitted.sampled,
        fitted.enumerated,
        num_samples,
        name=f"the guide of {ctx.name}",
    )
    posterior = {k: v.numpy()[None] for k, v in values.items()}
    diagnostics = {
        "guide": fitted.name,
        "elbo_kind": fitted.elbo,
        "backend": "pyro",
        **fitted.jit_diagnostics,
        **({"subsample_size": subsample_size} if subsample_size is not None else {}),
        **shown,
    }
    run = _svi_run(
        drawn,
        posterior,
        log_w,
        fitted.trace,
        recover=fitted.enumerated,
        point=fitted.name == "delta",
        diagnostics=diagnostics,
        num_steps=num_steps,
        pointwise=pointwise,
    )
    rest = {k: v for k, v in scores.items() if k not in shown}
    return replace(run, extras={**run.extras, **rest, "param_state": param_state})


def _amortised(
    ctx: EngineContext, guide: Callable[..., Any], num_samples: int
) -> tuple[EngineContext, Callable[..., Any], np.ndarray | None]:
    """For a model that subsamples its own data (``pyro.plate(name, N, subsample_size=B)``,
    its sites shaped by one minibatch): the context and guide with every such plate fixed to
    its first B data points, whose latents the run's draws hold (so the posterior group grows
    with the minibatch, not the data); and ``num_samples`` importance weights per data point
    over all the data, (K, N), which give the run's evidence (:func:`pointwise_evidence`).
    With a global latent site (outside the subsampled plates, such as a Bayesian network's
    weights) the data points' weights are not separate: None, and the run has no evidence."""
    trace = trace_model(ctx.model, ctx.data)
    plates = subsampled(trace)
    first_guide = first_subsample(guide, plates)
    first = replace(ctx, model=first_subsample(ctx.model, plates), guide=first_guide)
    in_plates = [
        any(f.name in plates for f in trace.nodes[n]["cond_indep_stack"])
        for n in ctx.structure.latent
    ]
    if not all(in_plates):
        return first, first_guide, None
    nesting = ctx.structure.max_plate_nesting
    lw = pointwise_log_weights(ctx.model, guide, ctx.data, num_samples, max_plate_nesting=nesting)
    return first, first_guide, lw


def pointwise_evidence(lw: np.ndarray) -> tuple[Evidence | None, dict[str, Any]]:
    """The evidence of per-datapoint importance weights ``lw`` (K draws, N data points): the
    ELBO sum_i mean_k log w_ik (a lower bound on log p(y)); the importance estimate sum_i log
    mean_k w_ik; Pareto k-hat per data point (``pareto_k`` the median, the typical data point's;
    the largest, and the share above 0.7)."""
    finite = np.isfinite(lw).all(0)
    if not finite.any():
        return None, {"pareto_k": float("nan"), "is_log_evidence": float("nan")}
    ok = lw[:, finite]
    k = psis_pareto_k_each(ok.T)
    K = ok.shape[0]
    diagnostics = {
        "pareto_k": float(np.median(k)),
        "pareto_k_max": float(np.max(k)),
        "pareto_k_share_above_0_7": float(np.mean(k > 0.7)),
        "is_log_evidence": float((logsumexp(ok, axis=0) - np.log(K)).sum()),
        "importance_draws_per_point": K,
    }
    if not finite.all():
        diagnostics["nonfinite_points"] = int((~finite).sum())
    return Evidence(float(ok.mean(0).sum()), "lower_bound"), diagnostics


def _batched_svi(
    ctx: EngineContext,
    density: BatchedDensity,
    *,
    guide: str,
    elbo: str | None,
    num_steps: int,
    lr: float,
    num_particles: int,
    num_samples: int,
    jit: bool | None,
) -> Run:
    """SVI by the zoo's batched ADVI; draws and importance weights from the same density."""
    s = ctx.structure
    density.start_run(auto_compile=jit is None)
    gen = torch.Generator().manual_seed(chain_seed(ctx.seed, 0))
    family = FAMILIES[guide]
    pyro.set_rng_seed(chain_seed(ctx.seed, 1))  # the start (prior medians) whether or not the
    with torch.no_grad():  # density was built in this run (building it draws from the prior)
        q, trace = advi(
            ctx,
            density,
            family=family,
            num_steps=num_steps,
            lr=lr,
            gen=gen,
            desc=f"{ctx.name} svi[{guide},{family}]",
        )
        theta, log_q = q.sample(num_samples, gen)
        log_p = density.values(theta)
    log_w = (log_p.double() - log_q.double()).numpy()
    values = density.constrain(theta)
    posterior = {k: v.numpy()[None] for k, v in values.items()}
    elbo_kind = elbo or ("enum" if s.discrete else "trace")
    diagnostics = {
        "guide": guide,
        "elbo_kind": elbo_kind,
        "backend": "zoo",
        "jit": jit,
        "density": density.mode,
        "compile_s": round(density.compile_s, 3),
        "num_particles": num_particles,
    }
    return _svi_run(
        ctx,
        posterior,
        log_w,
        trace,
        recover=s.discrete,
        point=False,
        diagnostics=diagnostics,
        num_steps=num_steps,
    )


def _svi_run(
    ctx: EngineContext,
    posterior: dict[str, np.ndarray],
    log_w: np.ndarray,
    trace: list[float],
    *,
    recover: tuple[str, ...],
    point: bool,
    diagnostics: dict[str, Any],
    num_steps: int,
    pointwise: np.ndarray | None = None,
) -> Run:
    """The Run of a fitted guide: its draws completed, its ELBO trace, importance diagnostics
    (from the per-datapoint weights ``pointwise`` of an amortised model where given)."""
    finite = np.isfinite(log_w)
    posterior, log_lik, omitted = complete(ctx, posterior, recover=recover)
    finite_trace = [x for x in trace[-min(100, len(trace)) :] if np.isfinite(x)]
    if pointwise is not None:
        evidence, weights = pointwise_evidence(pointwise)
    else:
        evidence = Evidence(float(np.mean(log_w[finite])), "lower_bound") if finite.any() else None
        weights = {
            "pareto_k": psis_pareto_k(log_w[finite]) if finite.sum() > 10 else float("nan"),
            "is_log_evidence": float(logsumexp(log_w[finite]) - np.log(finite.sum()))
            if finite.any()
            else float("nan"),
        }
    diagnostics = {
        **diagnostics,
        "num_steps": num_steps,
        "final_elbo": float(np.mean(finite_trace)) if finite_trace else float("nan"),
        **weights,
    }
    if omitted:
        diagnostics["omitted"] = omitted
    return make_run(
        "svi",
        posterior,
        kind="point" if point else "draws",
        log_likelihood=log_lik,
        observed_data=ctx.data,
        evidence=evidence,
        traces={"elbo": trace},
        diagnostics=diagnostics,
    )
