"""three_coin: the document's EM numbers (001 §1.1, Example 1), the derived MLE ridge recomputed by
brute-force enumeration, and every engine against the exact posterior."""

import itertools

import numpy as np
import pytest
from scipy.special import logsumexp

import zoo
from zoo_inference.algorithms.em import bernoulli_mixture_em

ENTRY = zoo.get_model("three_coin")
Y = np.array([1, 1, 0, 1, 0, 0, 1, 0, 1, 1], dtype=float)
ALL_Z = np.array(list(itertools.product([0, 1], repeat=Y.size)), dtype=float)  # 1024 x 10


def brute_force(theta):
    """log p(y | theta), P(z_j = 1 | y, theta) and the joint MAP z, over all 2^10 assignments."""
    pi, p, q = theta
    prob = np.where(ALL_Z == 1, p, q)
    log_joint = (
        np.where(ALL_Z == 1, np.log(pi), np.log(1 - pi))
        + Y * np.log(prob)
        + (1 - Y) * np.log(1 - prob)
    ).sum(1)
    log_lik = logsumexp(log_joint)
    post = np.exp(log_joint - log_lik)
    return log_lik, post @ ALL_Z, ALL_Z[np.argmax(log_joint)]


def test_default_data_is_the_documents():
    np.testing.assert_array_equal(ENTRY.load_data()["y"].numpy(), Y)


def test_em_from_half_half_half():
    run = zoo.run("three_coin", "em", init=(0.5, 0.5, 0.5))
    est = run.extras["estimate"]
    assert (est["pi"], est["p"], est["q"]) == pytest.approx((0.5, 0.6, 0.6), abs=1e-12)


def test_em_from_books_start_gives_documents_numbers():
    """The document prints the start (0.4, 0.6, 0.6), a typo: from it EM never moves (p = q makes
    every responsibility equal pi). Li Hang's (0.4, 0.6, 0.7) gives the printed result."""
    run = zoo.run("three_coin", "em", init=(0.4, 0.6, 0.7))
    est = run.extras["estimate"]
    assert (est["pi"], est["p"], est["q"]) == pytest.approx(
        (76 / 187, 51 / 95, 119 / 185), abs=1e-12
    )
    assert (round(est["pi"], 4), round(est["p"], 4), round(est["q"], 4)) == (0.4064, 0.5368, 0.6432)
    stuck = bernoulli_mixture_em(Y, (0.4, 0.6, 0.6), 50, 1e-14).theta
    np.testing.assert_allclose(stuck, (0.4, 0.6, 0.6), atol=1e-12)


@pytest.mark.parametrize("init", [(0.5, 0.5, 0.5), (0.4, 0.6, 0.7), (0.2, 0.9, 0.3)])
def test_every_mle_is_on_the_ridge(init):
    """Derived: every MLE has pi p + (1 - pi) q = 0.6 and log-likelihood 6 ln 0.6 + 4 ln 0.4."""
    run = zoo.run("three_coin", "em", init=init)
    e = run.extras["estimate"]
    assert e["pi"] * e["p"] + (1 - e["pi"]) * e["q"] == pytest.approx(0.6, abs=1e-9)
    brute, _, _ = brute_force((e["pi"], e["p"], e["q"]))
    assert brute == pytest.approx(6 * np.log(0.6) + 4 * np.log(0.4), abs=1e-9)
    assert brute == pytest.approx(-6.730117, abs=1e-6)
    assert run.log_evidence == pytest.approx(brute, abs=1e-9)
    assert np.all(np.diff(run.traces["log_likelihood"]) >= -1e-12)  # Theorem 1


def test_enum_at_given_parameters_matches_brute_force():
    theta = (76 / 187, 51 / 95, 119 / 185)
    run = zoo.run(
        "three_coin",
        "enum",
        params=dict(zip(("pi", "p", "q"), theta, strict=True)),
        num_samples=2000,
        seed=1,
    )
    log_lik, marg, map_z = brute_force(theta)
    assert run.log_evidence == pytest.approx(log_lik, abs=1e-5)
    probs = run.extras["marginals"]["z"][1][1]  # P(z_j = 1)
    np.testing.assert_allclose(probs, marg, atol=1e-6)
    for j in range(Y.size):
        assert run.summary.loc[f"z[{j}]", "mean"] == pytest.approx(marg[j], abs=1e-6)
    np.testing.assert_array_equal(run.extras["map"]["z"], map_z)
    draws = run.idata.posterior["z"].values.reshape(-1, Y.size)
    np.testing.assert_allclose(draws.mean(0), marg, atol=4 * 0.5 / np.sqrt(2000))


def test_enum_map_parameters_lie_on_the_ridge():
    run = zoo.run("three_coin", "enum", map_steps=800, num_samples=50)
    f = run.extras["params"]
    s = float(f["pi"] * f["p"] + (1 - f["pi"]) * f["q"])
    assert s == pytest.approx(0.6, abs=5e-3)
    assert run.log_evidence == pytest.approx(-6.730117, abs=1e-3)


def test_ground_truth_agrees_with_an_independent_grid():
    """The quadrature truth against a dense midpoint rule (error O(h^2) ~ 1e-5)."""
    truth = ENTRY.ground_truth()
    m = 160
    g = (np.arange(m) + 0.5) / m
    pi, p, q = np.meshgrid(g, g, g, indexing="ij")
    s = pi * p + (1 - pi) * q
    lik = s**6 * (1 - s) ** 4
    z = lik.mean()
    assert truth.log_evidence == pytest.approx(np.log(z), abs=1e-4)
    for name, v in (("pi", pi), ("p", p), ("q", q)):
        mean = (v * lik).mean() / z
        sd = np.sqrt((v**2 * lik).mean() / z - mean**2)
        assert truth.mean[name] == pytest.approx(mean, abs=1e-5)
        assert truth.sd[name] == pytest.approx(sd, abs=1e-5)
    assert truth.mean["z"][0] == pytest.approx((pi * p / s * lik).mean() / z, abs=1e-5)
    assert truth.mean["z"][2] == pytest.approx((pi * (1 - p) / (1 - s) * lik).mean() / z, abs=1e-5)
    # the marginal density integrates to one
    x = (np.arange(400) + 0.5) / 400
    assert truth.density["pi"](x).mean() == pytest.approx(1.0, abs=1e-4)


@pytest.mark.slow  # 17 s; the conformance cell three_coin-nuts and test_samplers' agreement with
# Pyro's NUTS on three_coin check the same sampler on this model in the default run
def test_nuts_matches_exact_posterior():
    run = zoo.run("three_coin", "nuts", num_samples=200, warmup=150, num_chains=4, seed=0)
    truth = ENTRY.ground_truth()
    exact = truth.rows()
    for row in ("pi", "p", "q", "z[0]", "z[2]"):
        r = run.summary.loc[row]
        mean, sd = exact[row]
        assert r["mean"] == pytest.approx(mean, abs=4.5 * sd / np.sqrt(r["ess_bulk"])), row
    assert run.diagnostics["divergences"] == 0


def test_svi_mean_field_guide_is_close_to_truth():
    run = zoo.run("three_coin", "svi", num_steps=600, num_samples=200, jit=True, seed=0)
    truth = ENTRY.ground_truth()
    # A mean-field Beta family cannot follow the curved ridge; its means still land within a
    # fraction of a posterior sd, and its ELBO is a bound on the exact evidence (the gap is the
    # KL divergence to the posterior, under one nat here).
    for row in ("pi", "p", "q"):
        assert abs(run.summary.loc[row, "mean"] - truth.mean[row]) < 0.5 * truth.sd[row]
    assert truth.log_evidence - 1.0 < run.log_evidence < truth.log_evidence
    # z is recovered from its exact conditional given each guide draw
    for j in (0, 2):
        assert abs(run.summary.loc[f"z[{j}]", "mean"] - truth.mean["z"][j]) < 0.15


def test_enum_map_falls_back_to_adam_where_lbfgs_fails(monkeypatch):
    """Where no L-BFGS start ends at a finite loss, the MAP is Adam's (``map_steps`` steps at
    ``lr``), and the run says so; it still lies on the ridge pi p + (1 - pi) q = 0.6."""
    import zoo_inference.optim

    def broken(fn, data):
        raise RuntimeError("a line search stepped where the density fails")

    monkeypatch.setattr(zoo_inference.optim, "in_float64", broken)
    run = zoo.run("three_coin", "enum", map_steps=800, num_samples=50)
    assert run.diagnostics["params_source"].startswith("MAP (Adam, 800 steps")
    f = run.extras["params"]
    assert float(f["pi"] * f["p"] + (1 - f["pi"]) * f["q"]) == pytest.approx(0.6, abs=5e-3)
