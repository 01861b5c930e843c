"""MuProp (seed 000 §3.4, L1086–1092): its gradient's mean is the exact gradient, computed by
enumerating the discrete latents, within Monte-Carlo error on every coordinate, and its
variance is below plain REINFORCE's; on a sigmoid-belief toy with three latent bits per point
and on discrete_vae with K = 3 classes. The check has power: the same estimator without the
control variate's expectation term is rejected. Tolerances are Monte-Carlo standard errors
with a family-wise tail of 1e-6 (Bonferroni over coordinates): they hold for any seed."""

import itertools
import math

import pyro
import pyro.distributions as dist
import pytest
import torch
from pyro.infer import TraceGraph_ELBO
from scipy.stats import norm

import zoo
from tests.seeding import shifted
from zoo.models import discrete_vae as dvae
from zoo_inference.algorithms.gradients import gradient_draws
from zoo_inference.algorithms.muprop import MuPropELBO, linear_log_prob
from zoo_inference.runtime import threads

TAIL = 1e-6
N, D, H = 4, 5, 3  # the toy: points, observed bits, latent bits per point
PRIOR = 0.3
TOY_PARAMS = ("V", "c", "W", "b")


@pytest.fixture(autouse=True)
def _one_thread():
    with threads(1):
        yield
    pyro.clear_param_store()


def bound(size: int) -> float:
    """Two-sided z bound for ``size`` coordinates at a family-wise tail of TAIL."""
    return float(norm.isf(TAIL / (2 * size)))


def toy_data() -> torch.Tensor:
    return (torch.rand(N, D, generator=torch.Generator().manual_seed(0)) < 0.5).double()


def toy_model(x: torch.Tensor) -> None:
    """z_n: H bits, each Bernoulli(0.3); x_n | z_n: D bits with log-odds z_n W + b."""
    gen = torch.Generator().manual_seed(1)
    W = pyro.param("W", lambda: torch.randn(H, D, generator=gen, dtype=torch.float64))
    b = pyro.param("b", lambda: torch.zeros(D, dtype=torch.float64))
    with pyro.plate("n", N):
        z = pyro.sample("z", dist.Bernoulli(torch.full((H,), PRIOR).double()).to_event(1))
        pyro.sample("x", dist.Bernoulli(logits=z @ W + b).to_event(1), obs=x)


def toy_guide(x: torch.Tensor) -> None:
    """q(z_n | x_n): H independent bits with log-odds x_n V + c."""
    gen = torch.Generator().manual_seed(2)
    V = pyro.param("V", lambda: torch.randn(D, H, generator=gen, dtype=torch.float64))
    c = pyro.param("c", lambda: 0.5 * torch.ones(H, dtype=torch.float64))
    with pyro.plate("n", N):
        pyro.sample("z", dist.Bernoulli(logits=x @ V + c).to_event(1))


def toy_exact_gradient(x: torch.Tensor) -> torch.Tensor:
    """d(-ELBO)/d(V, c, W, b) with the ELBO summed over all 2^H latent vectors per point."""
    store = pyro.get_param_store()
    V, c, W, b = (store[k] for k in TOY_PARAMS)
    zs = torch.tensor(list(itertools.product((0.0, 1.0), repeat=H)), dtype=torch.float64)
    log_q = dist.Bernoulli(logits=(x @ V + c)[:, None, :]).to_event(1).log_prob(zs)  # (N, 2^H)
    prior = dist.Bernoulli(torch.full((H,), PRIOR).double()).to_event(1).log_prob(zs)
    log_lik = dist.Bernoulli(logits=zs @ W + b).to_event(1).log_prob(x[:, None, :])
    elbo = (log_q.exp() * (prior + log_lik - log_q)).sum()
    grads = torch.autograd.grad(-elbo, [V, c, W, b])
    return torch.cat([g.reshape(-1) for g in grads])


def toy_draws(elbo: pyro.infer.ELBO, num_draws: int) -> torch.Tensor:
    x = toy_data()
    data = {"x": x}
    return gradient_draws(toy_model, toy_guide, data, elbo, TOY_PARAMS, num_draws).double()


def assert_unbiased(g: torch.Tensor, exact: torch.Tensor) -> None:
    """Every coordinate's mean within bound(size) standard errors of the exact gradient; the
    coordinates with no sampling variance equal to it."""
    mean, se = g.mean(0), g.std(0) / math.sqrt(g.shape[0])
    noisy = se > 1e-12 * (1 + exact.abs())
    torch.testing.assert_close(mean[~noisy], exact[~noisy], rtol=1e-9, atol=1e-9)
    z = (mean[noisy] - exact[noisy]) / se[noisy]
    assert float(z.abs().max()) < bound(len(exact)), float(z.abs().max())


class WithoutExpectation(MuPropELBO):
    """MuProp's control variate subtracted, its expectation not added back: biased."""

    def control_variate_mean(self, slope: torch.Tensor, fn) -> torch.Tensor:
        return torch.zeros(())


def test_linear_extension_is_the_log_density_on_vertices_and_linear_between():
    probs = torch.tensor([0.2, 0.5, 0.3], dtype=torch.float64)
    cat = dist.OneHotCategorical(probs)
    for k in range(3):
        v = torch.nn.functional.one_hot(torch.tensor(k), 3).double()
        assert float(linear_log_prob(cat, v)) == pytest.approx(math.log(probs[k]))
    assert float(linear_log_prob(cat, probs)) == pytest.approx(float((probs * probs.log()).sum()))
    bern = dist.Bernoulli(torch.tensor([0.2, 0.7], dtype=torch.float64)).to_event(1)
    for v in ([0.0, 1.0], [1.0, 1.0]):
        v = torch.tensor(v, dtype=torch.float64)
        assert float(linear_log_prob(bern, v)) == pytest.approx(float(bern.log_prob(v)))
    half = torch.tensor([0.5, 0.5], dtype=torch.float64)
    ends = linear_log_prob(bern, torch.zeros(2).double()) + linear_log_prob(bern, half * 2)
    assert float(linear_log_prob(bern, half)) == pytest.approx(float(ends) / 2)


def test_muprop_is_unbiased_on_the_toy_and_beats_reinforce():
    """400 draws of MuProp's gradient against the enumerated gradient on every one of the 38
    coordinates; REINFORCE (TraceGraph_ELBO, no baseline) has more than twice its summed
    variance (about 8 times at this point)."""
    pyro.set_rng_seed(shifted(41))
    pyro.clear_param_store()
    toy_guide(toy_data())
    toy_model(toy_data())
    exact = toy_exact_gradient(toy_data())
    g = toy_draws(MuPropELBO(), 400)
    assert_unbiased(g, exact)
    r = toy_draws(TraceGraph_ELBO(), 400)
    assert_unbiased(r, exact)  # the same check passes Pyro's own unbiased estimator
    assert float(g.var(0).sum()) * 2 < float(r.var(0).sum())


def test_the_check_rejects_muprop_without_its_expectation_term():
    """Power: leaving out grad_phi f'(mu)^T mu(phi) biases the encoder's gradient by far more
    than the check's tolerance."""
    pyro.set_rng_seed(shifted(42))
    pyro.clear_param_store()
    toy_guide(toy_data())
    toy_model(toy_data())
    exact = toy_exact_gradient(toy_data())
    g = toy_draws(WithoutExpectation(), 300)
    with pytest.raises(AssertionError):
        assert_unbiased(g, exact)


def test_discrete_vae_muprop_is_unbiased_with_three_classes():
    """discrete_vae's own model and guide, K = 3 classes, 8 images: MuProp's gradient of the
    encoder and decoder against the one TraceEnum_ELBO computes by enumerating z (the ``enum``
    estimator, a Categorical z where MuProp's is one-hot), at the networks' initial values."""
    x = zoo.get_model("discrete_vae").load_data()["x"][:8]
    K = 3
    params = (*dvae.ENCODER, "decoder_W", "decoder_b")
    pyro.set_rng_seed(shifted(43))
    pyro.clear_param_store()
    exact = dvae.gradient_draws(x, K, "enum", num_draws=1, params=params)[0].double()
    g = dvae.gradient_draws(x, K, "muprop", num_draws=200, params=params).double()
    assert_unbiased(g, exact)
    r = dvae.gradient_draws(x, K, "reinforce", num_draws=200, params=params).double()
    assert float(g.var(0).sum()) < float(r.var(0).sum())


def test_guides_muprop_does_not_cover_are_refused():
    def continuous_guide(x):
        loc = pyro.param("loc", torch.zeros(()))
        with pyro.plate("n", N):
            pyro.sample("z", dist.Normal(loc, 1.0))

    def model(x):
        with pyro.plate("n", N):
            pyro.sample("z", dist.Normal(0.0, 1.0))

    with pytest.raises(zoo.ZooError, match="Bernoulli or OneHotCategorical"):
        MuPropELBO().loss_and_grads(model, continuous_guide, toy_data())

    def two_layers(x):
        p = pyro.param("p", torch.tensor(0.4))
        with pyro.plate("n", N):
            a = pyro.sample("a", dist.Bernoulli(p))
            pyro.sample("b", dist.Bernoulli(0.2 + 0.6 * a))

    def model2(x):
        with pyro.plate("n", N):
            pyro.sample("a", dist.Bernoulli(0.5))
            pyro.sample("b", dist.Bernoulli(0.5))

    with pytest.raises(zoo.ZooError, match="one stochastic layer"):
        MuPropELBO().loss_and_grads(model2, two_layers, toy_data())
