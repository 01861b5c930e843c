"""probabilistic_pca: the Tipping–Bishop closed form against scipy and scikit-learn, EM (monotone,
reaching the closed form), SVI with the variational-EM guide reaching it too, and the ELBO
identity (an exact E-step makes the ELBO the log-likelihood)."""

import numpy as np
import pyro
import pytest
import torch
from scipy.linalg import subspace_angles
from scipy.stats import lognorm, multivariate_normal
from scipy.stats import norm as normal

import zoo
from tests.seeding import shifted
from zoo.models.factor import ppca_digits
from zoo_inference.algorithms.ppca import ppca_em_steps, ppca_log_likelihood, ppca_ml

ENTRY = zoo.get_model("probabilistic_pca")


def scipy_loglik(X, W, mu, sigma2):
    """Independent oracle: sum_i log N(x_i | mu, W W^T + sigma^2 I) by scipy."""
    C = W @ W.T + sigma2 * np.eye(X.shape[1])
    return float(multivariate_normal(mu, C).logpdf(X).sum())


def covariance(est):
    W = np.asarray(est["W"], dtype=float)
    return W @ W.T + float(est["sigma"]) ** 2 * np.eye(W.shape[0])


@pytest.fixture(scope="module")
def data():
    d, truth = ENTRY.simulate(seed=shifted(0))
    return d, truth


@pytest.fixture(scope="module")
def ml_run(data):
    return zoo.run(ENTRY, "ml", data=data[0])


def test_ml_is_the_maximum_and_scipy_agrees(data, ml_run):
    """log p(X | ML) recomputed by scipy; any perturbation of (W, mu, sigma) lowers it."""
    X = data[0]["X"].double().numpy()
    est = ml_run.extras["estimate"]
    W, mu, s2 = est["W"], est["mu"], est["sigma"] ** 2
    assert ml_run.log_evidence == pytest.approx(scipy_loglik(X, W, mu, s2), abs=1e-8)
    rng = np.random.default_rng(shifted(0))
    for _ in range(20):
        dW, dmu = 1e-2 * rng.standard_normal(W.shape), 1e-2 * rng.standard_normal(mu.shape)
        ds = 1e-2 * rng.standard_normal()
        assert scipy_loglik(X, W + dW, mu + dmu, s2 * np.exp(ds)) < ml_run.log_evidence
    # the ML covariance is the sample covariance on the top-d eigenspace and sigma^2 elsewhere:
    # trace(C) = trace(S), since sigma^2 is the mean of the discarded eigenvalues
    S = np.cov(X.T, bias=True)
    assert np.trace(covariance(est)) == pytest.approx(np.trace(S), rel=1e-10)


def test_ml_recovers_the_generating_subspace(data, ml_run):
    """100 points, noise 0.5 against loadings of scale 1.5: the fitted subspace lies within a
    few degrees of the true one and sigma near 0.5 (sd of its ML estimate ~ 0.5 / sqrt(2 * 400))."""
    _, truth = data
    est = ml_run.extras["estimate"]
    angles = subspace_angles(est["W"], truth["W"].double().numpy())
    assert np.degrees(angles).max() < 10
    assert est["sigma"] == pytest.approx(0.5, abs=5 * 0.5 / np.sqrt(2 * 400))


def test_em_is_monotone_and_reaches_the_closed_form(data, ml_run):
    run = zoo.run(ENTRY, "em", data=data[0], seed=3)
    trace = np.array(run.traces["log_likelihood"])
    assert np.all(np.diff(trace) >= -1e-9 * np.abs(trace[1:]))
    assert trace[-1] > trace[0] + 10  # it did climb from its random start
    assert run.log_evidence == pytest.approx(ml_run.log_evidence, abs=1e-6)
    est, ml = run.extras["estimate"], ml_run.extras["estimate"]
    # EM creeps along flat directions once the likelihood has stopped moving (two close
    # eigenvalues): its parameters agree to 1e-3 of their scale where its log-likelihood has
    # converged to 1e-6 nats
    C = covariance(ml)
    assert np.abs(covariance(est) - C).max() < 1e-3 * np.abs(C).max()
    assert np.abs(est["W"] - ml["W"]).max() < 1e-2 * np.abs(ml["W"]).max()  # principal axes
    np.testing.assert_allclose(est["mu"], ml["mu"], atol=1e-12)


def test_svi_with_the_variational_em_guide_reaches_the_closed_form(data, ml_run):
    """The guide is a point mass on (W, mu, sigma) and the exact E-step for z, so SVI climbs
    log p(X | theta) + log p(theta); the priors' pull moves the optimum by a fraction of a nat
    (1000 steps at lr 0.05 reach it)."""
    X = data[0]["X"].double().numpy()
    run = zoo.run(ENTRY, "svi", data=data[0], num_samples=20, jit=True, seed=1)
    post = run.idata.posterior
    W, mu = post["W"].values[0, 0].astype(float), post["mu"].values[0, 0].astype(float)
    s2 = float(post["sigma"].values[0, 0]) ** 2
    ll = scipy_loglik(X, W, mu, s2)
    assert ml_run.log_evidence - 0.05 < ll <= ml_run.log_evidence + 1e-6
    est = {"W": W, "sigma": np.sqrt(s2)}
    C = covariance(ml_run.extras["estimate"])
    assert np.abs(covariance(est) - C).max() < 0.01 * np.abs(C).max()
    # the ELBO of a point-mass guide with the exact E-step is log p(X | theta) + log p(theta)
    log_prior = (
        normal.logpdf(W, 0, 10).sum()
        + normal.logpdf(mu, 0, 10).sum()
        + lognorm.logpdf(np.sqrt(s2), s=2.0)
    )
    assert run.log_evidence == pytest.approx(ll + log_prior, abs=0.05)


def test_elbo_with_the_exact_e_step_is_the_log_likelihood(data, ml_run):
    """At any theta, one-particle Trace_ELBO with z's exact posterior as guide has no variance:
    log p(x, z | theta) - log q(z) = log p(x | theta) for every draw of z."""
    d = data[0]
    est = ml_run.extras["estimate"]
    pyro.clear_param_store()
    theta = {
        "q_W": torch.tensor(est["W"], dtype=torch.float64) * 1.1,  # not the optimum: any theta
        "q_mu": torch.tensor(est["mu"], dtype=torch.float64) + 0.1,
        "q_sigma": torch.tensor(est["sigma"] * 0.9, dtype=torch.float64),
    }
    X = d["X"].double()
    data64 = {"X": X, "d": d["d"]}
    for k, v in theta.items():
        constraint = pyro.distributions.constraints.positive if k == "q_sigma" else None
        pyro.param(k, v.clone(), **({"constraint": constraint} if constraint else {}))
    elbo = pyro.infer.Trace_ELBO()
    losses = [elbo.loss(ENTRY.model, ENTRY.guide, **data64) for _ in range(3)]
    pyro.clear_param_store()
    W, mu, s = (theta[k].numpy() for k in ("q_W", "q_mu", "q_sigma"))
    log_prior = (
        normal.logpdf(W, 0, 10).sum() + normal.logpdf(mu, 0, 10).sum() + lognorm.logpdf(s, s=2.0)
    )
    exact = scipy_loglik(X.numpy(), W, mu, float(s) ** 2) + log_prior
    np.testing.assert_allclose(-np.array(losses), exact, atol=1e-6)


def test_digits_ml_is_scikit_learns_pca():
    """On scikit-learn's digits (1797 x 64): the ML subspace is PCA's top components, and
    PCA's score (its PPCA log-likelihood) with the ML noise and covariance equals ours.
    scikit-learn's PCA divides by N - 1; the ML estimates divide by N."""
    decomposition = pytest.importorskip("sklearn.decomposition")
    d = ppca_digits()
    X = d["X"].double().numpy()
    n = X.shape[0]
    W, mu, s2 = ppca_ml(X, 2)
    ll = ppca_log_likelihood(X, W, mu, s2)
    assert ll == pytest.approx(scipy_loglik(X, W, mu, s2), rel=1e-10)
    pca = decomposition.PCA(n_components=2).fit(X)
    assert np.degrees(subspace_angles(W, pca.components_.T)).max() < 1e-4
    pca.explained_variance_ = pca.explained_variance_ * (n - 1) / n
    pca.noise_variance_ = s2
    assert pca.noise_variance_ == pytest.approx(
        np.linalg.eigvalsh(np.cov(X.T, bias=True))[:-2].mean(), rel=1e-9
    )
    assert pca.score(X) * n == pytest.approx(ll, rel=1e-9)
    # factor analysis (a noise variance per pixel) nests PPCA: its optimum is at least as high
    fa = decomposition.FactorAnalysis(n_components=2, random_state=0).fit(X)
    assert fa.score(X) * n > ll


def test_digits_em_climbs_to_the_closed_form():
    """EM from random loadings on the 64-pixel digits: monotone, and at the closed form's
    log-likelihood when it stops (O(N D d) a step, 2 factors)."""
    X = ppca_digits()["X"].double().numpy()
    rng = np.random.default_rng(shifted(2))
    W0 = rng.standard_normal((64, 2))
    W, mu, s2, trace = ppca_em_steps(X, W0, float(X.var()), 3000, 1e-13)
    assert np.all(np.diff(trace) >= -1e-9 * np.abs(trace[1:]))
    ml = ppca_log_likelihood(X, *ppca_ml(X, 2))
    assert trace[-1] == pytest.approx(ml, abs=1e-3)


def test_digits_page_runs_the_same_model_and_any_width_of_data_runs_through_zoo_run():
    """probabilistic_pca_digits is the same model on the 64-pixel digits: its ml, em and
    scikit-learn cells reach the closed form's log-likelihood (computed here by scipy), and
    zoo.run takes the digits for probabilistic_pca itself (64 columns where its default data
    have 6: the model sizes W by the data)."""
    X = ppca_digits()["X"].double().numpy()
    exact = scipy_loglik(X, *ppca_ml(X, 2))
    cmp = zoo.compare("probabilistic_pca_digits", ["ml", "em", "sklearn"], seed=shifted(0))
    for engine, run in cmp.runs.items():
        assert run.ok, run.error
        assert run.log_evidence == pytest.approx(exact, rel=1e-8), engine
    direct = zoo.run(ENTRY, "ml", data=ppca_digits())
    assert direct.log_evidence == pytest.approx(exact, rel=1e-10)
    with pytest.raises(ValueError, match=r"data\['X'\] must be|has shape"):
        zoo.run(ENTRY, "ml", data={"X": torch.randn(10), "d": 2})


def test_bad_rank_is_refused():
    X = torch.randn(10, 6)
    for d in (0, 6):
        with pytest.raises(ValueError, match="1 <= d < D = 6"):
            zoo.run(ENTRY, "ml", data={"X": X, "d": d})
    with pytest.raises(ValueError, match="shape"):
        zoo.run(ENTRY, "em", data={"X": torch.randn(10), "d": 1})
