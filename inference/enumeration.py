"""Exact inference over discrete latent sites: the ``enum`` engine and the helpers that the other
engines use to marginalise discrete sites (log joint) and to recover them afterwards
(``infer_discrete``)."""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import pyro
import pyro.poutine as poutine
import torch
from pyro.infer import TraceEnum_ELBO, config_enumerate, infer_discrete
from tqdm.auto import tqdm

from .arviz_io import exact_moment_rows, make_run, moment_rows
from .context import EngineContext
from .results import NumericalFailure, Run, ZooError
from .structure import ModelStructure


def _empty_guide(*args: Any, **kwargs: Any) -> None:
    """A guide with no sites: every latent site of the model is enumerated (or conditioned)."""


def enumerated(model: Callable[..., Any]) -> Callable[..., Any]:
    """Mark every discrete site of ``model`` for parallel enumeration."""
    return config_enumerate(model, default="parallel")


def log_joint(
    model: Callable[..., Any],
    data: Mapping[str, Any],
    values: Mapping[str, torch.Tensor],
    max_plate_nesting: int,
) -> float:
    """log p(data, values) with every discrete latent site not in ``values`` summed out exactly."""
    conditioned = enumerated(poutine.condition(model, data=dict(values)))
    elbo = TraceEnum_ELBO(max_plate_nesting=max_plate_nesting)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.filterwarnings("ignore", "TraceEnum_ELBO found no sample sites")
        return -float(elbo.loss(conditioned, _empty_guide, **data))


def log_prob_of(
    model: Callable[..., Any], data: Mapping[str, Any], values: Mapping[str, torch.Tensor]
) -> float:
    """Sum of log densities of the sites named in ``values`` (their prior, given the rest)."""
    with torch.no_grad(), pyro.validation_enabled(False):
        trace = poutine.trace(poutine.condition(model, data=dict(values))).get_trace(**data)
    total = 0.0
    for name in values:
        site = trace.nodes[name]
        total += float(site["fn"].log_prob(site["value"]).sum() * site["scale"])
    return total


Draws = Mapping[str, torch.Tensor]
"""Values of some sites for ``n`` draws: each tensor shaped ``(n, *site_shape)``."""


def draw_discrete(
    model: Callable[..., Any],
    data: Mapping[str, Any],
    draws: Draws,
    n: int,
    structure: ModelStructure,
    *,
    sites: tuple[str, ...] | None = None,
    temperature: int = 1,
    progress: bool = False,
    desc: str = "infer_discrete",
    batch_size: int = 250,
) -> dict[str, np.ndarray]:
    """For each of ``n`` draws of the continuous sites, draw the discrete ``sites`` (default: all)
    from their exact conditional posterior (temperature 1) or take their joint MAP
    (temperature 0).

    Draws are processed in vectorised batches (an outer plate over draws); a model that cannot be
    vectorised that way is run one draw at a time. Returns arrays shaped ``(n, *site_shape)``.
    """
    sites = structure.discrete if sites is None else sites
    out: dict[str, list[np.ndarray]] = {s: [] for s in sites}
    starts = range(0, n, batch_size)
    for i in tqdm(starts, desc=desc, disable=not progress or len(starts) < 2, leave=False):
        m = min(batch_size, n - i)
        chunk = {k: v[i : i + m] for k, v in draws.items()}
        try:
            drawn = _draw_batch(model, data, chunk, m, structure, sites, temperature)
        except (RuntimeError, ValueError, IndexError):
            drawn = _draw_each(model, data, chunk, m, structure, sites, temperature)
        for s in sites:
            out[s].append(drawn[s])
    return {s: np.concatenate(v) for s, v in out.items()}


def batched(model: Callable[..., Any], n: int, dim: int) -> Callable[..., Any]:
    """``model`` under an outer plate of ``n`` independent copies at ``dim`` (left of its own)."""

    def fn(*args: Any, **kwargs: Any) -> Any:
        with pyro.plate("_draws", n, dim=dim):
            return model(*args, **kwargs)

    return fn


def conditioned_batch(
    model: Callable[..., Any], data: Mapping[str, Any], draws: Draws, n: int, dim: int
) -> Callable[..., Any]:
    """:func:`batched` ``model`` conditioned on ``draws``, each reshaped to the shape its site
    takes under the plate over draws."""
    with torch.no_grad(), pyro.validation_enabled(False):
        shapes = poutine.trace(batched(model, n, dim)).get_trace(**data)
    values = {k: v.reshape(shapes.nodes[k]["value"].shape) for k, v in draws.items()}
    return poutine.condition(batched(model, n, dim), data=values)


def log_joint_batch(
    model: Callable[..., Any],
    data: Mapping[str, Any],
    draws: Draws,
    n: int,
    structure: ModelStructure,
) -> np.ndarray:
    """:func:`log_joint` for ``n`` draws at once: log p(data, draw_i) with the discrete sites
    summed out, one number per draw (tensor message passing, as TraceEnum_ELBO does, contracted
    down to the plate over draws)."""
    from pyro.infer.traceenum_elbo import _compute_model_factors
    from pyro.ops.contract import contract_to_tensor

    nesting = structure.max_plate_nesting
    conditioned = enumerated(conditioned_batch(model, data, draws, n, -1 - nesting))
    elbo = TraceEnum_ELBO(max_plate_nesting=nesting + 1)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.filterwarnings("ignore", "TraceEnum_ELBO found no sample sites")
        model_trace, guide_trace = next(elbo._get_traces(conditioned, _empty_guide, (), data))
        costs, factors, _, sum_dims, scale = _compute_model_factors(model_trace, guide_trace)
        sym = model_trace.plate_to_symbol["_draws"]
        total = torch.zeros(n, dtype=torch.float64)
        terms = [(t, 1.0) for ts in costs.values() for t in ts]
        if factors:
            contracted = contract_to_tensor(factors, sum_dims, target_ordinal=frozenset({sym}))
            terms.append((contracted, scale))  # the common scale of enumerated sites
        for term, factor in terms:
            dims = term._pyro_dims
            if sym in dims:
                keep = dims.index(sym)
                other = [i for i in range(term.dim()) if i != keep]
                total += factor * (term.sum(other) if other else term).reshape(-1).double()
            else:
                total += factor * term.sum().double()
    return total.numpy()


def pointwise_log_likelihood(
    model: Callable[..., Any],
    data: Mapping[str, Any],
    posterior: Mapping[str, np.ndarray],
    structure: ModelStructure,
) -> dict[str, np.ndarray]:
    """log p(y_i | theta) of every observed site for every posterior draw (chain, draw, ...):
    the ``log_likelihood`` group ArviZ's LOO/WAIC read. For models without discrete latents."""
    chains, ndraws = next(iter(posterior.values())).shape[:2]
    n = chains * ndraws
    draws = {k: torch.as_tensor(v).reshape((n,) + v.shape[2:]) for k, v in posterior.items()}
    fn = conditioned_batch(model, data, draws, n, -1 - structure.max_plate_nesting)
    with torch.no_grad(), pyro.validation_enabled(False):
        trace = poutine.trace(fn).get_trace(**data)
    out = {}
    for name in structure.observed:
        site = trace.nodes[name]
        lp = site["fn"].log_prob(site["value"])
        shape = tuple(site["value"].shape)
        fits = lp.numel() == n * int(np.prod(shape))
        out[name] = lp.reshape((chains, ndraws) + shape if fits else (chains, ndraws, -1))
    return {k: v.numpy() for k, v in out.items()}


def _draw_batch(
    model: Callable[..., Any],
    data: Mapping[str, Any],
    draws: Draws,
    n: int,
    structure: ModelStructure,
    sites: tuple[str, ...],
    temperature: int,
) -> dict[str, np.ndarray]:
    """infer_discrete for ``n`` draws at once, under a plate over draws left of the model's."""
    dim = -1 - structure.max_plate_nesting
    sampler = infer_discrete(
        enumerated(conditioned_batch(model, data, draws, n, dim)),
        first_available_dim=dim - 1,
        temperature=temperature,
    )
    with torch.no_grad(), pyro.validation_enabled(False):
        trace = poutine.trace(sampler).get_trace(**data)
    return {s: trace.nodes[s]["value"].reshape((n,) + structure.shapes[s]).numpy() for s in sites}


def _draw_each(
    model: Callable[..., Any],
    data: Mapping[str, Any],
    draws: Draws,
    n: int,
    structure: ModelStructure,
    sites: tuple[str, ...],
    temperature: int,
) -> dict[str, np.ndarray]:
    out: dict[str, list[np.ndarray]] = {s: [] for s in sites}
    for i in range(n):
        conditioned = enumerated(poutine.condition(model, data={k: v[i] for k, v in draws.items()}))
        sampler = infer_discrete(
            conditioned,
            first_available_dim=-1 - structure.max_plate_nesting,
            temperature=temperature,
        )
        with torch.no_grad():
            trace = poutine.trace(sampler).get_trace(**data)
        for s in sites:
            out[s].append(trace.nodes[s]["value"].detach().cpu().numpy())
    return {s: np.stack(v) for s, v in out.items()}


def discrete_marginals(
    model: Callable[..., Any],
    data: Mapping[str, Any],
    values: Mapping[str, torch.Tensor],
    max_plate_nesting: int,
) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Exact posterior marginal of each discrete site given ``values``: site -> (support, probs)
    with ``probs`` shaped (len(support), *site_shape)."""
    conditioned = enumerated(poutine.condition(model, data=dict(values)))
    elbo = TraceEnum_ELBO(max_plate_nesting=max_plate_nesting)
    with torch.no_grad():
        marginals = elbo.compute_marginals(conditioned, _empty_guide, **data)
    result = {}
    for name, d in marginals.items():
        support = d.enumerate_support(expand=False)  # (V, 1, ..., 1)
        probs = d.log_prob(support).exp()
        result[name] = (support.reshape(-1).numpy(), probs.numpy())
    return result


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
    Continuous latents are held fixed: at ``params`` when given, otherwise at their MAP, found by
    SVI with an ``AutoDelta`` guide and the discrete sites enumerated (TraceEnum_ELBO). The log
    evidence is then log p(y | params) and ``diagnostics["conditional_on"]`` names the fixed sites.
    """
    s = ctx.structure
    fixed: dict[str, torch.Tensor] = {}
    diagnostics: dict[str, Any] = {}
    if s.continuous:
        if params is None:
            from .svi import fit_map

            fixed, trace = fit_map(ctx, num_steps=map_steps, lr=lr)
            diagnostics["map_final_elbo"] = trace[-1]
            diagnostics["params_source"] = f"MAP by SVI (AutoDelta, {map_steps} steps)"
        else:
            missing = sorted(set(s.continuous) - set(params))
            extra = sorted(set(params) - set(s.continuous))
            if missing or extra:
                raise ZooError(
                    f"params must give exactly the continuous sites {list(s.continuous)}"
                    + (f"; missing {missing}" if missing else "")
                    + (f"; unknown {extra}" if extra else "")
                )
            for name in s.continuous:
                value = torch.as_tensor(params[name], dtype=torch.get_default_dtype())
                if tuple(value.shape) != s.shapes[name]:
                    raise ZooError(
                        f"params[{name!r}] has shape {tuple(value.shape)}, "
                        f"expected {s.shapes[name]}"
                    )
                fixed[name] = value
            diagnostics["params_source"] = "given"
        diagnostics["conditional_on"] = list(s.continuous)

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
    log_map = log_joint(
        ctx.model, ctx.data, {**fixed, **_as_tensors(map_assignment)}, s.max_plate_nesting
    )
    diagnostics.update(log_evidence=log_evidence, map_log_joint=log_map)
    exact = exact_moment_rows(marginals)
    for name, value in fixed.items():
        exact.update(moment_rows(name, value.numpy(), 0.0))
    return make_run(
        "enum",
        posterior,
        observed_data=ctx.data,
        diagnostics=diagnostics,
        log_evidence=log_evidence,
        exact_moments=exact,
        extras={"marginals": marginals, "map": map_assignment, "params": fixed},
    )


def _as_tensors(values: Mapping[str, np.ndarray]) -> dict[str, torch.Tensor]:
    return {k: torch.as_tensor(v) for k, v in values.items()}
