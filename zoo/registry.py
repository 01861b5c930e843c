"""The model registry: ``register``, ``list_models``, ``get_model``.

Modelled on torchvision's registry: small, explicit errors. Models from other installed packages
are discovered through the entry-point group ``pyro_zoo.models``: each entry point names a module
(importing it registers its models), a :class:`ModelEntry`, or a callable that registers models.
"""

from __future__ import annotations

import difflib
import inspect
import threading
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from importlib.metadata import entry_points
from typing import Any

import numpy as np
import pyro
import torch

from inference import GENERIC_ENGINES, EngineSpec, GroundTruth, ZooError, inspect_model
from inference.engines import reference_spec
from inference.structure import ModelStructure

ENTRY_POINT_GROUP = "pyro_zoo.models"

_REGISTRY: dict[str, ModelEntry] = {}
_LOCK = threading.RLock()
_discovered = False


@dataclass
class ModelEntry:
    """A registered model: the Pyro model/guide pair, its default data and its ground truth.

    ``reference_engines`` maps a model-specific engine name (``exact``, ``em``, ...) to a function
    ``fn(data, *, seed, progress, **options) -> Run``. ``params`` are the sites that comparison
    tables show (default: every continuous latent site). ``engine_options`` are per-engine
    defaults for this model (for example a learning rate that suits its scale).
    """

    name: str
    model: Callable[..., Any]
    data_source: Mapping[str, Any] | Callable[[int], Mapping[str, Any]]
    guide: Callable[..., Any] | None = None
    ground_truth_fn: Callable[[Mapping[str, Any]], GroundTruth | None] | None = None
    generic_engines: tuple[str, ...] | None = None
    reference_engines: Mapping[str, Callable[..., Any]] = field(default_factory=dict)
    params: tuple[str, ...] | None = None
    engine_options: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    seed_ref: str = ""
    doc: str = ""
    _structure: ModelStructure | None = field(default=None, repr=False)
    _reference: dict[str, Any] | None = field(default=None, repr=False)

    # ----------------------------------------------------------------- data
    def load_data(self, seed: int = 0) -> dict[str, Any]:
        """The default dataset as keyword arguments for ``model`` (observations included)."""
        src = self.data_source
        raw = src(seed) if callable(src) else src
        return {k: (v.clone() if isinstance(v, torch.Tensor) else v) for k, v in dict(raw).items()}

    def ground_truth(self, data: Mapping[str, Any] | None = None) -> GroundTruth | None:
        """Exact posterior moments / densities / log evidence for ``data`` (None if unknown)."""
        if self.ground_truth_fn is None:
            return None
        return self.ground_truth_fn(self.load_data() if data is None else data)

    @property
    def description(self) -> str:
        return (self.doc.strip().splitlines() or [self.name])[0]

    @property
    def structure(self) -> ModelStructure:
        """Latent/observed sites of the model on its default data."""
        if self._structure is None:
            self._structure = inspect_model(self.model, self.load_data())
        return self._structure

    def compared_params(self) -> tuple[str, ...]:
        return self.params if self.params is not None else self.structure.continuous

    # -------------------------------------------------------------- engines
    @property
    def engines(self) -> tuple[str, ...]:
        """Engines that apply: generic ones first, then the model's reference engines."""
        names = self.generic_engines if self.generic_engines is not None else GENERIC_ENGINES
        generic = tuple(
            n
            for n in names
            if GENERIC_ENGINES[n].not_applicable(self.structure, self.guide is not None) is None
        )
        return generic + tuple(self.reference_engines)

    def engine_spec(self, engine: str) -> EngineSpec:
        """The engine's spec; unknown or inapplicable engines are a clear error."""
        if engine in self.reference_engines:
            return reference_spec(engine, self.reference_engines[engine])
        if engine in GENERIC_ENGINES:
            reason = GENERIC_ENGINES[engine].not_applicable(self.structure, self.guide is not None)
            if reason is None and (self.generic_engines is None or engine in self.generic_engines):
                return GENERIC_ENGINES[engine]
            reason = reason or "it is not among the engines the model registered"
            raise ZooError(
                f"engine {engine!r} does not apply to model {self.name!r} ({reason}); "
                f"engines that apply: {', '.join(self.engines)}"
            )
        known = list(GENERIC_ENGINES) + list(self.reference_engines)
        close = difflib.get_close_matches(engine, known, n=3, cutoff=0.5)
        hint = f"; did you mean {' or '.join(map(repr, close))}?" if close else ""
        raise ZooError(
            f"unknown engine {engine!r} for model {self.name!r}{hint} "
            f"(engines that apply: {', '.join(self.engines)})"
        )

    # ---------------------------------------------------------- validation
    def check_data(self, data: Mapping[str, Any]) -> dict[str, Any]:
        """Validate user data against the default dataset and the model's supports.

        Every key of the default data must be present with the same number of dimensions and the
        same trailing shape (the first dimension, the number of observations, may differ); numbers
        must be finite and inside the support of the site that observes them.
        """
        if not isinstance(data, Mapping):
            raise ZooError(f"data must be a dict of keyword arguments, got {type(data).__name__}")
        if self._reference is None:
            self._reference = self.load_data()
        ref = self._reference
        unknown = sorted(set(data) - set(ref))
        if unknown:
            raise ZooError(
                f"unknown data key(s) {unknown} for model {self.name!r}; it takes {sorted(ref)}"
            )
        out: dict[str, Any] = {}
        for key, expected in ref.items():
            if key not in data:
                raise ZooError(
                    f"data for model {self.name!r} is missing {key!r} "
                    f"(expected {_describe(expected)})"
                )
            out[key] = _coerce(key, data[key], expected)
        self._check_support(out)
        return out

    def _check_support(self, data: dict[str, Any]) -> None:
        import pyro.poutine as poutine

        try:
            with pyro.validation_enabled(False), torch.no_grad():
                trace = poutine.trace(poutine.block(self.model, hide_types=["param"])).get_trace(
                    **data
                )
        except Exception as e:  # the model itself rejects the data (shapes that don't broadcast)
            raise ZooError(f"data does not fit model {self.name!r}: {e}") from None
        for name, site in trace.nodes.items():
            if site["type"] != "sample" or not site["is_observed"]:
                continue
            fn, value = site["fn"], site["value"]
            try:
                inside = bool(fn.support.check(value).all())
            except Exception:  # noqa: BLE001 - constraint cannot be checked on this value
                inside = True
            if not inside:
                raise ZooError(
                    f"observed site {name!r} of model {self.name!r} has values outside its "
                    f"support ({fn.support})"
                )
            want = tuple(fn.batch_shape + fn.event_shape)
            if tuple(value.shape) != want and want:
                raise ZooError(
                    f"observed site {name!r} of model {self.name!r} has shape "
                    f"{tuple(value.shape)}; expected {want}"
                )


def _describe(v: Any) -> str:
    if isinstance(v, torch.Tensor):
        dims = ", ".join(["N", *map(str, v.shape[1:])]) if v.ndim else ""
        trail = "," if v.ndim == 1 else ""
        return f"a {v.dtype} tensor of shape ({dims}{trail})"
    return f"a {type(v).__name__}"


def _coerce(key: str, value: Any, expected: Any) -> Any:
    if not isinstance(expected, torch.Tensor):
        if type(expected) in (int, float) and isinstance(value, bool):
            raise ZooError(f"data[{key!r}] must be {_describe(expected)}, got {value!r}")
        if isinstance(expected, int) and isinstance(value, (int, np.integer)):
            return int(value)
        if isinstance(expected, float) and isinstance(value, (int, float, np.number)):
            return float(value)
        if type(value) is not type(expected):
            raise ZooError(
                f"data[{key!r}] must be {_describe(expected)}, got {type(value).__name__}"
            )
        return value
    arr = value.detach().cpu().numpy() if isinstance(value, torch.Tensor) else np.asarray(value)
    if arr.dtype.kind not in "biuf":
        raise ZooError(
            f"data[{key!r}] has dtype {arr.dtype}; expected numbers ({_describe(expected)})"
        )
    if arr.dtype.kind == "f" and not np.isfinite(arr).all():
        bad = "NaN" if np.isnan(arr).any() else "inf"
        raise ZooError(f"data[{key!r}] contains {bad} ({int((~np.isfinite(arr)).sum())} values)")
    shape_ok = arr.ndim == expected.ndim and arr.shape[1:] == tuple(expected.shape[1:])
    if expected.ndim == 0:
        shape_ok = arr.ndim == 0
    if not shape_ok:
        raise ZooError(f"data[{key!r}] has shape {arr.shape}; expected {_describe(expected)}")
    if arr.ndim and arr.shape[0] == 0:
        raise ZooError(f"data[{key!r}] is empty")
    if expected.dtype.is_floating_point is False and arr.dtype.kind == "f":
        if not np.all(arr == np.round(arr)):
            raise ZooError(f"data[{key!r}] must hold integers ({_describe(expected)})")
    return torch.as_tensor(arr).to(expected.dtype)


# --------------------------------------------------------------------- registration
def _add(entry: ModelEntry) -> ModelEntry:
    with _LOCK:
        if entry.name in _REGISTRY:
            raise ValueError(f"a model named {entry.name!r} is already registered")
        _REGISTRY[entry.name] = entry
    return entry


def register(
    name: str,
    *,
    model: Callable[..., Any] | None = None,
    data: Mapping[str, Any] | Callable[[int], Mapping[str, Any]] | None = None,
    guide: Callable[..., Any] | None = None,
    engines: Sequence[str] | None = None,
    ground_truth: Callable[[Mapping[str, Any]], GroundTruth | None] | None = None,
    reference_engines: Mapping[str, Callable[..., Any]] | None = None,
    params: Sequence[str] | None = None,
    engine_options: Mapping[str, Mapping[str, Any]] | None = None,
    seed_ref: str = "",
    doc: str | None = None,
) -> Any:
    """Register a model under ``name``.

    As a function: ``register(name, model=..., data=...)`` returns the :class:`ModelEntry`.
    As a class decorator: ``@register(name)`` on a class whose attributes are ``model``,
    ``data`` (dict or method ``seed -> dict``) and optionally ``guide``, ``ground_truth``,
    ``engines``, ``reference_engines``, ``params``, ``engine_options``, ``seed_ref``; the class
    docstring (or ``model``'s) is the entry's documentation. A duplicate name is an error.
    """
    if not isinstance(name, str) or not name.isidentifier():
        raise ValueError(f"model names are Python identifiers, got {name!r}")
    if engines is not None:
        bad = [e for e in engines if e not in GENERIC_ENGINES]
        if bad:
            raise ValueError(
                f"unknown generic engine(s) {bad}; generic engines are {list(GENERIC_ENGINES)} "
                "(model-specific ones go in reference_engines)"
            )
    if model is None:
        if data is not None or guide is not None:
            raise ValueError("register(name, data=..., guide=...) needs model=...")

        def decorator(cls: type) -> type:
            obj = cls()
            attrs = {
                a: getattr(obj, a, None)
                for a in (
                    "model",
                    "data",
                    "guide",
                    "ground_truth",
                    "engines",
                    "reference_engines",
                    "params",
                    "engine_options",
                    "seed_ref",
                )
            }
            if attrs["model"] is None or attrs["data"] is None:
                raise ValueError(f"class {cls.__name__} needs a `model` and `data` to register")
            register(
                name,
                model=attrs["model"],
                data=attrs["data"],
                guide=attrs["guide"],
                engines=attrs["engines"],
                ground_truth=attrs["ground_truth"],
                reference_engines=attrs["reference_engines"],
                params=attrs["params"],
                engine_options=attrs["engine_options"],
                seed_ref=attrs["seed_ref"] or "",
                doc=inspect.getdoc(cls) or inspect.getdoc(attrs["model"]) or "",
            )
            cls.zoo_entry = _REGISTRY[name]
            return cls

        return decorator
    if data is None:
        raise ValueError(f"register({name!r}) needs data=... (a dict or a function seed -> dict)")
    if not callable(model) or (guide is not None and not callable(guide)):
        raise ValueError("model and guide must be callables")
    for eng, fn in (reference_engines or {}).items():
        if not callable(fn):
            raise ValueError(f"reference engine {eng!r} must be a function")
        if eng in GENERIC_ENGINES:
            raise ValueError(f"reference engine name {eng!r} clashes with a generic engine")
    return _add(
        ModelEntry(
            name=name,
            model=model,
            data_source=data,
            guide=guide,
            ground_truth_fn=ground_truth,
            generic_engines=tuple(engines) if engines is not None else None,
            reference_engines=dict(reference_engines or {}),
            params=tuple(params) if params is not None else None,
            engine_options={k: dict(v) for k, v in (engine_options or {}).items()},
            seed_ref=seed_ref,
            doc=doc if doc is not None else (inspect.getdoc(model) or ""),
        )
    )


def unregister(name: str) -> None:
    """Remove a model (for tests and interactive work)."""
    with _LOCK:
        _REGISTRY.pop(name, None)


def _discover() -> None:
    """Import the built-in models and every ``pyro_zoo.models`` entry point, once."""
    global _discovered
    if _discovered:
        return
    with _LOCK:
        if _discovered:
            return
        _discovered = True
        import zoo.models  # noqa: F401  (registers the built-in models)

        for ep in entry_points(group=ENTRY_POINT_GROUP):
            try:
                obj = ep.load()
            except Exception as e:  # noqa: BLE001 - a broken plugin must not break the zoo
                warnings.warn(
                    f"could not load {ENTRY_POINT_GROUP} entry point {ep.name!r} ({ep.value}): "
                    f"{type(e).__name__}: {e}",
                    RuntimeWarning,
                    stacklevel=3,
                )
                continue
            if isinstance(obj, ModelEntry) and obj.name not in _REGISTRY:
                _add(obj)
            elif callable(obj) and not isinstance(obj, type):
                obj()


def list_models() -> list[str]:
    """Sorted names of every registered model."""
    _discover()
    return sorted(_REGISTRY)


def get_model(name: str) -> ModelEntry:
    """The entry registered as ``name``; an unknown name is a ValueError naming close matches."""
    _discover()
    if isinstance(name, ModelEntry):
        return name
    try:
        return _REGISTRY[name]
    except (KeyError, TypeError):
        close = difflib.get_close_matches(str(name), list(_REGISTRY), n=3, cutoff=0.5)
        hint = f"; did you mean {' or '.join(map(repr, close))}?" if close else ""
        raise ZooError(
            f"unknown model {name!r}{hint} (`zoo list` shows the {len(_REGISTRY)} models)"
        ) from None
