"""One log density for every model, built once: ``theta (chains, D) -> (log p (chains,), grad)``.

``theta`` is a batch of flat vectors on the unconstrained space. For one chain the density is
Pyro's own potential (``pyro.infer.mcmc.util.initialize_model``): every site's ``log_prob`` times
its scale, the transforms' log-Jacobians, and discrete sites summed out by tensor contraction as
Pyro's NUTS does. A batch is evaluated by the fastest form that works on the model, tried in
order (each one checked against the plain per-chain computation at fresh points before it is
used; a form that fails or disagrees is dropped with a warning that says why):

``compiled``  the ``vmap``-ed value-and-gradient traced once into an aten graph by ``make_fx``
              (simplified: :mod:`zoo_inference.backend.simplify` folds its constants, drops
              identities and repeats) and compiled by TorchInductor (needs a C compiler); a
              sampler's whole step (leapfrog, density and bookkeeping) can be fused into one
              compiled graph (:meth:`BatchedDensity.fuse`);
``traced``    the same graph, run uncompiled: as TorchScript (:func:`zoo_inference.backend.script`,
              run by TorchScript's C++ interpreter: faster a call than the FX
              ``GraphModule``'s Python or ``torch.compile``'s lightest backend, no compiler
              needed: benchmarks/uncompiled_forms.py), or as the ``GraphModule`` where
              scripting fails, disagrees or torch is outside the versions it was verified on
              (``zoo.configure(uncompiled="fx")`` turns scripting off);
``vmap``      ``torch.func.vmap(torch.func.grad_and_value(f))``, eagerly;
``loop``      one chain at a time, with autograd.

A traced graph bakes in the Python branches the model took at tracing time, like any tracing
JIT; the check at fresh points is what catches a branch on a sampled value. Densities are cached
per model, data, batch size, dtype, device and compile flag within a process. On a GPU
(``device="cuda"``) the data, the model's constants and the graph live on the device, and
"compiled" means inductor's GPU code (Triton); where that is missing the traced graph runs.
"""

from __future__ import annotations

import hashlib
import time
import warnings
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

import numpy as np
import torch
from pyro.infer.mcmc.util import initialize_model

from .backend import (
    cannot_compile,
    check_per_chain_data,
    failed_factor_as_nan,
    functional,
    inductor,
    make_fx,
    policy,
    potential_with,
    script,
    scripting,
    simplify,
)
from .discrete import enumerated
from .reference import as_dtype
from .results import one_line
from .runtime import default_dtype, on_device, untouched_generators
from .structure import ModelStructure, init_strategy

MODES = ("compiled", "traced", "vmap", "loop")
CPU = torch.device("cpu")


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

    _work: float  # the modelled seconds of graph calls since the pace last restarted

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
        if self.batch:
            check_per_chain_data()
        self.reasons: dict[str, str] = {}
        target = enumerated(model) if structure.discrete else model
        with functional(), default_dtype(dtype), on_device(device):
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
        self._graph: torch.fx.GraphModule | None = None
        self._traced: Fn = self._loop  # the graph as run uncompiled (TorchScript or FX)
        self._fused: dict[tuple[Any, ...], Callable[..., Any] | None] = {}
        self._bare_calls, self._bare_compiled = 0, False
        # the check points, made once: the probe each form is traced and first checked at, and
        # two no form was traced at, far out and near the origin (see _check)
        self._probe = self.random_points(self.generator(0), scale=1.0)
        g = self.generator(1)
        self._fresh = [self.random_points(g, scale=2.0), self.random_points(g, scale=0.3)]
        self._eager_values: dict[int, tuple[torch.Tensor, Any]] = {}
        self._call_s = 0.0  # the modelled seconds of a call of the traced graph (policy)
        self._bare: tuple[str, Fn] | None = None  # compiled mode: the density's own compiled form
        with on_device(device):  # the model's own constants, traced into the graph
            self.mode, self._fn = self._build(compile)
        if isinstance(self._graph, torch.fx.GraphModule):
            self._call_s = policy.call_seconds(self._graph)
        self._built = (self.mode, self._fn)  # what every run starts from (start_run)
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
        return -potential_with(self._potential, self.unflatten(theta), own)

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
            with functional():
                self._check(self._eager_at, probe, reference=self._loop)
        except Exception as e:  # noqa: BLE001 - any failure means: not vmappable
            self.reasons["vmap"] = one_line(e)
            return "loop", self._loop
        try:
            with functional():
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

    def _scripted(self, graph: torch.fx.GraphModule, probe: torch.Tensor) -> Fn:
        """The traced graph as TorchScript (:func:`zoo_inference.backend.script`); the FX graph
        where scripting is off, fails or disagrees."""
        if not scripting():
            return graph
        try:
            scripted = script(graph, (probe,))
            self._check(scripted, probe, reference=graph, fresh=True)
        except Exception as e:  # noqa: BLE001 - the FX graph is always there
            self.reasons["script"] = one_line(e)
            return graph
        return scripted

    def _to_compiled(self, graph: torch.fx.GraphModule) -> tuple[str, Fn]:
        """Compiled mode: the samplers' steps are fused through the graph and compiled on their
        first call (:meth:`fuse`); calls of the density itself run the traced graph until there
        have been ``policy.BARE_COMPILE_AFTER`` of them, then its own compiled form."""
        if reason := cannot_compile():
            self.reasons["compiled"] = reason
            return "traced", self._traced
        self._bare_calls = 0
        return "compiled", self._traced

    def _compile_bare(self) -> None:
        """The density's own compiled form, checked at fresh points (traced where that fails),
        made once and kept for later runs."""
        assert self._graph is not None
        self._bare_compiled = True
        if self._bare is not None:
            self.mode, self._fn = self._bare
            return
        started = time.perf_counter()
        mode, self._fn = self._bare = self._compiled(self._graph)
        self.compile_s += time.perf_counter() - started
        if mode != "compiled":
            self.mode = mode
            warnings.warn(
                f"batched log density: the compiled form does not apply "
                f"({self.reasons.get('compiled', 'unknown')}); using the {mode} form",
                DensityWarning,
                stacklevel=3,
            )

    def _compiled(self, graph: torch.fx.GraphModule) -> tuple[str, Fn]:
        if reason := cannot_compile():
            self.reasons["compiled"] = reason
            return "traced", self._traced
        try:
            probe = self._probe
            # the graph's own function of theta: (log density, gradient)
            compiled = cast(Fn, inductor(graph, [probe], rows=self.chains))
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
        compiled mode, as simplified TorchScript in traced mode. None where the
        density has no graph or the step cannot be fused (the reason is kept in
        ``reasons['fused']``). Built once per mode, step function, argument shapes (a traced
        graph fixes them) and ``reuse_outputs``; checked against the eager step at ``args``.
        ``reuse_outputs``: the caller is done with a call's outputs by the call after next, so
        that a compiled step may write into the buffers of two calls before
        (:func:`zoo_inference.backend.reusing`: no allocation a call)."""
        if self._graph is None or self.mode not in ("compiled", "traced"):
            return None
        if self.mode == "traced" and not scripting():
            return None
        shapes = tuple((a.shape, a.dtype) for a in args)  # a graph fixes them
        key = (self.mode, step, shapes, reuse_outputs)
        if key in self._fused:
            return self._fused[key]
        graph, started = self._graph, time.perf_counter()

        def through_graph(*a: torch.Tensor) -> tuple[torch.Tensor, ...]:
            return step(graph, *a)

        fused: Callable[..., Any] | None
        work = self._work  # the checks below are not the run's work: only a first build runs them
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                # distinct copies: make_fx gives one tensor object passed twice (a subtree's
                # first leaf passes its start as both edge and proposal) one placeholder
                example = [a.clone() for a in args]
                if self.mode == "compiled":
                    fused = inductor(
                        through_graph, example, rows=self.chains, reuse_outputs=reuse_outputs
                    )
                else:
                    traced = make_fx(through_graph)(*example)
                    simplify(traced)
                    fused = self._counted(script(traced, tuple(example)), traced)
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
        self._work = work
        self._fused[key] = fused
        if self.mode == "compiled":  # scripting (a few tenths of a second) is not compiling
            self.compile_s += time.perf_counter() - started
        return fused

    def _counted(self, fn: Callable[..., Any], graph: torch.fx.GraphModule) -> Callable[..., Any]:
        """``fn``, the scripted form of ``graph``, adding the graph's modelled seconds to the
        run's work at each call (:meth:`tick` decides from that work)."""
        cost = policy.call_seconds(graph)

        def counted(*args: torch.Tensor) -> Any:
            self._work += cost
            return fn(*args)

        return counted

    def start_run(self, *, auto_compile: bool) -> None:
        """A sampler run begins, from the form the density was built in (a run before it may
        have compiled mid-run): ``auto_compile`` decides afresh for it (see :meth:`tick`), unless
        the settings turn automatic compiling off (``zoo.configure(auto_compile=False)``). So
        every run of one call takes the same path, whatever ran before it in the process."""
        self.auto_compile = auto_compile and policy.auto_compile_allowed()
        self.mode, self._fn = self._built
        self._bare_calls, self._bare_compiled = 0, False
        self.restart_pace()
        self.compile_s = 0.0  # seconds this run spent tracing and compiling (a warm cache: few)
        self.step_nodes = 0  # what the run's fused sampler step adds to the graph (expect_step)

    def expect_step(self, nodes: int) -> None:
        """The run's sampler fuses a step that adds about ``nodes`` graph nodes to the density's
        own: a compile is priced for both (:meth:`compile_cost_s`)."""
        self.step_nodes = nodes

    def restart_pace(self) -> None:
        """The run's work is counted afresh from here, and :meth:`tick` counts iterations from
        here: for a sampler whose first iterations say little about the rest (ChEES)."""
        self._work, self._next_check = 0.0, 0

    def tick(self, iteration: int, total: int) -> None:
        """Called by a sampler after each iteration. With ``auto_compile``, once 2% of the run
        (at least 10 iterations) is done and again each time the iterations done double, the
        traced graph is compiled where the run's work so far (the modelled seconds of its graph
        calls, counted, not timed) says it pays (:func:`zoo_inference.backend.policy.
        worth_compiling`, priced by :meth:`compile_cost_s`). Asked again because the work an
        iteration changes: NUTS's trees grow as warmup shrinks the step."""
        if not self.auto_compile or self.mode != "traced" or self._graph is None:
            return
        done = iteration + 1
        if done < max(10, total // 50, self._next_check):
            return
        self._next_check = 2 * done
        if policy.worth_compiling(self._work, done, total, self.compile_cost_s()):
            self.mode, self._fn = self._to_compiled(self._graph)

    def compile_cost_s(self) -> float:
        """The seconds a compile of this density's sampler step is expected to take with
        inductor's cache empty (:func:`zoo_inference.backend.policy.compile_cost_s`): the density's
        graph and the nodes the step adds (:meth:`expect_step`)."""
        nodes = len(self._graph.graph.nodes) if isinstance(self._graph, torch.fx.GraphModule) else 0
        return policy.compile_cost_s(nodes + self.step_nodes)

    def _check(self, fn: Fn, probe: torch.Tensor, *, reference: Fn, fresh: bool = False) -> None:
        """``fn`` equals ``reference`` at the probe and (``fresh``) at points it was not traced
        at; raises ValueError saying where they differ."""
        points = [probe, *self._fresh] if fresh else [probe]
        for x in points:
            with functional():
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
            if self._bare_calls > policy.BARE_COMPILE_AFTER:
                self._compile_bare()
        self._work += self._call_s
        try:
            if self.mode in ("vmap", "loop"):
                with functional():
                    value, grad = sanitised(*self._fn(theta))
            else:
                value, grad = self._fn(theta)  # the graph sanitises
        except RuntimeError:  # one chain's point breaks the model (a Cholesky, ...): the others
            with functional():  # are evaluated one at a time, the breaking ones get -inf
                value, grad = sanitised(*self._loop(theta, tolerant=True))
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
                    with functional():
                        value, grad = sanitised(*self._fn(chunk))
                else:
                    value, grad = self._traced(chunk)  # the graph sanitises
            except RuntimeError:
                with functional():
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

    def unconstrain(self, values: Mapping[str, torch.Tensor]) -> torch.Tensor:
        """Constrained site values of a batch ``site -> (n, *shape)`` as flat unconstrained
        vectors ``(n, dim)``: the inverse of :meth:`constrain`."""
        n = len(next(iter(values.values())))
        parts = []
        for b in self.blocks:
            u = self.transforms[b.name](torch.as_tensor(values[b.name]).to(self.dtype))
            parts.append(u.reshape(n, -1))
        return torch.cat(parts, 1)

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


def sanitised(value: torch.Tensor, grad: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """A chain whose log density or gradient is not finite gets -inf and a zero gradient (a
    sampler rejects it), with no Python branch on values."""
    bad = ~torch.isfinite(value) | ~torch.isfinite(grad).all(-1)
    value = torch.where(bad, torch.full_like(value, -torch.inf), value)
    return value, torch.where(bad[:, None], torch.zeros_like(grad), grad)


def _close(a: torch.Tensor, b: torch.Tensor) -> bool:
    a, b = a.detach().double(), b.detach().double()
    both = torch.isfinite(a) & torch.isfinite(b)
    if not torch.equal(torch.isfinite(a), torch.isfinite(b)):
        return False
    return bool(((a[both] - b[both]).abs() <= 1e-3 * (1 + b[both].abs())).all())


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
    # cached: building it (Pyro's initialisation draws from the prior) must leave the run's
    # random streams as they were, so that a run draws alike whether it built it or found it
    with warnings.catch_warnings(), untouched_generators():
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
