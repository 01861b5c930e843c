"""cmp.table: a row per parameter and engine, the truth's (or, for a model without one, the
report's reference run's) first; cmp.table_wide keeps a row per parameter."""

from __future__ import annotations

import numpy as np
import pyro
import pyro.distributions as dist
import pytest
import torch

import zoo


def test_the_long_table_puts_the_truth_first() -> None:
    cmp = zoo.compare("normal_normal", ["exact", "laplace"], num_samples=300, progress=False)
    t = cmp.table
    assert t.index.names == ["parameter", "engine"] and list(t.columns) == [
        "mean",
        "sd",
        "error_in_sds",
    ]
    params = list(cmp.table_wide.index)
    assert list(t.index) == [(p, e) for p in params for e in ("truth", "exact", "laplace")]
    for p in params:
        assert t.loc[(p, "truth"), "mean"] == cmp.table_wide.loc[p, ("truth", "mean")]
        assert t.loc[(p, "laplace"), "error_in_sds"] == pytest.approx(
            cmp.table_wide.loc[p, ("laplace", "error_in_sds")]
        )
    assert cmp.reference is None


def test_a_model_without_a_truth_is_compared_against_the_reports_reference(registry) -> None:
    y = torch.tensor([0.3, -0.1, 0.8, 0.4, 0.2])

    @zoo.register(data={"y": y})
    def no_truth(y):
        m = pyro.sample("m", dist.Normal(0.0, 10.0))
        with pyro.plate("n", len(y)):
            pyro.sample("y", dist.StudentT(3.0, m, 0.5), obs=y)

    cmp = zoo.compare(
        no_truth,
        ["nuts", "laplace"],
        nuts={"num_samples": 300, "warmup": 300, "num_chains": 2},
        progress=False,
    )
    assert cmp.truth is None and cmp.reference == "nuts"
    assert list(cmp.table.index) == [("m", "nuts (reference)"), ("m", "laplace")]
    ref, lap = cmp.table.loc[("m", "nuts (reference)")], cmp.table.loc[("m", "laplace")]
    assert ref["mean"] == cmp.table_wide.loc["m", ("nuts", "mean")] and np.isnan(
        ref["error_in_sds"]
    )
    assert lap["error_in_sds"] == pytest.approx(abs(lap["mean"] - ref["mean"]) / ref["sd"])
    assert np.isnan(cmp.table_wide.loc["m", ("truth", "mean")])  # the wide table keeps no truth
