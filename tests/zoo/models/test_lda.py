"""lda on a synthetic corpus from known topics: CAVI (monotone ELBO, equal to an independent
computation of eq 130), collapsed Gibbs (against the exact posterior of a tiny corpus), topic
recovery by every engine (topics matched by the Hungarian algorithm), scikit-learn's peer."""

import itertools

import numpy as np
import pyro
import pytest
import torch
from scipy.optimize import linear_sum_assignment
from scipy.special import betaln, gammaln

import zoo
from tests.seeding import shifted
from zoo.models.topics import check_corpus, true_topics
from zoo_inference.algorithms.cavi import lda_cavi_steps
from zoo_inference.algorithms.gibbs import collapsed_gibbs_sweep

ENTRY = zoo.get_model("lda")
TRUTH = true_topics()


def recovery(phi, truth=TRUTH):
    """Topics matched to the truth by minimum total L1 cost; the mean total-variation distance
    of matched pairs (0: identical, 1: disjoint) and the matching."""
    cost = np.abs(phi[:, None, :] - truth[None, :, :]).sum(-1) / 2
    rows, cols = linear_sum_assignment(cost)
    return float(cost[rows, cols].mean()), cols


def posterior_phi(run):
    return run.idata.posterior["phi"].values.reshape(-1, 3, 12).mean(0)


@pytest.fixture(scope="module")
def cavi_run():
    return zoo.run(ENTRY, "cavi", seed=0)


@pytest.fixture(scope="module")
def gibbs_run():
    return zoo.run(ENTRY, "gibbs", seed=0)


def test_cavi_elbo_never_decreases(cavi_run):
    trace = np.array(cavi_run.traces["elbo"])
    assert np.all(np.diff(trace) >= -1e-9 * np.abs(trace[1:]))
    assert cavi_run.evidence.kind == "lower_bound" and cavi_run.log_evidence == trace[-1]


def test_cavi_elbo_equals_an_independent_computation(cavi_run):
    """ELBO = E[log p(w | z, phi)] + E[log p(z | theta)] + H(q(z)) - KL(q(theta) || p(theta))
    - KL(q(phi) || p(phi)): the KLs by torch's closed forms, the two expectations by Monte
    Carlo over q (20000 draws; tolerance from their standard error)."""
    w = ENTRY.load_data()["words"].numpy()
    lam = torch.tensor(cavi_run.extras["lambda"])
    gamma = torch.tensor(cavi_run.extras["gamma"])
    resp = cavi_run.extras["q_z"]  # (D, N, K)
    Dir = torch.distributions.Dirichlet
    kl = torch.distributions.kl_divergence(Dir(lam), Dir(torch.full_like(lam, 0.5))).sum()
    kl += torch.distributions.kl_divergence(Dir(gamma), Dir(torch.full_like(gamma, 0.5))).sum()
    entropy = -(resp * np.log(resp)).sum()
    torch.manual_seed(shifted(0))
    m = 20000
    log_phi = Dir(lam).sample((m,)).clamp_min(1e-300).log().numpy()  # (m, K, V)
    log_theta = Dir(gamma).sample((m,)).clamp_min(1e-300).log().numpy()  # (m, D, K)
    # per draw: sum_{d,n,k} q(z_dn = k) [log phi_{k, w_dn} + log theta_dk]
    word_counts = np.einsum("dnk,dnv->kv", resp, np.eye(12)[w])
    topic_counts = resp.sum(1)  # (D, K)
    per_draw = (log_phi * word_counts).sum((1, 2)) + (log_theta * topic_counts).sum((1, 2))
    estimate = per_draw.mean() + entropy - float(kl)
    se = per_draw.std() / np.sqrt(m)
    assert cavi_run.log_evidence == pytest.approx(estimate, abs=5 * se + 1e-6)


def test_cavi_and_gibbs_recover_the_topics(cavi_run, gibbs_run):
    """800 tokens from 3 topics: every fit within 0.2 total variation of its matched topic (the
    fits on the default corpus land at 0.09-0.15), and the reference engines' own relabelling
    (topics by most probable word) already is the matching."""
    for run in (cavi_run, gibbs_run):
        score, match = recovery(posterior_phi(run))
        assert score < 0.2, (run.engine, score)
        np.testing.assert_array_equal(match, [0, 1, 2])
    # both Gibbs chains found the same topics (no chain stuck in another labelling or optimum)
    per_chain = gibbs_run.idata.posterior["phi"].values.mean(1)
    assert recovery(per_chain[0], per_chain[1])[0] < 0.1


def test_gibbs_assignments_agree_with_cavi(cavi_run, gibbs_run):
    """Most tokens get the same most probable topic from both (words shared by two topics,
    about one in ten here, may not)."""
    z = gibbs_run.idata.posterior["z"].values.reshape(-1, 20, 40)  # (draws, N, D)
    gibbs_mode = np.stack([(z == k).mean(0) for k in range(3)]).argmax(0).T  # (D, N)
    agree = (gibbs_mode == cavi_run.extras["q_z"].argmax(-1)).mean()
    assert agree > 0.85


def test_svi_with_enumerated_topics_recovers_them():
    run = zoo.run(ENTRY, "svi", seed=0, num_samples=100, jit=True)
    assert run.diagnostics["elbo_kind"] == "enum"
    score, _ = recovery(posterior_phi(run))
    assert score < 0.2


def test_scikit_learns_variational_lda_is_the_same_algorithm(cavi_run):
    """scikit-learn's batch variational Bayes (Blei et al. 2003; Hoffman et al. 2010) on the same
    counts and priors: its topics are ours to within the slack of its inner iterations."""
    decomposition = pytest.importorskip("sklearn.decomposition")
    w = ENTRY.load_data()["words"].numpy()
    counts = np.stack([np.bincount(row, minlength=12) for row in w])
    peer = decomposition.LatentDirichletAllocation(
        n_components=3,
        doc_topic_prior=0.5,
        topic_word_prior=0.5,
        learning_method="batch",
        max_iter=300,
        random_state=shifted(0),
    ).fit(counts)
    theirs = peer.components_ / peer.components_.sum(1, keepdims=True)
    score, _ = recovery(theirs)
    assert score < 0.2
    ours = cavi_run.extras["lambda"] / cavi_run.extras["lambda"].sum(1, keepdims=True)
    gap, _ = recovery(theirs, ours)
    assert gap < 0.03


def test_collapsed_gibbs_samples_the_exact_posterior_of_a_tiny_corpus():
    """Two documents of two words, K = 2, V = 3: all 16 assignments scored exactly by the
    Dirichlet-multinomial marginal p(z, w) = prod_d B(alpha + n_d) / B(alpha) prod_k
    B(eta + n_k) / B(eta), against the sampler's frequencies."""
    w = np.array([[0, 1], [1, 2]])
    alpha, eta, K, V = 0.5, 0.5, 2, 3

    def log_beta(a):
        return gammaln(a).sum(-1) - gammaln(a.sum(-1))

    def log_joint(z):
        n_dk = np.stack([np.bincount(r, minlength=K) for r in z])
        n_kw = np.zeros((K, V))
        np.add.at(n_kw, (z.ravel(), w.ravel()), 1)
        lp = (log_beta(alpha + n_dk) - log_beta(np.full(K, alpha))).sum()
        return lp + (log_beta(eta + n_kw) - log_beta(np.full(V, eta))).sum()

    states = [np.array(s).reshape(2, 2) for s in itertools.product(range(K), repeat=4)]
    scores = np.array([log_joint(s) for s in states])
    exact = np.exp(scores - np.logaddexp.reduce(scores))
    assert betaln(1.0, 1.0) == 0.0  # the Beta function's normalisation, as log_beta uses it
    np.random.seed(shifted(3))
    z = np.random.randint(K, size=(2, 2))
    n_dk = np.stack([np.bincount(r, minlength=K) for r in z])
    n_kw = np.zeros((K, V), dtype=np.int64)
    np.add.at(n_kw, (z.ravel(), w.ravel()), 1)
    n_k = n_kw.sum(1)
    freq = np.zeros(len(states))
    sweeps = 8000
    for t in range(sweeps + 100):
        collapsed_gibbs_sweep(w, z, n_dk, n_kw, n_k, alpha, eta)
        if t >= 100:
            freq[int("".join(map(str, z.ravel())), 2)] += 1
    freq /= sweeps
    se = np.sqrt(exact * (1 - exact) / (sweeps / 4))  # correlated sweeps: a quarter as many
    assert np.all(np.abs(freq - exact) < 5 * se + 1e-3), (freq, exact)


def test_cavi_from_the_truth_stays_near_it():
    """Started at the true topics (lambda = 1 + 200 phi), CAVI's fixed point is the same
    labelling and recovers them."""
    w = ENTRY.load_data()["words"].numpy()
    lam, _, _, trace = lda_cavi_steps(w, 3, 12, 0.5, 0.5, 1 + 200 * TRUTH, 300, 1e-10)
    score, match = recovery(lam / lam.sum(1, keepdims=True))
    assert score < 0.2 and list(match) == [0, 1, 2]


def test_bad_corpus_is_refused():
    data = ENTRY.load_data()
    bad = data["words"].clone()
    bad[0, 0] = 12
    with pytest.raises(ValueError, match="outside its support"):  # zoo.run's data validation
        zoo.run(ENTRY, "cavi", data={**data, "words": bad})
    with pytest.raises(ValueError, match="word ids in 0..11"):  # the algorithms' own check
        check_corpus(bad, 3, 12)


def test_amortised_guide_recovers_the_topics_with_a_bound_near_the_per_document_guides():
    """q(theta_d) from an encoder of document d's words (variant svi_amortised): the topics
    are recovered as by the free Dirichlet per document, and the amortisation gap (free ELBO
    minus amortised ELBO, both averaged over 100 draws) is small against the ELBO's 1900 nats."""
    seed = shifted(0)
    free = zoo.run(ENTRY, "svi", seed=seed, num_samples=100, jit=True)
    amortised = zoo.run(ENTRY, "svi_amortised", seed=seed, num_samples=100, jit=True)
    assert amortised.ok, amortised.error
    pyro.clear_param_store()
    ENTRY.guide(**ENTRY.load_data(), amortised=True)  # the variant's guide: an encoder, no gammas
    assert "enc_W1" in pyro.get_param_store() and "q_theta_conc" not in pyro.get_param_store()
    score, _ = recovery(posterior_phi(amortised))
    assert score < 0.2
    assert amortised.log_evidence > free.log_evidence - 10.0
