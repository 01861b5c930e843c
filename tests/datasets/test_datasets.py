"""Bundled data and the prior-predictive generator."""

import numpy as np
import pytest
import torch

import zoo
from tests.seeding import shifted
from zoo_datasets import load_faithful


def test_faithful_is_rs_dataset():
    df = load_faithful()
    assert df.shape == (272, 2) and list(df.columns) == ["eruptions", "waiting"]
    assert df["waiting"].mean() == pytest.approx(70.897059, abs=1e-6)  # R: mean(faithful$waiting)


def test_prior_predictive_keeps_shapes_and_truth():
    entry = zoo.get_model("three_coin")
    data, truth = entry.simulate(seed=shifted(3))
    assert set(truth) == {"pi", "p", "q", "z"}
    y = data["y"]
    assert y.shape == (10,) and y.dtype == torch.float32 and set(y.unique().tolist()) <= {0, 1}
    z = truth["z"]
    # y_j was tossed with coin B where z_j = 1 and coin C elsewhere: same seed, same draw
    again, truth2 = entry.simulate(seed=shifted(3))
    assert torch.equal(again["y"], y) and torch.equal(truth2["z"], z)
    assert zoo.run("three_coin", "em", data=data).ok


def test_prior_predictive_recovers_parameters_on_large_data():
    """beta_bernoulli: with 4000 synthetic tosses the exact posterior mean is within 4 sd of p."""
    entry = zoo.get_model("beta_bernoulli")
    template = {**entry.load_data(), "y": torch.zeros(4000)}
    with zoo.isolated():
        big = zoo.register("bb_big", model=entry.model, data=template)
        data, truth = big.simulate(seed=shifted(0))
    post = entry.ground_truth(data)
    assert abs(post.mean["p"] - float(truth["p"])) < 4 * post.sd["p"]
    assert np.isclose(float(data["y"].mean()), float(truth["p"]), atol=0.05)
