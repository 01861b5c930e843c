"""The generic Laplace engine (inference/laplace.py): exact on a Gaussian posterior, the
Jacobian of a constrained site included, refused or failing where it cannot apply. Logistic
regression's Laplace (MAP = scikit-learn's, analytic Hessian) is in test_regression."""

from __future__ import annotations

import numpy as np
import pyro
import pyro.distributions as dist
import pytest
import torch
from scipy.special import betaln, logit

import zoo
from zoo_inference.laplace import _newton

BLR = zoo.get_model("bayesian_linear_regression")


def test_exact_on_a_gaussian_posterior():
    """y ~ N(X beta, sigma^2), beta ~ N(0, tau^2 I): the posterior is Gaussian, so the mode is its
    mean, (-H)^-1 its covariance and the Laplace evidence the exact log evidence."""
    truth = BLR.ground_truth()
    dists, log_z = zoo.in_float64(BLR.posterior_fn, BLR.load_data())
    mean, cov = dists["beta"].mean.numpy(), dists["beta"].covariance_matrix.numpy()
    run = zoo.run(BLR, "laplace", num_samples=100)
    assert run.ok and run.closed_form and run.evidence.kind == "estimate"
    assert run.extras["sites"] == ["beta"] and run.extras["space"] == "unconstrained"
    np.testing.assert_allclose(run.extras["mode"], mean, rtol=1e-6)
    np.testing.assert_allclose(run.extras["cov"], cov, rtol=1e-6)
    rows = ["beta[0]", "beta[1]"]
    np.testing.assert_allclose(run.summary.loc[rows, "mean"], truth.mean["beta"], rtol=1e-6)
    np.testing.assert_allclose(run.summary.loc[rows, "sd"], truth.sd["beta"], rtol=1e-6)
    assert run.log_evidence == pytest.approx(log_z, rel=1e-6)
    assert np.all(np.diff(run.traces["log_joint"]) >= -1e-9)  # monotone ascent


def test_the_gaussian_is_on_the_unconstrained_space():
    """beta_bernoulli: p ~ Beta(a, b), k of n ones; on u = logit p the density (Jacobian
    p (1 - p) included) is p^(a+k) (1-p)^(b+n-k), whose mode is p = (a + k) / (a + b + n) (not the
    posterior mode (a + k - 1) / (a + b + n - 2)) and whose curvature is -(a + b + n) p (1 - p)."""
    entry = zoo.get_model("beta_bernoulli")
    data = entry.load_data()
    k, n, a, b = float(data["y"].sum()), len(data["y"]), data["a"], data["b"]
    p = (a + k) / (a + b + n)
    var = 1 / ((a + b + n) * p * (1 - p))
    run = zoo.run(entry, "laplace", num_samples=4000)
    assert not run.closed_form  # p's moments are those of the draws mapped through sigmoid
    assert run.extras["mode"][0] == pytest.approx(logit(p), abs=1e-7)
    assert run.extras["cov"][0, 0] == pytest.approx(var, rel=1e-6)
    # evidence: L(u*) + log(2 pi) / 2 - log(-H) / 2, L(u) = log p(y, p(u)) + log p(1 - p)
    log_joint = (a + k) * np.log(p) + (b + n - k) * np.log(1 - p) - betaln(a, b)
    assert run.log_evidence == pytest.approx(log_joint + 0.5 * np.log(2 * np.pi * var), abs=1e-7)
    draws = run.idata.posterior["p"].values.ravel()
    assert np.all((draws > 0) & (draws < 1))
    # the draws are sigmoid(u), u ~ N(u*, var): their logits' median within 5 Monte-Carlo sds
    # of u* (a sample median's sd: 1.2533 sd / sqrt(n))
    assert abs(np.median(logit(draws)) - logit(p)) < 5 * 1.2533 * np.sqrt(var / draws.size)


def test_discrete_models_are_refused():
    with pytest.raises(ValueError, match="discrete latent sites"):
        zoo.run("three_coin", "laplace")


def test_a_density_without_a_mode_fails_saying_so():
    """The centred eight schools: the density grows without bound as tau -> 0 (the funnel)."""
    run = zoo.run("eight_schools", "laplace", starts=2)
    assert run.status == "failed" and "no mode found" in run.error


def test_seeded_draws_and_options(registry):
    def model(y):
        mu = pyro.sample("mu", dist.Normal(0.0, 10.0))
        sigma = pyro.sample("sigma", dist.HalfNormal(5.0))
        with pyro.plate("n", len(y)):
            pyro.sample("y", dist.Normal(mu, sigma), obs=y)

    entry = zoo.register("laplace_normal", model=model, data={"y": torch.linspace(-1, 3, 9)})
    one = zoo.run(entry, "laplace", num_samples=50, seed=3)
    two = zoo.run(entry, "laplace", num_samples=50, seed=3)
    np.testing.assert_array_equal(one.idata.posterior["mu"], two.idata.posterior["mu"])
    assert one.idata.posterior["sigma"].shape == (1, 50)
    assert one.summary.loc["mu", "mean"] == pytest.approx(one.extras["mode"][0])  # real: exact
    with pytest.raises(ValueError, match="'starts' must be a positive integer"):
        zoo.run(entry, "laplace", starts=0)


def test_the_gaussian_checks_itself_by_importance_weights():
    """Pareto k-hat of p(y, u) / q(u) over the Gaussian's own draws. On a Gaussian posterior the
    weights are constant (k-hat far below 0.7) and the run is ok. On the non-centred eight
    schools, where tau's posterior is skewed (half-Cauchy prior, 8 data points), the Gaussian
    misses mass: k-hat about 1.3 (its sd over seeds about 0.1 at 4000 draws), so the run itself
    says unreliable, and the report's status and findings name Laplace's Gaussian."""
    from zoo_inference.verdict import assess

    gauss = zoo.run(BLR, "laplace", num_samples=4000)
    assert gauss.diagnostics["pareto_k"] < 0.5 and gauss.status == "ok"
    assert assess(gauss).status == "ok"
    skewed = zoo.run("eight_schools_noncentered", "laplace", num_samples=4000)
    assert skewed.ok and skewed.diagnostics["pareto_k"] > 0.9
    assert skewed.status == "unreliable"
    assert skewed.caveat.startswith("Laplace's Gaussian is far from the posterior")
    judged = assess(skewed)
    assert judged.status == "unreliable" and judged.flags == ("caveat",)


def test_newton_goes_by_the_gradient_where_the_rise_is_below_the_values_rounding():
    """Near a mode Newton's predicted rise (1e-16 here) can be far below the rounding of the log
    density's value (a GP's Cholesky leaves about 1e-13): a rise test on values would refuse
    every step and stop at |gradient| 1e-7. Where the rise is below that rounding, a step that
    shrinks the gradient is taken, and the mode is found to machine precision."""
    c, x0 = 100.0, torch.full((3,), 1e-9, dtype=torch.float64)

    def f(x):  # -c |x|^2 / 2, its value 1e-13 lower away from x0 (rounding: no gradient)
        return -0.5 * c * x.pow(2).sum() - 1e-13 * (x != x0).any().double().detach()

    trace = [float(f(x0))]
    mode = _newton(f, x0, trace, tol=1e-9)
    assert float(mode.abs().max()) < 1e-15  # from 1e-9: the exact mode is 0
