"""nutpie's low-rank-plus-diagonal metric (``metric="low_rank"``) for ``nuts`` and ``chees``:
the estimate recovers a Gaussian's covariance from its draws and their gradients, the samplers
adapted with it keep their target, and the engines take it (and refuse what contradicts it)."""

from __future__ import annotations

import arviz as az
import numpy as np
import pytest
import torch

import zoo
from tests.inference.samplers.test_metric import _correlated_gaussian
from tests.sampling import NUTS_TEST_DEPTH
from tests.seeding import shifted
from zoo.calibrate import sbc
from zoo_inference import samplers
from zoo_inference.samplers import metric

F64 = torch.float64


def _spiked_covariance(D: int, gen: torch.Generator) -> torch.Tensor:
    """A covariance with scales spread over two orders of magnitude, two directions 100 and 30
    times wider and one 100 times narrower than the rest, in random directions."""
    q, _ = torch.linalg.qr(torch.randn(D, D, generator=gen, dtype=F64))
    spectrum = torch.ones(D, dtype=F64)
    spectrum[:3] = torch.tensor([100.0, 30.0, 0.01])
    scale = torch.logspace(-1, 1, D, dtype=F64)
    return scale[:, None] * (q * spectrum) @ q.T * scale[None, :]


def _draws_and_gradients(cov: torch.Tensor, chains: int, n: int, gen: torch.Generator):
    """Exact draws of N(0, cov), (chains, n, D), and their log density's gradients."""
    x = torch.randn(chains, n, len(cov), generator=gen, dtype=F64) @ torch.linalg.cholesky(cov).T
    return x, -x @ torch.linalg.inv(cov)


def test_spd_mean_is_the_geometric_mean_of_a_and_b_inverse():
    """nuts-rs's own case (diagonal: sqrt(a / b)), and on random matrices the X with X b X = a."""
    got = metric.spd_mean(torch.diag(torch.tensor([1.0, 4, 8], dtype=F64)), torch.diag(
        torch.tensor([1.0, 1, 0.5], dtype=F64)))  # fmt: skip
    assert torch.allclose(got, torch.diag(torch.tensor([1.0, 2, 4], dtype=F64)))
    gen = torch.Generator().manual_seed(shifted(1))
    m = torch.randn(2, 6, 6, generator=gen, dtype=F64)
    a, b = m[0] @ m[0].T + 0.1 * torch.eye(6), m[1] @ m[1].T + 0.1 * torch.eye(6)
    x = metric.spd_mean(a, b)
    assert torch.allclose(x, x.T) and torch.allclose(x @ b @ x, a, rtol=1e-6, atol=1e-8)


def _condition(inv_mass: torch.Tensor, cov: torch.Tensor) -> float:
    """The condition number of ``cov`` under the metric ``inv_mass`` (of ``inv_mass^-1 cov``)."""
    e = torch.linalg.eigvals(torch.linalg.solve(cov, inv_mass)).real
    return float(e.max() / e.min())


def test_the_estimate_recovers_a_covariance_outside_the_cutoff():
    """From exact draws and gradients of N(0, S) (ten draws a dimension): rescaled by the
    diagonal ``sigma^2 = sqrt(var(x) / var(grad))``, the metric's eigenvalues outside the
    cutoff are those of S rescaled alike, the rest 1; so it whitens S up to the cutoff (the
    eigenvalues of ``M S^-1`` lie in [1/c, c]) where the diagonal alone leaves a spread of
    thousands. With exact gradients the draws' scatter and the gradients' inverse scatter
    are estimates of S from the same draws whose geometric mean is S itself: the error is
    the regularisation's and the rounding's, for any seed."""
    D, c = 20, metric.LOW_RANK_CUTOFF
    gen = torch.Generator().manual_seed(shifted(2))
    cov = _spiked_covariance(D, gen)
    x, g = _draws_and_gradients(cov, 3, 10 * D, gen)
    m = metric.low_rank_metric(x, g)
    assert m.shape == (3, D, D) and torch.allclose(m, m.mT)
    sigma = (x.var(1) / g.var(1)).pow(0.25)
    for b in range(3):
        rescale = sigma[b, :, None] * sigma[b, None, :]
        want = torch.linalg.eigvalsh(cov / rescale)
        got = torch.linalg.eigvalsh(m[b] / rescale)
        outside = (want > c) | (want < 1 / c)
        assert outside.sum() >= 3  # the spikes at least
        clear = (want > 1.05 * c) | (want < 1 / (1.05 * c))  # not at the cutoff's edge
        assert torch.allclose(got[clear], want[clear], rtol=1e-3)
        assert torch.allclose(got[~outside], torch.ones(int((~outside).sum()), dtype=F64))
        whitened = torch.linalg.eigvals(torch.linalg.solve(cov, m[b])).real
        assert 1 / (1.01 * c) < whitened.min() and whitened.max() < 1.01 * c, whitened
        # sigma^2 alone, the metric without its low-rank part
        assert _condition(torch.diag(sigma[b] ** 2), cov) > 1000


def test_from_fewer_draws_than_dimensions_it_still_preconditions():
    """Ten draws in 40 dimensions: the draws and gradients span a subspace only, yet the metric
    is positive definite and leaves a condition number many times below its diagonal part's
    (Stan's dense estimate is singular there)."""
    D = 40
    gen = torch.Generator().manual_seed(shifted(3))
    cov = _spiked_covariance(D, gen)
    x, g = _draws_and_gradients(cov, 4, 10, gen)
    m = metric.low_rank_metric(x, g)
    assert torch.isfinite(m).all() and (torch.linalg.eigvalsh(m) > 0).all()
    for b in range(4):
        low_rank, diagonal = _condition(m[b], cov), _condition(torch.diag(m[b].diagonal()), cov)
        assert low_rank < 0.2 * diagonal, (low_rank, diagonal)


def test_a_window_that_never_moved_falls_back_to_stan_s_variances():
    """A chain stuck at one point has no variance to rescale by: its metric is Stan's
    regularised variance (held dense), the other chains' their low-rank estimate."""
    gen = torch.Generator().manual_seed(shifted(4))
    cov = _spiked_covariance(5, gen)
    x, g = _draws_and_gradients(cov, 2, 50, gen)
    x[1], g[1] = x[1, :1], g[1, :1]  # chain 1 stuck at its first draw
    m = metric.per_chain_metric(x, "low_rank", g)
    assert torch.isfinite(m).all()
    assert torch.equal(m[1], torch.diag(metric.regularised_variance(x[1:], 1)[0]))
    assert torch.allclose(m[0], metric.low_rank_metric(x[:1], g[:1])[0])
    with pytest.raises(ValueError, match="needs the gradients"):
        metric.per_chain_metric(x, "low_rank")


@pytest.mark.parametrize(
    "sampler, chains, options",
    [(samplers.chees, 32, {}), (samplers.nuts, 8, NUTS_TEST_DEPTH)],
    ids=["chees", "nuts"],
)
def test_a_low_rank_metric_samples_a_correlated_gaussian(sampler, chains, options):
    """On a Gaussian with correlations 0.95 and sds from 0.1 to 10 the draws adapted under the
    low-rank metric have its moments: in whitened coordinates each mean within 5 Monte-Carlo
    standard errors of 0, each variance within 5 of 1 (each from its own bulk ESS)."""
    D = 10
    density, chol = _correlated_gaussian(D)
    gen = torch.Generator().manual_seed(shifted(5))
    q = torch.randn(chains, D, generator=gen, dtype=F64)
    s = sampler(density, q, num_samples=200, warmup=300, gen=gen, metric="low_rank", **options)
    assert s.info["metric"] == "low_rank" and s.info["dense_mass"] is False
    assert s.state["inv_mass"].dim() == 3  # held dense
    z = torch.linalg.solve_triangular(chol, s.theta.reshape(-1, D).T, upper=False).T
    z = z.reshape(chains, -1, D).numpy()
    for d in range(D):
        ess_mean, ess_square = az.ess(z[..., d]), az.ess(z[..., d] ** 2)
        assert abs(z[..., d].mean()) < 5 / np.sqrt(ess_mean)
        assert abs((z[..., d] ** 2).mean() - 1) < 5 * np.sqrt(2 / ess_square)


def test_the_default_metric_is_dense_mass_s():
    """``metric=None`` adapts what ``dense_mass`` says, draw for draw: the same draws as
    ``metric="diag"`` (NUTS's default) and ``metric="dense"`` (ChEES's up to 100 dimensions)."""
    density, _ = _correlated_gaussian(4)
    for sampler, kind, options in (
        (samplers.nuts, "diag", NUTS_TEST_DEPTH),
        (samplers.chees, "dense", {}),
    ):
        runs = []
        for metric_option in (None, kind):
            gen = torch.Generator().manual_seed(shifted(6))
            q = torch.randn(4, 4, generator=gen, dtype=F64)
            runs.append(sampler(density, q, num_samples=20, warmup=60, gen=gen,
                                metric=metric_option, **options))  # fmt: skip
        assert torch.equal(runs[0].theta, runs[1].theta)
        assert runs[0].info["metric"] == runs[1].info["metric"] == kind


def test_logistic_regression_agrees_with_the_default_nuts():
    """31 correlated coefficients: the posterior means under the low-rank metric agree with the
    model's default NUTS's (dense: it registers ``dense_mass=True``, which a low-rank metric,
    held as a full matrix, agrees with) within 5 combined Monte-Carlo standard errors."""
    opts = dict(seed=shifted(7), num_chains=4, warmup=100, num_samples=100, chain_groups=1)
    low = zoo.run("logistic_regression", "nuts", metric="low_rank", **opts)
    dense = zoo.run("logistic_regression", "nuts", **opts)
    assert low.diagnostics["metric"] == "low_rank" and dense.diagnostics["metric"] == "dense"
    a, b = low.summary, dense.summary
    se = np.sqrt(a["mcse_mean"] ** 2 + b["mcse_mean"] ** 2)
    assert ((a["mean"] - b["mean"]).abs() < 5 * se).all(), (a["mean"] - b["mean"]) / se
    assert low.diagnostics["divergences"] == 0


def test_a_run_to_an_ess_target_carries_the_low_rank_metric():
    """The blocks of a run to an ESS target go on under the warmup's low-rank metric: the first
    block is the fixed-size run's draws, and each block after it continues its chains."""
    opts = dict(seed=5, num_chains=4, chain_groups=1, parallel=False, warmup=150, num_samples=40)
    for engine in ("nuts", "chees"):
        fixed = zoo.run("eight_schools_noncentered", engine, metric="low_rank", **opts)
        with pytest.warns(RuntimeWarning, match="draw limit"):
            target = zoo.run(
                "eight_schools_noncentered", engine, metric="low_rank", ess=100_000,
                max_draws=80, **opts,
            )  # fmt: skip
        assert target.diagnostics["blocks"] > 1 and target.diagnostics["metric"] == "low_rank"
        a, b = fixed.idata.posterior["eta"].values, target.idata.posterior["eta"].values
        np.testing.assert_array_equal(b[:, :40], a)


def test_a_resumed_kernel_keeps_its_metric():
    density, _ = _correlated_gaussian(4)
    gen = torch.Generator().manual_seed(shifted(8))
    q = torch.randn(4, 4, generator=gen, dtype=F64)
    options = dict(gen=gen, metric="low_rank", **NUTS_TEST_DEPTH)
    first = samplers.nuts(density, q, num_samples=10, warmup=60, **options)
    more = samplers.nuts(density, first.theta[:, -1], num_samples=10, warmup=0,
                         resume=first.state, **options)  # fmt: skip
    assert torch.equal(more.state["inv_mass"], first.state["inv_mass"])
    assert not torch.equal(first.state["inv_mass"][0], torch.eye(4, dtype=F64))


@pytest.mark.parametrize(
    "engine, options, message",
    [
        ("nuts", {"metric": "lowrank"}, r"'metric' must be one of .*did you mean 'low_rank'"),
        ("chees", {"metric": 2}, r"'metric' must be one of \['diag', 'dense', 'low_rank'\]"),
        ("nuts", {"metric": "diag", "dense_mass": True}, r"dense_mass=True contradicts metric"),
        ("chees", {"metric": "dense", "dense_mass": False}, r"dense_mass=False contradicts"),
        ("chees", {"metric": "low_rank", "dense_mass": False}, r"dense_mass=False contradicts"),
        ("chees", {"metric": "diag", "dense_mass": True}, r"give metric alone, or dense_mass="),
        ("pyro_nuts", {"metric": "low_rank"}, r"unknown option 'metric' for engine 'pyro_nuts'"),
    ],
)
def test_bad_metric_options_are_refused_before_any_work(engine, options, message):
    with pytest.raises(ValueError, match=message):
        zoo.run("eight_schools_noncentered", engine, **options)
    # a model's registered dense_mass=True (logistic_regression's nuts) against a diagonal
    with pytest.raises(ValueError, match=r"a model may register dense_mass"):
        zoo.run("logistic_regression", "nuts", metric="diag")


def test_metrics_that_agree_with_dense_mass_are_taken():
    """dense_mass=True asks for a full matrix (dense or low-rank, held dense), False for a
    diagonal; None (auto) and a sampler's default leave the choice to ``metric``."""
    density, _ = _correlated_gaussian(3)
    gen = torch.Generator().manual_seed(shifted(9))
    q = torch.randn(4, 3, generator=gen, dtype=F64)
    for sampler, dense_mass, kind in (
        (samplers.nuts, True, "dense"),
        (samplers.nuts, True, "low_rank"),
        (samplers.nuts, None, "diag"),
        (samplers.nuts, False, "low_rank"),
        (samplers.chees, False, "diag"),
        (samplers.chees, True, "low_rank"),
        (samplers.chees, None, "low_rank"),
    ):
        options = NUTS_TEST_DEPTH if sampler is samplers.nuts else {}
        s = sampler(density, q, num_samples=5, warmup=20, gen=gen, dense_mass=dense_mass,
                    metric=kind, **options)  # fmt: skip
        assert s.info["metric"] == kind


@pytest.mark.slow  # 3 min: 100 replications of a 12-parameter model, each chain its own metric
def test_nuts_under_the_low_rank_metric_is_calibrated():
    """SBC on linear_regression (ten collinear predictors and the noise scale), the replications
    as chains of one batched NUTS, each adapting its own low-rank metric from a window of 75
    draws: a calibrated engine fails with probability about ``alpha`` (Bonferroni over the
    parameters; tests/zoo/test_sbc.py gives the test's power)."""
    res = sbc(
        "linear_regression", "nuts", reps=100, seed=shifted(0), workers=1, alpha=1e-3,
        num_chains=2, num_samples=100, warmup=100, metric="low_rank",
    )  # fmt: skip
    assert res.verdict == "calibrated", res.findings()
