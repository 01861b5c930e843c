"""mixture_ppca: EM (monotone from any start, recovering the synthetic truth, the Tipping–Bishop
closed form when C = 1), the exact E-step (-TraceEnum_ELBO with the point-mass guide is log p(X |
theta) + log p(theta); the enumerated posterior of t is EM's responsibilities), SVI finding the
components, and bad input refused. Every oracle is recomputed here with scipy."""

import numpy as np
import pyro
import pytest
import torch
from pyro.distributions import constraints
from scipy.linalg import subspace_angles
from scipy.optimize import linear_sum_assignment
from scipy.special import gammaln, logsumexp
from scipy.stats import chi2, dirichlet, lognorm, multivariate_normal
from scipy.stats import norm as normal

import zoo
from tests.seeding import shifted
from zoo.models.factor import mppca_synthetic
from zoo_inference.algorithms.ppca import mppca_em_steps, ppca_log_likelihood, ppca_ml
from zoo_inference.distributions import first_column_increasing

ENTRY = zoo.get_model("mixture_ppca")
TAIL = 1e-6  # the chance a sampling-error bound may fail on a given seed


def log_joint(X, pi, mu, W, sigma2):
    """log pi_c + log N(x_n | mu_c, W_c W_c^T + s_c^2 I) by scipy, shaped (N, C)."""
    D = X.shape[1]
    return np.stack(
        [
            np.log(pi[c])
            + multivariate_normal(mu[c], W[c] @ W[c].T + sigma2[c] * np.eye(D)).logpdf(X)
            for c in range(len(pi))
        ],
        axis=1,
    )


def loglik(X, pi, mu, W, sigma2):
    """The exact mixture log-likelihood: sum_n log sum_c pi_c N(x_n | mu_c, C_c)."""
    return float(logsumexp(log_joint(X, pi, mu, W, sigma2), axis=1).sum())


def as_numpy(truth):
    t = {k: v.double().numpy() for k, v in truth.items() if k != "t"}
    return {**t, "t": truth["t"].numpy(), "sigma2": t["sigma"] ** 2}


def assert_recovers(est, truth, X):
    """Components matched to the truth by their means (Hungarian), each within its sampling error:
    n_c (mu^ - mu)^T C_c^-1 (mu^ - mu) ~ chi2_D (a cluster's mean); the sum of squared sines of
    the principal angles between the fitted and true planes, whose first-order terms are
    N(0, lam_k s^2 / (n_c (lam_k - s^2)^2)), lam_k = |w_k|^2 + s^2 (sample eigenvectors); s^2
    within 5 sd (2 s^4 / (n_c (D - d)))^(1/2) of the truth beyond its first-order bias s^2 (1 +
    sum_k lam_k / (lam_k - s^2)) / n_c (the mean of the D - d smallest sample eigenvalues); the
    weights within 5 binomial sds. Tails of 1e-6: these hold at any seed, not at a tuned one."""
    N, D = X.shape
    C, _, d = truth["W"].shape
    cost = ((est["mu"][:, None] - truth["mu"][None]) ** 2).sum(-1)
    rows, cols = linear_sum_assignment(cost)
    for c_hat, c in zip(rows, cols, strict=True):
        n_c = int((truth["t"] == c).sum())
        s2 = truth["sigma2"][c]
        cov = truth["W"][c] @ truth["W"][c].T + s2 * np.eye(D)
        e = est["mu"][c_hat] - truth["mu"][c]
        assert n_c * e @ np.linalg.solve(cov, e) < chi2.ppf(1 - TAIL, D), (c, e)
        lam = np.linalg.svd(truth["W"][c], compute_uv=False) ** 2 + s2
        v = lam * s2 / (n_c * (lam - s2) ** 2)
        sin2 = np.sin(subspace_angles(est["W"][c_hat], truth["W"][c])) ** 2
        assert sin2.sum() < v.max() * chi2.ppf(1 - TAIL, d * (D - d)), (c, sin2, v)
        bias = s2 * (1 + (lam / (lam - s2)).sum()) / n_c
        sd = s2 * np.sqrt(2 / (n_c * (D - d)))
        assert abs(est["sigma"][c_hat] ** 2 - (s2 - bias)) < 5 * sd, (c, est["sigma"][c_hat])
        p = truth["pi"][c]
        assert abs(est["pi"][c_hat] - p) < 5 * np.sqrt(p * (1 - p) / N), (c, est["pi"][c_hat])


@pytest.fixture(scope="module")
def data():
    d, truth = ENTRY.simulate(seed=shifted(0))
    return d, as_numpy(truth)


@pytest.fixture(scope="module")
def em_run(data):
    return zoo.run(ENTRY, "em", data=data[0])


def test_em_log_likelihood_never_decreases(data, em_run):
    """Every iteration, from the engine's start and from random ones; the last value and the
    responsibilities are scipy's at the returned parameters."""
    X = data[0]["X"].double().numpy()
    trace = np.array(em_run.traces["log_likelihood"])
    assert np.all(np.diff(trace) >= -1e-9 * np.abs(trace[1:]))
    est = em_run.extras["estimate"]
    s2 = est["sigma"] ** 2
    assert trace[-1] == pytest.approx(loglik(X, est["pi"], est["mu"], est["W"], s2), abs=1e-8)
    lj = log_joint(X, est["pi"], est["mu"], est["W"], s2)
    R = np.exp(lj - logsumexp(lj, axis=1, keepdims=True))
    np.testing.assert_allclose(em_run.extras["responsibilities"], R, atol=1e-9)
    rng = np.random.default_rng(shifted(1))
    N, D = X.shape
    for _ in range(3):
        pi = rng.dirichlet(np.ones(2))
        mu = X[rng.choice(N, size=2, replace=False)]
        W = rng.standard_normal((2, D, 2))
        out = mppca_em_steps(X, pi, mu, W, np.full(2, X.var()), 150, 1e-12)
        t = np.array(out[4])
        assert np.all(np.diff(t) >= -1e-9 * np.abs(t[1:]))
        assert t[-1] > t[0] + 10  # it did climb
        assert t[-1] == pytest.approx(loglik(X, *out[:4]), abs=1e-8)


def test_em_recovers_the_synthetic_truth(data, em_run):
    d, truth = data
    X = d["X"].double().numpy()
    est = em_run.extras["estimate"]
    assert np.all(np.diff(est["mu"][:, 0]) > 0)  # listed in the model's order
    assert_recovers(est, truth, X)
    # Wilks: 2 [log p(X | ML) - log p(X | truth)] ~ chi2 with as many degrees of freedom as
    # free parameters: C - 1 weights, C D means, C (D d - d (d - 1) / 2) loadings, C noises
    C, D, dd = truth["W"].shape
    k = C - 1 + C * D + C * (D * dd - dd * (dd - 1) // 2) + C
    ll_true = loglik(X, truth["pi"], truth["mu"], truth["W"], truth["sigma2"])
    assert -1e-6 < em_run.log_evidence - ll_true < 0.5 * chi2.ppf(1 - TAIL, k)


def test_one_component_em_is_the_tipping_bishop_closed_form():
    """With C = 1 the responsibilities are 1: the closed-form ML is a fixed point of one EM
    iteration, and EM from a random start climbs to its log-likelihood."""
    d, _ = mppca_synthetic(shifted(2), C=1)
    X = d["X"].double().numpy()
    D = X.shape[1]
    W, mu, s2 = ppca_ml(X, 2)
    ml = ppca_log_likelihood(X, W, mu, s2)
    pi1, mu1, W1, s21, trace, R = mppca_em_steps(X, [1.0], mu[None], W[None], [s2], 1, 0.0)
    assert len(trace) == 2 and trace[0] == pytest.approx(ml, abs=1e-9)
    np.testing.assert_allclose(W1[0] @ W1[0].T, W @ W.T, atol=1e-10)
    np.testing.assert_allclose(mu1[0], mu, atol=1e-12)
    assert s21[0] == pytest.approx(s2, rel=1e-10) and pi1[0] == 1.0 and np.all(R == 1.0)
    rng = np.random.default_rng(shifted(3))
    W0 = rng.standard_normal((1, D, 2))
    out = mppca_em_steps(X, [1.0], X[:1], W0, [X.var()], 3000, 1e-14)
    assert out[4][-1] == pytest.approx(ml, abs=1e-6)
    C_em = out[2][0] @ out[2][0].T + out[3][0] * np.eye(D)
    C_ml = W @ W.T + s2 * np.eye(D)
    assert np.abs(C_em - C_ml).max() < 1e-4 * np.abs(C_ml).max()
    run = zoo.run(ENTRY, "em", data={**d, "C": 1})  # through the engine
    assert run.log_evidence == pytest.approx(ml, abs=1e-6)


def test_minus_traceenum_elbo_is_the_exact_log_likelihood(data, em_run):
    """At any theta, the point-mass guide with t enumerated in the model: -TraceEnum_ELBO is
    log p(X | theta) + log p(theta) exactly, and the enumerated posterior of t_n is the E-step's
    responsibility (both by scipy)."""
    d = data[0]
    X = d["X"].double()
    est = em_run.extras["estimate"]
    theta = {  # near EM's fit, not at it
        "pi": np.array([0.45, 0.55]),
        "mu": est["mu"] + 0.1,
        "W": est["W"] * 1.1,
        "sigma": est["sigma"] * 0.9,
    }
    pyro.clear_param_store()
    for name, c in (
        ("pi", constraints.simplex),
        ("mu", first_column_increasing),
        ("W", constraints.real),
        ("sigma", constraints.positive),
    ):
        pyro.param(f"q_{name}", torch.tensor(theta[name], dtype=torch.float64), constraint=c)
    data64 = {**d, "X": X}
    elbo = pyro.infer.TraceEnum_ELBO(max_plate_nesting=1)
    # float64 for the priors' constants too: log 10 in float32 is off by 1e-7, times 40 sites
    before = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        loss = elbo.loss(ENTRY.model, ENTRY.guide, **data64)
        marginals = elbo.compute_marginals(ENTRY.model, ENTRY.guide, **data64)
    finally:
        torch.set_default_dtype(before)
        pyro.clear_param_store()
    x, s2 = X.numpy(), theta["sigma"] ** 2
    C = len(theta["pi"])
    log_prior = (
        dirichlet.logpdf(theta["pi"], np.ones(C))
        + normal.logpdf(theta["mu"], 0, 10).sum()
        + gammaln(C + 1)  # the ordered means' prior: C! times the iid density
        + normal.logpdf(theta["W"], 0, 10).sum()
        + lognorm.logpdf(theta["sigma"], s=2.0).sum()
    )
    exact = loglik(x, theta["pi"], theta["mu"], theta["W"], s2)
    assert -loss == pytest.approx(exact + log_prior, abs=1e-6)
    lj = log_joint(x, theta["pi"], theta["mu"], theta["W"], s2)
    R = np.exp(lj - logsumexp(lj, axis=1, keepdims=True))
    np.testing.assert_allclose(marginals["t"].probs.detach().numpy(), R, atol=1e-9)


def log_prior(e):
    """log p(theta) by scipy: Dirichlet(1) is (C - 1)! on the simplex, the ordered means' prior C!
    times their iid N(0, 10^2) density."""
    C = len(e["pi"])
    return (
        gammaln(C)
        + gammaln(C + 1)
        + normal.logpdf(e["mu"], 0, 10).sum()
        + normal.logpdf(e["W"], 0, 10).sum()
        + lognorm.logpdf(e["sigma"], s=2.0).sum()
    )


def test_svi_finds_the_components(data, em_run):
    """The point-mass guide climbs log p(X | theta) + log p(theta): its fit recovers the truth as
    EM's does; its log-likelihood is below EM's maximum by no more than the priors' pull (at the
    MAP, log p(X | ML) - log p(X | MAP) <= log p(MAP) - log p(ML)), plus 0.01 nats for 300
    float32 Adam steps; and the run's ELBO is log p(X | theta) + log p(theta)."""
    d, truth = data
    X = d["X"].double().numpy()
    run = zoo.run(ENTRY, "svi", data=d, num_steps=300, num_samples=10, seed=1)
    assert run.ok, run.error
    post = run.idata.posterior
    est = {k: post[k].values[0, 0].astype(float) for k in ("pi", "mu", "W", "sigma")}
    assert np.all(np.diff(est["mu"][:, 0]) > 0)  # the ordering constraint holds
    assert_recovers(est, truth, X)
    ll = loglik(X, est["pi"], est["mu"], est["W"], est["sigma"] ** 2)
    pull = log_prior(est) - log_prior(em_run.extras["estimate"])
    assert -1e-6 < em_run.log_evidence - ll <= pull + 0.01
    assert run.log_evidence == pytest.approx(ll + log_prior(est), abs=0.01)
    # the enumerated assignments: each point's recovered t is its most responsible component
    t = post["t"].values[0]
    assert (t == em_run.extras["responsibilities"].argmax(1)[None]).mean() > 0.99


def test_synthetic_generator_is_seeded_and_ordered():
    a, ta = mppca_synthetic(shifted(4), C=3)
    b, _ = mppca_synthetic(shifted(4), C=3)
    assert torch.equal(a["X"], b["X"]) and a["X"].shape == (200, 6)
    assert np.all(np.diff(ta["mu"][:, 0].numpy()) > 0)
    np.testing.assert_allclose(ta["pi"].sum().item(), 1.0, atol=1e-6)
    W = ta["W"].double().numpy()
    np.testing.assert_allclose(np.linalg.svd(W, compute_uv=False), [[2.0, 1.0]] * 3, atol=1e-6)


@pytest.mark.parametrize(
    "change, message",
    [
        ({"C": 0}, r"C \(the number of components\) must be an integer >= 1, got 0"),
        ({"d": 6}, r"1 <= d < D = 6"),
        ({"X": torch.randn(7, 6)}, r"need at least C \(d \+ 2\) = 8 points, got N = 7"),
        ({"X": torch.randn(20)}, r"shape"),
    ],
)
@pytest.mark.parametrize("engine", ["em", "svi"])
def test_bad_input_is_refused(change, message, engine):
    data = {"X": torch.randn(40, 6), "C": 2, "d": 2, **change}
    with pytest.raises(zoo.ZooError, match=message):
        zoo.run(ENTRY, engine, data=data, num_steps=5) if engine == "svi" else zoo.run(
            ENTRY, engine, data=data
        )
