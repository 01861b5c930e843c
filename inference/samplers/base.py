"""What a kernel takes and gives back: the batched log density (:data:`Density`), the draws
(:class:`Samples`), the loop hook (:class:`Loop`) through which it declares its steps and
reports its iterations, and :class:`PackedState`, the named record a kernel keeps its chains'
state in, packed into a few tensors for a compiled step. Nothing here knows about compiling:
:class:`Loop` runs a step as written; the driver's hook
(:class:`zoo_inference.samplers.driver.DrivenLoop`) may run it compiled."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Self, get_type_hints

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
    info: dict[str, Any] = field(default_factory=dict)  # step sizes, metric kind, ...
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


class PackedState:
    """A kernel's per-chain state as a named record: a dataclass (``slots=True``) whose fields
    are annotated ``Annotated[torch.Tensor, kind]``, the kind naming its shape and dtype
    (``"vector"``: (chains, D), ...). A compiled step's call costs per tensor passed in and
    out, so the state crosses it packed: one tensor a kind (:meth:`pack`), its fields stacked
    in declaration order; :meth:`unpack` gives the record back as views. The packing is derived
    from the fields: a new field is one annotated line."""

    __slots__ = ()

    @classmethod
    def layout(cls) -> tuple[tuple[str, ...], ...]:
        """The fields' names grouped by kind, the kinds in order of first appearance."""
        return _layout(cls)

    @classmethod
    def kinds(cls) -> tuple[str, ...]:
        """The kinds, in the order of :meth:`layout`'s groups."""
        return tuple(_kind_of(cls)[names[0]] for names in _layout(cls))

    def pack(self) -> tuple[torch.Tensor, ...]:
        """One tensor a kind: its fields stacked along a new first dimension."""
        layout = _layout(type(self))
        return tuple(torch.stack([getattr(self, n) for n in names]) for names in layout)

    @classmethod
    def unpack(cls, packed: Sequence[torch.Tensor]) -> Self:
        """The record of :meth:`pack`'s tensors (each field a view into its kind's tensor)."""
        layout = _layout(cls)
        if len(packed) != len(layout):
            raise ValueError(f"{cls.__name__} packs into {len(layout)} tensors, not {len(packed)}")
        return cls(
            **{
                name: t for names, group in zip(layout, packed, strict=True)
                for name, t in zip(names, group.unbind(0), strict=True)
            }
        )  # fmt: skip

    @classmethod
    def zeros(cls, shapes: Mapping[str, tuple[tuple[int, ...], torch.dtype]]) -> Self:
        """Every field zero, each kind of the shape and dtype ``shapes`` gives it."""
        missing = sorted(set(cls.kinds()) - set(shapes))
        if missing:
            raise ValueError(f"{cls.__name__}: no shape given for the kinds {missing}")
        return cls.unpack(
            [
                torch.zeros(len(names), *shapes[kind][0], dtype=shapes[kind][1])
                for names, kind in zip(_layout(cls), cls.kinds(), strict=True)
            ]
        )


_KINDS: dict[type, dict[str, str]] = {}  # a record class's fields and their kinds
_LAYOUTS: dict[type, tuple[tuple[str, ...], ...]] = {}


def _kind_of(cls: type) -> dict[str, str]:
    if cls in _KINDS:
        return _KINDS[cls]
    hints = get_type_hints(cls, include_extras=True)
    kinds = {}
    for f in dataclasses.fields(cls):
        meta = getattr(hints[f.name], "__metadata__", ())
        if not meta or not isinstance(meta[0], str):
            raise TypeError(f"{cls.__name__}.{f.name}: annotate it Annotated[torch.Tensor, kind]")
        kinds[f.name] = meta[0]
    _KINDS[cls] = kinds
    return kinds


def _layout(cls: type) -> tuple[tuple[str, ...], ...]:
    if cls not in _LAYOUTS:
        groups: dict[str, list[str]] = {}
        for name, kind in _kind_of(cls).items():
            groups.setdefault(kind, []).append(name)
        _LAYOUTS[cls] = tuple(tuple(names) for names in groups.values())
    return _LAYOUTS[cls]
