"""The traced density's graph simplification (inference.backend.simplify): fewer nodes, the same
numbers, and nothing folded that must be computed afresh on each call."""

from __future__ import annotations

import torch
from torch.fx.experimental.proxy_tensor import make_fx

from zoo.registry import get_model
from zoo_inference import density as D
from zoo_inference.backend import functional, simplify

aten = torch.ops.aten


def _ops(gm: torch.fx.GraphModule) -> list[object]:
    return [n.target for n in gm.graph.nodes if n.op == "call_function"]


def test_constants_identities_and_repeats_go_and_the_values_stay():
    scale = torch.tensor([2.0, 3.0, 4.0])

    def f(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        s = torch.log(scale) * 2  # constant: computed once
        y = -((-(x * 1.0 + 0.0)) ** 1.0).permute(0, 1)  # identities
        z = torch.exp(y) + torch.exp(y)  # a repeat
        g = torch.ones_like(x).neg().neg()  # a fill of a fixed shape
        return (z - s).sum(-1), g * z

    x = torch.randn(4, 3)
    gm = make_fx(f)(x)
    before = len(gm.graph.nodes)
    removed = simplify(gm)
    assert removed == before - len(gm.graph.nodes) > 0
    ops = _ops(gm)
    assert aten.log.default not in ops  # folded
    assert aten.neg.default not in ops and aten.pow.Tensor_Scalar not in ops  # identities
    assert aten.permute.default not in ops
    assert ops.count(aten.exp.default) == 1  # merged
    for a, b in zip(gm(x), f(x), strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


def test_what_an_in_place_write_touches_is_computed_afresh_each_call():
    base = torch.tensor([1.0, 2.0, 3.0])

    def f(x: torch.Tensor) -> torch.Tensor:
        c = base.clone()  # a copy of a constant, then written in place through a view
        c.view(3).masked_fill_(x[0] > 0, -1.0)
        d = base.clone()  # the same expression, not written: must not share c's storage
        return c + d + x

    x = torch.tensor([1.0, 0.0, 0.0])
    gm = make_fx(f)(x)
    simplify(gm)
    assert aten.masked_fill_.Scalar in _ops(gm)
    torch.testing.assert_close(gm(x), f(x))
    y = -x  # the mask is off now: a folded, once-written constant would still say -1
    torch.testing.assert_close(gm(y), f(y))
    torch.testing.assert_close(gm(x), f(x))


def test_random_operations_are_neither_folded_nor_merged():
    def f(x: torch.Tensor) -> torch.Tensor:
        return x + torch.rand(3) - torch.rand(3)

    gm = make_fx(f)(torch.zeros(3))
    simplify(gm)
    assert _ops(gm).count(aten.rand.default) == 2
    assert not torch.equal(gm(torch.zeros(3)), gm(torch.zeros(3)))


def test_a_model_density_graph_shrinks_and_keeps_its_values():
    entry = get_model("eight_schools_noncentered")
    dens = D.BatchedDensity(entry.model, entry.load_data(), entry.structure, 4)
    kept = len(dens._graph.graph.nodes)
    raw = make_fx(lambda t: D.sanitised(*dens._vmapped()(t)))
    with functional():
        unsimplified = len(raw(dens._probe).graph.nodes)
    assert kept < 0.7 * unsimplified  # 107 of 191 nodes kept when written
    for x in dens._fresh:
        with functional():
            want = dens._loop(x)
        for a, b in zip(dens(x), want, strict=True):
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)


def test_a_constant_the_graph_returns_is_a_fresh_tensor_each_call():
    """A returned value that folds to a constant is still computed on each call (from folded
    inputs): a caller that writes into it does not change what the next call returns."""
    base = torch.tensor([1.0, 2.0, 3.0])

    def f(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return x + 1, torch.log(base) * 2

    x = torch.zeros(3)
    gm = make_fx(f)(x)
    simplify(gm)
    assert aten.log.default not in _ops(gm)  # the input of the returned product is folded
    first = gm(x)[1]
    first.fill_(0.0)
    torch.testing.assert_close(gm(x)[1], torch.log(base) * 2)


def test_reads_around_an_in_place_write_are_not_merged_nor_its_parts_folded():
    """Two equal reads of a tensor, one before and one after an in-place write into one of its
    parts (an unbind's), are two values; the copy written into is made afresh each call."""
    base = torch.tensor([[1.0, 2.0], [3.0, 4.0]])

    def f(x: torch.Tensor) -> torch.Tensor:
        c = base.clone()
        before = c.sum()
        c.unbind(0)[0].masked_fill_(x[0] > 0, 10.0)
        after = c.sum()
        return x + before * 100 + after

    x = torch.tensor([1.0, 1.0])
    gm = make_fx(f)(x)
    simplify(gm)
    for point in (x, -x, x):
        torch.testing.assert_close(gm(point), f(point))
