"""The result types every engine shares: :class:`Run` and :class:`GroundTruth`."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd


class ZooError(ValueError):
    """A wrong call: unknown name, bad data or bad option. Raised before any work starts."""


class NumericalFailure(RuntimeError):
    """An engine ran but its numbers are unusable (NaN ELBO, every transition divergent, ...)."""


@dataclass
class Run:
    """One engine run on one model.

    ``idata`` is an ``arviz.InferenceData`` whose ``posterior`` group is named by latent sites;
    ``summary`` is indexed like ``arviz.summary``; ``diagnostics`` always has ``wall_time_s``.
    A failed run has ``status == "failed"``, ``error`` set and ``idata`` None.
    """

    engine: str
    idata: Any = None
    summary: pd.DataFrame = field(default_factory=pd.DataFrame)
    diagnostics: dict[str, Any] = field(default_factory=dict)
    log_evidence: float | None = None
    model: str = ""
    seed: int = 0
    options: dict[str, Any] = field(default_factory=dict)
    status: str = "ok"
    error: str | None = None
    extras: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    def __repr__(self) -> str:
        state = "ok" if self.ok else f"failed: {self.error}"
        wall = self.diagnostics.get("wall_time_s")
        wall_s = f", {wall:.2f}s" if wall is not None else ""
        return f"Run({self.model!r}, {self.engine!r}, {state}{wall_s})"


@dataclass
class GroundTruth:
    """What a model knows exactly about its posterior.

    ``mean`` / ``sd`` map a parameter name as it appears in ``Run.summary`` (``"pi"``, ``"z[3]"``)
    to its exact posterior mean / standard deviation. ``log_evidence`` is log p(data) when known.
    ``density`` maps a parameter to a function ``x -> pdf(x)`` (exact marginal density, used by
    the figures). ``source`` says where the numbers come from.
    """

    mean: dict[str, float]
    sd: dict[str, float]
    log_evidence: float | None = None
    density: dict[str, Callable[[np.ndarray], np.ndarray]] = field(default_factory=dict)
    source: str = "closed form"
