"""The one place where engine output becomes ArviZ objects (InferenceData, summaries).

Every engine hands plain arrays shaped ``(chain, draw, *site_shape)`` to :func:`make_run`; nothing
else in the project calls ArviZ's constructors, so a move to ArviZ 1.x stays local to this file.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

with warnings.catch_warnings():  # ArviZ 0.2x announces its 1.x refactor on import
    warnings.simplefilter("ignore", FutureWarning)
    import arviz as az
import numpy as np
import pandas as pd
import torch

from .results import Run


@contextmanager
def _quiet() -> Iterator[None]:
    """Silence ArviZ's logged warnings and numpy's for degenerate inputs that we report as NaN
    (R-hat of one chain, sd of a one-draw point estimate)."""
    log = logging.getLogger("arviz")
    level = log.level
    log.setLevel(logging.ERROR)
    try:
        with np.errstate(invalid="ignore", divide="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            yield
    finally:
        log.setLevel(level)


def _to_numpy(value: Any) -> np.ndarray:
    if isinstance(value, torch.Tensor):
        value = value.detach().cpu().numpy()
    return np.asarray(value)


def to_inference_data(
    posterior: Mapping[str, Any],
    *,
    sample_stats: Mapping[str, Any] | None = None,
    observed_data: Mapping[str, Any] | None = None,
    log_likelihood: Mapping[str, Any] | None = None,
) -> az.InferenceData:
    """Build InferenceData from arrays shaped (chain, draw, ...)."""
    groups: dict[str, dict[str, np.ndarray]] = {
        "posterior": {k: _to_numpy(v) for k, v in posterior.items()}
    }
    if sample_stats:
        groups["sample_stats"] = {k: _to_numpy(v) for k, v in sample_stats.items()}
    if log_likelihood:
        groups["log_likelihood"] = {k: _to_numpy(v) for k, v in log_likelihood.items()}
    if observed_data:
        groups["observed_data"] = {
            k: _to_numpy(v) for k, v in observed_data.items() if _is_array_like(v)
        }
    return az.from_dict(**groups)


def _is_array_like(v: Any) -> bool:
    return isinstance(v, torch.Tensor | np.ndarray)


def summarize(idata: az.InferenceData, *, mcmc: bool) -> pd.DataFrame:
    """arviz.summary: mean/sd/HDI, plus R-hat and ESS for MCMC runs (several chains)."""
    kind = "all" if mcmc else "stats"
    with _quiet():
        table = az.summary(idata, kind=kind, round_to="none")
    return table


def moment_rows(site: str, mean: Any, sd: Any) -> dict[str, tuple[float, float]]:
    """Name per-element moments of a site the way ``arviz.summary`` names its rows."""
    mean = np.asarray(mean, dtype=float)
    sd = np.broadcast_to(np.asarray(sd, dtype=float), mean.shape)
    if mean.ndim == 0:
        return {site: (float(mean), float(sd))}
    return {
        f"{site}[{', '.join(str(i) for i in idx)}]": (float(mean[idx]), float(sd[idx]))
        for idx in np.ndindex(mean.shape)
    }


def exact_moment_rows(
    marginals: Mapping[str, tuple[np.ndarray, np.ndarray]],
) -> dict[str, tuple[float, float]]:
    """Exact mean and sd per summary row from enumerated marginals.

    ``marginals[site] = (values, probs)`` with ``values`` of shape (V,) and ``probs`` of shape
    (V, *site_shape).
    """
    rows: dict[str, tuple[float, float]] = {}
    for site, (values, probs) in marginals.items():
        v = values.reshape((-1,) + (1,) * (probs.ndim - 1))
        mean = (v * probs).sum(0)
        var = np.clip((v**2 * probs).sum(0) - mean**2, 0.0, None)
        rows.update(moment_rows(site, mean, np.sqrt(var)))
    return rows


def make_run(
    engine: str,
    posterior: Mapping[str, Any],
    *,
    mcmc: bool = False,
    sample_stats: Mapping[str, Any] | None = None,
    observed_data: Mapping[str, Any] | None = None,
    log_likelihood: Mapping[str, Any] | None = None,
    diagnostics: dict[str, Any] | None = None,
    log_evidence: float | None = None,
    exact_moments: Mapping[str, tuple[float, float]] | None = None,
    extras: dict[str, Any] | None = None,
) -> Run:
    """Package engine output as a :class:`Run` (InferenceData + summary).

    ``exact_moments`` (row -> (mean, sd)) replaces the Monte-Carlo mean and sd of rows that the
    engine knows exactly (enumerated discrete sites, closed forms).
    """
    idata = to_inference_data(
        posterior,
        sample_stats=sample_stats,
        observed_data=observed_data,
        log_likelihood=log_likelihood,
    )
    summary = summarize(idata, mcmc=mcmc)
    for row, (mean, sd) in (exact_moments or {}).items():
        if row in summary.index:
            summary.loc[row, "mean"] = mean
            summary.loc[row, "sd"] = sd
    return Run(
        engine=engine,
        idata=idata,
        summary=summary,
        diagnostics=dict(diagnostics or {}),
        log_evidence=None if log_evidence is None else float(log_evidence),
        extras=dict(extras or {}),
    )


def point_run(
    engine: str,
    estimate: Mapping[str, Any],
    *,
    observed_data: Mapping[str, Any] | None = None,
    log_evidence: float | None = None,
    diagnostics: dict[str, Any] | None = None,
    extras: dict[str, Any] | None = None,
) -> Run:
    """A point estimate (EM, MAP) as a Run: a one-chain, one-draw posterior with sd 0.
    ``diagnostics["conditional_on"]`` names the estimated sites (the evidence is given them)."""
    posterior = {k: _to_numpy(v)[None, None] for k, v in estimate.items()}
    exact: dict[str, tuple[float, float]] = {}
    for k, v in posterior.items():
        exact.update(moment_rows(k, v[0, 0], np.zeros_like(v[0, 0], dtype=float)))
    return make_run(
        engine,
        posterior,
        observed_data=observed_data,
        log_evidence=log_evidence,
        exact_moments=exact,
        diagnostics={"conditional_on": list(estimate), **(diagnostics or {})},
        extras={"estimate": dict(estimate), **(extras or {})},
    )


def mcmc_convergence(idata: az.InferenceData) -> dict[str, float]:
    """max R-hat and min bulk ESS over every scalar of the posterior (R-hat is NaN, and ArviZ's
    warning about it is silenced, for a single chain)."""
    with _quiet():
        rhat = az.rhat(idata)
        ess = az.ess(idata, method="bulk")
    rhats = np.concatenate([np.ravel(rhat[v].values) for v in rhat.data_vars] or [np.array([])])
    esss = np.concatenate([np.ravel(ess[v].values) for v in ess.data_vars] or [np.array([])])
    return {
        "max_r_hat": float(np.nanmax(rhats)) if np.isfinite(rhats).any() else float("nan"),
        "min_ess_bulk": float(np.nanmin(esss)) if np.isfinite(esss).any() else float("nan"),
    }


def psis_pareto_k(log_weights: np.ndarray) -> float:
    """Pareto k-hat of importance weights (PSIS; Vehtari et al.): > 0.7 means unreliable."""
    with _quiet():
        _, k = az.psislw(np.asarray(log_weights, dtype=float))
    return float(k)
