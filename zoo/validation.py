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
    name: str,
    model: Callable[..., Any],
    reference: Mapping[str, Any],
    data: Any,
    *,
    replace: bool = False,
) -> dict[str, Any]:
    """Validate ``data`` for model ``name`` against its default dataset ``reference``.

    ``data`` is merged over the default data: a key it leaves out keeps its default value (the
    prior's hyperparameters, say); ``replace=True`` takes ``data`` whole instead, and every key
    must then be given. Each key must have the default's number of dimensions; numbers must be
    finite and inside the support of the site that observes them. The first dimension (the
    number of observations) may differ, and so may the trailing ones where the model runs on
    them (PPCA on 64 pixels where the default data have 6 columns); where it does not, the
    error names the key whose shape differs, and any default it was left beside.
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
            if not replace:
                out[key] = expected
                continue
            raise ZooError(
                f"data for model {name!r} is missing {key!r} (expected {describe(expected)}; "
                "replace_data=True takes the data whole: leave it out to keep the defaults)"
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
        if beside := _left_beside(out, reference, set(data)):
            raise ZooError(beside) from None
        if reshaped:  # the model's failure comes from a shape it was not written for
            k = reshaped[0]
            raise ZooError(
                f"data[{k!r}] has shape {tuple(out[k].shape)}; expected "
                f"{describe(reference[k])} (model {name!r} does not run on that shape)"
            ) from None
        raise
    return out


def _left_beside(
    data: Mapping[str, Any], reference: Mapping[str, Any], given: set[str]
) -> str | None:
    """Why merged data fail, when they do because a key given with a new number of rows sits
    beside a default of the old number (``y`` of 3 observations, the default ``X`` of 100)."""
    for key in sorted(given):
        new, old = data[key], reference[key]
        if not (torch.is_tensor(new) and torch.is_tensor(old) and new.ndim and old.ndim):
            continue
        if new.shape[0] == old.shape[0]:
            continue
        kept = [
            k
            for k, v in reference.items()
            if k not in given and torch.is_tensor(v) and v.ndim and v.shape[0] == old.shape[0]
        ]
        if kept:
            names = ", ".join(f"data[{k!r}]" for k in kept)
            return (
                f"data[{key!r}] has {new.shape[0]} rows, but {names} kept from the model's "
                f"default data {'has' if len(kept) == 1 else 'have'} {old.shape[0]}: pass "
                f"{'it' if len(kept) == 1 else 'them'} too"
            )
    return None


def _culprit(
    model: Callable[..., Any], data: Mapping[str, Any], reference: Mapping[str, Any]
) -> str | None:
    """The key (a scalar, or a tensor of the default's shape) whose default value makes the
    model run again, if there is one."""
    for key, default in reference.items():
        value = data.get(key)
        if isinstance(default, torch.Tensor):
            if (
                not isinstance(value, torch.Tensor)
                or value.shape != default.shape
                or torch.equal(value, default.to(value.dtype))
            ):
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
        try:  # an observed value outside its site's support: named below, site and value
            _check_observed(name, trace_model(model, data))
        except ZooError:
            raise
        except Exception:  # noqa: BLE001, S110 - the model fails without the checks too
            pass
        reason = one_line(e).removesuffix(", but found invalid values:")
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
    _check_observed(name, trace)


def _check_observed(name: str, trace: Any) -> None:
    """Every observed value inside its site's support and of the site's shape, or a ZooError
    naming the site, what it expects and the first value it received outside it."""
    for site_name, site in trace.nodes.items():
        if site["type"] != "sample" or not site["is_observed"]:
            continue
        fn, value = site["fn"], site["value"]
        if isinstance(fn, pyro.distributions.Unit) or site["infer"].get("_deterministic"):
            continue
        want = tuple(fn.batch_shape + fn.event_shape)
        if tuple(value.shape) != want and want:
            raise ZooError(
                f"observed site {site_name!r} of model {name!r} has shape "
                f"{tuple(value.shape)}; expected {want}"
            )
        try:
            inside = fn.support.check(value)
        except (NotImplementedError, RuntimeError, TypeError):  # cannot be checked on this value
            continue
        if not bool(inside.all()):
            where = tuple(int(i) for i in (~inside).nonzero()[0])
            outside = value[where] if inside.shape == value.shape else value
            shown = outside.item() if outside.numel() == 1 else outside.tolist()
            raise ZooError(
                f"observed site {site_name!r} of model {name!r} has values outside its "
                f"support ({fn.support}): {shown!r} at index {where}, "
                f"{int((~inside).sum())} of {inside.numel()} outside"
            )
