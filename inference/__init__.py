"""Shared inference engines. They know nothing about particular models: each takes a model, its
data and options, and returns a :class:`Run`."""

from .arviz_io import make_run, moment_rows, point_run
from .context import EngineContext
from .engines import GENERIC_ENGINES, EngineSpec, check_options, reference_spec
from .results import GroundTruth, NumericalFailure, Run, ZooError
from .structure import ModelStructure, inspect_model

__all__ = [
    "GENERIC_ENGINES",
    "EngineContext",
    "EngineSpec",
    "GroundTruth",
    "ModelStructure",
    "NumericalFailure",
    "Run",
    "ZooError",
    "check_options",
    "inspect_model",
    "make_run",
    "moment_rows",
    "point_run",
    "reference_spec",
]
