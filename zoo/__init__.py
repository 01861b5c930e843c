"""pyro-zoo: every model of the seed documents as a Pyro model/guide pair, run through shared
inference engines and compared against the ground truth.

>>> import zoo
>>> zoo.list_models()[:2]
['bayesian_linear_regression', 'beta_bernoulli']
>>> run = zoo.run("beta_bernoulli", "exact")
>>> zoo.config()  # how the zoo computes; zoo.configure(auto_compile=False) changes it
Config(auto_compile=True, uncompiled='torchscript', code_version=None)

The public names load on first use (PEP 562), so that ``zoo --help`` answers without importing
torch and an early Ctrl-C on the command line is clean.
"""

from __future__ import annotations

import importlib
from importlib.metadata import PackageNotFoundError, version
from typing import TYPE_CHECKING, Any

try:
    __version__ = version("pyro-zoo")
except PackageNotFoundError:  # running from a source tree that is not installed
    __version__ = "0+unknown"

_PUBLIC = {
    "Comparison": "zoo_inference",
    "Draws": "zoo_inference",
    "EngineContext": "zoo_inference",
    "Estimate": "zoo_inference",
    "Evidence": "zoo_inference",
    "Factors": "zoo_inference",
    "GroundTruth": "zoo_inference",
    "Run": "zoo_inference",
    "Samples": "zoo_inference",
    "ZooError": "zoo_inference",
    "gauss_legendre": "zoo_inference",
    "grid_posterior": "zoo_inference",
    "in_float64": "zoo_inference",
    "network": "zoo_inference",
    "pointwise_log_weights": "zoo_inference",
    "register_engine": "zoo_inference",
    "register_sampler": "zoo_inference",
    "unregister_engine": "zoo_inference",
    "Config": "zoo_inference.config",
    "config": "zoo_inference.config",
    "configure": "zoo_inference.config",
    "compare": "zoo.api",
    "run": "zoo.api",
    "Known": "zoo.registry",
    "ModelEntry": "zoo.registry",
    "get_model": "zoo.registry",
    "isolated": "zoo.registry",
    "list_models": "zoo.registry",
    "load_models": "zoo.registry",
    "register": "zoo.registry",
    "unregister": "zoo.registry",
    "report": "zoo.sweep",
    "sbc": "zoo.calibrate",
    "Leaderboard": "zoo.leaderboard",
    "benchmark": "zoo.leaderboard",
    "ModelTags": "zoo.tags",
    "model_tags": "zoo.api",
}

__all__ = [
    "Comparison",
    "Config",
    "Draws",
    "EngineContext",
    "Estimate",
    "Evidence",
    "Factors",
    "GroundTruth",
    "Known",
    "Leaderboard",
    "ModelEntry",
    "ModelTags",
    "Run",
    "Samples",
    "ZooError",
    "benchmark",
    "compare",
    "config",
    "configure",
    "gauss_legendre",
    "get_model",
    "grid_posterior",
    "in_float64",
    "isolated",
    "list_models",
    "load_models",
    "model_tags",
    "network",
    "pointwise_log_weights",
    "register",
    "register_engine",
    "register_sampler",
    "report",
    "run",
    "sbc",
    "unregister",
    "unregister_engine",
]

if TYPE_CHECKING:
    from zoo.api import compare, model_tags, run
    from zoo.calibrate import sbc
    from zoo.leaderboard import Leaderboard, benchmark
    from zoo.registry import (
        Known,
        ModelEntry,
        get_model,
        isolated,
        list_models,
        load_models,
        register,
        unregister,
    )
    from zoo.sweep import report
    from zoo.tags import ModelTags
    from zoo_inference import (
        Comparison,
        Draws,
        EngineContext,
        Estimate,
        Evidence,
        Factors,
        GroundTruth,
        Run,
        Samples,
        ZooError,
        gauss_legendre,
        grid_posterior,
        in_float64,
        network,
        pointwise_log_weights,
        register_engine,
        register_sampler,
        unregister_engine,
    )
    from zoo_inference.config import Config, config, configure


def __getattr__(name: str) -> Any:
    if name in _PUBLIC:
        value = getattr(importlib.import_module(_PUBLIC[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'zoo' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_PUBLIC))
