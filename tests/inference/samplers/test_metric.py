"""The metric (zoo_inference.samplers.metric, windows): Stan's windows, dense momenta, dense
metrics on correlated targets, each chain's metric from its own window."""

from __future__ import annotations

import arviz as az
import numpy as np
import pytest
import torch

from tests.sampling import NUTS_TEST_DEPTH
from tests.seeding import shifted
from zoo_inference import samplers
from zoo_inference.samplers import integrator, metric, windows


def test_stan_windows():
    assert windows.stan_windows(1000) == [100, 150, 250, 450, 950]
    assert windows.stan_windows(10) == []
    ends = windows.stan_windows(100)
    assert ends[0] > 15 and ends[-1] == 90


def test_dense_momenta_have_the_mass_matrix_as_covariance():
    """Under a dense inverse mass matrix S the momenta are N(0, S^-1) and the kinetic energy
    is p S p / 2; the diagonal form is the same thing for a diagonal S."""
    gen = torch.Generator().manual_seed(shifted(7))
    a = torch.randn(3, 3, generator=gen, dtype=torch.float64)
    S = a @ a.T + 0.5 * torch.eye(3, dtype=torch.float64)
    q = torch.zeros(200_000, 3, dtype=torch.float64)
    p = integrator.momentum(q, S[None], gen)
    cov = p.T @ p / len(p)
    want = torch.linalg.inv(S)
    # a sample covariance's sd is at most sqrt(2 / n) times the largest variance
    assert float((cov - want).abs().max()) < 5 * np.sqrt(2 / len(p)) * float(want.diag().max())
    assert torch.allclose(integrator.kinetic(p[:5], S[None]), 0.5 * ((p[:5] @ S) * p[:5]).sum(-1))
    d = S.diag()
    assert torch.allclose(
        integrator.kinetic(p[:5], d.expand(5, 3)), integrator.kinetic(p[:5], torch.diag(d)[None])
    )


def _correlated_gaussian(D: int = 10):
    """A D-dimensional Gaussian with correlations 0.95 and sds from 0.1 to 10: its batched
    density and the Cholesky factor of its covariance."""
    sd = torch.logspace(-1, 1, D, dtype=torch.float64)
    corr = torch.full((D, D), 0.95, dtype=torch.float64).fill_diagonal_(1.0)
    cov = corr * sd[:, None] * sd[None, :]
    prec = torch.linalg.inv(cov)

    def density(q):
        return -0.5 * ((q @ prec) * q).sum(-1), -(q @ prec)

    return density, torch.linalg.cholesky(cov)


@pytest.mark.parametrize(
    "sampler, chains, options",
    [(samplers.chees, 32, {}), (samplers.nuts, 8, NUTS_TEST_DEPTH)],
    ids=["chees", "nuts"],
)
def test_a_dense_metric_samples_a_correlated_gaussian(sampler, chains, options):
    """On :func:`_correlated_gaussian` under the dense metric the draws have the target's
    moments in whitened coordinates within Monte-Carlo error."""
    D = 10
    density, chol = _correlated_gaussian(D)
    gen = torch.Generator().manual_seed(shifted(11))
    q = torch.randn(chains, D, generator=gen, dtype=torch.float64)
    s = sampler(density, q, num_samples=200, warmup=300, gen=gen, dense_mass=True, **options)
    assert s.info["dense_mass"] is True
    x = torch.linalg.solve_triangular(chol, s.theta.reshape(-1, D).T, upper=False).T
    ess = len(x) / 4  # conservative
    assert float(x.mean(0).abs().max()) < 5 / np.sqrt(ess)
    c = torch.cov(x.T)
    assert float((c - torch.eye(D, dtype=torch.float64)).abs().max()) < 5 * np.sqrt(2 / ess)


@pytest.mark.slow  # 25 s: an efficiency claim; the dense metric's correctness is tested above
def test_nuts_under_a_dense_metric_mixes_many_times_faster_on_correlated_targets():
    """The point of the dense metric: on :func:`_correlated_gaussian` (condition number about
    200 after a diagonal rescaling) NUTS's effective draws per gradient evaluation, warmup
    included, are many times those under the diagonal metric (15-37 times at seeds 0-3)."""
    density, _ = _correlated_gaussian()
    per_gradient = {}
    for dense in (False, True):
        gen = torch.Generator().manual_seed(shifted(12))
        q = torch.randn(4, 10, generator=gen, dtype=torch.float64)
        s = samplers.nuts(
            density, q, num_samples=100, warmup=300, gen=gen, dense_mass=dense, **NUTS_TEST_DEPTH
        )
        assert s.info["dense_mass"] is dense
        ess = min(float(az.ess(s.theta[..., d].numpy())) for d in range(10))
        per_gradient[dense] = ess / s.gradient_evals
    assert per_gradient[True] > 4 * per_gradient[False], per_gradient


def test_each_chain_s_metric_comes_from_its_own_window():
    """Dense: each chain's own covariance, shrunk as Stan shrinks it; a window with fewer than
    ``DENSE_DRAWS_PER_DIM`` draws a dimension gives its variances on a diagonal."""
    gen = torch.Generator().manual_seed(shifted(13))
    x = (
        torch.randn(3, 40, 4, generator=gen, dtype=torch.float64)
        * torch.tensor([1.0, 2, 3])[:, None, None]
    )
    m = metric.per_chain_metric(x, "dense")
    n = x.shape[1]
    for b in range(3):
        want = n / (n + 5) * torch.cov(x[b].T) + 1e-3 * 5 / (n + 5) * torch.eye(4)
        assert torch.allclose(m[b], want.to(m.dtype))
    short = x[:, : metric.DENSE_DRAWS_PER_DIM * 4 - 1]
    got = metric.per_chain_metric(short, "dense")
    assert torch.equal(got, torch.diag_embed(metric.regularised_variance(short, 1)))
    assert torch.equal(metric.per_chain_metric(x, "diag"), metric.regularised_variance(x, 1))
