"""pyro-zoo: every model of the seed documents as a Pyro model/guide pair, run through shared
inference engines and compared against the ground truth.

>>> import zoo
>>> zoo.list_models()[:2]
['beta_bernoulli', 'gaussian_mixture']
>>> run = zoo.run("beta_bernoulli", "exact")
"""

from inference import (
    Comparison,
    Draws,
    Estimate,
    Evidence,
    Factors,
    GroundTruth,
    Run,
    ZooError,
)

from .api import compare, run
from .registry import ModelEntry, get_model, isolated, list_models, register, unregister
from .sweep import report

__all__ = [
    "Comparison",
    "Draws",
    "Estimate",
    "Evidence",
    "Factors",
    "GroundTruth",
    "ModelEntry",
    "Run",
    "ZooError",
    "compare",
    "get_model",
    "isolated",
    "list_models",
    "register",
    "report",
    "run",
    "unregister",
]
