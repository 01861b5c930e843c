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
from pathlib import Path
from typing import Any

import numpy as np
import torch

from . import samplers
from .algorithms.em import E_STEPS, M_STEPS
from .context import EngineContext
from .enumeration import enum_engine
from .exact_draws import ENVELOPES, LOW_DIMENSION, inverse_cdf_engine, rejection_engine
from .importance import PROPOSALS, importance_engine
from .laplace import laplace_engine
from .mcmc import CHEES_GROUP, LOCKSTEP_CHAINS, SUPERCHAIN, grouped_run, pyro_nuts_engine
from .outputs import Draws, Estimate, Factors, check_values
from .pathfinder import pathfinder_engine
from .peers.numpyro import numpyro_sampler
from .peers.nutpie import nutpie_sampler
from .peers.stan import stan_engine
from .reference import call_reference, in_float64, options_of, to_run
from .results import Run, ZooError
from .runtime import device_of
from .samplers import MAMS_TUNINGS, Samples
from .samplers.driver import target_sizes
from .samplers.metric import METRICS, check_metric
from .samplers.trajectory import CRITERIA
from .structure import ModelStructure, inspect_model
from .svi import ELBOS, GUIDES, svi_engine

POSITIVE_INTS = {
    "num_paths",
    "history",
    "elbo_draws",
    "draws_per_path",
    "num_steps",
    "num_samples",
    "num_chains",
    "num_particles",
    "max_iter",
    "map_steps",
    "max_tree_depth",
    "max_steps",
    "fit_steps",
    "starts",
    "subsample_size",
    "chain_groups",
    "max_draws",
    "noise_ratio",
    "e_draws",
    "gradient_steps",
    "imputations",
    "max_proposals",
}
NONNEGATIVE_INTS = {"warmup"}
POSITIVE_FLOATS = {"lr", "tol", "trajectory_length", "target_accept", "ess", "noise_scale"}
PROBABILITIES = {"target_accept"}  # strictly between 0 and 1
CHOICES: dict[str, tuple[Any, ...]] = {
    "guide": GUIDES,
    "elbo": ELBOS,
    "proposal": PROPOSALS,
    "backend": ("zoo", "pyro"),
    "m_step": M_STEPS,
    "e_step": E_STEPS,
    "envelope": ENVELOPES,
    "metric": METRICS,
    "criterion": CRITERIA,
    "tuning": tuple(MAMS_TUNINGS),
}
FLAGS_OR_AUTO = {"jit", "dense_mass"}  # True, False or None (decide by the work)


# What a model must have for a generic engine to apply to it.
NEEDS = (
    "latent",
    "continuous",
    "all continuous",
    "continuous or guide",
    "discrete",
    "few continuous",  # at most LOW_DIMENSION continuous latent elements (discrete summed out)
    "one continuous",  # exactly one continuous latent element
)
# The work an engine does at each level: ``smoke``, ``quick`` and ``full`` are the report
# profiles (zoo/profiles.py); ``check`` is the conformance suite's size (tests).
BUDGETS = ("smoke", "check", "quick", "full")


@dataclass(frozen=True)
class EngineSpec:
    """An engine: ``fn(ctx, **options) -> Run``, its options with defaults, one line of help,
    what a model needs for it (generic engines) and its budget at each level of :data:`BUDGETS`."""

    name: str
    fn: Callable[..., Run]
    summary: str
    defaults: Mapping[str, Any] = field(default_factory=dict)
    generic: bool = True
    needs: str = "latent"
    budgets: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    # runs only where a call names it: not among a model's engines (compare, reports, sweeps)
    opt_in: bool = False
    sampler: Callable[..., Samples] | None = None  # a sampler engine's sampler (register_sampler)
    goes_on: bool = False  # a sampler that can go on from its last draw: runs to ess= targets
    origin: str | None = None  # where a user's engine is defined (:func:`origin`); None: built in
    # why its error against a truth is an approximation's bias that no number of draws shrinks
    # ("": Monte-Carlo error only); the conformance harness checks such draws for shape only
    biased: str = ""

    def not_applicable(self, structure: ModelStructure, has_guide: bool) -> str | None:
        """None if the engine applies to a model of this structure, else the reason."""
        if not self.generic:
            return None
        s = structure
        if not s.latent:
            return "the model has no latent sites"
        if s.nonenumerable and not (self.needs == "continuous or guide" and has_guide):
            return f"discrete sites {list(s.nonenumerable)} have infinite support"
        if self.needs in ("continuous", "all continuous") and not s.continuous:
            return "the model has no continuous latent sites (use enum)"
        if self.needs == "all continuous" and s.discrete:
            return f"discrete latent sites {list(s.discrete)}: it needs every site continuous"
        if self.needs == "continuous or guide" and not s.continuous and not has_guide:
            return "the model has no continuous latent sites for an autoguide, nor a guide"
        if self.needs == "discrete" and not s.discrete:
            return "the model has no discrete latent sites"
        if self.needs in ("few continuous", "one continuous"):
            size = sum(int(np.prod(s.shapes[k])) for k in s.continuous)
            limit = 1 if self.needs == "one continuous" else LOW_DIMENSION
            if not 0 < size <= limit:
                return (
                    f"the model has {size} continuous latent elements; it needs "
                    f"{'exactly one' if limit == 1 else f'between 1 and {limit}'}"
                )
        return None


def declare(
    name: str,
    fn: Callable[..., Run],
    summary: str,
    *,
    needs: str,
    budgets: Mapping[str, Mapping[str, Any]],
    generic: bool = True,
    defaults: Mapping[str, Any] | None = None,
    opt_in: bool = False,
    biased: str = "",
) -> EngineSpec:
    """The one declaration of an engine: its options are ``fn``'s keyword-only parameters
    (with their defaults) unless ``defaults`` names them; ``budgets`` may only set options it
    has. ``opt_in``: the engine runs only where a call names it; ``biased``: why its error
    against the truth is an approximation's (see :class:`EngineSpec`)."""
    if defaults is None:
        params = inspect.signature(fn).parameters.values()
        defaults = {p.name: p.default for p in params if p.kind == p.KEYWORD_ONLY}
    if needs not in NEEDS:
        raise ValueError(f"engine {name!r}: needs must be one of {NEEDS}, got {needs!r}")
    for level, options in budgets.items():
        if level not in BUDGETS:
            raise ValueError(f"engine {name!r}: unknown budget {level!r} (levels: {BUDGETS})")
        unknown = set(options) - set(defaults)
        if unknown:
            raise ValueError(f"engine {name!r}: budget {level!r} sets unknown {sorted(unknown)}")
    budgets = {level: dict(options) for level, options in budgets.items()}
    return EngineSpec(
        name, fn, summary, dict(defaults), generic, needs, budgets, opt_in, biased=biased
    )


_SAMPLER = "continuous"
GENERIC_ENGINES: dict[str, EngineSpec] = {
    spec.name: spec
    for spec in (
        declare(
            "svi",
            svi_engine,
            "stochastic variational inference",
            needs="continuous or guide",
            budgets={
                "smoke": {"num_steps": 200, "num_samples": 200},
                "check": {"num_steps": 300, "num_samples": 300},
                "quick": {"num_steps": 1000, "num_samples": 500},
                "full": {"num_steps": 3000, "num_samples": 2000},
            },
        ),
        declare(
            "importance",
            importance_engine,
            "self-normalised importance sampling, evidence estimate",
            needs="latent",
            budgets={
                "smoke": {"num_samples": 1000, "fit_steps": 100},
                "check": {"num_samples": 5000, "fit_steps": 1000},
                "quick": {"num_samples": 5000, "fit_steps": 500},
                "full": {"num_samples": 20000, "fit_steps": 2000},
            },
        ),
        declare(
            "laplace",
            laplace_engine,
            "Laplace approximation on the unconstrained space, evidence estimate",
            needs="all continuous",
            # exact on a Gaussian posterior (tests/inference/test_laplace.py)
            biased="a Gaussian on the unconstrained space misses a skewed posterior's mean by "
            "a fixed amount",
            budgets={
                "smoke": {"num_samples": 1000, "starts": 2},
                "check": {"num_samples": 1000, "starts": 2},
                "quick": {"num_samples": 4000, "starts": 4},
                "full": {"num_samples": 10000, "starts": 8},
            },
        ),
        declare(
            "pathfinder",
            pathfinder_engine,
            "Pathfinder: multi-path quasi-Newton Gaussians, importance-resampled",
            needs=_SAMPLER,
            budgets={
                # max_iter: a density without a mode (the centred funnel) runs every path to it;
                # 4000 pooled draws at every level: k-hat from 400 is noise (beta_bernoulli,
                # seeds 0-5: 0.23-2.39 from 2 x 200 draws, 0.30-0.63 from 4 x 1000)
                "smoke": {
                    "num_paths": 4,
                    "num_samples": 200,
                    "draws_per_path": 1000,
                    "max_iter": 100,
                },
                "check": {
                    "num_paths": 4,
                    "num_samples": 1000,
                    "draws_per_path": 1000,
                    "max_iter": 200,
                },
                "quick": {
                    "num_paths": 4,
                    "num_samples": 1000,
                    "draws_per_path": 1000,
                    "max_iter": 300,
                },
                "full": {"num_paths": 8, "num_samples": 4000, "draws_per_path": 2000},
            },
        ),
        declare(
            "rejection",
            rejection_engine,
            "rejection sampling: exact draws of a posterior with a few continuous dimensions",
            needs="few continuous",
            budgets={
                "smoke": {"num_samples": 200},
                "check": {"num_samples": 1000},
                "quick": {"num_samples": 2000},
                "full": {"num_samples": 10000},
            },
        ),
        declare(
            "inverse_cdf",
            inverse_cdf_engine,
            "inverse-CDF sampling: exact draws of a one-dimensional posterior",
            needs="one continuous",
            budgets={
                "smoke": {"num_samples": 1000},
                "check": {"num_samples": 1000},
                "quick": {"num_samples": 4000},
                "full": {"num_samples": 10000},
            },
        ),
        declare(
            "enum",
            enum_engine,
            "exact enumeration of discrete sites",
            needs="discrete",
            budgets={
                "smoke": {"num_samples": 100},
                "check": {"num_samples": 200, "map_steps": 200},
                "quick": {"num_samples": 200},
                "full": {"num_samples": 1000},
            },
        ),
    )
}
# Budgets of the engines a model declares for itself (reference algorithms), by name.
REFERENCE_BUDGETS: dict[str, dict[str, dict[str, Any]]] = {
    "exact": {"smoke": {"num_samples": 1000}, "check": {"num_samples": 1000}},
    "ip": {
        "smoke": {"num_samples": 200, "warmup": 50},
        "check": {"num_samples": 500, "warmup": 100},
    },
}


def budget(engine: str, level: str) -> dict[str, Any]:
    """The options of ``engine`` (generic or a reference engine named in
    :data:`REFERENCE_BUDGETS`) at ``level``; {} where none is declared."""
    if engine in GENERIC_ENGINES:
        return dict(GENERIC_ENGINES[engine].budgets.get(level, {}))
    return dict(REFERENCE_BUDGETS.get(engine, {}).get(level, {}))


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
    different model, and its Run says so in ``Run.model_data`` (a report never takes it as
    the reference for the model's own posterior)."""
    data = dict(data or {})

    def run(ctx: EngineContext, **options: Any) -> Run:
        if data:  # the model under other arguments: its sites may differ, so re-inspected
            new = {**ctx.data, **data}
            ctx = dataclasses.replace(ctx, data=new, structure=inspect_model(ctx.model, new))
        result = base.fn(ctx, **{**fixed, **options})
        if data:
            result = dataclasses.replace(result, model_data=dict(data))
        return result

    shown = ", ".join(f"{k}={v!r}" for k, v in {**fixed, **data}.items())
    defaults = {k: v for k, v in base.defaults.items() if k not in fixed}
    summary = f"{base.name} with {shown}: {base.summary}"
    return EngineSpec(name, run, summary, defaults, False, biased=base.biased)


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
    normalised: dict[str, Any] = {}
    for key, value in options.items():
        if key not in defaults:
            close = difflib.get_close_matches(key, list(defaults), n=3)
            hint = f"; did you mean {' or '.join(map(repr, close))}?" if close else ""
            valid = ", ".join(sorted(defaults)) or "none"
            raise ZooError(
                f"unknown option {key!r} for engine {spec.name!r}{hint} (valid options: {valid})"
            )
        auto_none = value is None and defaults[key] is None  # an option left to its default
        if key in POSITIVE_INTS | NONNEGATIVE_INTS and not auto_none:
            low = 1 if key in POSITIVE_INTS else 0
            if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < low:
                kind = "a positive integer" if low else "a non-negative integer"
                raise ZooError(f"option {key!r} must be {kind}, got {value!r}")
        if (
            key in POSITIVE_FLOATS
            and not auto_none
            and (isinstance(value, bool) or not isinstance(value, numbers.Real) or not value > 0)  # type: ignore[operator]  # typeshed: Real declares only < and <=
        ):
            raise ZooError(f"option {key!r} must be a positive number, got {value!r}")
        if key in PROBABILITIES and not value < 1:
            raise ZooError(f"option {key!r} must be a probability in (0, 1), got {value!r}")
        auto = key in FLAGS_OR_AUTO and defaults[key] is None
        if auto and value is not None and not isinstance(value, bool):
            raise ZooError(f"option {key!r} must be True, False or None (auto), got {value!r}")
        if key in CHOICES and value is not None and value not in CHOICES[key]:
            close = difflib.get_close_matches(str(value), [str(c) for c in CHOICES[key]], n=2)
            hint = f"; did you mean {' or '.join(map(repr, close))}?" if close else ""
            raise ZooError(
                f"option {key!r} must be one of {list(CHOICES[key])}, got {value!r}{hint}"
            )
        if key == "device":  # a name or a torch.device, kept as its name ("cuda:0")
            try:
                normalised[key] = str(device_of(value))
            except ValueError as e:
                raise ZooError(f"option 'device': {e}") from None
            continue
        _like_default(key, value, defaults[key])
    checked = {**defaults, **options, **normalised}
    if (
        checked.get("ess") is not None
        and "num_samples" in defaults
        and "num_samples" not in options
    ):
        checked.update(target_sizes(dict(defaults), dict(options)))  # copies: it takes dicts
    return checked


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


# ------------------------------------------------------------------------- users' own engines

BUILTIN_ENGINES = frozenset(GENERIC_ENGINES)
# What a sampler engine's runner takes; a sampler's own options are its other keyword arguments.
SAMPLER_ARGUMENTS = ("num_samples", "warmup", "gen", "progress")
SAMPLER_DEFAULTS: dict[str, Any] = {
    "num_samples": 1000,
    "warmup": 1000,
    "num_chains": 4,
    "chain_groups": None,
    "jit": None,
    "parallel": True,
    "device": "cpu",
    "ess": None,
    "max_draws": None,
    "init": None,
}
SAMPLER_BUDGETS: dict[str, dict[str, Any]] = {
    "smoke": {"num_samples": 100, "warmup": 100, "num_chains": 2},
    "check": {"num_samples": 500, "warmup": 500, "num_chains": 4},
    "quick": {"num_samples": 1000, "warmup": 1000, "num_chains": 4, "chain_groups": 1},
    "full": {"num_samples": 2000, "warmup": 2000, "num_chains": 8, "chain_groups": 1},
}
_taken_names: list[Callable[[], set[str]]] = []  # engine names models already use (zoo's hook)


def reserve_names(taken: Callable[[], set[str]]) -> None:
    """``taken()`` gives names a new engine may not have (the model registry's reference
    engines): registering one of them is refused."""
    _taken_names.append(taken)


def _check_engine_name(name: Any, replace: bool) -> None:
    if not isinstance(name, str) or not name.isidentifier():
        raise ZooError(f"an engine's name must be an identifier like 'mala', got {name!r}")
    if name in BUILTIN_ENGINES or name == "exact":
        raise ZooError(f"engine {name!r} is built in; choose another name")
    if name in GENERIC_ENGINES and not replace:
        raise ZooError(f"an engine named {name!r} is already registered (replace=True replaces it)")
    for taken in _taken_names:
        if name in taken():
            raise ZooError(f"{name!r} is the name of a model's reference engine; choose another")


def register_engine(
    name: str,
    fn: Callable[..., Any],
    *,
    needs: str,
    budgets: Mapping[str, Mapping[str, Any]] | None = None,
    description: str = "",
    replace: bool = False,
) -> EngineSpec:
    """Add a generic engine ``fn(ctx, **options)`` that returns a :class:`Run` or, for the
    runner to package, a :class:`~zoo_inference.outputs.Draws`, :class:`Estimate` or
    :class:`Factors`. ``ctx`` is an :class:`EngineContext` (the model, its guide, the data, the
    model's structure, the seed and whether to show progress); ``options`` are ``fn``'s
    keyword-only parameters with their defaults, checked before any work. ``needs``: what a
    model must have for the engine to apply (one of :data:`NEEDS`); ``budgets``: its options at
    each level of :data:`BUDGETS` (reports and tests size runs by them)."""
    _check_engine_name(name, replace)
    if not callable(fn):
        raise ZooError(f"engine {name!r}: fn must be a function (ctx, **options) -> Run")
    try:
        inspect.signature(fn).bind(None)
    except TypeError:
        raise ZooError(
            f"engine {name!r}: fn must take ctx as its one positional argument"
        ) from None
    except ValueError:  # a builtin without a signature: taken on trust
        pass

    def run(ctx: EngineContext, **options: Any) -> Run:
        out = fn(ctx, **options)
        if isinstance(out, Run):
            if out.idata is not None and "posterior" in out.idata.groups():
                post = out.idata.posterior  # type: ignore[attr-defined]  # arviz sets groups as attributes
                values = {k: post[k].values for k in post.data_vars}
                check_values(name, "a Run", values, ctx.structure, ("chain", "draw"))
            return out
        if isinstance(out, Draws | Estimate | Factors):
            return to_run(name, out, ctx)
        raise ZooError(
            f"engine {name!r} returned {type(out).__name__}; it must return a Run, Draws, "
            "Estimate or Factors"
        )

    spec = declare(
        name, fn, description or _first_line(fn, name), needs=needs, budgets=budgets or {}
    )
    spec = dataclasses.replace(spec, fn=run, origin=origin(fn))
    GENERIC_ENGINES[name] = spec
    return spec


def register_sampler(
    name: str,
    fn: Callable[..., Samples],
    *,
    description: str = "",
    budgets: Mapping[str, Mapping[str, Any]] | None = None,
    defaults: Mapping[str, Any] | None = None,
    min_group: int = 1,
    superchain: int = 1,
    check: Callable[[dict[str, Any]], None] | None = None,
    opt_in: bool = False,
    replace: bool = False,
) -> EngineSpec:
    """Add an MCMC sampler as a generic engine. The zoo's own samplers (nuts, chees, hmc, mams,
    mh) are registered by this function too, so a user's sampler gets exactly what they get.

    ``fn(density, theta0, *, num_samples, warmup, gen, progress, **options) -> Samples``:
    ``density(theta) -> (log_density, gradient)`` on a ``(chains, D)`` batch of points on the
    model's unconstrained space (discrete sites summed out), ``theta0`` the chains' starting
    points, ``gen`` the chains' ``torch.Generator``; it returns :class:`Samples` with ``theta``
    ``(chains, num_samples, D)``, per-draw ``stats`` ``(chains, num_samples)`` (``diverging``,
    ``accept`` are shown where given), the number of gradient evaluations and ``info``. The
    sampler's own options are its other keyword arguments, with their defaults (written once,
    in its signature: what ``zoo info`` lists and ``zoo.run`` uses). The engine adds the
    runner's options (:data:`SAMPLER_DEFAULTS`: ``num_samples``, ``warmup``, ``num_chains``,
    ``chain_groups``, ``jit``, ``parallel``, ``device``, ``ess``, ``max_draws``, ``init``) and
    gives the sampler the compiled density, chain groups in worker processes, constrained
    draws, discrete sites recovered, R-hat and ESS.

    ``defaults``: the runner's options at other values than :data:`SAMPLER_DEFAULTS` for this
    sampler (``{"num_chains": 32}``); ``budgets``: its options at each level of
    :data:`BUDGETS` (sizes: draws, warmup, chains); ``min_group``: the fewest chains a group
    may hold (an ensemble sampler that adapts on its chains together); ``superchain``: chains
    started together at one point, in consecutive groups of this many (nested R-hat);
    ``check(options)``: raises ValueError on options that contradict each other, before any
    work; ``opt_in``: the engine runs only where a call names it (a whole-zoo report and
    ``zoo.compare``'s defaults leave it out). A run to an ESS target (``ess=``, see
    :func:`~zoo_inference.samplers.driver.sample_chains`) needs a sampler that can go on: one
    that takes ``resume=None`` and, given the ``Samples.state`` its last call returned (and
    ``warmup=0``), continues its chains from ``theta0`` without adapting again."""
    _check_engine_name(name, replace)
    own = _sampler_options(name, fn)
    resumable = own.pop("resume", inspect.Parameter.empty) is None
    runner = dict(SAMPLER_DEFAULTS)
    if unknown := sorted(set(defaults or {}) - set(runner)):
        raise ZooError(
            f"sampler {name!r}: defaults {unknown} are not the runner's options "
            f"({', '.join(runner)}); a sampler's own options take their defaults from its "
            "signature"
        )
    runner.update(defaults or {})
    for key, value in (("min_group", min_group), ("superchain", superchain)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ZooError(f"sampler {name!r}: {key} must be a positive integer, got {value!r}")
    budgets = SAMPLER_BUDGETS if budgets is None else budgets
    checked = _checked(name, fn)

    def run(ctx: EngineContext, **options: Any) -> Run:
        if check is not None:
            try:
                check(options)
            except ValueError as e:
                raise ZooError(str(e)) from None
        driver = {k: options.pop(k) for k in SAMPLER_DEFAULTS}
        if driver["ess"] is not None and not resumable:
            raise ZooError(
                f"sampler {name!r} cannot run to an ESS target (ess=): its function takes no "
                "`resume` (the Samples.state of its last call, to go on without a new warmup)"
            )
        return grouped_run(
            ctx, name, checked, superchain=superchain, min_group=min_group, **driver, **options
        )

    summary = description or _first_line(fn, name)
    spec = declare(
        name,
        run,
        summary,
        needs=_SAMPLER,
        budgets=budgets,
        defaults={**runner, **own},
        opt_in=opt_in,
    )
    spec = dataclasses.replace(spec, sampler=fn, origin=origin(fn), goes_on=resumable)
    GENERIC_ENGINES[name] = spec
    return spec


BUILT_IN_PACKAGES = ("zoo", "zoo_inference", "zoo_reports", "zoo_datasets")
FILE_MODULE_PREFIX = "zoo_user_models_"  # the module name of a file loaded by zoo.load_models


def origin(obj: Any) -> str | None:
    """Where a user's model or engine function is defined, as ``zoo.load_models`` (and the
    CLI's ``--models``) takes it: an importable module's name, or the path of the file it was
    loaded from (relative to the working folder when inside it); ``""`` for one defined
    interactively (a notebook, the REPL: no file to load); None for the zoo's own."""
    name = str(getattr(obj, "__module__", "") or "")
    if name.split(".")[0] in BUILT_IN_PACKAGES:
        return None
    module = inspect.getmodule(obj)
    importable = getattr(module, "__spec__", None) is not None and name != "__main__"
    if importable and not name.startswith(FILE_MODULE_PREFIX):
        return name
    if name == "__main__" and not getattr(module, "__file__", None):
        return ""  # the REPL or a notebook
    code = getattr(obj, "__code__", None)
    file = getattr(code, "co_filename", None) or getattr(module, "__file__", None)
    if not file or file.startswith("<") or not Path(file).is_file():
        return ""
    path = Path(file).resolve()
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def unregister_engine(name: str) -> None:
    """Remove an engine a user registered (built-in ones stay)."""
    if name in BUILTIN_ENGINES:
        raise ZooError(f"engine {name!r} is built in and cannot be removed")
    GENERIC_ENGINES.pop(name, None)


def _first_line(fn: Callable[..., Any], name: str) -> str:
    return (inspect.getdoc(fn) or name).strip().splitlines()[0]


def _sampler_options(name: str, fn: Callable[..., Any]) -> dict[str, Any]:
    """A sampler's own options (keyword arguments with defaults beyond the runner's), after
    checking that ``fn`` takes what the runner passes."""
    if not callable(fn):
        raise ZooError(f"sampler {name!r}: fn must be a function (density, theta0, *, ...)")
    params = inspect.signature(fn).parameters
    positional = [
        p for p in params.values() if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
    ]
    if len(positional) < 2:
        raise ZooError(f"sampler {name!r}: fn must take (density, theta0) as its first arguments")
    missing = [a for a in SAMPLER_ARGUMENTS if a not in params]
    if missing:
        raise ZooError(
            f"sampler {name!r}: fn must take the keyword arguments {list(SAMPLER_ARGUMENTS)}; "
            f"missing {missing}"
        )
    own = {
        n: p.default
        for n, p in list(params.items())[2:]
        if n not in SAMPLER_ARGUMENTS and p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD)
    }
    if no_default := [n for n, v in own.items() if v is inspect.Parameter.empty]:
        raise ZooError(f"sampler {name!r}: options {no_default} need defaults")
    if clash := sorted(set(own) & set(SAMPLER_DEFAULTS)):
        raise ZooError(f"sampler {name!r}: options {clash} are the runner's; rename them")
    return own


def _checked(name: str, fn: Callable[..., Samples]) -> Callable[..., Samples]:
    """``fn`` with its result checked against the sampler contract (shapes, finite counts)."""

    def sampler(density: Any, theta0: torch.Tensor, *, num_samples: int, **kw: Any) -> Samples:
        out = fn(density, theta0, num_samples=num_samples, **kw)
        if not isinstance(out, Samples):
            raise ZooError(
                f"sampler {name!r} returned {type(out).__name__}; it must return "
                "zoo.Samples(theta, stats, gradient_evals, info)"
            )
        chains, dim = theta0.shape
        shape = (chains, num_samples, dim)
        if not isinstance(out.theta, torch.Tensor) or tuple(out.theta.shape) != shape:
            got = tuple(getattr(out.theta, "shape", ())) or type(out.theta).__name__
            raise ZooError(
                f"sampler {name!r}: Samples.theta must be {shape} (chains, draws, D), got {got}"
            )
        stats = {}
        for key, value in out.stats.items():
            value = torch.as_tensor(value)
            if tuple(value.shape) != shape[:2]:
                raise ZooError(
                    f"sampler {name!r}: stats[{key!r}] must be {shape[:2]} (chains, draws), "
                    f"got {tuple(value.shape)}"
                )
            stats[key] = value
        stats.setdefault("diverging", torch.zeros(shape[:2], dtype=torch.bool))
        evals = out.gradient_evals
        if isinstance(evals, bool) or not isinstance(evals, numbers.Integral) or evals < 0:
            raise ZooError(f"sampler {name!r}: gradient_evals must be a count, got {evals!r}")
        return dataclasses.replace(out, theta=out.theta.detach(), stats=stats, info=dict(out.info))

    return sampler


# ------------------------------------------------------------------- the zoo's own samplers
# Registered as a user's sampler is (register_sampler): each kernel's options and their
# defaults are its signature's; here only the runner's sizes and the chains' layout.
def _metric_check(dense_default: bool | None) -> Callable[[dict[str, Any]], None]:
    def check(options: dict[str, Any]) -> None:
        check_metric(options.get("metric"), options.get("dense_mass"), dense_default)

    return check


register_sampler(
    "nuts",
    samplers.nuts,
    description="No-U-Turn sampler, asynchronous chains, discrete sites enumerated",
    defaults={"num_samples": 500, "warmup": 500, "num_chains": LOCKSTEP_CHAINS},
    check=_metric_check(False),
    budgets={
        "smoke": {"num_samples": 50, "warmup": 50, "num_chains": 2},
        "check": {"num_samples": 100, "warmup": 100, "num_chains": 1},
        # 4 chains of 600 draws: R-hat's excess over 1 shrinks with a chain's length, not with
        # the number of chains (it measures autocorrelation over the chain: about tau / 2n):
        # fewer, longer chains keep well-mixed runs under 1.01
        "quick": {"num_samples": 600, "warmup": 300, "num_chains": 4, "chain_groups": 1},
        "full": {"num_samples": 1000, "warmup": 1000, "num_chains": 32, "chain_groups": 1},
    },
)
register_sampler(
    "chees",
    samplers.chees,
    description="ChEES-HMC, many chains, discrete sites enumerated",
    defaults={"num_samples": 1000, "warmup": 300, "num_chains": 32},
    min_group=CHEES_GROUP,
    superchain=SUPERCHAIN,
    check=_metric_check(None),
    budgets={
        "smoke": {"num_samples": 50, "warmup": 50, "num_chains": 8},
        "check": {"num_samples": 50, "warmup": 300, "num_chains": 16},
        # the draws are cheap (a few leapfrog steps each once T is adapted) and the warmup is
        # most of the cost: more draws per warmup iteration
        "quick": {"num_samples": 500, "warmup": 300, "num_chains": 32, "chain_groups": 1},
        "full": {"num_samples": 1000, "warmup": 1000, "num_chains": 64, "chain_groups": 1},
    },
)
register_sampler(
    "hmc",
    samplers.hmc,
    description="Hamiltonian Monte Carlo, discrete sites enumerated",
    defaults={"num_samples": 500, "warmup": 500, "num_chains": LOCKSTEP_CHAINS},
    budgets={
        "smoke": {"num_samples": 50, "warmup": 50, "num_chains": 2},
        "check": {"num_samples": 100, "warmup": 100, "num_chains": 1},
        # 300 + 700 rather than 500 + 500: the same cost, and a steadier R-hat (about tau / 2n)
        # from longer chains
        "quick": {"num_samples": 700, "warmup": 300, "num_chains": 4, "chain_groups": 1},
        "full": {"num_samples": 1000, "warmup": 1000, "num_chains": 8, "chain_groups": 1},
    },
)
register_sampler(
    "mams",
    samplers.mams,
    description="adjusted microcanonical sampler (MAMS), many chains, discrete sites enumerated",
    defaults={"num_samples": 1000, "warmup": 500, "num_chains": LOCKSTEP_CHAINS},
    min_group=CHEES_GROUP,
    budgets={
        "smoke": {"num_samples": 50, "warmup": 100, "num_chains": 8},
        "check": {"num_samples": 100, "warmup": 300, "num_chains": 16},
        "quick": {"num_samples": 500, "warmup": 500, "num_chains": 32, "chain_groups": 1},
        "full": {"num_samples": 1000, "warmup": 1000, "num_chains": 64, "chain_groups": 1},
    },
)
register_sampler(
    "mh",
    samplers.rwmh,
    description="random-walk Metropolis–Hastings, adaptive proposal",
    defaults={"num_samples": 2000, "warmup": 2000, "num_chains": 2},
    budgets={
        "smoke": {"num_samples": 200, "warmup": 200, "num_chains": 2},
        "check": {"num_samples": 1000, "warmup": 1000, "num_chains": 2},  # 2: R-hat
        "quick": {"num_samples": 1000, "warmup": 1000, "num_chains": 2, "chain_groups": 1},
        "full": {"num_samples": 5000, "warmup": 5000, "num_chains": 4, "chain_groups": 1},
    },
)
register_sampler(
    "nutpie",
    nutpie_sampler,
    description="nutpie's NUTS and its adaptation on the zoo's log density: the peer (only where "
    "named; pip install nutpie)",
    budgets={
        "smoke": {"num_samples": 100, "warmup": 100, "num_chains": 2},
        "check": {"num_samples": 500, "warmup": 500, "num_chains": 4},
        "quick": {"num_samples": 1000, "warmup": 1000, "num_chains": 4},
        "full": {"num_samples": 2000, "warmup": 2000, "num_chains": 8},
    },
    opt_in=True,
)
register_sampler(
    "numpyro",
    numpyro_sampler,
    description="NumPyro's NUTS and its adaptation on the zoo's log density, chains vectorised: "
    "the peer (only where named; pip install numpyro jax)",
    budgets=dict(GENERIC_ENGINES["nutpie"].budgets),
    opt_in=True,
)
GENERIC_ENGINES["pyro_nuts"] = declare(
    "pyro_nuts",
    pyro_nuts_engine,
    "Pyro's own NUTS, a chain a process: the independent check of nuts (only where named)",
    needs=_SAMPLER,
    opt_in=True,
    budgets={
        "smoke": {"num_samples": 50, "warmup": 50, "num_chains": 2},
        "check": {"num_samples": 100, "warmup": 100, "num_chains": 1},
    },
)
GENERIC_ENGINES["stan"] = declare(
    "stan",
    stan_engine,
    "Stan's NUTS on the model's own Stan program (the posteriordb models): the peer (only "
    "where named; pip install pystan)",
    needs=_SAMPLER,
    opt_in=True,
    budgets=dict(GENERIC_ENGINES["nutpie"].budgets),
)
# the table's order: svi, the samplers, then the rest as declared above
_ORDER = ("svi", "nuts", "chees", "hmc", "mams", "mh")
_table = dict(GENERIC_ENGINES)
GENERIC_ENGINES.clear()
GENERIC_ENGINES.update({n: _table[n] for n in _ORDER})
GENERIC_ENGINES.update({n: v for n, v in _table.items() if n not in _ORDER})
BUILTIN_ENGINES = frozenset(GENERIC_ENGINES)
