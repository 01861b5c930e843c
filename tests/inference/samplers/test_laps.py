"""LAPS, MAMS's ensemble warmup (``inference/samplers/laps.py``, ``mams`` with
``tuning="laps"``): exactness on an ill-scaled, correlated Gaussian with every gradient counted,
the zoo's and the Gym's ground truths, simulation-based calibration, the default tuning left as
it was, and the option's error. Tolerances are Monte-Carlo errors from each run's own ESS:
every assertion holds for any seed but about one in a million."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import zoo
from tests.inference.samplers.test_mams import SCALES, K, ess_of, gaussian, sbc_ranks
from tests.seeding import shifted
from zoo.calibrate import sbc
from zoo_inference import sbc as calibration
from zoo_inference.samplers import Loop, mams_laps
from zoo_inference.samplers.laps import Bisection
from zoo_inference.samplers.laps import mams_laps as laps_kernel


class Counted:
    """``gaussian``, counting the chains' gradients it evaluates."""

    def __init__(self) -> None:
        self.rows = 0

    def __call__(self, q: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        self.rows += q.shape[0]
        return gaussian(q)


def test_exact_on_an_ill_scaled_correlated_gaussian_with_every_gradient_counted():
    """Means and variances within Monte-Carlo error; the tuned acceptance near the target; the
    density's own count of gradients is the run's, and the draws' share is 32 a step."""
    gen = torch.Generator().manual_seed(shifted(10))
    q0 = torch.rand(32, 5, generator=gen, dtype=torch.float64) * 4 - 2
    density = Counted()
    s = laps_kernel(
        density, q0, num_samples=300, warmup=1000, gen=gen, loop=Loop(density)
    )  # fmt: skip
    x = s.theta.numpy()
    sd = SCALES.numpy()
    mean_se = sd / np.sqrt(ess_of(x))
    assert (np.abs(x.mean((0, 1))) <= K * mean_se).all(), (x.mean((0, 1)), mean_se)
    sq = x**2
    var_se = np.sqrt(2) * sd**2 / np.sqrt(ess_of(sq))
    assert (np.abs(sq.mean((0, 1)) - sd**2) <= K * var_se).all(), (sq.mean((0, 1)), var_se)
    assert 0.6 < float(s.stats["accept"].mean()) < 0.99
    assert s.gradient_evals == density.rows
    draws = 32 * (int(s.stats["n_steps"][0].sum()) + 1)  # the resumed start's one call
    warm = s.info["warmup_gradient_evals"]
    assert warm == s.gradient_evals - draws
    # the first call, the burn-in's steps and the adjusted phase's 500 // 15 draws of 15 steps
    assert warm == 32 * (1 + s.info["burn_in_steps"] + (500 // 15) * 15)
    assert 1 <= s.info["burn_in_steps"] <= 500
    assert set(s.state) == {"step_size", "trajectory_length", "inv_mass", "iterations"}


def test_the_bisection_brackets_then_halves_and_keeps_the_step_that_met_the_target():
    """Doubling until bracketed, then the middle in log; an acceptance near the target but no
    better known than the tolerance does not stop it, one known to be near does."""
    noisy = Bisection(0.8)
    assert noisy.update(1.0, 0.81, 0.05) == pytest.approx(2.0) and not noisy.done
    b = Bisection(0.8)
    assert b.update(1.0, 0.95) == pytest.approx(2.0)  # too cautious: double
    assert b.update(2.0, 0.99) == pytest.approx(4.0)
    assert b.update(4.0, 0.3) == pytest.approx(np.sqrt(8.0))  # bracketed: the middle in log
    assert b.update(np.sqrt(8.0), 0.81, 0.01) == pytest.approx(np.sqrt(8.0))  # within: kept
    assert b.update(np.sqrt(8.0), 0.1) == pytest.approx(np.sqrt(8.0))  # and stays


@pytest.mark.parametrize(
    ("model", "options"),
    [
        ("normal_normal", {"num_samples": 300, "warmup": 400, "num_chains": 16}),
        ("eight_schools_noncentered", {"num_samples": 300, "warmup": 600, "num_chains": 16}),
    ],
)
def test_the_zoos_ground_truths(model, options):
    """Every element's mean within K Monte-Carlo standard errors of the model's truth."""
    truth = zoo.get_model(model).ground_truth()
    run = zoo.run(model, "mams", seed=3, chain_groups=1, tuning="laps", **options)
    assert run.ok and run.diagnostics["divergences"] == 0
    for row, (t_mean, t_sd) in truth.rows().items():
        got = run.summary.loc[row]
        assert abs(got["mean"] - t_mean) <= K * t_sd / np.sqrt(got["ess_bulk"]), (row, got)
    assert run.diagnostics["max_r_hat"] < 1.05
    assert 0 < run.diagnostics["warmup_gradient_evals"] < run.diagnostics["gradient_evals"]


@pytest.mark.slow
def test_the_gyms_ill_conditioned_gaussian():
    """The Gym's 100-dimensional Gaussian (condition number 10^4): every coordinate's mean and
    sd within K Monte-Carlo standard errors of the published truth."""
    truth = zoo.get_model("gym_ill_conditioned_gaussian").ground_truth()
    run = zoo.run(
        "gym_ill_conditioned_gaussian", "mams", seed=4, num_samples=500, warmup=2000,
        num_chains=32, chain_groups=1, tuning="laps",
    )  # fmt: skip
    assert run.ok
    for row, (t_mean, t_sd) in truth.rows().items():
        got = run.summary.loc[row]
        assert abs(got["mean"] - t_mean) <= K * t_sd / np.sqrt(got["ess_bulk"]), (row, got)
        # the sd's error: about sd / sqrt(2 ESS) for a Gaussian
        assert abs(got["sd"] - t_sd) <= K * t_sd / np.sqrt(2 * got["ess_bulk"]), (row, got)


def test_the_default_tuning_is_the_option_left_out():
    opts = {"seed": 5, "num_samples": 30, "warmup": 60, "num_chains": 16, "chain_groups": 1}
    a = zoo.run("eight_schools_noncentered", "mams", **opts)
    b = zoo.run("eight_schools_noncentered", "mams", tuning="default", **opts)
    for site in ("mu", "tau", "eta"):
        left, right = a.idata.posterior[site].values, b.idata.posterior[site].values
        np.testing.assert_array_equal(left, right)


def test_a_run_to_an_ess_target_warms_up_once():
    """The blocks after the first resume MAMS at LAPS's settings: no second warmup."""
    opts = {"num_chains": 16, "chain_groups": 1, "warmup": 300, "num_samples": 40}
    plain = zoo.run("eight_schools_noncentered", "mams", seed=6, tuning="laps", **opts)
    with pytest.warns(RuntimeWarning, match="draw limit"):
        target = zoo.run(
            "eight_schools_noncentered", "mams", seed=6, tuning="laps", ess=100_000,
            max_draws=100, **opts,
        )  # fmt: skip
    d = target.diagnostics
    assert d["blocks"] > 1 and d["draws_per_chain"] == 100
    assert d["warmup_gradient_evals"] == plain.diagnostics["warmup_gradient_evals"]
    np.testing.assert_array_equal(
        target.idata.posterior["mu"].values[:, :40], plain.idata.posterior["mu"].values
    )


def test_a_bad_tuning_is_named():
    with pytest.raises(zoo.ZooError, match="'tuning' must be one of .*'laps'"):
        zoo.run("normal_normal", "mams", tuning="lap")


def test_sbc_calibrated_and_its_inflated_draws_are_not():
    """Pearson's chi-square on 100 ranks in 10 bins at level 1e-3 per coefficient (Bonferroni),
    as tests/inference/samplers/test_mams.py's: the exact sampler passes but for about one seed
    in 500; the same draws spread twice as far fail with probability 0.9999."""
    _, p_good, _ = calibration.uniformity(sbc_ranks(1.0, 7, mams_laps, warmup=600), 99)
    assert (p_good > 1e-3 / 2).all(), p_good
    _, p_bad, _ = calibration.uniformity(sbc_ranks(2.0, 7, mams_laps, warmup=600), 99)
    assert (p_bad < 1e-3 / 2).all(), p_bad


@pytest.mark.slow
def test_sbc_of_the_engine_on_normal_normal():
    """The engine through ``zoo.sbc`` (a run a replication, ranks thinned by the ESS)."""
    common = dict(reps=100, seed=0, workers=2, alpha=1e-3, num_samples=50, warmup=300)
    good = sbc("normal_normal", "mams", num_chains=8, tuning="laps", **common)
    assert good.verdict == "calibrated", good.findings()
