"""When a traced density (and the sampler step fused through it) is worth compiling: the
constants of :meth:`inference.density.BatchedDensity.tick`'s decision, fitted on the quick
report, and the rule itself (:func:`worth_compiling`)."""

from __future__ import annotations

from ..config import config

# auto: compile when the traced density would take longer than this over the run (compiling
# costs 0.5-1 s with inductor's on-disk cache warm, a few seconds the first time on a machine)
COMPILE_AFTER_S = 3.0
# ... or when the rest of the run at its pace so far (sampler steps included, which a compiled
# sampler fuses too) would take longer than this: a cheap density can hide slow sampler steps.
COMPILE_RUN_AFTER_S = 10.0
# ... and only where the compiled run would save more than the compile costs: COMPILE_S +
# COMPILE_S_PER_NODE a node of the graph, the compiled run at COMPILED_PACE of the traced one's.
# Fitted to the quick report's sampler cells run both ways with inductor's cache empty (a warm
# cache compiles faster, so there the rule leaves some runs traced that would gain).
COMPILE_S, COMPILE_S_PER_NODE, COMPILED_PACE = 2.0, 0.015, 0.35
BARE_COMPILE_AFTER = 300  # compiled mode: density calls outside a fused step before it compiles


def auto_compile_allowed() -> bool:
    """Whether the settings leave automatic compiling on (``zoo.configure(auto_compile=...)``;
    the test suite turns it off: with inductor's cache cold a model's first compile costs
    10-20 s, more than a smoke-sized run takes on the traced graph)."""
    return config().auto_compile


def compile_cost_s(nodes: int) -> float:
    """The seconds a compile of a graph of ``nodes`` nodes is expected to take with inductor's
    cache empty."""
    return COMPILE_S + COMPILE_S_PER_NODE * nodes


def worth_compiling(spent: float, elapsed: float, done: int, total: int, cost: float) -> bool:
    """After ``done`` of ``total`` iterations that took ``elapsed`` seconds, ``spent`` of them in
    density calls: compile when the density's calls projected over the whole run exceed
    :data:`COMPILE_AFTER_S`, or the rest of the run at its pace would take more than
    :data:`COMPILE_RUN_AFTER_S`, and in either case only if the rest of the run compiled would
    save more than the compile costs (``cost`` seconds)."""
    rest = elapsed / done * (total - done)
    calls_ahead = spent / done * (total - done)
    if spent / done * total > COMPILE_AFTER_S or rest > COMPILE_RUN_AFTER_S:
        return max(rest, calls_ahead) * (1 - COMPILED_PACE) > cost
    return False
