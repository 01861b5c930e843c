"""Accuracy against the ground truth: the parameter x engine comparison table."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd

from .results import GroundTruth, Run


def row_site(row: str) -> str:
    """``"locs[1]"`` -> ``"locs"``."""
    return row.split("[", 1)[0]


def comparison_table(
    runs: Mapping[str, Run], truth: GroundTruth | None, params: Sequence[str]
) -> pd.DataFrame:
    """Rows: every summary row of the compared sites. Columns (MultiIndex): ``("truth", mean|sd)``
    and, per engine, ``(engine, mean|sd|std_err)`` with std_err = |mean - truth| / truth_sd."""
    rows: list[str] = []
    for run in runs.values():
        if run.ok:
            rows += [r for r in run.summary.index if row_site(r) in params and r not in rows]
    if truth is not None:
        rows += [r for r in truth.mean if row_site(r) in params and r not in rows]
    cols: dict[tuple[str, str], list[float]] = {}
    t_mean = [truth.mean.get(r, np.nan) if truth else np.nan for r in rows]
    t_sd = [truth.sd.get(r, np.nan) if truth else np.nan for r in rows]
    cols[("truth", "mean")], cols[("truth", "sd")] = t_mean, t_sd
    for engine, run in runs.items():
        s = run.summary if run.ok else pd.DataFrame(columns=["mean", "sd"])
        mean = [float(s.loc[r, "mean"]) if r in s.index else np.nan for r in rows]
        sd = [float(s.loc[r, "sd"]) if r in s.index else np.nan for r in rows]
        with np.errstate(invalid="ignore", divide="ignore"):
            err = np.abs(np.subtract(mean, t_mean)) / np.asarray(t_sd, dtype=float)
        cols[(engine, "mean")], cols[(engine, "sd")], cols[(engine, "std_err")] = (
            mean,
            sd,
            list(err),
        )
    table = pd.DataFrame(cols, index=pd.Index(rows, name="parameter"))
    table.columns = pd.MultiIndex.from_tuples(table.columns, names=["source", "stat"])
    return table
