"""Plain JSON of results: numpy/torch to Python, NaN and inf to None."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

if TYPE_CHECKING:
    from .results import Run


def frame_records(frame: pd.DataFrame) -> dict[str, dict[str, Any]]:
    """``{row: {column: value}}`` of a summary-like frame."""
    return {str(r): {str(c): frame.loc[r, c] for c in frame.columns} for r in frame.index}


def jsonable(obj: Any) -> Any:
    """Plain JSON data: numpy/torch to Python, NaN and inf to None, unknown objects to str."""
    if obj is None or isinstance(obj, (bool, str, int)):
        return obj
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, np.generic):
        return jsonable(obj.item())
    if isinstance(obj, Mapping):
        return {str(k): jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple, set, frozenset)):
        return [jsonable(v) for v in obj]
    if isinstance(obj, np.ndarray):
        return jsonable(obj.tolist())
    if hasattr(obj, "detach") and hasattr(obj, "tolist"):  # torch.Tensor
        return jsonable(obj.detach().cpu().tolist())
    if isinstance(obj, pd.DataFrame):
        return jsonable(frame_records(obj))
    return str(obj)


def dumps(obj: Any) -> str:
    return json.dumps(jsonable(obj), indent=2, allow_nan=False, ensure_ascii=False) + "\n"


def run_record(run: Run) -> dict[str, Any]:
    """Everything a Run says except its draws, as plain data."""
    ev = run.evidence
    return {
        "model": run.model,
        "engine": run.engine,
        "seed": run.seed,
        "status": run.status,
        "error": run.error,
        "caveat": run.caveat,
        "reasons": list(run.reasons),
        "kind": run.kind,
        "conditional_on": list(run.conditional_on),
        "log_evidence": run.log_evidence,
        "evidence_kind": None if ev is None else ev.kind,
        "options": run.options,
        "model_data": run.model_data,
        "closed_form": run.closed_form,
        "diagnostics": {k: v for k, v in run.diagnostics.items() if k not in run.traces},
        "traces": run.traces,
    }
