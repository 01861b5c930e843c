"""The svi engine's batched path (inference/advi.py): ADVI on the model's batched log density.

Its gradients are written by the chain rule; autograd of the same ELBO estimate checks them. A
full-rank Gaussian guide is exact on a Gaussian posterior, so on Bayesian linear regression the
fit must reach the closed form; on a model with enumerated discrete sites it must agree with
Pyro's own SVI (TraceEnum_ELBO), which fits the same objective.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import zoo
from zoo_inference.advi import GRADIENTS, LOG_2PI
from zoo_inference.results import ZooError


def gaussian_density(mean: torch.Tensor, prec: torch.Tensor):
    """log N(theta | mean, prec^-1) up to a constant, batched, with its gradient."""

    def density(theta: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        d = theta - mean
        return -0.5 * ((d @ prec) * d).sum(-1), -(d @ prec)

    return density


@pytest.mark.parametrize("family", ["meanfield", "fullrank"])
def test_chain_rule_gradient_equals_autograd(family):
    """At fixed draws eps, the hand-written gradient equals autograd of the ELBO estimate
    mean_p log p(mu + L eps_p) + sum log L_ii + D/2 (1 + log 2 pi)."""
    g = torch.Generator().manual_seed(0)
    dim, particles = 4, 7
    a = torch.randn(dim, dim, generator=g, dtype=torch.float64)
    prec = a @ a.T + torch.eye(dim, dtype=torch.float64)
    mean = torch.randn(dim, generator=g, dtype=torch.float64)
    size = 2 * dim + (dim * (dim - 1) // 2 if family == "fullrank" else 0)
    params = torch.randn(size, generator=g, dtype=torch.float64)
    eps = torch.randn(particles, dim, generator=g, dtype=torch.float64)
    density = gaussian_density(mean, prec)
    elbo, grad = GRADIENTS[family](density, params, eps)

    def estimate(p: torch.Tensor) -> torch.Tensor:
        loc, scale = p[:dim], torch.nn.functional.softplus(p[dim : 2 * dim])
        unit = torch.eye(dim, dtype=p.dtype)
        if family == "fullrank":
            rows, cols = torch.tril_indices(dim, dim, -1)
            unit = unit.index_put((rows, cols), p[2 * dim :])
        theta = loc + eps @ (scale[:, None] * unit).T
        log_p = density(theta)[0]
        return log_p.mean() + scale.log().sum() + 0.5 * dim * (1 + LOG_2PI)

    x = params.clone().requires_grad_(True)
    want = estimate(x)
    (want_grad,) = torch.autograd.grad(want, x)
    assert float(elbo) == pytest.approx(float(want), rel=1e-12)
    np.testing.assert_allclose(grad.numpy(), want_grad.numpy(), rtol=1e-10, atol=1e-12)


def test_full_rank_fit_is_exact_on_a_gaussian_posterior():
    """Bayesian linear regression: posterior N(mu_n, Sigma_n). With the covariate shifted to
    x + 2 (not centred) slope and intercept are strongly correlated. A full-rank Gaussian is
    exact here: the fit's mean, sds and correlation reach the closed form, and its ELBO the log
    evidence. Tolerances: with 16 particles a step, the last iterate of Adam (lr 0.05 decayed to
    0.005) jitters by under a tenth of a posterior sd; 4000 draws add 1.6% of an sd."""
    entry = zoo.get_model("bayesian_linear_regression")
    data = dict(entry.load_data())
    data["X"] = data["X"] + torch.tensor([2.0, 0.0])
    post, log_z = entry.posterior_fn(**data)
    cov = post["beta"].covariance_matrix.double().numpy()
    mean, sd = post["beta"].loc.double().numpy(), np.sqrt(np.diag(cov))
    exact_corr = cov[0, 1] / (sd[0] * sd[1])
    assert abs(exact_corr) > 0.8  # a real test of the off-diagonal
    run = zoo.run(
        entry,
        "svi",
        data=data,
        guide="mvn",
        seed=0,
        num_steps=3000,
        num_particles=16,
        num_samples=4000,
    )
    assert run.ok, run.error
    assert run.diagnostics["backend"] == "zoo"
    draws = run.idata.posterior["beta"].values.reshape(-1, 2)
    assert np.all(np.abs(draws.mean(0) - mean) < 0.25 * sd), (draws.mean(0), mean)
    np.testing.assert_allclose(draws.std(0), sd, rtol=0.12)
    assert np.corrcoef(draws.T)[0, 1] == pytest.approx(exact_corr, abs=0.03)
    assert float(log_z) - 0.05 < run.diagnostics["final_elbo"] < float(log_z) + 0.05
    # importance weights of an exact guide are nearly constant: k-hat far below 0.5
    assert run.diagnostics["pareto_k"] < 0.5


def test_agrees_with_pyro_svi_with_enumerated_sites():
    """three_coin's assignments are summed out of the density; Pyro's TraceEnum_ELBO sums them
    out of the model. Same guide family, same objective: the final ELBOs agree within their
    noise and the posterior means within half a posterior sd."""
    kw = dict(guide="normal", seed=2, num_steps=1500, num_samples=2000)
    ours = zoo.run("three_coin", "svi", **kw)
    pyro = zoo.run("three_coin", "svi", backend="pyro", **kw)
    assert ours.ok and pyro.ok, (ours.error, pyro.error)
    assert ours.diagnostics["backend"] == "zoo" and pyro.diagnostics["backend"] == "pyro"
    noise = np.std(ours.diagnostics["elbo"][-100:]) / math.sqrt(100) + np.std(
        pyro.diagnostics["elbo"][-100:]
    ) / math.sqrt(100)
    assert abs(ours.diagnostics["final_elbo"] - pyro.diagnostics["final_elbo"]) < 5 * noise + 0.1
    for site in ("pi", "p", "q"):
        a, b = ours.summary.loc[site], pyro.summary.loc[site]
        assert abs(a["mean"] - b["mean"]) < 0.5 * max(a["sd"], b["sd"]), site
    # the discrete sites are recovered from their exact conditional given each draw
    z = ours.idata.posterior["z"].values
    n = len(zoo.get_model("three_coin").load_data()["y"])
    assert set(np.unique(z)) <= {0, 1} and z.shape[-1] == n


def test_same_seed_same_numbers():
    a = zoo.run("logistic_regression", "svi", guide="normal", seed=5, num_steps=200, num_samples=50)
    b = zoo.run("logistic_regression", "svi", guide="normal", seed=5, num_steps=200, num_samples=50)
    c = zoo.run("logistic_regression", "svi", guide="normal", seed=6, num_steps=200, num_samples=50)
    assert a.diagnostics["elbo"] == b.diagnostics["elbo"]
    np.testing.assert_array_equal(a.idata.posterior["beta"], b.idata.posterior["beta"])
    assert a.diagnostics["elbo"] != c.diagnostics["elbo"]


@pytest.mark.parametrize(
    "options, message",
    [
        ({"guide": "model"}, r"backend='zoo' does not apply: guide='model'"),
        ({"guide": "normal", "elbo": "iwae", "num_particles": 4}, r"elbo='iwae'"),
        ({"guide": "delta"}, r"guide='delta' is fitted by Pyro's SVI"),
    ],
)
def test_backend_zoo_says_what_it_cannot_fit(options, message):
    with pytest.raises(ZooError, match=message):
        zoo.run("logistic_regression", "svi", backend="zoo", num_steps=10, **options)
