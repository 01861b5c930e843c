"""The settings that choose how the zoo computes, in one place: :func:`config` reads them and
:func:`configure` changes them (``zoo.config()``, ``zoo.configure(...)``).

>>> import zoo
>>> zoo.config().auto_compile
True
>>> with zoo.configure(auto_compile=False):  # inside the block only
...     run = zoo.run("eight_schools_noncentered", "nuts")
>>> zoo.configure(uncompiled="fx")  # for the rest of the process

A setting nobody configured takes its default from an environment variable where one is set
(CI, a test suite, a shell), else :class:`Config`'s. This is the one module that reads them,
once, when a setting is first looked up (the first run): a variable set later counts in new
processes only, so within a process change settings with :func:`configure`.

==================  ====================  ================================================
setting             environment variable  values
==================  ====================  ================================================
``auto_compile``    ``ZOO_AUTO_COMPILE``  ``1``/``0`` (also true/false, yes/no, on/off)
``uncompiled``      ``ZOO_UNCOMPILED``    ``torchscript`` or ``fx``
``code_version``    ``ZOO_CODE_VERSION``  any text
==================  ====================  ================================================

The settings are the process's (not a thread's): worker processes forked by a run or a report
inherit them, and a report's cells on a Dask cluster run under the settings of the process that
submitted them.
"""

from __future__ import annotations

import contextlib
import difflib
import os
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any, Literal

from .results import ZooError

UNCOMPILED_FORMS = ("torchscript", "fx")
_TRUE, _FALSE = ("1", "true", "yes", "on"), ("0", "false", "no", "off")


@dataclass(frozen=True)
class Config:
    """How the zoo computes; the results of a run do not depend on it beyond the last digits
    (every faster form is checked against the plain one before it is used).

    ``auto_compile``: a sampler or SVI run with ``jit=None`` may compile its density (and
    sampler step) with TorchInductor once the run's pace shows that the compile pays for itself;
    False keeps such runs uncompiled (``jit=True`` still compiles). Test suites turn it off: a
    model's first compile on a cold cache costs 10-20 s, more than a smoke-sized run.

    ``uncompiled``: the form an uncompiled density graph runs in: ``"torchscript"`` (TorchScript's
    interpreter, where the graph scripts and agrees) or ``"fx"`` (the FX graph's Python; the
    samplers' steps then run eagerly, unfused).

    ``code_version``: stands in for the hash of the zoo's source in a stored report cell's key
    (:mod:`zoo.store`), so that a long sweep keeps its cells across an edit known to change no
    result (a comment, a docstring), at the user's own risk. None: the source's hash.
    """

    auto_compile: bool = True
    uncompiled: Literal["torchscript", "fx"] = "torchscript"
    code_version: str | None = None


ENVIRONMENT = {
    "auto_compile": "ZOO_AUTO_COMPILE",
    "uncompiled": "ZOO_UNCOMPILED",
    "code_version": "ZOO_CODE_VERSION",
}
_NAMES = tuple(f.name for f in fields(Config))
_changes: dict[str, Any] = {}  # what configure() set, over the environment's defaults
_environment: dict[str, Any] | None = None  # the environment's settings, read at first use
_current: Config | None = None  # config(), until configure() changes something


def _check(name: str, value: Any, source: str) -> Any:
    """``value`` for setting ``name`` if it is of the right kind, else a ZooError naming
    ``source`` (the call or the environment variable) and what the setting takes."""
    if name == "auto_compile":
        if not isinstance(value, bool):
            raise ZooError(f"{source}: auto_compile must be True or False, got {value!r}")
    elif name == "uncompiled":
        if value not in UNCOMPILED_FORMS:
            raise ZooError(f"{source}: uncompiled must be one of {UNCOMPILED_FORMS}, got {value!r}")
    elif name == "code_version":
        if value is not None and (not isinstance(value, str) or not value):
            raise ZooError(f"{source}: code_version must be a non-empty str or None, got {value!r}")
    return value


def _flag(variable: str, text: str) -> bool:
    word = text.strip().lower()
    if word in _TRUE or word in _FALSE:
        return word in _TRUE
    raise ZooError(f"environment variable {variable}={text!r}: use 1 or 0 (true/false, yes/no)")


def _from_environment(environ: Mapping[str, str]) -> dict[str, Any]:
    """The settings the environment variables give (those set and not empty)."""
    out: dict[str, Any] = {}
    for name, variable in ENVIRONMENT.items():
        text = environ.get(variable, "")
        if not text:
            continue
        value: Any = _flag(variable, text) if name == "auto_compile" else text.strip()
        out[name] = _check(name, value, f"environment variable {variable}")
    return out


def config() -> Config:
    """The settings in force: what :func:`configure` set, over the environment's defaults (read
    once, at the first look-up), over :class:`Config`'s."""
    global _environment, _current
    if _current is None:
        if _environment is None:
            _environment = _from_environment(os.environ)
        _current = Config(**{**_environment, **_changes})
    return _current


class _Restore(contextlib.AbstractContextManager):
    """What :func:`configure` returns: as a ``with`` block, the settings before the call come
    back at its end."""

    def __init__(self, before: dict[str, Any]) -> None:
        self._before = before

    def __enter__(self) -> Config:
        return config()

    def __exit__(self, *exc: object) -> None:
        global _current
        _changes.clear()
        _changes.update(self._before)
        _current = None


def configure(**changes: Any) -> contextlib.AbstractContextManager[Config]:
    """Change settings now: ``zoo.configure(auto_compile=False)`` for the rest of the process,
    or ``with zoo.configure(auto_compile=False): ...`` for a block, after which the settings are
    back as they were. A name that is not a setting, or a value of the wrong kind, raises
    :class:`ZooError` and changes nothing."""
    global _current
    for name in changes:
        if name not in _NAMES:
            close = difflib.get_close_matches(name, _NAMES, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise ZooError(f"unknown setting {name!r}{hint}; settings: {', '.join(_NAMES)}")
    checked = {k: _check(k, v, "configure") for k, v in changes.items()}
    before = dict(_changes)
    _changes.update(checked)
    _current = None
    return _Restore(before)
