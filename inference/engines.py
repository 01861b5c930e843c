"""The engine table: which engines exist, which options they take, and when they apply.

Every engine, generic or model-specific, is called the same way: ``fn(ctx, **options) -> Run``
with ``ctx`` an :class:`EngineContext`. A model's reference algorithm (a function of the model's
keyword arguments plus keyword-only options, returning plain data) is wrapped into that form by
:func:`reference_spec`; a closed-form posterior becomes the ``exact`` engine by :func:`exact_spec`.
Options are read off the function's keyword-only arguments and checked before any work starts.
"""

from __future__ import annotations

import dataclasses
import difflib
import inspect
import numbers
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .context import EngineContext
from .enumeration import enum_engine
from .importance import PROPOSALS, importance_engine
from .mcmc import hmc_engine, mh_engine, nuts_engine
from .outputs import Factors
from .reference import call_reference, in_float64, options_of, to_run
from .results import Run, ZooError
from .structure import ModelStructure
from .svi import ELBOS, GUIDES, svi_engine

POSITIVE_INTS = {
    "num_steps",
    "num_samples",
    "num_chains",
    "num_particles",
    "max_iter",
    "map_steps",
    "max_tree_depth",
    "max_steps",
    "fit_steps",
}
NONNEGATIVE_INTS = {"warmup"}
POSITIVE_FLOATS = {"lr", "tol", "trajectory_length", "target_accept"}
CHOICES: dict[str, tuple[Any, ...]] = {"guide": GUIDES, "elbo": ELBOS, "proposal": PROPOSALS}


@dataclass(frozen=True)
class EngineSpec:
    """An engine: ``fn(ctx, **options) -> Run``, its options with defaults, one line of help."""

    name: str
    fn: Callable[..., Run]
    summary: str
    defaults: Mapping[str, Any] = field(default_factory=dict)
    generic: bool = True

    def not_applicable(self, structure: ModelStructure, has_guide: bool) -> str | None:
        """None if the engine applies to a model of this structure, else the reason."""
        if not self.generic:
            return None
        s = structure
        if not s.latent:
            return "the model has no latent sites"
        if s.nonenumerable and not (self.name == "svi" and has_guide):
            return f"discrete sites {list(s.nonenumerable)} have infinite support"
        if self.name in ("nuts", "hmc", "mh") and not s.continuous:
            return "the model has no continuous latent sites (use enum)"
        if self.name == "svi" and not s.continuous and not has_guide:
            return "the model has no continuous latent sites for an autoguide, nor a guide"
        if self.name == "enum" and not s.discrete:
            return "the model has no discrete latent sites"
        return None


def _generic(name: str, fn: Callable[..., Run], summary: str) -> EngineSpec:
    params = inspect.signature(fn).parameters.values()
    defaults = {p.name: p.default for p in params if p.kind == p.KEYWORD_ONLY}
    return EngineSpec(name, fn, summary, defaults)


GENERIC_ENGINES: dict[str, EngineSpec] = {
    "svi": _generic("svi", svi_engine, "stochastic variational inference"),
    "nuts": _generic("nuts", nuts_engine, "No-U-Turn sampler, discrete sites enumerated"),
    "hmc": _generic("hmc", hmc_engine, "Hamiltonian Monte Carlo, discrete sites enumerated"),
    "mh": _generic("mh", mh_engine, "random-walk Metropolis–Hastings, adaptive proposal"),
    "importance": _generic(
        "importance", importance_engine, "self-normalised importance sampling, evidence estimate"
    ),
    "enum": _generic("enum", enum_engine, "exact enumeration of discrete sites"),
}


def reference_spec(name: str, fn: Callable[..., Any]) -> EngineSpec:
    """A model's reference algorithm as an engine (its Run built by :func:`to_run`)."""

    def run(ctx: EngineContext, **options: Any) -> Run:
        return to_run(name, call_reference(fn, ctx, options), ctx)

    doc = (inspect.getdoc(fn) or name).splitlines()[0]
    return EngineSpec(name, run, doc, options_of(fn), generic=False)


def variant_spec(
    name: str,
    base: EngineSpec,
    fixed: Mapping[str, Any],
    data: Mapping[str, Any] | None = None,
) -> EngineSpec:
    """A generic engine with some options fixed, as an engine of its own (``svi_fullrank``).

    ``data`` fixes model arguments too (``{"likelihood": "gaussian"}``): the variant then runs a
    different model, and its Run says so in ``extras["model_data"]`` (a report never takes it as
    the reference for the model's own posterior)."""
    data = dict(data or {})

    def run(ctx: EngineContext, **options: Any) -> Run:
        if data:
            ctx = dataclasses.replace(ctx, data={**ctx.data, **data})
        result = base.fn(ctx, **{**fixed, **options})
        if data:
            result.extras["model_data"] = dict(data)
        return result

    shown = ", ".join(f"{k}={v!r}" for k, v in {**fixed, **data}.items())
    defaults = {k: v for k, v in base.defaults.items() if k not in fixed}
    return EngineSpec(name, run, f"{base.name} with {shown}: {base.summary}", defaults, False)


def exact_spec(posterior: Callable[..., Any]) -> EngineSpec:
    """The ``exact`` engine of a closed-form posterior ``fn(**data) -> ({site: dist}, log_z)``:
    exact moments and evidence, ``num_samples`` exact draws of each site."""

    def run(ctx: EngineContext, *, num_samples: int = 4000) -> Run:
        dists, log_z = in_float64(posterior, ctx.data)
        return to_run("exact", Factors(dists, log_evidence=log_z), ctx, num_samples=num_samples)

    return EngineSpec(
        "exact", run, "closed-form posterior and exact evidence", {"num_samples": 4000}, False
    )


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
        _like_default(key, value, defaults[key])
    return {**defaults, **options}


def _is_number(x: Any) -> bool:
    return isinstance(x, numbers.Real) and not isinstance(x, bool)


def _like_default(key: str, value: Any, default: Any) -> None:
    """An option of the same kind as its default: a number for a number, a flag for a flag, a
    sequence of as many numbers for a sequence of numbers (``None`` defaults take anything)."""
    if default is None or value is None and not isinstance(default, bool):
        return
    if isinstance(default, bool):
        if not isinstance(value, bool):
            raise ZooError(f"option {key!r} must be True or False, got {value!r}")
    elif _is_number(default):
        if not _is_number(value) or not np.isfinite(float(value)):
            raise ZooError(f"option {key!r} must be a finite number, got {value!r}")
    elif isinstance(default, str):
        if not isinstance(value, str):
            raise ZooError(f"option {key!r} must be a string, got {value!r}")
    elif isinstance(default, tuple | list) and all(_is_number(v) for v in default):
        ok = isinstance(value, Sequence) and not isinstance(value, str)
        if not ok or len(value) != len(default) or not all(_is_number(v) for v in value):
            raise ZooError(
                f"option {key!r} must be {len(default)} numbers like {tuple(default)}, "
                f"got {value!r}"
            )
