"""What the density, backend and sampler tests share: the compiler mark, NUTS's test depth, a
density that records its compiles, one that records its pace, and a mean's agreement with the
truth."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import zoo
from zoo_inference.backend import has_compiler
from zoo_inference.density import batched_density

needs_compiler = pytest.mark.skipif(not has_compiler(), reason="no C compiler")

# NUTS's trees on a correlated Gaussian under the first windows' unit metric reach the depth
# limit: the tests cap them at 6, which the checks of mixing do not need more than
NUTS_TEST_DEPTH = {"max_tree_depth": 6}


def counting(monkeypatch: pytest.MonkeyPatch, configured):  # noqa: ANN001, ANN201
    """beta_bernoulli's density in traced mode with automatic compiling on, and a list that
    records each compile instead of making it."""
    e = zoo.get_model("beta_bernoulli")
    d = batched_density(e.model, e.load_data(), e.structure, 2)
    compiled: list[int] = []
    monkeypatch.setattr(d, "_to_compiled", lambda graph: compiled.append(1) or ("compiled", d._fn))
    configured(auto_compile=True)
    return d, compiled


class PaceRecorder:
    """A standard normal's density that records what a sampler tells it of its pace:
    ``"restart"`` for ``restart_pace``, ``(iteration, total)`` for each ``tick``."""

    def __init__(self) -> None:
        self.events: list[object] = []

    def __call__(self, q: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return -0.5 * (q * q).sum(-1), -q

    def restart_pace(self) -> None:
        self.events.append("restart")

    def tick(self, iteration: int, total: int) -> None:
        self.events.append((iteration, total))


def agree(run: zoo.Run, truth: zoo.GroundTruth, site: str, k: float = 4.5) -> None:
    """|mean - truth| within k Monte-Carlo standard errors (the run's own ESS)."""
    row = run.summary.loc[site]
    mcse = truth.sd[site] / np.sqrt(row["ess_bulk"])
    assert abs(row["mean"] - truth.mean[site]) <= k * mcse, (run.engine, site, row["mean"])
