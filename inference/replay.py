"""Replaying a model (or a guide) on many draws at once: pointwise log-likelihoods, deterministic
sites, log joints and guide draws with their log densities.

The vectorised path runs the model once under a plate over draws, through Pyro's public
``Predictive(...).get_vectorized_trace``; it is right only when the model broadcasts over an extra
leading batch dimension. A check replays the first and last draw one at a time and compares; a
model that does not broadcast (``X @ beta``, ``torch.stack`` of sampled scalars, ...) takes the
per-draw path, with a warning that names the site and the reason. Both paths give the same
numbers.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyro
import pyro.poutine as poutine
import torch
from pyro.distributions import Delta
from pyro.infer import Predictive
from pyro.poutine.util import site_is_subsample

from .results import one_line
from .sites import site_dist, site_value
from .structure import ModelStructure, trace_model, traceable

Draws = Mapping[str, torch.Tensor]
"""Values of some sites for ``n`` draws: each tensor shaped ``(n, *site_shape)``."""


# The vectorised replay runs the model on at most this many draws at once: a model's per-draw
# tensors are multiplied by the batch (linear_gaussian_ssm's T x T covariances: 32,000 draws of
# the full profile made 2.6 GB a matrix, and its nuts cell reached 6.9 GB).
REPLAY_CHUNK = 1000
# The pointwise log-likelihood values a replay keeps at most (0.5 GiB in float32); past it the
# group is left out, with the reason: IRT's 30,012 answers over 32,000 draws would be 3.8 GB.
MAX_LOG_LIK_VALUES = 2**27


class VectorisationWarning(UserWarning):
    """A vectorised replay was not possible or disagreed; the per-draw path was used instead."""


class _NotVectorisable(Exception):
    def __init__(self, site: str, reason: str) -> None:
        super().__init__(f"site {site!r}: {reason}")
        self.site, self.reason = site, reason


@dataclass
class Replay:
    """Per-draw quantities, each shaped ``(n, ...)``."""

    log_lik: dict[str, np.ndarray] = field(default_factory=dict)  # observed site -> (n, *batch)
    deterministic: dict[str, np.ndarray] = field(default_factory=dict)  # site -> (n, *shape)
    # (n,): every site's log density, scaled, summed (empty until a replay fills it)
    log_joint: np.ndarray = field(default_factory=lambda: np.zeros(0))
    path: str = "vectorised"
    log_lik_left_out: str = ""  # why ``log_lik`` is empty (too many values to keep), if so


def n_draws(draws: Draws) -> int:
    return int(next(iter(draws.values())).shape[0]) if draws else 0


def _warn(what: str, err: Exception) -> None:
    reason = str(err) if isinstance(err, _NotVectorisable) else one_line(err)
    warnings.warn(
        f"{what}: the vectorised path does not apply ({reason}); using the exact per-draw path",
        VectorisationWarning,
        stacklevel=3,
    )


def _terms(
    trace: poutine.Trace, s: ModelStructure, n: int | None, shapes: Shapes, keep: bool = True
) -> Replay:
    """Log-likelihoods (unless not ``keep``), deterministic values and the log joint from one
    trace; ``n`` None for a single draw's trace, else the size of the plate over draws
    (outermost, at ``-1 - max_plate_nesting``)."""
    out = Replay()
    lead = () if n is None else (n,)
    total = torch.zeros(lead, dtype=torch.float64)
    for name, site in trace.nodes.items():
        if site["type"] != "sample" or site_is_subsample(site):
            continue
        if name in s.deterministic:
            value = _value_per_draw(name, site_value(site), n, shapes.value[name])
            out.deterministic[name] = value.numpy()
            continue
        batch = shapes.batch[name]
        lp = _lp_per_draw(
            name, site_dist(site).log_prob(site_value(site)), n, s.max_plate_nesting, batch
        )
        if keep and name in s.observed:  # the model's dtype: a float64 copy of float32 numbers only
            out.log_lik[name] = lp.detach().numpy()  # doubled what a report's cell store writes
        total = total + (site["scale"] * lp.double()).reshape(lead + (-1,)).sum(-1)
    out.log_joint = total.numpy()
    return out


def _value_per_draw(
    name: str, x: torch.Tensor, n: int | None, shape: tuple[int, ...]
) -> torch.Tensor:
    """A site's value as ``(n, *shape)`` (or ``shape`` for one draw)."""
    x = x.detach()
    want = tuple(shape) if n is None else (n, *shape)
    try:
        if x.numel() == int(np.prod(want)) and (n is None or (x.dim() and x.shape[0] == n)):
            return x.reshape(want)
        return x.expand(want)
    except RuntimeError as e:
        raise _NotVectorisable(name, f"its value of shape {tuple(x.shape)} is not {want}") from e


def _lp_per_draw(
    name: str, lp: torch.Tensor, n: int | None, nesting: int, batch: tuple[int, ...]
) -> torch.Tensor:
    """A site's log density as ``(n, *batch)``: the plate over draws sits at ``-1 - nesting``."""
    lp = lp.detach()
    if n is None:
        return lp.reshape(batch) if lp.numel() == int(np.prod(batch)) else lp.expand(batch)
    if lp.dim() > nesting + 1:
        raise _NotVectorisable(
            name,
            f"log density of shape {tuple(lp.shape)} has dims left of "
            f"the plate over draws (a batch dim not declared by a plate?)",
        )
    lp = lp.reshape((1,) * (nesting + 1 - lp.dim()) + tuple(lp.shape))
    padded = (1,) * (nesting - len(batch)) + tuple(batch)
    try:
        return lp.expand((n, *padded)).reshape((n, *batch))
    except RuntimeError as e:
        raise _NotVectorisable(
            name, f"log density of shape {tuple(lp.shape)} does not broadcast to {(n, *padded)}"
        ) from e


def plate_nesting(trace: poutine.Trace) -> int:
    """The deepest nesting of vectorised plates over a trace's sample sites."""
    dims = [
        f.dim
        for site in trace.nodes.values()
        if site["type"] == "sample"
        for f in site["cond_indep_stack"]
        if f.dim is not None  # the vectorized
    ]
    return -min(dims) if dims else 0


@dataclass(frozen=True)
class Shapes:
    """Per-draw shapes of a model's sites, read off one trace: ``value`` of latent and
    deterministic sites, ``batch`` (log density's shape) and ``event`` dims of sample sites."""

    value: Mapping[str, tuple[int, ...]]
    batch: Mapping[str, tuple[int, ...]]
    event: Mapping[str, int]


def _shapes(model: Callable[..., Any], data: Mapping[str, Any], s: ModelStructure) -> Shapes:
    trace = trace_model(model, data)
    sites = {
        k: v for k, v in trace.nodes.items() if v["type"] == "sample" and not site_is_subsample(v)
    }
    return Shapes(
        value=dict(s.shapes),
        batch={k: tuple(site_dist(v).batch_shape) for k, v in sites.items()},
        event={k: site_dist(v).event_dim for k, v in sites.items()},
    )


def _under_plate(draws: Draws, shapes: Shapes, nesting: int) -> dict[str, torch.Tensor]:
    """Draws shaped for a plate over draws at ``-1 - nesting``: (n, 1.., *batch, *event).
    (``Predictive`` pads by the whole site shape, which misplaces sites with an event shape.)"""
    out = {}
    for name, v in draws.items():
        shape = shapes.value[name]
        pad = nesting - (len(shape) - shapes.event.get(name, 0))
        if pad < 0:
            raise _NotVectorisable(name, f"batch shape of {shape} is not declared by plates")
        out[name] = v.reshape((v.shape[0],) + (1,) * pad + tuple(shape))
    return out


def batched(model: Callable[..., Any], n: int, dim: int) -> Callable[..., Any]:
    """``model`` under an outer plate of ``n`` independent copies at ``dim`` (left of its own)."""

    def fn(*args: Any, **kwargs: Any) -> Any:
        with pyro.plate("_draws", n, dim=dim):
            return model(*args, **kwargs)

    return fn


def replay_one(
    model: Callable[..., Any], data: Mapping[str, Any], values: Mapping[str, torch.Tensor]
) -> poutine.Trace:
    """One trace of ``model`` with the sites in ``values`` fixed."""
    with pyro.validation_enabled(False), torch.no_grad():
        return poutine.trace(poutine.condition(model, data=dict(values))).get_trace(**data)


def replay(
    model: Callable[..., Any],
    data: Mapping[str, Any],
    draws: Draws,
    structure: ModelStructure,
    *,
    name: str = "model",
) -> Replay:
    """Pointwise log-likelihoods, deterministic sites and log joints of ``n`` draws of every
    latent site; vectorised when the model broadcasts over draws, else one draw at a time."""
    n = n_draws(draws)
    shapes = _shapes(model, data, structure)
    points = sum(int(np.prod(shapes.batch[k])) for k in structure.observed)
    keep = n * points <= MAX_LOG_LIK_VALUES
    left_out = (
        ""
        if keep
        else (
            f"{n} draws x {points} pointwise terms = {n * points:,} values, over the "
            f"{MAX_LOG_LIK_VALUES:,} kept (fewer draws, or thin them, to have it)"
        )
    )
    try:
        parts = []
        for lo in range(0, max(n, 1), REPLAY_CHUNK):  # (no draws: one empty chunk)
            chunk = {k: v[lo : lo + REPLAY_CHUNK] for k, v in draws.items()}
            placed = _under_plate(chunk, shapes, structure.max_plate_nesting)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                with pyro.validation_enabled(False):
                    pred = Predictive(traceable(model), posterior_samples=placed, parallel=True)
                    trace = pred.get_vectorized_trace(**data)
                parts.append(_terms(trace, structure, n_draws(chunk), shapes, keep))
        batch = _joined(parts)
        _check(model, data, draws, structure, shapes, batch, keep)
        batch.log_lik_left_out = left_out
        return batch
    except (_NotVectorisable, RuntimeError, ValueError, IndexError) as e:
        _warn(f"replaying {name} on {n} draws", e)
    each = _replay_each(model, data, draws, structure, shapes, keep=keep)
    each.log_lik_left_out = left_out
    return each


def _joined(parts: list[Replay]) -> Replay:
    """The chunks' replays as one, in order."""
    if len(parts) == 1:
        return parts[0]
    first = parts[0]
    return Replay(
        log_lik={k: np.concatenate([p.log_lik[k] for p in parts]) for k in first.log_lik},
        deterministic={
            k: np.concatenate([p.deterministic[k] for p in parts]) for k in first.deterministic
        },
        log_joint=np.concatenate([p.log_joint for p in parts]),
    )


def _replay_each(
    model: Callable[..., Any],
    data: Mapping[str, Any],
    draws: Draws,
    s: ModelStructure,
    shapes: Shapes,
    indices: range | list[int] | None = None,
    *,
    keep: bool = True,
) -> Replay:
    indices = range(n_draws(draws)) if indices is None else indices
    parts = [
        _terms(replay_one(model, data, {k: v[i] for k, v in draws.items()}), s, None, shapes, keep)
        for i in indices
    ]
    out = Replay(path="per-draw")
    out.log_lik = {k: np.stack([p.log_lik[k] for p in parts]) for k in s.observed if keep}
    out.deterministic = {k: np.stack([p.deterministic[k] for p in parts]) for k in s.deterministic}
    out.log_joint = np.array([float(p.log_joint) for p in parts])
    return out


def _check(
    model: Callable[..., Any],
    data: Mapping[str, Any],
    draws: Draws,
    s: ModelStructure,
    shapes: Shapes,
    batch: Replay,
    keep: bool = True,
) -> None:
    """The vectorised numbers of the first and last draw equal a per-draw replay of them."""
    n = n_draws(draws)
    idx = sorted({0, n - 1})
    each = _replay_each(model, data, draws, s, shapes, idx, keep=keep)
    pairs = [
        (f"log likelihood of {k!r}", batch.log_lik[k][idx], v) for k, v in each.log_lik.items()
    ]
    pairs += [
        (f"site {k!r}", batch.deterministic[k][idx], v) for k, v in each.deterministic.items()
    ]
    pairs.append(("the log joint", batch.log_joint[idx], each.log_joint))
    for what, a, b in pairs:
        if a.shape != b.shape or not np.allclose(a, b, rtol=1e-4, atol=1e-4, equal_nan=True):
            raise _NotVectorisable(what, "vectorised and per-draw values differ")


# --------------------------------------------------------------------------- guide draws
def guide_draws(
    guide: Callable[..., Any],
    data: Mapping[str, Any],
    n: int,
    sites: tuple[str, ...],
    *,
    name: str = "guide",
) -> tuple[dict[str, torch.Tensor], np.ndarray]:
    """``n`` draws of ``sites`` from a fitted guide, shaped ``(n, *site_shape)``, and log q of
    each draw (auxiliary sites of autoguides included)."""
    with pyro.validation_enabled(False), torch.no_grad():
        first = poutine.trace(guide).get_trace(**data)
    sampled = {
        k: v
        for k, v in first.nodes.items()
        if v["type"] == "sample" and not site_is_subsample(v) and not v["is_observed"]
    }
    shapes = {k: tuple(site_value(v).shape) for k, v in sampled.items()}
    batches = {k: tuple(site_dist(v).batch_shape) for k, v in sampled.items()}
    missing = sorted(set(sites) - set(shapes))
    if missing:
        raise ValueError(f"the guide does not sample {missing}")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            # our own plate, not Predictive's: Predictive masks the guide, and autoguides then
            # drop the log-Jacobian of their transforms from log q
            nesting = plate_nesting(first)
            with pyro.validation_enabled(False), torch.no_grad():
                trace = poutine.trace(batched(guide, n, -1 - nesting)).get_trace(**data)
            every, log_q = _guide_terms(trace, n, shapes, batches, nesting)
        # autoguides' Delta sites are functions of their auxiliary latent: not conditioned
        free = {k: v[0] for k, v in every.items() if not isinstance(sampled[k]["fn"], Delta)}
        one = replay_one(guide, data, free)
        if not np.isclose(log_prob_of_sites(one, shapes), log_q[0], rtol=1e-4, atol=1e-3):
            raise _NotVectorisable("log q", "vectorised and per-draw values differ")
        return {k: every[k] for k in sites}, log_q
    except (_NotVectorisable, RuntimeError, ValueError, IndexError) as e:
        _warn(f"drawing {n} times from {name}", e)
    draws: dict[str, list[torch.Tensor]] = {k: [] for k in sites}
    log_q = np.empty(n)
    for i in range(n):
        with pyro.validation_enabled(False), torch.no_grad():
            trace = poutine.trace(guide).get_trace(**data)
        log_q[i] = log_prob_of_sites(trace, shapes)
        for k in sites:
            draws[k].append(site_value(trace.nodes[k]).detach())
    return {k: torch.stack(v) for k, v in draws.items()}, log_q


def log_prob_of_sites(trace: poutine.Trace, names: Collection[str]) -> float:
    """Sum of the scaled log densities of the named sites of a trace (a guide's log q: its own
    sample sites, not the observed sites of a model run as its own prior proposal)."""
    total = 0.0
    for name in names:
        site = trace.nodes[name]
        total += float((site["scale"] * site_dist(site).log_prob(site_value(site)).detach()).sum())
    return total


def _guide_terms(
    trace: poutine.Trace,
    n: int,
    shapes: Mapping[str, tuple[int, ...]],
    batches: Mapping[str, tuple[int, ...]],
    nesting: int,
) -> tuple[dict[str, torch.Tensor], np.ndarray]:
    """Every guide site's draws ``(n, *shape)`` and log q per draw from a vectorised trace
    (each site's log density summed over its plates)."""
    every: dict[str, torch.Tensor] = {}
    log_q = torch.zeros(n, dtype=torch.float64)
    for name, site in trace.nodes.items():
        if name not in shapes or site["type"] != "sample":
            continue
        lp = _lp_per_draw(
            name, site_dist(site).log_prob(site_value(site)), n, nesting, batches[name]
        )
        log_q += (site["scale"] * lp.double()).reshape(n, -1).sum(-1)
        every[name] = _value_per_draw(name, site_value(site), n, shapes[name])
    return every, log_q.numpy()
