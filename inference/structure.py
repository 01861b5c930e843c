"""What an engine needs to know about a model, read off one trace of it."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import pyro
import pyro.poutine as poutine
import torch


@dataclass(frozen=True)
class ModelStructure:
    """Latent and observed sites of a model run on a dataset.

    ``discrete`` sites have finite support (they can be enumerated); ``nonenumerable`` are discrete
    latents with infinite support (Poisson, ...), which no generic engine handles.
    """

    continuous: tuple[str, ...]
    discrete: tuple[str, ...]
    nonenumerable: tuple[str, ...]
    observed: tuple[str, ...]
    max_plate_nesting: int
    shapes: Mapping[str, tuple[int, ...]]

    @property
    def latent(self) -> tuple[str, ...]:
        return self.continuous + self.discrete + self.nonenumerable


def inspect_model(model: Callable[..., Any], data: Mapping[str, Any]) -> ModelStructure:
    """Trace ``model(**data)`` once (prior draw) and classify its sample sites."""
    with pyro.validation_enabled(False), torch.no_grad():
        trace = poutine.trace(poutine.block(model, hide_types=["param"])).get_trace(**data)
    continuous, discrete, nonenum, observed = [], [], [], []
    shapes: dict[str, tuple[int, ...]] = {}
    nesting = 0
    for name, site in trace.nodes.items():
        if site["type"] != "sample" or site["infer"].get("_do_not_trace"):
            continue
        if type(site["fn"]).__name__ == "_Subsample":
            continue
        nesting = max(nesting, sum(1 for f in site["cond_indep_stack"] if f.vectorized))
        if site["is_observed"]:
            observed.append(name)
            continue
        shapes[name] = tuple(site["value"].shape)
        fn = site["fn"]
        if fn.support.is_discrete:
            (discrete if fn.has_enumerate_support else nonenum).append(name)
        else:
            continuous.append(name)
    return ModelStructure(
        tuple(continuous), tuple(discrete), tuple(nonenum), tuple(observed), nesting, shapes
    )
