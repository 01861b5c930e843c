"""Every sampler against the closed form, the engines passing the metric on, and bad sampler
options refused."""

from __future__ import annotations

import pytest

import zoo
from tests.sampling import agree
from tests.seeding import shifted


@pytest.mark.parametrize("chain_groups", [None, 1], ids=["a-group-a-core", "one-batch"])
@pytest.mark.parametrize("engine", ["nuts", "chees", "hmc", "mams"])
def test_samplers_match_the_closed_form(engine, chain_groups):
    """Within Monte-Carlo error of the closed form, the chains split over the cores or in one
    batch (the report's layout)."""
    e = zoo.get_model("normal_gamma")
    truth = e.ground_truth()
    run = zoo.run(
        "normal_gamma", engine, num_samples=300, warmup=300, seed=shifted(2),
        chain_groups=chain_groups,
    )  # fmt: skip
    if chain_groups:
        assert run.diagnostics["chain_groups"] == chain_groups
    for site in ("mu", "tau"):
        agree(run, truth, site)
    assert run.diagnostics["max_r_hat"] < 1.05
    assert run.diagnostics["gradient_evals"] > 0
    if engine == "chees":
        assert run.diagnostics["max_nested_r_hat"] < 1.05
        assert run.diagnostics["trajectory_length"]


@pytest.mark.parametrize(
    "engine, asked, metric",
    [("nuts", {}, False), ("nuts", {"dense_mass": True}, True), ("chees", {}, True),
     ("chees", {"dense_mass": False}, False)],
    ids=["nuts-default", "nuts-dense", "chees-default", "chees-diagonal"],
)  # fmt: skip
def test_the_engines_pass_the_metric_on(engine, asked, metric):
    """``dense_mass`` reaches the sampler: NUTS is diagonal unless asked, ChEES dense up to 100
    dimensions unless asked not to; the run's diagnostics say which it used."""
    run = zoo.run(
        "normal_gamma", engine, num_samples=20, warmup=30, num_chains=8, chain_groups=1,
        seed=shifted(3), **asked,
    )  # fmt: skip
    assert run.diagnostics["dense_mass"] is metric


def test_bad_sampler_options_are_refused():
    with pytest.raises(ValueError, match="unknown option 'backend' for engine 'nuts'"):
        zoo.run("beta_bernoulli", "nuts", backend="stan")
    with pytest.raises(ValueError, match="'chain_groups' must be a positive integer"):
        zoo.run("beta_bernoulli", "nuts", chain_groups=0)
    with pytest.raises(ValueError, match="chain_groups=3 is more groups than 2 chains make"):
        zoo.run("beta_bernoulli", "nuts", num_chains=2, chain_groups=3)
    with pytest.raises(ValueError, match="at 16 chains or more a group; at most 2 here"):
        zoo.run("beta_bernoulli", "chees", num_chains=32, chain_groups=3)
    with pytest.raises(ValueError, match="unknown option 'chain_groups' for engine 'pyro_nuts'"):
        zoo.run("beta_bernoulli", "pyro_nuts", chain_groups=2)
    with pytest.raises(ValueError, match="'jit' must be True, False or None"):
        zoo.run("beta_bernoulli", "chees", jit="yes")
