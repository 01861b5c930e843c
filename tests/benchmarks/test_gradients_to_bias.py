"""benchmarks/gradients_to_bias.py: the papers' b² measure, its crossing and gradient mapping,
the exact Var[x²] of the analytic Gym targets, and one end-to-end smoke run."""

from __future__ import annotations

import importlib.util
import json
import math
import sys

import numpy as np
import pytest

from tests.paths import ROOT

SCRIPT = ROOT / "benchmarks" / "gradients_to_bias.py"


@pytest.fixture(scope="module")
def g2b():
    if str(SCRIPT.parent) not in sys.path:  # the script imports engine_specs beside it
        sys.path.insert(0, str(SCRIPT.parent))
    spec = importlib.util.spec_from_file_location("gradients_to_bias", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def test_crossing_is_the_draw_after_which_the_curve_stays_below(g2b):
    assert g2b.draws_to_threshold(np.array([0.5, 0.005, 0.02, 0.005, 0.001])) == 4
    assert g2b.draws_to_threshold(np.array([0.001, 0.002])) == 1
    assert math.isinf(g2b.draws_to_threshold(np.array([0.5, 0.001, 0.02])))
    assert g2b.draws_to_threshold(np.array([0.01, 0.0099])) == 2  # 0.01 itself is not below


def test_gradients_are_the_running_total_at_the_crossing(g2b):
    cum = np.cumsum([3.0, 5.0, 2.0])
    assert g2b.gradients_at(cum, 2.0) == 8.0
    assert g2b.gradients_at(cum, 3.0) == 10.0
    assert math.isinf(g2b.gradients_at(cum, math.inf))


def test_running_bias_by_hand(g2b):
    x = np.array([[[1.0, 2.0], [3.0, 0.0]]])  # one chain, two draws, two parameters
    b2 = g2b.running_bias(x, np.array([2.0, 1.0]), np.array([4.0, 2.0]))
    # after 1 draw: x² = (1, 4); after 2: mean x² = (5, 2)
    first, second = [(1 - 2) ** 2 / 4, (4 - 1) ** 2 / 2], [(5 - 2) ** 2 / 4, (2 - 1) ** 2 / 2]
    expected = np.array([[first, second]])
    np.testing.assert_allclose(b2, expected)


def test_iid_draws_reach_the_threshold_where_theory_says(g2b):
    """Exact N(0, 1) draws: n b²(n) -> chi²_1 (x²'s running mean is asymptotically normal), so
    the median over chains of b²(n) is about 0.455 / n, below 0.01 from n = 46; gradients are
    that times the gradients a draw costs. The median over 4000 chains has a relative sd of
    about 0.04 at n = 46, so the crossing lies within 36..58 for any seed."""
    rng = np.random.default_rng(1)
    chains, draws = 4000, 300
    x = rng.standard_normal((chains, draws, 1))
    grads = np.full((chains, draws), 7.0)
    m = g2b.measure(x, grads, np.array([1.0]), np.array([2.0]))
    assert 36 * 7 <= m.median_curve[0] <= 58 * 7
    assert m.median_curve[0] == m.median_curve[1]  # one parameter: max and average agree
    assert m.sampling_gradients == draws * 7
    # ten parameters: b²_avg -> chi²_10 / (10 n), median 0.934 / n (n = 94); b²_max -> the
    # largest of ten chi²_1 over n, median 3.36 / n (n = 336)
    x10 = rng.standard_normal((2000, 500, 10))
    m10 = g2b.measure(x10, np.ones((2000, 500)), np.ones(10), np.full(10, 2.0))
    assert 80 <= m10.median_curve[1] <= 110
    assert 290 <= m10.median_curve[0] <= 390


def test_a_biased_sampler_never_reaches_it(g2b):
    """Draws of N(0, 1.2²) judged against N(0, 1): b² tends to (1.44 - 1)² / 2 = 0.097."""
    rng = np.random.default_rng(2)
    x = 1.2 * rng.standard_normal((200, 2000, 1))
    m = g2b.measure(x, np.ones((200, 2000)), np.array([1.0]), np.array([2.0]))
    assert math.isinf(m.median_curve[0]) and math.isinf(m.per_chain[0])
    assert m.final[0] == pytest.approx(0.097, rel=0.2)


def test_banana_exact_var_x2_by_monte_carlo(g2b):
    """Var[x1²] = 56 a⁴ + 8 a² + 2 (a = 3) against 2e6 draws of the banana's generative story,
    within 5 batch standard errors (the test fails if the formula is off by more than ~5%)."""
    from zoo.models import gym

    exact = g2b.exact_var_x2("gym_banana")
    rng = np.random.default_rng(3)
    est = []
    for _ in range(10):
        x0 = 10.0 * rng.standard_normal(200_000)
        x1 = gym.BANANA_CURVATURE * (x0**2 - 100.0) + rng.standard_normal(200_000)
        est.append(np.var(x1**2))
    se = np.std(est, ddof=1) / np.sqrt(len(est))
    assert se < 0.05 * exact["x1"]
    assert abs(np.mean(est) - exact["x1"]) < 5 * se
    assert float(exact["x1"]) == 4610.0 and float(exact["x0"]) == 2e4


def test_second_moments_follow_the_truths_sites(g2b):
    sites, ex2, var, source = g2b.second_moments("gym_neals_funnel", {})
    assert sites == ["z", "x"] and ex2.shape == var.shape == (10,)
    np.testing.assert_allclose(ex2, [9.0] + [math.exp(4.5)] * 9)
    assert source.startswith("exact")
    sites, ex2, var, source = g2b.second_moments("gym_radon", {})
    assert ex2.shape == var.shape == (91,) and source.startswith("APPROXIMATE")
    sites, ex2, var, source = g2b.second_moments(
        "gym_radon", {"gym_radon": {"var_x2": list(range(91)), "how": "t"}}
    )
    assert source == "reference run: t" and var[5] == 5.0
    ref = {"var_x2": [1.0] * 91, "ex2": list(ex2), "how": "t"}
    ref["ex2"][3] += 0.5  # the run's own E[x²] off by half an sd of x² at county_effect[1]
    sites, ex2, var, source = g2b.second_moments("gym_radon", {"gym_radon": ref})
    assert source == (
        f"reference run: t; its own b² against the truth: max 0.25 (county_effect[1]), "
        f"avg {0.25 / 91:.3g}"
    )


def test_brownian_motion_second_moments_are_exact(g2b):
    """Brownian motion's E[x²] and Var[x²] from the quadrature, whatever a cached reference
    says; the exact Var[x²] of the innovation scale is 15% above the old reference run's."""
    stand_in = {"gym_brownian_motion": {"var_x2": [1.0] * 32, "how": "t"}}
    sites, ex2, var, source = g2b.second_moments("gym_brownian_motion", stand_in)
    assert sites == ["innovation_noise_scale", "observation_noise_scale", "locs"]
    assert source.startswith("exact (quadrature")
    np.testing.assert_allclose(ex2[:2], [0.0149725, 0.0141006], rtol=1e-5)
    np.testing.assert_allclose(var[:2], [1.26544e-4, 7.87336e-5], rtol=1e-5)
    assert (var > 0).all() and ex2.shape == var.shape == (32,)


def test_engine_specs(g2b):
    assert g2b.split_engines("nuts,chees:metric=low_rank,dense_mass=True,mams") == [
        "nuts",
        "chees:metric=low_rank,dense_mass=True",
        "mams",
    ]
    assert g2b.parse_engine("chees:metric=low_rank,dense_mass=True") == (
        "chees",
        {"metric": "low_rank", "dense_mass": True},
    )
    with pytest.raises(ValueError, match="before any engine"):
        g2b.split_engines("dense_mass=True,nuts")


def test_end_to_end_quick_run_writes_the_table(g2b, tmp_path):
    out = tmp_path / "g2b.md"
    # the cached Var[x²] references are read from --reference, wherever the table goes
    ref = {"gym_stochastic_volatility_small": {"var_x2": [1.0] * 103, "how": "a stand-in"}}
    (tmp_path / "refs.json").write_text(json.dumps(ref))
    g2b.main(
        [
            "--quick",
            "--targets",
            "banana,stochastic_volatility_small",
            "--engines",
            "chees,no_such_engine",
            "--chains",
            "2",
            "--draws",
            "60",
            "--warmup",
            "60",
            "--out",
            str(out),
            "--reference",
            str(tmp_path / "refs.json"),
        ]
    )
    text = out.read_text()
    row = next(line for line in text.splitlines() if line.startswith("| gym_banana | chees |"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[2] == "2" and cells[3] == "2 × 60"
    assert float(cells[5]) > 1  # gradients per draw from the n_steps statistic
    assert cells[11] == "95,520 / 58,750"  # the published NUTS figures beside
    assert cells[13] == "39,504 / 152,081"  # and NUTS's and MAMS's tuning gradients
    assert "no_such_engine: unknown engine" in text
    assert "gym_banana: exact (analytic)" in text
    assert "gym_stochastic_volatility_small: reference run: a stand-in" in text
    assert "| gym_stochastic_volatility_small | chees | 103 | 2 × 60 |" in text
