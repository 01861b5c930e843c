"""The exact samplers of seed 003 (L28–60): ``rejection`` and ``inverse_cdf``.

Their draws are independent and exact, so every check is against the closed-form posterior with
Monte-Carlo tolerances of independent draws: means within Z standard errors, sds within Z
standard errors of an sd, a Kolmogorov–Smirnov test at level ALPHA (false alarm ALPHA for any
seed), the evidence estimate log M + log(acceptance rate) within Z standard errors of the
binomial acceptance count, and simulation-based calibration.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch
from scipy import stats

import zoo
from zoo.calibrate import sbc
from zoo_inference import exact_draws

Z = 5.0  # Monte-Carlo standard errors allowed
ALPHA = 1e-3  # level of each Kolmogorov–Smirnov and SBC test
CONJUGATE = ("normal_normal", "beta_bernoulli", "gamma_poisson", "normal_gamma")


def scipy_marginal(d: torch.distributions.Distribution) -> stats.rv_continuous:
    """The closed form's marginal as a scipy distribution (torch's Beta and Gamma have no CDF)."""
    f = {k: float(v) for k, v in d.__dict__.items() if isinstance(v, torch.Tensor) and v.ndim == 0}
    name = type(d).__name__
    if name == "Normal":
        return stats.norm(f["loc"], f["scale"])
    if name == "Beta":
        return stats.beta(float(d.concentration1), float(d.concentration0))
    if name == "Gamma":
        return stats.gamma(f["concentration"], scale=1 / f["rate"])
    if name == "StudentT":
        return stats.t(f["df"], f["loc"], f["scale"])
    raise AssertionError(f"no scipy form for {name}")


def check_exact(model: str, run: zoo.Run) -> None:
    """Each site's draws against the closed form: mean, sd and a KS test."""
    assert run.ok and run.status == "ok", run.error or run.caveat
    exact = zoo.run(model, "exact", num_samples=10).extras["distributions"]
    for site, d in exact.items():
        x = run.idata.posterior[site].values.reshape(-1)
        n, truth = x.size, scipy_marginal(d)
        mean, sd = truth.mean(), truth.std()
        assert abs(x.mean() - mean) < Z * sd / np.sqrt(n), (site, x.mean(), mean)
        kurt = truth.stats(moments="k") if np.isfinite(truth.stats(moments="k")) else 6.0
        assert abs(x.std() / sd - 1) < Z * np.sqrt((kurt + 2) / (4 * n)), (site, x.std(), sd)
        assert stats.kstest(x, truth.cdf).pvalue > ALPHA, site


def check_evidence(model: str, run: zoo.Run) -> None:
    """log M + log(a / N): the sd of log(a / N) is sqrt((1 - a) / (a N)) for N proposals under
    the final bound."""
    d = run.diagnostics
    rate, se = d["acceptance_rate"], d["log_evidence_se"]
    truth = zoo.get_model(model).ground_truth().log_evidence
    assert se**2 * rate * (d["proposals"] - exact_draws.PILOT) >= (1 - rate) * (1 - 1e-9)
    tol = Z * se
    assert abs(run.log_evidence - truth) < tol, (run.log_evidence, truth, tol)
    assert abs(run.log_evidence - d["log_bound"] - np.log(rate)) < 1e-9


# ------------------------------------------------------------------ where they apply
def test_which_models_they_apply_to():
    for name in (*CONJUGATE, "three_coin", "gaussian_process", "robust_regression"):
        assert "rejection" in zoo.get_model(name).engines, name
    for name in ("normal_normal", "beta_bernoulli", "gamma_poisson"):
        assert "inverse_cdf" in zoo.get_model(name).engines, name
    assert "inverse_cdf" not in zoo.get_model("normal_gamma").engines
    mixture = zoo.get_model("gaussian_mixture")
    assert "rejection" not in mixture.engines
    assert "6 continuous latent elements" in mixture.why_not("rejection")
    assert "exactly one" in zoo.get_model("three_coin").why_not("inverse_cdf")


@pytest.mark.parametrize(
    ("options", "match"),
    [
        ({"envelope": "uniform"}, "envelope"),
        ({"max_proposals": 0}, "max_proposals"),
        ({"num_samples": 100, "max_proposals": 50}, "at least num_samples"),
        ({"num_sampels": 10}, "unknown option"),
    ],
)
def test_bad_options_are_refused_before_work(options, match):
    with pytest.raises(ValueError, match=match):
        zoo.run("normal_normal", "rejection", **options)


# ------------------------------------------------------------------ exact against closed forms
@pytest.mark.parametrize("model", CONJUGATE)
def test_student_t_envelope_draws_are_exact(model):
    run = zoo.run(model, "rejection", num_samples=2000, seed=1)
    check_exact(model, run)
    check_evidence(model, run)
    d = run.diagnostics
    assert d["envelope"] == "student_t" and d["restarts"] == 0
    assert d["num_samples"] == 2000 <= d["accepted"] < d["proposals"] - exact_draws.PILOT
    assert 0.2 < d["acceptance_rate"] < 1  # a Student-t around the mode: a tight envelope


@pytest.mark.parametrize("model", ("normal_normal", "beta_bernoulli"))
def test_prior_envelope_draws_are_exact(model):
    """The document's form: the prior as q and M the maximum likelihood."""
    run = zoo.run(model, "rejection", envelope="prior", num_samples=2000, seed=2)
    check_exact(model, run)
    check_evidence(model, run)


@pytest.mark.parametrize("model", ("normal_normal", "beta_bernoulli", "gamma_poisson"))
def test_inverse_cdf_draws_are_exact(model):
    run = zoo.run(model, "inverse_cdf", num_samples=4000, seed=3)
    check_exact(model, run)
    # the interpolant's mass: quadrature, not Monte Carlo
    truth = zoo.get_model(model).ground_truth().log_evidence
    assert run.log_evidence == pytest.approx(truth, abs=1e-5)
    assert run.evidence.kind == "exact"


def test_discrete_sites_are_summed_out_and_recovered():
    """three_coin: (pi, p, q) by rejection with z summed out of the ratio, z drawn from its
    exact conditional; each parameter's mean against the quadrature truth (pi's posterior is
    symmetric about 1/2, not uniform: the likelihood depends on pi p + (1 - pi) q, whose law
    under the uniform p and q changes with pi)."""
    run = zoo.run("three_coin", "rejection", num_samples=2000, seed=4)
    assert run.ok and run.idata.posterior["z"].shape == (1, 2000, 10)
    truth = zoo.get_model("three_coin").ground_truth()
    check = {s: truth.rows()[s] for s in ("pi", "p", "q")}
    for site, (mean, sd) in check.items():
        got = run.idata.posterior[site].values.reshape(-1)
        assert abs(got.mean() - mean) < Z * sd / np.sqrt(2000), site
    check_evidence("three_coin", run)


def test_gaussian_process_hyperparameters_agree_with_quadrature():
    run = zoo.run("gaussian_process", "rejection", num_samples=1000, seed=5)
    assert run.ok, run.error
    truth = zoo.get_model("gaussian_process").ground_truth()
    for row, (mean, sd) in truth.rows().items():
        if row in run.summary.index:
            assert abs(run.summary.loc[row, "mean"] - mean) < Z * sd / np.sqrt(1000), row
    check_evidence("gaussian_process", run)


# ------------------------------------------------------------------ the bound and the budget
def test_a_bound_found_wrong_is_raised_and_sampling_restarts(monkeypatch):
    """An optimiser that misses the maximum (here: it returns its start) leaves M too low; the
    first proposal above M raises it, the draws so far are discarded, and the final draws are
    exact all the same."""
    calls = []
    real = exact_draws._maximise

    def missing(f, starts):
        calls.append(len(starts))
        if len(calls) == 1:  # the first search: report a value far below the maximum
            return -1e3, starts[0]
        return real(f, starts)

    real_envelope = exact_draws._student_t_envelope

    def tail_pilot(ctx, target):
        """The pilot is the worst of 64 proposals: its ratio is far below M whatever the
        stream (a lone pilot draw could land near the maximum and leave M right)."""
        env = real_envelope(ctx, target)
        draw, first = env.draw, []

        def draw_tail_first(n):
            if first:
                return draw(n)
            first.append(n)
            u, r = draw(64)
            i = int(np.argmin(r))
            return u[i : i + 1], r[i : i + 1]

        return dataclasses.replace(env, draw=draw_tail_first)

    monkeypatch.setattr(exact_draws, "_maximise", missing)
    monkeypatch.setattr(exact_draws, "_student_t_envelope", tail_pilot)
    run = zoo.run("normal_normal", "rejection", num_samples=2000, seed=6)
    assert run.diagnostics["restarts"] >= 1 and len(calls) >= 2
    check_exact("normal_normal", run)


def test_max_proposals_stops_the_run_with_a_clear_status():
    """normal_normal's prior envelope accepts about one in eleven: 1000 proposals after the
    pilot give far fewer than 1000 draws."""
    run = zoo.run(
        "normal_normal", "rejection", envelope="prior", num_samples=1000, max_proposals=2000
    )
    assert run.status == "unreliable" and "stopped at max_proposals=2000" in run.caveat
    assert run.diagnostics["proposals"] == 2000
    assert 0 < run.idata.posterior.sizes["draw"] < 1000
    # robust_regression's prior is about a million times wider than its posterior: no draw
    with pytest.warns(RuntimeWarning, match="no proposal accepted"):
        failed = zoo.run(
            "robust_regression", "rejection", envelope="prior", num_samples=10, max_proposals=5000
        )
    assert not failed.ok and "no proposal accepted" in failed.error


def test_compare_and_summary():
    cmp = zoo.compare("beta_bernoulli", engines=["exact", "rejection", "inverse_cdf"])
    assert set(cmp.runs) == {"exact", "rejection", "inverse_cdf"}
    assert all(r.ok for r in cmp.runs.values())
    assert ("rejection", "mean") in cmp.table_wide.columns


# ------------------------------------------------------------------ calibration
def test_sbc_small():
    """A smoke-size SBC (20 replications): each engine runs on simulated data and is not
    flagged (false alarm 1e-3); the slow run below has the power."""
    for engine in ("rejection", "inverse_cdf"):
        res = sbc("normal_normal", engine, reps=20, seed=0, workers=1, alpha=ALPHA, num_samples=99)
        assert res.verdict == "calibrated", res.findings()
        assert len(res.rep_ids) == 20 and np.isnan(res.ess).all()  # independent draws


@pytest.mark.slow
@pytest.mark.parametrize(
    ("model", "engine", "options"),
    [
        ("normal_normal", "rejection", {}),
        ("beta_bernoulli", "rejection", {"envelope": "prior"}),
        ("gamma_poisson", "inverse_cdf", {}),
        ("three_coin", "rejection", {}),
    ],
)
def test_sbc(model, engine, options):
    """100 replications, 10 rank bins: a calibrated engine fails with probability 1e-3, draws
    with doubled spread with probability 0.9999 (tests/zoo/test_sbc.py's power figures)."""
    res = sbc(model, engine, reps=100, seed=0, workers=1, alpha=ALPHA, num_samples=99, **options)
    print(res, res.table.to_string(), sep="\n")
    assert res.verdict == "calibrated", res.findings()
