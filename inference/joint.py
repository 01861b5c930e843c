"""log p(y, theta_i) for many draws theta_i, discrete sites summed out: vectorised where the model
broadcasts over draws (the tensor contraction behind ``TraceEnum_ELBO``, reduced to the plate
over draws), one draw at a time otherwise (with a warning saying why)."""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import torch

from .backend import log_joint_over_plate
from .discrete import conditioned_batch, empty_guide, enumerated, log_joint
from .replay import Draws, VectorisationWarning, replay
from .results import one_line
from .structure import ModelStructure


def log_joint_batch(
    model: Callable[..., Any],
    data: Mapping[str, Any],
    draws: Draws,
    n: int,
    structure: ModelStructure,
) -> np.ndarray:
    """log p(data, draw_i) with the discrete sites summed out, one number per draw (tensor message
    passing, as TraceEnum_ELBO does, contracted down to the plate over draws)."""
    nesting = structure.max_plate_nesting
    conditioned = enumerated(conditioned_batch(model, data, draws, n, -1 - nesting))
    with torch.no_grad():
        total = log_joint_over_plate(conditioned, empty_guide, data, nesting + 1, "_draws", n)
    return total.numpy()


def log_joint_draws(
    model: Callable[..., Any],
    data: Mapping[str, Any],
    draws: Draws,
    structure: ModelStructure,
    *,
    name: str = "model",
) -> np.ndarray:
    """One log joint per draw of the continuous latents (every discrete latent summed out)."""
    n = int(next(iter(draws.values())).shape[0])
    if not structure.discrete:
        return replay(model, data, draws, structure, name=name).log_joint
    nesting = structure.max_plate_nesting

    def one(i: int) -> float:
        return log_joint(model, data, {k: v[i] for k, v in draws.items()}, nesting)

    try:
        batch = log_joint_batch(model, data, draws, n, structure)
        if not np.allclose(batch[[0, -1]], [one(0), one(n - 1)], rtol=1e-4, atol=1e-3):
            raise ValueError("vectorised and per-draw log joints differ")
        return batch
    except (RuntimeError, ValueError, IndexError, KeyError) as e:
        warnings.warn(
            f"log joint of {name} with {list(structure.discrete)} summed out: the vectorised "
            f"path does not apply ({one_line(e)}); using the exact per-draw path",
            VectorisationWarning,
            stacklevel=2,
        )
    return np.array([one(i) for i in range(n)])
