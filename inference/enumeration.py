"""The ``enum`` engine: exact inference over the discrete latent sites."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

from .arviz_io import make_run
from .context import EngineContext
from .discrete import discrete_marginals, draw_discrete, log_joint, log_prob_of
from .optim import fit_map
from .results import Evidence, NumericalFailure, Run, ZooError
from .sites import site_support
from .structure import trace_model


def _fixed_params(ctx: EngineContext, params: Mapping[str, Any]) -> dict[str, torch.Tensor]:
    s = ctx.structure
    if not isinstance(params, Mapping):
        raise ZooError(f"params must be a dict of site -> value, got {type(params).__name__}")
    missing = sorted(set(s.continuous) - set(params))
    extra = sorted(set(params) - set(s.continuous))
    if missing or extra:
        raise ZooError(
            f"params must give exactly the continuous sites {list(s.continuous)}"
            + (f"; missing {missing}" if missing else "")
            + (f"; unknown {extra}" if extra else "")
        )
    fixed = {}
    supports = {
        k: site_support(v)
        for k, v in trace_model(ctx.model, ctx.data).nodes.items()
        if k in s.continuous
    }
    for name in s.continuous:
        try:
            value = torch.as_tensor(params[name], dtype=torch.get_default_dtype())
        except (TypeError, ValueError, RuntimeError):
            raise ZooError(f"params[{name!r}] must be numbers, got {params[name]!r}") from None
        if tuple(value.shape) != s.shapes[name]:
            raise ZooError(
                f"params[{name!r}] has shape {tuple(value.shape)}, expected {s.shapes[name]}"
            )
        if not torch.isfinite(value).all():
            raise ZooError(f"params[{name!r}] must be finite, got {params[name]!r}")
        if not bool(supports[name].check(value).all()):
            raise ZooError(
                f"params[{name!r}] = {params[name]!r} is outside the support of site {name!r} "
                f"({supports[name]})"
            )
        fixed[name] = value
    return fixed


def enum_engine(
    ctx: EngineContext,
    *,
    params: Mapping[str, Any] | None = None,
    num_samples: int = 1000,
    map_steps: int = 1000,
    lr: float = 0.05,
) -> Run:
    """Exact enumeration of the discrete latent sites.

    With no continuous latents this is exact Bayesian inference: log evidence log p(y), exact
    posterior marginals, the joint MAP assignment (temperature 0) and exact posterior draws.
    Continuous latents are held fixed: at ``params`` when given, otherwise at their MAP: the
    ``AutoDelta`` guide's loss with the discrete sites enumerated (TraceEnum_ELBO), minimised by
    L-BFGS (at most ``map_steps`` iterations; Adam at ``lr`` for ``map_steps`` steps where it
    fails). The run is then conditional on them, and so is its evidence, log p(y | params).
    """
    s = ctx.structure
    fixed: dict[str, torch.Tensor] = {}
    diagnostics: dict[str, Any] = {}
    traces: dict[str, list[float]] = {}
    if s.continuous:
        if params is None:
            fixed, traces["map_elbo"], how = fit_map(ctx, num_steps=map_steps, lr=lr)
            diagnostics["params_source"] = f"MAP ({how}; AutoDelta's loss)"
        else:
            fixed = _fixed_params(ctx, params)
            diagnostics["params_source"] = "given"

    log_p = log_joint(ctx.model, ctx.data, fixed, s.max_plate_nesting)
    log_evidence = log_p - (log_prob_of(ctx.model, ctx.data, fixed) if fixed else 0.0)
    if not np.isfinite(log_evidence):
        raise NumericalFailure(f"log evidence is {log_evidence}")
    marginals = discrete_marginals(ctx.model, ctx.data, fixed, s.max_plate_nesting)
    map_values = draw_discrete(
        ctx.model, ctx.data, {k: v[None] for k, v in fixed.items()}, 1, s, temperature=0
    )
    draws = draw_discrete(
        ctx.model,
        ctx.data,
        {k: v.expand((num_samples,) + v.shape) for k, v in fixed.items()},
        num_samples,
        s,
        progress=ctx.progress,
        desc=f"{ctx.name} enum draws",
    )
    posterior: dict[str, np.ndarray] = {k: v[None] for k, v in draws.items()}
    for name, value in fixed.items():
        v = value.detach().numpy()
        posterior[name] = np.broadcast_to(v, (1, num_samples) + v.shape).copy()
    map_assignment = {k: v[0] for k, v in map_values.items()}
    assignment = {k: torch.as_tensor(v) for k, v in map_assignment.items()}
    diagnostics["map_log_joint"] = log_joint(
        ctx.model, ctx.data, {**fixed, **assignment}, s.max_plate_nesting
    )
    exact: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    for site, (values, probs) in marginals.items():
        v = values.reshape((-1,) + (1,) * (probs.ndim - 1))
        mean = (v * probs).sum(0)
        exact[site] = (mean, np.sqrt(np.clip((v**2 * probs).sum(0) - mean**2, 0.0, None)))
    for name, value in fixed.items():
        exact[name] = (value.numpy(), np.zeros(value.shape))
    held = tuple(fixed)
    return make_run(
        "enum",
        posterior,
        kind="conditional" if held else "draws",
        conditional_on=held,
        observed_data=ctx.data,
        evidence=Evidence(log_evidence, "conditional" if held else "exact", held),
        traces=traces,
        diagnostics=diagnostics,
        exact_moments=exact,
        extras={"marginals": marginals, "map": map_assignment, "params": fixed},
    )
