"""Pathfinder (inference/pathfinder.py): its Gaussians' algebra against the BFGS recursion and a
multivariate normal, exact on Gaussian posteriors, importance-resampled draws against closed
forms, and the MCMC engines' ``init="pathfinder"``."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import zoo
from tests.seeding import shifted
from zoo.calibrate import sbc
from zoo.cli import main
from zoo_inference import ZooError
from zoo_inference.pathfinder import _gaussian, initial_points, pathfinder, pathfinder_density

BLR = zoo.get_model("bayesian_linear_regression")
Z = 5.0  # Monte-Carlo z-score allowed


def test_gaussian_is_the_bfgs_inverse_hessian_and_samples_it():
    """The compact form diag(a) + B G B^T equals J BFGS updates of diag(a), applied one by one;
    its draws have that covariance and their log q is the normal's log density."""
    gen = torch.Generator().manual_seed(shifted(1))
    d = 5
    a_ = torch.randn(d, d, generator=gen, dtype=torch.float64)
    precision = a_ @ a_.T + torch.eye(d, dtype=torch.float64)
    a = torch.rand(d, generator=gen, dtype=torch.float64) + 0.5
    pairs = []
    for _ in range(3):
        s = torch.randn(d, generator=gen, dtype=torch.float64)
        pairs.append((s, precision @ s))
    h, eye = torch.diag(a), torch.eye(d, dtype=torch.float64)
    for s, y in pairs:
        rho = 1 / (s @ y)
        h = (eye - rho * torch.outer(s, y)) @ h @ (eye - rho * torch.outer(y, s))
        h = h + rho * torch.outer(s, s)
    x, grad = torch.randn(d, generator=gen, dtype=torch.float64), torch.zeros(d).double()
    q = _gaussian(x, grad, a, pairs)
    torch.testing.assert_close(q.covariance(), h, rtol=1e-10, atol=1e-12)
    draws, log_q = q.sample(20000, gen)
    exact = torch.distributions.MultivariateNormal(q.mu, h)
    torch.testing.assert_close(log_q, exact.log_prob(draws), rtol=1e-10, atol=1e-10)
    # each entry of the sample covariance within Z Monte-Carlo sds of (h_ij^2 + h_ii h_jj) / n
    se = ((h**2 + torch.outer(h.diagonal(), h.diagonal())) / len(draws)).sqrt()
    assert ((torch.cov(draws.T) - h).abs() <= Z * se).all()


def test_exact_on_a_one_dimensional_gaussian():
    """normal_normal: on a quadratic in one dimension the secant s / y is the exact variance, so
    every path's best Gaussian is the posterior N(1.6, 0.2) to rounding; equal weights."""
    entry = zoo.get_model("normal_normal")
    density = pathfinder_density(entry.model, entry.load_data(), entry.structure)
    fit = pathfinder(density, torch.Generator().manual_seed(shifted(0)), num_samples=200)
    dists, _ = zoo.in_float64(entry.posterior_fn, entry.load_data())
    for path in fit.paths:
        assert float(path.best.mu) == pytest.approx(float(dists["mu"].mean), abs=1e-8)
        assert float(path.best.covariance()) == pytest.approx(float(dists["mu"].variance), 1e-8)
    assert fit.ess == pytest.approx(len(fit.log_w))
    assert float(fit.draws.std()) == pytest.approx(0.2**0.5, rel=Z / np.sqrt(2 * 200))


def test_best_gaussian_matches_a_gaussian_posterior():
    """bayesian_linear_regression (2-d Gaussian posterior): each path's ELBO-best Gaussian is the
    posterior up to what its ELBO estimate can tell apart, KL(q || p) < 0.05 (the ELBO is
    log Z - KL, estimated from 100 draws an iterate: over seeds 0-9 the chosen KL was 0 to 4
    decimals on 37 of 40 paths, at most 0.021), on at least one path to KL < 0.001, its mean
    within a fifth of a posterior sd, and its ELBO the log evidence (log p - log q is the
    constant log Z where q = p)."""
    posterior, log_z = zoo.in_float64(BLR.posterior_fn, BLR.load_data())
    exact = posterior["beta"]
    sd = exact.variance.sqrt()
    density = pathfinder_density(BLR.model, BLR.load_data(), BLR.structure)
    gen = torch.Generator().manual_seed(shifted(0))
    fit = pathfinder(density, gen, num_samples=100, elbo_draws=100)
    assert len(fit.paths) == 4 and fit.pareto_k < 0.5
    kls = []
    for path in fit.paths:
        q = torch.distributions.MultivariateNormal(path.best.mu, path.best.covariance())
        kls.append(float(torch.distributions.kl_divergence(q, exact)))
        assert float(((q.mean - exact.mean).abs() / sd).max()) < 0.2
        assert path.elbo == pytest.approx(log_z, abs=0.05)
        assert 1 <= path.best_iteration <= path.iterations == len(path.elbos)
        assert path.gradient_evals > path.iterations
    assert max(kls) < 0.05 and min(kls) < 1e-3, kls


@pytest.mark.parametrize("model", ["beta_bernoulli", "gamma_poisson"])
def test_resampled_draws_match_a_conjugate_posterior(model):
    """Non-Gaussian posteriors (a Beta, a Gamma): the resampled draws' mean and sd lie within
    Z Monte-Carlo errors of the exact ones, the error from the weights' ESS and the resampling
    (1/n_eff = 1/ESS + 1/num_samples). The Gaussian on log rate or logit p has lighter tails
    than the posterior, so k-hat may exceed 0.7 at some seeds: the run must then say so."""
    entry = zoo.get_model(model)
    run = zoo.run(entry, "pathfinder", seed=3)
    d = run.diagnostics
    assert run.ok and run.kind == "draws"
    assert run.idata.posterior.sizes["draw"] == d["num_samples"] == 1000
    assert (run.status == "unreliable") == (d["pareto_k"] > 0.7)
    assert len(d["elbo_per_path"]) == len(d["iterations_per_path"]) == d["num_paths"] == 4
    assert d["gradient_evals"] > sum(d["iterations_per_path"])
    n_eff = 1 / (1 / d["ess"] + 1 / d["num_samples"])
    for row, (mu, sd) in entry.ground_truth().rows().items():
        assert abs(run.summary.loc[row, "mean"] - mu) < Z * sd / np.sqrt(n_eff), row
        # sd's standard error for a near-normal sample: sd / sqrt(2 n), doubled for the tails
        assert abs(run.summary.loc[row, "sd"] - sd) < Z * sd * np.sqrt(2 / n_eff), row


def test_pathfinder_starts_are_in_the_posterior():
    """initial_points: every chain's start lies within a few posterior sds of the posterior
    mean (Uniform(-2, 2) starts would be dozens of sds away: beta's mean is 3.36, sd 0.047)."""
    dists, _ = zoo.in_float64(BLR.posterior_fn, BLR.load_data())
    mean, sd = dists["beta"].mean.float(), dists["beta"].variance.sqrt().float()
    like = pathfinder_density(BLR.model, BLR.load_data(), BLR.structure)
    gen = like.generator(0)
    starts, evals = initial_points(BLR.model, BLR.load_data(), BLR.structure, gen, like)
    assert starts.shape == (like.chains, 2) and starts.dtype == like.dtype and evals > 0
    assert float(((starts - mean).abs() / sd).max()) < 6


def test_nuts_from_pathfinder_matches_the_posterior():
    """nuts with init="pathfinder" on gamma_poisson: other starts than the default's (the same
    seed), and the draws' means within Z Monte-Carlo errors of the exact posterior's."""
    entry = zoo.get_model("gamma_poisson")
    options = {"num_samples": 300, "warmup": 200, "num_chains": 4, "chain_groups": 1}
    run = zoo.run(entry, "nuts", seed=2, init="pathfinder", **options)
    default = zoo.run(entry, "nuts", seed=2, **options)
    assert run.ok and run.diagnostics["max_r_hat"] < 1.05
    assert run.diagnostics["init_gradient_evals"] > 0  # one Pathfinder run, one chain group
    assert "init_gradient_evals" not in default.diagnostics
    assert not np.array_equal(run.idata.posterior["rate"], default.idata.posterior["rate"])
    for row, (mu, sd) in entry.ground_truth().rows().items():
        ess = run.summary.loc[row, "ess_bulk"]
        assert abs(run.summary.loc[row, "mean"] - mu) < Z * sd / np.sqrt(ess), row


@pytest.mark.parametrize(
    "engine, options",
    [
        ("mh", {"num_samples": 200, "warmup": 200, "num_chains": 2}),
        # costly: the slow run (nuts's test shares their driver)
        pytest.param(
            "hmc", {"num_samples": 50, "warmup": 50, "num_chains": 2}, marks=pytest.mark.slow
        ),
        pytest.param(
            "chees", {"num_samples": 50, "warmup": 100, "num_chains": 16}, marks=pytest.mark.slow
        ),
    ],
)
def test_every_sampler_starts_from_pathfinder(engine, options):
    """init="pathfinder" reaches each sampler: its draws differ from the default starts' at
    the same seed, and the run is ok."""
    run = zoo.run("gamma_poisson", engine, seed=4, init="pathfinder", **options)
    default = zoo.run("gamma_poisson", engine, seed=4, **options)
    assert run.ok and default.ok
    assert not np.array_equal(run.idata.posterior["rate"], default.idata.posterior["rate"])


@pytest.mark.slow
@pytest.mark.parametrize("model", ["gamma_poisson", "beta_bernoulli"])
def test_pathfinder_is_calibrated(model):
    """SBC at 100 replications (tests/zoo/test_sbc.py gives the test's power): the resampled
    draws of a non-Gaussian conjugate posterior are calibrated (gamma_poisson, seed 0: p 0.46,
    25 s quiet, 84 s on a loaded core; beta_bernoulli p 0.72)."""
    result = sbc(model, "pathfinder", reps=100, seed=shifted(0), alpha=1e-3, workers=1)
    assert len(result.rep_ids) == 100, result.failures
    assert result.verdict == "calibrated", result.findings()


@pytest.mark.parametrize(
    "engine, options, message",
    [
        ("pathfinder", {"num_paths": 0}, "'num_paths' must be a positive integer"),
        ("pathfinder", {"history": -1}, "'history' must be a positive integer"),
        ("pathfinder", {"elbo_draws": 2.5}, "'elbo_draws' must be a positive integer"),
        ("pathfinder", {"draws_per_path": 0}, "'draws_per_path' must be a positive integer"),
        ("pathfinder", {"num_path": 2}, "did you mean 'num_paths'"),
        ("nuts", {"init": "pathfndr"}, "'init' must be one of \\[None, 'pathfinder'\\]"),
        ("chees", {"init": 3}, "'init' must be one of"),
        ("pyro_nuts", {"init": "pathfinder"}, "unknown option 'init' for engine 'pyro_nuts'"),
    ],
)
def test_bad_options_are_named(engine, options, message):
    with pytest.raises(ZooError, match=message):
        zoo.run("beta_bernoulli", engine, **options)


def test_info_lists_the_engine_and_its_options(capsys):
    assert main(["info", "beta_bernoulli"]) == 0
    out = capsys.readouterr().out
    assert "pathfinder" in out and "Pathfinder" in out
    for option in ("num_paths=4", "history=6", "elbo_draws=25", "draws_per_path=1000"):
        assert option in out
    assert "init=None" in out  # the samplers' option
