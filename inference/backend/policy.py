"""When a traced density (and the sampler step fused through it) is compiled: the rule of
:meth:`zoo_inference.density.BatchedDensity.tick` (:func:`worth_compiling`) and its constants.

The rule reads counts, never the wall clock, so that the same call takes the same path (and
gives the same draws) on a quiet or a busy machine, in a worker, twice in one process. A run
counts the **work** of the graphs it calls: each call of the traced density or of a step fused
through it adds that graph's modelled seconds (:func:`call_seconds`: a price a node and a price
an element of every intermediate tensor, both fitted on this project's machines with
TorchScript running the graph). At fixed iteration counts the work so far, projected over the
run, decides: compile where it exceeds :data:`COMPILE_AFTER_S` and the rest of the run,
compiled, would save more than the compile costs (:func:`compile_cost_s`)."""

from __future__ import annotations

from collections.abc import Iterable

import torch

from ..config import config

# compile when the graphs' modelled time over the whole run exceeds this (a shorter run is over
# before a compile would pay) ...
COMPILE_AFTER_S = 3.0
# ... and only where the compiled run would save more than the compile costs: COMPILE_S +
# COMPILE_S_PER_NODE a node of the graph, the compiled run at COMPILED_PACE of the traced one's.
# Priced as a fresh process with inductor's cache empty pays it (a new user's, CI's), from the
# cold-cache runs of benchmarks/results/sampling_core_*_time_to_400.md; a warm cache compiles
# faster, so there the rule leaves some runs traced that would gain.
COMPILE_S, COMPILE_S_PER_NODE, COMPILED_PACE = 6.0, 0.03, 0.35
# a traced graph's call, as TorchScript runs it: this much a node (the interpreter's dispatch)
# and this much an element of each node's output (memory traffic and arithmetic); fitted to the
# calls of benchmarks/compile_policy.py (its results file gives the spread)
SECONDS_PER_NODE, SECONDS_PER_ELEMENT = 1.5e-6, 0.9e-9
BARE_COMPILE_AFTER = 300  # compiled mode: density calls outside a fused step before it compiles


def auto_compile_allowed() -> bool:
    """Whether the settings leave automatic compiling on (``zoo.configure(auto_compile=...)``)."""
    return config().auto_compile


def compile_cost_s(nodes: int) -> float:
    """The seconds a compile of a graph of ``nodes`` nodes is expected to take with inductor's
    cache empty."""
    return COMPILE_S + COMPILE_S_PER_NODE * nodes


def call_seconds(graph: torch.fx.GraphModule) -> float:
    """The modelled seconds of one call of a traced graph: :data:`SECONDS_PER_NODE` a node and
    :data:`SECONDS_PER_ELEMENT` an element of the tensors its nodes make (their shapes as
    ``make_fx`` recorded them)."""
    nodes = list(graph.graph.nodes)
    elements = sum(_numel(n.meta.get("val")) for n in nodes)
    return SECONDS_PER_NODE * len(nodes) + SECONDS_PER_ELEMENT * elements


def _numel(value: object) -> int:
    if isinstance(value, torch.Tensor):
        return int(value.numel())
    if isinstance(value, Iterable) and not isinstance(value, str | bytes):
        return sum(_numel(v) for v in value)
    return 0


def worth_compiling(work: float, done: int, total: int, cost: float) -> bool:
    """After ``done`` of ``total`` iterations whose graph calls made ``work`` modelled seconds:
    compile where that work projected over the run exceeds :data:`COMPILE_AFTER_S` and the rest
    of it, compiled, would save more than the compile costs (``cost`` seconds)."""
    if work / done * total <= COMPILE_AFTER_S:
        return False
    return work / done * (total - done) * (1 - COMPILED_PACE) > cost
