"""Sequential models: the catalogue's HMM oracles (002 ch. 19) recomputed by brute force over every
state path, hmmlearn as the peer; the Kalman oracle (002 ch. 32) against the batch Gaussian
(scipy), statsmodels' local-level model as the peer, and the quadrature truth against NUTS."""

import itertools

import numpy as np
import pyro
import pytest
import torch
from scipy.special import logsumexp
from scipy.stats import multivariate_normal

import zoo
from tests.seeding import shifted
from zoo.models.sequential import SEED_A, SEED_B, SEED_PI
from zoo_inference.algorithms.hmm import forward_backward, hmm_log_likelihood, sample_hmm, viterbi
from zoo_inference.algorithms.kalman import LocalLevelMarginal, kalman_local_level, sine_basis

SEED = {"pi": SEED_PI, "A": SEED_A, "B": SEED_B}
H, C = 0, 1


def symbols(text: str) -> np.ndarray:
    """The catalogue's symbols 1, 2, 3 as 0, 1, 2."""
    return np.array([int(c) - 1 for c in text.split()])


def brute_force(x, pi, A, B):
    """Over all K^T state paths: log p(x), the marginals p(z_t | x), the best path and its
    joint probability."""
    K, T = len(pi), len(x)
    paths = np.array(list(itertools.product(range(K), repeat=T)))
    joint = pi[paths[:, 0]] * np.prod(A[paths[:, :-1], paths[:, 1:]], axis=1)
    joint = joint * np.prod(B[paths, x], axis=1)
    p = joint.sum()
    marg = np.stack([(joint[:, None] * (paths[:, [t]] == np.arange(K))).sum(0) for t in range(T)])
    return np.log(p), marg / p, paths[joint.argmax()], joint.max()


def data(x) -> dict:
    return {"x": torch.as_tensor(x), "K": 2, "M": 3}


# ------------------------------------------------------------------------------------- hmm


@pytest.mark.parametrize(
    "text, p, best, p_best, decoded",
    [
        ("3 1 3", 0.026264, [H, H, H], 0.012544, [H, H, H]),
        ("3 1 2 3", 0.01078208, [H, H, H, H], 0.00351232, [H, C, H, H]),
    ],
)
def test_catalogue_hmm_oracles(text, p, best, p_best, decoded):
    x = symbols(text)
    log_p, marg, path, joint = brute_force(x, SEED_PI, SEED_A, SEED_B)
    # the catalogue's numbers are what brute force gives
    assert np.exp(log_p) == pytest.approx(p, abs=1e-12)
    assert list(path) == best and joint == pytest.approx(p_best, abs=1e-12)
    assert list(marg.argmax(1)) == decoded
    # and what the engines give
    run = zoo.run("hmm", "forward_backward", data=data(x), params=SEED)
    assert run.log_evidence == pytest.approx(log_p, abs=1e-12)
    ex = run.extras
    np.testing.assert_allclose(ex["marginals"], marg, atol=1e-12)
    assert list(ex["viterbi"]) == best
    assert np.exp(ex["viterbi_log_joint"]) == pytest.approx(p_best, abs=1e-12)
    assert list(ex["posterior_decoding"]) == decoded
    assert ex["log_likelihood_matrix_form"] == pytest.approx(log_p, abs=1e-12)


def test_viterbi_and_posterior_decoding_differ_on_3123():
    """Decoding the sequence jointly (Viterbi: HHHH) and step by step (HCHH) disagree: the
    second-best path HCHH has joint 0.0021504 but gamma_2(C) = 0.5129 > 1/2."""
    x = symbols("3 1 2 3")
    _, marg, _, _ = brute_force(x, SEED_PI, SEED_A, SEED_B)
    assert marg[1] == pytest.approx([0.48714905, 0.51285095], abs=1e-8)
    run = zoo.run("hmm", "forward_backward", data=data(x), params=SEED)
    assert list(run.extras["viterbi"]) != list(run.extras["posterior_decoding"])
    # the Viterbi path's values are the states of the run's estimate
    assert [run.extras["estimate"][f"z_{t}"] for t in range(4)] == [H, H, H, H]


def test_enum_engine_is_the_forward_algorithm_and_viterbi():
    """The generic ``enum`` engine at the seed's parameters: exact evidence, exact marginals,
    and its MAP assignment (temperature-0 enumeration) is the Viterbi path."""
    x = symbols("3 1 2 3")
    log_p, marg, path, joint = brute_force(x, SEED_PI, SEED_A, SEED_B)
    params = {k: torch.tensor(v, dtype=torch.float) for k, v in SEED.items()}
    run = zoo.run("hmm", "enum", data=data(x), params=params, num_samples=2000)
    assert run.log_evidence == pytest.approx(log_p, abs=1e-5)
    for t in range(4):
        support, probs = run.extras["marginals"][f"z_{t}"]
        np.testing.assert_allclose(probs[support], marg[t], atol=1e-5)
    assert [int(run.extras["map"][f"z_{t}"]) for t in range(4)] == list(path)
    prior = sum(  # log p(pi, A, B) under the flat Dirichlets: log of (K-1)! (M-1)! per row
        float(d.log_prob(params[k]).sum())
        for k, d in (
            ("pi", pyro.distributions.Dirichlet(torch.ones(2))),
            ("A", pyro.distributions.Dirichlet(torch.ones(2, 2))),
            ("B", pyro.distributions.Dirichlet(torch.ones(2, 3))),
        )
    )
    assert run.diagnostics["map_log_joint"] - prior == pytest.approx(np.log(joint), abs=1e-5)
    # exact posterior draws: their frequencies within 5 binomial sds of the marginals
    z1 = run.idata.posterior["z_1"].values.ravel()
    assert abs((z1 == C).mean() - marg[1, C]) < 5 * 0.5 / np.sqrt(z1.size)


def test_one_baum_welch_step_on_313():
    x = symbols("3 1 3")
    run = zoo.run("hmm", "em", data=data(x), init=SEED, max_iter=1)
    est = run.extras["estimate"]
    np.testing.assert_allclose(est["pi"], [0.9308559245, 0.0691440755], atol=1e-9)
    np.testing.assert_allclose(
        est["A"], [[0.6922126082, 0.3077873918], [0.6670560748, 0.3329439252]], atol=1e-9
    )
    np.testing.assert_allclose(
        est["B"], [[0.2378936227, 0, 0.7621063773], [0.6481885639, 0, 0.3518114361]], atol=1e-9
    )
    before, after = run.traces["log_likelihood"]
    assert np.exp(before) == pytest.approx(0.026264, abs=1e-12)
    assert np.exp(after) == pytest.approx(0.168543, abs=1e-6)
    # brute force at the new parameters
    assert after == pytest.approx(brute_force(x, est["pi"], est["A"], est["B"])[0], abs=1e-12)
    assert run.log_evidence == pytest.approx(after, abs=1e-12)


def test_baum_welch_is_monotone_and_matches_its_forward_pass():
    run = zoo.run("hmm", "em")
    trace = np.array(run.traces["log_likelihood"])
    assert np.all(np.diff(trace) >= -1e-10) and trace[-1] > trace[0]
    est = run.extras["estimate"]
    x = zoo.get_model("hmm").load_data()["x"].numpy()
    assert run.log_evidence == pytest.approx(
        brute_force(x, est["pi"], est["A"], est["B"])[0], abs=1e-9
    )


@pytest.mark.parametrize("T", [1, 2, 7, 64, 301])
def test_matrix_form_equals_forward_backward_and_hmmlearn(T):
    hl = pytest.importorskip("hmmlearn.hmm")
    rng = np.random.default_rng(shifted(T))
    K, M = 4, 6
    pi, A, B = rng.dirichlet(np.ones(K)), rng.dirichlet(np.ones(K), K), rng.dirichlet(np.ones(M), K)
    x = rng.integers(0, M, T)
    log_b = np.log(B[:, x].T)
    ours = float(hmm_log_likelihood(pi, A, log_b))
    assert forward_backward(pi, A, log_b).log_likelihood == pytest.approx(ours, rel=1e-12)
    if T <= 7:
        assert brute_force(x, pi, A, B)[0] == pytest.approx(ours, rel=1e-12)
    peer = hl.CategoricalHMM(n_components=K, init_params="", params="")
    peer.n_features, peer.startprob_, peer.transmat_, peer.emissionprob_ = M, pi, A, B
    assert peer.score(x[:, None]) == pytest.approx(ours, rel=1e-10)
    path, _ = viterbi(pi, A, log_b)
    np.testing.assert_array_equal(path, peer.decode(x[:, None], algorithm="viterbi")[1])
    np.testing.assert_allclose(
        forward_backward(pi, A, log_b).gamma, peer.predict_proba(x[:, None]), atol=1e-10
    )
    # a batch of sequences in one call
    X = rng.integers(0, M, (3, T))
    batch = hmm_log_likelihood(pi, A, np.log(B[:, X].transpose(1, 2, 0)))
    np.testing.assert_allclose(batch, [peer.score(r[:, None]) for r in X], rtol=1e-10)


def test_baum_welch_reaches_hmmlearns_fit_from_the_same_start():
    hl = pytest.importorskip("hmmlearn.hmm")
    rng = np.random.default_rng(shifted(5))
    x, _ = sample_hmm(rng, SEED_PI, SEED_A, SEED_B, 300)
    start = {
        "pi": np.array([0.6, 0.4]),
        "A": np.array([[0.6, 0.4], [0.3, 0.7]]),
        "B": np.array([[0.3, 0.3, 0.4], [0.4, 0.35, 0.25]]),
    }
    run = zoo.run("hmm", "em", data=data(x), init=start, max_iter=500, tol=1e-10)
    peer = hl.CategoricalHMM(n_components=2, init_params="", n_iter=500, tol=1e-10)
    peer.n_features = 3
    peer.startprob_, peer.transmat_, peer.emissionprob_ = start["pi"], start["A"], start["B"]
    peer.fit(x[:, None])
    assert run.log_evidence >= peer.score(x[:, None]) - 1e-6
    est = run.extras["estimate"]
    np.testing.assert_allclose(est["A"], peer.transmat_, atol=1e-3)
    np.testing.assert_allclose(est["B"], peer.emissionprob_, atol=1e-3)


def test_hmm_bad_input_is_named():
    with pytest.raises(zoo.ZooError, match="params\\['A'\\] has shape"):
        zoo.run("hmm", "forward_backward", params={**SEED, "A": np.eye(3)})
    with pytest.raises(zoo.ZooError, match="probability vectors"):
        zoo.run("hmm", "forward_backward", params={**SEED, "pi": np.array([0.5, 0.6])})
    with pytest.raises(zoo.ZooError, match="exactly 'pi', 'A' and 'B'"):
        zoo.run("hmm", "em", init={"pi": SEED_PI})
    with pytest.raises(ValueError):  # a symbol outside 0..M-1 is outside the site's support
        zoo.run("hmm", "em", data={"x": torch.tensor([0, 5, 1]), "K": 2, "M": 3})


def test_hmm_svi_is_a_bound_on_the_evidence_at_em():
    """SVI's ELBO with the Dirichlet guide is below log p(x) at the MLE plus the log prior
    volume (the flat Dirichlets' densities are constants: log p(theta) = log 2 for the 2x3 B rows
    and 0 for the others), which bounds log p(x) from above."""
    em = zoo.run("hmm", "em")
    run = zoo.run("hmm", "svi", num_steps=200, num_samples=100, seed=shifted(0))
    assert run.ok, run.error
    assert run.log_evidence < em.log_evidence + 2 * np.log(2) + 1e-6
    for t in range(3):
        z = run.idata.posterior[f"z_{t}"].values
        assert set(np.unique(z)) <= {0, 1}


@pytest.mark.slow
def test_hmm_nuts_states_enumerated_agrees_with_enum_marginals():
    """NUTS on (pi, A, B) with the states summed out: the evidence-weighted average of the
    z marginals is a probability, and every draw's states are recovered exactly."""
    run = zoo.run("hmm", "nuts", num_samples=100, warmup=100, num_chains=2, jit=False)
    assert run.ok and run.diagnostics["divergences"] < 5
    for site in ("pi", "A", "B"):
        v = run.idata.posterior[site].values
        np.testing.assert_allclose(v.sum(-1), 1.0, atol=1e-5)


# ------------------------------------------------------------------------ linear_gaussian_ssm

Y = np.array([1.0, 2.0, 0.5])


def test_catalogue_kalman_oracle():
    k = kalman_local_level(Y, 0.5, 1.0, 0.0, 1.0)  # q = 0.5 and r = 1 are VARIANCES (002b §2.24)
    np.testing.assert_allclose(k.filtered_mean, [0.6, 1.333333, 0.911765], atol=1e-6)
    np.testing.assert_allclose(k.filtered_var, [0.6, 0.5238095238, 0.5058823529], atol=1e-9)
    assert k.log_likelihood == pytest.approx(-4.776656, abs=1e-6)
    # the batch Gaussian: y ~ N(0, P0 + q min(s, t) + r I)
    t = np.arange(1, 4)
    cov_x = 1.0 + 0.5 * np.minimum(t[:, None], t[None, :])
    cov_y = cov_x + np.eye(3)
    assert k.log_likelihood == pytest.approx(multivariate_normal(np.zeros(3), cov_y).logpdf(Y))
    # RTS smoother = Gaussian conditioning on all of y
    gain = cov_x @ np.linalg.inv(cov_y)
    np.testing.assert_allclose(k.smoothed_mean, gain @ Y, atol=1e-12)
    np.testing.assert_allclose(k.smoothed_var, np.diag(cov_x - gain @ cov_x), atol=1e-12)
    np.testing.assert_allclose(k.smoothed_mean, [0.8823529412, 1.1176470588, 0.9117647059])
    # the engine gives the same at the same variances
    run = zoo.run(
        "linear_gaussian_ssm",
        "kalman",
        data={"y": Y, "t": np.arange(1.0, 4.0), "m0": 0.0, "P0": 1.0, "scale": 1.0},
        q=0.5,
        r=1.0,
    )
    assert run.log_evidence == pytest.approx(-4.776656, abs=1e-6)
    np.testing.assert_allclose(run.extras["filtered_mean"], k.filtered_mean)


def test_model_level_sites_are_the_smoother_given_q_and_r():
    entry = zoo.get_model("linear_gaussian_ssm")
    d = entry.load_data()
    q, r = 1500.0, 15000.0
    cond = pyro.poutine.condition(
        entry.model,
        data={"q": torch.tensor(q, dtype=torch.float64), "r": torch.tensor(r, dtype=torch.float64)},
    )
    with torch.no_grad():
        tr = zoo.in_float64(lambda **kw: pyro.poutine.trace(cond).get_trace(**kw), d)
    k = kalman_local_level(d["y"].numpy(), q, r, d["m0"], d["P0"])
    np.testing.assert_allclose(tr.nodes["level"]["value"].numpy(), k.smoothed_mean, rtol=1e-8)
    np.testing.assert_allclose(
        tr.nodes["level_sd"]["value"].numpy(), np.sqrt(k.smoothed_var), rtol=1e-6
    )
    ll = float(tr.nodes["y"]["fn"].log_prob(tr.nodes["y"]["value"]))
    assert ll == pytest.approx(float(k.log_likelihood), abs=1e-6)


def test_the_local_level_marginal_is_the_batch_gaussian():
    """The sine basis diagonalises min(s, t); in it the marginal's log density equals the batch
    Gaussian's (scipy, T x T), and its draws have that Gaussian's mean and covariance."""
    T, q, r, m0, P0 = 6, 0.7, 0.4, 1.5, 2.0
    V, lam = sine_basis(T)
    t = np.arange(1, T + 1)
    M = np.minimum(t[:, None], t[None, :])
    np.testing.assert_allclose(V.T @ V, np.eye(T), atol=1e-12)
    np.testing.assert_allclose(V @ np.diag(lam) @ V.T, M, atol=1e-12)
    S = P0 + q * M + r * np.eye(T)
    f64 = {"dtype": torch.float64}
    m = LocalLevelMarginal(torch.tensor(q, **f64), torch.tensor(r, **f64), m0, P0, T)
    y = np.random.default_rng(shifted(3)).normal(size=(5, T)) * 2 + m0
    np.testing.assert_allclose(
        m.log_prob(torch.tensor(y)).numpy(), multivariate_normal(np.full(T, m0), S).logpdf(y)
    )
    n = 200_000
    torch.manual_seed(shifted(4))
    draws = m.sample((n,)).numpy()
    # sd of a sample covariance entry: sqrt((S_ij^2 + S_ii S_jj) / n); 6 of them
    sd = np.sqrt((S**2 + np.outer(np.diag(S), np.diag(S))) / n)
    assert np.all(np.abs(np.cov(draws.T) - S) < 6 * sd)
    assert np.all(np.abs(draws.mean(0) - m0) < 6 * np.sqrt(np.diag(S) / n))


def test_nile_kalman_equals_statsmodels_local_level():
    sm = pytest.importorskip("statsmodels.api")
    entry = zoo.get_model("linear_gaussian_ssm")
    d = entry.load_data()
    y = d["y"].double().numpy()
    assert y.shape == (100,) and y[0] == 1120.0  # Nile 1871
    q, r = 1469.1, 15099.0  # Durbin & Koopman's estimates
    mod = sm.tsa.UnobservedComponents(y, level="llevel")
    # statsmodels' first state is our x_1: N(m0, P0 + q)
    mod.ssm.initialize_known(np.array([d["m0"]]), np.array([[d["P0"] + q]]))
    mod.loglikelihood_burn = 0  # its default drops the first term, set for a diffuse start
    res = mod.smooth([r, q])
    k = kalman_local_level(y, q, r, d["m0"], d["P0"])
    assert float(k.log_likelihood) == pytest.approx(res.llf, abs=1e-6)
    np.testing.assert_allclose(k.filtered_mean, res.filtered_state[0], rtol=1e-10)
    np.testing.assert_allclose(k.smoothed_mean, res.smoothed_state[0], rtol=1e-10)
    np.testing.assert_allclose(k.smoothed_var, res.smoothed_state_cov[0, 0], rtol=1e-8)
    # maximum likelihood, against statsmodels' own fit (a flat ridge in q: its optimiser stops
    # a little short, 1480 against 1461, at a lower log-likelihood)
    run = zoo.run(entry, "kalman")
    fit = mod.fit(disp=False)
    assert run.log_evidence >= fit.llf - 1e-4
    assert run.extras["estimate"]["q"] == pytest.approx(fit.params[1], rel=5e-2)
    assert run.extras["estimate"]["r"] == pytest.approx(fit.params[0], rel=5e-2)


@pytest.mark.slow  # ~30 s; the conformance suite runs nuts on this model against the truth too
def test_nuts_states_marginalised_matches_the_quadrature_truth():
    entry = zoo.get_model("linear_gaussian_ssm")
    truth = entry.ground_truth()
    run = zoo.run(entry, "nuts", num_samples=150, warmup=150, num_chains=4, jit=False)
    assert run.ok, run.error
    for row in ("q", "r", "level[0]", "level[50]", "level[99]"):
        r = run.summary.loc[row]
        mean, sd = truth.rows()[row]
        assert abs(r["mean"] - mean) < 5 * sd / np.sqrt(r["ess_bulk"]), row


def test_quadrature_truth_agrees_with_a_wider_grid():
    """The 64^2 Gauss–Legendre truth against a plain midpoint rule on a box twice as wide."""
    entry = zoo.get_model("linear_gaussian_ssm")
    d = entry.load_data()
    y = d["y"].double().numpy()
    truth = entry.ground_truth()
    u = np.linspace(-10, 10, 401)
    lq, lr = np.meshgrid(np.log(1461.0) + u, np.log(15110.0) + u, indexing="ij")
    k = kalman_local_level(y, np.exp(lq), np.exp(lr), d["m0"], d["P0"])
    lp = k.log_likelihood - 0.5 * ((lq - 2 * np.log(100 / 3)) / 2) ** 2
    lp = lp - 0.5 * ((lr - 2 * np.log(100)) / 2) ** 2 - np.log(2 * np.pi * 4)
    log_z = logsumexp(lp) + 2 * np.log(u[1] - u[0])
    w = np.exp(lp - logsumexp(lp))
    assert truth.log_evidence == pytest.approx(log_z, abs=1e-4)
    assert truth.mean["q"] == pytest.approx((w * np.exp(lq)).sum(), rel=1e-4)
    assert truth.mean["r"] == pytest.approx((w * np.exp(lr)).sum(), rel=1e-4)


def test_kalman_bad_input_is_named():
    with pytest.raises(zoo.ZooError, match="both q and r"):
        zoo.run("linear_gaussian_ssm", "kalman", q=1.0)
    with pytest.raises(zoo.ZooError, match="positive"):
        zoo.run("linear_gaussian_ssm", "kalman", q=-1.0, r=1.0)
