"""Offline data: vendored CSVs (see README.md here for provenance and licences), datasets that
scikit-learn bundles in its wheel, and synthetic generators.

Nothing is read at import: each loader reads its data when called (scikit-learn, a second to
import, only then), so ``import zoo`` and ``zoo list`` do not pay for data no model asked for."""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    import pandas as pd

HERE = Path(__file__).resolve().parent


@cache
def _read(name: str) -> pd.DataFrame:
    import pandas as pd

    return pd.read_csv(HERE / name)


def _sklearn(loader: str) -> Any:
    """One of scikit-learn's bundled datasets (a ``Bunch``), imported on first use."""
    from sklearn import datasets as sk

    return getattr(sk, loader)()


def load_faithful() -> pd.DataFrame:
    """Old Faithful geyser: 272 eruptions, columns ``eruptions`` and ``waiting`` (minutes)."""
    return _read("faithful.csv").copy()


def load_radon_minnesota() -> pd.DataFrame:
    """Radon in 919 Minnesota homes (Gelman & Hill 2007): columns ``log_radon`` (log pCi/L, a
    zero reading as 0.1), ``floor`` (0 basement, 1 first floor), ``log_uranium`` (the county's
    log soil uranium, ppm) and ``county`` (name)."""
    return _read("radon_minnesota.csv").copy()


def load_german_credit_numeric() -> pd.DataFrame:
    """UCI's Statlog German credit data, numeric form (Strathclyde's ``german.data-numeric``):
    1000 applicants, 24 integer attributes ``a1``..``a24`` (ordered categories as codes,
    indicator columns for the unordered ones) and ``label`` (1 good, 2 bad credit risk)."""
    return _read("german_credit_numeric.csv").copy()


def standardise(x: np.ndarray) -> np.ndarray:
    """Columns centred and scaled to unit sd (so one prior scale fits every coefficient)."""
    x = np.asarray(x, dtype=float)
    return (x - x.mean(0)) / x.std(0)


def load_diabetes() -> tuple[np.ndarray, np.ndarray, list[str]]:
    """scikit-learn's diabetes data (Efron et al. 2004): 442 patients, 10 baseline features
    (already centred and scaled by scikit-learn), target a disease progression score after one
    year. Returns ``(X, y, feature_names)``."""
    d = _sklearn("load_diabetes")
    return d.data.astype(float), d.target.astype(float), list(d.feature_names)


def load_breast_cancer() -> tuple[np.ndarray, np.ndarray, list[str]]:
    """scikit-learn's Wisconsin breast cancer data: 569 tumours, 30 features, target 1 =
    benign, 0 = malignant. Returns ``(X, y, feature_names)`` with X unstandardised."""
    d = _sklearn("load_breast_cancer")
    return d.data.astype(float), d.target.astype(float), list(d.feature_names)


def load_iris() -> tuple[np.ndarray, np.ndarray, list[str]]:
    """scikit-learn's copy of Fisher's iris data: 150 flowers, 4 measurements (cm), 3 species
    (labels 0, 1, 2). Returns ``(X, y, feature_names)``."""
    d = _sklearn("load_iris")
    return d.data.astype(float), d.target.astype(int), list(d.feature_names)


def load_digits() -> tuple[np.ndarray, np.ndarray]:
    """scikit-learn's copy of the UCI optical digits (test set): 1797 images of 8x8 pixels,
    grey levels 0..16, labels 0..9. Returns ``(X (1797, 64), y)``."""
    d = _sklearn("load_digits")
    return d.data.astype(float), d.target.astype(int)


def load_digits_split(test_size: int = 297) -> dict[str, np.ndarray]:
    """The digits split once into a training and a fixed held-out test set: a permutation by
    numpy's generator seeded 0 (the same on every machine and numpy release), the last
    ``test_size`` images held out (297 of 1797 by default, leaving 1500 for training).

    Pixels are scaled to [0, 1] (grey level / 16). Returns ``x_train (1500, 64)``, ``y_train``,
    ``x_test (297, 64)``, ``y_test`` (labels 0..9)."""
    X, y = load_digits()
    if not 0 < test_size < len(X):
        raise ValueError(f"test_size must be in 1..{len(X) - 1}, got {test_size}")
    order = np.random.default_rng(0).permutation(len(X))
    X, y = X[order] / 16.0, y[order]
    cut = len(X) - test_size
    return {"x_train": X[:cut], "y_train": y[:cut], "x_test": X[cut:], "y_test": y[cut:]}


def load_nile() -> tuple[np.ndarray, np.ndarray]:
    """Annual flow of the Nile at Aswan, 1871-1970 (10^8 m^3), the data set that statsmodels
    bundles (``statsmodels.datasets.nile``; Durbin & Koopman's local-level example).
    Returns ``(years, flow)``. statsmodels is imported on first use."""
    from statsmodels.datasets import nile

    df = nile.load_pandas().data
    return df["year"].to_numpy(dtype=int), df["volume"].to_numpy(dtype=float)


__all__ = [
    "load_breast_cancer",
    "load_diabetes",
    "load_digits",
    "load_digits_split",
    "load_faithful",
    "load_german_credit_numeric",
    "load_iris",
    "load_nile",
    "load_radon_minnesota",
    "standardise",
]
