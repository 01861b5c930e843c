"""Tracing a function of tensors into an aten graph (``make_fx``) and the rewrites the density's
graph gets before it runs: failed factorisations as NaN here, constant folding and the rest in
:mod:`zoo_inference.backend.simplify`."""

from __future__ import annotations

import math
import operator
from collections.abc import Callable
from typing import Any

import torch
from torch.fx.experimental.proxy_tensor import make_fx as _torch_make_fx

from .versions import FAILED_FACTOR, ONE_FAKE_MODE


def make_fx(fn: Callable[..., Any], **kwargs: Any) -> Callable[..., torch.fx.GraphModule]:
    """torch's ``make_fx``, with the fake values it records on the graph's nodes all made in one
    fake mode. Left to itself, tracing real tensors makes a fake mode for each node, each keeping
    the stack it was made on: slower builds and objects the garbage collector walks again and
    again. torch's own where unverified."""
    trace = _torch_make_fx(fn, **kwargs)
    if not ONE_FAKE_MODE.usable():
        return trace
    from torch._guards import TracingContext, tracing
    from torch._subclasses.fake_tensor import FakeTensorMode

    def traced(*args: Any) -> torch.fx.GraphModule:
        if TracingContext.try_get() is not None:  # one is set: its fake mode is used
            return trace(*args)
        with tracing(TracingContext(FakeTensorMode(allow_non_fake_inputs=True))):
            return trace(*args)

    return traced


def failed_factor_as_nan(graph: torch.fx.GraphModule) -> None:
    """Rewrite each ``_linalg_check_errors(info)`` of ``graph`` (a Cholesky, solve or inverse of
    a matrix that is singular or not positive definite raises there) as NaN in that
    factorisation's outputs, for the batch elements whose ``info`` is not 0. The chain's log
    density and gradient become NaN, which the density turns into a rejected point: what the
    per-chain fallback does after the error, without the error. It matters where the check
    runs: in an inductor-compiled graph and the FX graph (TorchScript's trace drops the check).
    Unverified, the checks stay (a failed factorisation raises there, and the density evaluates
    that batch one chain at a time; a compiled sampler step falls back to its eager form; the
    price of such a call is in benchmarks/results/private_paths.md)."""
    if not FAILED_FACTOR.usable():
        return
    check = torch.ops.aten._linalg_check_errors.default
    g = graph.graph
    checks = [n for n in g.nodes if n.target is check and n.args[0].target is operator.getitem]
    for node in checks:
        # the factorisation's outputs are unpacked (getitem) before its check, and used after
        info = node.args[0]
        info_shape = info.meta["val"].shape
        with g.inserting_before(node):
            bad = g.call_function(torch.ops.aten.ne.Scalar, (info, 0))
        for out in list(info.args[0].users):
            val = out.meta.get("val")
            if out is info or not isinstance(val, torch.Tensor) or not val.is_floating_point():
                continue
            with g.inserting_before(node):
                shape = [*info_shape, *([1] * (val.ndim - len(info_shape)))]
                mask = g.call_function(torch.ops.aten.view.default, (bad, shape))
                nan = g.call_function(torch.ops.aten.masked_fill.Scalar, (out, mask, math.nan))
            out.replace_all_uses_with(nan, delete_user_cb=lambda user, nan=nan: user is not nan)
        g.erase_node(node)
    if checks:
        g.lint()  # an output used before its check would be used before defined: raises here
        graph.recompile()
