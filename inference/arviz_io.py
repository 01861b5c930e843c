"""The one place where engine output becomes ArviZ objects (InferenceData, summaries).

Every engine hands plain arrays shaped ``(chain, draw, *site_shape)`` to :func:`make_run`; nothing
else in the project calls ArviZ's constructors, so a move to ArviZ 1.x stays local to this file.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from types import ModuleType
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd
import torch
from scipy.special import logsumexp

from .results import Evidence, Run, RunKind, site_rows

if TYPE_CHECKING:
    import arviz as az
    import xarray as xr


def arviz() -> ModuleType:
    """ArviZ, imported on first use: its import (with matplotlib's pyplot and scipy.stats) is
    most of a second that listing or registering models does not need."""
    with warnings.catch_warnings():  # ArviZ 0.2x announces its 1.x refactor on import
        warnings.simplefilter("ignore", FutureWarning)
        import arviz as az
    return az


@contextmanager
def _quiet() -> Iterator[None]:
    """Silence ArviZ's logged warnings and numpy's for degenerate inputs that we report as NaN
    (R-hat of one chain, sd of a one-draw point estimate)."""
    # ArviZ 0.x logs through a Logger of its own beside logging's "arviz"
    found = {logging.getLogger("arviz"), getattr(arviz(), "_log", None)}
    logs = [lg for lg in found if isinstance(lg, logging.Logger)]
    levels = [lg.level for lg in logs]
    for lg in logs:
        lg.setLevel(logging.ERROR)
    try:
        with np.errstate(invalid="ignore", divide="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            yield
    finally:
        for lg, level in zip(logs, levels, strict=True):
            lg.setLevel(level)


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
    with _quiet():  # ArviZ logs "Shape validation failed" for one chain or few draws
        return arviz().from_dict(**groups)


def _is_array_like(v: Any) -> bool:
    return isinstance(v, torch.Tensor | np.ndarray)


FAST_SUMMARY = 2000  # posterior scalars above which :func:`fast_stats` replaces arviz's loop


def fast_stats(posterior: Any, hdi_prob: float) -> pd.DataFrame:
    """arviz.summary(kind="stats")'s numbers, vectorised over the scalars: mean, sd (ddof 1)
    and the narrowest interval holding ``hdi_prob`` of the sorted draws (arviz's HDI, which
    loops over scalars in Python: 10-40 s for the 15000 latent coordinates of a VAE)."""
    names: list[str] = []
    columns: list[np.ndarray] = []
    for name, var in posterior.data_vars.items():
        a = np.asarray(var.values)
        n = a.shape[0] * a.shape[1]
        columns.append(a.reshape(n, -1).astype(np.float64))
        shape = a.shape[2:]
        names += [f"{name}[{', '.join(map(str, i))}]" if shape else name for i in np.ndindex(shape)]
    flat = np.concatenate(columns, axis=1)
    n = flat.shape[0]
    ordered = np.sort(flat, axis=0)
    k = int(np.floor(hdi_prob * n))
    first = np.argmin(ordered[k:] - ordered[: n - k], axis=0)
    cols = np.arange(flat.shape[1])
    alpha = 1 - hdi_prob
    with np.errstate(invalid="ignore", divide="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        sd = flat.std(axis=0, ddof=1)
    return pd.DataFrame(
        {
            "mean": flat.mean(axis=0),
            "sd": sd,
            f"hdi_{100 * alpha / 2:g}%": ordered[first, cols],
            f"hdi_{100 * (1 - alpha / 2):g}%": ordered[first + k, cols],
        },
        index=names,
    )


def summarize(idata: az.InferenceData, *, mcmc: bool) -> pd.DataFrame:
    """arviz.summary: mean/sd/HDI, plus R-hat and ESS for MCMC runs (several chains). A large
    posterior without MCMC statistics is summarised by :func:`fast_stats` (the same numbers)."""
    post = idata.posterior  # type: ignore[attr-defined]  # arviz sets groups as attributes
    scalars = sum(int(np.prod(v.shape[2:])) for v in post.data_vars.values())
    if not mcmc and scalars > FAST_SUMMARY and post.sizes.get("draw", 0) > 1:
        return fast_stats(post, float(arviz().rcParams["stats.ci_prob"]))
    kind = "all" if mcmc else "stats"
    with _quiet():
        table = arviz().summary(idata, kind=kind, round_to="none")
    return table


def make_run(
    engine: str,
    posterior: Mapping[str, Any],
    *,
    kind: RunKind = "draws",
    conditional_on: Sequence[str] = (),
    mcmc: bool = False,
    sample_stats: Mapping[str, Any] | None = None,
    observed_data: Mapping[str, Any] | None = None,
    log_likelihood: Mapping[str, Any] | None = None,
    evidence: Evidence | None = None,
    traces: Mapping[str, Sequence[float]] | None = None,
    diagnostics: Mapping[str, Any] | None = None,
    exact_moments: Mapping[str, tuple[Any, Any]] | None = None,
    closed_form: bool = False,
    extras: Mapping[str, Any] | None = None,
) -> Run:
    """Package engine output (arrays shaped ``(chain, draw, *site_shape)``) as a :class:`Run`.

    ``exact_moments`` (site -> (mean array, sd array)) replaces the Monte-Carlo mean and sd of the
    summary rows of sites the engine knows exactly (enumerated discrete sites, closed forms,
    point estimates); ``closed_form`` says that every site's moments are exact (the run is given
    as distributions: :attr:`Run.closed_form`). ``diagnostics`` gets the contract's keys derived
    from the typed fields (``log_evidence``, ``elbo``).
    """
    idata = to_inference_data(
        posterior,
        sample_stats=sample_stats,
        observed_data=observed_data,
        log_likelihood=log_likelihood,
    )
    summary = summarize(idata, mcmc=mcmc)
    for site, (mean, sd) in (exact_moments or {}).items():
        sds = site_rows(site, sd)
        for row, m in site_rows(site, mean).items():
            if row in summary.index:
                summary.loc[row, "mean"] = m
                summary.loc[row, "sd"] = sds[row]
    lists = {k: [float(x) for x in v] for k, v in (traces or {}).items()}
    diag = dict(diagnostics or {})
    if evidence is not None:
        diag["log_evidence"] = evidence.value
    if "elbo" in lists:
        diag["elbo"] = lists["elbo"]
    return Run(
        engine=engine,
        idata=idata,
        summary=summary,
        kind=kind,
        conditional_on=tuple(conditional_on),
        evidence=evidence,
        traces=lists,
        diagnostics=diag,
        closed_form=closed_form,
        extras=dict(extras or {}),
    )


def mcmc_convergence(idata: az.InferenceData | xr.Dataset) -> dict[str, float]:
    """max R-hat and min bulk ESS over every scalar of the posterior (an InferenceData's, or a
    Dataset of draws); R-hat is NaN for a single chain, ArviZ's warning about it silenced."""
    with _quiet():
        rhat = arviz().rhat(idata)
        ess = arviz().ess(idata, method="bulk")
    rhats = np.concatenate([np.ravel(rhat[v].values) for v in rhat.data_vars] or [np.array([])])
    esss = np.concatenate([np.ravel(ess[v].values) for v in ess.data_vars] or [np.array([])])
    return {
        "max_r_hat": float(np.nanmax(rhats)) if np.isfinite(rhats).any() else float("nan"),
        "min_ess_bulk": float(np.nanmin(esss)) if np.isfinite(esss).any() else float("nan"),
    }


RELIABLE_K = 0.7
"""Pareto k-hat of the weights above which an importance estimate is unreliable (PSIS, Vehtari
et al. 2024: the estimate's error then falls too slowly with the number of draws)."""


def systematic_resample(log_w: np.ndarray, n: int, rng: np.random.Generator) -> np.ndarray:
    """Indices of ``n`` equally weighted draws (systematic resampling: low variance)."""
    w = np.exp(log_w - logsumexp(log_w))
    positions = (rng.random() + np.arange(n)) / n
    return np.minimum(np.searchsorted(np.cumsum(w), positions), len(w) - 1)


def psis_pareto_k(log_weights: np.ndarray) -> float:
    """Pareto k-hat of importance weights (PSIS; Vehtari et al.): > 0.7 means unreliable."""
    with _quiet():
        _, k = arviz().psislw(np.asarray(log_weights, dtype=float))
    return float(k)


def psis_pareto_k_each(log_weights: np.ndarray) -> np.ndarray:
    """Pareto k-hat of each row of ``log_weights`` (rows: data points, columns: draws), the
    weights of an amortised guide per data point."""
    with _quiet():
        _, k = arviz().psislw(np.asarray(log_weights, dtype=float))
    return np.atleast_1d(np.asarray(k, dtype=float))
