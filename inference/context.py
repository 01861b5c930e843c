"""What the runner hands to a generic engine."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from .structure import ModelStructure


@dataclass(frozen=True)
class EngineContext:
    """A model, its own guide (or None), the validated data and the model's structure; ``evaluate``
    is the model's own scoring of a fitted guide (``evaluate(**data) -> {name: number}``, with
    the fitted parameters in Pyro's param store), or None."""

    name: str
    model: Callable[..., Any]
    guide: Callable[..., Any] | None
    data: Mapping[str, Any]
    structure: ModelStructure
    seed: int = 0
    progress: bool = False
    evaluate: Callable[..., Mapping[str, Any]] | None = None
