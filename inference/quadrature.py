"""Gauss–Legendre quadrature on an interval: the ground truths that integrate a few parameters
numerically (a scale through its prior CDF, probabilities on the unit cube) share it."""

from __future__ import annotations

import numpy as np


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
