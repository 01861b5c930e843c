"""Gauss–Legendre on an interval (inference/quadrature.py), shared by the quadrature truths."""

from __future__ import annotations

import numpy as np
import pytest

import zoo


def test_exact_for_polynomials_up_to_degree_2m_minus_1():
    u, w = zoo.gauss_legendre(5)
    assert np.all((u > 0) & (u < 1)) and w.sum() == pytest.approx(1.0, abs=1e-15)
    for d in range(10):  # int_0^1 u^d du = 1 / (d + 1)
        assert w @ u**d == pytest.approx(1 / (d + 1), rel=1e-13), d
    u, w = zoo.gauss_legendre(5, -2.0, 3.0)
    assert w @ u**9 == pytest.approx((3.0**10 - 2.0**10) / 10, rel=1e-13)


def test_bad_arguments():
    with pytest.raises(ValueError, match="at least one node"):
        zoo.gauss_legendre(0)
    with pytest.raises(ValueError, match="low < high"):
        zoo.gauss_legendre(3, 1.0, 1.0)


def test_a_grid_posterior_gives_a_beta_posteriors_moments_and_evidence():
    """Beta(3, 5) as the posterior of a uniform prior times p^2 (1 - p)^4 on 40 Gauss–Legendre
    nodes: the integrand is a polynomial of degree 8 (its moments to degree 10), so the mean, the
    sd and the evidence B(3, 5) are exact to rounding; a conditional variance adds in."""
    from scipy import special, stats

    u, w = zoo.gauss_legendre(40)
    grid = zoo.grid_posterior(np.log(w) + 2 * np.log(u) + 4 * np.log1p(-u))
    assert grid.weights.sum() == pytest.approx(1.0, abs=1e-14)
    assert grid.log_z == pytest.approx(special.betaln(3, 5), rel=1e-13)
    mean, sd = map(float, grid.moments(u))
    assert mean == pytest.approx(stats.beta(3, 5).mean(), rel=1e-13)
    assert sd == pytest.approx(stats.beta(3, 5).std(), rel=1e-12)
    # a quantity Normal(p, 0.1^2) given p, two of them: the grid's dimensions lead
    mean2, sd2 = grid.moments(np.stack([u, 2 * u], -1), np.full((40, 2), 0.01))
    assert mean2 == pytest.approx([mean, 2 * mean], rel=1e-13)
    assert sd2 == pytest.approx(np.sqrt([sd**2 + 0.01, 4 * sd**2 + 0.01]), rel=1e-12)
