"""Pyro's potential energy (``pyro.infer.mcmc.util.initialize_model``) evaluated on other data
than it was built with: the per-chain data of a batched density."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import torch

from .versions import POTENTIAL_DATA


def check_per_chain_data() -> None:
    """Raises where Pyro is unverified: a density with per-chain data cannot be built (a
    simulation-based calibration then runs its replications one at a time)."""
    if not POTENTIAL_DATA.usable():
        raise RuntimeError(POTENTIAL_DATA.reason())


def potential_with(
    potential: Callable[[dict[str, torch.Tensor]], torch.Tensor],
    params: dict[str, torch.Tensor],
    data: Mapping[str, Any],
) -> torch.Tensor:
    """``potential(params)`` with the model run on ``data`` in place of the keyword arguments
    it was built with (those ``data`` names)."""
    check_per_chain_data()
    maker = potential.__self__  # type: ignore[attr-defined]  # Pyro's _PEMaker
    saved = maker.model_kwargs
    maker.model_kwargs = {**saved, **data}
    try:
        return potential(params)
    finally:
        maker.model_kwargs = saved
