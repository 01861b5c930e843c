"""Discrete latent sites: marking them for enumeration, summing them out of the log joint, and
recovering them afterwards from their exact conditional posterior (``infer_discrete``)."""

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

from .replay import Draws, VectorisationWarning, batched
from .results import one_line
from .sites import site_dist, site_value
from .structure import ModelStructure


def empty_guide(*args: Any, **kwargs: Any) -> None:
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
    """log p(data, values) with every discrete latent site not in ``values`` summed out exactly
    (-TraceEnum_ELBO with an empty guide)."""
    conditioned = enumerated(poutine.condition(model, data=dict(values)))
    elbo = TraceEnum_ELBO(max_plate_nesting=max_plate_nesting)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.filterwarnings("ignore", "TraceEnum_ELBO found no sample sites")
        return -float(elbo.loss(conditioned, empty_guide, **data))


def log_prob_of(
    model: Callable[..., Any], data: Mapping[str, Any], values: Mapping[str, torch.Tensor]
) -> float:
    """Sum of log densities of the sites named in ``values`` (their prior, given the rest)."""
    with torch.no_grad(), pyro.validation_enabled(False):
        trace = poutine.trace(poutine.condition(model, data=dict(values))).get_trace(**data)
    sites = [trace.nodes[k] for k in values]
    total: float = sum(
        float(site_dist(s).log_prob(site_value(s)).sum() * s["scale"]) for s in sites
    )
    return total


def conditioned_batch(
    model: Callable[..., Any], data: Mapping[str, Any], draws: Draws, n: int, dim: int
) -> Callable[..., Any]:
    """:func:`batched` ``model`` conditioned on ``draws``, each reshaped to the shape its site
    takes under the plate over draws."""
    with torch.no_grad(), pyro.validation_enabled(False):
        shapes = poutine.trace(batched(model, n, dim)).get_trace(**data)
    values = {k: v.reshape(site_value(shapes.nodes[k]).shape) for k, v in draws.items()}
    return poutine.condition(batched(model, n, dim), data=values)


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
    (temperature 0). Returns arrays shaped ``(n, *site_shape)``.

    Draws are processed in vectorised batches (an outer plate over draws); a model that does not
    broadcast over that plate is run one draw at a time, with a warning saying why."""
    sites = structure.discrete if sites is None else sites
    out: dict[str, list[np.ndarray]] = {s: [] for s in sites}
    starts = range(0, n, batch_size)
    vectorised = True
    for i in tqdm(starts, desc=desc, disable=not progress or len(starts) < 2, leave=False):
        m = min(batch_size, n - i)
        chunk = {k: v[i : i + m] for k, v in draws.items()}
        drawn = None
        if vectorised:
            try:
                drawn = _draw_batch(model, data, chunk, m, structure, sites, temperature)
            except (RuntimeError, ValueError, IndexError) as e:
                vectorised = False
                warnings.warn(
                    f"recovering discrete sites {list(sites)}: the vectorised path does not "
                    f"apply ({one_line(e)}); using the exact per-draw path",
                    VectorisationWarning,
                    stacklevel=2,
                )
        if drawn is None:
            drawn = _draw_each(model, data, chunk, m, structure, sites, temperature)
        for s in sites:
            out[s].append(drawn[s])
    return {s: np.concatenate(v) for s, v in out.items()}


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
    out = {}
    for s in sites:
        value = trace.nodes[s]["value"]
        want = (n,) + structure.shapes[s]
        if value.numel() != int(np.prod(want)):
            raise ValueError(
                f"site {s!r} has shape {tuple(value.shape)} under the plate over "
                f"{n} draws, not {want}"
            )
        out[s] = value.reshape(want).numpy()
    return out


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
        marginals = elbo.compute_marginals(conditioned, empty_guide, **data)
    result = {}
    for name, d in marginals.items():
        support = d.enumerate_support(expand=False)  # (V, 1, ..., 1)
        probs = d.log_prob(support).exp()
        result[name] = (support.reshape(-1).numpy(), probs.numpy())
    return result
