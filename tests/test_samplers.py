"""The batched log density and the many-chain samplers.

The density: every form (traced, compiled, vmap, loop) equals the per-chain eager density on
every registered model and every foreign-corpus case; a model whose Python branches on a sampled
value is detected and falls back. The samplers: the lockstep NUTS, ChEES, HMC and MH agree with
the closed form (and the lockstep NUTS with Pyro's own NUTS) within Monte-Carlo error; the tree
bookkeeping matches its definition; same seed, same numbers."""

from __future__ import annotations

import ast
import dataclasses
import importlib
import inspect
import math
import warnings
from pathlib import Path
from types import SimpleNamespace
from typing import Annotated

import arviz as az
import numpy as np
import pyro
import pyro.distributions as dist
import pytest
import torch
from foreign_corpus import CORPUS
from seeding import shifted
from torch._dynamo.utils import counters
from torch._higher_order_ops.effects import has_effects
from torch.distributions import constraints
from torch.fx.experimental.proxy_tensor import make_fx

import zoo
import zoo_inference.backend as backend
from zoo_inference import density as density_module
from zoo_inference import samplers
from zoo_inference.backend import has_compiler
from zoo_inference.density import DensityWarning, batched_density
from zoo_inference.samplers import driver, integrator, metric, trajectory, windows
from zoo_inference.samplers.base import PackedState
from zoo_inference.samplers.hmc import transition as hmc_transition
from zoo_inference.samplers.nuts import nuts_sample
from zoo_inference.samplers.nuts_tree import NUTS_STEP_NODES, TreeState, checkpoints

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
    assert d.mode == "traced"  # every zoo model traces


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


def _counting(monkeypatch, configured):
    """beta_bernoulli's density in traced mode with automatic compiling on, and a list that
    records each compile instead of making it."""
    e = zoo.get_model("beta_bernoulli")
    d = batched_density(e.model, e.load_data(), e.structure, 2)
    compiled: list[int] = []
    monkeypatch.setattr(d, "_to_compiled", lambda graph: compiled.append(1) or ("compiled", d._fn))
    configured(auto_compile=True)
    return d, compiled


def test_auto_compile_asks_again_as_the_work_changes(monkeypatch, configured):
    """The decision to compile is taken at 2% of the run (10 iterations at least) and again
    each time the iterations done double: a run whose graph calls are few at first and then
    many (NUTS's trees grow in warmup) is compiled once their modelled time, projected over the
    run, exceeds COMPILE_AFTER_S and the rest of the run compiled saves more than the compile."""
    d, compiled = _counting(monkeypatch, configured)
    d.start_run(auto_compile=True)
    total = 1000
    for it in range(20):  # 1 ms of modelled work an iteration: 1 s over the run
        d._work += 0.001
        d.tick(it, total)
    assert not compiled
    for it in range(20, 40):  # then 100 ms an iteration: at 40 done, 50 s over the run
        d._work += 0.1
        d.tick(it, total)
        assert bool(compiled) == (it + 1 >= 40), it
    assert d.mode == "compiled"


def test_auto_compile_counts_graph_calls_not_seconds(monkeypatch, configured):
    """The work is counted: each call of the traced density adds its graph's modelled seconds
    (policy.call_seconds, from the graph's nodes and tensor sizes), whatever the clock says, so
    a busy machine takes the same path as a quiet one."""
    d, _ = _counting(monkeypatch, configured)
    d.start_run(auto_compile=True)
    assert d._call_s == pytest.approx(backend.policy.call_seconds(d._graph)) and d._call_s > 0
    theta = d.random_points(d.generator(0))
    clockless = SimpleNamespace(perf_counter=lambda: 1 / 0)  # a clock read would raise
    monkeypatch.setattr(density_module, "time", clockless)
    for _ in range(7):
        d(theta)
    assert d._work == pytest.approx(7 * d._call_s)
    d.restart_pace()
    assert d._work == 0.0


def test_auto_compile_weighs_the_compile_against_what_it_saves(monkeypatch, configured):
    """Past the first rule, a run compiles only where the rest of it, at the compiled pace,
    saves more than the compile is expected to cost: 49 s of work to go save 31.9 s compiled,
    worth a 20 s compile, not a 40 s one. The expected cost grows with the density's graph."""
    d, compiled = _counting(monkeypatch, configured)
    for cost, want in ((40.0, False), (20.0, True)):
        monkeypatch.setattr(d, "compile_cost_s", lambda cost=cost: cost)
        compiled.clear()
        d.start_run(auto_compile=True)
        for it in range(20):
            d._work += 0.05  # 49 s to go at this rate
            d.tick(it, 1000)
        assert bool(compiled) is want, cost
    e = zoo.get_model("beta_bernoulli")
    small = batched_density(e.model, e.load_data(), e.structure, 3)
    big = zoo.get_model("hmm")
    large = batched_density(big.model, big.load_data(), big.structure, 3)
    assert backend.policy.COMPILE_S < small.compile_cost_s() < large.compile_cost_s()


def test_each_run_starts_from_the_form_the_density_was_built_in(monkeypatch, configured):
    """A run that compiled mid-run leaves the cached density compiled; the next run of the same
    call starts traced again and takes the same path (the compiled step, made once, is reused)."""
    d, _ = _counting(monkeypatch, configured)
    d.start_run(auto_compile=True)
    d.mode = "compiled"  # as a mid-run compile leaves it
    d.start_run(auto_compile=True)
    assert d.mode == "traced" and d._fn is d._traced


def test_a_compile_is_priced_with_the_nodes_its_fused_step_adds():
    """NUTS's tree bookkeeping adds about NUTS_STEP_NODES nodes to the graph it compiles: a NUTS
    run prices its compile with them, an HMC run (whose fused leapfrog adds few) does not, and
    each run starts from the density's own price."""
    e = zoo.get_model("beta_bernoulli")
    d = batched_density(e.model, e.load_data(), e.structure, 2)
    step = backend.policy.COMPILE_S_PER_NODE * NUTS_STEP_NODES
    prices = {}
    for sampler, options in ((samplers.nuts, NUTS_TEST_DEPTH), (samplers.hmc, {})):
        d.start_run(auto_compile=False)
        bare = d.compile_cost_s()
        gen = d.generator(shifted(3))
        sampler(d, d.initial_points(gen), num_samples=5, warmup=5, gen=gen, **options)
        prices[sampler] = d.compile_cost_s() - bare
    d.start_run(auto_compile=False)
    assert prices == {samplers.nuts: pytest.approx(step), samplers.hmc: 0.0}
    assert d.compile_cost_s() == pytest.approx(bare)


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


def test_a_traced_density_keeps_one_fake_mode_for_all_its_nodes():
    """A density's graph records a fake value on each node. Traced from real tensors, torch
    makes each its own fake mode, which keeps the stack it was made on (tens of objects a node,
    kept as long as the graph): the density's tracing gives them one."""
    e = zoo.get_model("eight_schools")
    d = batched_density(e.model, e.load_data(), e.structure, 3)
    vals = [n.meta["val"] for n in d._graph.graph.nodes if hasattr(n.meta.get("val"), "fake_mode")]
    assert len(vals) > 50
    assert len({id(v.fake_mode) for v in vals}) == 1
    # torch's own make_fx, for contrast: a mode a node (if this changes, the wrapper may go)
    raw = make_fx(lambda x: (x.sin() * 2 + 1).sum())(torch.ones(3))
    modes = {id(n.meta["val"].fake_mode) for n in raw.graph.nodes if n.op == "call_function"}
    assert len(modes) > 1


needs_compiler = pytest.mark.skipif(not has_compiler(), reason="no C compiler")


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


@pytest.mark.parametrize("rows", [1, backend.VECTORISE_FROM - 1, backend.VECTORISE_FROM])
def test_inductor_writes_scalar_cpu_code_for_small_batches(monkeypatch, rows):
    """A few chains compile to scalar code (vector code costs a third of a cold compile there
    and gains nothing); from VECTORISE_FROM rows on, inductor picks its vector ISA."""
    import torch._inductor as inductor
    import torch._inductor.compile_fx as compile_fx

    seen = []

    def compile_(graph, example, **kwargs):  # what inductor's compiler sees, without compiling
        seen.append(inductor.config.cpp.simdlen)
        return lambda args: graph(*args)

    monkeypatch.setattr(compile_fx, "compile_fx_inner", compile_)
    fn = backend.inductor(lambda x: (x.sin(),), [torch.ones(rows, 2)], rows=rows)
    assert seen == [1 if rows < backend.VECTORISE_FROM else None]
    assert inductor.config.cpp.simdlen is None  # the setting does not leak out
    assert torch.equal(fn(torch.zeros(rows, 2))[0], torch.zeros(rows, 2))


@needs_compiler
def test_inductor_trusts_the_cpus_instruction_sets_without_building_probes(monkeypatch):
    """The vector instruction sets the CPU reports are trusted: no test program is compiled and
    loaded for each (7 s of a first compile on a machine; inductor still probes an ISA's
    extras, AVX-512's bf16 and VNNI), unless the user sets inductor's own
    TORCHINDUCTOR_VEC_ISA_OK."""
    from torch._inductor import cpu_vec_isa

    builds = []

    def check_build(self, code):  # noqa: ANN001, ANN202
        builds.append(code)
        return True

    monkeypatch.setattr(cpu_vec_isa.VecISA, "check_build", check_build)
    monkeypatch.delenv(backend.VEC_ISA_ENV, raising=False)
    cpu_vec_isa.valid_vec_isa_list.cache_clear()  # each process asks once; ask afresh here
    try:
        for rows in (2, backend.VECTORISE_FROM):
            x = torch.linspace(-1, 1, 2 * rows).reshape(rows, 2)
            fn = backend.inductor(make_fx(lambda x: (x.sin() * 3,))(x), [x], rows=rows)
            torch.testing.assert_close(fn(x)[0], x.sin() * 3)
    finally:
        cpu_vec_isa.valid_vec_isa_list.cache_clear()
    assert cpu_vec_isa.VecISA._avx_code not in builds


def _transitions(density, step, n=6):
    """``n`` HMC transitions from one start, each from the same random state as the
    reference's: a list of (state, statistics)."""
    gen = torch.Generator().manual_seed(11)
    q = density.initial_points(gen)
    logp, grad = density(q)
    eps = torch.full((len(q),), 0.2, dtype=q.dtype)
    inv_mass = torch.ones_like(q)
    out = []
    for _ in range(n):
        q, logp, grad, st, *_ = hmc_transition(
            q, logp, grad, eps, inv_mass, gen, torch.full_like(eps, 7.0), 10, step
        )
        out.append((q.clone(), {k: v.clone() for k, v in st.items()}))
    return out


@needs_compiler
@pytest.mark.parametrize("name", ["eight_schools_noncentered", "three_coin"])
def test_the_fused_compiled_hmc_step_takes_the_eager_steps(name, monkeypatch):
    """HMC's masked leapfrog step fused through the density, compiled or as TorchScript,
    walks the same trajectories as the eager step: the same draws and statistics, transition
    after transition (NUTS's step: test_the_fused_compiled_asynchronous_step_takes_the_eager_
    steps)."""
    e = zoo.get_model(name)
    fn = integrator.masked_leapfrog
    traced = batched_density(e.model, e.load_data(), e.structure, 3)
    fused = batched_density(e.model, e.load_data(), e.structure, 3, compile=True)
    with zoo.configure(uncompiled="fx"):  # the eager step: the density fuses nothing
        want = _transitions(traced, driver.Step(traced, fn))
    assert traced.compile_s == 0 and not any(step is fn for _, step, *_ in traced._fused)
    for density in (traced, fused):
        density.start_run(auto_compile=False)
        got = _transitions(density, driver.Step(density, fn, reuse_outputs=True))
        assert [f for (_, step, *_), f in density._fused.items() if step is fn and f], (
            density.reasons
        )
        for (q1, st1), (q0, st0) in zip(got, want, strict=True):
            np.testing.assert_allclose(q1, q0, rtol=1e-4, atol=1e-4)
            for k in st0:
                np.testing.assert_allclose(st1[k].double(), st0[k].double(), rtol=1e-3, atol=1e-4)
        # the seconds spent tracing and compiling are counted (a run's diagnostics
        # ["compile_s"]), once: the step compiled, a new run on the same density compiles
        # nothing; scripting (a few tenths of a second) is not compiling
        assert (density.compile_s > 0) == (density is fused)
        density.start_run(auto_compile=False)
        again = driver.Step(density, fn, reuse_outputs=True)
        assert _transitions(density, again)[-1][0].equal(got[-1][0])
        assert density.compile_s == 0


@needs_compiler
def test_a_compiled_step_that_reuses_its_outputs_writes_into_those_of_two_calls_before():
    """A fused compiled step told that its caller is done with a call's outputs by the call
    after next runs without inductor's wrappers and writes into the buffers of two calls
    before (the same tensors), with the values of the wrapped call; a step not told so
    returns fresh tensors each call."""
    e = zoo.get_model("eight_schools_noncentered")
    density = batched_density(e.model, e.load_data(), e.structure, 3, compile=True)
    gen = torch.Generator().manual_seed(3)
    q = density.initial_points(gen)
    logp, grad = density(q)
    p = torch.randn(q.shape, generator=gen, dtype=q.dtype)
    live = torch.tensor([True, False, True])
    args = (q, p, grad, logp, torch.full((3, 1), 0.1, dtype=q.dtype), torch.ones_like(q), live)
    fn = integrator.masked_leapfrog
    reusing, fresh = (density.fuse(fn, args, reuse_outputs=r) for r in (True, False))
    assert reusing is not None and fresh is not None, density.reasons
    want = fresh(*args)
    first, second, third = (reusing(*args) for _ in range(3))
    for got in (first, second, third):
        for a, b in zip(got, want, strict=True):
            assert torch.equal(a, b)
    assert all(a is c for a, c in zip(first, third, strict=True))
    assert not any(a is b for a, b in zip(first, second, strict=True))
    assert not any(a is b for a, b in zip(want, fresh(*args), strict=True))
    # the state passed on from call to call, as a sampler does
    chained, ref = args[:4], args[:4]
    for _ in range(5):
        chained = reusing(*chained, *args[4:])
        ref = fresh(*ref, *args[4:])
    for a, b in zip(chained, ref, strict=True):
        assert torch.equal(a, b)


def test_a_step_asks_for_its_fused_form_until_the_density_has_one():
    """A step asks the density for a fused form at each call while it has none (a density
    compiles mid-run), and once it has one calls it without asking again."""
    asked, calls = [], []

    class Density:
        compiled = False

        def __call__(self, q):
            return -0.5 * (q * q).sum(-1), -q

        def fuse(self, fn, args, reuse_outputs):  # noqa: ANN001, ANN202
            asked.append(len(args))
            return (lambda q: calls.append("fused") or self(q)) if self.compiled else None

    def fn(density, q):
        calls.append("eager")
        return density(q)

    d, q = Density(), torch.zeros(2, 3)
    step = driver.Step(d, fn)
    step(q), step(q)
    d.compiled = True
    step(q), step(q), step(q)
    assert len(asked) == 3  # twice without a fused form, once to get it
    assert calls == ["eager", "eager", "fused", "fused", "fused"]


# what only the driver asks of a density: how and when to compile a kernel's steps
COMPILE_METHODS = ("fuse", "tick", "expect_step", "restart_pace", "start_run", "compile_s")


def test_only_the_driver_knows_about_compiling():
    """The kernels and their parts import neither the driver nor the density (nor anything
    outside the package but libraries) and call none of the density's compile methods: they
    declare steps and report iterations to their loop."""
    bad = []
    for path in sorted(Path(samplers.__file__).parent.glob("*.py")):
        if path.name in ("driver.py", "__init__.py"):
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            where = f"{path.name}:{getattr(node, 'lineno', 0)}"
            if isinstance(node, ast.ImportFrom) and (node.level != 1 or node.module == "driver"):
                if node.level or node.module.split(".")[0] in ("zoo_inference", "zoo"):
                    bad.append(f"{where} imports {node.module}")
            elif isinstance(node, ast.Import):
                bad += [f"{where} imports {a.name}" for a in node.names if "inference" in a.name]
            elif isinstance(node, ast.Attribute) and node.attr in COMPILE_METHODS:
                bad.append(f"{where} uses .{node.attr}")
            elif isinstance(node, ast.Constant) and node.value in COMPILE_METHODS:
                bad.append(f"{where} names {node.value!r}")
    assert not bad, bad


def test_a_sampler_is_its_kernel_with_a_progress_option_for_its_loop():
    """The public samplers take the contract's arguments and their kernel's options, and
    ``progress`` in place of the kernel's ``loop``."""
    for sampler in (
        samplers.nuts, samplers.chees, samplers.hmc, samplers.mams, samplers.mams_laps,
        samplers.rwmh,
    ):  # fmt: skip
        params = inspect.signature(sampler).parameters
        assert list(params)[:5] == ["density", "theta0", "num_samples", "warmup", "gen"]
        assert "loop" not in params and params["progress"].default is False
    assert "max_tree_depth" in inspect.signature(samplers.nuts).parameters


def _mala(density, theta0, *, num_samples, warmup, gen, loop, target_accept=0.574):
    """A new kernel written from the package's parts: Langevin proposals (one leapfrog step's
    position) with their Metropolis–Hastings correction, in Stan's windowed warmup."""

    def langevin(q, logp, grad, step, inv_mass, it):
        eps2 = step[:, None] ** 2 * inv_mass  # the proposal's variance, per coordinate

        def log_proposal(to, frm, g):  # log q(to | frm) up to a constant
            return -((to - frm - 0.5 * eps2 * g) ** 2 / (2 * eps2)).sum(-1)

        z = torch.randn(q.shape, generator=gen, dtype=q.dtype)
        new = q + 0.5 * eps2 * grad + eps2.sqrt() * z
        lp, g = density(new)
        log_ratio = lp - logp + log_proposal(q, new, g) - log_proposal(new, q, grad)
        accept = torch.nan_to_num(log_ratio, nan=-math.inf).clamp(max=0.0).exp()
        take = torch.rand(len(q), generator=gen, dtype=q.dtype) < accept
        t = take[:, None]
        stats = {"accept": accept, "diverging": torch.zeros_like(take)}
        q, logp, grad = torch.where(t, new, q), torch.where(take, lp, logp), torch.where(t, g, grad)
        return q, logp, grad, stats, 1

    return windows.adapted_chains(
        density, theta0, num_samples=num_samples, warmup=warmup, gen=gen, loop=loop,
        target_accept=target_accept, transition=langevin,
    )  # fmt: skip


def test_a_new_kernel_from_the_parts_samples_a_gaussian():
    """What a new sampler takes: a kernel of a few lines on the package's parts (here MALA in
    Stan's windowed warmup), made a sampler by ``as_sampler``: the public contract, progress
    and iterations reported, on a plain function. Its draws have a Gaussian's moments."""
    sd = torch.logspace(-1, 1, 5, dtype=torch.float64)

    def density(q):
        z = q / sd
        return -0.5 * (z * z).sum(-1), -z / sd

    mala = samplers.as_sampler(_mala, "mala")
    gen = torch.Generator().manual_seed(shifted(8))
    q = torch.randn(8, 5, generator=gen, dtype=torch.float64)
    s = mala(density, q, num_samples=1000, warmup=500, gen=gen, progress=False)
    assert s.theta.shape == (8, 1000, 5) and s.stats["step_size"].shape == (8, 1000)
    x = s.theta.reshape(-1, 5) / sd
    ess = len(x) / 20  # conservative: MALA's draws are more correlated than NUTS's
    assert float(x.mean(0).abs().max()) < 5 / np.sqrt(ess)
    assert float((x.var(0) - 1).abs().max()) < 5 * np.sqrt(2 / ess)


def test_checkpoint_indices_follow_their_definition():
    """Leaf n's U-turn checks run over the stored momenta hi..lo: hi = popcount(n >> 1) and
    hi - lo + 1 = the number of trailing one bits of n."""
    for leaf in range(1024):
        lo, hi = checkpoints(leaf)
        assert hi == bin(leaf >> 1).count("1")
        trailing = 0
        while (leaf >> trailing) & 1:
            trailing += 1
        assert hi - lo + 1 == trailing


@dataclasses.dataclass(slots=True)
class _Record(PackedState):  # kinds interleaved on purpose: packing groups them
    x: Annotated[torch.Tensor, "vector"]
    done: Annotated[torch.Tensor, "flag"]
    v: Annotated[torch.Tensor, "vector"]


def test_a_state_record_packs_by_the_kinds_of_its_fields():
    """The packing is derived from the fields' annotations: a new field is one line, and the
    packed tensors round-trip to the same record."""
    assert _Record.layout() == (("x", "v"), ("done",)) and _Record.kinds() == ("vector", "flag")
    st = _Record.zeros({"vector": ((3, 2), torch.float64), "flag": ((3,), torch.bool)})
    st.x, st.v = torch.randn(3, 2, dtype=torch.float64), torch.randn(3, 2, dtype=torch.float64)
    st.done = torch.tensor([True, False, True])
    packed = st.pack()
    assert [t.shape for t in packed] == [(2, 3, 2), (1, 3)]
    back = _Record.unpack(packed)
    assert torch.equal(back.x, st.x) and torch.equal(back.v, st.v)
    assert torch.equal(back.done, st.done)
    with pytest.raises(ValueError, match="_Record packs into 2 tensors, not 1"):
        _Record.unpack(packed[:1])
    with pytest.raises(ValueError, match=r"no shape given for the kinds \['flag'\]"):
        _Record.zeros({"vector": ((3, 2), torch.float64)})

    @dataclasses.dataclass(slots=True)
    class Unannotated(PackedState):
        y: torch.Tensor

    with pytest.raises(TypeError, match=r"Unannotated.y: annotate it Annotated\[torch.Tensor"):
        Unannotated.layout()
    # NUTS's tree: 36 named fields in five tensors, one a shape and dtype
    assert sum(map(len, TreeState.layout())) == 36
    assert TreeState.kinds() == ("vector", "scalar", "count", "flag", "checkpoints")


def test_stan_windows():
    assert windows.stan_windows(1000) == [100, 150, 250, 450, 950]
    assert windows.stan_windows(10) == []
    ends = windows.stan_windows(100)
    assert ends[0] > 15 and ends[-1] == 90


def test_halton_is_the_van_der_corput_sequence():
    assert [trajectory.halton(i) for i in range(1, 6)] == [0.5, 0.25, 0.75, 0.125, 0.625]


def _agree(run, truth, site, k=4.5):
    """|mean - truth| within k Monte-Carlo standard errors (the run's own ESS)."""
    row = run.summary.loc[site]
    mcse = truth.sd[site] / np.sqrt(row["ess_bulk"])
    assert abs(row["mean"] - truth.mean[site]) <= k * mcse, (run.engine, site, row["mean"])


@pytest.mark.parametrize("chain_groups", [None, 1], ids=["a-group-a-core", "one-batch"])
@pytest.mark.parametrize("engine", ["nuts", "chees", "hmc", "mams"])
def test_samplers_match_the_closed_form(engine, chain_groups):
    """Within Monte-Carlo error of the closed form, the chains split over the cores or in one
    batch (the report's layout)."""
    e = zoo.get_model("normal_gamma")
    truth = e.ground_truth()
    run = zoo.run(
        "normal_gamma", engine, num_samples=300, warmup=300, seed=shifted(2),
        chain_groups=chain_groups,
    )  # fmt: skip
    if chain_groups:
        assert run.diagnostics["chain_groups"] == chain_groups
    for site in ("mu", "tau"):
        _agree(run, truth, site)
    assert run.diagnostics["max_r_hat"] < 1.05
    assert run.diagnostics["gradient_evals"] > 0
    if engine == "chees":
        assert run.diagnostics["max_nested_r_hat"] < 1.05
        assert run.diagnostics["trajectory_length"]


@pytest.mark.parametrize(
    "engine, asked, metric",
    [("nuts", {}, False), ("nuts", {"dense_mass": True}, True), ("chees", {}, True),
     ("chees", {"dense_mass": False}, False)],
    ids=["nuts-default", "nuts-dense", "chees-default", "chees-diagonal"],
)  # fmt: skip
def test_the_engines_pass_the_metric_on(engine, asked, metric):
    """``dense_mass`` reaches the sampler: NUTS is diagonal unless asked, ChEES dense up to 100
    dimensions unless asked not to; the run's diagnostics say which it used."""
    run = zoo.run(
        "normal_gamma", engine, num_samples=20, warmup=30, num_chains=8, chain_groups=1,
        seed=shifted(3), **asked,
    )  # fmt: skip
    assert run.diagnostics["dense_mass"] is metric


def _pair(name, **kw):
    zoo_run = zoo.run(name, "nuts", seed=3, **kw)
    # Pyro's NUTS with its JIT-compiled potential: the same sampler, 2-3 times faster here
    pyro_run = zoo.run(name, "pyro_nuts", seed=4, jit=True, **kw)
    return zoo_run, pyro_run


def _agree_pair(a, b, sites, k=4.5):
    """Two samplers' means within k combined Monte-Carlo standard errors."""
    for site in sites:
        ra, rb = a.summary.loc[site], b.summary.loc[site]
        se = np.hypot(ra["sd"] / np.sqrt(ra["ess_bulk"]), rb["sd"] / np.sqrt(rb["ess_bulk"]))
        assert abs(ra["mean"] - rb["mean"]) <= k * se, (site, ra["mean"], rb["mean"])


def test_lockstep_nuts_agrees_with_pyros_nuts_on_an_enumerated_mixture():
    a, b = _pair("three_coin", num_samples=150, warmup=150, num_chains=2)
    assert b.diagnostics["backend"] == "pyro"
    _agree_pair(a, b, ["pi", "p", "q"])


@pytest.mark.slow  # 20 s; the enumerated mixture above is the default run's check against Pyro
def test_lockstep_nuts_agrees_with_pyros_nuts_on_eight_schools():
    a, b = _pair("eight_schools_noncentered", num_samples=250, warmup=250, num_chains=2)
    _agree_pair(a, b, ["mu", "tau", "eta[0]"])


def test_lockstep_nuts_on_a_foreign_model_that_does_not_broadcast(registry):
    case = next(c for c in CORPUS if c.name == "conj_linreg_matmul")
    zoo.register(case.name, model=case.model, data=case.data)
    # 8 chains, not the default 32: the density runs chain by chain here (the model does not
    # broadcast), so each chain is its own cost (32 chains took 20 s of a 2-core test run)
    run = zoo.run(case.name, "nuts", num_samples=300, warmup=300, num_chains=8, seed=shifted(5))
    post = run.idata.posterior
    for site, mean in case.mean.items():
        if site not in post:
            continue
        draws = post[site].values.reshape((-1, *np.shape(mean)))
        ess = run.diagnostics["min_ess_bulk"]
        se = np.asarray(case.sd[site]) / np.sqrt(ess)
        assert np.all(np.abs(draws.mean(0) - mean) <= 4.5 * se), site


def test_same_seed_same_numbers():
    kw = dict(num_samples=50, warmup=50, num_chains=3)
    a = zoo.run("eight_schools_noncentered", "nuts", seed=9, **kw)
    b = zoo.run("eight_schools_noncentered", "nuts", seed=9, **kw)
    c = zoo.run("eight_schools_noncentered", "nuts", seed=10, **kw)
    np.testing.assert_array_equal(a.idata.posterior["mu"], b.idata.posterior["mu"])
    assert not np.array_equal(a.idata.posterior["mu"], c.idata.posterior["mu"])


@needs_compiler
# NUTS's runs here compile its fused step (13 s of the suite); the default run checks ChEES's
# (MAMS's, like it a lockstep step, in the slow run)
@pytest.mark.parametrize(
    "engine", [pytest.param(e, marks=pytest.mark.slow) for e in ("nuts", "mams")] + ["chees"]
)
def test_a_run_under_the_device_context_takes_the_cpu_runs_draws(monkeypatch, engine):
    """What ``device="cuda"`` changes, run on the CPU: the density built (model constants, the
    traced graph, its compiled and fused forms) and the sampler run with torch's default device
    set by the device's context, as a GPU run does. The draws equal those of a plain run, so no
    tensor of a run escapes the device's context, and ``device="cpu"`` is the default run."""

    kw = dict(num_samples=40, warmup=40, num_chains=16, jit=True, seed=shifted(4))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", DensityWarning)
        plain = zoo.run("eight_schools_noncentered", engine, **kw)
    if plain.diagnostics["density"] != "compiled":  # seen once: torch 2.11 on a 16-core machine
        pytest.skip(f"this machine's compiler falls back: {[str(w.message) for w in caught]}")
    density_module._CACHE.clear()
    entered = []

    def context(device):
        entered.append(device)
        return device  # torch.device is a context manager: the GPU path, here on the CPU

    monkeypatch.setattr(density_module, "on_device", context)
    monkeypatch.setattr(driver, "on_device", context)
    try:
        run = zoo.run("eight_schools_noncentered", engine, device="cpu", **kw)
    finally:
        density_module._CACHE.clear()
    assert entered and all(d == torch.device("cpu") for d in entered)
    assert run.diagnostics["density"] == "compiled"
    for site in ("mu", "tau", "eta"):
        np.testing.assert_allclose(
            run.idata.posterior[site].values, plain.idata.posterior[site].values, rtol=1e-5
        )


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no GPU")
@pytest.mark.parametrize("engine", ["nuts", "chees", "hmc", "mams", "mh"])
def test_the_samplers_on_a_gpu_match_the_closed_form(engine):
    """On a machine with a GPU: every chain in one batch on the device, the draws within
    Monte-Carlo error of the closed form (CI has no GPU: this runs where one is lent)."""
    e = zoo.get_model("normal_gamma")
    run = zoo.run(
        "normal_gamma", engine, num_samples=300, warmup=300, seed=shifted(2), device="cuda"
    )
    assert run.diagnostics["chain_groups"] == 1
    for site in ("mu", "tau"):
        _agree(run, e.ground_truth(), site)


def test_bad_sampler_options_are_refused():
    with pytest.raises(ValueError, match="unknown option 'backend' for engine 'nuts'"):
        zoo.run("beta_bernoulli", "nuts", backend="stan")
    with pytest.raises(ValueError, match="'chain_groups' must be a positive integer"):
        zoo.run("beta_bernoulli", "nuts", chain_groups=0)
    with pytest.raises(ValueError, match="chain_groups=3 is more groups than 2 chains make"):
        zoo.run("beta_bernoulli", "nuts", num_chains=2, chain_groups=3)
    with pytest.raises(ValueError, match="at 16 chains or more a group; at most 2 here"):
        zoo.run("beta_bernoulli", "chees", num_chains=32, chain_groups=3)
    with pytest.raises(ValueError, match="unknown option 'chain_groups' for engine 'pyro_nuts'"):
        zoo.run("beta_bernoulli", "pyro_nuts", chain_groups=2)
    with pytest.raises(ValueError, match="'jit' must be True, False or None"):
        zoo.run("beta_bernoulli", "chees", jit="yes")


@needs_compiler
@pytest.mark.parametrize(
    "name, dense",
    [("eight_schools_noncentered", False), ("three_coin", False),
     ("eight_schools_noncentered", True)],
    ids=["eight_schools_noncentered", "three_coin", "eight_schools_noncentered-dense"],
)  # fmt: skip
def test_the_fused_compiled_asynchronous_step_takes_the_eager_steps(
    name, dense, monkeypatch, configured
):
    """The asynchronous NUTS step (leaf, subtree merge, draw emission, new trees: one graph)
    fused through the density, compiled or as TorchScript, gives the eager step's draws and
    statistics, under a diagonal metric and under a dense one (each chain its own)."""
    e = zoo.get_model(name)
    runs = []
    for compile_, scripted in ((False, "0"), (False, "1"), (True, "1")):
        configured(uncompiled="torchscript" if scripted == "1" else "fx")  # fx: run eagerly
        density = batched_density(e.model, e.load_data(), e.structure, 3, compile=compile_)
        gen = torch.Generator().manual_seed(5)
        q = density.initial_points(gen)
        logp, grad = density(q)
        step = torch.full((3,), 0.3, dtype=q.dtype)
        metric = torch.ones_like(q)
        if dense:  # 3 chains' own correlated metrics, fixed
            D = q.shape[1]
            a = torch.linspace(-1, 1, 3 * D * D, dtype=q.dtype).reshape(3, D, D)
            metric = 0.5 * torch.eye(D, dtype=q.dtype) + 0.2 * a @ a.mT
        given: list[object] = []  # what the density gives NUTS's step to run

        def fuse(fn, a, given=given, fuse=density.fuse, **kw):  # noqa: ANN001, ANN003, ANN202
            given.append(fuse(fn, a, **kw))
            return given[-1]

        monkeypatch.setattr(density, "fuse", fuse)
        loop = driver.DrivenLoop(density, 8)
        runs.append(nuts_sample(density, q, logp, grad, step, metric, gen, 8, loop=loop))
        monkeypatch.delattr(density, "fuse")
        assert given and all((f is not None) == (scripted == "1") for f in given), density.reasons
    (d0, s0, c0, *_), *others = runs
    for d1, s1, c1, *_ in others:
        assert c0 == c1
        np.testing.assert_allclose(d1, d0, rtol=1e-4, atol=1e-4)
        for k in s0:
            np.testing.assert_allclose(s1[k].double(), s0[k].double(), rtol=1e-3, atol=1e-4)


@pytest.mark.parametrize("name", ["eight_schools_noncentered", "three_coin"])
def test_the_eager_step_skips_only_what_changes_nothing(name, monkeypatch, configured):
    """Run uncompiled, NUTS's step skips the masking that no chain needs in a call (no subtree
    finished, every chain live, no checkpoint written): its draws, statistics and density
    calls are bit for bit those of the branch-free step, warmup included (chains that reach
    their iterations first wait, masked, so the skips meet partly live batches too)."""
    e = zoo.get_model(name)
    density = batched_density(e.model, e.load_data(), e.structure, 4, compile=False)
    configured(uncompiled="fx")  # the step runs eagerly, not as TorchScript
    init = driver.Step.__init__

    def without_eager(self, density, fn, eager=None, **kw):  # noqa: ANN001, ANN003, ANN202
        assert eager is not None  # NUTS gives its step an eager form: left out here
        init(self, density, fn, **kw)

    runs = []
    for patch in (False, True):
        if patch:
            monkeypatch.setattr(driver.Step, "__init__", without_eager)
        gen = torch.Generator().manual_seed(shifted(11))
        theta0 = density.initial_points(gen)
        runs.append(samplers.nuts(density, theta0, num_samples=40, warmup=40, gen=gen))
    eager, plain = runs
    assert torch.equal(eager.theta, plain.theta)
    assert eager.gradient_evals == plain.gradient_evals
    for k in eager.stats:
        assert torch.equal(eager.stats[k], plain.stats[k]), k


def test_asynchronous_nuts_wastes_no_call_and_samples_a_gaussian():
    """Chains do not wait for each other: the density calls equal the largest per-chain count
    of leapfrog steps (not the sum over draws of the batch's longest tree), and the draws of a
    correlated Gaussian have its moments within Monte-Carlo error (per-chain warmup included)."""
    cov = torch.tensor([[1.0, 0.9], [0.9, 1.0]], dtype=torch.float64)
    prec = torch.linalg.inv(cov)

    def density(q):
        return -0.5 * ((q @ prec) * q).sum(-1), -(q @ prec)

    B, n = 8, 400
    gen = torch.Generator().manual_seed(shifted(3))
    q = torch.randn(B, 2, generator=gen, dtype=torch.float64) * 3
    logp, grad = density(q)
    step = torch.full((B,), 0.2, dtype=torch.float64)
    draws, stats, calls, *_ = nuts_sample(
        density, q, logp, grad, step, torch.ones(B, 2, dtype=torch.float64), gen, n
    )
    steps = stats["n_steps"].sum(1)
    assert calls == int(steps.max())  # no warmup: every call advances the slowest chain
    assert calls < 0.8 * stats["n_steps"].max(0).values.sum()  # lockstep would make more
    samples = samplers.nuts(density, q, num_samples=n, warmup=300, gen=gen)
    x = samples.theta.reshape(-1, 2).numpy()
    ess = len(x) / 4  # conservative: NUTS on this target gives about one draw in two
    assert np.all(np.abs(x.mean(0)) < 5 / np.sqrt(ess))
    c = np.cov(x.T)  # sd of a sample covariance: sqrt((s12^2 + s11 s22) / n), variance sqrt(2/n)
    assert abs(c[0, 1] - 0.9) < 5 * np.sqrt(1.81 / ess)
    assert np.all(np.abs(np.diag(c) - 1) < 5 * np.sqrt(2 / ess))


def test_nuts_runs_with_a_warmup_too_short_for_windows():
    """Stan's windows need 20 warmup iterations; fewer adapt the step size only, and the
    draws still follow the posterior: Beta(8, 4)'s mean within 5 Monte-Carlo errors."""
    run = zoo.run(
        "beta_bernoulli", "nuts", num_samples=300, warmup=15, num_chains=1, seed=shifted(0)
    )
    assert run.ok, run.error
    truth = zoo.get_model("beta_bernoulli").ground_truth()
    row = run.summary.loc["p"]
    assert abs(row["mean"] - truth.mean["p"]) < 5 * truth.sd["p"] / np.sqrt(row["ess_bulk"])


def test_chees_adapts_a_short_trajectory_on_a_gaussian():
    """On a Gaussian (sds from 0.1 to 10), once the mass matrix holds the variances, the
    jittered ChEES optimum is a fraction of a period: T 2.4-2.7 at 3.4-3.8 leapfrog steps a
    draw (seeds 0-5). Before the running average and the clipped moves, Adam's raw iterate on
    the noisy gradient wandered: T 4-50, 5.6-63 steps a draw on the same seeds."""
    sd = torch.logspace(-1, 1, 10, dtype=torch.float64)

    def density(q):
        z = q / sd
        return -0.5 * (z * z).sum(-1), -z / sd

    gen = torch.Generator().manual_seed(shifted(5))
    q = torch.randn(16, 10, generator=gen, dtype=torch.float64) * 2
    # the diagonal metric these figures were measured under (dense is the default at D = 10)
    s = samplers.chees(density, q, num_samples=200, warmup=300, gen=gen, dense_mass=False)
    T = s.info["trajectory_length"]
    assert 1.0 < T < 3.5, T
    assert float(s.stats["n_steps"].mean()) < 5
    x = s.theta.reshape(-1, 10) / sd
    ess = len(x) / 4  # conservative
    assert float(x.mean(0).abs().max()) < 5 / np.sqrt(ess)
    assert float((x.var(0) - 1).abs().max()) < 5 * np.sqrt(2 / ess)


def test_chees_metric_windows_leave_out_the_fast_initial_buffer(monkeypatch):
    """ChEES estimates its mass matrix over Stan's slow windows only (75-100 and 100-150 of a
    200-iteration warmup), as the windowed NUTS does: the fast initial buffer holds the
    chains' way in from their starts, and a metric estimated from it is far too wide (the
    figures on naive_bayes are in the commit that made this test)."""
    chees_module = importlib.import_module("zoo_inference.samplers.chees")
    seen: list[int] = []
    estimate = chees_module.regularised_covariance

    def recording(draws: torch.Tensor) -> torch.Tensor:
        seen.append(draws.shape[1])
        return estimate(draws)

    monkeypatch.setattr(chees_module, "regularised_covariance", recording)

    def density(q):
        return -0.5 * (q * q).sum(-1), -q

    gen = torch.Generator().manual_seed(shifted(2))
    q = 30 + torch.randn(16, 2, generator=gen, dtype=torch.float64)  # 30 sds out
    s = samplers.chees(density, q, num_samples=50, warmup=200, gen=gen, dense_mass=True)
    assert seen == [25, 50]
    diag = torch.diagonal(s.state["inv_mass"][0])
    assert bool(((diag > 0.3) & (diag < 3)).all()), diag  # a standard normal's, not the way in


def test_chees_weighs_its_compile_on_the_work_of_its_draws(monkeypatch, configured):
    """ChEES asks the density whether to compile only while it draws, the pace measured from
    the end of warmup: its warmup's first iterations, before the metric settles, cost several
    times the draws. The density's pace restarts where the sampler says."""
    events: list[object] = []

    class Recording:
        def __call__(self, q: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            return -0.5 * (q * q).sum(-1), -q

        def restart_pace(self) -> None:
            events.append("restart")

        def tick(self, iteration: int, total: int) -> None:
            events.append((iteration, total))

    gen = torch.Generator().manual_seed(shifted(0))
    q = torch.randn(8, 2, generator=gen, dtype=torch.float64)
    samplers.chees(Recording(), q, num_samples=30, warmup=40, gen=gen)
    assert events == ["restart", *((i, 30) for i in range(30))]

    d, compiled = _counting(monkeypatch, configured)
    d.start_run(auto_compile=True)
    for it in range(9):  # a second of work an iteration, before the first check: 990 s to go
        d._work += 1.0
        d.tick(it, 1000)
    d.restart_pace()
    for it in range(20):  # then 5 ms an iteration: 5 s to go, not worth a compile
        d._work += 0.005
        d.tick(it, 1000)
    assert not compiled


def _normal_with_a_trap(q):
    """log [N(q; 0, I) + exp(-60) N(q; c, 0.1^2 I)] up to a constant, c = (30, 30): a basin of
    no mass (its peak 60 nats below the mode, 840 nats of wall around it) that a chain started
    in never leaves."""
    c = torch.full_like(q[0], 30.0)
    a, b = -0.5 * (q * q).sum(-1), -60 - 50 * ((q - c) ** 2).sum(-1)
    lp = torch.logaddexp(a, b)
    wa, wb = torch.exp(a - lp)[:, None], torch.exp(b - lp)[:, None]
    return lp, wa * -q + wb * -100 * (q - c)


@pytest.mark.parametrize("restart", [True, False])
def test_chees_restarts_chains_stuck_in_a_basin_of_no_mass(monkeypatch, restart):
    """Half the chains start in the trap. ChEES restarts them where the others are at the first
    window's end, and every draw is the normal's; without restarts (the check that this test can
    fail) they sample the trap to the end."""
    if not restart:
        monkeypatch.setattr(trajectory, "STUCK_NATS", math.inf)
    gen = torch.Generator().manual_seed(shifted(3))
    q = torch.randn(16, 2, generator=gen, dtype=torch.float64) * 0.5
    q[8:] += 30.0
    s = samplers.chees(_normal_with_a_trap, q, num_samples=200, warmup=300, gen=gen)
    x = s.theta.reshape(-1, 2)
    trapped = (x - 30).abs().max(-1).values < 1
    if not restart:
        assert s.info["restarted_chains"] == 0 and int(trapped.sum()) == 8 * 200
        return
    assert s.info["restarted_chains"] >= 8 and not trapped.any()
    ess = len(x) / 4  # conservative
    assert float(x.mean(0).abs().max()) < 5 / np.sqrt(ess)
    assert float((x.var(0) - 1).abs().max()) < 5 * np.sqrt(2 / ess)


def test_stuck_chains_are_those_far_below_the_best():
    lp = torch.tensor([[-3.0, -2.0], [-1.0, -2.0], [-40.0, -41.0], [-torch.inf, -1.0]])
    # the bar at D = 2: 20 + 4 = 24 nats below the best chain's mean (-1.5)
    assert trajectory.stuck_chains(lp, 2).tolist() == [False, False, True, True]
    assert not trajectory.stuck_chains(torch.full((3, 4), -torch.inf), 2).any()


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


# NUTS's trees on :func:`_correlated_gaussian` under the first windows' unit metric reach depth
# 10 (1023 leapfrog steps a draw): the tests cap them at 6, which costs them 4 times less time
NUTS_TEST_DEPTH = {"max_tree_depth": 6}


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


def test_hmc_jitters_its_integration_time_and_its_draws_mix_on_a_gaussian():
    """Static HMC integrates each draw for 2 u T with u from a Halton sequence (mean T). At a
    fixed T the draws of a standard Gaussian came back near the mirror image of their start in
    some directions: on 10 dimensions, 8 chains x 1000 draws, R-hat 1.011-1.042 or tail ESS
    563-1994 at 7 of the seeds 0-7; jittered, R-hat at most 1.004 and tail ESS about 5000."""
    D, chains, draws = 10, 8, 1000
    gen = torch.Generator().manual_seed(shifted(21))
    q = 4 * torch.rand(chains, D, generator=gen, dtype=torch.float64) - 2
    s = samplers.hmc(
        lambda x: (-0.5 * (x * x).sum(-1), -x), q, num_samples=draws, warmup=500, gen=gen
    )
    steps = s.stats["n_steps"]
    assert len(torch.unique(steps)) > 5  # the integration time varies from draw to draw
    posterior = az.convert_to_dataset({"x": s.theta.numpy()})
    assert float(az.rhat(posterior)["x"].max()) < 1.01
    assert float(az.ess(posterior, method="tail")["x"].min()) > chains * draws / 4
    x = s.theta.reshape(-1, D)
    ess = chains * draws / 4  # conservative
    assert float(x.mean(0).abs().max()) < 5 / math.sqrt(ess)
    assert float((x.var(0) - 1).abs().max()) < 5 * math.sqrt(2 / ess)
