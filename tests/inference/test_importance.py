"""Importance sampling's default proposal and its reliability verdict (Pareto k-hat of the weights).

A conjugate linear regression registered without a guide: its prior (sd 5) is a hopeless proposal
for a posterior of sd 0.04 in two dimensions (about one effective draw in thousands), so the
default run fits a full-rank Gaussian guide instead, says so, and lands on the closed form within
its own Monte-Carlo error. The prior, asked for by name, is kept and the run is flagged.
"""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pyro
import pyro.distributions as dist
import pytest
import torch

import zoo
import zoo_reports as reports
from zoo_inference.importance import RELIABLE_K

Z = 5.0  # Monte-Carlo standard errors allowed


@pytest.fixture
def regression(registry):
    """bayesian_linear_regression's model and closed form, registered without its guide."""
    blr = zoo.get_model("bayesian_linear_regression")
    return zoo.register(
        "regression_without_guide",
        model=blr.model,
        data=blr.load_data(),
        posterior=blr.posterior_fn,
    )


def test_default_proposal_leaves_a_poor_prior_for_a_fitted_guide(regression):
    run = zoo.run(regression, "importance", num_samples=4000, seed=3)
    d = run.diagnostics
    assert d["prior_pareto_k"] > RELIABLE_K  # the prior was tried first, and refused
    assert d["proposal"] == "mvn"
    assert run.status == "ok" and run.caveat is None
    assert d["pareto_k"] <= RELIABLE_K
    ess = d["ess"]
    assert ess > 400  # ~1 with the prior; enough for the bound below to mean something
    truth = regression.ground_truth()
    for row, (mean, sd) in truth.rows().items():
        got = run.summary.loc[row]
        assert abs(got["mean"] - mean) < Z * sd / np.sqrt(ess), (row, got["mean"], mean)
        assert abs(got["sd"] / sd - 1) < Z * np.sqrt(0.5 / ess), (row, got["sd"], sd)
    # log of a mean of weights: relative sd of the mean weight ~ sqrt(1 / ess)
    assert run.log_evidence == pytest.approx(truth.log_evidence, abs=Z / np.sqrt(ess))


def test_a_fitted_proposal_says_how_it_was_fitted(regression, monkeypatch):
    """Like ``svi``, the diagnostics say whether Pyro's JIT ELBO fitted the proposal and, where
    it was asked for but not used, why; a prior proposal was not fitted and says nothing."""
    run = zoo.run(regression, "importance", proposal="mvn", num_samples=500, fit_steps=50, seed=3)
    fitted = zoo.run(
        regression, "svi", guide="mvn", backend="pyro", num_steps=50, num_samples=10, seed=3
    )
    assert run.diagnostics["jit"] is fitted.diagnostics["jit"]  # the same fit, the same ELBO
    assert run.diagnostics.get("jit_fallback") == fitted.diagnostics.get("jit_fallback")
    prior = zoo.run(regression, "importance", proposal="prior", num_samples=500, seed=3)
    assert "jit" not in prior.diagnostics
    from zoo_inference import importance, svi

    def refused(*args, **kwargs):  # a JIT ELBO that disagreed with the plain one
        f = svi.fit_guide(*args, **{**kwargs, "jit": False})
        return dataclasses.replace(f, jit_fallback="the JIT ELBO disagreed")

    monkeypatch.setattr(importance, "fit_guide", refused)
    run = zoo.run(regression, "importance", proposal="mvn", num_samples=500, fit_steps=50, seed=3)
    assert run.diagnostics["jit"] is False
    assert run.diagnostics["jit_fallback"] == "the JIT ELBO disagreed"


def test_a_proposal_whose_fit_diverged_fails_and_says_so(regression, monkeypatch):
    """A fitted proposal with a NaN parameter (its fit diverged) fails with the engine's own
    message, not a distribution's argument check from deep inside the draws."""
    from zoo_inference import importance, svi

    def diverged(*args, **kwargs):
        fitted = svi.fit_guide(*args, **kwargs)
        with torch.no_grad():
            next(fitted.guide.parameters()).fill_(float("nan"))
        return fitted

    monkeypatch.setattr(importance, "fit_guide", diverged)
    run = zoo.run(regression, "importance", proposal="mvn", num_samples=200, fit_steps=20, seed=1)
    assert run.status == "failed"
    assert "the mvn proposal's fit diverged" in run.error and "lr=0.05" in run.error, run.error
    # a fit whose step left a parameter NaN fails the next step's argument check, in the fit
    # (the Gym's 2519-dimensional log-return volatility does: the slow conformance cell)

    def nan_in_the_fit(*args, **kwargs):
        with torch.no_grad():
            dist.Normal(torch.tensor(float("nan")), 1.0, validate_args=True)

    monkeypatch.setattr(importance, "fit_guide", nan_in_the_fit)
    run = zoo.run(regression, "importance", proposal="mvn", num_samples=200, fit_steps=20, seed=1)
    assert run.status == "failed"
    assert "proposal's fit diverged: a parameter left its support within 20" in run.error


def test_the_prior_asked_for_is_kept_and_flagged_unreliable(regression):
    run = zoo.run(regression, "importance", proposal="prior", num_samples=4000, seed=3)
    assert run.diagnostics["proposal"] == "prior"
    assert run.diagnostics["pareto_k"] > RELIABLE_K
    assert run.ok and run.status == "unreliable"  # numbers present, not to be trusted
    assert "Pareto k\u0302" in run.caveat and "the prior" in run.caveat
    assert "unreliable" in repr(run)
    truth = regression.ground_truth()
    cmp = zoo.api.comparison(regression, {"importance": run}, regression.load_data())
    found = reports.findings(cmp.table_wide, runs=cmp.runs, truth=truth)
    flagged = [f for f in found if f.topic == "unreliable"]
    assert len(flagged) == 1 and flagged[0].level == "bad"
    assert flagged[0].text.startswith("importance's numbers are unreliable: ")
    page = reports.render_model_page(cmp)
    assert 'class="status unreliable"' in page["regression_without_guide.html"]
    index = reports.render_index([json.loads(page["summary"])])["index.html"]
    assert '<span class="status unreliable">unreliable</span>' in index


def test_a_good_prior_stays_the_proposal(registry):
    """Ten coin flips under a uniform prior: the weights are the likelihood, bounded, and the
    prior is kept."""

    def coin(y):
        p = pyro.sample("p", dist.Beta(1.0, 1.0))
        with pyro.plate("n", len(y)):
            pyro.sample("y", dist.Bernoulli(p), obs=y)

    y = torch.tensor([1.0, 1, 0, 1, 1, 1, 0, 1, 1, 0])
    entry = zoo.register("coin_without_guide", model=coin, data={"y": y})
    run = zoo.run(entry, "importance", num_samples=4000, seed=0)
    assert run.diagnostics["proposal"] == "prior"
    assert run.diagnostics["prior_pareto_k"] == run.diagnostics["pareto_k"] <= RELIABLE_K
    assert run.status == "ok" and "elbo" not in run.traces  # nothing was fitted
    ess = run.diagnostics["ess"]
    mean, sd = 8 / 12, np.sqrt(8 * 4 / (12**2 * 13))  # Beta(8, 4)
    assert abs(run.summary.loc["p", "mean"] - mean) < Z * sd / np.sqrt(ess)


def test_a_model_with_only_discrete_sites_keeps_the_prior_and_says_it_is_unreliable(registry):
    """No autoguide fits discrete sites: the prior stays the proposal, its k-hat flags the run.
    Thirty labels each pinned down by its observation: 2^30 prior assignments, one posterior."""

    def labels(y):
        with pyro.plate("n", len(y)):
            z = pyro.sample("z", dist.Bernoulli(0.5))
            pyro.sample("y", dist.Normal(3.0 * z, 0.3), obs=y)

    y = 3.0 * (torch.arange(30) % 2).float()
    entry = zoo.register("labels_only", model=labels, data={"y": y})
    run = zoo.run(entry, "importance", num_samples=2000, seed=0)
    assert run.diagnostics["proposal"] == "prior"
    assert not run.diagnostics["prior_pareto_k"] <= RELIABLE_K  # above, or NaN (too few)
    assert run.ok and run.status == "unreliable" and "the prior" in run.caveat
