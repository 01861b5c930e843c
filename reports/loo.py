"""The LOO/WAIC table: ArviZ's comparison of the runs from their pointwise log-likelihood."""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd
import xarray as xr

from zoo_inference.arviz_io import _quiet, arviz, to_inference_data
from zoo_inference.results import Comparison, Run

MIN_LOO_DRAWS = 20  # a run with fewer posterior draws gets no LOO
# ... and a run with more than this many is thinned evenly for LOO and WAIC (every k-th draw of
# each chain): PSIS is fitted observation by observation, its cost in proportion to the draws,
# and a ChEES run of the quick profile (32 x 500 draws) took most of a page's LOO time
MAX_LOO_DRAWS = 4000


def _pointwise_idata(run: Run) -> Any:
    """The run's InferenceData for LOO: itself when it holds one log-likelihood variable, else
    one whose single variable concatenates every observed site's pointwise values."""
    idata = run.idata
    assert idata is not None  # the caller checked
    ll = idata.log_likelihood  # type: ignore[attr-defined]  # arviz sets groups as attributes
    names = list(ll.data_vars)
    if len(names) == 1:
        return idata
    c, d = ll.sizes["chain"], ll.sizes["draw"]
    joined = np.concatenate([np.asarray(ll[v].values).reshape(c, d, -1) for v in names], axis=2)
    post = {k: v.values for k, v in idata.posterior.data_vars.items()}  # type: ignore[attr-defined]  # arviz sets groups as attributes
    return to_inference_data(post, log_likelihood={"+".join(names): joined})


def _ranked(elpd: Mapping[str, Any]) -> pd.DataFrame:
    """ArviZ ``compare``'s columns for runs it could not compare: ranked by elpd_loo, stacking
    weight and dse unknown (NaN) unless there is one run."""
    one = len(elpd) == 1
    table = pd.DataFrame(
        {
            "elpd_loo": [float(v.elpd_loo) for v in elpd.values()],
            "p_loo": [float(v.p_loo) for v in elpd.values()],
            "se": [float(v.se) for v in elpd.values()],
            "weight": 1.0 if one else np.nan,
            "dse": 0.0 if one else np.nan,
        },
        index=list(elpd),
    ).sort_values("elpd_loo", ascending=False, na_position="last")
    table["rank"] = np.arange(len(table))
    table["elpd_diff"] = table["elpd_loo"].iloc[0] - table["elpd_loo"]
    return table


POINTWISE = ("loo_i", "pareto_k")  # ELPDData's entries with a value per observation
LOO_KEY = "loo"  # run.extras[LOO_KEY]: the run's pointwise LOO (pointwise_loo), when kept


def pointwise_loo(run: Run) -> dict[str, Any] | None:
    """The run's PSIS-LOO and WAIC as plain data (numbers, lists and arrays): what
    :func:`loo_comparison` needs of it, and all a report's stored cell keeps in place of the
    log-likelihood (draws x observations, most of a cell's size). None when the run has no
    pointwise log-likelihood, fewer than :data:`MIN_LOO_DRAWS` draws, or one ArviZ cannot use."""
    az = arviz()
    if not run.ok or run.kind != "draws" or run.idata is None:
        return None
    if "log_likelihood" not in run.idata.groups():
        return None
    ll = run.idata.log_likelihood  # type: ignore[attr-defined]  # arviz sets groups as attributes
    if not ll.data_vars:
        return None
    draws = ll.sizes.get("chain", 0) * ll.sizes.get("draw", 0)
    if draws < MIN_LOO_DRAWS:
        return None
    every = -(-draws // MAX_LOO_DRAWS)
    try:
        idata = _pointwise_idata(run)
        if every > 1:
            idata = idata.isel(draw=slice(None, None, every))
        with _quiet(), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            loo = az.loo(idata, pointwise=True)
            waic = az.waic(idata, pointwise=True)
    except Exception:  # noqa: BLE001 - a run whose LOO cannot be computed is left out
        return None
    k = np.asarray(loo.pareto_k).ravel()
    good_k = float(getattr(loo, "good_k", 0.7) or 0.7)
    return {
        "elpd": {key: _plain(loo[key]) for key in loo.index},
        "elpd_waic": float(waic.elpd_waic),
        "p_waic": float(waic.p_waic),
        "waic_se": float(waic.se),
        "n_obs": int(k.size),
        "k_bad": int(np.sum(k > good_k)),
        "k_max": float(np.nanmax(k)) if k.size else float("nan"),
        "good_k": good_k,
        "variables": list(ll.data_vars),
        "draws": draws,
        "every": every,  # 1: all draws; k: every k-th draw of each chain
    }


def _plain(value: Any) -> Any:
    """An ELPDData entry as plain data: a DataArray (loo_i, pareto_k) as its flat values."""
    if isinstance(value, xr.DataArray):
        return np.asarray(value.values, dtype=float).ravel()
    if isinstance(value, np.generic):
        return value.item()
    return value


def _elpd_data(plain: dict[str, Any]) -> Any:
    """ArviZ's ELPDData again, from :func:`pointwise_loo`'s ``elpd``."""
    values = {
        key: xr.DataArray(np.asarray(v, dtype=float), dims=("observation",))
        if key in POINTWISE
        else v
        for key, v in plain.items()
    }
    return arviz().stats.ELPDData(data=list(values.values()), index=list(values))


def loo_comparison(cmp: Comparison) -> dict[str, Any] | None:
    """PSIS-LOO and WAIC of every run with a pointwise log-likelihood and posterior draws,
    ranked by ArviZ ``compare`` (elpd_loo, p_loo, se, elpd_diff, dse, stacking weight), with
    each run's Pareto k-hat warnings in words. A run whose ``extras`` hold its
    :func:`pointwise_loo` (a report's cells) is read from it. None when no run qualifies."""
    az = arviz()
    elpd: dict[str, Any] = {}
    extra: dict[str, dict[str, Any]] = {}
    kept = []  # engines whose LOO was computed when the cell ran (no log-likelihood stored)
    for engine, run in cmp.runs.items():
        point = run.extras[LOO_KEY] if LOO_KEY in run.extras else pointwise_loo(run)
        if point is None or not run.ok:
            continue
        if LOO_KEY in run.extras:
            kept.append(engine)
        elpd[engine] = _elpd_data(point["elpd"])
        extra[engine] = {k: v for k, v in point.items() if k != "elpd"}
    if not elpd:
        return None
    table = None
    if len(elpd) > 1:
        try:
            with _quiet(), warnings.catch_warnings():
                warnings.simplefilter("ignore")
                table = az.compare(elpd, ic="loo")
        except Exception:  # noqa: BLE001 - without compare: ranked by elpd, no weights
            table = None
    if table is None:
        table = _ranked(elpd)
    rows, warns = [], []
    for engine, r in table.iterrows():
        e = extra[str(engine)]
        rows.append(
            {
                "engine": str(engine),
                "rank": int(r["rank"]),
                "elpd_loo": float(r["elpd_loo"]),
                "se": float(r["se"]),
                "p_loo": float(r["p_loo"]),
                "elpd_diff": float(r["elpd_diff"]),
                "dse": float(r["dse"]),
                "weight": float(r["weight"]),
                **e,
            }
        )
        if e["k_bad"]:
            warns.append(
                f"k\u0302 > {e['good_k']:.2g} at {e['k_bad']} of {e['n_obs']} observations"
                + (f" (max {e['k_max']:.2f})" if np.isfinite(e["k_max"]) else "")
                + f": LOO unreliable for {engine}"
            )
    observed = sorted({v for e in extra.values() for v in e["variables"]})
    thinned = [
        f"{engine}: one draw in {e['every']} of its {e['draws']}"
        for engine, e in extra.items()
        if e["every"] > 1
    ]
    return {
        "rows": rows,
        "warnings": warns,
        "observed": observed,
        "thinned": thinned,
        "max_draws": MAX_LOO_DRAWS,
        "kept": kept,
    }
