"""When a traced density (and the sampler step fused through it) is worth compiling: the
constants of :meth:`inference.density.BatchedDensity.tick`'s decision, fitted on the quick
report, and the rule itself (:func:`worth_compiling`)."""

from __future__ import annotations

from ..config import config

# auto: compile when the traced density would take longer than this over the run (compiling
# costs 0.5-1 s with inductor's on-disk cache warm, a few seconds the first time on a machine)
COMPILE_AFTER_S = 3.0
# ... or when the rest of the run at its pace so far (sampler steps included, which a compiled
# sampler fuses too) would take longer than this. linear_gaussian_ssm's sampled states: the
# density's own time stayed under the first rule while NUTS's eager tree steps (2 ms each, the
# density 0.6 ms of it) ran 310 s in the quick report; compiled by the pace of the run, 82 s.
COMPILE_RUN_AFTER_S = 10.0
# ... and only where the compiled run would save more than the compile costs. A compile's cost
# grows with the graph: COMPILE_S + COMPILE_S_PER_NODE a node of the density's graph, and the
# compiled run goes at COMPILED_PACE of the traced one's. Fitted to the quick report's 56
# sampler cells run both ways on a 2-core machine with inductor's cache empty (hmm's NUTS: its
# 2365-node graph compiled in 54.6 s for a 64.5 s cell, 28.1 s traced; linear_regression's
# 187 nodes in 6.3 s for 17.4 s, 40.6 s traced): all compiled, they took 776 s; each in its
# faster form, 636. In the next cold report 7 cells stayed traced and the samplers' cells took
# 808 s against 869; ChEES, whose early warmup iterations are its slowest, now asks from the
# end of warmup (samplers.chees), and no ChEES cell of that report compiles (169 s -> 118).
# A warm cache compiles about five times faster, so there the rule leaves some runs traced
# that would gain.
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
