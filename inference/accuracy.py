"""Accuracy against the ground truth: the parameter x engine comparison table (wide, and long:
a row per parameter and engine), and the reference run a model without a truth is compared
against."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd

from .results import GroundTruth, Run, parse_row
from .verdict import flags, is_finite

ERROR = "error_in_sds"
"""|mean - truth mean| / truth sd: how many posterior sds an engine's mean is off (not a
standard error)."""


def comparison_table(
    runs: Mapping[str, Run], truth: GroundTruth | None, params: Sequence[str]
) -> pd.DataFrame:
    """Rows: every summary row of the compared sites. Columns (MultiIndex): ``("truth", mean|sd)``
    and, per engine, ``(engine, mean|sd|error_in_sds)``."""
    exact = truth.rows() if truth is not None else {}
    rows: list[str] = []
    for run in runs.values():
        if run.ok:
            rows += [r for r in run.summary.index if parse_row(r)[0] in params and r not in rows]
    rows += [r for r in exact if parse_row(r)[0] in params and r not in rows]
    nan = (np.nan, np.nan)
    t_mean = np.array([exact.get(r, nan)[0] for r in rows], dtype=float)
    t_sd = np.array([exact.get(r, nan)[1] for r in rows], dtype=float)
    cols: dict[tuple[str, str], np.ndarray] = {("truth", "mean"): t_mean, ("truth", "sd"): t_sd}
    for engine, run in runs.items():
        s = run.summary if run.ok else pd.DataFrame(columns=["mean", "sd"])
        mean = np.array([s.loc[r, "mean"] if r in s.index else np.nan for r in rows], dtype=float)
        sd = np.array([s.loc[r, "sd"] if r in s.index else np.nan for r in rows], dtype=float)
        with np.errstate(invalid="ignore", divide="ignore"):
            err = np.abs(mean - t_mean) / t_sd
        cols[(engine, "mean")], cols[(engine, "sd")], cols[(engine, ERROR)] = mean, sd, err
    table = pd.DataFrame(cols, index=pd.Index(rows, name="parameter"))
    table.columns = pd.MultiIndex.from_tuples(table.columns, names=["source", "stat"])
    return table


def table_engines(table: pd.DataFrame) -> list[str]:
    """Engines of a wide comparison table, in column order."""
    seen: list[str] = []
    for source in table.columns.get_level_values(0):
        if source != "truth" and source not in seen:
            seen.append(source)
    return seen


def reference_engine(runs: Mapping[str, Run]) -> str | None:
    """With no ground truth: the converged MCMC run (R-hat below 1.05) with most effective draws,
    if any. Neither a variant that runs the model under other arguments, nor a failed run, nor
    one its engine marked unreliable serves (a run unreliable by the verdict's stricter R-hat,
    ESS or divergence bounds alone does)."""
    best, best_ess = None, -1.0
    for name, run in runs.items():
        if run.model_data or not run.ok or "caveat" in flags(run):
            continue
        d = run.diagnostics
        rhat, ess = d.get("max_r_hat"), d.get("min_ess_bulk")
        if is_finite(rhat) and float(rhat) < 1.05 and is_finite(ess) and float(ess) > best_ess:
            best, best_ess = name, float(ess)
    return best


def with_reference(table: pd.DataFrame, ref: str) -> pd.DataFrame:
    """The wide table with ``ref``'s mean and sd as the truth and the errors recomputed."""
    t = table.copy()
    t[("truth", "mean")] = t[(ref, "mean")]
    t[("truth", "sd")] = t[(ref, "sd")]
    for e in table_engines(t):
        with np.errstate(invalid="ignore", divide="ignore"):
            t[(e, ERROR)] = (t[(e, "mean")] - t[("truth", "mean")]).abs() / t[("truth", "sd")]
    return t


def long_table(wide: pd.DataFrame, reference: str | None = None) -> pd.DataFrame:
    """The wide table as one row per parameter and source (index ``(parameter, engine)``;
    columns mean, sd, error_in_sds), the truth's row first in each parameter. With
    ``reference`` (a model without a truth), that engine's row comes first, named
    ``"<engine> (reference)"``, and the others' errors are against it."""
    truth = "truth"
    if reference is not None:
        wide, truth = with_reference(wide, reference), f"{reference} (reference)"
    engines = [e for e in table_engines(wide) if e != reference]
    rows, index = [], []
    for param in wide.index:
        t_mean, t_sd = wide.loc[param, ("truth", "mean")], wide.loc[param, ("truth", "sd")]
        index.append((param, truth))
        rows.append((t_mean, t_sd, np.nan))
        for e in engines:
            index.append((param, e))
            rows.append(tuple(wide.loc[param, (e, c)] for c in ("mean", "sd", ERROR)))
    return pd.DataFrame(
        rows,
        index=pd.MultiIndex.from_tuples(index, names=["parameter", "engine"]),
        columns=["mean", "sd", ERROR],
        dtype=float,
    )
