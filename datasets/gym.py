"""The Inference Gym's bundled data and published ground truth, read offline from the
``inference_gym`` wheel (Apache-2.0; TensorFlow Probability's spinoff, Google).

The wheel ships its small data sets and every target's ground truth as plain NumPy modules
(``inference_gym.internal.datasets``, ``inference_gym.targets.ground_truth``); importing them
needs neither TensorFlow nor JAX. Each loader below repeats the Gym's own preprocessing
(``inference_gym.internal.data``) so that the Gym's ground truth applies unchanged. German
credit's data, which the wheel lacks, come from the CSV vendored beside this module.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from types import ModuleType

import numpy as np

IRT_SHUFFLE_SEED = 1337  # inference_gym.internal.data.synthetic_item_response_theory's default


@cache
def _truth_modules() -> dict[str, ModuleType]:
    """The ground-truth modules of the targets the zoo writes, by the Gym's target name."""
    from inference_gym.targets.ground_truth import (
        brownian_motion_missing_middle_observations,
        brownian_motion_unknown_scales_missing_middle_observations,
        convection_lorenz_bridge,
        convection_lorenz_bridge_unknown_scales,
        eight_schools,
        german_credit_numeric_logistic_regression,
        german_credit_numeric_probit_regression,
        german_credit_numeric_sparse_logistic_regression,
        radon_contextual_effects_minnesota,
        radon_contextual_effects_minnesota_halfnormal,
        stochastic_volatility_log_sp500,
        stochastic_volatility_log_sp500_small,
        stochastic_volatility_sp500,
        stochastic_volatility_sp500_small,
        synthetic_item_response_theory,
        synthetic_log_gaussian_cox_process,
    )

    mods = (
        brownian_motion_missing_middle_observations,
        brownian_motion_unknown_scales_missing_middle_observations,
        convection_lorenz_bridge,
        convection_lorenz_bridge_unknown_scales,
        eight_schools,
        german_credit_numeric_logistic_regression,
        german_credit_numeric_probit_regression,
        german_credit_numeric_sparse_logistic_regression,
        radon_contextual_effects_minnesota,
        radon_contextual_effects_minnesota_halfnormal,
        stochastic_volatility_log_sp500,
        stochastic_volatility_log_sp500_small,
        stochastic_volatility_sp500,
        stochastic_volatility_sp500_small,
        synthetic_item_response_theory,
        synthetic_log_gaussian_cox_process,
    )
    return {m.__name__.rsplit(".", 1)[-1]: m for m in mods}


def brownian_motion_observations() -> np.ndarray:
    """The 30 observed locations of the Gym's Brownian motion with missing middle
    observations (steps 10-19 unobserved: NaN)."""
    from inference_gym.internal.datasets import brownian_motion_missing_middle_observations as m

    return np.asarray(m.OBSERVED_LOC, dtype=float)


def brownian_motion_scales() -> tuple[float, float]:
    """The innovation and observation noise scales (0.1, 0.15) that simulated the Gym's
    Brownian motion: the known scales of its ``BrownianMotionMissingMiddleObservations``."""
    from inference_gym.internal.datasets import brownian_motion_missing_middle_observations as m

    return float(m.INNOVATION_NOISE), float(m.OBSERVATION_NOISE)


@dataclass(frozen=True)
class LorenzBridge:
    """The Gym's convection Lorenz bridge data: a stochastic Lorenz-63 system (Euler-Maruyama,
    ``step_size``) whose first coordinate, the convection, is observed at each of 30 steps but
    the middle ten (NaN), with the scales that simulated it."""

    observed_values: np.ndarray
    innovation_scale: float
    observation_scale: float
    step_size: float


def convection_lorenz_bridge() -> LorenzBridge:
    """The Gym's ``convection_lorenz_bridge`` data (its float32 values, in float64):
    ``inference_gym.internal.data.convection_lorenz_bridge``. Only the convection is observed
    (``OBSERVATION_INDEX`` 0), and the observation mask is where the values are not NaN."""
    from inference_gym.internal.datasets import convection_lorenz_bridge as m

    if m.OBSERVATION_INDEX != 0 or not np.array_equal(
        m.OBSERVATION_MASK, ~np.isnan(m.OBSERVED_VALUES)
    ):
        raise ValueError("the Gym's Lorenz bridge data no longer observe the convection alone")
    return LorenzBridge(
        np.asarray(m.OBSERVED_VALUES, dtype=float),
        float(m.INNOVATION_SCALE),
        float(m.OBSERVATION_SCALE),
        float(m.STEP_SIZE),
    )


def sp500_returns(num_points: int | None = None, log: bool = False) -> np.ndarray:
    """S&P 500 daily returns (closing price minus the previous one, 2516 days; with ``log``
    the log returns, the differences of the log prices), the last ``num_points`` of them
    centred on their own mean: ``inference_gym.internal.data.sp500_returns`` and
    ``sp500_log_returns``."""
    from inference_gym.internal.datasets import sp500_closing_prices as m

    prices = np.asarray(m.CLOSING_PRICES, dtype=float)
    returns = np.diff(np.log(prices) if log else prices)
    tail = returns[-(num_points or len(returns)) :]
    return tail - tail.mean()


@cache
def item_response_theory() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The Gym's synthetic 1PL item-response data (400 students, 100 questions, 30012
    answers), shuffled as the Gym shuffles it: ``(student_ids, question_ids, correct)``."""
    from inference_gym.internal.datasets import synthetic_item_response_theory as m

    order = np.arange(m.STUDENT_IDS.shape[0])
    np.random.RandomState(IRT_SHUFFLE_SEED).shuffle(order)
    return (
        np.asarray(m.STUDENT_IDS, dtype=np.int64)[order],
        np.asarray(m.QUESTION_IDS, dtype=np.int64)[order],
        np.asarray(m.CORRECT, dtype=np.int64)[order],
    )


LGCP_SHUFFLE_SEED = 1337  # inference_gym.internal.data.synthetic_log_gaussian_cox_process's


@cache
def log_gaussian_cox_process() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The Gym's synthetic log-Gaussian Cox process data: counts on a 10 x 10 grid of unit
    spacing (extents 1), shuffled as the Gym shuffles them: ``(locations (100, 2), extents
    (100,), counts (100,))``."""
    from inference_gym.internal.datasets import synthetic_log_gaussian_cox_process as m

    order = np.arange(m.LOCATIONS.shape[0])
    np.random.RandomState(LGCP_SHUFFLE_SEED).shuffle(order)
    out = (
        np.asarray(m.LOCATIONS, dtype=float)[order],
        np.asarray(m.EXTENTS, dtype=float)[order],
        np.asarray(m.COUNTS, dtype=float)[order],
    )
    for a in out:  # cached: every caller shares these arrays
        a.setflags(write=False)
    return out


@cache
def german_credit_numeric() -> tuple[np.ndarray, np.ndarray]:
    """UCI's numeric German credit data as the Gym's ``german_credit_numeric`` gives it to its
    logistic regression (all 1000 rows for training, none held out): the 24 attributes
    standardised by column (mean 0, population sd: ``np.std``'s ddof 0) and the labels 0 (good)
    and 1 (bad), the file's 1 and 2 less one. Read from the vendored CSV (the Gym reads the same
    file through TensorFlow Datasets, which downloads). Returns ``(features, labels)``."""
    from zoo_datasets import load_german_credit_numeric

    df = load_german_credit_numeric()
    x = df.drop(columns="label").to_numpy(dtype=float)
    x = (x - x.mean(0, keepdims=True)) / x.std(0, keepdims=True)
    y = df["label"].to_numpy(dtype=np.int64) - 1
    for a in (x, y):  # cached: every caller shares these arrays
        a.setflags(write=False)
    return x, y


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
    modules = _truth_modules()
    if target not in modules:
        raise KeyError(f"no ground truth read for Gym target {target!r}; known: {sorted(modules)}")
    m = modules[target]
    stem = "IDENTITY_" + (f"{parameter.upper()}_" if parameter else "")
    try:
        return GymTruth(
            np.asarray(getattr(m, stem + "MEAN"), dtype=float),
            np.asarray(getattr(m, stem + "STANDARD_DEVIATION"), dtype=float),
            np.asarray(getattr(m, stem + "MEAN_STANDARD_ERROR"), dtype=float),
        )
    except AttributeError as e:
        raise KeyError(f"the Gym publishes no ground truth {stem}* for {target}") from e
