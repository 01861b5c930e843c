"""Pyro's tensor contraction, the part of Pyro the zoo reaches inside: the log-space einsum that
sums enumerated sites out (:func:`log_einsum`, put into Pyro's contraction by
:func:`log_contraction`), the ``torch.func``-friendly settings the batched density is traced
under (:func:`functional`), and the model factors ``TraceEnum_ELBO`` contracts
(:func:`log_joint_over_plate`). Unverified Pyro or opt_einsum: Pyro's own contraction runs (and
the density, whose vmap then meets Pyro's custom autograd log, takes its per-chain form), and
:func:`log_joint_over_plate` raises (its caller sums per draw)."""

from __future__ import annotations

import contextlib
import math
import warnings
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import pyro
import pyro.ops.einsum.torch_log as torch_log
import torch

from .versions import LOG_EINSUM, MODEL_FACTORS


def plain_log(x: torch.Tensor) -> torch.Tensor:
    """log(x) with 0 -> log(tiny): Pyro's ``safe_log`` without its custom autograd Function,
    which ``torch.func`` transforms refuse."""
    return x.clamp(min=torch.finfo(x.dtype).tiny).log()


# the most elements a log-space einsum broadcasts its operands to (times the largest operand's)
# before it leaves the contraction to Pyro's own einsum (exp, einsum, log: no broadcast)
BROADCAST_LIMIT = 16


def log_einsum(equation: str, *operands: torch.Tensor) -> torch.Tensor:
    """log of ``einsum(equation, *exp(operands))``, the contraction that sums enumerated sites
    out, as one broadcast sum and a shifted log-sum-exp over the summed dimensions: fewer graph
    nodes than Pyro's (which shifts, exponentiates and permutes each operand, then runs
    ``torch.einsum`` as a batched matrix product), so faster calls. Pyro's where the equation has an
    ellipsis, an operand repeats a dimension (a diagonal) or the broadcast would hold more than
    :data:`BROADCAST_LIMIT` times the largest operand."""
    inputs, output = equation.split("->")
    terms = inputs.split(",")
    if len(terms) == 1 and terms[0] == output:
        return operands[0].clone()  # as Pyro's: a new tensor
    letters = list(output) + sorted(set(inputs) - set(output) - {","})
    sizes = dict.fromkeys(letters, 1)
    for dims, x in zip(terms, operands, strict=True):
        for d, n in zip(dims, x.shape, strict=True):
            sizes[d] = max(sizes[d], n)
    largest = max(x.numel() for x in operands)
    unsupported = "." in inputs or any(len(set(dims)) < len(dims) for dims in terms)
    if unsupported or math.prod(sizes.values()) > BROADCAST_LIMIT * max(largest, 1):
        return _pyro_log_einsum(equation, *operands)
    total = None
    for dims, x in zip(terms, operands, strict=True):
        order = sorted(range(len(dims)), key=lambda i: letters.index(dims[i]))
        if order != list(range(len(dims))):
            x = x.permute(order)
        placed = "".join(dims[i] for i in order)
        x = x.reshape([x.shape[placed.index(d)] if d in placed else 1 for d in letters])
        total = x if total is None else total + x
    assert total is not None
    summed = tuple(range(len(output), len(letters)))
    if not summed:
        return total
    # shifted by the largest term, clamped: where every term is -inf the result is the dtype's
    # most negative number, as Pyro's, not nan
    shift = total.detach().amax(summed, keepdim=True).clamp(min=torch.finfo(total.dtype).min)
    out = plain_log((total - shift).exp().sum(summed, keepdim=True)) + shift
    return out.reshape(out.shape[: len(output)])


_pyro_log_einsum = torch_log.einsum
_LOG_BACKEND = "pyro.ops.einsum.torch_log"  # the backend Pyro's LogRing contracts with


@contextlib.contextmanager
def log_contraction() -> Iterator[None]:
    """:func:`log_einsum` in the contractions that sum out enumerated sites, for the block:
    Pyro's ``LogRing`` (the potential of a model with enumerated sites) asks ``opt_einsum`` for
    its backend's functions, which keeps them (replaced there); the ``SampleRing`` of
    ``TraceEnum_ELBO`` calls Pyro's log-space einsum through its module (replaced there): the
    same values, fewer operations. Pyro's own einsum where Pyro is unverified."""
    if not LOG_EINSUM.usable():
        yield
        return
    from opt_einsum.backends import dispatch
    from pyro.ops.einsum.util import Tensordot

    keys = [("einsum", _LOG_BACKEND), ("tensordot", _LOG_BACKEND)]
    cached = {k: dispatch._cached_funcs.get(k) for k in keys}
    saved = torch_log.einsum
    dispatch._cached_funcs.update(zip(keys, (log_einsum, Tensordot(log_einsum)), strict=True))
    torch_log.einsum = log_einsum
    try:
        yield
    finally:
        torch_log.einsum = saved
        for k, fn in cached.items():
            if fn is None:
                dispatch._cached_funcs.pop(k, None)
            else:
                dispatch._cached_funcs[k] = fn


@contextlib.contextmanager
def functional() -> Iterator[None]:
    """Validation off (it branches on values), a ``torch.func``-friendly log and
    :func:`log_einsum` in the contraction (:func:`log_contraction`)."""
    saved = torch_log.safe_log
    if LOG_EINSUM.usable():
        torch_log.safe_log = plain_log
    try:
        with log_contraction(), pyro.validation_enabled(False):
            yield
    finally:
        torch_log.safe_log = saved


def log_joint_over_plate(
    model: Callable[..., Any],
    guide: Callable[..., Any],
    kwargs: Mapping[str, Any],
    nesting: int,
    plate: str,
    size: int,
) -> torch.Tensor:
    """log p of one trace of ``model(**kwargs)`` against ``guide``, its enumerated sites summed
    out and every other dimension but the plate ``plate`` (of ``size``) summed: the factors
    ``TraceEnum_ELBO`` contracts, contracted down to that plate, in float64. Raises RuntimeError
    where Pyro is unverified."""
    if not MODEL_FACTORS.usable():
        raise RuntimeError(MODEL_FACTORS.reason())
    from pyro.infer import TraceEnum_ELBO
    from pyro.infer.traceenum_elbo import _compute_model_factors
    from pyro.ops.contract import contract_to_tensor

    elbo = TraceEnum_ELBO(max_plate_nesting=nesting)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "TraceEnum_ELBO found no sample sites")
        model_trace, guide_trace = next(elbo._get_traces(model, guide, (), kwargs))
        costs, factors, _, sum_dims, scale = _compute_model_factors(model_trace, guide_trace)
        sym = model_trace.plate_to_symbol[plate]
        total = torch.zeros(size, dtype=torch.float64)
        terms = [(t, 1.0) for ts in costs.values() for t in ts]
        if factors:
            contracted = contract_to_tensor(factors, sum_dims, target_ordinal=frozenset({sym}))
            terms.append((contracted, scale))  # the common scale of enumerated sites
        for term, factor in terms:
            dims = term._pyro_dims
            if sym in dims:
                keep = dims.index(sym)
                other = [i for i in range(term.dim()) if i != keep]
                total += factor * (term.sum(other) if other else term).reshape(-1).double()
            else:
                total += factor * term.sum().double()
    return total
