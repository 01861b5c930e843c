"""The EM family on three_coin and gaussian_mixture: generalised EM (seed 001 §1.5.2, Algorithms
3 and 4), Monte Carlo and stochastic EM and the IP algorithm (seed 003 L180–187), K-means as hard
EM, each checked against exact EM's fixed point or the exact posterior."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import zoo
from zoo_inference.algorithms.em import bernoulli_mixture_em, gaussian_mixture_em

Y_COINS = np.array([1, 1, 0, 1, 0, 0, 1, 0, 1, 1], dtype=float)
RIDGE_LL = 6 * np.log(0.6) + 4 * np.log(0.4)  # every MLE of the three coins
Y_GMM = zoo.get_model("gaussian_mixture").load_data()["y"].double().numpy()
K = 2
GMM_START = (np.full(K, 0.5), np.quantile(Y_GMM, [0.25, 0.75]), np.full(K, Y_GMM.std()))
TOL = 1e-14  # relative change of the log-likelihood at which the GMM runs stop


def gmm_loglik(x: torch.Tensor) -> torch.Tensor:
    """log p(y | theta) at x = (w_0, mu_0, mu_1, s_0, s_1), the mixture's free parameters."""
    y = torch.as_tensor(Y_GMM)[:, None]
    w = torch.stack([x[0], 1 - x[0]])
    comp = torch.distributions.Normal(x[1:3], x[3:5]).log_prob(y)
    return torch.logsumexp(torch.log(w) + comp, 1).sum()


def free(theta: np.ndarray) -> np.ndarray:
    return np.concatenate([theta[:1], theta[K:]])


def distance_bound(trace: list[float], theta: np.ndarray) -> float:
    """How far a run stopped by the log-likelihood's last change can be from its fixed point:
    with linear convergence at rate r (the ratio of the last changes), the gap in log-likelihood
    is at most d r / (1 - r) for a last change d, and a gap g is a parameter distance of at
    most sqrt(2 g / lambda_min) under the observed information's smallest eigenvalue."""
    d = np.diff(trace)
    r = min(d[-1] / d[-2], 0.999) if d[-2] > 0 else 0.5
    gap = max(d[-1], 1e-300) * r / (1 - r)
    info = -torch.autograd.functional.hessian(gmm_loglik, torch.as_tensor(free(theta)))
    lam = float(torch.linalg.eigvalsh(info)[0])
    assert lam > 0  # a strict maximum
    return float(np.sqrt(2 * gap / lam))


# ---------------------------------------------------------------------- generalised EM


@pytest.fixture(scope="module")
def full_gmm():
    return gaussian_mixture_em(Y_GMM, *GMM_START, 5000, TOL)


@pytest.mark.parametrize("m_step, steps", [("gradient", 1), ("gradient", 5), ("coordinatewise", 1)])
def test_generalised_em_is_monotone_and_reaches_ems_fixed_point(full_gmm, m_step, steps):
    out = gaussian_mixture_em(Y_GMM, *GMM_START, 5000, TOL, m_step=m_step, gradient_steps=steps)
    trace = np.array(out.trace)
    assert np.all(np.diff(trace) >= -1e-9 * np.abs(trace[1:]))  # Theorem 1, for GEM too
    assert out.log_likelihood == pytest.approx(full_gmm.log_likelihood, rel=1e-12)
    bound = distance_bound(out.trace, out.theta) + distance_bound(full_gmm.trace, full_gmm.theta)
    assert np.abs(free(out.theta) - free(full_gmm.theta)).max() < 10 * bound
    assert 10 * bound < 1e-4  # the bound says something
    if m_step == "gradient":  # a partial M-step takes more iterations, one that differs
        assert len(out.trace) > len(full_gmm.trace)


def test_coordinatewise_m_step_takes_another_path(full_gmm):
    """ECM updates the spreads around the old means: not the full M-step's first iterate."""
    one = gaussian_mixture_em(Y_GMM, *GMM_START, 1, TOL, m_step="coordinatewise")
    full = gaussian_mixture_em(Y_GMM, *GMM_START, 1, TOL)
    assert np.abs(one.chain[1] - full.chain[1]).max() > 1e-3
    assert one.trace[1] <= full.trace[1]  # full maximisation gains at least as much of Q


@pytest.mark.parametrize("m_step", ["full", "gradient", "coordinatewise"])
def test_three_coins_every_m_step_is_monotone_and_ends_on_the_mle_ridge(m_step):
    out = bernoulli_mixture_em(Y_COINS, (0.4, 0.6, 0.7), 5000, 1e-15, m_step=m_step)
    assert np.all(np.diff(out.trace) >= -1e-9 * abs(RIDGE_LL))
    assert out.log_likelihood == pytest.approx(RIDGE_LL, abs=1e-9)
    pi, p, q = out.theta
    assert pi * p + (1 - pi) * q == pytest.approx(0.6, abs=1e-6)


def test_three_coins_ecm_is_em_and_ems_fixed_point_is_gems():
    """Q separates in (pi, p, q), so ECM's conditional maximisations are the full M-step; the
    MLE set is a ridge, so the gradient M-step may stop elsewhere on it, but EM's fixed point is
    one of its fixed points too."""
    full = bernoulli_mixture_em(Y_COINS, (0.4, 0.6, 0.7), 50, 1e-15)
    ecm = bernoulli_mixture_em(Y_COINS, (0.4, 0.6, 0.7), 50, 1e-15, m_step="coordinatewise")
    np.testing.assert_array_equal(ecm.chain, full.chain)
    np.testing.assert_allclose(full.theta, (76 / 187, 51 / 95, 119 / 185), atol=1e-12)
    stay = bernoulli_mixture_em(Y_COINS, full.theta, 20, 0.0, m_step="gradient", gradient_steps=5)
    np.testing.assert_allclose(stay.chain, np.broadcast_to(full.theta, stay.chain.shape), atol=1e-9)


def test_m_step_option_through_the_engine():
    run = zoo.run("gaussian_mixture", "em", m_step="gradient", gradient_steps=5, tol=1e-12)
    em = zoo.run("gaussian_mixture", "em", tol=1e-12)
    for site in ("weights", "locs", "scales"):
        ours, full = run.extras["estimate"][site], em.extras["estimate"][site]
        np.testing.assert_allclose(ours, full, atol=1e-4)
    assert "m_step" in zoo.get_model("three_coin").engine_spec("em").defaults


@pytest.mark.parametrize(
    "options, message",
    [
        (
            {"m_step": "partial"},
            r"'m_step' must be one of \['full', 'gradient', 'coordinatewise'\]",
        ),
        ({"e_step": "sampled"}, r"option 'e_step' must be one of"),
        ({"e_draws": 0, "e_step": "monte_carlo"}, r"option 'e_draws' must be a positive integer"),
        ({"e_draws": 10}, r"'e_draws' is for a sampled E-step"),
        ({"e_draws": 10, "e_step": "stochastic"}, r"stochastic EM draws one value"),
        ({"gradient_steps": 0}, r"option 'gradient_steps' must be a positive integer"),
    ],
)
@pytest.mark.parametrize("model", ["three_coin", "gaussian_mixture"])
def test_bad_em_options_are_refused_before_any_work(model, options, message):
    with pytest.raises(zoo.ZooError, match=message):
        zoo.run(model, "em", **options)
