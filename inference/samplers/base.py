"""What a kernel takes and gives back: the batched log density (:data:`Density`), the draws
(:class:`Samples`) and the loop hook (:class:`Loop`) through which it declares its steps and
reports its iterations. Nothing here knows about compiling: :class:`Loop` runs a step as
written; the driver's hook (:class:`zoo_inference.samplers.driver.DrivenLoop`) may run it
compiled."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

# theta (chains, D) -> (log density (chains,), its gradient (chains, D))
Density = Callable[[torch.Tensor], tuple[torch.Tensor, torch.Tensor]]
# a kernel's step: fn(density, *tensors) -> tensors
StepFn = Callable[..., tuple[torch.Tensor, ...]]


@dataclass
class Samples:
    """Draws on the unconstrained space and per-draw statistics, each ``(chains, draws, ...)``."""

    theta: torch.Tensor  # (chains, draws, D)
    stats: dict[str, torch.Tensor] = field(default_factory=dict)  # name -> (chains, draws)
    gradient_evals: int = 0  # density calls x chains, warmup included
    info: dict[str, float | list[float]] = field(default_factory=dict)
    # what the kernel needs to go on drawing from the last draws (its ``resume=`` option):
    # the adapted step size, metric and schedule; the driver adds the generator's state
    state: dict[str, Any] = field(default_factory=dict)


class Loop:
    """A kernel's hook into the loop that runs it. The kernel declares each step it calls once
    per iteration (or per density call) with :meth:`step` and calls what it gets back; it
    reports the iterations done with :meth:`done` (and, with :meth:`pace_from`, which of them
    show the run's pace). This form runs every step as written and reports to no one: a kernel
    called outside the driver (its tests) gets it by default."""

    def __init__(self, density: Density) -> None:
        self.density = density

    def step(
        self,
        fn: StepFn,
        eager: StepFn | None = None,
        *,
        reuse_outputs: bool = False,
        nodes: int = 0,
    ) -> Callable[..., tuple[torch.Tensor, ...]]:
        """The callable a kernel calls for its step ``fn(density, *tensors) -> tensors``.
        ``fn`` must have no Python branch on a tensor's value and take tensors of the same
        shapes and dtypes at every call (so that it can run as one compiled graph); ``eager``:
        the same step, free to branch on values to skip work (run where ``fn`` is not
        compiled); ``reuse_outputs``: the kernel is done with a call's outputs by the call
        after next; ``nodes``: about how many graph nodes ``fn`` adds to the density's (what a
        compile of it costs)."""
        run, density = eager or fn, self.density

        def call(*args: torch.Tensor) -> tuple[torch.Tensor, ...]:
            return run(density, *args)

        return call

    def done(self, iterations: int) -> None:
        """Every chain has done ``iterations`` iterations, warmup included (called after each
        iteration, or as the slowest chain advances)."""

    def pace_from(self, iterations: int) -> None:
        """Only the iterations after the first ``iterations`` show the run's pace (ChEES: its
        draws, not its warmup). Called before the first iteration."""
