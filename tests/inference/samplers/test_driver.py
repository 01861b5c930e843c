"""The driver (zoo_inference.samplers.driver) and a kernel's loop: fused compiled steps take the
eager steps, buffers reused two calls on, only the driver knows about compiling, a new kernel
from the parts samples a Gaussian, the device context."""

from __future__ import annotations

import ast
import inspect
import math
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch

import zoo
from tests.sampling import agree, needs_compiler
from tests.seeding import shifted
from zoo_inference import density as density_module
from zoo_inference import samplers
from zoo_inference.density import DensityWarning, batched_density
from zoo_inference.samplers import driver, integrator, windows
from zoo_inference.samplers.hmc import transition as hmc_transition
from zoo_inference.samplers.nuts import nuts_sample


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
        agree(run, e.ground_truth(), site)


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
