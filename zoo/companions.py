"""A model's companions (its guide, posterior, truth and reference algorithms) take only the
model parameters they name, as pytest fixtures do; defaults are stated once, on the model.

A companion is stored bound to its model as a :class:`Companion`: called like the model (every
data key, by name or in the model's order), it fills in the model's defaults for the arguments
the call leaves out and passes the function exactly the parameters it names; a ``**kwargs``
receives them all. A companion written with the model's full signature keeps working.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any

_BY_NAME = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)


class Companion:
    """``fn`` bound to ``model``, checked once: every parameter it names must be one of the
    model's (unless the model takes ``**kwargs``). With ``options=True`` (a reference algorithm)
    ``fn``'s keyword-only parameters are engine options, passed through as given and shown in
    this object's signature, so the runner reads them as it reads a plain function's."""

    fn: Callable[..., Any]

    def __init__(
        self, fn: Callable[..., Any], model: Callable[..., Any], what: str, *, options: bool = False
    ) -> None:
        fn = fn.fn if isinstance(fn, Companion) else fn  # re-registered: bind to the new model
        if not callable(fn):
            raise ValueError(f"{what} must be a function, got {type(fn).__name__}")
        self.fn, self.what = fn, what
        where = _where(fn)
        self._model = inspect.signature(model)
        own = inspect.signature(fn).parameters.values()
        model_params = [p.name for p in self._model.parameters.values() if p.kind in _BY_NAME]
        positional = [p.name for p in own if p.kind is p.POSITIONAL_ONLY]
        if positional:
            raise ValueError(
                f"{what} ({where}) has positional-only parameters {positional}; a "
                "companion's parameters are passed by name"
            )
        self.options = tuple(p.name for p in own if options and p.kind is p.KEYWORD_ONLY)
        self.names = tuple(p.name for p in own if p.kind in _BY_NAME and p.name not in self.options)
        self.takes_all = any(p.kind is p.VAR_KEYWORD for p in own)
        if not any(p.kind is p.VAR_KEYWORD for p in self._model.parameters.values()):
            unknown = [n for n in self.names if n not in model_params]
            if unknown:
                raise ValueError(
                    f"{what} ({where}) names {unknown}, which the model does not take; "
                    f"the model's parameters are {model_params}"
                )
        clash = [n for n in self.options if n in model_params]
        if clash:
            raise ValueError(
                f"{what} ({where}): its keyword-only parameters are engine options, "
                f"but the model takes {clash} as data; make them ordinary parameters"
            )
        functools.update_wrapper(self, fn)
        self.__signature__ = inspect.Signature(
            [
                inspect.Parameter("args", inspect.Parameter.VAR_POSITIONAL),
                *(p for p in own if p.name in self.options),
                inspect.Parameter("data", inspect.Parameter.VAR_KEYWORD),
            ]
        )

    def arguments(self, *args: Any, **data: Any) -> dict[str, Any]:
        """The model's arguments for a call ``model(*args, **data)``, its defaults filled in."""
        try:
            bound = self._model.bind_partial(*args, **data)
        except TypeError as e:
            raise TypeError(f"{self.what}, called as the model: {e}") from None
        bound.apply_defaults()
        values = dict(bound.arguments)
        for p in self._model.parameters.values():
            if p.kind is p.VAR_KEYWORD:
                values.update(values.pop(p.name))
            elif p.kind is p.VAR_POSITIONAL:
                values.pop(p.name)
        return values

    def __call__(self, *args: Any, **data: Any) -> Any:
        options = {k: data.pop(k) for k in self.options if k in data}
        values = self.arguments(*args, **data)
        if not self.takes_all:
            values = {k: values[k] for k in self.names if k in values}
        return self.fn(**values, **options)

    def __repr__(self) -> str:
        return f"<{self.what}: {_where(self.fn)}>"


def _where(fn: Callable[..., Any]) -> str:
    """``name at file:line`` of a function, for messages about a companion (most are ``_``)."""
    code = getattr(fn, "__code__", None)
    name = getattr(fn, "__name__", type(fn).__name__)
    if code is None:
        return name
    return f"{name} at {code.co_filename}:{code.co_firstlineno}"
