"""Heavy checks (`make test-slow`): long chains against the exact answers, tighter tolerances."""

import numpy as np
import pytest

import zoo
from tests.seeding import shifted

pytestmark = pytest.mark.slow


def test_three_coin_long_nuts_matches_quadrature_truth():
    truth = zoo.get_model("three_coin").ground_truth()
    run = zoo.run("three_coin", "nuts", num_samples=1000, warmup=1000, num_chains=4, jit=True)
    for row, (mean, sd) in truth.rows().items():
        r = run.summary.loc[row]
        assert r["mean"] == pytest.approx(mean, abs=4 * sd / np.sqrt(r["ess_bulk"])), row
        assert r["sd"] == pytest.approx(sd, rel=0.08), row
    assert run.diagnostics["max_r_hat"] < 1.01


def test_beta_bernoulli_long_hmc_and_svi_match_closed_form():
    truth = zoo.get_model("beta_bernoulli").ground_truth()
    run = zoo.run("beta_bernoulli", "hmc", num_samples=2000, warmup=1000, num_chains=4)
    r = run.summary.loc["p"]
    assert r["mean"] == pytest.approx(
        truth.mean["p"], abs=4 * truth.sd["p"] / np.sqrt(r["ess_bulk"])
    )
    assert r["sd"] == pytest.approx(truth.sd["p"], rel=0.05)
    svi = zoo.run("beta_bernoulli", "svi", num_steps=5000, num_samples=20000, jit=True)
    # MC error of 20000 draws is 0.001; Adam's noise at the final rate (0.005) moves the fitted
    # Beta(alpha, beta) by about 1%, i.e. up to ~0.007 in the mean
    assert svi.summary.loc["p", "mean"] == pytest.approx(truth.mean["p"], abs=0.01)
    assert svi.summary.loc["p", "sd"] == pytest.approx(truth.sd["p"], abs=0.01)
    assert svi.diagnostics["is_log_evidence"] == pytest.approx(truth.log_evidence, abs=0.002)


def test_full_report_over_the_zoo(tmp_path):
    index = zoo.report(out=tmp_path / "r", profile="quick")
    html = index.read_text()
    for name in zoo.list_models():
        if zoo.get_model(name).opt_in:  # benchmark targets run when named
            assert f"{name}.html" not in html
            continue
        assert f"{name}.html" in html
        assert (tmp_path / "r" / f"{name}.json").exists()


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_gaussian_mixture_chees_converges_at_seeds_that_trapped_chains(seed):
    """Before chains stuck far below the others were restarted in warmup, ChEES on
    gaussian_mixture gave R-hat 1.9-4.0 at these seeds (chains in a one-wide-component basin
    150 nats down held the shared step size at 0.1-0.2); with restarts R-hat is 1.00 at seeds
    0-7. Its nuts run is the reference."""
    seed = shifted(seed)
    run = zoo.run("gaussian_mixture", "chees", seed=seed)
    ref = zoo.run("gaussian_mixture", "nuts", seed=seed, num_samples=500, warmup=500)
    assert run.diagnostics["max_r_hat"] < 1.01
    assert run.diagnostics["min_ess_bulk"] > 1000
    for row in ("locs[0]", "locs[1]", "weights[0]"):
        a, b = run.summary.loc[row], ref.summary.loc[row]
        se = np.hypot(a["sd"] / np.sqrt(a["ess_bulk"]), b["sd"] / np.sqrt(b["ess_bulk"]))
        assert a["mean"] == pytest.approx(b["mean"], abs=5 * se), row
