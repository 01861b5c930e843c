"""The compiler behind one door (inference.backend): every private path of torch, Pyro and
opt_einsum is used only on the versions it was verified on, and its fallback (forced here with
``versions.unverified``) gives the same values; no module outside the backend reaches into
those internals."""

from __future__ import annotations

import ast
import re
import warnings
from pathlib import Path

import numpy as np
import pyro
import pyro.distributions as dist
import pyro.ops.einsum.torch_log as torch_log
import pytest
import torch
from torch.distributions import constraints

import zoo
from tests.paths import ROOT
from zoo_inference import backend, inspect_model
from zoo_inference.backend import versions
from zoo_inference.density import BatchedDensity
from zoo_inference.joint import log_joint_draws
from zoo_inference.replay import VectorisationWarning

needs_compiler = pytest.mark.skipif(not backend.has_compiler(), reason="no C compiler")


def _density(name: str, chains: int = 3, **kwargs: object) -> BatchedDensity:
    e = zoo.get_model(name)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return BatchedDensity(e.model, e.load_data(), e.structure, chains, **kwargs)


def _same_values(got: BatchedDensity, want: BatchedDensity, *, rtol: float = 1e-5) -> None:
    for x in [want._probe, *want._fresh]:
        v1, g1 = got(x)
        v0, g0 = want(x)
        torch.testing.assert_close(v1, v0, rtol=rtol, atol=1e-4)
        torch.testing.assert_close(g1, g0, rtol=rtol, atol=1e-4)


def test_every_private_path_is_verified_here_and_refused_outside_its_range():
    """The installed torch, Pyro and opt_einsum are within every path's range (else the suite
    runs the fallbacks); a range that excludes the installed release refuses, saying why."""
    assert [p.name for p in versions.PATHS if not p.usable()] == []
    old = versions.PrivatePath("a path of torch 1", (("torch", (1, 0), (2, 0)),))
    assert not old.usable() and "verified on torch>=1.0,<2.0" in old.reason()
    absent = versions.PrivatePath("x", (("no-such-distribution", (0,), (1,)),))
    assert "not installed" in absent.reason()
    with versions.unverified(versions.SIMPLIFY):
        assert not versions.SIMPLIFY.usable() and versions.INDUCTOR.usable()
    assert versions.SIMPLIFY.usable()


def test_unverified_tracing_and_simplification_give_the_same_density():
    """Without the one-fake-mode wrapper, the simplification and the rewrite of failed
    factorisations, the traced graph is torch's own make_fx's, as traced: larger, same values."""
    want = _density("eight_schools_noncentered")
    paths = (versions.ONE_FAKE_MODE, versions.SIMPLIFY, versions.FAILED_FACTOR)
    with versions.unverified(*paths):
        got = _density("eight_schools_noncentered")
        assert got.mode == want.mode == "traced"
        assert len(got._graph.graph.nodes) > len(want._graph.graph.nodes)
        _same_values(got, want)


def _correlated_pair(y):
    rho = pyro.sample("rho", dist.ImproperUniform(constraints.interval(-2.0, 2.0), (), ()))
    cov = torch.eye(2) + rho * torch.tensor([[0.0, 1.0], [1.0, 0.0]])
    pyro.sample("y", dist.MultivariateNormal(torch.zeros(2), cov), obs=y)


def test_an_unverified_failed_factor_rewrite_keeps_the_check_and_rejects_the_chain():
    """The factorisation's error check stays in the graph: a batch with a failing chain raises
    there and is evaluated chain by chain, to the same values (-inf where it fails)."""
    data = {"y": torch.tensor([0.4, -0.1])}
    s = inspect_model(_correlated_pair, data)
    want = BatchedDensity(_correlated_pair, data, s, 3)
    with versions.unverified(versions.FAILED_FACTOR):
        got = BatchedDensity(_correlated_pair, data, s, 3)
    check = torch.ops.aten._linalg_check_errors.default
    assert any(n.target is check for n in got._graph.graph.nodes)
    assert not any(n.target is check for n in want._graph.graph.nodes)
    theta = want.transforms["rho"](torch.tensor([0.5, 1.5, -0.9]))[:, None]
    (v1, g1), (v0, g0) = got(theta), want(theta)
    assert v1[1] == v0[1] == -torch.inf
    torch.testing.assert_close(v1, v0)
    torch.testing.assert_close(g1, g0)


def test_without_torchscript_the_fx_graph_runs_and_steps_run_eagerly():
    """TorchScript unverified: the traced density runs its FX graph (same values) and a sampler's
    step is not fused (it runs eagerly), with the reason kept."""
    want = _density("eight_schools_noncentered")
    with versions.unverified(versions.TORCHSCRIPT):
        got = _density("eight_schools_noncentered")
        assert isinstance(got._traced, torch.fx.GraphModule)
        assert not isinstance(want._traced, torch.fx.GraphModule)
        _same_values(got, want)
        x = want._probe

        def step(density, theta):  # noqa: ANN001, ANN202
            value, grad = density(theta)
            return theta + 0.1 * grad, value

        assert got.fuse(step, (x,)) is None and "TorchScript" in got.reasons["fused"]
    assert want.fuse(step, (x,)) is not None


def test_without_inductor_a_compiled_density_stays_on_the_traced_graph():
    """Inductor unverified: a density asked to compile keeps the traced graph (TorchScript) and
    says why; its values are the traced density's."""
    want = _density("eight_schools_noncentered")
    with versions.unverified(versions.INDUCTOR):
        with pytest.raises(RuntimeError, match="inductor's graph compiler"):
            backend.inductor(lambda x: (x.sin(),), [torch.ones(2, 2)], rows=2)
        got = _density("eight_schools_noncentered", compile=True)
        assert got.mode == "traced" and "inductor" in got.reasons["compiled"]
        mode, fn = got._compiled(got._graph)
        assert mode == "traced" and fn is got._traced
        _same_values(got, want)


@needs_compiler
def test_without_buffer_reuse_the_compiled_step_is_inductors_wrapped_call():
    """Buffer reuse unverified: the compiled function is inductor's own call, with fresh outputs
    each call and the same values."""
    x = torch.linspace(-1, 1, 6).reshape(3, 2)
    reused = backend.inductor(lambda x: (x.sin() * 3,), [x], rows=3, reuse_outputs=True)
    with versions.unverified(versions.BUFFER_REUSE):
        plain = backend.inductor(lambda x: (x.sin() * 3,), [x], rows=3, reuse_outputs=True)
    assert plain(x)[0] is not plain(x)[0]
    first = reused(x)[0]
    reused(x)
    assert reused(x)[0] is first  # the buffers of two calls before
    torch.testing.assert_close(plain(x)[0], reused(x)[0])


def test_without_the_log_einsum_pyros_contraction_gives_the_same_density():
    """Pyro (or opt_einsum) unverified: Pyro's own einsum and safe log run, unpatched; the
    vmapped density then meets Pyro's custom autograd log and the density takes the per-chain
    form, with the same values."""
    want = _density("three_coin")
    with versions.unverified(versions.LOG_EINSUM):
        with backend.functional():
            assert torch_log.einsum is not backend.log_einsum
            assert torch_log.safe_log is not backend.contraction.plain_log
        got = _density("three_coin")
        assert got.mode == "loop" and "vmap" in got.reasons
        _same_values(got, want)
    with backend.functional():
        assert torch_log.einsum is backend.log_einsum


def test_without_pyros_model_factors_the_log_joint_is_summed_per_draw():
    """TraceEnum_ELBO's factors unverified: the log joint of many draws with discrete sites
    summed out is computed one draw at a time (with a warning), to the same numbers."""
    e = zoo.get_model("three_coin")
    data = e.load_data()
    torch.manual_seed(0)
    draws = {k: torch.rand((5, *e.structure.shapes[k])) * 0.8 + 0.1 for k in e.structure.continuous}
    want = log_joint_draws(e.model, data, draws, e.structure)
    with versions.unverified(versions.MODEL_FACTORS), pytest.warns(VectorisationWarning):
        got = log_joint_draws(e.model, data, draws, e.structure)
    np.testing.assert_allclose(got, want, rtol=1e-6)


def test_without_the_potentials_internals_per_chain_data_is_refused():
    """Per-chain data needs Pyro's potential internals: unverified, the density refuses to build
    (a simulation-based calibration then runs its replications one at a time)."""
    e = zoo.get_model("beta_bernoulli")
    data = e.load_data()
    batch = {k: torch.stack([v, v]) for k, v in data.items() if isinstance(v, torch.Tensor)}
    BatchedDensity(e.model, data, e.structure, 2, batch=batch)
    with versions.unverified(versions.POTENTIAL_DATA), pytest.raises(RuntimeError, match="Pyro"):
        BatchedDensity(e.model, data, e.structure, 2, batch=batch)


PRIVATE = re.compile(
    r"torch\._(?!_)|torch\.jit|_compute_model_factors|opt_einsum|_pyro_dims|torch_log\."
    r"|from (?:torch|pyro)[\w.]* import _\w|import (?:torch|pyro)[\w.]*\._\w"
)


def _code(path: Path) -> str:
    """The module's code without its docstrings and comments."""
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr):
            if isinstance(body[0].value, ast.Constant) and isinstance(body[0].value.value, str):
                node.body = body[1:] or [ast.Pass()]
    return ast.unparse(tree)


def test_no_module_outside_the_backend_uses_private_internals():
    """inference/ (but its backend), zoo/ and reports/ use no private name of torch or Pyro, no
    TorchScript and patch no library module."""
    offending = []
    for folder in ("inference", "zoo", "reports"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            if path.is_relative_to(ROOT / "inference" / "backend"):
                continue
            found = PRIVATE.findall(_code(path))
            if found:
                offending.append(f"{path.relative_to(ROOT)}: {sorted(set(found))}")
    assert offending == []


def test_without_torchscript_svi_takes_the_plain_elbo_to_the_same_loss():
    """Pyro's JIT-compiled ELBOs are TorchScript: unverified, the plain ELBO, with the same
    loss."""
    from pyro.infer import JitTrace_ELBO, Trace_ELBO

    from zoo_inference.svi import make_elbo

    e = zoo.get_model("beta_bernoulli")
    data = e.load_data()
    jitted = make_elbo("trace", num_particles=1, max_plate_nesting=1, jit=True)
    with versions.unverified(versions.TORCHSCRIPT):
        plain = make_elbo("trace", num_particles=1, max_plate_nesting=1, jit=True)
    assert isinstance(jitted, JitTrace_ELBO) and type(plain) is Trace_ELBO

    def loss(elbo):  # noqa: ANN001, ANN202
        pyro.clear_param_store()
        pyro.set_rng_seed(0)
        return elbo.loss(e.model, e.guide, **data)

    assert loss(plain) == pytest.approx(loss(jitted), rel=1e-6)
