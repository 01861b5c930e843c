"""The engine table: which generic engines exist, which options they take, and when they apply.

A generic engine is ``fn(ctx: EngineContext, **options) -> Run``; a model-specific reference
engine (``exact``, ``em``, ...) is ``fn(data, *, seed, progress, **options) -> Run``. Options of
both are read off the function's keyword arguments, and are checked here before any work starts.
"""

from __future__ import annotations

import difflib
import inspect
import numbers
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from .enumeration import enum_engine
from .mcmc import hmc_engine, nuts_engine
from .results import ZooError
from .structure import ModelStructure
from .svi import ELBOS, GUIDES, svi_engine

# Options every engine takes (handled by the runner, not passed to generic engines' kwargs).
COMMON_OPTIONS = ("seed", "progress")
POSITIVE_INTS = {
    "num_steps",
    "num_samples",
    "num_chains",
    "num_particles",
    "max_iter",
    "map_steps",
    "max_tree_depth",
    "max_steps",
}
NONNEGATIVE_INTS = {"warmup"}
POSITIVE_FLOATS = {"lr", "tol", "trajectory_length", "target_accept"}
CHOICES: dict[str, tuple[Any, ...]] = {"guide": GUIDES, "elbo": ELBOS}


@dataclass(frozen=True)
class EngineSpec:
    name: str
    fn: Callable[..., Any]
    summary: str
    generic: bool = True

    @property
    def defaults(self) -> dict[str, Any]:
        """Engine options and their defaults, read off the function signature."""
        params = inspect.signature(self.fn).parameters.values()
        return {
            p.name: p.default
            for p in params
            if p.kind == p.KEYWORD_ONLY and p.name not in COMMON_OPTIONS
        }

    def not_applicable(self, structure: ModelStructure, has_guide: bool) -> str | None:
        """None if the engine applies to a model of this structure, else the reason."""
        if not self.generic:
            return None
        s = structure
        if not s.latent:
            return "the model has no latent sites"
        if s.nonenumerable and not (self.name == "svi" and has_guide):
            return f"discrete sites {list(s.nonenumerable)} have infinite support"
        if self.name in ("nuts", "hmc") and not s.continuous:
            return "the model has no continuous latent sites (use enum)"
        if self.name == "enum" and not s.discrete:
            return "the model has no discrete latent sites"
        return None


GENERIC_ENGINES: dict[str, EngineSpec] = {
    "svi": EngineSpec("svi", svi_engine, "stochastic variational inference"),
    "nuts": EngineSpec("nuts", nuts_engine, "No-U-Turn sampler, discrete sites enumerated"),
    "hmc": EngineSpec("hmc", hmc_engine, "Hamiltonian Monte Carlo, discrete sites enumerated"),
    "enum": EngineSpec("enum", enum_engine, "exact enumeration of discrete sites"),
}


def reference_spec(name: str, fn: Callable[..., Any]) -> EngineSpec:
    doc = (inspect.getdoc(fn) or name).splitlines()[0]
    return EngineSpec(name, fn, doc, generic=False)


def check_options(spec: EngineSpec, options: Mapping[str, Any]) -> dict[str, Any]:
    """Validate engine options: unknown names, non-positive counts, bad choices."""
    defaults = spec.defaults
    for key, value in options.items():
        if key not in defaults:
            close = difflib.get_close_matches(key, list(defaults), n=3)
            hint = f"; did you mean {' or '.join(map(repr, close))}?" if close else ""
            valid = ", ".join(sorted(defaults)) or "none"
            raise ZooError(
                f"unknown option {key!r} for engine {spec.name!r}{hint} (valid options: {valid})"
            )
        if key in POSITIVE_INTS | NONNEGATIVE_INTS:
            low = 1 if key in POSITIVE_INTS else 0
            if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < low:
                kind = "a positive integer" if low else "a non-negative integer"
                raise ZooError(f"option {key!r} must be {kind}, got {value!r}")
        if key in POSITIVE_FLOATS and (
            isinstance(value, bool) or not isinstance(value, numbers.Real) or not value > 0
        ):
            raise ZooError(f"option {key!r} must be a positive number, got {value!r}")
        if key in CHOICES and value is not None and value not in CHOICES[key]:
            raise ZooError(f"option {key!r} must be one of {list(CHOICES[key])}, got {value!r}")
    return {**defaults, **options}
