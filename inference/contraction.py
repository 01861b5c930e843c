"""The one place that uses private Pyro internals: the tensor contraction behind
``TraceEnum_ELBO``, reduced to the plate over draws, which gives log p(y, theta_i) with the
discrete sites summed out for many draws at once. ``tests/test_engines.py`` pins its numbers to
the public per-draw computation (:func:`inference.discrete.log_joint`)."""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import torch
from pyro.infer import TraceEnum_ELBO
from pyro.infer.traceenum_elbo import _compute_model_factors
from pyro.ops.contract import contract_to_tensor

from .discrete import conditioned_batch, empty_guide, enumerated
from .replay import Draws
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
    elbo = TraceEnum_ELBO(max_plate_nesting=nesting + 1)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.filterwarnings("ignore", "TraceEnum_ELBO found no sample sites")
        model_trace, guide_trace = next(elbo._get_traces(conditioned, empty_guide, (), data))
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
