"""Simplify a traced density's aten graph before it runs: fold what does not depend on the
chains' point, drop operations that change nothing, and compute each value once.

``make_fx`` of ``vmap(grad_and_value(log p))`` records every operation Pyro and autograd did,
including many that give the same value at every call: copies of the model's constants and of
Python numbers (``lift_fresh_copy``, ``_to_copy(0.0)``), the log of a prior's fixed scale,
``ones_like`` seeds of the backward pass negated three times, sums of zeros. The traced graph
runs every node on every call (about a microsecond a node as TorchScript), and inductor
compiles them all. :func:`simplify` rewrites the graph in place:

- **folding**: a node whose inputs are all constants (the graph's tensor attributes, Python
  numbers, or nodes folded before it), or a ``zeros_like``/``ones_like``/``full_like`` of a
  shape the graph fixes, is computed once and becomes a constant of the graph;
- **identities**: ``neg(neg(x))``, ``x ** 1``, ``x * 1``, ``x / 1``, ``x + 0``, ``x - 0``,
  ``0 + x``, views, expands and permutations that keep the shape and strides ``x`` already
  has, and a sum over the dimension an unsqueeze added are ``x``, where the dtype and shape
  match (no broadcasting hides behind them);
- **common subexpressions**: two nodes with the same operation on the same inputs are one.

Nothing random is folded or merged, nothing an in-place operation writes to (nor the views
that lead to it) and nothing that reads such storage, so every call still gets fresh storage
where the graph mutates it; a value the graph returns is computed on each call (from folded
inputs), so a caller never holds the graph's own constant. The result computes the same
numbers up to the rounding of the constants' order of operations (and the sign of a zero:
``x + 0``); :class:`zoo_inference.density.BatchedDensity` checks it against the model's eager
density at fresh points before using it, as it checks every form. Where torch is outside the
versions this was verified on (:data:`zoo_inference.backend.versions.SIMPLIFY`), the graph is left
as traced (TorchScript then fails to trace the fused NUTS steps that benchmarks/private_paths.py
runs, an ``aten::scalar_tensor`` of a bool among their nodes, and those steps run eagerly).
"""

from __future__ import annotations

import operator
from typing import Any

import torch
from torch.fx import GraphModule, Node

from .versions import SIMPLIFY

aten = torch.ops.aten

# operations whose output is a view of their first argument (an in-place write through the view
# writes the argument)
_VIEWS = {
    aten.view.default,
    aten.expand.default,
    aten.slice.Tensor,
    aten.select.int,
    aten.unsqueeze.default,
    aten.squeeze.dim,
    aten.squeeze.dims,
    aten.squeeze.default,
    aten.permute.default,
    aten.t.default,
    aten.transpose.int,
    aten.as_strided.default,
    aten.alias.default,
    aten._reshape_alias.default,
    aten.diagonal.default,
    aten.unfold.default,
    aten.reshape.default,
    aten.unbind.int,
    aten.split.Tensor,
    aten.detach.default,
}
# views that are the identity where their output keeps the input's shape and strides (a
# permutation of the dimensions in order: hmm's graph had 113 of them); not detach, which also
# cuts autograd
_LAYOUT_VIEWS = {
    aten.view.default,
    aten._unsafe_view.default,
    aten.expand.default,
    aten.reshape.default,
    aten.permute.default,
    aten.transpose.int,
    aten.squeeze.dim,
    aten.squeeze.dims,
    aten.alias.default,
}
_FILLS = {aten.zeros_like.default: 0.0, aten.ones_like.default: 1.0}
# at most this many elements in a folded constant that is not a view (a fold must not turn a
# cheap broadcast into a large buffer held for the density's lifetime)
MAX_FOLD_NUMEL = 1 << 20


def simplify(gm: GraphModule) -> int:
    """Fold constants, drop identities and merge common subexpressions of ``gm`` (an aten
    graph from ``make_fx``) in place; returns how many nodes it removed."""
    if not SIMPLIFY.usable():
        return 0
    before = len(gm.graph.nodes)
    pinned = _written(gm.graph)
    _fold(gm, pinned)
    _identities(gm.graph, pinned)
    _merge(gm.graph, pinned)
    gm.graph.eliminate_dead_code()
    gm.graph.lint()
    gm.recompile()
    return before - len(gm.graph.nodes)


def _op(node: Node) -> Any:
    return node.target if node.op == "call_function" else None


def _pure(target: Any) -> bool:
    """An aten operation with no side effect and no randomness."""
    if not isinstance(target, torch._ops.OpOverload):
        return target is not None and getattr(target, "__module__", "") == "_operator"
    schema = target._schema
    return not schema.is_mutable and torch.Tag.nondeterministic_seeded not in target.tags


def _written(graph: torch.fx.Graph) -> set[Node]:
    """Nodes an in-place operation writes to, with the views that lead to the written node
    back to the node that owns its storage: none of them may be shared or folded."""
    pinned: set[Node] = set()
    for node in graph.nodes:
        target = _op(node)
        if not isinstance(target, torch._ops.OpOverload) or not target._schema.is_mutable:
            continue
        for arg, formal in zip(node.args, target._schema.arguments, strict=False):
            if formal.alias_info is None or not formal.alias_info.is_write:
                continue
            while isinstance(arg, Node):
                pinned.add(arg)
                through = _op(arg) in _VIEWS or _op(arg) is operator.getitem  # (unbind's parts)
                arg = arg.args[0] if through and arg.args else None
    return pinned


def _value(arg: Any, consts: dict[Node, Any]) -> Any:
    return torch.fx.node.map_arg(arg, lambda n: consts[n])


def _fold(gm: GraphModule, pinned: set[Node]) -> None:
    graph = gm.graph
    consts: dict[Node, Any] = {}
    for node in graph.nodes:
        if node.op == "get_attr" and node not in pinned:
            value = _attr(gm, node.target)
            if isinstance(value, torch.Tensor):
                consts[node] = value
            continue
        target = _op(node)
        if target is None or node in pinned or not _pure(target):
            continue
        if target in _FILLS or target is aten.full_like.default:
            val = node.meta.get("val")
            if not isinstance(val, torch.Tensor) or any(not isinstance(s, int) for s in val.shape):
                continue
            fill = _FILLS.get(target, node.args[1] if len(node.args) > 1 else None)
            if not isinstance(fill, int | float | bool):
                continue
            consts[node] = torch.full(val.shape, fill, dtype=val.dtype, device=val.device)
            continue
        inputs = node.all_input_nodes
        if not all(n in consts for n in inputs):
            continue
        try:
            result = target(*_value(node.args, consts), **_value(node.kwargs, consts))
        except Exception:  # noqa: BLE001 - an operation that cannot run here stays in the graph
            continue
        if isinstance(result, torch.Tensor):
            if result.numel() > MAX_FOLD_NUMEL and target not in _VIEWS:
                continue
            consts[node] = result
        elif isinstance(result, tuple | list) and all(isinstance(r, torch.Tensor) for r in result):
            consts[node] = tuple(result)
    # a value the graph returns is still computed (from folded inputs) on each call: a caller
    # gets a tensor of its own, never the graph's constant
    for node in list(consts):
        if any(u.op == "output" for u in node.users):
            del consts[node]
    # replace the folded nodes that something not folded uses by constants
    count = 0
    for node in list(consts):
        if node.op == "get_attr" or not isinstance(consts[node], torch.Tensor):
            continue
        if all(u in consts for u in node.users):
            continue
        name = f"_folded_{count}"
        count += 1
        setattr(gm, name, consts[node])
        with graph.inserting_before(node):
            attr = graph.create_node("get_attr", name)  # a plain tensor attribute, as make_fx's
        attr.meta = dict(node.meta)
        node.replace_all_uses_with(attr, delete_user_cb=lambda u: u not in consts)


def _attr(gm: GraphModule, target: str) -> Any:
    obj: Any = gm
    for part in target.split("."):
        obj = getattr(obj, part)
    return obj


def _same(node: Node, arg: Any) -> bool:
    """``node`` has the shape, dtype and strides of ``arg`` (a node): replacing it changes
    nothing its users see."""
    a, b = node.meta.get("val"), getattr(arg, "meta", {}).get("val")
    return (
        isinstance(a, torch.Tensor)
        and isinstance(b, torch.Tensor)
        and a.shape == b.shape
        and a.dtype == b.dtype
        and a.stride() == b.stride()
    )


def _identity_of(node: Node) -> Node | None:
    """The node ``node`` equals (an argument of it), if it is an identity operation."""
    target, args = _op(node), node.args
    if target is None or not args or not isinstance(args[0], Node) or node.kwargs:
        return None
    x = args[0]
    other = args[1] if len(args) > 1 else None
    if target is aten.neg.default and _op(x) is aten.neg.default and isinstance(x.args[0], Node):
        x = x.args[0]
    elif target in (aten.mul.Tensor, aten.mul.Scalar, aten.div.Tensor, aten.div.Scalar):
        if not _is(other, 1.0):
            return None
    elif target in (aten.add.Tensor, aten.add.Scalar, aten.sub.Tensor, aten.sub.Scalar):
        if target is aten.add.Tensor and _is(x, 0.0) and isinstance(other, Node):
            x = other
        elif len(args) != 2 or not _is(other, 0.0):
            return None
    elif target is aten.pow.Tensor_Scalar:
        if not _is(other, 1.0):
            return None
    elif target is aten.sum.dim_IntList:
        # the sum over a dimension an unsqueeze added: the unsqueezed tensor
        if (
            _op(x) is not aten.unsqueeze.default
            or len(args) != 2
            or not isinstance(x.args[0], Node)
        ):
            return None
        rank = x.meta["val"].dim() if isinstance(x.meta.get("val"), torch.Tensor) else None
        dims = other if isinstance(other, list | tuple) else None  # sum's dims: a list
        if rank is None or dims is None or [d % rank for d in dims] != [x.args[1] % rank]:
            return None
        x = x.args[0]
    elif target not in _LAYOUT_VIEWS:
        return None
    return x if _same(node, x) else None


def _is(arg: Any, number: float) -> bool:
    """``arg`` is the Python number, or a constant tensor whose every element is it (a zero of
    either sign: ``x + 0`` is ``x`` but for the sign of a zero ``x``)."""
    if isinstance(arg, bool):
        return False
    if isinstance(arg, int | float):
        return float(arg) == number
    module = arg.graph.owning_module if isinstance(arg, Node) else None
    if isinstance(arg, Node) and arg.op == "get_attr" and module and isinstance(arg.target, str):
        value = _attr(module, arg.target)
        return (
            isinstance(value, torch.Tensor)
            and value.numel() <= 64
            and bool((value == number).all())
        )
    return False


def _identities(graph: torch.fx.Graph, pinned: set[Node]) -> None:
    for node in list(graph.nodes):
        if node in pinned:
            continue
        same = _identity_of(node)
        if same is not None and same not in pinned:
            node.replace_all_uses_with(same)


def _merge(graph: torch.fx.Graph, pinned: set[Node]) -> None:
    """Common subexpressions: a pure node equal to an earlier one (same operation, inputs and
    options) is replaced by it."""
    seen: dict[Any, Node] = {}
    for node in list(graph.nodes):
        target = _op(node)
        if target is None or node in pinned or not _pure(target):
            continue
        if any(n in pinned for n in node.all_input_nodes):
            continue  # it reads storage written in place: equal nodes may read different values
        try:
            key = (target, _key(node.args), _key(tuple(sorted(node.kwargs.items()))))
            hash(key)
        except TypeError:
            continue
        if key in seen:
            node.replace_all_uses_with(seen[key])
        else:
            seen[key] = node


def _key(x: Any) -> Any:
    if isinstance(x, list | tuple):
        return (type(x).__name__, tuple(_key(v) for v in x))
    if isinstance(x, float):
        return ("float", x, str(x))  # 0.0 and -0.0 differ
    if isinstance(x, torch.dtype | torch.device | torch.memory_format | torch.layout):
        return str(x)
    return x
