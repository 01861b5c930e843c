"""Posterior-predictive draws of a run, made once when the run is made and kept in its
InferenceData (group ``posterior_predictive``, as ArviZ's converters do), so that a report reads
them from the results alone and never runs a model.

At most :data:`MAX_DRAWS` posterior draws, evenly spaced over the chains, are replayed through
the model: its latent sites fixed to a draw, each observed site sampled from its distribution
there. The replicated data sets are stored as one chain of that many draws; observed sites that
no data argument of the same name holds are added to ``observed_data``. The draws come from
their own stream, seeded by the run's seed after the engine has finished, so they change none
of the run's other numbers. Like the other extras of a run they are left out, never fatal,
where they cannot be made (see :func:`replicate`).
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import pyro.distributions as dist
import torch
from pyro.poutine.util import site_is_subsample

from .arviz_io import arviz
from .replay import replay_one
from .results import Run
from .runtime import seeded
from .sites import site_dist, site_value
from .structure import trace_model

MAX_DRAWS = 50  # posterior draws replayed through the model
MIN_DRAWS = 10  # fewer replicated data sets than this make no check
MAX_STORED = 1_000_000  # replicated values kept per run: fewer draws of a large data set
# sites replayed per run (draws x the model's sites): fewer draws of a model with many sites
# (a Python loop over time steps), counted rather than timed so that a run's output is the
# same on a busy machine; about ten seconds of replays
MAX_SITE_REPLAYS = 100_000
DISCRETE = "discrete"  # attribute of a posterior_predictive variable: 1 for a discrete site


@dataclasses.dataclass
class ReplicatedData:
    """Replicated data sets of the observed sites, each ``(draws, *site_shape)``, the observed
    values and which sites are discrete."""

    replicated: dict[str, np.ndarray]
    observed: dict[str, np.ndarray]
    discrete: dict[str, bool]


def _observed_sites(trace: Any) -> tuple[dict[str, Any], dict[str, Any]] | None:
    """(latent, observed) sample sites of a model's trace; None for a plate drawing
    minibatches (each draw would see other data)."""
    latent, observed = {}, {}
    for name, site in trace.nodes.items():
        if site["type"] != "sample":
            continue
        if site_is_subsample(site):
            if int(site["value"].numel()) < int(getattr(site["fn"], "size", 0)):
                return None
            continue
        if site["is_observed"]:
            deterministic = site["infer"].get("_deterministic")
            if deterministic or isinstance(site["fn"], dist.Delta | dist.Unit):
                continue
            observed[name] = site
        else:
            latent[name] = site
    return latent, observed


def replicate(
    model: Callable[..., Any],
    data: Mapping[str, Any],
    posterior: Mapping[str, Any],
    *,
    draws: int = MAX_DRAWS,
    seed: int = 0,
    max_site_replays: int = MAX_SITE_REPLAYS,
) -> ReplicatedData | None:
    """Replicated data sets from ``draws`` of ``posterior`` (site -> ``(chain, draw, *shape)``,
    evenly spaced over the flattened chains). Latent sites without draws are drawn from the
    model (discrete sites an engine summed out). None where no check can be made: no observed
    site, a continuous latent site without draws (amortised guides), minibatched plates,
    non-numeric data, or too few draws (fewer where the model has many sites: at most
    ``max_site_replays`` sites replayed in all)."""
    first = trace_model(model, data)
    sites = _observed_sites(first)
    if sites is None:
        return None
    latent, observed = sites
    if not observed:
        return None
    for site in observed.values():
        v = site["value"]
        if not isinstance(v, torch.Tensor) or v.dtype.is_complex:
            return None
    if any(n not in posterior and not s["fn"].support.is_discrete for n, s in latent.items()):
        return None
    fixed = [n for n in latent if n in posterior]
    arrays = {n: np.asarray(posterior[n]) for n in fixed}
    if not arrays:
        return None
    total = int(np.prod(next(iter(arrays.values())).shape[:2]))
    values = sum(int(s["value"].numel()) for s in observed.values())
    draws = min(draws, total, MAX_STORED // max(values, 1), max_site_replays // len(first.nodes))
    if draws < min(MIN_DRAWS, total) or total < 2:
        return None
    picks = np.unique(np.linspace(0, total - 1, draws).round().astype(int))
    chosen = {n: a.reshape(total, *a.shape[2:])[picks] for n, a in arrays.items()}
    reps: dict[str, list[np.ndarray]] = {n: [] for n in observed}
    with seeded(seed):
        for k in range(len(picks)):
            given = {n: torch.as_tensor(chosen[n][k]).to(latent[n]["value"].dtype) for n in fixed}
            trace = replay_one(model, data, given)
            for n in reps:
                site = trace.nodes[n]
                y = site_dist(site).sample().detach()
                if y.shape != site_value(site).shape:
                    y = y.expand(site_value(site).shape)
                reps[n].append(y.cpu().numpy())
    return ReplicatedData(
        replicated={n: np.stack(r) for n, r in reps.items()},
        observed={n: s["value"].detach().cpu().numpy() for n, s in observed.items()},
        discrete={n: bool(s["fn"].support.is_discrete) for n, s in observed.items()},
    )


def with_predictive(
    run: Run, model: Callable[..., Any], data: Mapping[str, Any], *, seed: int
) -> Run:
    """``run`` with posterior-predictive draws in its InferenceData (a run of posterior draws;
    any other run, or one whose model cannot be replayed, is returned as it is)."""
    if run.status == "failed" or run.kind != "draws" or run.idata is None:
        return run
    if "posterior_predictive" in run.idata.groups():
        return run
    post = run.idata.posterior  # type: ignore[attr-defined]  # arviz sets groups as attributes
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            pred = replicate(model, data, {n: post[n].values for n in post.data_vars}, seed=seed)
    except Exception:  # noqa: BLE001 - an extra: a model that cannot be replayed has none
        return run
    if pred is None:
        return run
    held = run.idata.observed_data if "observed_data" in run.idata.groups() else None  # type: ignore[attr-defined]  # arviz sets groups as attributes
    new_obs = {}
    for n, y in pred.observed.items():
        if held is None or n not in held:
            new_obs[n] = y
        elif np.asarray(held[n].values).shape != y.shape or not np.array_equal(held[n].values, y):
            return run  # a data argument named like the site holds other values
    extra = arviz().from_dict(
        posterior_predictive={n: r[None] for n, r in pred.replicated.items()},
        observed_data=new_obs or None,
    )
    for n in pred.replicated:
        extra.posterior_predictive[n].attrs[DISCRETE] = int(pred.discrete[n])
    groups = {g: getattr(run.idata, g) for g in run.idata.groups()}  # a new container, not a copy
    groups["posterior_predictive"] = extra.posterior_predictive
    if new_obs:
        groups["observed_data"] = (
            extra.observed_data if held is None else held.merge(extra.observed_data)
        )
    return dataclasses.replace(run, idata=arviz().InferenceData(**groups))
