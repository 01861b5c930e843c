"""Running a traced aten graph fast: compiled by TorchInductor (:func:`inductor`, with the
generated code's buffers reused where the caller allows: :func:`reusing`), or uncompiled as
TorchScript (:func:`script`; Pyro's TorchScript ELBOs: :func:`jit_elbo`). Each falls back where
torch is not a version it was verified on: :func:`inductor` raises (the caller keeps the
uncompiled graph), :func:`reusing` gives the wrapped call, :func:`script` raises (the caller
keeps the FX graph), :func:`jit_elbo` gives None (the caller takes the plain ELBO)."""

from __future__ import annotations

import os
import shutil
import sys
import types
import warnings
from collections.abc import Callable
from typing import Any

import torch

from ..config import config
from .tracing import make_fx
from .versions import BUFFER_REUSE, INDUCTOR, TORCHSCRIPT

# CPU code from inductor is scalar (``cpp.simdlen=1``) for batches under this many rows: at a
# few chains vector code gains little and generating it is most of a compile; from 16 it wins.
VECTORISE_FROM = 16
# Inductor checks each vector instruction set the CPU reports by compiling and loading a test
# program, once per machine (its compile cache) and per process (the loads): most of a first
# compile with that cache empty, even for scalar code. The CPU's own flags are trusted instead
# (the same AVX-512/AVX2 list here); setting this environment variable (0 or 1) gives
# inductor's own choice back.
VEC_ISA_ENV = "TORCHINDUCTOR_VEC_ISA_OK"


def has_compiler() -> bool:
    """A C compiler for inductor's CPU code."""
    return any(shutil.which(c) for c in ("gcc", "cc", "clang", "g++"))


def cannot_compile() -> str:
    """Why inductor cannot compile here ("" when it can): no C compiler, or a torch outside the
    versions its use was verified on."""
    if not has_compiler():
        return "no C compiler found"
    return INDUCTOR.reason()


def scripting() -> bool:
    """Whether uncompiled graphs run as TorchScript (``zoo.configure(uncompiled="fx")``: as FX
    graphs, and the samplers' steps eagerly)."""
    return config().uncompiled == "torchscript"


def script(graph: torch.fx.GraphModule, example: tuple[torch.Tensor, ...]) -> Callable[..., Any]:
    """``graph`` as TorchScript (``torch.jit.trace``), run by its C++ interpreter: faster a
    call than the FX graph's Python or ``torch.compile``'s lightest backend
    (benchmarks/uncompiled_forms.py measures them). Raises where torch
    is outside the versions it was verified on (torch 2.14 deprecates it, with a FutureWarning
    silenced here); the caller keeps the FX graph."""
    if not TORCHSCRIPT.usable():
        raise RuntimeError(TORCHSCRIPT.reason())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return torch.jit.trace(graph, example, check_trace=False)


def jit_elbo(name: str, **kwargs: Any) -> Any:
    """Pyro's TorchScript-compiled ELBO ``name`` (``trace``, ``meanfield``, ``enum`` or
    ``graph``), its tracer's warnings off; None where TorchScript is unverified (the caller takes
    the plain ELBO: the same loss, uncompiled)."""
    if not TORCHSCRIPT.usable():
        return None
    from pyro import infer

    jitted: dict[str, Callable[..., Any]] = {
        "trace": infer.JitTrace_ELBO,
        "meanfield": infer.JitTraceMeanField_ELBO,
        "enum": infer.JitTraceEnum_ELBO,
        "graph": infer.JitTraceGraph_ELBO,
    }
    return jitted[name](**kwargs, ignore_jit_warnings=True)


def inductor(
    fn: Callable[..., Any],
    example: list[torch.Tensor],
    *,
    rows: int,
    reuse_outputs: bool = False,
) -> Callable[..., tuple[torch.Tensor, ...]]:
    """``fn`` (a function of tensors returning a tuple of them: an aten graph from ``make_fx``,
    or a step through one) compiled by TorchInductor: traced once into aten with inductor's
    decompositions, functionalised, and handed to inductor's graph compiler
    (``compile_fx_inner``) as it is. No TorchDynamo capture and no guards on each call, and no
    AOT autograd either: it traced the graph twice more (its metadata, then its functional form) to
    find that it needs no gradient, a large share of a cold compile. ``rows``: the batch (chains or
    particles) the graph runs; below :data:`VECTORISE_FROM` the CPU code is scalar (see there).
    ``reuse_outputs``: the caller is done with a call's outputs once it makes the call after
    next, so the compiled code may write into the buffers of two calls before
    (:func:`reusing`), where it can. Raises RuntimeError where torch is unverified."""
    if not INDUCTOR.usable():
        raise RuntimeError(INDUCTOR.reason())
    import torch._inductor
    import torch._inductor.compile_fx as compile_fx
    from torch._guards import TracingContext, tracing
    from torch._inductor.decomposition import select_decomp_table
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.symbolic_shapes import ShapeEnv

    functional = torch.func.functionalize(fn, remove="mutations")
    graph = make_fx(functional, decomposition_table=select_decomp_table())(*example)
    # a fake mode with a shape environment (static shapes: no symbols in it) lets inductor's
    # on-disk FX graph cache key the graph; without one every process compiles afresh
    fake = FakeTensorMode(allow_non_fake_inputs=True, shape_env=ShapeEnv())
    options: dict[str, Any] = {"cpp.simdlen": None if rows >= VECTORISE_FROM else 1}
    if VEC_ISA_ENV not in os.environ:
        options["cpp.vec_isa_ok"] = True  # see VEC_ISA_ENV
    with tracing(TracingContext(fake)), torch._inductor.config.patch(options):
        compiled = compile_fx.compile_fx_inner(graph, list(example), is_inference=True)

    def call(*args: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return tuple(compiled(list(args)))

    return (reusing(compiled) if reuse_outputs else None) or call


def reusing(compiled: Callable[..., Any]) -> Callable[..., tuple[torch.Tensor, ...]] | None:
    """``compiled`` (from inductor's ``compile_fx_inner``) called without its wrapper, writing
    into two sets of buffers in turn; None where its code is not of the form this reads or torch
    is unverified.

    A call of inductor's CPU code runs its kernels in microseconds, and spends tens of them in
    Python around them: the compiled graph's wrapper, then its own code, which allocates every
    buffer afresh (``empty_strided_cpu``) and views into them (``reinterpret_tensor``). Here the
    generated function runs with its allocations answered from the buffers it made two calls
    before, with the same views of them: a compiled NUTS step's call with and without is in
    benchmarks/results/private_paths.md. Its outputs are those buffers, so a caller must be done
    with a call's outputs by the call after next (a sampler's state, passed from one step to the
    next, is).
    :meth:`zoo_inference.density.BatchedDensity.fuse` checks what it computes."""
    if not BUFFER_REUSE.usable():
        return None
    module_call = getattr(compiled, "current_callable", None)
    func, runner = getattr(module_call, "__func__", None), getattr(module_call, "__self__", None)
    if func is None or func.__closure__ or getattr(runner, "partitions", True):
        return None
    if getattr(compiled, "mutated_inputs", True):  # inputs it writes: the wrapper copies back
        return None
    glb = func.__globals__
    alloc, view = glb.get("empty_strided_cpu"), glb.get("reinterpret_tensor")
    if alloc is None or view is None:
        return None
    buffers: tuple[list[torch.Tensor], list[torch.Tensor]] = ([], [])
    views: tuple[list[tuple[torch.Tensor, torch.Tensor]], ...] = ([], [])
    turn, made, viewed = [1], [0], [0]  # the set in use; its buffers and views handed out

    def pooled_alloc(size: Any, stride: Any, dtype: torch.dtype) -> torch.Tensor:
        pool, i = buffers[turn[0]], made[0]
        made[0] = i + 1
        if i == len(pool):
            pool.append(alloc(size, stride, dtype))
        return pool[i]

    def pooled_view(base: torch.Tensor, size: Any, stride: Any, offset: int) -> torch.Tensor:
        pool, i = views[turn[0]], viewed[0]
        viewed[0] = i + 1
        if i < len(pool) and pool[i][0] is base:  # a view of an input is made afresh
            return pool[i][1]
        v = view(base, size, stride, offset)
        if i == len(pool):
            pool.append((base, v))
        else:
            pool[i] = (base, v)
        return v

    names = {"empty_strided_cpu": pooled_alloc, "reinterpret_tensor": pooled_view}
    code = types.FunctionType(func.__code__, {**glb, **names}, func.__name__, func.__defaults__)

    def call(*args: torch.Tensor) -> tuple[torch.Tensor, ...]:
        turn[0] = 1 - turn[0]
        made[0] = viewed[0] = 0
        return tuple(code(runner, list(args)))

    return call


def compile_in_this_process() -> None:
    """Inductor compiles in the calling process, synchronously: in a forked worker the parent's
    compile thread pool did not survive the fork (its futures never complete)."""
    os.environ["TORCHINDUCTOR_COMPILE_THREADS"] = "1"
    config: Any = sys.modules.get("torch._inductor.config")  # already imported: set it there too
    if config is not None and INDUCTOR.usable():
        config.compile_threads = 1
