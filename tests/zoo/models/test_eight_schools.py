"""eight_schools (centred) and eight_schools_noncentered: the quadrature truth checked by an
independent 2-D grid, NUTS against it, the centred funnel's divergences, mean-field SVI's bias."""

import numpy as np
import pytest
from scipy import stats

import zoo
from tests.seeding import shifted
from zoo.models.hierarchical import schools_conditional
from zoo_inference.backend import has_compiler

Y = np.array([28.0, 8, -3, 7, -1, 1, 18, 12])
SIGMA = np.array([15.0, 10, 16, 11, 9, 11, 10, 18])
CENTRED = zoo.get_model("eight_schools")
NONCENTRED = zoo.get_model("eight_schools_noncentered")


@pytest.fixture(scope="module")
def grid_truth():
    """Posterior moments on a 2-D (mu, tau) midpoint grid: theta integrated out analytically
    (y_j ~ N(mu, sqrt(sigma_j^2 + tau^2))), then theta_j and eta_j = (theta_j - mu) / tau from
    their Normal conditionals given (mu, tau): theta_j mean (y_j tau^2 + mu sigma_j^2) / (sigma_j^2
    + tau^2), var sigma_j^2 tau^2 / (sigma_j^2 + tau^2); eta_j mean tau (y_j - mu) / (sigma_j^2 +
    tau^2), var sigma_j^2 / (sigma_j^2 + tau^2)."""
    dmu, dtau = 0.2, 0.05
    mu = -30 + (np.arange(350) + 0.5) * dmu  # (-30, 40)
    tau = (np.arange(1600) + 0.5) * dtau  # (0, 80)
    M, T = np.meshgrid(mu, tau, indexing="ij")
    s2 = SIGMA**2
    v = s2 + T[..., None] ** 2
    log_lik = (-0.5 * ((Y - M[..., None]) ** 2 / v + np.log(2 * np.pi * v))).sum(-1)
    log_prior = stats.norm.logpdf(M, 0, 5) + stats.halfcauchy.logpdf(T, scale=5)
    log_joint = log_prior + log_lik
    shift = log_joint.max()
    w = np.exp(log_joint - shift)
    z = w.sum() * dmu * dtau
    w = w / w.sum()
    out = {"log_evidence": np.log(z) + shift}

    def moments(mean, var):
        m = (w[..., None] * mean).sum((0, 1))
        return m, np.sqrt((w[..., None] * (var + mean**2)).sum((0, 1)) - m**2)

    out["mu"] = ((w * M).sum(), np.sqrt((w * M**2).sum() - (w * M).sum() ** 2))
    out["tau"] = ((w * T).sum(), np.sqrt((w * T**2).sum() - (w * T).sum() ** 2))
    t2 = T[..., None] ** 2
    out["theta"] = moments((Y * t2 + M[..., None] * s2) / v, s2 * t2 / v)
    out["eta"] = moments(T[..., None] * (Y - M[..., None]) / v, s2 / v)
    return out


def test_data_are_rubins_schools():
    d = CENTRED.load_data()
    np.testing.assert_array_equal(d["y"].numpy(), Y)
    np.testing.assert_array_equal(d["sigma"].numpy(), SIGMA)


def test_quadrature_truth_agrees_with_an_independent_2d_grid(grid_truth):
    truth = NONCENTRED.ground_truth()
    assert truth.log_evidence == pytest.approx(grid_truth["log_evidence"], abs=2e-3)
    for site in ("mu", "tau"):
        assert float(truth.mean[site]) == pytest.approx(grid_truth[site][0], abs=5e-3), site
        assert float(truth.sd[site]) == pytest.approx(grid_truth[site][1], abs=5e-3), site
    for site in ("theta", "eta"):
        np.testing.assert_allclose(truth.mean[site], grid_truth[site][0], atol=5e-3)
        np.testing.assert_allclose(truth.sd[site], grid_truth[site][1], atol=5e-3)
    # the well-known answer for these priors: mu about 4.4, tau about 3.6
    assert float(truth.mean["mu"]) == pytest.approx(4.40, abs=0.01)
    assert float(truth.mean["tau"]) == pytest.approx(3.60, abs=0.01)
    # both parameterisations are one joint law: same truth on the shared sites
    centred = CENTRED.ground_truth()
    assert set(centred.mean) == {"mu", "tau", "theta"}
    for site in centred.mean:
        np.testing.assert_allclose(centred.mean[site], truth.mean[site], rtol=1e-12)
    assert centred.log_evidence == truth.log_evidence


def test_truth_densities_integrate_to_one_and_match_the_moments():
    truth = CENTRED.ground_truth()
    t = (np.arange(4000) + 0.5) * 0.05  # (0, 200)
    p = truth.density["tau"](t)
    assert p.sum() * 0.05 == pytest.approx(1.0, abs=2e-3)
    assert (t * p).sum() * 0.05 == pytest.approx(float(truth.mean["tau"]), abs=1e-2)
    m = np.linspace(-40, 50, 9001)
    q = truth.density["mu"](m)
    assert q.sum() * 0.01 == pytest.approx(1.0, abs=1e-4)
    assert (m * q).sum() * 0.01 == pytest.approx(float(truth.mean["mu"]), abs=1e-4)


def test_conditional_at_tau_zero_is_the_conjugate_update():
    """At tau = 0 every theta_j = mu: eta_j | y is its N(0, 1) prior and mu | y the conjugate
    update of N(0, 5) by y_j ~ N(mu, sigma_j) (the quadrature's end point is well defined)."""
    _, mean, cov = schools_conditional(Y, SIGMA, 0.0)
    np.testing.assert_allclose(mean[1:], 0.0, atol=1e-12)
    np.testing.assert_allclose(np.diag(cov)[1:], 1.0, atol=1e-12)
    prec = 1 / 25 + (1 / SIGMA**2).sum()
    assert mean[0] == pytest.approx((Y / SIGMA**2).sum() / prec, rel=1e-12)
    assert cov[0, 0] == pytest.approx(1 / prec, rel=1e-12)


@pytest.fixture(scope="module")
def noncentred_nuts():
    return zoo.run(NONCENTRED, "nuts", num_samples=200, warmup=200, num_chains=2, seed=2)


@pytest.fixture(scope="module")
def centred_nuts():
    # default NUTS settings (target_accept 0.8, tree depth 10), modest size; four chains, because
    # whether a chain diverges at all depends mostly on the step size its own warm-up adapted:
    # 5 of 24 single 200-draw chains (seeds 0-23) had none, so one chain cannot promise any.
    # Compiled: the funnel's trees run to depth 10, where the compiled step pays for its compile
    return zoo.run(CENTRED, "nuts", num_samples=200, warmup=200, num_chains=4, jit=True, seed=2)


def test_centred_model_diverges_noncentred_does_not(centred_nuts, noncentred_nuts):
    """Neal's funnel: the centred model's NUTS run reports divergent transitions, the non-centred
    one (almost) none. Chains diverge independently, each with probability about 0.8 (19 of 24
    seeds), so all four centred chains stay clean with probability about 0.2^4 = 0.2%; the
    non-centred runs had 0 or 1 divergences in 400 draws (14 seeds), and 1% of draws is 4."""
    assert centred_nuts.diagnostics["divergences"] > 0
    assert noncentred_nuts.diagnostics["divergences"] <= 4
    # the funnel also starves the centred chains: tau's ESS per draw is below the non-centred's
    # (paired over 14 seeds the ratio was 0.02-0.58, typically 0.1)
    ess_c = centred_nuts.summary.loc["tau", "ess_bulk"] / 800
    ess_nc = noncentred_nuts.summary.loc["tau", "ess_bulk"] / 400
    assert ess_c < ess_nc


def test_a_run_says_how_long_it_compiled(centred_nuts, noncentred_nuts):
    """diagnostics["compile_s"]: the wall seconds of the run spent tracing and compiling the
    sampler's step (inductor's on-disk cache keeps them small on a second run); none on the
    traced graph (the suite's jit=None runs)."""
    spent = centred_nuts.diagnostics["compile_s"]
    if has_compiler():  # jit=True
        assert 0 < spent < centred_nuts.diagnostics["wall_time_s"]
    else:
        assert spent == 0
    assert noncentred_nuts.diagnostics["compile_s"] == 0


def test_noncentred_nuts_matches_quadrature_within_mc_error(noncentred_nuts):
    rows = NONCENTRED.ground_truth().rows()
    s = noncentred_nuts.summary
    # split R-hat of 4 half-chains of 100 draws is itself noisy (up to 1.06 over 14 seeds):
    # 1.1 is the conventional threshold
    assert noncentred_nuts.diagnostics["max_r_hat"] < 1.1
    for row in ["mu", "tau"] + [f"theta[{j}]" for j in range(8)] + [f"eta[{j}]" for j in (0, 6)]:
        mean, sd = rows[row]
        assert abs(s.loc[row, "mean"] - mean) < 4 * sd / np.sqrt(s.loc[row, "ess_bulk"]), row


def test_centred_nuts_means_are_near_the_truth_despite_the_funnel(centred_nuts):
    """The centred chains are biased (they rarely enter the funnel's neck, so tau comes out too
    large on average: by about 0.2 posterior sd over 14 two-chain runs of 200 draws), and their
    Monte-Carlo error is large and uncertain (tau's ESS 4-45). A chain that sticks in the neck
    for a while pulls tau low instead (seen: -0.27 sd, ESS 4). No single run is within a fixed
    fraction of a sd of the truth, but every run is within the bias allowance (0.5 sd, over
    twice the mean bias) plus 4 Monte-Carlo standard errors from its own ESS: across 48 runs
    (1 or 2 chains of 200 or 500 draws) the worst error used 0.52 of that bound."""
    rows = CENTRED.ground_truth().rows()
    for row in ("mu", "tau"):
        mean, sd = rows[row]
        r = centred_nuts.summary.loc[row]
        assert abs(r["mean"] - mean) < (0.5 + 4 / np.sqrt(r["ess_bulk"])) * sd, row


def test_mean_field_svi_biases():
    """Mean-field SVI (the models' own guides): the centred guide cannot follow the funnel, its
    sd of mu is under 60% of the exact one (about half) and its ELBO over 1 nat below log p(y);
    the non-centred guide gets mu's mean and sd right and is within a nat of log p(y)."""
    truth = CENTRED.ground_truth()
    c = zoo.run(CENTRED, "svi", num_steps=800, jit=True, seed=0)
    nc = zoo.run(NONCENTRED, "svi", num_steps=800, jit=True, seed=0)
    assert c.summary.loc["mu", "sd"] < 0.6 * float(truth.sd["mu"])
    assert c.log_evidence < truth.log_evidence - 1.0
    assert abs(nc.summary.loc["mu", "mean"] - float(truth.mean["mu"])) < 0.2 * truth.sd["mu"]
    assert nc.summary.loc["mu", "sd"] == pytest.approx(float(truth.sd["mu"]), rel=0.15)
    assert truth.log_evidence - 1.0 < nc.log_evidence < truth.log_evidence


def test_synthetic_generator_keeps_the_standard_errors():
    data, true = NONCENTRED.simulate(seed=shifted(4))
    np.testing.assert_array_equal(data["sigma"].numpy(), SIGMA)
    np.testing.assert_allclose(
        true["theta"].numpy(), (true["mu"] + true["tau"] * true["eta"]).numpy(), rtol=1e-6
    )
    again, _ = NONCENTRED.simulate(seed=shifted(4))
    assert np.array_equal(again["y"].numpy(), data["y"].numpy())


@pytest.mark.slow
@pytest.mark.parametrize("seed", [0, 1, 3])
def test_centred_divergences_are_robust_across_seeds(seed):
    # four chains: one chain's divergences hinge on its adapted step size (see centred_nuts)
    run = zoo.run(CENTRED, "nuts", num_samples=500, warmup=500, num_chains=4, seed=seed)
    assert run.diagnostics["divergences"] > 0


@pytest.mark.slow
def test_long_noncentred_nuts_is_the_reference():
    run = zoo.run(NONCENTRED, "nuts", num_samples=2000, warmup=1000, num_chains=2, seed=5)
    rows = NONCENTRED.ground_truth().rows()
    assert run.diagnostics["divergences"] <= 2
    post = run.idata.posterior
    for row, (mean, sd) in rows.items():
        r = run.summary.loc[row]
        assert abs(r["mean"] - mean) < 4 * sd / np.sqrt(r["ess_bulk"]), row
        # an sd from n effective draws has relative standard error sqrt((kurtosis - 1) / 4n):
        # tau's half-Cauchy tail makes that several times the Gaussian 1 / sqrt(2n)
        site, _, index = row.partition("[")
        draws = post[site].values[..., int(index[:-1])] if index else post[site].values
        kurt = stats.kurtosis(draws.ravel(), fisher=False)
        rel = max(0.1, 5 * np.sqrt((kurt - 1) / (4 * r["ess_bulk"])))
        assert r["sd"] == pytest.approx(sd, rel=rel), row
