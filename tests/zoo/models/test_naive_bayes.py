"""naive_bayes (Gaussian, Normal–Gamma) and naive_bayes_bernoulli (Beta): the closed forms
against quadrature, a sequential (chain-rule) evidence, importance reweighting and scikit-learn
(GaussianNB, BernoulliNB); enum's class posterior at fixed and MAP parameters; NUTS."""

import itertools

import numpy as np
import pytest
import torch
from scipy import stats
from scipy.special import logsumexp
from sklearn.datasets import load_iris
from sklearn.naive_bayes import BernoulliNB, GaussianNB

import zoo
from tests.seeding import shifted
from zoo.models.classification import HOLD_OUT
from zoo_inference.algorithms.conjugate import bernoulli_nb_predict_proba, gaussian_nb_predict_proba

GAUSS = zoo.get_model("naive_bayes")
BERN = zoo.get_model("naive_bayes_bernoulli")
DATA = GAUSS.load_data()
X, YL, XN = DATA["X"].double().numpy(), DATA["y"].numpy(), DATA["X_new"].double().numpy()
M0, K0, A0, B0, ALPHA = 3.0, 0.01, 1.0, 0.09, 1.0  # the model's default hyper-parameters


def sequential_log_ml(x):
    """log p(x_1..x_n) under the Normal–Gamma prior by the chain rule: each x_i's Student-t
    predictive given x_<i, the posterior updated one point at a time (Murphy 2007, eq. 100)."""
    m, k, a, b, total = M0, K0, A0, B0, 0.0
    for xi in x:
        total += stats.t.logpdf(xi, 2 * a, m, np.sqrt(b * (k + 1) / (a * k)))
        b += k * (xi - m) ** 2 / (2 * (k + 1))
        m, k, a = (k * m + xi) / (k + 1), k + 1, a + 0.5
    return total


def polya_log_prob(labels, C=3):
    """log p(labels) under the Dirichlet(1)-categorical, by the Pólya urn one label at a time."""
    counts, total = np.zeros(C), 0.0
    for i, c in enumerate(labels):
        total += np.log((ALPHA + counts[c]) / (C * ALPHA + i))
        counts[c] += 1
    return total


def brute_force(X_new):
    """Every labelling of the new flowers: log p(y, a, X, X_new) from the sequential evidences."""
    out = {}
    for a in itertools.product(range(3), repeat=len(X_new)):
        labels = np.r_[YL, a]
        feats = np.vstack([X, X_new])
        lp = polya_log_prob(labels)
        for c in range(3):
            for j in range(4):
                lp += sequential_log_ml(feats[labels == c, j])
        out[a] = lp
    return out


def class_posterior(c):
    """Normal–Gamma posterior (n, kappa_n, m_n, a_n, b_n) of class c's training flowers, written
    out here from the textbook update (Murphy 2007, eqs 86-89)."""
    xc = X[YL == c]
    n, xbar = len(xc), xc.mean(0)
    k, a = K0 + n, A0 + n / 2
    m = (K0 * M0 + n * xbar) / k
    b = B0 + ((xc - xbar) ** 2).sum(0) / 2 + K0 * n * (xbar - M0) ** 2 / (2 * k)
    return n, k, m, a, b


@pytest.fixture(scope="module")
def truth():
    return GAUSS.ground_truth()


def test_default_data_hold_out_two_border_flowers():
    Xi, yi = load_iris(return_X_y=True)
    assert X.shape == (148, 4) and XN.shape == (2, 4)
    np.testing.assert_allclose(XN, Xi[HOLD_OUT], atol=1e-6)
    assert list(yi[HOLD_OUT]) == [1, 2]  # a versicolor and a virginica
    assert list(np.bincount(YL)) == [50, 49, 49]


def test_setosa_posterior_by_2d_quadrature(truth):
    """Setosa (class 0) cannot be either new flower (P < 1e-30), so its sites' posterior is the
    plain Normal–Gamma given the 50 setosa flowers: check mu, tau of petal length by a grid in
    (mu, log tau) over prior x likelihood."""
    x = X[YL == 0, 2]
    mu = np.linspace(x.mean() - 0.25, x.mean() + 0.25, 801)
    log_tau = np.linspace(np.log(5), np.log(200), 801)
    Mu, Lt = np.meshgrid(mu, log_tau, indexing="ij")
    T = np.exp(Lt)
    n, xbar, S = len(x), x.mean(), ((x - x.mean()) ** 2).sum()
    lp = (
        stats.gamma.logpdf(T, A0, scale=1 / B0)
        + Lt  # d tau = tau d log tau
        + stats.norm.logpdf(Mu, M0, 1 / np.sqrt(K0 * T))
        + 0.5 * n * np.log(T / (2 * np.pi))
        - 0.5 * T * (S + n * (xbar - Mu) ** 2)  # sum_i (x_i - mu)^2
    )
    w = np.exp(lp - lp.max())
    z = w.sum()
    h = (mu[1] - mu[0]) * (log_tau[1] - log_tau[0])
    assert np.log(z * h) + lp.max() == pytest.approx(sequential_log_ml(x), abs=1e-4)
    for site, v in (("mu", Mu), ("tau", T)):
        mean = (w * v).sum() / z
        sd = np.sqrt((w * v**2).sum() / z - mean**2)
        assert truth.mean[site][0, 2] == pytest.approx(mean, rel=1e-5), site
        assert truth.sd[site][0, 2] == pytest.approx(sd, rel=1e-3), site


def test_log_evidence_and_label_posterior_by_brute_force(truth):
    """The 9 labellings of the two new flowers, each scored by chain-rule evidences: the exact
    log p(y, X, X_new) and P(label_new | data) agree with the closed form to 1e-9."""
    lp = brute_force(XN)
    log_z = logsumexp(list(lp.values()))
    assert truth.log_evidence == pytest.approx(log_z, abs=1e-8)
    probs = np.zeros((2, 3))
    for a, v in lp.items():
        for k in range(2):
            probs[k, a[k]] += np.exp(v - log_z)
    dists, _ = GAUSS.posterior_fn(**DATA)
    np.testing.assert_allclose(dists["label_new"].probs.numpy(), probs, atol=1e-9)
    np.testing.assert_allclose(truth.mean["label_new"], probs @ np.arange(3), atol=1e-9)


def test_one_new_flower_is_the_student_t_predictive():
    """With a single new flower the exact class posterior is the posterior predictive:
    Dirichlet–categorical times a Student-t per feature (computed here with scipy); with two,
    each new flower also informs the other's classes, a small but real shift."""
    one = {**DATA, "X_new": DATA["X_new"][:1]}
    exact = GAUSS.ground_truth(one)
    expected = []
    for c in range(3):
        n, k, m, a, b = class_posterior(c)
        t = stats.t.logpdf(XN[0], 2 * a, m, np.sqrt(b * (k + 1) / (a * k))).sum()
        expected.append(t + np.log((ALPHA + n) / (3 * ALPHA + len(YL))))
    expected = np.exp(np.array(expected) - logsumexp(expected))
    probs = gaussian_nb_predict_proba(X, YL, XN[:1], 3, ALPHA, M0, K0, A0, B0)[0]
    np.testing.assert_allclose(probs, expected, atol=1e-12)
    p_one = expected @ np.arange(3)
    assert float(exact.mean["label_new"][0]) == pytest.approx(p_one, abs=1e-10)
    # the versicolor is a toss-up: P(versicolor) = 0.61
    assert probs[1] == pytest.approx(0.609, abs=1e-3)
    shift = abs(GAUSS.ground_truth().mean["label_new"][0] - p_one)
    assert 1e-6 < shift < 0.1


def test_mixture_moments_by_importance_reweighting(truth):
    """Versicolor and virginica absorb part of each new flower: their exact posterior means match
    draws from the training-data posterior reweighted by p(X_new | theta) (an independent route)."""
    rng = np.random.default_rng(shifted(0))
    S = 200_000
    mus, taus = np.zeros((S, 3, 4)), np.zeros((S, 3, 4))
    for c in range(3):
        n, k, m, a, b = class_posterior(c)
        taus[:, c] = rng.gamma(a, 1 / b, size=(S, 4))
        mus[:, c] = rng.normal(m, 1 / np.sqrt(k * taus[:, c]))
    pis = rng.dirichlet(ALPHA + np.bincount(YL), size=S)
    log_w = np.zeros(S)
    for x in XN:
        comp = stats.norm.logpdf(x, mus, 1 / np.sqrt(taus)).sum(-1) + np.log(pis)
        log_w += logsumexp(comp, axis=1)
    w = np.exp(log_w - logsumexp(log_w))
    ess = 1 / (w**2).sum()
    for site, draws in (("mu", mus), ("tau", taus), ("pi", pis)):
        mean = np.tensordot(w, draws, axes=1)
        se = truth.sd[site] / np.sqrt(ess)
        assert np.all(np.abs(truth.mean[site] - mean) < 4.5 * se), site


def test_enum_at_gaussiannb_parameters_is_gaussiannb():
    """enum holds the continuous sites at ``params``: there the class posterior is the plug-in
    Bayes rule pi_c prod_j N(x_j | mu_cj, tau_cj^-1/2), i.e. scikit-learn's GaussianNB."""
    gnb = GaussianNB().fit(X, YL)
    params = {"pi": gnb.class_prior_, "mu": gnb.theta_, "tau": 1 / gnb.var_}
    run = zoo.run(GAUSS, "enum", params=params, num_samples=500, seed=0)
    assert run.kind == "conditional" and set(run.conditional_on) == {"pi", "mu", "tau"}
    values, probs = run.extras["marginals"]["label_new"]
    np.testing.assert_array_equal(values, [0, 1, 2])
    np.testing.assert_allclose(probs.T, gnb.predict_proba(XN), atol=1e-5)
    # its evidence is log p(y, X, X_new | theta), the new flowers' classes summed out
    sd = np.sqrt(gnb.var_)
    ll = np.log(gnb.class_prior_[YL]).sum() + stats.norm.logpdf(X, gnb.theta_[YL], sd[YL]).sum()
    per_class = stats.norm.logpdf(XN[:, None, :], gnb.theta_, sd).sum(-1)
    ll += logsumexp(per_class + np.log(gnb.class_prior_), axis=1).sum()
    assert run.evidence.kind == "conditional"
    assert run.log_evidence == pytest.approx(ll, rel=1e-5)


def plug_in(params, x_new):
    lp = stats.norm.logpdf(x_new[:, None, :], params["mu"], params["tau"] ** -0.5).sum(-1)
    lp = lp + np.log(params["pi"])
    return np.exp(lp - logsumexp(lp, axis=1, keepdims=True))


def test_enum_at_map_parameters_is_the_plug_in_rule():
    """Without ``params``, enum first fits the MAP of pi, mu, tau (AutoDelta's loss, label_new
    enumerated, by L-BFGS), then conditions on it: its class posterior is the plug-in rule at
    that MAP, not the integrated posterior predictive. The MAP is exact to float32's precision
    (L-BFGS converges on the deterministic loss; 300 Adam steps were 2e-3 off in tau)."""
    run = zoo.run(GAUSS, "enum", map_steps=300, lr=0.2, num_samples=200, seed=0)
    params = {k: v.double().numpy() for k, v in run.extras["params"].items()}
    _, probs = run.extras["marginals"]["label_new"]
    np.testing.assert_allclose(probs.T, plug_in(params, XN), atol=1e-5)
    # setosa's (mu, tau) are untouched by the new flowers: their MAP is the Normal–Gamma joint
    # mode, mu = m_n and tau = (a_n - 1/2) / b_n (the density in tau, not in log tau: AutoDelta
    # maximises the model's density without a Jacobian)
    xc = X[YL == 0]
    n, xbar = len(xc), xc.mean(0)
    b = B0 + ((xc - xbar) ** 2).sum(0) / 2 + K0 * n * (xbar - M0) ** 2 / (2 * (K0 + n))
    np.testing.assert_allclose(params["mu"][0], (K0 * M0 + n * xbar) / (K0 + n), rtol=1e-6)
    np.testing.assert_allclose(params["tau"][0], (A0 + n / 2 - 0.5) / b, rtol=1e-6)
    assert run.diagnostics["params_source"].startswith("MAP (L-BFGS")


def test_predictive_classifier_is_as_accurate_as_gaussiannb():
    """Leave-one-out on all 150 flowers: the Bayesian predictive classifier (Student-t features,
    Dirichlet–categorical prior) and GaussianNB (plug-in MLE) both get 143 of 150 right."""
    Xi, yi = load_iris(return_X_y=True)
    ours = sk = 0
    for i in range(150):
        keep = np.arange(150) != i
        p = gaussian_nb_predict_proba(Xi[keep], yi[keep], Xi[[i]], 3, ALPHA, M0, K0, A0, B0)[0]
        ours += p.argmax() == yi[i]
        sk += GaussianNB().fit(Xi[keep], yi[keep]).predict(Xi[[i]])[0] == yi[i]
    assert ours == sk == 143


def test_bernoulli_closed_form_is_bernoullinb():
    """Beta(1, 1) posterior means are BernoulliNB's Laplace-smoothed (alpha = 1) estimates; with
    the Dirichlet-categorical class prior its predict_proba is the exact class posterior of one
    new flower; the MAP is Algorithm 1's counts N_jc / N_c."""
    d = BERN.load_data()
    Xb, yb, Xnb = d["X"].double().numpy(), d["y"].numpy(), d["X_new"].double().numpy()
    prior = (np.bincount(yb) + 1) / (len(yb) + 3)
    bnb = BernoulliNB(alpha=1.0, binarize=None, class_prior=prior).fit(Xb, yb)
    for k in range(2):
        one = BERN.ground_truth({**d, "X_new": d["X_new"][k : k + 1]})
        p = bernoulli_nb_predict_proba(Xb, yb, Xnb[k : k + 1], 3, 1.0, 1.0, 1.0)[0]
        np.testing.assert_allclose(p, bnb.predict_proba(Xnb[k : k + 1])[0], atol=1e-12)
        assert float(one.mean["label_new"][0]) == pytest.approx(p @ np.arange(3), abs=1e-10)
        # P(setosa) is about 2e-6 for either new flower, so setosa's theta is the plain Beta
        # posterior up to that weight
        np.testing.assert_allclose(
            one.mean["theta"][0], np.exp(bnb.feature_log_prob_[0]), atol=1e-6
        )
    counts = np.stack([Xb[yb == c].sum(0) for c in range(3)])
    n_c = np.bincount(yb)[:, None]
    a_post, b_post = 1 + counts, 1 + n_c - counts
    mode = (a_post - 1) / (a_post + b_post - 2)
    np.testing.assert_allclose(mode, counts / n_c)  # Algorithm 1 (seed 002 L335-339)
    lp = brute_force_bernoulli(Xb, yb, Xnb)
    assert BERN.ground_truth().log_evidence == pytest.approx(lp, abs=1e-8)


def brute_force_bernoulli(Xb, yb, Xnb):
    """log p(y, X, X_new) over the 9 labellings, each by the Pólya urn for labels and for every
    binary feature (Beta(1, 1): P(x = 1 | earlier) = (1 + ones) / (2 + n))."""
    total = []
    for a in itertools.product(range(3), repeat=len(Xnb)):
        labels = np.r_[yb, a].astype(int)
        feats = np.vstack([Xb, Xnb])
        lp = polya_log_prob(labels)
        for c in range(3):
            for j in range(4):
                ones = n = 0
                for v in feats[labels == c, j]:
                    p1 = (1 + ones) / (2 + n)
                    lp += np.log(p1 if v == 1 else 1 - p1)
                    ones, n = ones + v, n + 1
        total.append(lp)
    return logsumexp(total)


def test_nuts_matches_the_closed_form(truth):
    """NUTS (label_new enumerated out, then recovered per draw) within 4 MCSE of the exact
    posterior; the label's draws match its exact probabilities."""
    run = zoo.run(GAUSS, "nuts", num_samples=200, warmup=200, num_chains=1, seed=0)
    rows = truth.rows()
    s = run.summary
    for row in [r for r in rows if not r.startswith("label_new")]:
        mean, sd = rows[row]
        assert abs(s.loc[row, "mean"] - mean) < 4 * sd / np.sqrt(s.loc[row, "ess_bulk"]), row
    labels = run.idata.posterior["label_new"].values.reshape(-1, 2)
    p_virginica = truth.mean["label_new"] - 1  # P(label = 2), as P(label = 0) is ~0
    np.testing.assert_allclose(
        (labels == 2).mean(0), p_virginica, atol=4 * 0.5 / np.sqrt(len(labels))
    )


def test_synthetic_data_recover_the_parameters():
    data, true = GAUSS.simulate(seed=shifted(1))
    post = GAUSS.ground_truth(data)
    z = (post.mean["mu"] - true["mu"].numpy()) / post.sd["mu"]
    assert np.all(np.abs(z) < 4)
    assert np.all(np.abs(post.mean["pi"] - true["pi"].numpy()) < 4 * post.sd["pi"])


@pytest.mark.slow
def test_long_nuts_and_mean_field_svi():
    truth = GAUSS.ground_truth()
    rows = {k: v for k, v in truth.rows().items() if not k.startswith("label_new")}
    run = zoo.run(GAUSS, "nuts", num_samples=600, warmup=500, num_chains=2, seed=3)
    for row, (mean, sd) in rows.items():
        r = run.summary.loc[row]
        assert abs(r["mean"] - mean) < 4 * sd / np.sqrt(r["ess_bulk"]), row
        assert r["sd"] == pytest.approx(sd, rel=0.2), row
    # the model's mean-field guide (Dirichlet x Gamma x Normal): the means are right; mu's sd
    # is at most a few per cent smaller than the exact Student-t's (sqrt((a_n - 1) / a_n))
    svi = zoo.run(GAUSS, "svi", num_steps=3000, num_samples=2000, seed=0)
    for row, (mean, sd) in rows.items():
        assert abs(svi.summary.loc[row, "mean"] - mean) < 0.3 * sd, row
    ratio = np.array([svi.summary.loc[f"mu[{c}, {j}]", "sd"] for c in range(3) for j in range(4)])
    ratio /= truth.sd["mu"].ravel()
    assert 0.85 < np.median(ratio) < 1.02


@pytest.mark.slow
def test_bernoulli_nuts_matches_the_closed_form():
    truth = BERN.ground_truth().rows()
    run = zoo.run(BERN, "nuts", num_samples=400, warmup=400, num_chains=2, seed=0)
    for row in ("pi[0]", "pi[1]", "theta[1, 0]", "theta[2, 3]"):
        mean, sd = truth[row]
        r = run.summary.loc[row]
        assert abs(r["mean"] - mean) < 4 * sd / np.sqrt(r["ess_bulk"]), row


def test_closed_form_caps_the_labellings():
    many = {**DATA, "X_new": torch.tensor(X[:9], dtype=torch.float32)}
    with pytest.raises(ValueError, match="labellings"):
        GAUSS.ground_truth(many)
