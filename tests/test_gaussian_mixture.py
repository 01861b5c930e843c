"""gaussian_mixture on Old Faithful: EM (monotone, equal to scikit-learn's), exact enumeration
(-TraceEnum_ELBO at fixed parameters equals the exact log-likelihood), NUTS near the MLE."""

import numpy as np
import pyro
import pytest
import torch
from scipy.special import logsumexp
from scipy.stats import norm

import zoo
from inference.discrete import empty_guide as _empty_guide
from inference.discrete import enumerated

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


def test_nuts_posterior_is_near_the_mle(em_run):
    run = zoo.run("gaussian_mixture", "nuts", num_samples=150, warmup=150, num_chains=2, seed=0)
    est = em_run.extras["estimate"]
    for site in ("weights", "locs", "scales"):
        for k in range(2):
            row = run.summary.loc[f"{site}[{k}]"]
            # 272 points and weak priors: the MLE sits well inside the posterior bulk
            assert abs(row["mean"] - est[site][k]) < 2.5 * row["sd"], (site, k)
    assert run.diagnostics["max_r_hat"] < 1.1
    z = run.idata.posterior["z"].values
    assert z.shape == (2, 150, 272) and set(np.unique(z)) <= {0, 1}
