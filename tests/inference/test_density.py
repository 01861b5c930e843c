"""The batched log density (zoo_inference.density): every form (traced, compiled, vmap, loop)
equals the per-chain eager density on every registered model and every foreign-corpus case; a
model whose Python branches on a sampled value is detected and falls back; a failed
factorisation rejects its chain."""

from __future__ import annotations

import warnings

import numpy as np
import pyro
import pyro.distributions as dist
import pytest
import torch
from torch._dynamo.utils import counters
from torch._higher_order_ops.effects import has_effects
from torch.distributions import constraints

import zoo
import zoo_inference.backend as backend
from tests.foreign_corpus import CORPUS
from tests.sampling import needs_compiler
from tests.seeding import shifted
from zoo.models.posteriordb.base import PER_CHAIN
from zoo_inference.density import DensityWarning, batched_density

# models with a fixed joint density of continuous latents (amortised models that draw their
# own minibatches have none: their sites are those of a random 100 of the images)
CONTINUOUS = [
    n
    for n in zoo.list_models()
    if (s := zoo.get_model(n).structure).continuous and not s.nonenumerable and not s.subsampled
]


def _check_density(model, data, structure, *, compile=False):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        d = batched_density(model, data, structure, 3, compile=compile)
    theta = d.random_points(torch.Generator().manual_seed(11), scale=1.5)
    value, grad = d(theta)
    for b in range(3):
        x = theta[b].clone().requires_grad_(True)
        with torch.enable_grad(), pyro.validation_enabled(False):
            lp = d.log_density(x)
            (g,) = torch.autograd.grad(lp, x, allow_unused=True)
        g = torch.zeros_like(x) if g is None else g
        if not torch.isfinite(lp):
            assert value[b] == -torch.inf
            continue
        scale = 1 + abs(float(lp))
        assert float(value[b]) == pytest.approx(float(lp), abs=1e-4 * scale)
        np.testing.assert_allclose(grad[b], g, atol=1e-3 * (1 + float(g.abs().max())))
    return d


@pytest.mark.parametrize("name", CONTINUOUS)
def test_the_batched_density_equals_the_per_chain_one_on_every_model(name):
    e = zoo.get_model(name)
    d = _check_density(e.model, e.load_data(), e.structure)
    # every zoo model traces, but those whose registration says why not (an ODE's solver)
    assert d.mode == ("loop" if name in PER_CHAIN else "traced"), PER_CHAIN.get(name)


@pytest.mark.parametrize("case", CORPUS, ids=[c.name for c in CORPUS])
def test_the_batched_density_equals_the_per_chain_one_on_foreign_models(case, registry):
    e = zoo.register(case.name, model=case.model, data=case.data)
    if not e.structure.continuous or e.structure.nonenumerable:
        pytest.skip("no continuous latent sites")
    _check_density(e.model, e.load_data(), e.structure)


def _simulated(name: str, n: int) -> list[dict] | None:
    from zoo.calibrate import simulate

    try:
        return [simulate(zoo.get_model(name), shifted(s))[0] for s in range(n)]
    except ValueError:
        return None  # observations that are not data arguments (the VAEs)


# one model of each kind in the default run (regression, enumerated mixture, hierarchy, latent
# factors); every model in the slow one (the HMMs alone take 15-18 s)
PER_CHAIN_FAST = ("linear_regression", "gaussian_mixture", "eight_schools", "probabilistic_pca")


@pytest.mark.parametrize(
    "name",
    [n if n in PER_CHAIN_FAST else pytest.param(n, marks=pytest.mark.slow) for n in CONTINUOUS],
)
def test_per_chain_data_gives_each_chain_its_own_posterior(name):
    """A density whose chains each have their own data set (SBC's replications as chains)
    equals, chain by chain, the density built on that chain's data alone."""
    e = zoo.get_model(name)
    sets = _simulated(name, 3)
    if sets is None:
        pytest.skip("cannot simulate its data")
    keys = [k for k, v in sets[0].items() if isinstance(v, torch.Tensor)]
    batch = {k: torch.stack([d[k] for d in sets]) for k in keys}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        d = batched_density(e.model, sets[0], e.structure, 3, batch=batch)
        theta = d.random_points(torch.Generator().manual_seed(shifted(5)), scale=1.0)
        value, grad = d(theta)
        for c, data in enumerate(sets):
            v1, g1 = batched_density(e.model, data, e.structure, 1)(theta[c : c + 1])
            assert float(value[c]) == pytest.approx(float(v1[0]), rel=1e-4, abs=1e-3)
            np.testing.assert_allclose(grad[c], g1[0], rtol=1e-3, atol=1e-3)
    assert d.mode == "traced"
    with pytest.raises(ValueError, match=r"batch\['nope'\] must be a data argument"):
        batched_density(e.model, sets[0], e.structure, 3, batch={"nope": torch.zeros(3)})


@pytest.mark.slow
@pytest.mark.parametrize("name", CONTINUOUS)
def test_the_compiled_density_equals_the_per_chain_one(name):
    e = zoo.get_model(name)
    d = _check_density(e.model, e.load_data(), e.structure, compile=True)
    assert d.mode == "compiled"


def test_a_branch_on_a_sampled_value_is_detected_and_falls_back(registry):
    def branching(y):
        mu = pyro.sample("mu", dist.Normal(0.0, 3.0))
        scale = 1.0 if float(mu) > 0 else 2.0  # a Python branch on the sampled value
        with pyro.plate("n", len(y)):
            pyro.sample("y", dist.Normal(mu, scale), obs=y)

    e = zoo.register("branching", model=branching, data={"y": torch.tensor([0.3, -0.2, 1.1])})
    with pytest.warns(DensityWarning, match="the vmap form does not apply"):
        d = batched_density(e.model, e.load_data(), e.structure, 4)
    assert d.mode == "loop"
    theta = torch.tensor([[-1.0], [1.0], [-0.5], [0.5]])
    value, _ = d(theta)
    y = torch.tensor([0.3, -0.2, 1.1])
    for b, mu in enumerate(theta[:, 0]):
        scale = 1.0 if mu > 0 else 2.0
        want = dist.Normal(0.0, 3.0).log_prob(mu) + dist.Normal(mu, scale).log_prob(y).sum()
        assert float(value[b]) == pytest.approx(float(want), rel=1e-5)


def test_a_graph_right_only_where_it_was_traced_is_refused_at_fresh_points():
    """What a frozen Python branch looks like: a form that equals the eager density at the
    tracing point and is off by one nat elsewhere. The check at the probe alone passes it; the
    check at fresh points refuses it."""
    e = zoo.get_model("beta_bernoulli")
    d = batched_density(e.model, e.load_data(), e.structure, 3)
    probe = d.random_points(torch.Generator().manual_seed(0), scale=1.0)
    eager = d._vmapped()

    def frozen(x):
        value, grad = eager(x)
        return (value if torch.equal(x, probe) else value + 1.0), grad

    d._check(frozen, probe, reference=eager)  # the tracing point cannot tell
    with pytest.raises(ValueError, match="differ from the eager density's at a fresh point"):
        d._check(frozen, probe, reference=eager, fresh=True)


def _correlated_pair(y):
    """rho flat on (-2, 2); y ~ N(0, [[1, rho], [rho, 1]]): not a covariance where |rho| >= 1,
    so its Cholesky fails there. Flat (ImproperUniform), not Uniform: the density starts from a
    feasible point (rho = 0), where a prior draw would fail half the time."""
    rho = pyro.sample("rho", dist.ImproperUniform(constraints.interval(-2.0, 2.0), (), ()))
    cov = torch.eye(2) + rho * torch.tensor([[0.0, 1.0], [1.0, 0.0]])
    pyro.sample("y", dist.MultivariateNormal(torch.zeros(2), cov), obs=y)


@needs_compiler
def test_a_failed_cholesky_rejects_its_chain_and_the_compiled_graph_is_cached(registry):
    """The traced graph keeps no error check (a side effect: inductor's cache would refuse the
    graph and every process would compile it anew): a chain whose Cholesky fails gets -inf, the
    others their exact density, and inductor's FX graph cache takes the graph."""
    y = torch.tensor([0.4, -0.1])
    e = zoo.register("correlated_pair", model=_correlated_pair, data={"y": y})
    d = batched_density(e.model, e.load_data(), e.structure, 3)
    assert not [n for n in d._graph.graph.nodes if has_effects(n.target)]
    rho = torch.tensor([0.5, 1.5, -0.9])  # the middle one is not a covariance
    theta = d.transforms["rho"](rho)[:, None]
    value, grad = d(theta)
    assert value[1] == -torch.inf and float(grad[1, 0]) == 0.0
    for b in (0, 2):
        x = theta[b].clone().requires_grad_(True)
        with torch.enable_grad():
            want = d.log_density(x)
        assert float(value[b]) == pytest.approx(float(want), rel=1e-5)
    before = counters["inductor"]["fxgraph_cache_bypass"]
    backend.inductor(d._graph, [theta], rows=3)
    assert counters["inductor"]["fxgraph_cache_bypass"] == before
