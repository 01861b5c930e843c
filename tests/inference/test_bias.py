"""The papers' b² measure (zoo_inference.bias): its running bias, crossing and gradient mapping,
on draws whose answer is known, and the exact Var[x²] a truth carries."""

from __future__ import annotations

import math

import numpy as np
import pytest

import zoo
from zoo.models import gym
from zoo_inference import bias


def test_crossing_is_the_draw_after_which_the_curve_stays_below():
    assert bias.draws_to_threshold(np.array([0.5, 0.005, 0.02, 0.005, 0.001])) == 4
    assert bias.draws_to_threshold(np.array([0.001, 0.002])) == 1
    assert math.isinf(bias.draws_to_threshold(np.array([0.5, 0.001, 0.02])))
    assert bias.draws_to_threshold(np.array([0.01, 0.0099])) == 2  # 0.01 itself is not below


def test_gradients_are_the_running_total_at_the_crossing():
    cum = np.cumsum([3.0, 5.0, 2.0])
    assert bias.gradients_at(cum, 2.0) == 8.0
    assert bias.gradients_at(cum, 3.0) == 10.0
    assert math.isinf(bias.gradients_at(cum, math.inf))


def test_running_bias_by_hand():
    x = np.array([[[1.0, 2.0], [3.0, 0.0]]])  # one chain, two draws, two parameters
    b2 = bias.running_bias(x, np.array([2.0, 1.0]), np.array([4.0, 2.0]))
    # after 1 draw: x² = (1, 4); after 2: mean x² = (5, 2)
    first, second = [(1 - 2) ** 2 / 4, (4 - 1) ** 2 / 2], [(5 - 2) ** 2 / 4, (2 - 1) ** 2 / 2]
    expected = np.array([[first, second]])
    np.testing.assert_allclose(b2, expected)


def test_iid_draws_reach_the_threshold_where_theory_says():
    """Exact N(0, 1) draws: n b²(n) -> chi²_1 (x²'s running mean is asymptotically normal), so
    the median over chains of b²(n) is about 0.455 / n, below 0.01 from n = 46; gradients are
    that times the gradients a draw costs. The median over 4000 chains has a relative sd of
    about 0.04 at n = 46, so the crossing lies within 36..58 for any seed."""
    rng = np.random.default_rng(1)
    chains, draws = 4000, 300
    x = rng.standard_normal((chains, draws, 1))
    grads = np.full((chains, draws), 7.0)
    m = bias.measure(x, grads, np.array([1.0]), np.array([2.0]))
    assert 36 * 7 <= m.median_curve[0] <= 58 * 7
    assert m.median_curve[0] == m.median_curve[1]  # one parameter: max and average agree
    assert m.sampling_gradients == draws * 7
    # ten parameters: b²_avg -> chi²_10 / (10 n), median 0.934 / n (n = 94); b²_max -> the
    # largest of ten chi²_1 over n, median 3.36 / n (n = 336)
    x10 = rng.standard_normal((2000, 500, 10))
    m10 = bias.measure(x10, np.ones((2000, 500)), np.ones(10), np.full(10, 2.0))
    assert 80 <= m10.median_curve[1] <= 110
    assert 290 <= m10.median_curve[0] <= 390


def test_a_biased_sampler_never_reaches_it():
    """Draws of N(0, 1.2²) judged against N(0, 1): b² tends to (1.44 - 1)² / 2 = 0.097."""
    rng = np.random.default_rng(2)
    x = 1.2 * rng.standard_normal((200, 2000, 1))
    m = bias.measure(x, np.ones((200, 2000)), np.array([1.0]), np.array([2.0]))
    assert math.isinf(m.median_curve[0]) and math.isinf(m.per_chain[0])
    assert m.final[0] == pytest.approx(0.097, rel=0.2)


def test_the_banana_truths_var_x2_by_monte_carlo():
    """Var[x1²] = 56 a⁴ + 8 a² + 2 (a = 3) against 2e6 draws of the banana's generative story,
    within 5 batch standard errors (the test fails if the formula is off by more than ~5%)."""
    exact = zoo.get_model("gym_banana").ground_truth().var_sq
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


def test_the_bias_is_the_running_second_moments_error_scaled():
    """b²(n) = (mean of x² over the first n draws - E[x²])² / Var[x²], per chain and
    parameter; the crossing is the draw after which the median curve stays below 0.01, and the
    gradients are the chains' mean running total there."""
    x = np.array([[[1.0], [3.0], [1.0], [1.0]], [[1.0], [1.0], [1.0], [1.0]]])  # (2, 4, 1)
    b2 = bias.running_bias(x, np.array([1.0]), np.array([2.0]))
    # chain 0: x² = 1, 9, 1, 1 -> running means 1, 5, 11/3, 3 -> b² 0, 8, 64/18, 2
    np.testing.assert_allclose(b2[0, :, 0], [0.0, 8.0, (8 / 3) ** 2 / 2, 2.0])
    np.testing.assert_allclose(b2[1, :, 0], 0.0)
    assert bias.draws_to_threshold(np.array([0.5, 0.2, 0.001, 0.002])) == 3.0
    assert bias.draws_to_threshold(np.array([0.001, 0.002])) == 1.0
    assert math.isinf(bias.draws_to_threshold(np.array([0.001, 0.5])))
    grads = np.full((2, 4), 3.0)
    m = bias.measure(x, grads, np.array([1.0]), np.array([2.0]))
    assert m.median_curve == (math.inf, math.inf)  # the median of (2, 0) at draw 4 is 1 > 0.01
    same = bias.measure(x[1:], grads[1:], np.array([1.0]), np.array([2.0]))
    assert same.median_curve == (3.0, 3.0) and same.sampling_gradients == 12.0
