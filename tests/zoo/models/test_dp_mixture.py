"""dirichlet_process_mixture: the CRP prior's expected number of clusters (derived oracle,
recomputed and simulated), the stick-breaking prior's weights, Neal's algorithm 2 against the
exact posterior over partitions of three points, and the posterior's number of clusters."""

import itertools
from fractions import Fraction

import numpy as np
import pytest
import torch
from scipy.stats import multivariate_normal

import zoo
from tests.seeding import shifted
from zoo.models.nonparametric import crp_expected_clusters, crp_partition, stick_breaking
from zoo_inference.algorithms.gibbs import crp_gibbs_sweep

ENTRY = zoo.get_model("dirichlet_process_mixture")


@pytest.mark.parametrize(
    "alpha, n, expected",
    [(1, 10, 2.928968), (1, 100, 5.187378), (0.5, 100, 3.284342), (2, 50, 7.037626)],
)
def test_crp_expected_number_of_clusters(alpha, n, expected):
    """E[K_n] = sum_i alpha / (alpha + i - 1) (seed notes 000 §5), recomputed in exact
    fractions (at alpha = 1 it is the harmonic number H_n)."""
    a = Fraction(alpha)
    exact = sum(a / (a + i - 1) for i in range(1, n + 1))
    assert float(exact) == pytest.approx(expected, abs=5e-7)
    assert crp_expected_clusters(n, alpha) == pytest.approx(float(exact), rel=1e-12)
    if alpha == 1:
        assert exact == sum(Fraction(1, i) for i in range(1, n + 1))


@pytest.mark.parametrize("n, sims", [(10, 4000), (100, 600)])
def test_simulated_crp_prior_matches_the_expectation(n, sims):
    rng = np.random.default_rng(shifted(n))
    k = np.array([len(np.unique(crp_partition(n, 1.0, rng))) for _ in range(sims)])
    se = k.std(ddof=1) / np.sqrt(sims)
    assert abs(k.mean() - crp_expected_clusters(n, 1.0)) < 5 * se


def test_stick_breaking_prior_weights():
    """E[pi_k] = (1/(1+alpha)) (alpha/(1+alpha))^(k-1): 0.5, 0.25, 0.125, ... at alpha = 1; the
    truncated weights sum to one (the last component takes the rest of the stick)."""
    torch.manual_seed(shifted(0))
    m = 20000
    v = torch.distributions.Beta(1.0, 1.0).sample((m, 9)).double()
    w = stick_breaking(v)
    np.testing.assert_allclose(w.sum(-1).numpy(), 1.0, atol=1e-12)
    mean, se = w.mean(0).numpy(), w.std(0).numpy() / np.sqrt(m)
    expected = 0.5 ** np.arange(1, 6)
    assert np.all(np.abs(mean[:5] - expected) < 5 * se[:5])
    assert mean[-1] == pytest.approx(0.5**9, abs=5 * se[-1])  # the rest: prod of 9 breaks


def test_neal_algorithm_2_samples_the_exact_partition_posterior():
    """Three points, every partition (5 of them) scored exactly: CRP prior times the conjugate
    marginal of each cluster, y_c ~ N(mu0 1, sigma^2 I + tau0^2 1 1^T). The Gibbs chain's
    partition frequencies match within Monte-Carlo error."""
    y = np.array([-1.0, -0.6, 1.2])
    alpha, sigma, mu0, tau0 = 1.0, 0.5, 0.0, 1.5

    def canonical(labels):
        seen = {}
        return tuple(seen.setdefault(c, len(seen)) for c in labels)

    parts = sorted({canonical(p) for p in itertools.product(range(3), repeat=3)})
    assert len(parts) == 5  # Bell number B_3

    def log_score(part):
        counts = np.bincount(part)
        # CRP prior of a partition: alpha^K prod (n_c - 1)! / prod_{i<n} (alpha + i)
        lp = len(counts) * np.log(alpha) + sum(np.log(np.arange(1, c)).sum() for c in counts)
        lp -= np.log(alpha + np.arange(3)).sum()
        for c in range(len(counts)):
            yc = y[np.array(part) == c]
            cov = sigma**2 * np.eye(yc.size) + tau0**2 * np.ones((yc.size, yc.size))
            lp += multivariate_normal(np.full(yc.size, mu0), cov).logpdf(yc)
        return lp

    scores = np.array([log_score(p) for p in parts])
    exact = np.exp(scores - np.logaddexp.reduce(scores))
    np.random.seed(shifted(5))
    labels, atoms = np.zeros(3, dtype=np.int64), [0.0]
    counts = dict.fromkeys(parts, 0)
    sweeps = 6000
    for t in range(sweeps + 100):
        labels, atoms = crp_gibbs_sweep(y, labels, atoms, alpha, sigma, mu0, tau0)
        assert len(atoms) == labels.max() + 1 == len(np.unique(labels))
        if t >= 100:
            counts[canonical(labels)] += 1
    freq = np.array([counts[p] for p in parts]) / sweeps
    # consecutive sweeps are correlated: count them as a quarter as many independent draws
    se = np.sqrt(exact * (1 - exact) / (sweeps / 4))
    assert np.all(np.abs(freq - exact) < 5 * se + 1e-3), (freq, exact)


@pytest.fixture(scope="module")
def gibbs_run():
    return zoo.run(ENTRY, "gibbs", seed=0)


def substantial_clusters(z, share=0.1):
    """Per draw, the number of clusters holding at least ``share`` of the points."""
    flat = z.reshape(-1, z.shape[-1])
    return np.array([(np.bincount(a) >= share * a.size).sum() for a in flat])


def test_gibbs_finds_the_three_clusters(gibbs_run):
    """Synthetic data from three clusters (weights 0.5, 0.3, 0.2): the CRP sampler's posterior
    puts most mass on three clusters holding 10% of the points or more (a DP mixture also opens
    a few tiny ones: its total count is not consistent for the number of components, Miller &
    Harrison 2013), with the right weights. Over four seeds 73-78% of the draws had three."""
    post = gibbs_run.idata.posterior
    k = substantial_clusters(post["z"].values)
    assert np.bincount(k).argmax() == 3 and np.mean(k == 3) > 0.5
    assert np.all(gibbs_run.extras["num_clusters"] >= 3)
    ranked = post["ranked_weights"].values.reshape(-1, 10).mean(0)
    np.testing.assert_allclose(ranked[:3], [0.5, 0.3, 0.2], atol=0.1)
    assert ranked[3] < 0.1
    v = post["v"].values
    assert np.all((v > 0) & (v < 1)) and post["z"].values.max() < 10
    np.testing.assert_allclose(post["weights"].values.sum(-1), 1.0, atol=1e-9)


def test_svi_with_enumerated_assignments_finds_the_three_clusters():
    run = zoo.run(ENTRY, "svi", seed=0, num_samples=200, jit=True)
    assert run.diagnostics["elbo_kind"] == "enum"
    ranked = run.summary.loc[[f"ranked_weights[{i}]" for i in range(4)], "mean"].to_numpy()
    # mean-field q(v) is wide: ranking its draws leaks some weight to the fourth place
    assert ranked[:3].sum() > 0.75 and ranked[3] < 0.12
    k = substantial_clusters(run.idata.posterior["z"].values)
    assert np.bincount(k).argmax() == 3


def test_gibbs_refuses_a_non_positive_concentration():
    data = {**ENTRY.load_data(), "alpha": 0.0}
    with pytest.raises(ValueError, match="alpha must be positive|support"):
        zoo.run(ENTRY, "gibbs", data=data)
