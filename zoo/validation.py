"""Checking user data against a model before any work: keys, shapes, dtypes, finiteness and the
supports of the sites that observe them."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import pyro
import torch

from zoo_inference import ZooError
from zoo_inference.results import one_line
from zoo_inference.structure import trace_model


def describe(v: Any) -> str:
    """A value of the default data, for messages: ``a torch.float32 tensor of shape (N,)``."""
    if isinstance(v, torch.Tensor):
        dims = ", ".join(["N", *map(str, v.shape[1:])]) if v.ndim else ""
        trail = "," if v.ndim == 1 else ""
        return f"a {v.dtype} tensor of shape ({dims}{trail})"
    return f"a {type(v).__name__}"


def check_data(
    name: str, model: Callable[..., Any], reference: Mapping[str, Any], data: Any
) -> dict[str, Any]:
    """Validate ``data`` for model ``name`` against its default dataset ``reference``.

    Every key of the default data must be present with the same number of dimensions; numbers
    must be finite and inside the support of the site that observes them. The first dimension
    (the number of observations) may differ, and so may the trailing ones where the model runs
    on them (PPCA on 64 pixels where the default data have 6 columns); where it does not, the
    error names the key whose shape differs from the default data's.
    """
    if not isinstance(data, Mapping):
        raise ZooError(f"data must be a dict of keyword arguments, got {type(data).__name__}")
    unknown = sorted(set(data) - set(reference))
    if unknown:
        raise ZooError(
            f"unknown data key(s) {unknown} for model {name!r}; it takes {sorted(reference)}"
        )
    out: dict[str, Any] = {}
    for key, expected in reference.items():
        if key not in data:
            raise ZooError(
                f"data for model {name!r} is missing {key!r} (expected {describe(expected)})"
            )
        out[key] = coerce(key, data[key], expected)
    reshaped = [
        k
        for k, v in out.items()
        if isinstance(v, torch.Tensor) and v.shape[1:] != reference[k].shape[1:]
    ]
    try:
        check_support(name, model, out, reference)
    except ZooError:
        if reshaped:  # the model's failure comes from a shape it was not written for
            k = reshaped[0]
            raise ZooError(
                f"data[{k!r}] has shape {tuple(out[k].shape)}; expected "
                f"{describe(reference[k])} (model {name!r} does not run on that shape)"
            ) from None
        raise
    return out


def _culprit(
    model: Callable[..., Any], data: Mapping[str, Any], reference: Mapping[str, Any]
) -> str | None:
    """The key (a scalar, or a tensor of the default's shape) whose default value makes the
    model run again, if there is one."""
    for key, default in reference.items():
        value = data.get(key)
        if isinstance(default, torch.Tensor):
            same_shape = isinstance(value, torch.Tensor) and value.shape == default.shape
            if not same_shape or torch.equal(value, default.to(value.dtype)):
                continue
        elif value == default:
            continue
        try:
            trace_model(model, {**data, key: default}, validate=True)
        except Exception:  # noqa: BLE001 - still failing: not this one
            continue
        return key
    return None


def coerce(key: str, value: Any, expected: Any) -> Any:
    """``value`` converted to the type of ``expected`` (the default data's), or a ZooError.
    Scalars convert when exact (``2``, ``2.0``, ``torch.tensor(2.0)`` for an int or a float)
    and must be finite."""
    if not isinstance(expected, torch.Tensor):
        if isinstance(expected, bool) or not isinstance(expected, int | float):
            if type(value) is not type(expected):
                raise ZooError(
                    f"data[{key!r}] must be {describe(expected)}, got {type(value).__name__}"
                )
            return value
        return _scalar(key, value, expected)
    try:
        arr = value.detach().cpu().numpy() if isinstance(value, torch.Tensor) else np.asarray(value)
    except (ValueError, TypeError):  # nested lists of unequal lengths: numpy says "inhomogeneous"
        raise ZooError(
            f"data[{key!r}] is ragged (rows of unequal length); expected {describe(expected)}"
        ) from None
    if arr.dtype.kind not in "biuf":
        raise ZooError(
            f"data[{key!r}] has dtype {arr.dtype}; expected numbers ({describe(expected)})"
        )
    if arr.dtype.kind == "f" and not np.isfinite(arr).all():
        bad = "NaN" if np.isnan(arr).any() else "inf"
        raise ZooError(f"data[{key!r}] contains {bad} ({int((~np.isfinite(arr)).sum())} values)")
    shape_ok = arr.ndim == expected.ndim  # trailing dims: checked by running the model
    if expected.ndim == 0:
        shape_ok = arr.ndim == 0
    if not shape_ok:
        raise ZooError(f"data[{key!r}] has shape {arr.shape}; expected {describe(expected)}")
    if arr.ndim and arr.shape[0] == 0:
        raise ZooError(f"data[{key!r}] is empty")
    if expected.dtype.is_floating_point is False and arr.dtype.kind == "f":
        if not np.all(arr == np.round(arr)):
            raise ZooError(f"data[{key!r}] must hold integers ({describe(expected)})")
    return torch.as_tensor(arr).to(expected.dtype)


def _scalar(key: str, value: Any, expected: int | float) -> int | float:
    kind = "an integer" if isinstance(expected, int) else "a number"
    if isinstance(value, torch.Tensor | np.ndarray):
        if value.ndim != 0 or value.dtype == torch.bool or getattr(value.dtype, "kind", "") == "b":
            raise ZooError(
                f"data[{key!r}] must be {kind}, got an array of shape {tuple(value.shape)}"
            )
        value = value.item()
    if isinstance(value, bool) or not isinstance(value, int | float | np.number):
        raise ZooError(f"data[{key!r}] must be {kind}, got {value!r}")
    if not np.isfinite(float(value)):
        raise ZooError(f"data[{key!r}] must be finite, got {value!r}")
    if isinstance(expected, int):
        if float(value) != round(float(value)):
            raise ZooError(f"data[{key!r}] must be an integer, got {value!r}")
        return int(round(float(value)))
    return float(value)


def check_support(
    name: str,
    model: Callable[..., Any],
    data: Mapping[str, Any],
    reference: Mapping[str, Any] | None = None,
) -> None:
    """Run the model once on ``data`` with Pyro's argument checks on: a scalar that feeds a
    distribution parameter outside its support is named (found by putting back the default
    value of one scalar at a time); every observed value must lie in its site's support and have
    the site's shape."""
    try:
        trace = trace_model(model, data, validate=True)
    except Exception as e:  # noqa: BLE001 - the model itself rejects the data
        reason = one_line(e)
        culprit = _culprit(model, data, reference or {})
        if culprit is not None:
            value = data[culprit]
            shown = f"data[{culprit!r}]" + ("" if torch.is_tensor(value) else f" = {value!r}")
            if "Expected parameter" in reason:
                raise ZooError(
                    f"{shown} is outside the support of the distribution parameter it feeds in "
                    f"model {name!r} ({reason})"
                ) from None
            raise ZooError(f"{shown} does not fit model {name!r} ({reason})") from None
        raise ZooError(f"data does not fit model {name!r}: {reason}") from None
    for site_name, site in trace.nodes.items():
        if site["type"] != "sample" or not site["is_observed"]:
            continue
        fn, value = site["fn"], site["value"]
        if isinstance(fn, pyro.distributions.Unit) or site["infer"].get("_deterministic"):
            continue
        try:
            inside = bool(fn.support.check(value).all())
        except (NotImplementedError, RuntimeError, TypeError):  # cannot be checked on this value
            inside = True
        if not inside:
            raise ZooError(
                f"observed site {site_name!r} of model {name!r} has values outside its "
                f"support ({fn.support})"
            )
        want = tuple(fn.batch_shape + fn.event_shape)
        if tuple(value.shape) != want and want:
            raise ZooError(
                f"observed site {site_name!r} of model {name!r} has shape "
                f"{tuple(value.shape)}; expected {want}"
            )
