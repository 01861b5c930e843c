"""Noise-contrastive estimation (seed 000 Ch. 7) on unnormalised_gaussian: the estimates of mu,
tau and the free log-normaliser c against the generating values and the true -log Z, within
NCE's own standard errors (the sandwich, itself checked against the spread of repeated fits);
against the MLE; the objective concave and climbed; more noise, smaller errors; options
refused before any work. Tolerances are z-bounds with tails of 1e-6: they hold for any seed
(``ZOO_TEST_SEED_SHIFT``)."""

import math

import numpy as np
import pytest
import torch
from scipy.stats import chi2, norm

import zoo
from tests.seeding import shifted
from zoo.models import unnormalised as ug
from zoo_inference.algorithms.nce import delta_method, nce_exponential_family

ENTRY = zoo.get_model("unnormalised_gaussian")
TAIL = 1e-6
Z = float(norm.isf(TAIL / 2))  # 4.89


def fit(seed: int, n: int = 1000, nu: int = 1) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """NCE on n fresh points of N(1, 1) against nu n noise draws: (mu, tau, c), their
    covariance, and the data."""
    x = ug.gaussian_points(seed, n)
    gen = torch.Generator().manual_seed(seed)
    loc, scale = float(x.mean()), 2 * float(x.std())
    y = loc + scale * torch.randn(nu * n, generator=gen, dtype=torch.float64)
    noise = torch.distributions.Normal(loc, scale)
    out = nce_exponential_family(ug.sufficient_statistics, x, y, noise.log_prob)
    assert out.converged
    sites, cov = delta_method(out.beta, out.cov, ug.natural_to_sites)
    return sites, cov, x


def test_the_truths_are_the_gaussians():
    """c = -log Z(tau) = 1/2 log(tau / 2 pi) is the Normal's log density minus -E."""
    u, mu, tau = torch.tensor([0.3, -1.2], dtype=torch.float64), 0.7, 2.5
    normal = torch.distributions.Normal(mu, tau**-0.5).log_prob(u)
    torch.testing.assert_close(normal, -tau * (u - mu) ** 2 / 2 + ug.log_normaliser(tau))
    beta = torch.tensor([tau * mu, -tau / 2, 0.4], dtype=torch.float64)
    sites = ug.natural_to_sites(beta)
    expected = [mu, tau, 0.4 + tau * mu**2 / 2]
    torch.testing.assert_close(sites, torch.tensor(expected, dtype=torch.float64))


def test_nce_engine_recovers_the_truth_and_the_normaliser():
    """Through zoo.run on synthetic data (mu = 1, tau = 1): each estimate within Z of its
    standard errors of the generating value, c of -log Z(1) = -0.919, and c of the true
    -log Z at the estimated tau (nothing in the fit imposes it)."""
    data, truth = ENTRY.simulate(shifted(51))
    run = zoo.run(ENTRY, "nce", data=data, seed=shifted(52))
    assert run.ok, run.error
    d, est = run.diagnostics, run.extras["estimate"]
    assert d["converged"]
    assert abs(est["mu"] - float(truth["mu"])) < Z * d["mu_se"], (est, d)
    assert abs(est["tau"] - float(truth["tau"])) < Z * d["tau_se"], (est, d)
    true_c = ug.log_normaliser(float(truth["tau"]))
    assert true_c == pytest.approx(-0.5 * math.log(2 * math.pi))
    assert abs(d["log_normaliser"] - true_c) < Z * d["log_normaliser_se"], d
    assert d["log_normaliser_of_estimate"] == pytest.approx(ug.log_normaliser(est["tau"]))
    assert abs(d["log_normaliser_gap_z"]) < Z, d
    # a classifier better than chance: the noise is twice as wide as the data
    assert 0.5 < d["classifier_accuracy"] < 1.0
    objective = run.traces["nce_objective"]
    assert all(b >= a - 1e-12 for a, b in zip(objective, objective[1:], strict=False))


def test_nce_is_near_the_mle():
    """NCE against the MLE (xbar, 1/mean squared deviation) on the same data: the MLE is
    efficient, so Var(NCE - MLE) = Var(NCE) - Var(MLE) <= Var(NCE), and the difference is
    within Z of NCE's standard errors."""
    sites, cov, x = fit(shifted(53))
    se = cov.diag().sqrt()
    mle_mu, mle_tau = float(x.mean()), 1 / float(((x - x.mean()) ** 2).mean())
    assert abs(float(sites[0]) - mle_mu) < Z * float(se[0])
    assert abs(float(sites[1]) - mle_tau) < Z * float(se[1])


def test_sandwich_errors_match_the_spread_of_repeated_fits():
    """120 independent fits (data and noise redrawn): the variance of each estimate across fits
    against the mean sandwich variance, a chi-square bound on their ratio (tail 1e-6 for the
    three together); and the estimates' mean within Z standard errors of the truth."""
    runs = [fit(shifted(1000 + i)) for i in range(120)]
    est = np.array([r[0].numpy() for r in runs])
    var = np.array([r[1].diag().numpy() for r in runs]).mean(0)
    n = len(runs)
    lo, hi = chi2.ppf(TAIL / 6, n - 1) / (n - 1), chi2.isf(TAIL / 6, n - 1) / (n - 1)
    ratio = est.var(0, ddof=1) / var
    assert np.all((lo < ratio) & (ratio < hi)), (ratio, lo, hi)
    truth = np.array([ug.TRUE_MU, ug.TRUE_TAU, ug.log_normaliser(ug.TRUE_TAU)])
    assert np.all(np.abs(est.mean(0) - truth) < Z * np.sqrt(var / n)), (est.mean(0), truth)


def test_more_noise_smaller_errors():
    """nu = 8 noise points a data point against nu = 1: every standard error smaller (NCE's
    variance falls towards the MLE's as nu grows)."""
    _, cov1, _ = fit(shifted(54), nu=1)
    _, cov8, _ = fit(shifted(54), nu=8)
    assert bool((cov8.diag() < cov1.diag()).all()), (cov1.diag(), cov8.diag())
    mle_var_mu = 1.0 / 1000  # 1/(tau n): the bound NCE approaches
    assert mle_var_mu < float(cov8[0, 0]) < float(cov1[0, 0])


def test_exact_posterior_and_nce_in_one_comparison():
    cmp = zoo.compare(ENTRY, ("exact", "nce"), seed=shifted(55))
    assert all(r.ok for r in cmp.runs.values())
    assert "log_normaliser" in cmp.runs["nce"].diagnostics


@pytest.mark.parametrize(
    "options, message",
    [
        ({"noise_ratio": 0}, "positive integer"),
        ({"noise_ratio": 1.5}, "positive integer"),
        ({"noise_scale": -1.0}, "positive number"),
        ({"noise": 2}, "unknown option"),
    ],
)
def test_bad_options_are_refused(options, message):
    with pytest.raises(zoo.ZooError, match=message):
        zoo.run(ENTRY, "nce", **options)


def test_engine_is_listed_with_its_options():
    spec = ENTRY.engine_spec("nce")
    assert {"noise_ratio", "noise_scale", "max_iter", "tol"} <= set(spec.defaults)
    assert "nce" in ENTRY.engines and "exact" in ENTRY.engines
