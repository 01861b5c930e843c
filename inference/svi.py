"""Stochastic variational inference: the model's own guide or an autoguide, any of Pyro's ELBOs."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pyro
import pyro.poutine as poutine
import torch
from pyro.infer import (
    SVI,
    JitTrace_ELBO,
    JitTraceEnum_ELBO,
    JitTraceGraph_ELBO,
    JitTraceMeanField_ELBO,
    RenyiELBO,
    Trace_ELBO,
    TraceEnum_ELBO,
    TraceGraph_ELBO,
    TraceMeanField_ELBO,
)
from pyro.infer import autoguide as ag
from pyro.optim import ClippedAdam
from scipy.special import logsumexp
from tqdm.auto import tqdm

from .arviz_io import make_run, psis_pareto_k
from .context import EngineContext
from .enumeration import (
    batched,
    draw_discrete,
    enumerated,
    log_joint,
    log_joint_batch,
    pointwise_log_likelihood,
)
from .results import NumericalFailure, Run, ZooError

AUTOGUIDES: dict[str, Callable[..., Any]] = {
    "normal": ag.AutoNormal,
    "mvn": ag.AutoMultivariateNormal,
    "lowrank": ag.AutoLowRankMultivariateNormal,
    "delta": ag.AutoDelta,
    "flow": ag.AutoIAFNormal,
}
ELBOS = ("trace", "meanfield", "enum", "graph", "iwae", "renyi")
GUIDES = ("model", *AUTOGUIDES)


def make_elbo(
    name: str, *, num_particles: int, max_plate_nesting: int, jit: bool = False
) -> pyro.infer.ELBO:
    """ELBO by name: ``iwae`` is the importance-weighted bound (Rényi alpha=0), ``renyi`` has
    alpha=0.5."""
    kw = dict(num_particles=num_particles, max_plate_nesting=max_plate_nesting)
    jit_kw = dict(kw, ignore_jit_warnings=True)
    if name == "trace":
        return JitTrace_ELBO(**jit_kw) if jit else Trace_ELBO(**kw)
    if name == "meanfield":
        return JitTraceMeanField_ELBO(**jit_kw) if jit else TraceMeanField_ELBO(**kw)
    if name == "enum":
        return JitTraceEnum_ELBO(**jit_kw) if jit else TraceEnum_ELBO(**kw)
    if name == "graph":
        return JitTraceGraph_ELBO(**jit_kw) if jit else TraceGraph_ELBO(**kw)
    if name in ("iwae", "renyi"):
        if num_particles < 2:
            raise ZooError(f"elbo={name!r} needs num_particles >= 2 (got {num_particles})")
        return RenyiELBO(alpha=0.0 if name == "iwae" else 0.5, **kw)
    raise ZooError(f"unknown elbo {name!r}; choose one of {list(ELBOS)}")


def guide_sites(guide: Callable[..., Any], data: dict[str, Any]) -> set[str]:
    """Names of the latent sites a guide samples."""
    with torch.no_grad(), pyro.validation_enabled(False):
        trace = poutine.trace(guide).get_trace(**data)
    return {
        n
        for n, s in trace.nodes.items()
        if s["type"] == "sample" and not s["is_observed"] and not s["infer"].get("is_auxiliary")
    }


def build_guide(ctx: EngineContext, name: str) -> Callable[..., Any]:
    """The model's own guide (``"model"``) or an autoguide over the continuous latent sites."""
    if name == "model":
        if ctx.guide is None:
            raise ZooError(
                f"model {ctx.name!r} has no guide of its own; use an autoguide {list(AUTOGUIDES)}"
            )
        return ctx.guide
    hidden = ctx.structure.discrete
    blocked = poutine.block(ctx.model, hide=list(hidden)) if hidden else ctx.model
    if name == "flow":
        dim = sum(int(np.prod(ctx.structure.shapes[s])) for s in ctx.structure.continuous)
        if dim < 2:
            raise ZooError("guide='flow' needs at least 2 continuous latent dimensions")
    return AUTOGUIDES[name](blocked)


def fit(
    model: Callable[..., Any],
    guide: Callable[..., Any],
    data: dict[str, Any],
    elbo: pyro.infer.ELBO,
    *,
    num_steps: int,
    lr: float,
    progress: bool,
    desc: str,
) -> list[float]:
    """Run Adam on -ELBO (lr decays tenfold over the run) and return the ELBO trace."""
    pyro.clear_param_store()
    optim = ClippedAdam({"lr": lr, "lrd": 0.1 ** (1.0 / num_steps)})
    svi = SVI(model, guide, optim, loss=elbo)
    trace: list[float] = []
    bar = tqdm(range(num_steps), desc=desc, disable=not progress, leave=False)
    for step in bar:
        loss = svi.step(**data)
        if not np.isfinite(loss):
            raise NumericalFailure(f"ELBO is {-loss} at step {step}")
        trace.append(-float(loss))
        if progress and step % 100 == 0:
            bar.set_postfix(elbo=f"{-loss:.3f}")
    return trace


def fit_map(
    ctx: EngineContext, *, num_steps: int, lr: float
) -> tuple[dict[str, torch.Tensor], list[float]]:
    """MAP of the continuous sites with the discrete ones enumerated (AutoDelta + TraceEnum)."""
    guide = build_guide(ctx, "delta")
    elbo = TraceEnum_ELBO(max_plate_nesting=ctx.structure.max_plate_nesting)
    trace = fit(
        enumerated(ctx.model),
        guide,
        dict(ctx.data),
        elbo,
        num_steps=num_steps,
        lr=lr,
        progress=ctx.progress,
        desc=f"{ctx.name} MAP",
    )
    with torch.no_grad():
        values = guide.median(**ctx.data)
    return {k: v.detach() for k, v in values.items() if k in ctx.structure.continuous}, trace


def guide_draws(
    ctx: EngineContext,
    guide: Callable[..., Any],
    num_samples: int,
    *,
    enumerate_sites: tuple[str, ...] = (),
) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """Draws from a fitted guide as a one-chain posterior, with log importance weights
    log p(y, theta) - log q(theta) (discrete sites the guide leaves out are summed over in p and
    then drawn from their exact conditional posterior given each draw).

    Draws are vectorised under a plate over draws; a guide or model that cannot be vectorised
    that way is run one draw at a time."""
    try:
        posterior, log_w = _guide_draws_batched(ctx, guide, num_samples)
    except (RuntimeError, ValueError, IndexError, NotImplementedError):
        posterior, log_w = _guide_draws_loop(ctx, guide, num_samples)
    if enumerate_sites:
        draws = {n: torch.as_tensor(v[0]) for n, v in posterior.items()}
        recovered = draw_discrete(
            ctx.model,
            ctx.data,
            draws,
            num_samples,
            ctx.structure,
            sites=enumerate_sites,
            progress=ctx.progress,
        )
        posterior.update({n: v[None] for n, v in recovered.items()})
    return posterior, log_w


def _guide_draws_batched(
    ctx: EngineContext, guide: Callable[..., Any], num_samples: int
) -> tuple[dict[str, np.ndarray], np.ndarray]:
    s, data = ctx.structure, dict(ctx.data)
    dim = -1 - s.max_plate_nesting
    with torch.no_grad(), pyro.validation_enabled(False):
        gtrace = poutine.trace(batched(guide, num_samples, dim)).get_trace(**data)
        gtrace.compute_log_prob()
    log_q = torch.zeros(num_samples, dtype=torch.float64)
    draws: dict[str, torch.Tensor] = {}
    for name, site in gtrace.nodes.items():
        if site["type"] != "sample" or name == "_draws":
            continue
        lp = site["log_prob"]  # auxiliary sites of autoguides included
        keep = lp.dim() + dim
        lp = lp.sum([i for i in range(lp.dim()) if i != keep]) if lp.dim() > 1 else lp
        log_q += lp.reshape(num_samples).double()
        if name in s.latent:
            draws[name] = site["value"].detach().reshape((num_samples,) + s.shapes[name])
    log_p = log_joint_batch(ctx.model, data, draws, num_samples, s)
    return {n: v.numpy()[None] for n, v in draws.items()}, log_p - log_q.numpy()


def _guide_draws_loop(
    ctx: EngineContext, guide: Callable[..., Any], num_samples: int
) -> tuple[dict[str, np.ndarray], np.ndarray]:
    s, data = ctx.structure, dict(ctx.data)
    draws: dict[str, list[np.ndarray]] = {}
    log_w = np.empty(num_samples)
    for i in tqdm(range(num_samples), desc="guide draws", disable=not ctx.progress, leave=False):
        with torch.no_grad():
            gtrace = poutine.trace(guide).get_trace(**data)
            log_q = float(gtrace.log_prob_sum())  # auxiliary sites of autoguides included
        values = {
            n: site["value"].detach()
            for n, site in gtrace.nodes.items()
            if site["type"] == "sample" and n in s.latent
        }
        log_w[i] = log_joint(ctx.model, data, values, s.max_plate_nesting) - log_q
        for n, v in values.items():
            draws.setdefault(n, []).append(v.numpy())
    return {n: np.stack(v)[None] for n, v in draws.items()}, log_w


def svi_engine(
    ctx: EngineContext,
    *,
    guide: str | None = None,
    elbo: str | None = None,
    num_steps: int = 2000,
    lr: float = 0.05,
    num_particles: int = 1,
    num_samples: int = 1000,
    jit: bool = False,
) -> Run:
    """Fit a guide by SVI, then draw ``num_samples`` from it as a one-chain posterior.

    Discrete sites the guide does not sample are enumerated in the model (``elbo="enum"``, the
    default then) and recovered afterwards from their exact conditional posterior given each guide
    draw. Importance weights p(y, z)/q(z) of the draws give Pareto k-hat and an evidence estimate;
    ``log_evidence`` is the ELBO averaged over those draws (a lower bound).
    """
    s = ctx.structure
    guide_name = guide or ("model" if ctx.guide is not None else "normal")
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
    loss = make_elbo(
        elbo_name, num_particles=num_particles, max_plate_nesting=s.max_plate_nesting, jit=jit
    )
    trace = fit(
        model,
        q,
        data,
        loss,
        num_steps=num_steps,
        lr=lr,
        progress=ctx.progress,
        desc=f"{ctx.name} svi[{guide_name},{elbo_name}]",
    )

    posterior, log_w = guide_draws(ctx, q, num_samples, enumerate_sites=enum_sites)
    finite = np.isfinite(log_w)
    diagnostics = {
        "guide": guide_name,
        "elbo_kind": elbo_name,
        "num_steps": num_steps,
        "jit": jit,
        "final_elbo": float(np.mean(trace[-min(100, len(trace)) :])),
        "elbo": trace,
        "pareto_k": psis_pareto_k(log_w[finite]) if finite.sum() > 10 else float("nan"),
        "is_log_evidence": float(logsumexp(log_w[finite]) - np.log(finite.sum()))
        if finite.any()
        else float("nan"),
    }
    log_lik = None if s.discrete else pointwise_log_likelihood(ctx.model, data, posterior, s)
    return make_run(
        "svi",
        posterior,
        log_likelihood=log_lik,
        observed_data=data,
        diagnostics=diagnostics,
        log_evidence=float(np.mean(log_w[finite])) if finite.any() else None,
    )
