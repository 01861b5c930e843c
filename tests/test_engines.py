"""The generic engines' options: every ELBO and autoguide against a known posterior."""

import numpy as np
import pytest

import zoo
from inference import inspect_model

BB = zoo.get_model("beta_bernoulli").ground_truth()  # Beta(8, 4)
TC = zoo.get_model("three_coin").ground_truth()


@pytest.mark.parametrize(
    "elbo, particles",
    [("trace", 1), ("meanfield", 1), ("graph", 1), ("iwae", 4), ("renyi", 4)],
)
def test_every_elbo_fits_the_conjugate_guide(elbo, particles):
    run = zoo.run(
        "beta_bernoulli",
        "svi",
        elbo=elbo,
        num_particles=particles,
        num_steps=1000,
        num_samples=1000,
        seed=0,
    )
    assert run.diagnostics["elbo_kind"] == elbo
    se = BB.sd["p"] / np.sqrt(1000)
    assert run.summary.loc["p", "mean"] == pytest.approx(BB.mean["p"], abs=4 * se + 0.02)
    if particles == 1:  # the KL-optimal member of the conjugate family is the posterior
        assert run.summary.loc["p", "sd"] == pytest.approx(BB.sd["p"], abs=0.025)
    else:  # importance-weighted bounds are optimised by an over-dispersed proposal
        assert BB.sd["p"] - 0.01 < run.summary.loc["p", "sd"] < 1.6 * BB.sd["p"]
    assert run.log_evidence <= BB.log_evidence + 4 * 0.01


@pytest.mark.parametrize("guide", ["normal", "mvn", "lowrank", "flow"])
def test_autoguides_on_three_coin(guide):
    run = zoo.run(
        "three_coin",
        "svi",
        guide=guide,
        num_steps=600,
        num_samples=400,
        jit=guide != "flow",
        seed=1,
    )
    assert run.diagnostics["guide"] == guide and run.diagnostics["elbo_kind"] == "enum"
    for row in ("pi", "p", "q"):
        # Gaussian families in the logit space land within a posterior sd of the exact mean
        assert abs(run.summary.loc[row, "mean"] - TC.mean[row]) < TC.sd[row], row
        assert 0.3 * TC.sd[row] < run.summary.loc[row, "sd"] < 1.5 * TC.sd[row], row
    assert run.log_evidence < TC.log_evidence
    assert run.idata.posterior["z"].shape == (1, 400, 10)


def test_mcmc_same_seed_same_numbers():
    kw = dict(num_samples=30, warmup=20, num_chains=2)
    a = zoo.run("beta_bernoulli", "nuts", seed=5, **kw)
    b = zoo.run("beta_bernoulli", "nuts", seed=5, **kw)
    np.testing.assert_array_equal(a.idata.posterior["p"].values, b.idata.posterior["p"].values)


def test_inspect_model_classifies_sites():
    entry = zoo.get_model("gaussian_mixture")
    s = inspect_model(entry.model, entry.load_data())
    assert s.continuous == ("weights", "locs", "scales")
    assert s.discrete == ("z",) and s.observed == ("y",) and s.max_plate_nesting == 1
    assert s.shapes["z"] == (272,) and s.shapes["locs"] == (2,)


@pytest.mark.parametrize("name", ["three_coin", "gaussian_mixture"])
def test_vectorised_helpers_equal_the_per_draw_ones(name):
    """The plate-over-draws versions of log p(y, theta) (discrete sites summed out) and of the
    MAP assignment give the same numbers as one draw at a time."""
    import pyro
    import torch

    from inference.contraction import log_joint_batch
    from inference.discrete import _draw_batch, _draw_each, log_joint
    from inference.replay import batched

    entry = zoo.get_model(name)
    data, s = entry.load_data(), entry.structure
    n = 7
    torch.manual_seed(0)
    with torch.no_grad():
        prior = pyro.poutine.trace(batched(entry.model, n, -2)).get_trace(**data)
    draws = {k: prior.nodes[k]["value"].reshape((n,) + s.shapes[k]) for k in s.continuous}
    batch = log_joint_batch(entry.model, data, draws, n, s)
    each = [log_joint(entry.model, data, {k: v[i] for k, v in draws.items()}, 1) for i in range(n)]
    np.testing.assert_allclose(batch, each, rtol=1e-5)
    a = _draw_batch(entry.model, data, draws, n, s, s.discrete, 0)
    b = _draw_each(entry.model, data, draws, n, s, s.discrete, 0)
    np.testing.assert_array_equal(a["z"], b["z"])
