"""Completing an engine's posterior draws: discrete sites recovered from their exact conditional
(``infer_discrete``), ``pyro.deterministic`` sites and the pointwise log-likelihood group.

These are extras: a finished sampler's draws are never thrown away because one of them cannot be
computed. The run stays ok, the extra is left out, and ``omitted`` says why."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import torch

from .context import EngineContext
from .discrete import draw_discrete
from .replay import replay
from .results import one_line


def complete(
    ctx: EngineContext,
    posterior: Mapping[str, np.ndarray],
    *,
    recover: tuple[str, ...] = (),
) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray] | None, dict[str, str]]:
    """``posterior``: site -> (chain, draw, *shape) of the sites an engine drew. Returns the
    posterior with ``recover`` (discrete sites) and deterministic sites added, the pointwise
    log-likelihood (None when the model has no observed site or it cannot be computed) and
    ``omitted``: {extra: reason}."""
    s = ctx.structure
    post = {k: np.asarray(v) for k, v in posterior.items()}
    chains, ndraws = next(iter(post.values())).shape[:2]
    n = chains * ndraws
    omitted: dict[str, str] = {}

    def flat(p: Mapping[str, np.ndarray]) -> dict[str, torch.Tensor]:
        return {k: torch.as_tensor(v).reshape((n,) + v.shape[2:]) for k, v in p.items()}

    if recover:
        try:
            got = draw_discrete(
                ctx.model, ctx.data, flat(post), n, s, sites=recover, progress=ctx.progress
            )
            post.update({k: v.reshape((chains, ndraws) + v.shape[1:]) for k, v in got.items()})
        except Exception as e:  # noqa: BLE001 - an extra: recorded, never fatal
            omitted[f"discrete sites {list(recover)}"] = one_line(e)
    if not set(s.latent) <= set(post):
        missing = sorted(set(s.latent) - set(post))
        if s.deterministic:
            omitted["deterministic sites"] = f"no draws of {missing}"
        if s.observed:
            omitted["log_likelihood"] = f"no draws of {missing}"
        return post, None, omitted
    if not (s.deterministic or s.observed):
        return post, None, omitted
    try:
        r = replay(ctx.model, ctx.data, flat({k: post[k] for k in s.latent}), s, name=ctx.name)
    except Exception as e:  # noqa: BLE001 - an extra: recorded, never fatal
        reason = one_line(e)
        if s.deterministic:
            omitted["deterministic sites"] = reason
        if s.observed:
            omitted["log_likelihood"] = reason
        return post, None, omitted
    for k, v in r.deterministic.items():
        post[k] = v.reshape((chains, ndraws) + v.shape[1:])
    if r.log_lik_left_out:
        omitted["log_likelihood"] = r.log_lik_left_out
    log_lik = {k: v.reshape((chains, ndraws) + v.shape[1:]) for k, v in r.log_lik.items()}
    return post, (log_lik or None), omitted
