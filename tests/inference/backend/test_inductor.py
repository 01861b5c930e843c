"""Inductor as the backend drives it (zoo_inference.backend.compile, tracing): one fake mode for
a traced graph's nodes, scalar CPU code for small batches, the CPU's own instruction sets."""

from __future__ import annotations

import pytest
import torch
from torch.fx.experimental.proxy_tensor import make_fx

import zoo
import zoo_inference.backend as backend
from tests.sampling import needs_compiler
from zoo_inference.density import batched_density


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
