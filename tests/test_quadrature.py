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
