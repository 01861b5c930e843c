"""Simulation-based calibration statistics (Talts et al. 2018): the rank of a true value among
posterior draws thinned to near-independence, and a test of the ranks' uniformity.

Plain numpy on arrays shaped like the Run contract's posterior, ``(chain, draw, *site_shape)``;
nothing here runs a model or an engine (:mod:`zoo_inference.sbc` simulates, ``zoo.sbc`` runs).

Ranks are on a fixed scale ``0..L`` (``L`` draws): under a calibrated engine the rank of the
value the data were simulated from is uniform on those ``L + 1`` values. Draws of a Markov chain
are first thinned by their effective sample size (keep about ESS of them, so the kept draws are
near-independent); ``L`` of the kept draws are then chosen at random. Where fewer than ``L``
remain (an ESS below ``L``), the rank ``r`` among the ``M`` kept draws is spread onto the ``0..L``
scale as ``floor((r + V) (L + 1) / (M + 1))`` with ``V ~ U(0, 1)``, which is uniform again
whenever ``r`` is: the test stays valid and only loses resolution.

The uniformity test is Pearson's chi-square on the ranks binned into ``B`` bins, each an equal
share (up to rounding) of the ``L + 1`` rank values, against their exact probabilities.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from scipy import stats

from .arviz_io import _quiet, arviz

UNIFORM_SD = 1.0 / math.sqrt(12.0)  # sd of U(0, 1): that of a normalised rank when calibrated


def effective_sizes(draws: np.ndarray) -> np.ndarray:
    """Per scalar parameter, ``min(ess_bulk, ess_tail)`` of MCMC draws ``(chain, draw, P)``
    (ArviZ's estimators; NaN where undefined, as for a constant chain)."""
    az = arviz()
    data = az.convert_to_dataset(np.asarray(draws, dtype=float))
    with _quiet():
        bulk = np.asarray(az.ess(data, method="bulk")["x"].values, dtype=float).reshape(-1)
        tail = np.asarray(az.ess(data, method="tail")["x"].values, dtype=float).reshape(-1)
    return np.fmin(bulk, tail)


def thin(chains: np.ndarray, ess: float, rng: np.random.Generator) -> np.ndarray:
    """Draws ``(chain, draw)`` of one scalar thinned by ``ceil(total / ess)`` within each chain
    (from a random offset): about ``ess`` near-independent draws, flattened."""
    chains = np.asarray(chains, dtype=float)
    total = chains.size
    per_chain = chains.shape[1]
    if np.isfinite(ess) and ess > 0:
        stride = min(per_chain, max(1, math.ceil(total / ess)))
    else:
        stride = per_chain  # no usable ESS (a stuck chain): one draw per chain
    offset = int(rng.integers(stride))
    return chains[:, offset::stride].reshape(-1)


def rank_of(value: float, draws: np.ndarray, rng: np.random.Generator) -> int:
    """How many ``draws`` lie below ``value``, ties broken at random (0..len(draws))."""
    below = int(np.sum(draws < value))
    ties = int(np.sum(draws == value))
    return below + (int(rng.integers(ties + 1)) if ties else 0)


def rank(value: float, pool: np.ndarray, num_draws: int, rng: np.random.Generator) -> int:
    """The rank (0..``num_draws``) of ``value`` among ``num_draws`` draws chosen at random from
    ``pool``; from fewer draws, the rank spread uniformly onto that scale (module docstring)."""
    pool = np.asarray(pool, dtype=float)
    m = pool.size
    if m >= num_draws:
        chosen = pool[rng.choice(m, size=num_draws, replace=False)] if m > num_draws else pool
        return rank_of(value, chosen, rng)
    r = rank_of(value, pool, rng)
    u = (r + rng.random()) / (m + 1)
    return min(num_draws, int(math.floor(u * (num_draws + 1))))


def ranks(
    truth: np.ndarray,
    draws: np.ndarray,
    num_draws: int,
    rng: np.random.Generator,
    *,
    mcmc: bool,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Ranks of the true values ``truth`` ``(P,)`` among posterior ``draws`` ``(chain, draw, P)``:
    ``(ranks, ess, kept)`` per parameter. ``mcmc``: thin by the ESS first (independent draws,
    as from a variational guide or a closed form, are used as they are; their ESS is NaN)."""
    truth = np.asarray(truth, dtype=float).reshape(-1)
    draws = np.asarray(draws, dtype=float)
    p = truth.size
    ess = effective_sizes(draws) if mcmc else np.full(p, np.nan)
    out = np.zeros(p, dtype=np.int64)
    kept = np.zeros(p, dtype=np.int64)
    for j in range(p):
        pool = thin(draws[:, :, j], ess[j], rng) if mcmc else draws[:, :, j].reshape(-1)
        pool = pool[np.isfinite(pool)]
        kept[j] = pool.size
        out[j] = rank(truth[j], pool, num_draws, rng)
    return out, ess, kept


def default_bins(reps: int, num_draws: int) -> int:
    """Bins for the chi-square test: about 10 ranks expected in each (so its p-values hold far
    into the tail), between 2 and 20, and no more than the ``L + 1`` rank values."""
    return int(max(2, min(20, reps // 10, num_draws + 1)))


def bin_edges(num_draws: int, bins: int) -> np.ndarray:
    """Rank-value edges of ``bins`` bins over ``0..num_draws`` (each an equal share, up to
    rounding): bin ``b`` holds ranks ``edges[b] <= r < edges[b + 1]``."""
    return np.floor(np.arange(bins + 1) * (num_draws + 1) / bins).astype(np.int64)


def binned(ranks_: np.ndarray, num_draws: int, bins: int) -> tuple[np.ndarray, np.ndarray]:
    """Counts ``(P, bins)`` of ranks ``(reps, P)`` in the bins of :func:`bin_edges`, and each
    bin's probability ``(bins,)`` under uniform ranks."""
    arr = np.asarray(ranks_, dtype=np.int64)
    edges = bin_edges(num_draws, bins)
    counts = [
        np.bincount(np.searchsorted(edges, col, side="right") - 1, minlength=bins) for col in arr.T
    ]
    probs = np.diff(edges) / (num_draws + 1)
    return np.array(counts, dtype=np.int64).reshape(arr.shape[1], bins), probs


def uniformity(
    ranks_: np.ndarray, num_draws: int, bins: int | None = None
) -> tuple[np.ndarray, np.ndarray, int]:
    """Pearson's chi-square test of uniform ranks per parameter: ``(statistic, p_value, bins)``
    for ranks ``(reps, P)`` on ``0..num_draws`` (NaN where there are no ranks)."""
    arr = np.asarray(ranks_, dtype=np.int64)
    reps = arr.shape[0]
    bins = default_bins(reps, num_draws) if bins is None else int(bins)
    if reps == 0:
        nan = np.full(arr.shape[1], np.nan)
        return nan, nan.copy(), bins
    counts, probs = binned(arr, num_draws, bins)
    res = stats.chisquare(counts, f_exp=probs * reps, axis=1)
    return np.asarray(res.statistic, dtype=float), np.asarray(res.pvalue, dtype=float), bins


def normalised(ranks_: np.ndarray, num_draws: int) -> np.ndarray:
    """Ranks as points of (0, 1): ``(r + 1/2) / (L + 1)``, uniform when calibrated."""
    return (np.asarray(ranks_, dtype=float) + 0.5) / (num_draws + 1)


def ecdf_difference(
    ranks_: np.ndarray, num_draws: int, prob: float = 0.95, points: int = 100
) -> dict[str, Any]:
    """The ECDF of the ranks minus the uniform CDF at evaluation points ``z_i = i / (L + 1)``
    (where the uniform CDF of a rank, P(r < i), is exact), with ArviZ's simultaneous ``prob``
    band (``method="optimized"``, Säilynoja et al. 2022) minus the same CDF.

    Returns ``{"z", "difference", "lower", "upper"}``; ``ranks_`` is one parameter's ``(reps,)``.
    """
    ecdf_utils = arviz().stats.ecdf_utils  # through arviz(): imported quietly
    r = np.sort(np.asarray(ranks_, dtype=np.int64))
    n = r.size
    steps = np.unique(np.linspace(1, num_draws, min(points, num_draws)).round().astype(int))
    z = steps / (num_draws + 1)
    ecdf = np.searchsorted(r, steps, side="left") / max(n, 1)  # fraction with rank < step
    lower, upper = ecdf_utils.ecdf_confidence_band(n, z, z, prob=prob, method="optimized")
    return {"z": z, "difference": ecdf - z, "lower": lower - z, "upper": upper - z}
