"""gaussian_mixture on Old Faithful: EM (monotone, equal to scikit-learn's), exact enumeration
(-TraceEnum_ELBO at fixed parameters equals the exact log-likelihood), NUTS near the MLE, Gibbs
equal to NUTS within Monte-Carlo error (and its two inner samplers checked on known laws)."""

import numpy as np
import pyro
import pytest
import torch
from scipy.special import logsumexp
from scipy.stats import norm, truncnorm

import zoo
from tests.seeding import shifted
from zoo_inference.algorithms.univariate import slice_sample, truncated_normal
from zoo_inference.discrete import empty_guide as _empty_guide
from zoo_inference.discrete import enumerated

ENTRY = zoo.get_model("gaussian_mixture")


def exact_loglik(y, w, mu, sd):
    return float(logsumexp(np.log(w) + norm.logpdf(y[:, None], mu, sd), axis=1).sum())


@pytest.fixture(scope="module")
def em_run():
    return zoo.run("gaussian_mixture", "em")


def test_data_is_old_faithful():
    y = ENTRY.load_data()["y"].numpy()
    assert y.shape == (272,)
    assert y.mean() == pytest.approx(3.487783, abs=1e-5)  # R: mean(faithful$eruptions)


def test_em_is_monotone_and_matches_its_loglik(em_run):
    trace = np.array(em_run.traces["log_likelihood"])
    assert np.all(np.diff(trace) >= -1e-9)
    est = em_run.extras["estimate"]
    y = ENTRY.load_data()["y"].numpy().astype(float)
    assert trace[-1] == pytest.approx(
        exact_loglik(y, est["weights"], est["locs"], est["scales"]), abs=1e-8
    )
    np.testing.assert_allclose(em_run.extras["responsibilities"].sum(1), 1.0, atol=1e-12)


def test_em_matches_scikit_learn(em_run):
    mixture = pytest.importorskip("sklearn.mixture")
    y = ENTRY.load_data()["y"].numpy().astype(float)
    locs = np.quantile(y, [0.25, 0.75])  # the em engine's default start
    gm = mixture.GaussianMixture(
        2,
        covariance_type="full",
        tol=1e-12,
        max_iter=2000,
        reg_covar=1e-12,
        weights_init=[0.5, 0.5],
        means_init=locs[:, None],
        precisions_init=np.full((2, 1, 1), 1 / y.var()),
    ).fit(y[:, None])
    order = np.argsort(gm.means_.ravel())
    est = em_run.extras["estimate"]
    np.testing.assert_allclose(est["weights"], gm.weights_[order], atol=1e-5)
    np.testing.assert_allclose(est["locs"], gm.means_.ravel()[order], atol=1e-5)
    np.testing.assert_allclose(est["scales"], np.sqrt(gm.covariances_.ravel()[order]), atol=1e-5)
    assert em_run.log_evidence == pytest.approx(gm.score(y[:, None]) * y.size, abs=1e-4)


def test_enum_at_em_estimate_is_the_exact_loglik(em_run):
    est = {k: torch.tensor(v, dtype=torch.float) for k, v in em_run.extras["estimate"].items()}
    run = zoo.run("gaussian_mixture", "enum", params=est, num_samples=20)
    y = ENTRY.load_data()["y"].numpy().astype(float)
    exact = exact_loglik(y, *(est[k].double().numpy() for k in ("weights", "locs", "scales")))
    assert run.log_evidence == pytest.approx(exact, abs=2e-3)  # float32 sums over 272 points
    assert run.conditional_on == ("weights", "locs", "scales") and run.kind == "conditional"
    assert run.evidence.kind == "conditional"
    support, probs = run.extras["marginals"]["z"]
    np.testing.assert_allclose(probs.sum(0), 1.0, atol=1e-5)
    np.testing.assert_allclose(probs.T, em_run.extras["responsibilities"], atol=1e-4)
    # the joint MAP assignment of independent z_n is each point's most responsible component
    np.testing.assert_array_equal(
        run.extras["map"]["z"], em_run.extras["responsibilities"].argmax(1)
    )


def test_minus_traceenum_loss_is_the_exact_loglik(em_run):
    """-TraceEnum_ELBO with every latent conditioned or enumerated is log p(y, theta)."""
    est = {k: torch.tensor(v, dtype=torch.float) for k, v in em_run.extras["estimate"].items()}
    data = ENTRY.load_data()
    model = enumerated(pyro.poutine.condition(ENTRY.model, data=est))
    loss = pyro.infer.TraceEnum_ELBO(max_plate_nesting=1).loss(model, _empty_guide, **data)
    trace = pyro.poutine.trace(pyro.poutine.condition(ENTRY.model, data=est)).get_trace(**data)
    log_prior = sum(
        float(trace.nodes[k]["fn"].log_prob(trace.nodes[k]["value"]).sum()) for k in est
    )
    y = data["y"].numpy().astype(float)
    exact = exact_loglik(y, *(est[k].double().numpy() for k in ("weights", "locs", "scales")))
    assert -loss - log_prior == pytest.approx(exact, abs=2e-3)


@pytest.fixture(scope="module")
def nuts_run():
    return zoo.run(
        "gaussian_mixture", "nuts", num_samples=150, warmup=150, num_chains=2, jit=False, seed=0
    )


def test_nuts_posterior_is_near_the_mle(em_run, nuts_run):
    run = nuts_run
    est = em_run.extras["estimate"]
    for site in ("weights", "locs", "scales"):
        for k in range(2):
            row = run.summary.loc[f"{site}[{k}]"]
            # 272 points and weak priors: the MLE sits well inside the posterior bulk
            assert abs(row["mean"] - est[site][k]) < 2.5 * row["sd"], (site, k)
    assert run.diagnostics["max_r_hat"] < 1.1
    z = run.idata.posterior["z"].values
    assert z.shape == (2, 150, 272) and set(np.unique(z)) <= {0, 1}


@pytest.fixture(scope="module")
def gibbs_run():
    return zoo.run("gaussian_mixture", "gibbs", seed=0)


def test_gibbs_agrees_with_nuts_within_monte_carlo_error(gibbs_run, nuts_run):
    """Two samplers of one posterior: their means differ by no more than their joint Monte-Carlo
    standard error allows (MCSE of each from its own chains' ESS, ArviZ)."""
    az = pytest.importorskip("arviz")
    assert gibbs_run.diagnostics["max_r_hat"] < 1.05
    for site in ("weights", "locs", "scales"):
        a, b = gibbs_run.idata.posterior[[site]], nuts_run.idata.posterior[[site]]
        se = np.hypot(az.mcse(a)[site].values, az.mcse(b)[site].values)
        diff = a[site].mean(("chain", "draw")).values - b[site].mean(("chain", "draw")).values
        assert np.all(np.abs(diff) < 5 * se), (site, diff, se)
        # the spreads agree too: the sd of 4000 Gibbs draws within 25% of 300 NUTS draws'
        sd_a, sd_b = a[site].std(("chain", "draw")).values, b[site].std(("chain", "draw")).values
        np.testing.assert_allclose(sd_a, sd_b, rtol=0.25)
    # the ordering constraint holds in every draw: no label switching to undo
    locs = gibbs_run.idata.posterior["locs"].values
    assert np.all(locs[..., 0] < locs[..., 1])


def test_gibbs_assignments_match_nuts_responsibilities(gibbs_run, nuts_run):
    """P(z_n = 1 | y) two ways: the frequency of z_n = 1 in the Gibbs draws, and the average over
    NUTS's parameter draws of the responsibility w_1 N(y_n | mu_1, s_1) / sum_k w_k N(y_n | mu_k,
    s_k) (Rao-Blackwellised). They differ by Monte-Carlo error only."""
    y = ENTRY.load_data()["y"].numpy().astype(float)
    post = nuts_run.idata.posterior
    w, mu, sd = (post[k].values.reshape(-1, 2) for k in ("weights", "locs", "scales"))
    log_r = np.log(w)[:, None] + norm.logpdf(y[None, :, None], mu[:, None], sd[:, None])
    r1 = np.exp(log_r[..., 1] - logsumexp(log_r, axis=-1))  # (draws, N)
    z = gibbs_run.idata.posterior["z"].values
    p = z.reshape(-1, z.shape[-1]).mean(0)
    # Gibbs: 4000 correlated draws, counted as 500 independent ones; NUTS: 300 draws as 100
    se = np.sqrt(p * (1 - p) / 500 + r1.var(0) / 100)
    assert np.all(np.abs(p - r1.mean(0)) < 5 * se + 0.01)
    assert np.abs(p - r1.mean(0)).max() > 0 and p.min() < 0.05 and p.max() > 0.95


def test_slice_sampler_leaves_a_known_law_invariant():
    """Chains of slice updates on N(1, 2^2) and on Gamma(3, 1) in log space reach their moments."""
    np.random.seed(shifted(0))

    def log_p(t):
        return np.stack([norm.logpdf(t[0], 1.0, 2.0), 3 * t[1] - np.exp(t[1])])

    x = np.zeros((2, 200))  # 200 independent chains of each law
    draws = []
    for i in range(300):
        x = slice_sample(log_p, x)
        if i >= 50:
            draws.append(x)
    d = np.array(draws)  # (250, 2, 200): draws are correlated within a chain, not across
    chain_means = d.mean(0)
    se = chain_means.std(1) / np.sqrt(200)
    assert abs(chain_means[0].mean() - 1.0) < 5 * se[0]
    assert abs(np.exp(d[:, 1]).mean() - 3.0) < 5 * np.exp(d[:, 1]).mean(0).std() / np.sqrt(200)
    assert np.var(d[:, 0]) == pytest.approx(4.0, rel=0.1)


def test_truncated_normal_draws_have_scipys_moments():
    np.random.seed(shifted(1))
    n = 20000
    loc, sd, low, high = np.full(n, 0.5), np.full(n, 2.0), np.full(n, -1.0), np.full(n, 1.5)
    x = truncated_normal(loc, sd, low, high)
    assert x.min() >= -1.0 and x.max() <= 1.5
    law = truncnorm((-1.0 - 0.5) / 2.0, (1.5 - 0.5) / 2.0, loc=0.5, scale=2.0)
    assert x.mean() == pytest.approx(law.mean(), abs=5 * law.std() / np.sqrt(n))
    assert x.std() == pytest.approx(law.std(), rel=0.03)
    # deep in a tail, where both CDF values round to one: still inside the interval
    far = truncated_normal(np.zeros(3), np.ones(3), np.full(3, 40.0), np.full(3, 41.0))
    assert np.all((far >= 40.0) & (far <= 41.0))
