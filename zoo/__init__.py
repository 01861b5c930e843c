"""pyro-zoo: every model of the seed documents as a Pyro model/guide pair, run through shared
inference engines and compared against the ground truth.

>>> import zoo
>>> zoo.list_models()[:2]
['beta_bernoulli', 'gaussian_mixture']
>>> run = zoo.run("beta_bernoulli", "exact")
"""

from inference import GroundTruth, Run, ZooError

from .api import Comparison, compare, report, run
from .registry import ModelEntry, get_model, list_models, register, unregister

__all__ = [
    "Comparison",
    "GroundTruth",
    "ModelEntry",
    "Run",
    "ZooError",
    "compare",
    "get_model",
    "list_models",
    "register",
    "report",
    "run",
    "unregister",
]
