"""Accuracy against the ground truth: the parameter x engine comparison table."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd

from .results import GroundTruth, Run, parse_row

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
