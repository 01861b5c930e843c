"""Synthetic data from a model's own prior predictive, with the true latent values kept."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import pyro
import pyro.poutine as poutine
import torch


def prior_predictive(
    model: Callable[..., Any], data: Mapping[str, Any]
) -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
    """Draw every latent site from its prior and every observation given them, from torch's
    global generator (seed it first, as ``ModelEntry.simulate`` does).

    ``data`` is a template (the model's default data): observed tensors are replaced by fresh
    draws of the same shape, other arguments are kept. Returns ``(new_data, true_latents)``.
    """
    with torch.no_grad(), pyro.validation_enabled(False):
        conditioned = poutine.trace(model).get_trace(**data)
        free = poutine.trace(poutine.uncondition(model)).get_trace(**data)
    new_data = dict(data)
    truth: dict[str, torch.Tensor] = {}
    for name, site in conditioned.nodes.items():
        if site["type"] != "sample" or type(site["fn"]).__name__ == "_Subsample":
            continue
        drawn = free.nodes[name]["value"]
        assert drawn is not None  # every sample site of a trace has its value
        value = drawn.detach()
        if site["is_observed"]:
            key = next((k for k, v in data.items() if v is site["value"]), None)
            if key is None:
                raise ValueError(f"observed site {name!r} is not one of the data arguments")
            new_data[key] = value.to(data[key].dtype)
        else:
            truth[name] = value
    return new_data, truth
