"""Shared inference engines. They know nothing about particular models: each takes a model, its
data and options, and returns a :class:`Run`."""

from .amortised import network, pointwise_log_weights
from .context import EngineContext
from .engines import (
    GENERIC_ENGINES,
    EngineSpec,
    check_options,
    exact_spec,
    reference_spec,
    register_engine,
    register_sampler,
    unregister_engine,
    variant_spec,
)
from .outputs import Draws, Estimate, Factors
from .quadrature import Grid, gauss_legendre, grid_posterior
from .reference import in_float64, truth_from_distributions
from .replay import VectorisationWarning
from .results import (
    Comparison,
    Evidence,
    GroundTruth,
    ModelInfo,
    NumericalFailure,
    Run,
    ZooError,
)
from .samplers import Samples
from .structure import ModelStructure, inspect_model

__all__ = [
    "GENERIC_ENGINES",
    "Comparison",
    "Draws",
    "EngineContext",
    "EngineSpec",
    "Estimate",
    "Evidence",
    "Factors",
    "GroundTruth",
    "ModelInfo",
    "ModelStructure",
    "NumericalFailure",
    "Run",
    "Samples",
    "VectorisationWarning",
    "ZooError",
    "in_float64",
    "check_options",
    "exact_spec",
    "gauss_legendre",
    "grid_posterior",
    "Grid",
    "inspect_model",
    "network",
    "pointwise_log_weights",
    "reference_spec",
    "register_engine",
    "register_sampler",
    "truth_from_distributions",
    "unregister_engine",
    "variant_spec",
]
