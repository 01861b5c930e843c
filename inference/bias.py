"""Gradient evaluations until the squared bias of every second moment falls below 0.01: the
measure of the MAMS paper (Robnik, Cohn-Gordon & Seljak 2025, arXiv 2503.01707) and the MCLMC
paper (Robnik et al. 2023, JMLR), as sampler-benchmarks' ``sampler_grads_to_low_error``
computes it.

For parameter i after n draws of a chain, b²_i(n) = (Ê_n[x_i²] - E[x_i²])² / Var[x_i²];
b²_max = max_i and b²_avg = mean_i. The papers' aggregation: the median over chains of b²(n),
and the draws after which that curve stays below the threshold, times the gradients a draw
costs (the chains' mean running total); beside it, the median over chains of each chain's own
crossing. Gradients after warmup come from each draw's ``gradient_evals`` or ``n_steps``
statistic (one gradient a leapfrog step).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

THRESHOLD = 0.01


def running_bias(x: np.ndarray, ex2: np.ndarray, var_x2: np.ndarray) -> np.ndarray:
    """b²(n) per chain, draw and parameter: ``x`` (chains, draws, P) -> (chains, draws, P)."""
    n = np.arange(1, x.shape[1] + 1)[None, :, None]
    return (np.cumsum(x**2, axis=1) / n - ex2) ** 2 / var_x2


def draws_to_threshold(curve: np.ndarray, threshold: float = THRESHOLD) -> float:
    """The draws after which ``curve`` (b² after 1, 2, ... draws) stays below ``threshold``
    (the papers' ``find_crossing``); inf where its last value is not below."""
    above = np.flatnonzero(~(curve < threshold))
    if len(above) == 0:
        return 1.0
    if above[-1] == len(curve) - 1:
        return math.inf
    return float(above[-1] + 2)


def gradients_at(cumulative: np.ndarray, draws: float) -> float:
    """Gradients spent by ``draws`` draws: ``cumulative`` (draws,) the running total."""
    return math.inf if math.isinf(draws) else float(cumulative[int(draws) - 1])


@dataclass
class Measured:
    """What :func:`measure` finds: pairs are (b²_max, b²_avg)."""

    median_curve: tuple[float, float]  # gradients to b² < threshold: the papers' aggregation
    per_chain: tuple[float, float]  # median over chains of each chain's gradients
    final: tuple[float, float]  # the median curve's last b²_max, b²_avg
    sampling_gradients: float  # per chain, all draws
    curve: tuple[np.ndarray, np.ndarray]  # the median curves, by ...
    gradients: np.ndarray  # ... the chains' mean gradients so far


def measure(
    x: np.ndarray,
    grads: np.ndarray,
    ex2: np.ndarray,
    var_x2: np.ndarray,
    threshold: float = THRESHOLD,
) -> Measured:
    """``x`` (chains, draws, P) draws, ``grads`` (chains, draws) each draw's gradients,
    ``ex2`` and ``var_x2`` (P,) the truth's E[x²] and Var[x²]."""
    b2 = running_bias(x, ex2, var_x2)
    curves = (b2.max(-1), b2.mean(-1))  # (chains, draws) each
    cum = np.cumsum(grads, axis=1)
    mean_cum = cum.mean(0)
    medians = (np.median(curves[0], 0), np.median(curves[1], 0))

    def crossing(i: int) -> float:
        return gradients_at(mean_cum, draws_to_threshold(medians[i], threshold))

    def per_chain(i: int) -> float:
        c = curves[i]
        return float(
            np.median(
                [gradients_at(cum[k], draws_to_threshold(c[k], threshold)) for k in range(len(c))]
            )
        )

    return Measured(
        (crossing(0), crossing(1)),
        (per_chain(0), per_chain(1)),
        (float(medians[0][-1]), float(medians[1][-1])),
        float(mean_cum[-1]),
        medians,
        mean_cum,
    )


def flat_draws(posterior: Mapping[Any, Any], sites: Sequence[str]) -> np.ndarray:
    """The draws of ``sites`` as (chains, draws, P), each site's elements in C order."""
    parts = []
    for s in sites:
        v = np.asarray(posterior[s], dtype=float)
        parts.append(v.reshape(v.shape[0], v.shape[1], -1))
    return np.concatenate(parts, axis=-1)


def draw_gradients(sample_stats: Mapping[Any, Any], engine: str) -> np.ndarray:
    """Each draw's gradient evaluations (chains, draws): its ``gradient_evals`` statistic, or
    its ``n_steps`` (one gradient a leapfrog step). A ValueError names what is missing."""
    for name in ("gradient_evals", "n_steps"):
        if name in sample_stats:
            return np.asarray(sample_stats[name], dtype=float)
    raise ValueError(
        f"{engine} records no per-draw gradient_evals or n_steps statistic "
        f"(it has {sorted(sample_stats)})"
    )


def second_moments(truth: Any) -> tuple[list[str], np.ndarray, np.ndarray, str]:
    """From a :class:`~zoo_inference.results.GroundTruth`: its sites, E[x²] = sd² + mean² and
    Var[x²] flattened as :func:`flat_draws`, and where Var[x²] comes from (the truth's own
    ``var_sq``, or, where it has none, a Gaussian's 2 sd⁴ + 4 mean² sd², marked approximate)."""
    sites = list(truth.mean)
    mean = {s: np.asarray(truth.mean[s], dtype=float) for s in sites}
    sd = {s: np.asarray(truth.sd[s], dtype=float) for s in sites}
    ex2 = np.concatenate([(sd[s] ** 2 + mean[s] ** 2).ravel() for s in sites])
    if all(s in truth.var_sq for s in sites):
        var = np.concatenate([np.asarray(truth.var_sq[s], dtype=float).ravel() for s in sites])
        return sites, ex2, var, "the truth's Var[x²]"
    var = np.concatenate([(2 * sd[s] ** 4 + 4 * mean[s] ** 2 * sd[s] ** 2).ravel() for s in sites])
    return sites, ex2, var, "approximate: a Gaussian's Var[x²] from the truth's mean and sd"
