"""Conjugate models of CATALOG §1 (gamma_poisson, normal_normal, normal_gamma, dirichlet_bigram):
each oracle recomputed independently (quadrature, textbook formulas coded here, scipy), the closed
forms checked by quadrature or a second algebraic route, then the engines against them."""

from collections import Counter

import numpy as np
import pytest
import torch
from scipy import integrate, optimize, stats
from scipy.special import gammaln

import zoo
from tests.seeding import shifted
from zoo.models.conjugate import (
    CORPUS,
    bigrams,
    tokenize,
    vocabulary,
)
from zoo_inference.algorithms.conjugate import tau_conditional
from zoo_inference.algorithms.markov import (
    bigram_counts,
    bigram_mle,
    cross_entropy,
    perplexity,
    stationary_distribution,
)

GP = zoo.get_model("gamma_poisson")
NN = zoo.get_model("normal_normal")
NG = zoo.get_model("normal_gamma")
DB = zoo.get_model("dirichlet_bigram")


def within_mcse(run, truth, z=4.0):
    """Every summary row of the truth within z Monte-Carlo standard errors sd / sqrt(ess_bulk)."""
    for row, (mean, sd) in truth.rows().items():
        r = run.summary.loc[row]
        assert abs(r["mean"] - mean) < z * sd / np.sqrt(r["ess_bulk"]), (row, r["mean"], mean)


# ============================================================================ gamma_poisson


def gp_unnormalised(lam):
    """Gamma(2, 1) prior density times the Poisson likelihood of [3, 1, 4, 1, 5]."""
    counts = np.array([3, 1, 4, 1, 5])
    return stats.gamma.pdf(lam, a=2, scale=1.0) * np.prod(stats.poisson.pmf(counts, lam))


def test_gamma_poisson_oracle_by_quadrature():
    """Derived: Gamma(2, 1), counts [3, 1, 4, 1, 5] -> Gamma(16, 6): mean 2.666667, mode 2.5."""
    data = GP.load_data()
    np.testing.assert_array_equal(data["counts"].numpy(), [3, 1, 4, 1, 5])
    assert (data["a"], data["b"]) == (2.0, 1.0)
    z = integrate.quad(gp_unnormalised, 0, 60, epsabs=0, epsrel=1e-12, limit=200)[0]
    mean = integrate.quad(lambda t: t * gp_unnormalised(t), 0, 60, epsrel=1e-12)[0] / z
    second = integrate.quad(lambda t: t * t * gp_unnormalised(t), 0, 60, epsrel=1e-12)[0] / z
    mode = optimize.minimize_scalar(
        lambda t: -np.log(gp_unnormalised(t)),
        bounds=(0.5, 6),
        method="bounded",
        options={"xatol": 1e-10},
    ).x
    assert mean == pytest.approx(2.666667, abs=1e-6)
    assert mode == pytest.approx(2.5, abs=1e-4)
    # Gamma(16, 6) has mean 16/6 and variance 16/36
    assert np.sqrt(second - mean**2) == pytest.approx(np.sqrt(16) / 6, rel=1e-8)
    truth = GP.ground_truth()
    assert truth.mean["rate"] == pytest.approx(mean, rel=1e-10)
    assert truth.sd["rate"] == pytest.approx(np.sqrt(second - mean**2), rel=1e-8)
    assert truth.log_evidence == pytest.approx(np.log(z), abs=1e-9)
    assert truth.density["rate"](np.array([2.0]))[0] == pytest.approx(
        gp_unnormalised(2.0) / z, rel=1e-8
    )
    assert "Gamma(16, 6)" in truth.source


def test_gamma_poisson_evidence_is_the_negative_binomial_chain():
    """log p(y) = sum_i log p(y_i | y_<i), each a negative binomial NB(a + S_<i, (b + i)/(b + i +
    1)) (scipy's nbinom), on the default data and on synthetic data."""
    for data in (GP.load_data(), GP.simulate(shifted(3))[0]):
        y, a, b = data["counts"].numpy().astype(int), data["a"], data["b"]
        total = sum(
            stats.nbinom.logpmf(yi, a + y[:i].sum(), (b + i) / (b + i + 1))
            for i, yi in enumerate(y)
        )
        assert GP.ground_truth(data).log_evidence == pytest.approx(total, abs=1e-9)


def test_gamma_poisson_sequential_update():
    """Posterior after counts[:2] used as the prior for counts[2:] is the full posterior."""
    data = GP.load_data()
    first = dict(data, counts=data["counts"][:2])
    d1, _ = GP.posterior_fn(**first)
    second = dict(
        data, counts=data["counts"][2:], a=float(d1["rate"].concentration), b=float(d1["rate"].rate)
    )
    d2, _ = GP.posterior_fn(**second)
    d, _ = GP.posterior_fn(**data)
    assert float(d2["rate"].concentration) == float(d["rate"].concentration) == 16
    assert float(d2["rate"].rate) == float(d["rate"].rate) == 6


def is_evidence_tolerance(kl: float, n: int) -> float:
    """4 standard errors of an importance-sampling log evidence from ``n`` draws of a proposal
    within ``kl`` nats of the posterior: its log weights have variance about 2 KL, so the
    relative variance of the estimate is (e^(2 KL) - 1) / n."""
    return 4 * float(np.sqrt(np.expm1(2 * kl) / n))


def test_gamma_poisson_svi_conjugate_guide_is_exact():
    """The conjugate family holds the posterior, so the KL optimum is exact. The last iterate of
    a stochastic-gradient fit still jitters around it: across 21 seeds and settings (1000-3000
    steps, 1 or 10 particles) its mean sat about 0.1 posterior sd from the truth (0.34 at worst),
    its sd within 9%, its KL (the ELBO's gap) under 0.06 nats; the moments are held to that
    scale, not to one seed's luck. What the family guarantees tightly is a near-perfect
    importance proposal: the evidence estimated with the guide is right within its own error."""
    run = zoo.run(
        "gamma_poisson", "svi", seed=0, num_steps=1000, lr=0.1, num_samples=4000, jit=True
    )
    truth = GP.ground_truth()
    sd = truth.sd["rate"]
    row = run.summary.loc["rate"]
    assert row["mean"] == pytest.approx(2.666667, abs=0.5 * sd)
    assert row["sd"] == pytest.approx(sd, rel=0.15)
    # the ELBO is a bound (above it only by its estimate's noise, tiny when q ~ p), and tight
    assert truth.log_evidence - 0.1 < run.log_evidence < truth.log_evidence + 0.005
    tol = is_evidence_tolerance(0.1, 4000)
    assert run.diagnostics["is_log_evidence"] == pytest.approx(truth.log_evidence, abs=tol)


def test_gamma_poisson_nuts():
    run = zoo.run("gamma_poisson", "nuts", seed=1, num_samples=300, warmup=200, num_chains=1)
    within_mcse(run, GP.ground_truth())
    assert run.summary.loc["rate", "sd"] == pytest.approx(2 / 3, rel=0.2)


@pytest.mark.slow
def test_gamma_poisson_full_rank_svi_sd():
    """Gamma(16, 6) is near log-normal: the (1-D) full-rank guide's sd within 5%."""
    run = zoo.run("gamma_poisson", "svi", guide="mvn", seed=0, num_steps=3000, num_samples=20000)
    assert run.summary.loc["rate", "sd"] == pytest.approx(2 / 3, rel=0.05)


def test_gamma_poisson_synthetic_recovers_the_rate():
    data, true = GP.simulate(shifted(0))
    assert data["counts"].shape == (50,) and float(true["rate"]) == 3.0
    run = zoo.run("gamma_poisson", "exact", data=data, num_samples=10)
    mean, sd = run.summary.loc["rate", "mean"], run.summary.loc["rate", "sd"]
    assert abs(mean - 3.0) < 4 * sd
    assert mean == pytest.approx((2 + float(data["counts"].sum())) / 51, rel=1e-6)


# ============================================================================ normal_normal


def test_normal_normal_oracle():
    """Derived: mu ~ N(0, 1), sigma = 1, n = 4, xbar = 2 -> precision 5: N(1.6, 0.2)."""
    data = NN.load_data()
    x = data["x"].double().numpy()
    assert x.size == 4 and x.mean() == pytest.approx(2.0)
    assert (data["mu0"], data["tau0"], data["sigma"]) == (0.0, 1.0, 1.0)

    def unnormalised(mu):
        return stats.norm.pdf(mu, 0, 1) * np.prod(stats.norm.pdf(x, mu, 1))

    z = integrate.quad(unnormalised, -15, 15, epsabs=0, epsrel=1e-12)[0]
    mean = integrate.quad(lambda m: m * unnormalised(m), -15, 15, epsrel=1e-12)[0] / z
    var = integrate.quad(lambda m: (m - mean) ** 2 * unnormalised(m), -15, 15, epsrel=1e-12)[0] / z
    assert mean == pytest.approx(1.6, abs=1e-9)
    assert var == pytest.approx(0.2, abs=1e-9)
    truth = NN.ground_truth()
    assert truth.mean["mu"] == pytest.approx(1.6, abs=1e-12)
    assert truth.sd["mu"] ** 2 == pytest.approx(0.2, abs=1e-12)
    # evidence: quadrature over mu, and scipy's multivariate normal marginal of x
    assert truth.log_evidence == pytest.approx(np.log(z), abs=1e-9)
    peer = stats.multivariate_normal(np.zeros(4), np.eye(4) + np.ones((4, 4))).logpdf(x)
    assert truth.log_evidence == pytest.approx(peer, abs=1e-10)
    assert truth.density["mu"](np.array([1.0]))[0] == pytest.approx(unnormalised(1.0) / z, rel=1e-9)


def test_normal_normal_sequential_update():
    data = NN.load_data()
    d1, _ = NN.posterior_fn(**dict(data, x=data["x"][:1]))
    d2, _ = NN.posterior_fn(
        **dict(data, x=data["x"][1:], mu0=float(d1["mu"].loc), tau0=float(d1["mu"].scale))
    )
    assert float(d2["mu"].loc) == pytest.approx(1.6, abs=1e-6)
    assert float(d2["mu"].scale) ** 2 == pytest.approx(0.2, abs=1e-6)


def test_normal_normal_svi_full_rank_and_own_guide():
    truth = NN.ground_truth()
    sd = truth.sd["mu"]
    for guide in ("mvn", "model"):
        run = zoo.run(
            "normal_normal",
            "svi",
            guide=guide,
            seed=0,
            num_steps=500,
            lr=0.05,
            num_samples=8000,
            jit=guide == "model",  # Pyro's JIT; the mvn guide runs on the batched density
        )
        row = run.summary.loc["mu"]
        # Gaussian posterior: a full-rank Gaussian guide is exact up to the jitter of the fit's
        # last iterate: over 20 seeds its mean was up to 0.14 sd off, its sd 7% low to 10.5%
        # high (seed 16; the old bound was 5%), its ELBO within 0.011 nats: bounds about twice
        assert row["mean"] == pytest.approx(1.6, abs=0.3 * sd), guide
        assert row["sd"] == pytest.approx(sd, rel=0.2), guide
        assert truth.log_evidence - 0.03 < run.log_evidence < truth.log_evidence + 0.005


def test_normal_normal_nuts():
    run = zoo.run("normal_normal", "nuts", seed=1, num_samples=300, warmup=200, num_chains=1)
    within_mcse(run, NN.ground_truth())


def test_normal_normal_synthetic():
    data, true = NN.simulate(shifted(0))
    run = zoo.run("normal_normal", "exact", data=data, num_samples=10)
    prec = 1 + 20
    assert run.summary.loc["mu", "mean"] == pytest.approx(float(data["x"].sum()) / prec, rel=1e-6)
    assert abs(run.summary.loc["mu", "mean"] - float(true["mu"])) < 4 / np.sqrt(prec)


# ============================================================================= normal_gamma

X_NG = NG.load_data()["x"].double().numpy()
MU0, KAPPA0, A0, B0 = 0.0, 1.0, 2.0, 1.0
N_NG = X_NG.size


def ng_textbook():
    """(mu_N, kappa_N, a_N, b_N): the textbook Normal–Gamma update (seed 001 eq 80), coded here
    independently of the module."""
    xbar = X_NG.mean()
    kappa_n = KAPPA0 + N_NG
    mu_n = (KAPPA0 * MU0 + N_NG * xbar) / kappa_n
    a_n = A0 + N_NG / 2
    b_n = B0 + 0.5 * ((X_NG - xbar) ** 2).sum() + KAPPA0 * N_NG * (xbar - MU0) ** 2 / (2 * kappa_n)
    return mu_n, kappa_n, a_n, b_n


def ng_log_joint(mu, tau):
    """log p(x, mu, tau) = log Gamma(tau | a0, b0) + log N(mu | mu0, 1/(kappa0 tau))
    + sum_i log N(x_i | mu, 1/tau), written out (broadcasts over arrays of mu and tau)."""
    mu, tau = np.asarray(mu, dtype=float), np.asarray(tau, dtype=float)
    sq = ((X_NG[:, None] - np.atleast_1d(mu).ravel()) ** 2).sum(0).reshape(np.shape(mu))
    log_prior_tau = A0 * np.log(B0) - gammaln(A0) + (A0 - 1) * np.log(tau) - B0 * tau
    log_prior_mu = 0.5 * np.log(KAPPA0 * tau / (2 * np.pi)) - 0.5 * KAPPA0 * tau * (mu - MU0) ** 2
    log_lik = 0.5 * N_NG * np.log(tau / (2 * np.pi)) - 0.5 * tau * sq
    return log_prior_tau + log_prior_mu + log_lik


def ng_grid():
    """Gauss–Legendre product rule over mu in [-1.5, 3.5], tau in (0, 20]: the posterior mass
    outside is about 1e-10 (mu: Student-t, 17+ scales from 0.88; tau ~ Gamma(8, 2.02))."""
    xm, wm = np.polynomial.legendre.leggauss(400)
    xt, wt = np.polynomial.legendre.leggauss(400)
    mu, w_mu = 1.0 + 2.5 * xm, 2.5 * wm
    tau, w_tau = 10.0 + 10.0 * xt, 10.0 * wt
    M, T = np.meshgrid(mu, tau, indexing="ij")
    log_w = ng_log_joint(M, T) + np.log(np.outer(w_mu, w_tau))
    return M, T, log_w


def test_normal_gamma_data_and_textbook_parameters():
    assert N_NG == 12 and X_NG.mean() == pytest.approx(0.9491666667)
    mu_n, kappa_n, a_n, b_n = ng_textbook()
    assert (kappa_n, a_n) == (13.0, 8.0)
    truth = NG.ground_truth()
    assert truth.mean["mu"] == pytest.approx(mu_n, rel=1e-12)
    assert truth.mean["tau"] == pytest.approx(a_n / b_n, rel=1e-12)
    # Student-t(2 a_N) marginal: variance scale^2 nu / (nu - 2) = b_N / (kappa_N (a_N - 1))
    assert truth.sd["mu"] == pytest.approx(np.sqrt(b_n / (kappa_n * (a_n - 1))), rel=1e-12)
    assert truth.sd["tau"] == pytest.approx(np.sqrt(a_n) / b_n, rel=1e-12)


def test_normal_gamma_exact_marginals_by_2d_quadrature():
    M, T, log_w = ng_grid()
    log_z = np.logaddexp.reduce(log_w.ravel())
    w = np.exp(log_w - log_z)
    truth = NG.ground_truth()
    assert truth.log_evidence == pytest.approx(log_z, abs=1e-8)
    for name, v in (("mu", M), ("tau", T)):
        mean = (w * v).sum()
        sd = np.sqrt((w * (v - mean) ** 2).sum())
        assert truth.mean[name] == pytest.approx(mean, rel=1e-8), name
        assert truth.sd[name] == pytest.approx(sd, rel=1e-7), name
    # marginal densities: integrate the joint over the other coordinate at a few points
    xt, wt = np.polynomial.legendre.leggauss(400)
    tau, w_tau = 10.0 + 10.0 * xt, 10.0 * wt
    for m in (0.6, 0.88, 1.2):
        dens = (np.exp(ng_log_joint(np.full_like(tau, m), tau) - log_z) * w_tau).sum()
        assert truth.density["mu"](np.array([m]))[0] == pytest.approx(dens, rel=1e-5)
    xm, wm = np.polynomial.legendre.leggauss(400)
    mu, w_mu = 1.0 + 2.5 * xm, 2.5 * wm
    for t in (2.0, 4.0, 7.0):
        dens = (np.exp(ng_log_joint(mu, np.full_like(mu, t)) - log_z) * w_mu).sum()
        assert truth.density["tau"](np.array([t]))[0] == pytest.approx(dens, rel=1e-5)


def test_normal_gamma_tau_conditional_includes_the_prior_of_mu():
    """p(tau | mu, x) by 1-D quadrature of the joint is Gamma(a0 + (n+1)/2, ...), the corrected
    eq 88; the document's shape a0 + n/2 is not."""
    for mu in (0.3, 0.9, 1.4):
        shape, rate = tau_conditional(X_NG, mu, MU0, KAPPA0, A0, B0)
        assert shape == A0 + (N_NG + 1) / 2

        def joint(t, mu=mu):
            return np.exp(ng_log_joint(mu, t))

        z = integrate.quad(joint, 0, 60, epsrel=1e-12)[0]
        for t in (1.0, 3.0, 6.0):
            exact = joint(t) / z
            assert stats.gamma.pdf(t, shape, scale=1 / rate) == pytest.approx(exact, rel=1e-8)
            typo = stats.gamma.pdf(t, A0 + N_NG / 2, scale=1 / rate)
            assert abs(typo - exact) > 1e-3 * exact


def elbo_by_quadrature(m, v, a, b):
    """E_q[log p(x, mu, tau) - log q(mu) - log q(tau)] by Gauss–Legendre product quadrature on
    a box holding all of q's mass (mu within 12 sds, tau in (0, 30])."""
    xm, wm = np.polynomial.legendre.leggauss(200)
    xt, wt = np.polynomial.legendre.leggauss(200)
    s = np.sqrt(v)
    mu, w_mu = m + 12 * s * xm, 12 * s * wm
    tau, w_tau = 15.0 + 15.0 * xt, 15.0 * wt
    qm = stats.norm.pdf(mu, m, s)
    qt = stats.gamma.pdf(tau, a, scale=1 / b)
    M, T = np.meshgrid(mu, tau, indexing="ij")
    log_q = stats.norm.logpdf(M, m, s) + stats.gamma.logpdf(T, a, scale=1 / b)
    integrand = ng_log_joint(M, T) - log_q
    return float((np.outer(qm * w_mu, qt * w_tau) * integrand).sum())


def test_normal_gamma_cavi_fixed_point():
    """The mean-field fixed point derived by hand: E_q[mu] = mu_N, and with E[tau] = a/b,
    a = a0 + (n+1)/2 and b = b_N + kappa_N Var_q(mu) / 2, Var_q(mu) = 1/(kappa_N E[tau]) gives
    (a - 1/2)/E[tau] = b_N: E_q[tau] = a_N / b_N (the exact mean), Var_q(mu) = b_N/(kappa_N a_N),
    b = b_N (1 + 1/(2 a_N))."""
    mu_n, kappa_n, a_n, b_n = ng_textbook()
    run = zoo.run("normal_gamma", "cavi")
    m, v = run.extras["q_mu"]
    a, b = run.extras["q_tau"]
    assert a == A0 + (N_NG + 1) / 2 == 8.5  # not the document's a0 + n/2 = 8
    assert m == pytest.approx(mu_n, rel=1e-12)
    assert v == pytest.approx(b_n / (kappa_n * a_n), rel=1e-9)
    assert b == pytest.approx(b_n * (1 + 1 / (2 * a_n)), rel=1e-9)
    assert a / b == pytest.approx(a_n / b_n, rel=1e-9)
    # the ELBO: monotone over sweeps, equal to its quadrature value, below the exact evidence
    elbo = np.array(run.traces["elbo"])
    assert np.all(np.diff(elbo) >= -1e-12) and len(elbo) < 30
    assert run.evidence.kind == "lower_bound"
    assert run.log_evidence == pytest.approx(elbo_by_quadrature(m, v, a, b), abs=1e-7)
    gap = NG.ground_truth().log_evidence - run.log_evidence  # KL(q || posterior)
    assert 0.01 < gap < 0.1
    # the fixed point is the ELBO's maximum over the family: nudging any parameter lowers it
    for dm, dv, da, db in ((0.01, 0, 0, 0), (0, 0.1 * v, 0, 0), (0, 0, 0.3, 0), (0, 0, 0, 0.05)):
        for sgn in (1, -1):
            assert elbo_by_quadrature(m + sgn * dm, v + sgn * dv, a + sgn * da, b + sgn * db) < (
                run.log_evidence
            )
    # with the document's shape a0 + n/2 the ELBO is lower
    b_typo = b_n + 0.5 * kappa_n * v
    assert elbo_by_quadrature(m, v, A0 + N_NG / 2, b_typo) < run.log_evidence - 1e-3


def test_normal_gamma_mean_field_underestimates_the_spread_of_mu():
    """Mean-field: Var_q(mu) = b_N/(kappa_N a_N) against the exact Student-t variance
    b_N/(kappa_N (a_N - 1)): sd ratio sqrt((a_N - 1)/a_N) = sqrt(7/8) = 0.9354, 6.5% too small
    here; tau's sd is sqrt(a_N / (a_N + 1/2)) = 0.9701 of the exact, with the same mean."""
    truth = NG.ground_truth()
    run = zoo.run("normal_gamma", "cavi")
    sd_mu = run.summary.loc["mu", "sd"]
    assert sd_mu / truth.sd["mu"] == pytest.approx(np.sqrt(7 / 8), rel=1e-8)
    assert 1 - sd_mu / truth.sd["mu"] == pytest.approx(0.0646, abs=1e-4)
    ratio_tau = run.summary.loc["tau", "sd"] / truth.sd["tau"]
    assert ratio_tau == pytest.approx(np.sqrt(8 / 8.5), rel=1e-8)
    assert run.summary.loc["mu", "mean"] == pytest.approx(truth.mean["mu"], rel=1e-9)
    assert run.summary.loc["tau", "mean"] == pytest.approx(truth.mean["tau"], rel=1e-8)


def test_normal_gamma_gibbs():
    run = zoo.run("normal_gamma", "gibbs", seed=0, num_samples=4000, warmup=200, num_chains=4)
    truth = NG.ground_truth()
    within_mcse(run, truth)
    assert run.idata.posterior["mu"].shape == (4, 4000)
    assert run.summary["r_hat"].max() < 1.01
    # Gibbs samples the joint: it keeps the full spread of mu that mean-field VI loses
    for name in ("mu", "tau"):
        assert run.summary.loc[name, "sd"] == pytest.approx(truth.sd[name], rel=0.03), name
    # and the joint: Var(mu | tau) = 1/(kappa_N tau), so z = (mu - mu_N) sqrt(kappa_N tau) is
    # N(0, 1); independent draws from the two marginals would give sd(z) = sqrt(8/7) = 1.069
    mu = run.idata.posterior["mu"].values.ravel()
    tau = run.idata.posterior["tau"].values.ravel()
    mu_n, kappa_n, _, _ = ng_textbook()
    z = (mu - mu_n) * np.sqrt(kappa_n * tau)
    assert z.std() == pytest.approx(1.0, abs=0.03)


def test_normal_gamma_nuts():
    run = zoo.run("normal_gamma", "nuts", seed=2, num_samples=300, warmup=200, num_chains=1)
    within_mcse(run, NG.ground_truth())
    assert run.diagnostics["divergences"] == 0


def test_normal_gamma_exact_engine_and_synthetic():
    run = zoo.run("normal_gamma", "exact", seed=0, num_samples=20000)
    truth = NG.ground_truth()
    assert run.log_evidence == pytest.approx(truth.log_evidence, abs=1e-10)
    draws = run.idata.posterior["mu"].values.ravel()
    assert abs(draws.mean() - truth.mean["mu"]) < 4 * truth.sd["mu"] / np.sqrt(draws.size)
    data, true = NG.simulate(shifted(0))
    t = NG.ground_truth(data)
    for name in ("mu", "tau"):
        assert abs(t.mean[name] - float(true[name])) < 4 * t.sd[name], name


@pytest.mark.slow
def test_normal_gamma_svi_mean_field_guide_reaches_the_cavi_fixed_point():
    """SVI with the seed's mean-field guide (Normal x Gamma) converges to CAVI's answer, with the
    same under-estimate of sd(mu) (6.5% below the exact sd)."""
    truth = NG.ground_truth()
    cavi = zoo.run("normal_gamma", "cavi")
    run = zoo.run(
        "normal_gamma",
        "svi",
        seed=0,
        num_steps=1500,
        lr=0.02,
        num_particles=8,
        jit=True,
        num_samples=40000,
    )
    sd = run.summary.loc["mu", "sd"]
    assert sd == pytest.approx(cavi.summary.loc["mu", "sd"], rel=0.04)
    assert sd < 0.975 * truth.sd["mu"]
    assert run.summary.loc["mu", "mean"] == pytest.approx(truth.mean["mu"], abs=0.1 * sd)
    assert run.log_evidence == pytest.approx(cavi.log_evidence, abs=0.01)


@pytest.mark.slow
def test_normal_gamma_full_rank_guide_cannot_fix_the_mean_field_bias():
    """Under the exact posterior mu and tau are uncorrelated (E[mu - mu_N | tau] = 0) but not
    independent: Var(mu | tau) = 1/(kappa_N tau). A full-rank Gaussian on (mu, log tau) can only
    represent linear correlation, so its optimum is mean-field too: correlation ~0 and sd(mu) as
    far below the exact sd as CAVI's (6.5%), with a lower ELBO (log-normal, not Gamma, for tau)."""
    truth = NG.ground_truth()
    cavi = zoo.run("normal_gamma", "cavi")
    run = zoo.run(
        "normal_gamma",
        "svi",
        guide="mvn",
        seed=0,
        num_steps=1500,
        lr=0.02,
        num_particles=8,
        jit=True,
        num_samples=40000,
    )
    post = run.idata.posterior
    corr = np.corrcoef(post["mu"].values.ravel(), np.log(post["tau"].values.ravel()))[0, 1]
    assert abs(corr) < 0.05
    sd = run.summary.loc["mu", "sd"]
    assert sd == pytest.approx(cavi.summary.loc["mu", "sd"], rel=0.05)
    assert sd < 0.975 * truth.sd["mu"]
    assert run.log_evidence < cavi.log_evidence


# ========================================================================= dirichlet_bigram

DOC_ORDER = ["the", "cat", "dog", "sat", "on", "mat"]
DOC_COUNTS = np.array(  # 002 §24.2, rows = previous word
    [
        [0, 1, 1, 0, 0, 2],
        [0, 0, 0, 1, 0, 0],
        [0, 0, 0, 1, 0, 0],
        [0, 0, 0, 0, 2, 0],
        [2, 0, 0, 0, 0, 0],
        [0, 0, 0, 0, 0, 0],
    ]
)


def counter_bigrams():
    """Bigram counts by plain string handling (independent of the module's tokeniser)."""
    pairs = Counter()
    for sentence in CORPUS.lower().split("."):
        words = sentence.split()
        pairs.update(zip(words, words[1:], strict=False))
    return pairs


def test_bigram_counts_are_the_documents_matrix():
    sentences = tokenize(CORPUS)
    assert sentences == [
        ["the", "cat", "sat", "on", "the", "mat"],
        ["the", "dog", "sat", "on", "the", "mat"],
    ]
    vocab = vocabulary(sentences)
    assert sorted(vocab) == sorted(DOC_ORDER)
    prev, word = bigrams(sentences, vocab)
    assert prev.dtype == word.dtype == torch.long and prev.numel() == 10
    counts = bigram_counts(prev, word, len(vocab)).numpy()
    order = [vocab.index(w) for w in DOC_ORDER]
    np.testing.assert_array_equal(counts[np.ix_(order, order)], DOC_COUNTS)
    pairs = counter_bigrams()
    for (a, b), c in pairs.items():
        assert counts[vocab.index(a), vocab.index(b)] == c
    data = DB.load_data()
    assert data["num_words"] == 6
    np.testing.assert_array_equal(data["prev"], prev)
    np.testing.assert_array_equal(data["word"], word)


def test_bigram_mle_oracle():
    """Doc: P(mat|the) = 0.5, P(cat|the) = P(dog|the) = 0.25 (recomputed from the counter);
    P(sat|cat) = P(sat|dog) = P(on|sat) = P(the|on) = 1; 'mat' has no successor: no MLE."""
    pairs = counter_bigrams()
    from_the = {b: c for (a, b), c in pairs.items() if a == "the"}
    total = sum(from_the.values())
    assert from_the["mat"] / total == 0.5
    assert from_the["cat"] / total == from_the["dog"] / total == 0.25
    vocab = vocabulary(tokenize(CORPUS))
    i = {w: k for k, w in enumerate(vocab)}
    mle = bigram_mle(bigram_counts(*bigrams(tokenize(CORPUS), vocab), len(vocab)))
    assert float(mle[i["the"], i["mat"]]) == 0.5
    assert float(mle[i["the"], i["cat"]]) == float(mle[i["the"], i["dog"]]) == 0.25
    for a, b in (("cat", "sat"), ("dog", "sat"), ("sat", "on"), ("on", "the")):
        assert float(mle[i[a], i[b]]) == 1.0
    assert torch.isnan(mle[i["mat"]]).all()


def test_perplexity_is_exp_cross_entropy():
    """Derived (002 §2.18): 'the cat sat on the mat' under the MLE bigram: 5 transitions with
    product 1/4 * 1 * 1 * 1 * 1/2 = 1/8, so PPL = 8^(1/5) = 1.5157166 = exp(cross-entropy)."""
    vocab = vocabulary(tokenize(CORPUS))
    mle = bigram_mle(bigram_counts(*bigrams(tokenize(CORPUS), vocab), len(vocab)))
    prev, word = bigrams(tokenize("the cat sat on the mat"), vocab)
    product = np.prod([0.25, 1, 1, 1, 0.5])
    assert product == 1 / 8
    ppl = perplexity(mle, prev, word)
    assert ppl == pytest.approx(product ** (-1 / 5), rel=1e-6)
    assert ppl == pytest.approx(1.5157166, abs=1e-7)
    assert ppl == pytest.approx(np.exp(cross_entropy(mle, prev, word)), rel=1e-12)
    assert cross_entropy(mle, prev, word) == pytest.approx(np.log(8) / 5, rel=1e-6)
    # a uniform model over V words has perplexity V
    uniform = torch.full((6, 6), 1 / 6)
    assert perplexity(uniform, prev, word) == pytest.approx(6.0, rel=1e-6)


def test_stationary_distribution_of_the_weather_chain():
    """Derived (002 §15.2): P = [[1-p, p], [q, 1-q]], p = 0.3, q = 0.1 -> (q, p)/(p+q) =
    (0.25, 0.75), recomputed as the limit of P^n."""
    p, q = 0.3, 0.1
    P = np.array([[1 - p, p], [q, 1 - q]])
    limit = np.linalg.matrix_power(P, 200)
    np.testing.assert_allclose(limit[0], [q / (p + q), p / (p + q)], atol=1e-12)
    np.testing.assert_allclose(limit[0], [0.25, 0.75], atol=1e-12)
    pi = stationary_distribution(torch.tensor(P)).numpy()
    np.testing.assert_allclose(pi, limit[1], atol=1e-12)
    np.testing.assert_allclose(pi @ P, pi, atol=1e-12)


def polya_urn_log_evidence(prev, word, v, alpha):
    """log p(words | previous words) by the chain rule: each bigram's predictive under the
    posterior so far is (alpha + c_ij) / (V alpha + n_i) (the Pólya urn)."""
    counts = np.zeros((v, v))
    total = 0.0
    for i, j in zip(prev.tolist(), word.tolist(), strict=True):
        total += np.log((alpha + counts[i, j]) / (v * alpha + counts[i].sum()))
        counts[i, j] += 1
    return total


def test_dirichlet_bigram_closed_form():
    data = DB.load_data()
    truth = DB.ground_truth()
    counts = np.zeros((6, 6))
    np.add.at(counts, (data["prev"].numpy(), data["word"].numpy()), 1)
    # row i ~ Dirichlet(1 + C[i]): mean (1 + C_ij)/(6 + n_i), var m(1 - m)/(6 + n_i + 1)
    n_i = counts.sum(1, keepdims=True)
    mean = (1 + counts) / (6 + n_i)
    np.testing.assert_allclose(truth.mean["transition"], mean, rtol=1e-12)
    sd = np.sqrt(mean * (1 - mean) / (7 + n_i))
    np.testing.assert_allclose(truth.sd["transition"], sd, rtol=1e-10)
    vocab = vocabulary(tokenize(CORPUS))
    # 'the' was followed 4 times: P(mat | the) has posterior mean (1 + 2)/(6 + 4) = 0.3
    assert truth.mean["transition"][vocab.index("the"), vocab.index("mat")] == pytest.approx(0.3)
    # 'mat' was never followed: its row is the prior, uniform mean 1/6
    np.testing.assert_allclose(truth.mean["transition"][vocab.index("mat")], 1 / 6)
    assert truth.log_evidence == pytest.approx(
        polya_urn_log_evidence(data["prev"], data["word"], 6, 1.0), abs=1e-10
    )
    # marginal density of one element: Beta(1 + C_ij, 6 + n_i - 1 - C_ij)
    i, j = vocab.index("the"), vocab.index("mat")
    dens = truth.density["transition"](np.array([0.4]))[0, i, j]
    assert dens == pytest.approx(stats.beta.pdf(0.4, 3, 7), rel=1e-5)
    # the exact engine: batch of V Dirichlets, site shape (V, V), rows summing to one
    run = zoo.run("dirichlet_bigram", "exact", num_samples=500)
    draws = run.idata.posterior["transition"].values
    assert draws.shape == (1, 500, 6, 6)
    np.testing.assert_allclose(draws.sum(-1), 1.0, atol=1e-5)
    assert run.log_evidence == pytest.approx(truth.log_evidence, abs=1e-10)


def test_dirichlet_bigram_evidence_on_synthetic_data():
    data, true = DB.simulate(shifted(0))
    assert data["prev"].dtype == torch.long and data["prev"].numel() == 300
    truth = DB.ground_truth(data)
    assert truth.log_evidence == pytest.approx(
        polya_urn_log_evidence(data["prev"], data["word"], 6, 1.0), abs=1e-8
    )
    # 300 transitions recover the true matrix within 4 posterior sds everywhere
    err = np.abs(truth.mean["transition"] - true["transition"].numpy()) / truth.sd["transition"]
    assert err.max() < 4


def test_dirichlet_bigram_svi_conjugate_guide():
    run = zoo.run(
        "dirichlet_bigram", "svi", seed=0, num_steps=1000, lr=0.05, num_samples=4000, jit=True
    )
    truth = DB.ground_truth()
    est, sd = (
        np.array(
            [[run.summary.loc[f"transition[{i}, {j}]", k] for j in range(6)] for i in range(6)]
        )
        for k in ("mean", "sd")
    )
    # The optimum is exact; the fit's last iterate jitters around it. Across 10 seeds the worst
    # of the 36 means sat 0.11-0.18 of its own posterior sd from the truth, the worst sd 4-9% off,
    # the ELBO 0.04-0.10 nats below log p(y) (its KL, summed over 30 free parameters): the bounds
    # are twice those, and the importance-sampling evidence is held to its own error.
    t_mean, t_sd = truth.mean["transition"], truth.sd["transition"]
    assert (np.abs(est - t_mean) / t_sd).max() < 0.35
    assert np.abs(sd / t_sd - 1).max() < 0.2
    assert truth.log_evidence - 0.2 < run.log_evidence < truth.log_evidence + 0.01
    tol = is_evidence_tolerance(0.2, 4000)
    assert run.diagnostics["is_log_evidence"] == pytest.approx(truth.log_evidence, abs=tol)


@pytest.mark.slow
def test_dirichlet_bigram_nuts():
    run = zoo.run("dirichlet_bigram", "nuts", seed=0, num_samples=300, warmup=300, num_chains=1)
    within_mcse(run, DB.ground_truth())
