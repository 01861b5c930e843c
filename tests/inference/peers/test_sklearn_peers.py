"""scikit-learn's peers as engines (``sklearn``) of four models, against the zoo's own engines on
the same data: GaussianMixture against ``em`` (Old Faithful), BayesianGaussianMixture's Dirichlet
process against the known number of clusters, PCA against the Tipping–Bishop ``ml``, and
LatentDirichletAllocation against the known topics and ``cavi``. Each engine refuses bad input."""

import numpy as np
import pytest
import torch
from scipy.optimize import linear_sum_assignment
from scipy.stats import norm

import zoo
from tests.seeding import shifted
from zoo.models.nonparametric import DP_TRUTH
from zoo.models.nonparametric import _dp_synthetic as dp_synthetic
from zoo.models.topics import true_topics
from zoo_inference.algorithms.cavi import lda_elbo

pytest.importorskip("sklearn")


def recovery(phi, truth):
    """test_lda's score: topics matched by the Hungarian method (minimum total L1 cost); the mean
    total-variation distance of matched pairs, and the matching."""
    cost = np.abs(phi[:, None, :] - truth[None, :, :]).sum(-1) / 2
    rows, cols = linear_sum_assignment(cost)
    return float(cost[rows, cols].mean()), cols


# ------------------------------------------------------------------------ gaussian_mixture


def test_gaussian_mixture_peer_reaches_em_maximum_likelihood():
    """Old Faithful: both reach the same maximum. scikit-learn stops when the mean
    log-likelihood per point changes by less than tol (1e-10); EM converges linearly, so the
    parameters are within about sqrt(tol) of the optimum: allowed 10 sqrt(tol) = 1e-4 (found:
    2e-6). reg_covar = 1e-6 shifts a scale by reg_covar / 2s = 2e-6 at most here."""
    entry = zoo.get_model("gaussian_mixture")
    em, peer = zoo.run(entry, "em"), zoo.run(entry, "sklearn")
    assert peer.ok and peer.options["tol"] == 1e-10
    y = entry.load_data()["y"].double().numpy()
    est = peer.extras["estimate"]
    ll = norm.logpdf(y[:, None], est["locs"], est["scales"]) + np.log(est["weights"])
    assert peer.log_evidence == pytest.approx(np.logaddexp.reduce(ll, axis=1).sum(), abs=1e-8)
    assert peer.evidence.kind == "conditional"
    assert peer.log_evidence == pytest.approx(em.log_evidence, rel=1e-6)  # asked: 1e-3
    tol = 10 * np.sqrt(peer.options["tol"])
    for site in ("weights", "locs", "scales"):
        np.testing.assert_allclose(est[site], em.extras["estimate"][site], atol=tol, err_msg=site)
    assert np.all(np.diff(est["locs"]) > 0)  # the model's order
    np.testing.assert_allclose(
        peer.extras["responsibilities"], em.extras["responsibilities"], atol=tol
    )


# --------------------------------------------------------------- dirichlet_process_mixture


def clusters(seed, locs, weights, n=200):
    """n points from well-separated clusters with the model's spread 0.5 (as the synthetic
    generator draws them), and their true labels."""
    rng = np.random.default_rng(seed)
    z = rng.choice(len(locs), size=n, p=weights)
    y = np.asarray(locs)[z] + 0.5 * rng.standard_normal(n)
    return {"y": torch.tensor(y, dtype=torch.float32), "alpha": 1.0, "T": 10}, z


def synthetic(seed):
    """The model's synthetic generator (weights 0.5, 0.3, 0.2 on atoms -2.5, 0.5, 3), 200
    points: at its default 80 the data themselves are sometimes ambiguous (seed 141: the Gibbs
    sampler puts more mass on four clusters holding 10% of the points than on three)."""
    data, truth = dp_synthetic(seed, n=200)
    return data, truth["z"].numpy(), DP_TRUTH["locs"]


def other(locs, weights):
    return lambda seed: (*clusters(seed, locs, weights), locs)


@pytest.mark.parametrize(
    "draw",
    [synthetic, other((-2.0, 2.0), (0.6, 0.4)), other((-6.0, -2.0, 2.0, 6.0), (0.25,) * 4)],
    ids=["synthetic-3", "two", "four"],
)
def test_dp_mixture_peer_finds_the_number_of_clusters(draw):
    """Clusters holding at least 5% of the points (test_dp_mixture counts those holding 10% for
    gibbs and svi): exactly the true number (over 300 seeds of each: true clusters got weights
    of 0.11 or more, spurious ones 0.035 or less). The count of weights over 1% is at least the
    true number: a DP mixture may open a small cluster for a cluster's tail points (2-4% of the
    data sets here; Miller & Harrison 2013). Each found atom within 5 standard errors (0.5 /
    sqrt(n_k)) of its cluster's true location, weights within 0.1 of the clusters' shares of the
    points, and the spreads pinned at the model's sigma."""
    data, z, locs = draw(shifted(0))
    run = zoo.run("dirichlet_process_mixture", "sklearn", data=data, num_samples=200)
    assert run.ok, run.error
    sizes = run.extras["cluster_sizes"]
    big = sizes >= 0.05 * z.size
    assert big.sum() == len(locs) <= run.extras["num_clusters"]
    found = np.sort(run.extras["peer_locs"][big])
    share = np.bincount(z, minlength=len(locs))
    np.testing.assert_array_less(np.abs(found - np.asarray(locs)), 5 * 0.5 / np.sqrt(share))
    ranked = run.idata.posterior["ranked_weights"].values.reshape(-1, 10).mean(0)
    np.testing.assert_allclose(ranked[: len(locs)], np.sort(share)[::-1] / z.size, atol=0.1)
    np.testing.assert_allclose(run.extras["scales"], 0.5, rtol=1e-3)
    post = run.idata.posterior
    np.testing.assert_allclose(post["weights"].values.sum(-1), 1.0, atol=1e-9)


# ---------------------------------------------------------------------- probabilistic_pca


def test_pca_peer_is_the_tipping_bishop_maximum_likelihood():
    """PCA rescaled from N - 1 to N is the closed form: the same log-likelihood (asked 1e-6
    relative; found 1e-16) and the same covariance W W^T + sigma^2 I. scikit-learn's own N - 1
    fit scores lower (the ML is the maximum); FactorAnalysis nests PPCA, so it scores at least
    as high (up to its stopping tolerance)."""
    entry = zoo.get_model("probabilistic_pca")
    data, _ = entry.simulate(seed=shifted(0))
    ml, peer = zoo.run(entry, "ml", data=data), zoo.run(entry, "sklearn", data=data)
    assert peer.log_evidence == pytest.approx(ml.log_evidence, rel=1e-9)
    a, b = peer.extras["estimate"], ml.extras["estimate"]
    scale = np.abs(b["W"]).max() ** 2
    np.testing.assert_allclose(a["W"] @ a["W"].T, b["W"] @ b["W"].T, atol=1e-9 * scale)
    np.testing.assert_allclose(a["W"], b["W"], atol=1e-9 * scale)  # both on principal axes
    np.testing.assert_allclose(a["mu"], b["mu"], atol=1e-12)
    assert a["sigma"] == pytest.approx(b["sigma"], rel=1e-9)
    assert peer.extras["score_unbiased"] < peer.log_evidence
    fa = peer.extras["factor_analysis"]
    assert fa["log_likelihood"] > ml.log_evidence - 1e-6 * abs(ml.log_evidence)
    assert fa["noise_variance"].shape == (data["X"].shape[1],)


# -------------------------------------------------------------------------------- lda


def test_lda_peer_recovers_the_topics_as_cavi_does():
    """The synthetic corpus (800 tokens, 3 known topics): matched by the Hungarian method, the
    peer's topics are within 0.2 total variation of the truth (test_lda's bound for cavi and
    gibbs, whose fits land at 0.09-0.15) and within 0.01 of cavi's own score on the same
    corpus; the relabelling by most probable word already is the matching. Its bound is the
    ELBO of eq 130 at its factors, and the same optimum as cavi's (1e-4 relative)."""
    entry = zoo.get_model("lda")
    data, _ = entry.simulate(seed=shifted(0))
    cavi, peer = zoo.run(entry, "cavi", data=data), zoo.run(entry, "sklearn", data=data)
    truth = true_topics()
    ours, _ = recovery(cavi.extras["lambda"] / cavi.extras["lambda"].sum(1, keepdims=True), truth)
    theirs, match = recovery(peer.extras["topic_word"], truth)
    assert theirs < 0.2 and theirs < ours + 0.01, (theirs, ours)
    np.testing.assert_array_equal(match, [0, 1, 2])
    w = data["words"].numpy()
    lam, gamma, resp = (peer.extras[k] for k in ("lambda", "gamma", "q_z"))
    assert peer.log_evidence == pytest.approx(lda_elbo(w, 0.5, 0.5, lam, gamma, resp), rel=1e-10)
    assert peer.evidence.kind == "lower_bound"
    assert peer.log_evidence == pytest.approx(cavi.log_evidence, rel=1e-4)
    mean_phi = peer.summary.loc[[f"phi[0, {v}]" for v in range(12)], "mean"].to_numpy()
    np.testing.assert_allclose(mean_phi, peer.extras["topic_word"][0], atol=1e-12)
    np.testing.assert_allclose(peer.extras["doc_topic"].sum(1), 1.0, atol=1e-12)


# --------------------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    "model, bad, message",
    [
        ("gaussian_mixture", {"K": 1000}, "K must be an integer"),
        ("gaussian_mixture", {"y": torch.ones(3, 2)}, "y must be a vector"),
        ("dirichlet_process_mixture", {"alpha": 0.0}, "alpha must be positive"),
        ("dirichlet_process_mixture", {"T": 1}, "T must be an integer"),
        ("dirichlet_process_mixture", {"sigma": -1.0}, "sigma and tau0 must be positive"),
        ("dirichlet_process_mixture", {"n_init": 0}, "n_init must be a positive integer"),
        ("probabilistic_pca", {"d": 6}, "d must be an integer"),
        ("probabilistic_pca", {"X": torch.ones(2, 6)}, "needs more than d points"),
        ("lda", {"K": 1}, "K must be an integer"),
        ("lda", {"n_init": 0}, "n_init must be a positive integer"),
        ("lda", {"words": torch.full((2, 3), 12)}, "word ids in 0..11"),
    ],
)
def test_peers_refuse_bad_input(model, bad, message):
    """The engines' own checks (called directly, before the runner's data validation)."""
    entry = zoo.get_model(model)
    with pytest.raises(zoo.ZooError, match=message):
        entry.references["sklearn"](**{**entry.load_data(), **bad})
