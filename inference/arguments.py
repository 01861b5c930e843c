"""Checks of reference engines' array arguments (parameters, starts, series): a clear error
naming the argument, before any work."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from zoo_inference.results import ZooError


def _numbers(name: str, value: Any, shape: tuple[int, ...]) -> np.ndarray:
    try:
        arr = np.asarray(value.detach() if isinstance(value, torch.Tensor) else value, dtype=float)
    except (TypeError, ValueError):
        raise ZooError(f"{name} must be numbers, got {value!r}") from None
    if arr.shape != shape:
        raise ZooError(f"{name} has shape {arr.shape}, expected {shape}")
    return arr


def probability_array(name: str, value: Any, shape: tuple[int, ...]) -> np.ndarray:
    """``value`` as an array of probability vectors (last axis sums to 1) of ``shape``."""
    arr = _numbers(name, value, shape)
    if not np.all(np.isfinite(arr)) or np.any(arr < 0) or not np.allclose(arr.sum(-1), 1, 1e-6):
        raise ZooError(f"{name} must hold probability vectors (non-negative, summing to 1)")
    return arr


def real_array(name: str, value: Any, shape: tuple[int, ...]) -> np.ndarray:
    """``value`` as a finite real array of ``shape``."""
    arr = _numbers(name, value, shape)
    if not np.all(np.isfinite(arr)):
        raise ZooError(f"{name} must be finite, got {arr}")
    return arr


def real_series(x: Any, at_least: int = 1) -> np.ndarray:
    """``x`` as one finite real sequence of at least ``at_least`` observations."""
    xs = np.asarray(x.detach() if isinstance(x, torch.Tensor) else x, dtype=float)
    if xs.ndim != 1 or xs.size < at_least:
        raise ZooError(
            f"x must be one sequence of at least {at_least} number(s), got shape {xs.shape}"
        )
    if not np.all(np.isfinite(xs)):
        raise ZooError("x must be finite (it holds NaN or inf)")
    return xs


def positive_variance(name: str, value: Any) -> float:
    """``value`` as a positive, finite float."""
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise ZooError(f"{name} must be a positive number, got {value!r}") from None
    if not np.isfinite(v) or v <= 0:
        raise ZooError(f"{name} must be a positive, finite variance, got {value!r}")
    return v
