"""Adaptive rejection sampling (seed 003 L62–66): exact draws of log-concave densities, a clear
error for a density that is not log-concave, and its use inside gaussian_mixture's Gibbs sampler.

Draws are independent, so each check uses the tolerances of independent draws: a mean within Z
standard errors, an sd within Z standard errors of an sd, and a Kolmogorov–Smirnov test at level
ALPHA (a false alarm of ALPHA for any seed).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy import stats

import zoo
from tests.seeding import shifted
from zoo_inference.algorithms.ars import (
    NotLogConcave,
    ars_sample,
    ars_step,
    autograd_log_density,
)
from zoo_inference.algorithms.gibbs import gaussian_mixture_gibbs_sweep

Z = 5.0
ALPHA = 1e-3
N = 4000

f64 = torch.float64
LOG_CONCAVE = {
    # name: (torch distribution, scipy twin, start, support, start scale)
    "normal": (torch.distributions.Normal(1.5, 0.3), stats.norm(1.5, 0.3), 0.0, None, 1.0),
    "gamma_2.5": (
        torch.distributions.Gamma(torch.tensor(2.5, dtype=f64), torch.tensor(4.0, dtype=f64)),
        stats.gamma(2.5, scale=0.25),
        1.0,
        (0.0, np.inf),
        0.5,
    ),
    "exponential": (  # Gamma with shape 1: log p is linear, the envelope is exact
        torch.distributions.Gamma(torch.tensor(1.0, dtype=f64), torch.tensor(2.0, dtype=f64)),
        stats.expon(scale=0.5),
        0.3,
        (0.0, np.inf),
        0.2,
    ),
    "beta_2_5": (
        torch.distributions.Beta(torch.tensor(2.0, dtype=f64), torch.tensor(5.0, dtype=f64)),
        stats.beta(2, 5),
        0.5,
        (0.0, 1.0),
        0.2,
    ),
    "uniform_as_beta_1_1": (
        torch.distributions.Beta(torch.tensor(1.0, dtype=f64), torch.tensor(1.0, dtype=f64)),
        stats.uniform(),
        0.5,
        (0.0, 1.0),
        0.2,
    ),
}


def check_draws(x: np.ndarray, truth: stats.rv_continuous) -> None:
    n, mean, sd = x.size, truth.mean(), truth.std()
    assert abs(x.mean() - mean) < Z * sd / np.sqrt(n), (x.mean(), mean)
    kurt = float(truth.stats(moments="k"))
    assert abs(x.std() / sd - 1) < Z * np.sqrt((kurt + 2) / (4 * n)), (x.std(), sd)
    assert stats.kstest(x, truth.cdf).pvalue > ALPHA


@pytest.mark.parametrize("name", list(LOG_CONCAVE))
def test_draws_of_log_concave_densities_are_exact(name):
    d, truth, start, support, scale = LOG_CONCAVE[name]
    rng = np.random.default_rng(shifted(10))
    kw = {"bounds": support} if support else {}
    x, info = ars_sample(
        autograd_log_density(d.log_prob), N, start=start, scale=scale, rng=rng, **kw
    )
    assert x.shape == (N,)
    check_draws(x, truth)
    # the envelope adapts: a few dozen evaluations of log p for thousands of draws
    assert info["evaluations"] < 0.05 * N and info["acceptance"] > 0.9, info


def test_a_batch_of_densities_each_gets_its_own_draw():
    """ars_step: one exact draw per element, each element its own Normal; repeated steps from
    the same start are independent draws (the start only places the first abscissae)."""
    loc = np.array([[-3.0, 0.0], [2.0, 40.0]])
    sd = np.array([[0.1, 1.0], [5.0, 2.0]])

    def logpdf(x):
        return -0.5 * ((x - loc) / sd) ** 2, -(x - loc) / sd**2

    rng = np.random.default_rng(shifted(11))
    steps = 1000  # one envelope built per step: a few ms each
    draws = np.stack([ars_step(logpdf, np.zeros_like(loc), rng=rng)[0] for _ in range(steps)])
    for idx in np.ndindex(loc.shape):
        check_draws(draws[(slice(None), *idx)], stats.norm(loc[idx], sd[idx]))


@pytest.mark.parametrize(
    "logp",
    [
        lambda t: torch.logaddexp(-0.5 * (t - 3) ** 2, -0.5 * (t + 3) ** 2),  # two modes
        lambda t: -2.5 * torch.log1p(t**2 / 4),  # Student-t: convex log density in its tails
        lambda t: -0.5 * t**2 + 0.5 * torch.cos(3 * t),  # unimodal, not log-concave
    ],
    ids=["bimodal", "student_t", "wiggly"],
)
def test_a_density_that_is_not_log_concave_is_refused(logp):
    rng = np.random.default_rng(shifted(12))
    with pytest.raises(NotLogConcave, match="log-concave"):
        ars_sample(autograd_log_density(logp), N, rng=rng, scale=0.7)


def test_bad_calls():
    normal = autograd_log_density(lambda t: -0.5 * t**2)
    with pytest.raises(ValueError, match="low < high"):
        ars_sample(normal, 10, bounds=(1.0, 0.0))
    with pytest.raises(ValueError, match="inside the support"):
        ars_sample(normal, 10, start=2.0, bounds=(0.0, 1.0))
    with pytest.raises(ValueError, match="n must be"):
        ars_sample(normal, 0)
    with pytest.raises(ValueError, match="does not turn down"):  # log p = t: improper
        ars_sample(autograd_log_density(lambda t: t), 10)


# ------------------------------------------------------------------ inside Gibbs
def test_the_spread_conditional_is_log_concave_and_ars_draws_it_exactly():
    """gaussian_mixture's conditional of t = log s_k, N(t | l0, ls^2) e^(-N_k t)
    exp(-S_k e^(-2t) / 2), has second derivative -1/ls^2 - 2 S_k e^(-2t) < 0; ARS's draws of it
    match the density normalised on a fine grid (KS)."""
    l0, ls, nk, sq = np.log(0.5), 1.0, 40.0, 9.0

    def logpdf(t):
        return (
            -0.5 * ((t - l0) / ls) ** 2 - nk * t - 0.5 * sq * np.exp(-2 * t),
            -(t - l0) / ls**2 - nk + sq * np.exp(-2 * t),
        )

    rng = np.random.default_rng(shifted(13))
    x, _ = ars_sample(logpdf, N, start=0.0, rng=rng)
    grid = np.linspace(-4, 3, 200_001)
    dens = np.exp(logpdf(grid)[0] - logpdf(grid)[0].max())
    cdf = np.cumsum(dens) / dens.sum()
    assert stats.kstest(x, lambda v: np.interp(v, grid, cdf)).pvalue > ALPHA


def test_gibbs_sweep_takes_either_spread_step():
    y = np.r_[np.full(10, 1.0), np.full(10, 5.0)] + 0.1 * np.arange(20) / 20
    w, mu, s = np.full((2, 2), 0.5), np.array([[1.0, 5.0]] * 2), np.ones((2, 2))
    np.random.seed(shifted(14))
    for step in ("slice", "ars"):
        z, w2, mu2, s2 = gaussian_mixture_gibbs_sweep(
            y, w, mu.copy(), s, (3.0, 2.0, 0.0, 1.0), step
        )
        assert s2.shape == (2, 2) and (s2 > 0).all()
    with pytest.raises(ValueError, match="spread_step"):
        gaussian_mixture_gibbs_sweep(y, w, mu.copy(), s, (3.0, 2.0, 0.0, 1.0), "newton")
    with pytest.raises(ValueError, match="spread_step"):
        zoo.run("gaussian_mixture", "gibbs", spread_step="newton")


def _moments(run: zoo.Run) -> dict[str, tuple[float, float, float]]:
    rows = [r for r in run.summary.index if not r.startswith("z")]
    s = run.summary.loc[rows]
    return {r: (s.loc[r, "mean"], s.loc[r, "sd"], s.loc[r, "ess_bulk"]) for r in rows}


def _agree(a: dict, b: dict) -> None:
    """Two chains' means within Z standard errors of their difference (each from its ESS)."""
    for row, (m1, sd1, ess1) in a.items():
        m2, sd2, ess2 = b[row]
        se = np.sqrt(sd1**2 / ess1 + sd2**2 / ess2)
        assert abs(m1 - m2) < Z * se, (row, m1, m2, se)


def test_gibbs_with_ars_and_with_slice_agree():
    kw = dict(num_samples=400, warmup=200, num_chains=2)
    ars = zoo.run("gaussian_mixture", "gibbs", spread_step="ars", seed=1, **kw)
    slc = zoo.run("gaussian_mixture", "gibbs", spread_step="slice", seed=2, **kw)
    assert ars.ok and slc.ok and ars.diagnostics["max_r_hat"] < 1.05
    _agree(_moments(ars), _moments(slc))


@pytest.mark.slow
def test_gibbs_with_ars_agrees_with_nuts():
    ars = zoo.run("gaussian_mixture", "gibbs", spread_step="ars", seed=3, num_samples=2000)
    nuts = zoo.run("gaussian_mixture", "nuts", seed=4, num_samples=1000, warmup=500, num_chains=4)
    assert nuts.ok and nuts.diagnostics["max_r_hat"] < 1.05
    _agree(_moments(ars), _moments(nuts))
