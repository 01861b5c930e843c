"""The Inference Gym's bundled data and published ground truth, read offline from the
``inference_gym`` wheel (Apache-2.0; TensorFlow Probability's spinoff, Google).

The wheel ships its small data sets and every target's ground truth as plain NumPy modules
(``inference_gym.internal.datasets``, ``inference_gym.targets.ground_truth``); importing them
needs neither TensorFlow nor JAX. Each loader below repeats the Gym's own preprocessing
(``inference_gym.internal.data``) so that the Gym's ground truth applies unchanged.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from functools import cache

import numpy as np

IRT_SHUFFLE_SEED = 1337  # inference_gym.internal.data.synthetic_item_response_theory's default


def _module(path: str):  # noqa: ANN202 - a plain module of NumPy arrays
    try:
        return importlib.import_module(path)
    except ImportError as e:  # pragma: no cover - a core dependency
        raise ImportError(
            f"the Inference Gym's targets read their data and ground truth from the "
            f"`inference_gym` package ({path} is missing): pip install inference_gym"
        ) from e


def brownian_motion_observations() -> np.ndarray:
    """The 30 observed locations of the Gym's Brownian motion with missing middle
    observations (steps 10-19 unobserved: NaN)."""
    m = _module("inference_gym.internal.datasets.brownian_motion_missing_middle_observations")
    return np.asarray(m.OBSERVED_LOC, dtype=float)


def sp500_returns(num_points: int | None = None) -> np.ndarray:
    """S&P 500 daily returns (closing price minus the previous one, 2516 days), the last
    ``num_points`` of them centred on their own mean: ``inference_gym.internal.data
    .sp500_returns``."""
    m = _module("inference_gym.internal.datasets.sp500_closing_prices")
    returns = np.diff(np.asarray(m.CLOSING_PRICES, dtype=float))
    tail = returns[-(num_points or len(returns)) :]
    return tail - tail.mean()


@cache
def item_response_theory() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The Gym's synthetic 1PL item-response data (400 students, 100 questions, 30012
    answers), shuffled as the Gym shuffles it: ``(student_ids, question_ids, correct)``."""
    m = _module("inference_gym.internal.datasets.synthetic_item_response_theory")
    order = np.arange(m.STUDENT_IDS.shape[0])
    np.random.RandomState(IRT_SHUFFLE_SEED).shuffle(order)
    return (
        np.asarray(m.STUDENT_IDS, dtype=np.int64)[order],
        np.asarray(m.QUESTION_IDS, dtype=np.int64)[order],
        np.asarray(m.CORRECT, dtype=np.int64)[order],
    )


@dataclass(frozen=True)
class GymTruth:
    """One parameter's published posterior summary: mean, sd and the mean's standard error
    (the Monte-Carlo error of the Gym's own long reference runs)."""

    mean: np.ndarray
    sd: np.ndarray
    mean_se: np.ndarray


def ground_truth(target: str, parameter: str = "") -> GymTruth:
    """The ground truth the Gym publishes for ``target`` (a module of
    ``inference_gym.targets.ground_truth``), of its ``identity`` transformation's
    ``parameter`` (``""``: a target with one unnamed parameter vector)."""
    m = _module(f"inference_gym.targets.ground_truth.{target}")
    stem = "IDENTITY_" + (f"{parameter.upper()}_" if parameter else "")
    try:
        return GymTruth(
            np.asarray(getattr(m, stem + "MEAN"), dtype=float),
            np.asarray(getattr(m, stem + "STANDARD_DEVIATION"), dtype=float),
            np.asarray(getattr(m, stem + "MEAN_STANDARD_ERROR"), dtype=float),
        )
    except AttributeError as e:
        raise KeyError(f"the Gym publishes no ground truth {stem}* for {target}") from e
