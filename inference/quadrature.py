"""Quadrature for the ground truths that integrate a few parameters numerically: Gauss–Legendre
nodes on an interval (a scale through its prior CDF, probabilities on the unit cube), and the
posterior on a grid's nodes (:func:`grid_posterior`), whose moments every such truth takes
(eight schools, three_coin, the local-level variances, the GP hyperparameters, the Brownian
motion's scales)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy.special import logsumexp


def gauss_legendre(m: int, low: float = 0.0, high: float = 1.0) -> tuple[np.ndarray, np.ndarray]:
    """``m`` Gauss–Legendre nodes and weights on ``(low, high)``::

        int_low^high g(u) du ~= sum_k w_k g(u_k),  u_k = low + (high - low) (x_k + 1) / 2,
                                                   w_k = (high - low) v_k / 2

    with (x_k, v_k) the Legendre nodes and weights on (-1, 1); exact for polynomials of degree
    up to 2m - 1. On (0, 1) the weights sum to 1: a uniform prior's expectation. A scale tau with
    prior CDF F becomes uniform there by u = F(tau), so E[g(tau) | y] is a ratio of two such
    sums (eight schools)."""
    if m < 1:
        raise ValueError(f"Gauss–Legendre needs at least one node, got {m}")
    if not high > low:
        raise ValueError(f"Gauss–Legendre needs low < high, got ({low}, {high})")
    x, v = np.polynomial.legendre.leggauss(m)
    half = (high - low) / 2
    return low + half * (x + 1), half * v


@dataclass(frozen=True)
class Grid:
    """A posterior on the nodes of a quadrature grid: ``weights``, normalised to sum to 1 and
    shaped like the grid, and ``log_z``, the log of the unnormalised sum (times a cell's volume,
    where the caller adds it, that sum is the evidence). Quantities at the nodes are arrays
    whose leading dimensions are the grid's."""

    weights: np.ndarray
    log_z: float

    def expect(self, value: Any) -> np.ndarray:
        """E[value]: the weighted sum over the grid of ``value`` (shaped ``(*grid, *rest)``)."""
        return np.tensordot(self.weights, np.asarray(value, dtype=float), axes=self.weights.ndim)

    def moments(self, value: Any, variance: Any = 0.0) -> tuple[np.ndarray, np.ndarray]:
        """Mean and sd of a quantity whose value at each node is ``value`` (its conditional
        mean there) with conditional ``variance`` (0 where the node fixes it)."""
        value = np.asarray(value, dtype=float)
        mean = self.expect(value)
        second = self.expect(np.asarray(variance, dtype=float) + value**2)
        return mean, np.sqrt(np.clip(second - mean**2, 0.0, None))


def grid_posterior(log_density: Any) -> Grid:
    """The :class:`Grid` of unnormalised log posterior values at the nodes (node weights'
    logs included), normalised stably."""
    log_density = np.asarray(log_density, dtype=float)
    log_z = float(logsumexp(log_density))
    return Grid(np.exp(log_density - log_z), log_z)
