"""Univariate draws used inside Gibbs samplers: slice sampling and a truncated normal."""

from __future__ import annotations

from typing import Any

import numpy as np
from scipy.special import ndtr, ndtri


def slice_sample(
    log_density: Any, x0: np.ndarray, width: float = 1.0, max_steps: int = 50
) -> np.ndarray:
    """One univariate slice-sampling update of every element of ``x0`` (Neal 2003, stepping out
    then shrinkage), each element under its own density ``log_density(x)`` (elementwise).

    Draw a level under the density at x0, find an interval around x0 whose ends lie below it,
    then draw uniformly in the interval, shrinking it towards x0 on each rejection. The update
    leaves the density invariant, so it can stand in for an exact draw inside Gibbs.
    """
    x0 = np.asarray(x0, dtype=float)
    level = log_density(x0) - np.random.exponential(size=x0.shape)
    lo = x0 - width * np.random.uniform(size=x0.shape)
    hi = lo + width
    for _ in range(max_steps):
        out = log_density(lo) > level
        if not out.any():
            break
        lo = np.where(out, lo - width, lo)
    for _ in range(max_steps):
        out = log_density(hi) > level
        if not out.any():
            break
        hi = np.where(out, hi + width, hi)
    x, done = x0.copy(), np.zeros(x0.shape, dtype=bool)
    while not done.all():
        x1 = np.random.uniform(lo, hi)
        accept = ~done & (log_density(x1) > level)
        x = np.where(accept, x1, x)
        done |= accept
        lo = np.where(~done & (x1 < x0), x1, lo)
        hi = np.where(~done & (x1 >= x0), x1, hi)
    return x


def truncated_normal(
    loc: np.ndarray, sd: np.ndarray, low: np.ndarray, high: np.ndarray
) -> np.ndarray:
    """One draw of N(loc, sd^2) restricted to (low, high), elementwise, by inverting its CDF."""
    a, b = ndtr((low - loc) / sd), ndtr((high - loc) / sd)
    u = np.random.uniform(size=np.shape(loc))
    # in the far tail a and b round to the same number: the clip keeps the draw in (low, high)
    p = np.clip(a + u * (b - a), 1e-300, 1 - 1e-16)
    return np.clip(loc + sd * ndtri(p), low, high)


# A piece of a piecewise-exponential density, seen from its higher end: exp(log_high - rate s)
# for s in [0, width], rate >= 0. ARS's envelope (tangents of log p) and the inverse-CDF engine's
# interpolant (chords of log p) are made of such pieces; both draw from them by inverting the CDF.
def exp_segment_log_mass(log_high: np.ndarray, rate: np.ndarray, width: np.ndarray) -> np.ndarray:
    """log of the piece's mass, int_0^width exp(log_high - rate s) ds, elementwise; ``width``
    may be infinite where ``rate`` > 0 (an unbounded tail), and is +inf where ``rate`` is 0."""
    rate, width = np.asarray(rate, dtype=float), np.asarray(width, dtype=float)
    rw = np.where(rate == 0, 0.0, rate * width)  # a flat piece: no 0 * inf
    with np.errstate(divide="ignore", invalid="ignore"):
        curved = log_high + np.log(-np.expm1(-rw)) - np.log(rate)
        flat = log_high + np.log(width) - rw / 2  # (1 - e^-rw) / rate ~ width (1 - rw / 2)
    return np.where(rw < 1e-10, flat, curved)


def exp_segment_draw(rate: np.ndarray, width: np.ndarray, u: np.ndarray) -> np.ndarray:
    """The distance from the piece's higher end of a draw of density proportional to
    exp(-rate s) on [0, width], by inverting its CDF at ``u`` in (0, 1):
    s = -log(1 + u (e^(-rate width) - 1)) / rate (u width on a flat piece)."""
    rate, width = np.asarray(rate, dtype=float), np.asarray(width, dtype=float)
    rw = np.where(rate == 0, 0.0, rate * width)
    with np.errstate(divide="ignore", invalid="ignore"):
        s = np.where(rw < 1e-10, u * width, -np.log1p(u * np.expm1(-rw)) / rate)
    return np.clip(s, 0.0, width)
