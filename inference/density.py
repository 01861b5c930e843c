"""One log density for every model, built once: ``theta (chains, D) -> (log p (chains,), grad)``.

``theta`` is a batch of flat vectors on the unconstrained space. For one chain the density is
Pyro's own potential (``pyro.infer.mcmc.util.initialize_model``): every site's ``log_prob`` times
its scale, the transforms' log-Jacobians, and discrete sites summed out by tensor contraction as
Pyro's NUTS does. A batch is evaluated by the fastest form that works on the model, tried in
order (each one checked against the plain per-chain computation at fresh points before it is
used; a form that fails or disagrees is dropped with a warning that says why):

``compiled``  the ``vmap``-ed value-and-gradient traced once into an aten graph by ``make_fx``
              (simplified: :mod:`inference.simplify` folds its constants, drops identities and
              repeats: 107 of 191 nodes kept on eight_schools_noncentered, a call 140 us
              against 260 traced) and compiled by TorchInductor (needs a C compiler); a
              sampler's whole step (leapfrog, density and bookkeeping) can be fused into one
              compiled graph (:meth:`BatchedDensity.fuse`);
``traced``    the same graph, run uncompiled: as TorchScript (``torch.jit.trace`` of the graph,
              run by TorchScript's C++ interpreter: 2-5 times faster a call than the FX
              ``GraphModule``'s Python, no compiler needed), or as the ``GraphModule`` where
              scripting fails or disagrees (``ZOO_TORCHSCRIPT=0`` turns scripting off);
``vmap``      ``torch.func.vmap(torch.func.grad_and_value(f))``, eagerly;
``loop``      one chain at a time, with autograd.

A traced graph bakes in the Python branches the model took at tracing time, like any tracing
JIT; the check at fresh points is what catches a branch on a sampled value. Densities are cached
per model, data, batch size, dtype, device and compile flag within a process. On a GPU
(``device="cuda"``) the data, the model's constants and the graph live on the device, and
"compiled" means inductor's GPU code (Triton); where that is missing the traced graph runs.
"""

from __future__ import annotations

import contextlib
import hashlib
import math
import operator
import os
import shutil
import time
import types
import warnings
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyro
import pyro.ops.einsum.torch_log as torch_log
import torch
from pyro.infer.mcmc.util import initialize_model
from torch.fx.experimental.proxy_tensor import make_fx as _torch_make_fx

from .config import config
from .discrete import enumerated
from .reference import as_dtype
from .results import one_line
from .runtime import default_dtype, on_device
from .simplify import simplify
from .structure import ModelStructure, init_strategy

MODES = ("compiled", "traced", "vmap", "loop")
CPU = torch.device("cpu")
# auto: compile when the traced density would take longer than this over the run (compiling
# costs 0.5-1 s with inductor's on-disk cache warm, a few seconds the first time on a machine)
COMPILE_AFTER_S = 3.0
# ... or when the rest of the run at its pace so far (sampler steps included, which a compiled
# sampler fuses too) would take longer than this. linear_gaussian_ssm's sampled states: the
# density's own time stayed under the first rule while NUTS's eager tree steps (2 ms each, the
# density 0.6 ms of it) ran 310 s in the quick report; compiled by the pace of the run, 82 s.
COMPILE_RUN_AFTER_S = 10.0
# CPU code from inductor is scalar (``cpp.simdlen=1``) for batches under this many rows: at a
# few chains, vector code gains little and generating it is most of a compile. The quick
# report's NUTS steps (4 chains a group), compiled with inductor's cache empty on a 2-core
# machine, took 24 s instead of 33 (naive_bayes), 17 instead of 25 (dirichlet_process_mixture)
# and 44 instead of 64 (hmm), and sampled about as fast (naive_bayes 26 s against 27.5, hmm
# 28.6 against 28.9; the mixture 12% slower, 90.6 s against 80.9). At 16 chains a group vector
# code wins: logistic_regression's ChEES 13.1 s against 17.8 with the cache warm, 21.1 against
# 23.5 with it empty.
VECTORISE_FROM = 16
# ... and only where the compiled run would save more than the compile costs. A compile's cost
# grows with the graph: COMPILE_S + COMPILE_S_PER_NODE a node of the density's graph, and the
# compiled run goes at COMPILED_PACE of the traced one's. Fitted to the quick report's 56
# sampler cells run both ways on a 2-core machine with inductor's cache empty (hmm's NUTS: its
# 2365-node graph compiled in 54.6 s for a 64.5 s cell, 28.1 s traced; linear_regression's
# 187 nodes in 6.3 s for 17.4 s, 40.6 s traced): all compiled, they took 776 s; each in its
# faster form, 636. In the next cold report 7 cells stayed traced and the samplers' cells took
# 808 s against 869; ChEES, whose early warmup iterations are its slowest, now asks from the
# end of warmup (samplers.chees), and no ChEES cell of that report compiles (169 s -> 118).
# A warm cache compiles about five times faster, so there the rule leaves some runs traced
# that would gain.
COMPILE_S, COMPILE_S_PER_NODE, COMPILED_PACE = 2.0, 0.015, 0.35
BARE_COMPILE_AFTER = 300  # compiled mode: density calls outside a fused step before it compiles
# Inductor checks each vector instruction set the CPU reports by compiling and loading a test
# program, once per machine (its compile cache) and per process (the loads): 7 of the 13 s of a
# first compile with that cache empty (HMC's step on eight_schools: 6.2 s without the check),
# even for scalar code. The CPU's own flags are trusted instead (the same AVX-512/AVX2 list here);
# setting this environment variable (0 or 1) gives inductor's own choice back.
VEC_ISA_ENV = "TORCHINDUCTOR_VEC_ISA_OK"
# ZOO_AUTO_COMPILE=0 keeps runs with jit=None on the traced graph (jit=True still compiles). The
# test suite sets it: on a fresh machine, with inductor's cache cold, a model's first compile
# costs 10-20 s, more than a smoke-sized run takes on the traced graph.
AUTO_COMPILE_ENV = "ZOO_AUTO_COMPILE"


class DensityWarning(UserWarning):
    """A faster form of the batched log density was not usable; a slower exact one is used."""


@dataclass(frozen=True)
class Block:
    """One latent site's slice of the flat unconstrained vector."""

    name: str
    shape: tuple[int, ...]  # constrained value
    ushape: tuple[int, ...]  # unconstrained value
    start: int
    stop: int


def _plain_log(x: torch.Tensor) -> torch.Tensor:
    """log(x) with 0 -> log(tiny): Pyro's ``safe_log`` without its custom autograd Function,
    which ``torch.func`` transforms refuse."""
    return x.clamp(min=torch.finfo(x.dtype).tiny).log()


# the most elements a log-space einsum broadcasts its operands to (times the largest operand's)
# before it leaves the contraction to Pyro's own einsum (exp, einsum, log: no broadcast)
BROADCAST_LIMIT = 16


def log_einsum(equation: str, *operands: torch.Tensor) -> torch.Tensor:
    """log of ``einsum(equation, *exp(operands))``, the contraction that sums enumerated sites
    out, as one broadcast sum and a shifted log-sum-exp over the summed dimensions: fewer graph
    nodes than Pyro's (which shifts, exponentiates and permutes each operand, then runs
    ``torch.einsum`` as a batched matrix product): hmm's density 1138 nodes against 1843, a
    call 1.04 ms against 1.54. Pyro's where the equation has an ellipsis, an operand repeats a
    dimension (a diagonal) or the broadcast would hold more than :data:`BROADCAST_LIMIT` times
    the largest operand."""
    inputs, output = equation.split("->")
    terms = inputs.split(",")
    if len(terms) == 1 and terms[0] == output:
        return operands[0].clone()  # as Pyro's: a new tensor
    letters = list(output) + sorted(set(inputs) - set(output) - {","})
    sizes = dict.fromkeys(letters, 1)
    for dims, x in zip(terms, operands, strict=True):
        for d, n in zip(dims, x.shape, strict=True):
            sizes[d] = max(sizes[d], n)
    largest = max(x.numel() for x in operands)
    unsupported = "." in inputs or any(len(set(dims)) < len(dims) for dims in terms)
    if unsupported or math.prod(sizes.values()) > BROADCAST_LIMIT * max(largest, 1):
        return _pyro_log_einsum(equation, *operands)
    total = None
    for dims, x in zip(terms, operands, strict=True):
        order = sorted(range(len(dims)), key=lambda i: letters.index(dims[i]))
        if order != list(range(len(dims))):
            x = x.permute(order)
        placed = "".join(dims[i] for i in order)
        x = x.reshape([x.shape[placed.index(d)] if d in placed else 1 for d in letters])
        total = x if total is None else total + x
    assert total is not None
    summed = tuple(range(len(output), len(letters)))
    if not summed:
        return total
    # shifted by the largest term, clamped: where every term is -inf the result is the dtype's
    # most negative number, as Pyro's, not nan
    shift = total.detach().amax(summed, keepdim=True).clamp(min=torch.finfo(total.dtype).min)
    out = _plain_log((total - shift).exp().sum(summed, keepdim=True)) + shift
    return out.reshape(out.shape[: len(output)])


_pyro_log_einsum = torch_log.einsum
_LOG_BACKEND = "pyro.ops.einsum.torch_log"  # the backend Pyro's LogRing contracts with


@contextlib.contextmanager
def log_contraction() -> Iterator[None]:
    """:func:`log_einsum` in the contractions that sum out enumerated sites, for the block:
    Pyro's ``LogRing`` (the potential of a model with enumerated sites) asks ``opt_einsum`` for
    its backend's functions, which keeps them (replaced there); the ``SampleRing`` of
    ``TraceEnum_ELBO`` calls Pyro's log-space einsum through its module (replaced there). The
    SVI of hmm, 1000 steps of the JIT-compiled ELBO: 4.5 s against 6.6 (gaussian_hmm 5.0
    against 7.1), to the same ELBO."""
    from opt_einsum.backends import dispatch
    from pyro.ops.einsum.util import Tensordot

    keys = [("einsum", _LOG_BACKEND), ("tensordot", _LOG_BACKEND)]
    cached = {k: dispatch._cached_funcs.get(k) for k in keys}
    saved = torch_log.einsum
    dispatch._cached_funcs.update(zip(keys, (log_einsum, Tensordot(log_einsum)), strict=True))
    torch_log.einsum = log_einsum
    try:
        yield
    finally:
        torch_log.einsum = saved
        for k, fn in cached.items():
            if fn is None:
                dispatch._cached_funcs.pop(k, None)
            else:
                dispatch._cached_funcs[k] = fn


@contextlib.contextmanager
def _functional() -> Iterator[None]:
    """Validation off (it branches on values), a ``torch.func``-friendly log and
    :func:`log_einsum` in the contraction (:func:`log_contraction`)."""
    saved = torch_log.safe_log
    torch_log.safe_log = _plain_log
    try:
        with log_contraction(), pyro.validation_enabled(False):
            yield
    finally:
        torch_log.safe_log = saved


Fn = Callable[[torch.Tensor], tuple[torch.Tensor, torch.Tensor]]


class BatchedDensity:
    """log p(y, theta) on the unconstrained space for a batch of chains, and its gradient.

    ``density(theta)`` with ``theta`` shaped ``(chains, dim)`` returns ``(log_p, grad)``, shaped
    ``(chains,)`` and ``(chains, dim)``; a point outside the support gives ``-inf``. ``mode`` says
    which form runs (see the module docstring); ``reasons`` why faster ones were dropped.

    ``batch``: per-chain values of some data arguments, each shaped ``(chains, *shape)`` (the
    shape of that argument in ``data``): chain ``c`` then targets the posterior given its own
    data set, ``{**data, key: batch[key][c]}``. Independent posteriors in one batch: the
    replications of a simulation-based calibration run as the chains of one sampler."""

    def __init__(
        self,
        model: Callable[..., Any],
        data: Mapping[str, Any],
        structure: ModelStructure,
        chains: int,
        *,
        compile: bool = False,
        dtype: torch.dtype = torch.float32,
        device: torch.device = CPU,
        batch: Mapping[str, torch.Tensor] | None = None,
    ) -> None:
        self.chains, self.dtype, self.device = chains, dtype, device
        self.data = {
            k: v.to(device) if isinstance(v, torch.Tensor) else v
            for k, v in as_dtype(data, dtype).items()
        }
        self.batch = {k: v.to(device) for k, v in as_dtype(batch or {}, dtype).items()}
        for k, v in self.batch.items():
            want = (chains, *getattr(self.data.get(k), "shape", ()))
            if k not in self.data or tuple(v.shape) != want:
                raise ValueError(f"batch[{k!r}] must be a data argument shaped {want}")
        self.reasons: dict[str, str] = {}
        target = enumerated(model) if structure.discrete else model
        with _functional(), default_dtype(dtype), on_device(device):
            init, potential, transforms, _ = initialize_model(
                target,
                model_kwargs=self.data,
                max_plate_nesting=structure.max_plate_nesting,
                init_strategy=init_strategy,
            )
        self._potential, self.transforms = potential, transforms
        self._init = init
        blocks, start = [], 0
        for name, value in init.items():
            shape = tuple(transforms[name].inv.forward_shape(value.shape))
            size = int(value.numel())
            blocks.append(Block(name, shape, tuple(value.shape), start, start + size))
            start += size
        self.blocks, self.dim = tuple(blocks), start
        self._graph: Fn | None = None
        self._traced: Fn = self._loop  # the graph as run uncompiled (TorchScript or FX)
        self._fused: dict[tuple[Any, ...], Callable[..., Any] | None] = {}
        self._bare_calls, self._bare_compiled = 0, False
        # the check points, made once: the probe each form is traced and first checked at, and
        # two no form was traced at, far out and near the origin (see _check)
        self._probe = self.random_points(self.generator(0), scale=1.0)
        g = self.generator(1)
        self._fresh = [self.random_points(g, scale=2.0), self.random_points(g, scale=0.3)]
        self._eager_values: dict[int, tuple[torch.Tensor, Any]] = {}
        with on_device(device):  # the model's own constants, traced into the graph
            self.mode, self._fn = self._build(compile)
        self.start_run(auto_compile=False)  # see tick()

    # ----------------------------------------------------------------- the density of one chain
    def unflatten(self, theta: torch.Tensor) -> dict[str, torch.Tensor]:
        """A flat vector (dim,) as the unconstrained value of each site."""
        return {b.name: theta[b.start : b.stop].reshape(b.ushape) for b in self.blocks}

    def log_density(
        self, theta: torch.Tensor, own: Mapping[str, torch.Tensor] | None = None
    ) -> torch.Tensor:
        """log p(y, theta) of one chain's flat unconstrained vector (a scalar); ``own``: that
        chain's values of the batched data arguments."""
        if not own:
            return -self._potential(self.unflatten(theta))
        maker = self._potential.__self__  # Pyro's _PEMaker: the model runs on its model_kwargs
        saved = maker.model_kwargs
        maker.model_kwargs = {**saved, **own}
        try:
            return -self._potential(self.unflatten(theta))
        finally:
            maker.model_kwargs = saved

    def own_data(self, chain: int) -> dict[str, torch.Tensor]:
        """Chain ``chain``'s values of the batched data arguments (empty without a batch)."""
        return {k: v[chain] for k, v in self.batch.items()}

    def flatten(self, values: Mapping[str, torch.Tensor]) -> torch.Tensor:
        """Unconstrained site values of one chain as a flat vector."""
        return torch.cat([values[b.name].reshape(-1) for b in self.blocks]).to(self.dtype)

    # ----------------------------------------------------------------------------- batch forms
    def _loop(
        self, theta: torch.Tensor, *, tolerant: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """One chain at a time with autograd; ``tolerant``: a chain whose density raises (a
        Cholesky factor of a matrix that is not positive definite, ...) gets -inf."""
        values, grads = [], []
        for c, row in enumerate(theta):
            x = row.detach().clone().requires_grad_(True)
            try:
                with torch.enable_grad():
                    lp = self.log_density(x, self.own_data(c))
                    (g,) = torch.autograd.grad(lp, x, allow_unused=True)
            except RuntimeError:
                if not tolerant:
                    raise
                lp, g = torch.tensor(-torch.inf, dtype=x.dtype, device=x.device), None
            values.append(lp.detach())
            grads.append(torch.zeros_like(x) if g is None else g)
        return torch.stack(values), torch.stack(grads)

    def _vmapped(self) -> Fn:
        inner = torch.func.vmap(torch.func.grad_and_value(self.log_density))
        batch = self.batch

        def fn(theta: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            grad, value = inner(theta, batch) if batch else inner(theta)
            return value, grad

        return fn

    def _build(self, compile: bool) -> tuple[str, Fn]:
        probe = self._probe
        eager = self._vmapped()
        try:
            with _functional():
                self._check(self._eager_at, probe, reference=self._loop)
        except Exception as e:  # noqa: BLE001 - any failure means: not vmappable
            self.reasons["vmap"] = one_line(e)
            return "loop", self._loop
        try:
            with _functional():
                # the graph gives what a sampler takes: a point outside the support as -inf
                graph = make_fx(lambda theta: sanitised(*eager(theta)))(probe)
            failed_factor_as_nan(graph)
            simplify(graph)  # also drops what the density does not use (deterministic sites)
            self._graph = graph
            self._check(graph, probe, reference=self._eager_at, fresh=True)
        except Exception as e:  # noqa: BLE001
            self.reasons["traced"] = one_line(e)
            return "vmap", eager
        self._traced = self._scripted(graph, probe)
        if not compile:
            return "traced", self._traced
        return self._to_compiled(graph)

    def _scripted(self, graph: Fn, probe: torch.Tensor) -> Fn:
        """The traced graph as TorchScript, run by its C++ interpreter (2-5 times faster a call
        than the FX graph's Python); the FX graph where scripting fails or disagrees."""
        if not _scripting():
            return graph
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                script = torch.jit.trace(graph, (probe,), check_trace=False)
            self._check(script, probe, reference=graph, fresh=True)
        except Exception as e:  # noqa: BLE001 - the FX graph is always there
            self.reasons["script"] = one_line(e)
            return graph
        return script

    def _to_compiled(self, graph: Fn) -> tuple[str, Fn]:
        """Compiled mode: the samplers' steps are fused through the graph and compiled on their
        first call (:meth:`fuse`); calls of the density itself run the traced graph until there
        have been :data:`BARE_COMPILE_AFTER` of them, then its own compiled form."""
        if not has_compiler():
            self.reasons["compiled"] = "no C compiler found"
            return "traced", self._traced
        self._bare_calls = 0
        return "compiled", self._traced

    def _compile_bare(self) -> None:
        """The density's own compiled form, checked at fresh points (traced where that fails)."""
        assert self._graph is not None
        started = time.perf_counter()
        mode, self._fn = self._compiled(self._graph)
        self.compile_s += time.perf_counter() - started
        self._bare_compiled = True
        if mode != "compiled":
            self.mode = mode
            warnings.warn(
                f"batched log density: the compiled form does not apply "
                f"({self.reasons.get('compiled', 'unknown')}); using the {mode} form",
                DensityWarning,
                stacklevel=3,
            )

    def _compiled(self, graph: Fn) -> tuple[str, Fn]:
        if not has_compiler():
            self.reasons["compiled"] = "no C compiler found"
            return "traced", self._traced
        try:
            probe = self._probe
            compiled = _inductor(graph, [probe], rows=self.chains)
            self._check(compiled, probe, reference=self._eager_at, fresh=True)
        except Exception as e:  # noqa: BLE001
            self.reasons["compiled"] = one_line(e)
            return "traced", self._traced
        return "compiled", compiled

    def fuse(
        self,
        step: Callable[..., tuple[torch.Tensor, ...]],
        args: Sequence[torch.Tensor],
        *,
        reuse_outputs: bool = False,
    ) -> Callable[..., tuple[torch.Tensor, ...]] | None:
        """A sampler's step ``step(density, *args) -> tensors`` (no Python branch on values)
        traced through this density's graph as one function of ``args``, so that the sampler's
        bookkeeping around each density call costs no Python either: compiled by inductor in
        compiled mode, as simplified TorchScript in traced mode (a NUTS call on
        eight_schools_noncentered 0.93-1.04 ms against 1.19-1.46 eagerly). None where the
        density has no graph or the step cannot be fused (the reason is kept in
        ``reasons['fused']``). Built once per mode, step function, argument shapes (a traced
        graph fixes them) and ``reuse_outputs``; checked against the eager step at ``args``.
        ``reuse_outputs``: the caller is done with a call's outputs by the call after next, so
        that a compiled step may write into the buffers of two calls before (:func:`_reusing`:
        eight_schools' NUTS step 21 us a call against 54)."""
        if self._graph is None or self.mode not in ("compiled", "traced"):
            return None
        if self.mode == "traced" and not _scripting():
            return None
        shapes = tuple((a.shape, a.dtype) for a in args)  # a graph fixes them
        key = (self.mode, step, shapes, reuse_outputs)
        if key in self._fused:
            return self._fused[key]
        graph, started = self._graph, time.perf_counter()

        def through_graph(*a: torch.Tensor) -> tuple[torch.Tensor, ...]:
            return step(graph, *a)

        fused: Callable[..., Any] | None
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                # distinct copies: make_fx gives one tensor object passed twice (a subtree's
                # first leaf passes its start as both edge and proposal) one placeholder
                example = [a.clone() for a in args]
                if self.mode == "compiled":
                    fused = _inductor(
                        through_graph, example, rows=self.chains, reuse_outputs=reuse_outputs
                    )
                else:
                    traced = make_fx(through_graph)(*example)
                    simplify(traced)
                    fused = torch.jit.trace(traced, tuple(example), check_trace=False)
                want = through_graph(*args)
                # three calls: each set of reused buffers, then the first again
                for _ in range(3 if reuse_outputs else 1):
                    got = fused(*args)
                    pairs = zip(got, want, strict=True)
                    if not all(_close(a, b) for a, b in pairs if a.is_floating_point()):
                        raise ValueError("the fused step differs from the eager one")
        except Exception as e:  # noqa: BLE001 - the eager step is always there
            self.reasons["fused"] = one_line(e)
            fused = None
        self._fused[key] = fused
        spent = time.perf_counter() - started
        if self.mode == "compiled":
            self.compile_s += spent
        else:  # scripting (a few tenths of a second, seconds for hmm's graph) is not compiling,
            self._started += spent  # nor the run's pace, which decides whether to compile
        return fused

    def start_run(self, *, auto_compile: bool) -> None:
        """A sampler run begins: ``auto_compile`` decides afresh for it (see :meth:`tick`),
        unless the environment turns automatic compiling off (:data:`AUTO_COMPILE_ENV`)."""
        self.auto_compile = auto_compile and config().auto_compile
        self.restart_pace()
        self.compile_s = 0.0  # seconds this run spent tracing and compiling (a warm cache: few)
        self.step_nodes = 0  # what the run's fused sampler step adds to the graph (expect_step)

    def expect_step(self, nodes: int) -> None:
        """The run's sampler fuses a step that adds about ``nodes`` graph nodes to the density's
        own: a compile is priced for both (:meth:`compile_cost_s`)."""
        self.step_nodes = nodes

    def restart_pace(self) -> None:
        """The run's pace is measured afresh from here, and :meth:`tick` counts iterations from
        here: for a sampler whose first iterations say little about the rest (ChEES)."""
        self._spent, self._next_check, self._started = 0.0, 0, time.perf_counter()

    def tick(self, iteration: int, total: int) -> None:
        """Called by a sampler after each iteration. With ``auto_compile``, once 2% of the run
        (at least 10 iterations) is done and again each time the iterations done double, the
        traced graph is compiled when the time its calls took, projected over the whole run,
        exceeds :data:`COMPILE_AFTER_S`, or the rest of the run at its pace so far would take
        more than :data:`COMPILE_RUN_AFTER_S`, and in either case only if the rest of the run
        compiled would save more than the compile costs (:meth:`compile_cost_s`). Asked again
        because the pace changes: NUTS's trees grow as warmup shrinks the step size."""
        if not self.auto_compile or self.mode != "traced" or self._graph is None:
            return
        done = iteration + 1
        if done < max(10, total // 50, self._next_check):
            return
        self._next_check = 2 * done
        rest = (time.perf_counter() - self._started) / done * (total - done)
        calls_ahead = self._spent / done * (total - done)
        if self._spent / done * total > COMPILE_AFTER_S or rest > COMPILE_RUN_AFTER_S:
            saved = max(rest, calls_ahead) * (1 - COMPILED_PACE)
            if saved > self.compile_cost_s():
                self.mode, self._fn = self._to_compiled(self._graph)

    def compile_cost_s(self) -> float:
        """The seconds a compile of this density's sampler step is expected to take with
        inductor's cache empty (see :data:`COMPILE_S_PER_NODE`): the density's graph and the
        nodes the step adds (:meth:`expect_step`)."""
        nodes = len(self._graph.graph.nodes) if isinstance(self._graph, torch.fx.GraphModule) else 0
        return COMPILE_S + COMPILE_S_PER_NODE * (nodes + self.step_nodes)

    def _check(self, fn: Fn, probe: torch.Tensor, *, reference: Fn, fresh: bool = False) -> None:
        """``fn`` equals ``reference`` at the probe and (``fresh``) at points it was not traced
        at; raises ValueError saying where they differ."""
        points = [probe, *self._fresh] if fresh else [probe]
        for x in points:
            with _functional():
                v1, g1 = sanitised(*fn(x))
                v0, g0 = sanitised(*reference(x))
            ok = _close(v1, v0) and _close(g1, g0)
            if not ok:
                raise ValueError(
                    "its values differ from the eager density's at a fresh point (a Python "
                    "branch on a sampled value?)"
                )

    def _eager_at(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The eager vmapped density at a check point, computed once a point (the point is
        kept, so its id stays its own): the reference of every form's check, and half a second a
        call on naive_bayes."""
        if id(x) not in self._eager_values:
            self._eager_values[id(x)] = (x, self._vmapped()(x))
        return self._eager_values[id(x)][1]

    def generator(self, seed: int) -> torch.Generator:
        """A random generator on the density's device, seeded."""
        return torch.Generator(device=self.device).manual_seed(seed)

    def random_points(self, generator: torch.Generator, *, scale: float = 2.0) -> torch.Tensor:
        """Uniform(-scale, scale) on the unconstrained space (Stan's initialisation), a batch."""
        u = torch.rand(
            self.chains, self.dim, generator=generator, dtype=self.dtype, device=self.device
        )
        return (2 * u - 1) * scale

    # ---------------------------------------------------------------------------------- calls
    def __call__(self, theta: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if self.mode == "compiled" and not self._bare_compiled:
            self._bare_calls += 1
            if self._bare_calls > BARE_COMPILE_AFTER:
                self._compile_bare()
        start = time.perf_counter()
        try:
            if self.mode in ("vmap", "loop"):
                with _functional():
                    value, grad = sanitised(*self._fn(theta))
            else:
                value, grad = self._fn(theta)  # the graph sanitises
        except RuntimeError:  # one chain's point breaks the model (a Cholesky, ...): the others
            with _functional():  # are evaluated one at a time, the breaking ones get -inf
                value, grad = sanitised(*self._loop(theta, tolerant=True))
        self._spent += time.perf_counter() - start
        return value.detach(), grad.detach()

    def values(self, theta: torch.Tensor) -> torch.Tensor:
        """log p at any number of points ``(n, dim)``, in batches of ``chains`` through the
        traced graph (the last one padded); -inf outside the support. Not with per-chain
        data (``batch``): a point has no chain, so no data set."""
        if self.batch:
            raise ValueError("values() needs one data set; this density has one per chain")
        out = []
        for chunk in theta.split(self.chains):
            n = len(chunk)
            if n < self.chains:
                chunk = torch.cat([chunk, chunk[:1].expand(self.chains - n, -1)])
            try:
                if self.mode in ("vmap", "loop"):
                    with _functional():
                        value, grad = sanitised(*self._fn(chunk))
                else:
                    value, grad = self._traced(chunk)  # the graph sanitises
            except RuntimeError:
                with _functional():
                    value, grad = sanitised(*self._loop(chunk, tolerant=True))
            out.append(value[:n].detach())
        return torch.cat(out)

    def constrain(self, theta: torch.Tensor) -> dict[str, torch.Tensor]:
        """Constrained site values of a batch ``(n, dim)``: site -> ``(n, *shape)``."""
        out = {}
        for b in self.blocks:
            u = theta[:, b.start : b.stop].reshape((-1, *b.ushape))
            out[b.name] = self.transforms[b.name].inv(u)  # transforms act on the right-most dims
        return out

    def initial_points(self, generator: torch.Generator, *, tries: int = 100) -> torch.Tensor:
        """A start for each chain where the density and its gradient are finite: Uniform(-2, 2)
        on the unconstrained space, redrawn where not; Pyro's initial point (a prior draw or a
        feasible point) for a chain that finds none."""
        theta = self.random_points(generator)
        for _ in range(tries):
            value, _ = self(theta)
            bad = ~torch.isfinite(value)
            if not bad.any():
                return theta
            theta = torch.where(bad[:, None], self.random_points(generator), theta)
        fallback = self.flatten(self._init)
        value, _ = self(theta)
        return torch.where(torch.isfinite(value)[:, None], theta, fallback)


def make_fx(fn: Callable[..., Any], **kwargs: Any) -> Callable[..., torch.fx.GraphModule]:
    """torch's ``make_fx``, with the fake values it records on the graph's nodes all made in one
    fake mode. Left to itself, tracing real tensors makes a fake mode for each node, and a fake
    mode keeps the stack it was made on: a third of a density's build (naive_bayes 0.35 s
    against 0.71, hmm 1.0 against 1.8) and half the objects a report's worker keeps (which the
    garbage collector then walks through again and again)."""
    from torch._guards import TracingContext, tracing
    from torch._subclasses.fake_tensor import FakeTensorMode

    trace = _torch_make_fx(fn, **kwargs)

    def traced(*args: Any) -> torch.fx.GraphModule:
        if TracingContext.try_get() is not None:  # one is set: its fake mode is used
            return trace(*args)
        with tracing(TracingContext(FakeTensorMode(allow_non_fake_inputs=True))):
            return trace(*args)

    return traced


def sanitised(value: torch.Tensor, grad: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """A chain whose log density or gradient is not finite gets -inf and a zero gradient (a
    sampler rejects it), with no Python branch on values."""
    bad = ~torch.isfinite(value) | ~torch.isfinite(grad).all(-1)
    value = torch.where(bad, torch.full_like(value, -torch.inf), value)
    return value, torch.where(bad[:, None], torch.zeros_like(grad), grad)


def failed_factor_as_nan(graph: torch.fx.GraphModule) -> None:
    """Rewrite each ``_linalg_check_errors(info)`` of ``graph`` (a Cholesky, solve or inverse of
    a matrix that is singular or not positive definite raises there) as NaN in that
    factorisation's outputs, for the batch elements whose ``info`` is not 0. The chain's log
    density and gradient become NaN, which :func:`sanitised` turns into a rejected point: what
    the per-chain fallback does after the error, without the error. The check is the graph's one
    side effect; inductor's on-disk cache cannot key a graph that has one (every process then
    compiles anew: 15-30 s for linear_gaussian_ssm)."""
    check = torch.ops.aten._linalg_check_errors.default
    g = graph.graph
    checks = [n for n in g.nodes if n.target is check and n.args[0].target is operator.getitem]
    for node in checks:
        # the factorisation's outputs are unpacked (getitem) before its check, and used after
        info = node.args[0]
        info_shape = info.meta["val"].shape
        with g.inserting_before(node):
            bad = g.call_function(torch.ops.aten.ne.Scalar, (info, 0))
        for out in list(info.args[0].users):
            val = out.meta.get("val")
            if out is info or not isinstance(val, torch.Tensor) or not val.is_floating_point():
                continue
            with g.inserting_before(node):
                shape = [*info_shape, *([1] * (val.ndim - len(info_shape)))]
                mask = g.call_function(torch.ops.aten.view.default, (bad, shape))
                nan = g.call_function(torch.ops.aten.masked_fill.Scalar, (out, mask, math.nan))
            out.replace_all_uses_with(nan, delete_user_cb=lambda user, nan=nan: user is not nan)
        g.erase_node(node)
    if checks:
        g.lint()  # an output used before its check would be used before defined: raises here
        graph.recompile()


def _inductor(
    fn: Callable[..., Any],
    example: list[torch.Tensor],
    *,
    rows: int,
    reuse_outputs: bool = False,
) -> Callable[..., Any]:
    """``fn`` (a function of tensors returning a tuple of them: an aten graph from ``make_fx``,
    or a step through one) compiled by TorchInductor: traced once into aten with inductor's
    decompositions, functionalised, and handed to inductor's graph compiler
    (``compile_fx_inner``) as it is. No TorchDynamo capture and no guards on each call (10 us a
    call against 29 through ``torch.compile``), and no AOT autograd either: it traced the graph
    twice more (its metadata, then its functional form) to find that it needs no gradient:
    a fifth to a quarter of a cold compile (NUTS's step on eight_schools 5.1 s against 6.5, on
    naive_bayes 4.8 against 6.7, on gaussian_hmm 17.1 against 22.5), and the step runs as fast
    or faster (eight_schools 21 us a call against 29). ``rows``: the batch (chains or
    particles) the graph runs; below :data:`VECTORISE_FROM` the CPU code is scalar (see there).
    ``reuse_outputs``: the caller is done with a call's outputs once it makes the call after
    next, so the compiled code may write into the buffers of two calls before
    (:func:`_reusing`), where it can."""
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

    return (_reusing(compiled) if reuse_outputs else None) or call


def _reusing(compiled: Callable[..., Any]) -> Callable[..., tuple[torch.Tensor, ...]] | None:
    """``compiled`` (from inductor's ``compile_fx_inner``) called without its wrapper, writing
    into two sets of buffers in turn; None where its code is not of the form this reads.

    A call of inductor's CPU code runs its kernels in microseconds, and spends tens of them in
    Python around them: the compiled graph's wrapper, then its own code, which allocates every
    buffer afresh (``empty_strided_cpu``) and views into them (``reinterpret_tensor``): on
    eight_schools' NUTS step (one 4-us kernel), 54 us a call. Here the generated function runs
    with its allocations answered from the buffers it made two calls before, with the same views
    of them: 21 us a call. Its outputs are those buffers, so a caller must be done with a call's
    outputs by the call after next (a sampler's state, passed from one step to the next, is).
    Private parts of torch: a version whose code differs gets None (the wrapped call), and
    :meth:`BatchedDensity.fuse` checks what it computes."""
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


def _close(a: torch.Tensor, b: torch.Tensor) -> bool:
    a, b = a.detach().double(), b.detach().double()
    both = torch.isfinite(a) & torch.isfinite(b)
    if not torch.equal(torch.isfinite(a), torch.isfinite(b)):
        return False
    return bool(((a[both] - b[both]).abs() <= 1e-3 * (1 + b[both].abs())).all())


def _scripting() -> bool:
    """Whether uncompiled graphs run as TorchScript (``ZOO_TORCHSCRIPT=0``: as FX graphs, and
    the samplers' steps eagerly)."""
    return config().uncompiled == "torchscript"


def has_compiler() -> bool:
    """A C compiler for torch.compile's CPU backend."""
    return any(shutil.which(c) for c in ("gcc", "cc", "clang", "g++"))


_CACHE: OrderedDict[tuple, BatchedDensity] = OrderedDict()
_CACHE_SIZE = 32


def _fingerprint(data: Mapping[str, Any]) -> str:
    h = hashlib.sha1()
    for k in sorted(data):
        v = data[k]
        h.update(k.encode())
        if isinstance(v, torch.Tensor):
            h.update(str((v.dtype, tuple(v.shape))).encode())
            h.update(np.ascontiguousarray(v.detach().cpu().numpy()).tobytes())
        else:
            h.update(repr(v).encode())
    return h.hexdigest()


def batched_density(
    model: Callable[..., Any],
    data: Mapping[str, Any],
    structure: ModelStructure,
    chains: int,
    *,
    compile: bool = False,
    dtype: torch.dtype = torch.float32,
    device: torch.device = CPU,
    batch: Mapping[str, torch.Tensor] | None = None,
) -> BatchedDensity:
    """The batched density of ``model(**data)`` for ``chains`` chains on ``device`` (``batch``:
    per-chain data, see :class:`BatchedDensity`), built once per process for each model, data,
    batch size, dtype, device and compile flag."""
    key = (model, _fingerprint(data), _fingerprint(batch or {}), chains, dtype, device, compile)
    if key in _CACHE:
        _CACHE.move_to_end(key)
        return _CACHE[key]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        density = BatchedDensity(
            model, data, structure, chains, compile=compile, dtype=dtype, device=device,
            batch=batch,
        )  # fmt: skip
    for form, reason in density.reasons.items():
        if form != "compiled" or compile:
            warnings.warn(
                f"batched log density: the {form} form does not apply ({reason}); using the "
                f"{density.mode} form",
                DensityWarning,
                stacklevel=2,
            )
    _CACHE[key] = density
    while len(_CACHE) > _CACHE_SIZE:
        _CACHE.popitem(last=False)
    return density
