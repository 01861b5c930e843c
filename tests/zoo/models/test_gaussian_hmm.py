"""gaussian_hmm (002 §19.3.1): the shared HMM algorithms fed Gaussian emissions, each checked
against an oracle recomputed here: brute force over all K^T state paths, hmmlearn's GaussianHMM,
Pyro's TraceEnum_ELBO on the model itself, and the synthetic truth within its sampling error."""

import itertools

import numpy as np
import pyro
import pyro.distributions as dist
import pytest
import torch
from scipy.special import logsumexp
from scipy.stats import dirichlet, lognorm
from scipy.stats import norm as normal

import zoo
from tests.seeding import shifted
from zoo.models.sequential import MU_PRIOR, SIGMA_PRIOR, STICKY
from zoo_inference.algorithms.hmm import (
    forward_backward,
    gaussian_log_b,
    hmm_log_likelihood,
    sample_gaussian_hmm,
    viterbi,
)

NAMES = ("pi", "A", "mu", "sigma")


def random_theta(rng: np.random.Generator, K: int) -> dict:
    """Random parameters in the model's labelling (increasing means), regimes overlapping."""
    return {
        "pi": rng.dirichlet(np.ones(K)),
        "A": rng.dirichlet(np.ones(K), K),
        "mu": np.sort(rng.normal(0.0, 1.5, K)),
        "sigma": np.exp(rng.normal(-0.3, 0.3, K)),
    }


def random_case(seed: int, K: int, T: int) -> tuple[np.ndarray, dict]:
    rng = np.random.default_rng(shifted(seed))
    theta = random_theta(rng, K)
    x, _ = sample_gaussian_hmm(rng, *(theta[k] for k in NAMES), T)
    return x.astype(np.float32).astype(float), theta  # what the engines see (float32 data)


def brute_force(x, pi, A, mu, sigma):
    """Over all K^T state paths, in logs: log p(x), the marginals p(z_t | x), the two-slice
    posteriors summed over t, the best path and its log joint."""
    K, T = len(pi), len(x)
    paths = np.array(list(itertools.product(range(K), repeat=T)))  # (K^T, T)
    log_joint = np.log(pi[paths[:, 0]]) + np.log(A[paths[:, :-1], paths[:, 1:]]).sum(1)
    log_joint += normal.logpdf(x[None, :], mu[paths], sigma[paths]).sum(1)
    log_p = logsumexp(log_joint)
    w = np.exp(log_joint - log_p)  # p(path | x)
    onehot = paths[:, :, None] == np.arange(K)  # (K^T, T, K)
    marg = np.einsum("n,ntk->tk", w, onehot)
    xi = np.einsum("n,nti,ntj->ij", w, onehot[:, :-1], onehot[:, 1:])
    best = int(log_joint.argmax())
    return log_p, marg, xi, paths[best], log_joint[best]


def peer(theta: dict, covariance_type: str = "diag", **options):
    """hmmlearn's GaussianHMM holding ``theta`` (variances in covars_); ``options`` go to its
    constructor (its convergence monitor reads n_iter and tol there, not from set_params)."""
    hl = pytest.importorskip("hmmlearn.hmm")
    K = len(theta["pi"])
    options = {"init_params": "", "params": "", **options}
    m = hl.GaussianHMM(n_components=K, covariance_type=covariance_type, **options)
    m.n_features = 1
    m.startprob_, m.transmat_, m.means_ = theta["pi"], theta["A"], theta["mu"][:, None]
    var = theta["sigma"] ** 2
    m.covars_ = var[:, None] if covariance_type == "diag" else var
    return m


def data(x) -> dict:
    return {"x": torch.as_tensor(x, dtype=torch.float), "K": 2}


# ---------------------------------------------------------------- evaluation and decoding


@pytest.mark.parametrize("K, T", [(2, 1), (2, 6), (3, 6)])
def test_forward_backward_viterbi_equal_brute_force_and_hmmlearn(K, T):
    x, theta = random_case(10 * K + T, K, T)
    log_p, marg, xi, path, best = brute_force(x, *(theta[k] for k in NAMES))
    log_b = gaussian_log_b(x, theta["mu"], theta["sigma"])
    pi, A = theta["pi"], theta["A"]
    post = forward_backward(pi, A, log_b)
    assert post.log_likelihood == pytest.approx(log_p, rel=1e-12, abs=1e-12)
    assert float(hmm_log_likelihood(pi, A, log_b)) == pytest.approx(log_p, rel=1e-12, abs=1e-12)
    np.testing.assert_allclose(post.gamma.sum(1), 1.0, atol=1e-12)
    np.testing.assert_allclose(post.gamma, marg, atol=1e-12)
    np.testing.assert_allclose(post.xi_sum, xi, atol=1e-12)
    v_path, v_best = viterbi(pi, A, log_b)
    np.testing.assert_array_equal(v_path, path)
    assert v_best == pytest.approx(best, rel=1e-12)
    # the peer, with diagonal and spherical covariances (the same thing in one dimension)
    for cov in ("diag", "spherical"):
        assert peer(theta, cov).score(x[:, None]) == pytest.approx(log_p, rel=1e-10)
    # and the engine, at the same parameters
    if K == 2:
        run = zoo.run("gaussian_hmm", "forward_backward", data=data(x), params=theta)
        assert run.log_evidence == pytest.approx(post.log_likelihood, rel=1e-12)
        ex = run.extras
        np.testing.assert_allclose(ex["marginals"], marg, atol=1e-12)
        np.testing.assert_array_equal(ex["viterbi"], path)
        np.testing.assert_array_equal(ex["posterior_decoding"], marg.argmax(1))
        assert [ex["estimate"][f"z_{t}"] for t in range(T)] == list(path)


@pytest.mark.parametrize("T", [50, 400])
def test_long_series_against_hmmlearn(T):
    x, theta = random_case(T, 3, T)
    m = peer(theta)
    log_b = gaussian_log_b(x, theta["mu"], theta["sigma"])
    post = forward_backward(theta["pi"], theta["A"], log_b)
    assert post.log_likelihood == pytest.approx(m.score(x[:, None]), rel=1e-10)
    assert float(hmm_log_likelihood(theta["pi"], theta["A"], log_b)) == pytest.approx(
        post.log_likelihood, rel=1e-10
    )
    np.testing.assert_allclose(post.gamma, m.predict_proba(x[:, None]), atol=1e-8)
    path, best = viterbi(theta["pi"], theta["A"], log_b)
    peer_best, peer_path = m.decode(x[:, None], algorithm="viterbi")
    np.testing.assert_array_equal(path, peer_path)
    assert best == pytest.approx(peer_best, rel=1e-10)


def log_prior(theta: dict) -> float:
    """log p(pi, A, mu, sigma) under the model's priors, written out with scipy: flat Dirichlet
    pi, sticky Dirichlet rows of A, K! prod N(mu_k | 0, 3) on the ordered means, LogNormal(0, 1)
    spreads."""
    K = len(theta["pi"])
    lp = dirichlet.logpdf(theta["pi"], np.ones(K))
    lp += sum(dirichlet.logpdf(a, 1.0 + STICKY * np.eye(K)[i]) for i, a in enumerate(theta["A"]))
    lp += np.log(np.arange(1, K + 1)).sum() + normal.logpdf(theta["mu"], *MU_PRIOR).sum()
    lp += lognorm.logpdf(theta["sigma"], s=SIGMA_PRIOR[1], scale=np.exp(SIGMA_PRIOR[0])).sum()
    return float(lp)


def test_trace_enum_elbo_at_fixed_parameters_is_the_exact_log_likelihood():
    """With a point guide on (pi, A, mu, sigma) and the states enumerated, -ELBO is exactly
    -log p(x | theta) - log p(theta): the model's chain sums to the forward algorithm."""
    x, theta = random_case(3, 2, 6)
    log_p = brute_force(x, *(theta[k] for k in NAMES))[0]
    model = pyro.infer.config_enumerate(zoo.get_model("gaussian_hmm").model, default="parallel")

    def point_guide(x, K):
        for name in NAMES:
            value = torch.as_tensor(theta[name])
            pyro.sample(name, dist.Delta(value, event_dim=value.dim()))

    def loss(x, K):
        elbo = pyro.infer.TraceEnum_ELBO(max_plate_nesting=0)
        return elbo.loss(model, point_guide, x=x, K=K)

    value = zoo.in_float64(loss, {"x": torch.tensor(x), "K": 2})
    assert -value == pytest.approx(log_p + log_prior(theta), abs=1e-9)


def test_enum_engine_at_fixed_parameters_is_forward_and_viterbi():
    x, theta = random_case(4, 2, 6)
    log_p, marg, _, path, _ = brute_force(x, *(theta[k] for k in NAMES))
    params = {k: torch.tensor(v, dtype=torch.float) for k, v in theta.items()}
    run = zoo.run("gaussian_hmm", "enum", data=data(x), params=params, num_samples=200)
    assert run.log_evidence == pytest.approx(log_p, abs=1e-4)
    for t in range(len(x)):
        support, probs = run.extras["marginals"][f"z_{t}"]
        np.testing.assert_allclose(probs[support], marg[t], atol=1e-4)
    assert [int(run.extras["map"][f"z_{t}"]) for t in range(len(x))] == list(path)


# ------------------------------------------------------------------------------- learning


def test_one_baum_welch_step_is_the_brute_force_m_step():
    """From theta, one EM step gives pi' = gamma_1, a'_ij = sum_t xi_t(i, j) / sum_{t<T}
    gamma_t(i), and the gamma-weighted mean and variance, all from brute-force posteriors; the
    second trace value is log p(x) at the new parameters."""
    x, theta = random_case(5, 2, 6)
    run = zoo.run("gaussian_hmm", "em", data=data(x), init=theta, max_iter=1)
    log_p, marg, xi, _, _ = brute_force(x, *(theta[k] for k in NAMES))
    n = marg.sum(0)
    mu = marg.T @ x / n
    new = {
        "pi": marg[0],
        "A": xi / marg[:-1].sum(0)[:, None],
        "mu": mu,
        "sigma": np.sqrt((marg * (x[:, None] - mu) ** 2).sum(0) / n),
    }
    order = np.argsort(mu)  # the model's labelling
    est = run.extras["estimate"]
    np.testing.assert_allclose(est["pi"], new["pi"][order], atol=1e-10)
    np.testing.assert_allclose(est["A"], new["A"][np.ix_(order, order)], atol=1e-10)
    np.testing.assert_allclose(est["mu"], new["mu"][order], atol=1e-10)
    np.testing.assert_allclose(est["sigma"], new["sigma"][order], atol=1e-10)
    before, after = run.traces["log_likelihood"]
    assert before == pytest.approx(log_p, abs=1e-10)
    assert after == pytest.approx(brute_force(x, *(new[k] for k in NAMES))[0], abs=1e-10)
    assert after >= before


@pytest.fixture(scope="module")
def synthetic_fit():
    entry = zoo.get_model("gaussian_hmm")
    d, truth = entry.simulate(shifted(11))
    return d, truth, zoo.run(entry, "em", data=d)


def test_baum_welch_is_monotone_and_recovers_the_truth(synthetic_fit):
    """EM's log-likelihood never decreases, and its estimate is within 5 standard errors of
    the truth. The standard errors are those of the complete-data MLE given the true states
    (sigma_k / sqrt(n_k) for a mean, sigma_k / sqrt(2 n_k) for a spread, sqrt(a (1 - a) / m_i)
    for a transition with m_i steps out of state i), inflated by 1.25 for the missing
    information of the unobserved states (over 300 synthetic series the z-scores' sds were
    0.99-1.13 and the largest |z| 3.7)."""
    d, truth, run = synthetic_fit
    trace = np.array(run.traces["log_likelihood"])
    assert np.all(np.diff(trace) >= -1e-9 * np.abs(trace[1:])) and trace[-1] > trace[0]
    assert run.log_evidence == pytest.approx(trace[-1])
    z = np.array([int(truth[f"z_{t}"]) for t in range(len(d["x"]))])
    n, m = np.bincount(z, minlength=2), np.bincount(z[:-1], minlength=2)
    mu, sigma, A = (truth[k].numpy() for k in ("mu", "sigma", "A"))
    est = run.extras["estimate"]
    inflate, Z = 1.25, 5.0
    for name, se in (
        ("mu", sigma / np.sqrt(n)),
        ("sigma", sigma / np.sqrt(2 * n)),
        ("A", np.sqrt(A * (1 - A) / m[:, None])),
    ):
        err = np.abs(est[name] - truth[name].numpy())
        assert np.all(err < Z * inflate * se), (name, est[name], truth[name], se)
    # the decoded regimes: with means 5 sds apart nearly every step is decoded right
    assert (run.extras["viterbi"] == z).mean() > 0.9


def test_baum_welch_agrees_with_hmmlearns_fit(synthetic_fit):
    """hmmlearn's unregularised Baum–Welch (covars_prior 0) from the zoo's start reaches the
    same fixed point."""
    d, _, run = synthetic_fit
    x = d["x"].double().numpy()
    start = {
        "pi": np.full(2, 0.5),
        "A": np.array([[0.7, 0.3], [0.3, 0.7]]),
        "mu": np.quantile(x, [0.25, 0.75]),
        "sigma": np.full(2, x.std()),
    }
    m = peer(start, params="stmc", n_iter=500, tol=1e-10, covars_prior=0.0, min_covar=0.0)
    m.fit(x[:, None])
    assert m.monitor_.converged and m.monitor_.iter < 500
    ours = zoo.run("gaussian_hmm", "em", data=d, init=start, max_iter=500, tol=1e-10)
    assert ours.log_evidence >= m.score(x[:, None]) - 1e-6
    assert ours.log_evidence == pytest.approx(run.log_evidence, abs=1e-4)
    order = np.argsort(m.means_[:, 0])
    est = ours.extras["estimate"]
    np.testing.assert_allclose(est["mu"], m.means_[order, 0], atol=1e-4)
    np.testing.assert_allclose(est["sigma"] ** 2, m.covars_[order, 0, 0], atol=1e-4)
    np.testing.assert_allclose(est["A"], m.transmat_[np.ix_(order, order)], atol=1e-4)


# ------------------------------------------------------------------------------ bad input


@pytest.mark.parametrize(
    "engine, kwargs, message",
    [
        ("em", {"data": {"x": [[1.0, 2.0], [3.0, 4.0]], "K": 2}}, r"data\['x'\] has shape"),
        ("em", {"data": {"x": [1.0, float("nan"), 0.0], "K": 2}}, r"data\['x'\] contains NaN"),
        ("em", {"data": {"x": [], "K": 2}}, r"data\['x'\] is empty"),
        ("em", {"data": {"x": [1.0, 2.0, 0.5], "K": 1}}, r"K must be at least 2"),
        ("em", {"data": {"x": [1.0], "K": 2}}, r"at least 2 number"),
        ("em", {"init": {"pi": [0.5, 0.5]}}, r"init must be a dict with exactly 'pi', 'A', 'mu'"),
        (
            "forward_backward",
            {"params": {"pi": [0.5, 0.5], "A": np.eye(2), "mu": [0, 1, 2], "sigma": [1, 1]}},
            r"params\['mu'\] has shape \(3,\), expected \(2,\)",
        ),
        (
            "forward_backward",
            {"params": {"pi": [0.5, 0.5], "A": np.eye(2), "mu": [1, 0], "sigma": [1, 1]}},
            r"params\['mu'\] must be increasing",
        ),
        (
            "forward_backward",
            {"params": {"pi": [0.5, 0.5], "A": np.eye(2), "mu": [0, 1], "sigma": [1, -1]}},
            r"params\['sigma'\] must be positive",
        ),
        (
            "forward_backward",
            {"params": {"pi": [0.5, 0.6], "A": np.eye(2), "mu": [0, 1], "sigma": [1, 1]}},
            r"params\['pi'\] must hold probability vectors",
        ),
        (
            "forward_backward",
            {"params": {"pi": [0.5, 0.5], "A": np.eye(2), "mu": [0, np.nan], "sigma": [1, 1]}},
            r"params\['mu'\] must be finite",
        ),
    ],
)
def test_bad_input_is_named(engine, kwargs, message):
    with pytest.raises(zoo.ZooError, match=message):
        zoo.run("gaussian_hmm", engine, **kwargs)
