"""Offline data: vendored CSVs (see README.md here for provenance and licences), datasets that
scikit-learn bundles in its wheel, and synthetic generators."""

from __future__ import annotations

from functools import cache
from pathlib import Path

import numpy as np
import pandas as pd
from sklearn import datasets as sk

HERE = Path(__file__).resolve().parent


@cache
def _read(name: str) -> pd.DataFrame:
    return pd.read_csv(HERE / name)


def load_faithful() -> pd.DataFrame:
    """Old Faithful geyser: 272 eruptions, columns ``eruptions`` and ``waiting`` (minutes)."""
    return _read("faithful.csv").copy()


def standardise(x: np.ndarray) -> np.ndarray:
    """Columns centred and scaled to unit sd (so one prior scale fits every coefficient)."""
    x = np.asarray(x, dtype=float)
    return (x - x.mean(0)) / x.std(0)


def load_diabetes() -> tuple[np.ndarray, np.ndarray, list[str]]:
    """scikit-learn's diabetes data (Efron et al. 2004): 442 patients, 10 baseline features
    (already centred and scaled by scikit-learn), target a disease progression score after one
    year. Returns ``(X, y, feature_names)``."""
    d = sk.load_diabetes()
    return d.data.astype(float), d.target.astype(float), list(d.feature_names)


def load_breast_cancer() -> tuple[np.ndarray, np.ndarray, list[str]]:
    """scikit-learn's Wisconsin breast cancer data: 569 tumours, 30 features, target 1 =
    benign, 0 = malignant. Returns ``(X, y, feature_names)`` with X unstandardised."""
    d = sk.load_breast_cancer()
    return d.data.astype(float), d.target.astype(float), list(d.feature_names)


def load_iris() -> tuple[np.ndarray, np.ndarray, list[str]]:
    """scikit-learn's copy of Fisher's iris data: 150 flowers, 4 measurements (cm), 3 species
    (labels 0, 1, 2). Returns ``(X, y, feature_names)``."""
    d = sk.load_iris()
    return d.data.astype(float), d.target.astype(int), list(d.feature_names)


__all__ = [
    "load_breast_cancer",
    "load_diabetes",
    "load_faithful",
    "load_iris",
    "standardise",
]
