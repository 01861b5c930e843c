"""The log-space einsum that sums enumerated sites out of the traced density
(inference.backend.contraction.log_einsum): Pyro's numbers and gradients, in fewer graph nodes."""

from __future__ import annotations

import contextlib

import pytest
import torch
from opt_einsum.backends import dispatch

from zoo.registry import get_model
from zoo_inference.backend import contraction as D
from zoo_inference.density import batched_density
from zoo_inference.discrete import enumerated

NEG = -float("inf")

# (equation, operand shapes): the forms Pyro's contraction gives the zoo's models (pairwise,
# elementwise, scalars, a plate kept), three operands, size-1 dimensions that broadcast, and
# one whose broadcast is too large (Pyro's einsum runs it)
CASES = [
    ("ba,ba->a", [(10, 80), (10, 80)]),
    ("a,ab->b", [(2,), (2, 2)]),
    ("a,ba->b", [(3,), (4, 3)]),
    ("b,b->b", [(2,), (2,)]),
    (",->", [(), ()]),
    ("bca,bca->ac", [(3, 5, 4), (3, 5, 4)]),
    ("ab,bc,cd->ad", [(2, 3), (3, 4), (4, 2)]),
    ("ab,b->a", [(3, 1), (4,)]),
    ("ab,bc->ac", [(60, 60), (60, 60)]),
]


@pytest.mark.parametrize(("equation", "shapes"), CASES, ids=[c[0] for c in CASES])
def test_the_log_einsum_gives_pyros_values_and_gradients(equation, shapes, monkeypatch):
    """Each form is computed by the broadcast sum, except the last, whose broadcast (60^3) is
    too large and goes to Pyro's einsum; either way Pyro's numbers."""
    pyros: list[str] = []
    pyro_einsum = D._pyro_log_einsum
    monkeypatch.setattr(
        D, "_pyro_log_einsum", lambda eq, *ops: pyros.append(eq) or pyro_einsum(eq, *ops)
    )
    gen = torch.Generator().manual_seed(0)
    ops = [torch.randn(s, generator=gen, dtype=torch.float64) * 3 for s in shapes]
    if ops[0].dim() == 2:
        ops[0][0] = NEG  # a row of impossible states: -inf out, no nan in or out
    want_in = [x.clone().requires_grad_(True) for x in ops]
    got_in = [x.clone().requires_grad_(True) for x in ops]
    with D.functional():  # the safe log both use inside the density
        want = pyro_einsum(equation, *want_in)
        got = D.log_einsum(equation, *got_in)
    assert pyros == ([equation] if equation == CASES[-1][0] else [])
    torch.testing.assert_close(got, want)
    finite = torch.isfinite(want)
    w = torch.linspace(0.5, 1.5, want.numel(), dtype=want.dtype).reshape(want.shape)
    (want[finite] * w[finite]).sum().backward()
    (got[finite] * w[finite]).sum().backward()
    for a, b in zip(got_in, want_in, strict=True):
        torch.testing.assert_close(a.grad, b.grad)
        assert not a.grad.isnan().any()


@pytest.mark.parametrize("name", ["hmm", "three_coin", "gaussian_mixture"])
def test_the_density_with_states_summed_out_equals_pyros_own(name):
    """The traced density (its contraction by log_einsum) against Pyro's own potential run as
    Pyro runs it (its own einsum, validation on), chain by chain at fresh points; and the
    contraction's graph is smaller (hmm: 1843 nodes with Pyro's einsum)."""
    e = get_model(name)
    density = batched_density(e.model, e.load_data(), e.structure, 3)
    assert dispatch._cached_funcs.get(("einsum", D._LOG_BACKEND)) is not D.log_einsum
    for x in density._fresh:
        values, _ = density(x)
        for c in range(len(x)):
            want = density.log_density(x[c])
            torch.testing.assert_close(values[c], want, rtol=1e-5, atol=1e-4)
    if name == "hmm":
        assert len(density._graph.graph.nodes) < 1300


def test_svi_sums_the_states_out_by_the_log_einsum_to_pyros_elbo(monkeypatch):
    """Within ``log_contraction`` (as SVI fits), TraceEnum_ELBO's contraction runs through
    log_einsum, and its loss and gradients are those of Pyro's own contraction outside it."""
    import pyro
    from pyro.infer import TraceEnum_ELBO

    from zoo_inference.backend import log_contraction

    e = get_model("hmm")
    data = e.load_data()
    calls: list[str] = []
    einsum = D.log_einsum
    monkeypatch.setattr(D, "log_einsum", lambda eq, *ops: calls.append(eq) or einsum(eq, *ops))

    def loss_and_grads(contracted: bool) -> tuple[torch.Tensor, list[torch.Tensor]]:
        pyro.set_rng_seed(3)
        params = pyro.get_param_store()
        for p in params.values():
            p.grad = None
        elbo = TraceEnum_ELBO(max_plate_nesting=e.structure.max_plate_nesting)
        with log_contraction() if contracted else contextlib.nullcontext():
            loss = elbo.differentiable_loss(enumerated(e.model), e.guide, **data)
        grads = torch.autograd.grad(loss, [p.unconstrained() for p in params.values()])
        return loss, list(grads)

    pyro.clear_param_store()
    pyro.set_rng_seed(0)
    with torch.no_grad():
        pyro.poutine.trace(e.guide).get_trace(**data)  # the guide's parameters, once
    want, want_grads = loss_and_grads(False)
    assert not calls
    got, got_grads = loss_and_grads(True)
    assert len(calls) >= len(data["x"]) - 1  # a contraction a time step, at least
    torch.testing.assert_close(got, want)
    for a, b in zip(got_grads, want_grads, strict=True):
        torch.testing.assert_close(a, b)
    pyro.clear_param_store()
