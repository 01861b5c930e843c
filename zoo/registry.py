"""The model registry: ``register``, ``list_models``, ``get_model``.

Modelled on torchvision's registry: small, explicit errors. Models from other installed packages
are discovered through the entry-point group ``pyro_zoo.models``: each entry point names a module
(importing it registers its models), a :class:`ModelEntry`, or a callable that registers models.
"""

from __future__ import annotations

import contextlib
import difflib
import importlib
import importlib.util
import inspect
import os
import sys
import textwrap
import threading
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from html import escape
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

import torch

from zoo_datasets.synthetic import prior_predictive
from zoo_inference import (
    GENERIC_ENGINES,
    EngineSpec,
    GroundTruth,
    ModelInfo,
    ModelStructure,
    ZooError,
    check_options,
    exact_spec,
    inspect_model,
    reference_spec,
    truth_from_distributions,
    variant_spec,
)
from zoo_inference.engines import FILE_MODULE_PREFIX, origin, reserve_names
from zoo_inference.reference import describe_distributions, in_float64
from zoo_inference.results import one_line
from zoo_inference.runtime import seeded

from .companions import Companion
from .tags import check_tag, tags_of

ENTRY_POINT_GROUP = "pyro_zoo.models"
ENGINE_ENTRY_POINT_GROUP = "pyro_zoo.engines"  # packages that ship engines register them here

_REGISTRY: dict[str, ModelEntry] = {}
_LOCK = threading.RLock()
_discovered = False

DataSource = Mapping[str, Any] | Callable[[int], Mapping[str, Any]]


# What an engine is known to do on a model, by kind: what the conformance harness
# (tests/test_conformance.py) expects of that cell instead of a check against the truth
KNOWN_KINDS = {
    "slow": "too costly at the suite's check size: the slow run takes the cell",
    "not_mixing": "does not mix at any size the suite affords: the run must say so (R-hat > 1.1)",
    "fails": "must fail, with an error that says why",
    "approximate": "its family cannot hold the posterior: its error is the approximation's",
}


@dataclass(frozen=True)
class Known:
    """What one engine is known to do on a model, and why, declared with the model
    (``register(..., known={"mh": Known("not_mixing", "27 dimensions, ...")})``): a kind of
    :data:`KNOWN_KINDS`, the reason in words (no timings: they change with the machine) and,
    for ``fails``, the text its error contains. ``zoo info`` shows them; the conformance
    harness reads them."""

    kind: str
    reason: str
    error: str = ""

    def __post_init__(self) -> None:
        if self.kind not in KNOWN_KINDS:
            raise ValueError(f"Known: kind {self.kind!r} is not one of {', '.join(KNOWN_KINDS)}")
        if not self.reason.strip():
            raise ValueError(f"Known({self.kind!r}): say why (reason=...)")
        if self.kind == "fails" and not self.error:
            raise ValueError("Known('fails'): error= gives the text the run's error contains")


@dataclass(eq=False)
class ModelEntry:
    """A registered model: the Pyro model/guide pair, its default data, its ground truth and its
    reference algorithms. Calling the entry calls the model.

    The zoo's own models add their parts with decorators on the entry::

        @beta_bernoulli.set_guide          # the hand-written guide
        @beta_bernoulli.posterior          # closed form: ground truth and the `exact` engine
        @three_coin.truth                  # ground truth only (quadrature, brute force)
        @three_coin.reference("em")        # a reference algorithm, returning plain data
        @discrete_vae.evaluate             # scores of a fitted guide, after an svi fit

    Each of these companions names only the model parameters it uses; the entry stores it bound
    to the model (:class:`~zoo.companions.Companion`), so it is called with the full data.
    """

    name: str
    model: Callable[..., Any]
    data_source: DataSource
    guide: Callable[..., Any] | None = None
    ground_truth_fn: Callable[..., GroundTruth | None] | None = None
    posterior_fn: Callable[..., Any] | None = None
    references: dict[str, Callable[..., Any]] = field(default_factory=dict)
    synthetic_fn: Callable[[int], tuple[dict[str, Any], dict[str, Any]]] | None = None
    evaluate_fn: Callable[..., Mapping[str, Any]] | None = None
    generic_engines: tuple[str, ...] | None = None
    params: tuple[str, ...] | None = None
    engine_options: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    variants: Mapping[str, tuple[str, Mapping[str, Any], Mapping[str, Any]]] = field(
        default_factory=dict
    )
    figures: Mapping[str, Any] = field(default_factory=dict)
    not_applicable: Mapping[str, str] = field(default_factory=dict)
    seed_ref: str = ""
    opt_in: bool = False  # a whole-zoo report leaves it out; it runs when named
    doc: str = ""
    math: tuple[str, ...] = ()  # the generative story as LaTeX lines (reports render them)
    known: Mapping[str, Known] = field(default_factory=dict)  # engine -> what it is known to do
    _structure: ModelStructure | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        """Check the variants' model arguments and bind the companions to the model."""
        params_of = inspect.signature(_callable("model", self.model)).parameters
        takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params_of.values())
        for eng, (_, _, fixed_data) in self.variants.items():
            unknown = [k for k in fixed_data if k not in params_of and not takes_any]
            if unknown:
                raise ValueError(
                    f"variant {eng!r} fixes {unknown}, which {self.name}() does not take"
                )
        if self.guide is not None:
            self.guide = self._bind("guide", self.guide)
        if self.ground_truth_fn is not None:
            self.ground_truth_fn = self._bind("truth", self.ground_truth_fn)
        if self.posterior_fn is not None:
            self.posterior_fn = self._bind("posterior", self.posterior_fn)
        if self.evaluate_fn is not None:
            self.evaluate_fn = self._bind("evaluation", self.evaluate_fn)
        self.references = {
            k: self._bind(f"reference engine {k!r}", f, options=True)
            for k, f in self.references.items()
        }

    def _bind(self, what: str, fn: Any, *, options: bool = False) -> Companion:
        """``fn`` as a companion of this model: a clear error if it names a parameter the model
        does not take."""
        return Companion(fn, self.model, f"the {what} of model {self.name!r}", options=options)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.model(*args, **kwargs)

    def __repr__(self) -> str:
        names = textwrap.shorten(" ".join(self.engines), width=60, placeholder=" ...")
        return f"ModelEntry({self.name!r}, {len(self.engines)} engines: {names})"

    def _repr_html_(self) -> str:
        """Notebook display: description, seed reference, data shapes and engines."""
        data = "".join(
            f"<li><code>{escape(k)}</code>: "
            f"{escape(str(tuple(v.shape)) if hasattr(v, 'shape') else type(v).__name__)}</li>"
            for k, v in self.load_data().items()
        )
        engines = ", ".join(f"<code>{escape(e)}</code>" for e in self.engines)
        ref = f" (seed {escape(self.seed_ref)})" if self.seed_ref else ""
        return (
            f"<div><p><b>{escape(self.name)}</b>{ref}: {escape(self.description)}</p>"
            f"<p>engines: {engines}</p><p>data:</p><ul>{data}</ul></div>"
        )

    # ------------------------------------------------------------ decorators
    def set_guide(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        """Decorator: the model's hand-written guide, taking the model parameters it names."""
        self.guide = self._bind("guide", fn)
        return fn

    def posterior(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        """Decorator: the closed-form posterior, ``fn(<parameters it names>) -> ({site:
        distribution}, log_evidence)``. It gives both the ground truth and the ``exact`` engine."""
        self.posterior_fn = self._bind("posterior", fn)
        return fn

    def truth(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        """Decorator: the ground truth, ``fn(<parameters it names>) -> GroundTruth | None``, for a
        model whose exact answer is not a closed-form distribution (quadrature, brute force)."""
        self.ground_truth_fn = self._bind("truth", fn)
        return fn

    def synthetic(self, fn: Callable[[int], Any]) -> Callable[[int], Any]:
        """Decorator: a synthetic generator ``fn(seed) -> (data, true_values)``: data drawn with
        known true parameters (default: the model's own prior predictive)."""
        self.synthetic_fn = _callable("synthetic", fn)
        return fn

    def evaluate(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        """Decorator: the model's own scores of a fitted guide, ``fn(<parameters it names>) ->
        {name: number}``, run by the ``svi`` engine after the fit with the fitted parameters in
        Pyro's param store (held-out scores, gradient studies); they join the run's
        diagnostics."""
        self.evaluate_fn = self._bind("evaluation", fn)
        return fn

    def reference(self, engine: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        """Decorator: a reference algorithm registered as engine ``engine``. It takes the model
        parameters it names plus keyword-only options and returns an ``Estimate``, ``Draws`` or
        ``Factors``."""
        _check_reference_name(engine)

        def add(fn: Callable[..., Any]) -> Callable[..., Any]:
            self.references[engine] = self._bind(f"reference engine {engine!r}", fn, options=True)
            return fn

        return add

    # ----------------------------------------------------------------- data
    def load_data(self, seed: int = 0) -> dict[str, Any]:
        """The default dataset as keyword arguments for ``model`` (observations included)."""
        src = self.data_source
        raw = src(seed) if callable(src) else src
        return {k: (v.clone() if isinstance(v, torch.Tensor) else v) for k, v in dict(raw).items()}

    def simulate(self, seed: int = 0) -> tuple[dict[str, Any], dict[str, Any]]:
        """Synthetic data with known true values: ``(data, true_values)`` from the registered
        generator, else from the model's prior predictive on the default data's shapes."""
        with seeded(seed):
            if self.synthetic_fn is not None:
                data, truth = self.synthetic_fn(seed)
                return dict(data), dict(truth)
            return prior_predictive(self.model, self.load_data())

    def ground_truth(self, data: Mapping[str, Any] | None = None) -> GroundTruth | None:
        """Exact posterior moments / densities / log evidence for ``data`` (None if unknown)."""
        data = self.load_data() if data is None else data
        if self.posterior_fn is not None:
            dists, log_z = in_float64(self.posterior_fn, data)
            return truth_from_distributions(dists, log_z, describe_distributions(dists))
        if self.ground_truth_fn is not None:
            return self.ground_truth_fn(**data)
        return None

    @property
    def description(self) -> str:
        return (self.doc.strip().splitlines() or [self.name])[0]

    @property
    def structure(self) -> ModelStructure:
        """Latent/observed sites of the model on its default data."""
        if self._structure is None:
            try:  # a prior draw: seeded, and the caller's random state left alone
                with seeded(0):
                    structure = inspect_model(self.model, self.load_data())
            except Exception as e:  # noqa: BLE001 - the user's model: name it and the problem
                raise ZooError(
                    f"model {self.name!r} raised {one_line(e)} when run on its default data"
                ) from None
            sites = structure.latent + structure.deterministic
            unknown = [p for p in self.params or () if p not in sites]
            if unknown:
                raise ZooError(
                    f"params {unknown} of model {self.name!r} are not among its latent or "
                    f"deterministic sites {list(sites)}"
                )
            self._structure = structure
        return self._structure

    def compared_params(self) -> tuple[str, ...]:
        """Sites compared in tables: the registered ``params``, else every latent site except
        discrete ones with one value per observation."""
        if self.params is not None:
            return self.params
        return self.structure.continuous

    def info(self) -> ModelInfo:
        return ModelInfo(
            name=self.name,
            description=self.description,
            doc=self.doc.strip(),
            seed_ref=self.seed_ref,
            engines=self.engines,
            params=tuple(self.compared_params()),
            discrete=self.structure.discrete,
            figures=dict(self.figures),
            math=tuple(self.math),
            family=family_of(self.model),
            origin=origin(self.model),
            bounds=dict(self.structure.bounds),
        )

    # -------------------------------------------------------------- engines
    @property
    def reference_engines(self) -> dict[str, EngineSpec]:
        specs = {}
        if self.posterior_fn is not None:
            specs["exact"] = exact_spec(self.posterior_fn)
        specs.update({k: reference_spec(k, fn) for k, fn in self.references.items()})
        for name, (base, fixed, data) in self.variants.items():
            if self._generic_reason(base) is None:
                specs[name] = variant_spec(name, GENERIC_ENGINES[base], fixed, data)
        return specs

    def base_engine(self, engine: str) -> str:
        """The generic engine a variant runs (``svi_meanfield`` -> ``svi``), else ``engine``."""
        return self.variants[engine][0] if engine in self.variants else engine

    def registered_options(self, engine: str) -> dict[str, Any]:
        """The options this model registered for ``engine``; a variant inherits those of its
        base engine that it takes (its own win)."""
        own = dict(self.engine_options.get(engine, {}))
        if engine not in self.variants:
            return own
        taken = self.engine_spec(engine).defaults
        base = self.engine_options.get(self.base_engine(engine), {})
        return {**{k: v for k, v in base.items() if k in taken}, **own}

    def _generic_reason(self, engine: str) -> str | None:
        spec = GENERIC_ENGINES[engine]
        reason = spec.not_applicable(self.structure, self.guide is not None)
        if (
            reason is None
            and not spec.opt_in  # runs where named, wherever the model's structure allows
            and self.generic_engines is not None
            and engine not in self.generic_engines
        ):
            stated = self.not_applicable
            return (
                stated.get(engine)
                or stated.get("*")
                or "it is not among the engines the model registered"
            )
        return reason

    def why_not(self, engine: str) -> str | None:
        """None if the generic engine ``engine`` applies to this model, else why not: what the
        model's structure rules out, else the reason the model registered
        (``register(..., not_applicable=...)``) for leaving it out of ``engines``."""
        if engine not in GENERIC_ENGINES:
            raise ZooError(f"{engine!r} is not a generic engine ({', '.join(GENERIC_ENGINES)})")
        return self._generic_reason(engine)

    @property
    def engines(self) -> tuple[str, ...]:
        """Engines that apply: generic ones first, then the model's reference engines (opt-in
        engines, such as ``pyro_nuts``, run where a call names them and are not listed)."""
        names = self.generic_engines if self.generic_engines is not None else GENERIC_ENGINES
        has_guide = self.guide is not None
        generic = tuple(
            n
            for n in names
            if not GENERIC_ENGINES[n].opt_in
            and GENERIC_ENGINES[n].not_applicable(self.structure, has_guide) is None
        )
        return generic + tuple(self.reference_engines)

    def engine_spec(self, engine: str) -> EngineSpec:
        """The engine's spec; unknown or inapplicable engines are a clear error."""
        refs = self.reference_engines
        if engine in refs:
            return refs[engine]
        if engine in GENERIC_ENGINES:
            reason = self._generic_reason(engine)
            if reason is None:
                return GENERIC_ENGINES[engine]
            raise ZooError(
                f"engine {engine!r} does not apply to model {self.name!r} ({reason}); "
                f"engines that apply: {', '.join(self.engines) or 'none'}"
            )
        # suggest only what would run: the engines that apply, and opt-in ones that would
        known = list(self.engines) + [
            n for n, s in GENERIC_ENGINES.items() if s.opt_in and self._generic_reason(n) is None
        ]
        close = difflib.get_close_matches(str(engine), known, n=3, cutoff=0.5)
        hint = f"; did you mean {' or '.join(map(repr, close))}?" if close else ""
        raise ZooError(
            f"unknown engine {engine!r} for model {self.name!r}{hint} "
            f"(engines that apply: {', '.join(self.engines) or 'none'})"
        )


EXPECTED = {
    "model": "the Pyro model, a function of the data's keyword arguments",
    "guide": "a Pyro guide, a function of the model's arguments",
    "posterior": "a function (**data) -> ({site: distribution}, log_evidence)",
    "ground_truth": "a function (**data) -> GroundTruth",
    "truth": "a function (**data) -> GroundTruth",
    "synthetic": "a function seed -> (data, true_values)",
}
REFERENCE = "a function (**data, *, options) -> Estimate, Draws or Factors"


def _callable(what: str, fn: Any) -> Any:
    """``fn`` if callable, else a ValueError naming the argument and what it should be."""
    if not callable(fn):
        shown = repr(fn) if len(repr(fn)) <= 60 else repr(fn)[:57] + "..."
        raise ValueError(
            f"{what} must be {EXPECTED.get(what, REFERENCE)}; got {type(fn).__name__} {shown}"
        )
    return fn


def _check_reference_name(engine: Any) -> None:
    if not isinstance(engine, str) or not engine.isidentifier():
        raise ValueError(f"engine names are Python identifiers, got {engine!r}")
    if engine in GENERIC_ENGINES or engine == "exact":
        raise ValueError(
            f"reference engine name {engine!r} clashes with "
            + ("a generic engine" if engine in GENERIC_ENGINES else "the closed-form posterior's")
        )


# --------------------------------------------------------------------- registration
def register(
    name: str | None = None,
    *,
    model: Callable[..., Any] | None = None,
    data: DataSource | None = None,
    guide: Callable[..., Any] | None = None,
    engines: Sequence[str] | None = None,
    ground_truth: Callable[..., GroundTruth | None] | None = None,
    posterior: Callable[..., Any] | None = None,
    references: Mapping[str, Callable[..., Any]] | None = None,
    params: Sequence[str] | None = None,
    engine_options: Mapping[str, Mapping[str, Any]] | None = None,
    variants: Mapping[str, tuple[Any, ...]] | None = None,
    figures: Mapping[str, Any] | None = None,
    not_applicable: str | Mapping[str, str] | None = None,
    seed_ref: str = "",
    opt_in: bool = False,
    doc: str | None = None,
    math: str | Sequence[str] | None = None,
    known: Mapping[str, Known] | None = None,
    replace: bool = False,
) -> Any:
    """Register a model; the one registration form.

    As a plain call, for a model written anywhere: ``register("coin", model=fn, data={...})``
    returns the :class:`ModelEntry`. As a decorator on the model function, for the zoo's own
    models: ``@register(data={...}, seed_ref="000 §2.1.3")`` (the name defaults to the function's)
    returns the entry, whose decorators add the guide, posterior, truth and reference engines.

    ``data``: a dict of keyword arguments for the model, or a function ``seed -> dict``.
    ``guide``, ``ground_truth`` (``-> GroundTruth``), ``posterior`` (``-> ({site: distribution},
    log_evidence)``) and ``references`` (engine name -> function with keyword-only options,
    returning plain data, see :mod:`zoo_inference.outputs`) take only the model parameters they
    name; the model's defaults fill in what the data leaves out. ``engines`` restricts the generic
    engines (default: every one that applies). ``variants`` names a generic engine with fixed
    options as an engine of its own, so one comparison can hold several
    (``{"svi_fullrank": ("svi", {"guide": "mvn"})}``); a third element fixes model arguments,
    so a variant can run the model under another setting of a flag
    (``{"nuts_gaussian": ("nuts", {}, {"likelihood": "gaussian"})}``). ``figures`` asks the
    report for figures of this model's results: ``{"pairs": [("theta[0]", "tau")]}`` (MCMC
    draws of two parameters, divergent transitions marked) and ``{"fit": {"x": "x", "y": "y",
    "mean": "mu"}}`` (the data with each engine's posterior mean and 90% band of the
    deterministic site ``mean``; with ``"sd"``, a site of the curve's sd given each draw);
    ``{"clusters": {"data": "y", "assignment": "z"}}`` (the data coloured by each engine's
    posterior assignment), ``{"topics": {"topic_word": "phi", "top": 8}}`` (each topic's most
    probable words per engine) and ``{"states": {"data": "x", "prefix": "z_"}}`` (the series and
    each engine's hidden-state probabilities per step, sites ``z_0 .. z_{T-1}``);
    ``{"images": {"shape": (8, 8)}}`` (the image grids each run's ``extras["images"]`` holds:
    reconstructions, samples); ``{"estimators": {"variance": "grad_variance", "scores":
    {"held-out ELBO": "heldout_elbo"}, "label": "estimator"}}`` (numbers each run's diagnostics
    hold, from the model's ``evaluate``: a gradient variance on a log scale and scores side by
    side). ``not_applicable`` says why the generic engines that ``engines``
    leaves out do not apply to the model: one sentence for all of them, or a dict engine ->
    sentence (``"*"``: the others); ``zoo info`` and the error of such an engine show it.
    ``math``: the generative story as LaTeX lines (matplotlib mathtext, no ``$``), shown
    rendered on the model's report page; without it the page shows the docstring.
    ``known`` declares what an engine is known to do on the model, and why (:class:`Known`:
    too slow for the default test run, not mixing, failing, an approximation that cannot hold
    the posterior); ``zoo info`` shows it and the conformance tests expect it.
    ``opt_in=True`` keeps a model out of a whole-zoo report (``zoo.report()``, ``zoo report``
    without names), whose default run must stay minutes long: a heavy benchmark target runs
    when a report or ``compare`` names it.
    ``replace=True`` replaces a model of the same name (re-running a notebook cell); otherwise a
    duplicate name is an error.
    """
    if name is not None and (not isinstance(name, str) or not name.isidentifier()):
        raise ValueError(f"model names are Python identifiers, got {name!r}")
    if data is None:
        raise ValueError(
            f"register({name or ''!r}) needs data=... (a dict or a function seed -> dict)"
        )
    if not (isinstance(data, Mapping) or callable(data)):
        raise ValueError(
            f"data must be a dict or a function seed -> dict, got {type(data).__name__}"
        )
    if isinstance(engines, str):  # engines="nuts": one engine, not its letters
        engines = [engines]
    if engines is not None:
        bad = [e for e in engines if e not in GENERIC_ENGINES]
        if bad:
            close = difflib.get_close_matches(str(bad[0]), list(GENERIC_ENGINES), n=2)
            hint = f"; did you mean {' or '.join(map(repr, close))}?" if close else ""
            raise ValueError(
                f"unknown generic engine(s) {bad}{hint} (generic engines: "
                f"{', '.join(GENERIC_ENGINES)}; model-specific ones are reference engines)"
            )
    for eng in references or {}:
        _check_reference_name(eng)
    checked_variants = {eng: _check_variant(eng, v) for eng, v in (variants or {}).items()}
    reasons = _check_reasons(not_applicable, engines)
    _check_engine_options(engine_options, checked_variants)
    math_lines = _check_math(math)
    known_cells = _check_known(known)

    def make(fn: Callable[..., Any], entry_name: str) -> ModelEntry:
        if isinstance(data, Mapping):
            _check_data_keys(entry_name, _callable("model", fn), data)
        entry = ModelEntry(
            name=entry_name,
            model=_callable("model", fn),
            data_source=data,
            guide=None if guide is None else _callable("guide", guide),
            ground_truth_fn=None
            if ground_truth is None
            else _callable("ground_truth", ground_truth),
            posterior_fn=None if posterior is None else _callable("posterior", posterior),
            references={
                k: _callable(f"reference engine {k!r}", f) for k, f in (references or {}).items()
            },
            generic_engines=tuple(engines) if engines is not None else None,
            params=tuple(params) if params is not None else None,
            engine_options={k: dict(v) for k, v in (engine_options or {}).items()},
            variants=checked_variants,
            figures=dict(figures or {}),
            not_applicable=reasons,
            seed_ref=seed_ref,
            opt_in=bool(opt_in),
            math=math_lines,
            known=known_cells,
            doc=doc if doc is not None else (inspect.getdoc(fn) or ""),
        )
        return _add(entry, replace)

    if model is not None:
        if name is None:
            raise ValueError("register(name, model=...) needs a name")
        return make(model, name)

    def decorator(fn: Callable[..., Any]) -> ModelEntry:
        return make(fn, name or fn.__name__)

    return decorator


def _check_known(known: Mapping[str, Known] | None) -> dict[str, Known]:
    """``known`` as ``{engine: Known}``; the engines are checked against the model's when its
    structure is known (tests/test_conformance.py)."""
    if known is None:
        return {}
    if not isinstance(known, Mapping):
        raise ValueError(f"known must be a dict engine -> Known, got {type(known).__name__}")
    for engine, what in known.items():
        if not isinstance(what, Known):
            raise ValueError(
                f"known[{engine!r}] must be a Known(kind, reason), got {type(what).__name__}"
            )
    return dict(known)


def _check_math(math: str | Sequence[str] | None) -> tuple[str, ...]:
    """``math`` as LaTeX lines: a string (one line per line) or a sequence of strings."""
    if math is None:
        return ()
    lines = math.splitlines() if isinstance(math, str) else math
    if not isinstance(lines, Sequence) or not all(isinstance(x, str) for x in lines):
        raise ValueError(f"math must be LaTeX lines (a list of strings), got {math!r}")
    return tuple(x.strip() for x in lines if x.strip())


def _check_data_keys(name: str, model: Callable[..., Any], data: Mapping[str, Any]) -> None:
    """The default data's keys are the model's parameters: none it does not take, none it
    needs left out (a model taking ``**kwargs`` takes any)."""
    try:
        params = inspect.signature(model).parameters
    except (TypeError, ValueError):  # a callable without a signature: the first run tells
        return
    kinds = {p.kind for p in params.values()}
    if inspect.Parameter.VAR_KEYWORD not in kinds:
        unknown = sorted(k for k in data if k not in params)
        if unknown:
            raise ValueError(
                f"data of model {name!r} has key(s) {unknown}, which the model does not take "
                f"(its parameters: {list(params)})"
            )
    needed = [
        k
        for k, p in params.items()
        if p.default is p.empty and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
    ]
    missing = [k for k in needed if k not in data]
    if missing:
        raise ValueError(f"data of model {name!r} lacks {missing}, which the model needs")


def _check_engine_options(
    options: Mapping[str, Any] | None, variants: Mapping[str, tuple[str, Any, Any]]
) -> None:
    """Each generic engine's (and variant's) registered options, checked as a run checks them;
    those of reference engines are checked when the engine runs (it may be added later)."""
    if options is not None and not isinstance(options, Mapping):
        raise ValueError(f"engine_options must be a dict engine -> options, got {options!r}")
    for eng, opts in (options or {}).items():
        if not isinstance(opts, Mapping):
            raise ValueError(f"engine_options[{eng!r}] must be a dict of options, got {opts!r}")
        base = variants[eng][0] if eng in variants else eng
        if base in GENERIC_ENGINES:
            try:
                check_options(GENERIC_ENGINES[base], opts)
            except ZooError as e:
                raise ValueError(f"engine_options[{eng!r}]: {e}") from None


def _check_reasons(
    reasons: str | Mapping[str, str] | None, engines: Sequence[str] | None
) -> dict[str, str]:
    """``not_applicable`` as ``{engine or "*": sentence}``; a reason for an engine the model
    keeps, or without ``engines`` to leave any out, is an error."""
    if reasons is None:
        return {}
    if isinstance(reasons, str):
        reasons = {"*": reasons}
    if not isinstance(reasons, Mapping) or not all(
        isinstance(k, str) and isinstance(v, str) and v.strip() for k, v in reasons.items()
    ):
        raise ValueError(
            f"not_applicable must be a sentence or a dict engine -> sentence, got {reasons!r}"
        )
    if engines is None:
        raise ValueError("not_applicable says why engines left out do not apply: it needs engines")
    kept = [e for e in reasons if e != "*" and (e not in GENERIC_ENGINES or e in engines)]
    if kept:
        raise ValueError(
            f"not_applicable names {kept}, which are not generic engines the model leaves out"
        )
    return dict(reasons)


def _check_variant(name: str, spec: Any) -> tuple[str, dict[str, Any], dict[str, Any]]:
    """``(generic engine, options)`` or ``(generic engine, options, model arguments)``."""
    _check_reference_name(name)
    ok = isinstance(spec, tuple | list) and len(spec) in (2, 3)
    base, fixed, data = (*spec, {})[:3] if ok else (None, None, None)
    if not ok or base not in GENERIC_ENGINES or not isinstance(fixed, Mapping):
        raise ValueError(
            f"variant {name!r} must be (generic engine, options[, model arguments]), got {spec!r}"
        )
    if not isinstance(data, Mapping) or not all(isinstance(k, str) for k in data):
        raise ValueError(f"variant {name!r}: model arguments must be a dict, got {data!r}")
    check_options(GENERIC_ENGINES[base], fixed)
    return base, dict(fixed), dict(data)


def _add(entry: ModelEntry, replace: bool = False) -> ModelEntry:
    with _LOCK:
        if entry.name in _REGISTRY and not replace:
            raise ValueError(
                f"a model named {entry.name!r} is already registered "
                "(register(..., replace=True) replaces it)"
            )
        _REGISTRY[entry.name] = entry
    return entry


def unregister(name: str) -> None:
    """Remove a model (for tests and interactive work)."""
    with _LOCK:
        _REGISTRY.pop(name, None)


@contextlib.contextmanager
def isolated() -> Iterator[None]:
    """Models and engines registered inside the block are forgotten after it (the built-in
    ones stay)."""
    _discover()
    with _LOCK:
        saved, engines = dict(_REGISTRY), dict(GENERIC_ENGINES)
    try:
        yield
    finally:
        with _LOCK:
            _REGISTRY.clear()
            _REGISTRY.update(saved)
            GENERIC_ENGINES.clear()
            GENERIC_ENGINES.update(engines)


def _discover() -> None:
    """Import the built-in models and every ``pyro_zoo.models`` entry point, once."""
    global _discovered
    if _discovered:
        return
    with _LOCK:
        if _discovered:
            return
        _discovered = True
        importlib.import_module("zoo.models")  # importing the package registers the built-ins

        for group in (ENGINE_ENTRY_POINT_GROUP, ENTRY_POINT_GROUP):  # engines first: models
            _load_entry_points(group)  # may name them in engines=


def load_models(*sources: str | os.PathLike[str]) -> None:
    """Import Python files or modules that register models or engines: what the CLI's
    ``--models`` does, and what a page's "reproduce" code calls for a user's own models
    (``zoo.load_models("my_models.py")``). A file is imported as a module of its own (code under
    ``if __name__ == "__main__":`` does not run); a module by its name. An error names the
    source."""
    for source in map(str, sources):
        path = Path(source)
        try:
            if source.endswith(".py") or path.exists():
                if not path.is_file():
                    raise ZooError(f"models {source!r}: no such file")
                name = f"{FILE_MODULE_PREFIX}{path.stem}"
                spec = importlib.util.spec_from_file_location(name, path)
                if spec is None or spec.loader is None:
                    raise ZooError(f"models {source!r}: not a Python file")
                module = importlib.util.module_from_spec(spec)
                sys.modules[spec.name] = module
                spec.loader.exec_module(module)
            else:
                _import_here(source)
        except (ZooError, KeyboardInterrupt):
            raise
        except Exception as e:  # noqa: BLE001 - the user's file: say what went wrong, briefly
            lines = str(e).strip().splitlines()
            raise ZooError(
                f"could not load models from {source!r}: {type(e).__name__}: "
                f"{lines[0] if lines else ''}"
            ) from None


def _import_here(name: str) -> None:
    """Import module ``name``, from the working folder too where the path does not hold it:
    a script imports the modules beside it by name, and ``zoo`` from the shell (whose path
    starts at its own folder) must find them as the script did."""
    try:
        importlib.import_module(name)
        return
    except ModuleNotFoundError as e:
        if e.name != name.split(".")[0] or os.getcwd() in sys.path:
            raise
    sys.path.insert(0, os.getcwd())
    try:
        importlib.import_module(name)
    finally:
        sys.path.remove(os.getcwd())


def _load_entry_points(group: str) -> None:
    """Load each entry point of ``group``: a model entry is added; a function is called (it
    registers models or engines); a module registers them as it is imported."""
    for ep in entry_points(group=group):
        try:
            obj = ep.load()
            if isinstance(obj, ModelEntry):
                if obj.name not in _REGISTRY:
                    _add(obj)
            elif callable(obj) and not isinstance(obj, type):
                obj()
        except Exception as e:  # noqa: BLE001 - a broken plugin must not break the zoo
            warnings.warn(
                f"could not load {group} entry point {ep.name!r} ({ep.value}): "
                f"{type(e).__name__}: {e}",
                RuntimeWarning,
                stacklevel=4,
            )


def _reference_names() -> set[str]:
    """Every registered model's own engine names (a user's generic engine may not take one)."""
    with _LOCK:
        return {n for e in _REGISTRY.values() for n in (*e.references, *e.variants)}


reserve_names(_reference_names)


def rediscover() -> None:
    """Look for entry points again (after installing a plugin in a running session)."""
    global _discovered
    with _LOCK:
        _discovered = False
    _discover()


SUITES = ("seeds", "gym", "posteriordb", "user")
_SUITE_OF_FAMILY = {"gym": "gym", "posteriordb": "posteriordb"}


def suite_of(entry: ModelEntry) -> str:
    """A model's suite, from where it is registered: ``gym`` (the Inference Gym's targets),
    ``posteriordb`` (its reference posteriors), ``seeds`` (the lecture notes' models: the other
    modules of zoo.models) or ``user`` (a model registered anywhere else)."""
    module = str(getattr(entry.model, "__module__", "") or "")
    if not module.startswith("zoo.models."):
        return "user"
    return _SUITE_OF_FAMILY.get(family_of(entry.model), "seeds")


def family_of(model: Callable[..., Any]) -> str:
    """A model's family: its module under zoo.models (a package's name for its modules:
    ``zoo.models.posteriordb.arm`` is ``posteriordb``), else its whole module."""
    module = str(getattr(model, "__module__", "") or "")
    if module.startswith("zoo.models."):
        return module.removeprefix("zoo.models.").partition(".")[0]
    return module


def list_models(suite: str | None = None, *, tag: str | None = None) -> list[str]:
    """Sorted names of every registered model, or of one suite's (:data:`SUITES`:
    ``zoo.list_models(suite="posteriordb")``), or of those measured to carry ``tag``
    (:data:`zoo.tags.TAGS`: ``zoo.list_models(tag="funnel")``)."""
    _discover()
    if suite is not None and suite not in SUITES:
        raise ZooError(f"unknown suite {suite!r}; the suites are {', '.join(SUITES)}")
    with _LOCK:
        names = sorted(n for n, e in _REGISTRY.items() if suite in (None, suite_of(e)))
    if tag is None:
        return names
    check_tag(tag)
    return [n for n in names if tag in getattr(tags_of(_REGISTRY[n]), "labels", ())]


def get_model(name: str | ModelEntry) -> ModelEntry:
    """The entry registered as ``name``; an unknown name is a ValueError naming close matches."""
    if isinstance(name, ModelEntry):
        return name
    _discover()
    try:
        return _REGISTRY[name]
    except (KeyError, TypeError):
        close = difflib.get_close_matches(str(name), list(_REGISTRY), n=3, cutoff=0.5)
        hint = f"; did you mean {' or '.join(map(repr, close))}?" if close else ""
        raise ZooError(
            f"unknown model {name!r}{hint} (`zoo list` shows the {len(_REGISTRY)} models)"
        ) from None
