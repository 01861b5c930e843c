"""Offline data: vendored CSVs (see README.md here for provenance and licences) and synthetic
generators."""

from __future__ import annotations

from functools import cache
from pathlib import Path

import pandas as pd

HERE = Path(__file__).resolve().parent


@cache
def _read(name: str) -> pd.DataFrame:
    return pd.read_csv(HERE / name)


def load_faithful() -> pd.DataFrame:
    """Old Faithful geyser: 272 eruptions, columns ``eruptions`` and ``waiting`` (minutes)."""
    return _read("faithful.csv").copy()


__all__ = ["load_faithful"]
