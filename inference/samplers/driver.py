"""The one owner of the samplers' loops: it lays the chains out in groups (worker processes,
seeds), builds each group's batched density, runs a kernel on it, shows progress, and decides
with the density whether and how a kernel's declared steps are compiled. A kernel knows none
of this: it gets a :class:`DrivenLoop` (:class:`~zoo_inference.samplers.base.Loop`'s form that
asks the density) from :func:`as_sampler`'s wrapper.

What the driver asks of a density, where it has them (a plain callable has none, and its
kernels' steps run as written): ``fuse`` (a step as one compiled or scripted graph, see
:class:`Step`), ``expect_step`` (what a compile of the step costs), ``tick`` and
``restart_pace`` (the run's pace, from which the density decides to compile mid-run), ``mode``;
and in :func:`sample_chains`, :class:`~zoo_inference.density.BatchedDensity`'s ``start_run``,
``generator``, ``initial_points``, ``constrain`` and ``compile_s``."""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import torch
from tqdm.auto import tqdm

from ..arviz_io import arviz
from ..backend import has_compiler
from ..context import EngineContext
from ..density import batched_density
from ..parallel import cores, map_indices
from ..pathfinder import initial_points as pathfinder_points
from ..results import ZooError
from ..runtime import device_of, on_device
from .base import Density, Loop, Samples, StepFn

# a kernel: fn(density, theta0, *, num_samples, warmup, gen, loop, **options) -> Samples
Kernel = Callable[..., Samples]
# a sampler (the public contract): fn(density, theta0, *, num_samples, warmup, gen, progress,
# **options) -> Samples
Sampler = Callable[..., Samples]


class Step:
    """A sampler's step ``fn(density, *tensors) -> tensors``, written without Python branches on
    values: run as one graph through the density where the density offers it (``density.fuse``
    of :class:`zoo_inference.density.BatchedDensity`: compiled, or TorchScript where the density is
    traced), else eagerly, calling the density (``eager``: a form of ``fn`` that may skip work
    by branching on values, with the same results). A step's arguments keep their shapes and
    dtypes from call to call (one sampler run), so its fused form, once there, is looked up
    again only when the density's mode changes (a traced density compiled mid-run).
    ``reuse_outputs``: the caller is done with a call's outputs by the call after next (a
    sampler's state passed on from step to step), so a compiled step may write into the buffers
    of two calls before (see :meth:`zoo_inference.density.BatchedDensity.fuse`)."""

    def __init__(
        self,
        density: Density,
        fn: StepFn,
        eager: StepFn | None = None,
        *,
        reuse_outputs: bool = False,
    ) -> None:
        self.density, self.fn, self.reuse_outputs = density, fn, reuse_outputs
        self.eager = eager or fn  # the same step, free to branch on values: run uncompiled
        self._fuse = getattr(density, "fuse", None)
        self._fused: Callable[..., tuple[torch.Tensor, ...]] | None = None
        self._mode: object = ()  # the density's mode the fused form was asked for

    def __call__(self, *args: torch.Tensor) -> tuple[torch.Tensor, ...]:
        mode = getattr(self.density, "mode", None)
        if self._fuse is not None and (self._fused is None or mode != self._mode):
            # asked again while there is none, or the density compiled mid-run
            fused = self._fuse(self.fn, args, reuse_outputs=self.reuse_outputs)
            self._fused, self._mode = fused, mode
        fused = self._fused
        if fused is not None:
            try:
                return fused(*args)
            except RuntimeError:  # a chain's point breaks the model: the eager step copes
                pass
        return self.eager(self.density, *args)


class DrivenLoop(Loop):
    """The hook a kernel gets from the driver: its steps run through the density
    (:class:`Step`), its iterations move a progress bar and pace the density's decision to
    compile (``tick``; from :meth:`pace_from` on, after ``restart_pace``)."""

    def __init__(
        self, density: Density, total: int, *, progress: bool = False, desc: str = ""
    ) -> None:
        super().__init__(density)
        self.total, self.shown, self.start = total, 0, 0
        self.compiled_from: int | None = None  # the iteration a mid-run compile took effect at
        self._tick = getattr(density, "tick", None)
        self.bar = tqdm(total=total, disable=not progress, desc=desc, leave=False, mininterval=0.5)

    def step(
        self,
        fn: StepFn,
        eager: StepFn | None = None,
        *,
        reuse_outputs: bool = False,
        nodes: int = 0,
    ) -> Step:
        step = Step(self.density, fn, eager, reuse_outputs=reuse_outputs)
        if nodes:  # the compile's price
            getattr(self.density, "expect_step", lambda nodes: None)(nodes)
        return step

    def done(self, iterations: int) -> None:
        if iterations <= self.shown:
            return
        before, self.shown = self.shown, iterations
        self.bar.update(iterations - before)
        if before < self.start <= iterations:
            self._restart_pace()
        if iterations > self.start and self._tick is not None:
            was = getattr(self.density, "mode", None)
            self._tick(iterations - self.start - 1, self.total - self.start)
            if self.compiled_from is None and was != getattr(self.density, "mode", None):
                self.compiled_from = iterations

    def pace_from(self, iterations: int) -> None:
        self.start = iterations
        if iterations <= self.shown:
            self._restart_pace()

    def _restart_pace(self) -> None:
        getattr(self.density, "restart_pace", lambda: None)()

    def close(self) -> None:
        self.bar.close()


def as_sampler(kernel: Kernel, name: str, *, desc: str | None = None) -> Sampler:
    """``kernel(density, theta0, *, num_samples, warmup, gen, loop, **options)`` as a sampler
    of the public contract, ``fn(density, theta0, *, num_samples, warmup, gen, progress=False,
    **options) -> Samples``: each call runs the kernel with a :class:`DrivenLoop` (its progress
    bar named ``desc``, default ``name``)."""

    def sampler(
        density: Density,
        theta0: torch.Tensor,
        *,
        num_samples: int,
        warmup: int,
        gen: torch.Generator,
        progress: bool = False,
        **options: Any,
    ) -> Samples:
        loop = DrivenLoop(density, warmup + num_samples, progress=progress, desc=desc or name)
        try:
            out = kernel(
                density, theta0, num_samples=num_samples, warmup=warmup, gen=gen, loop=loop,
                **options,
            )  # fmt: skip
        finally:
            loop.close()
        if loop.compiled_from is not None:  # which form ran when: the run's diagnostics say
            out.info["compiled_from_iteration"] = loop.compiled_from
        return out

    params = [p for p in inspect.signature(kernel).parameters.values() if p.name != "loop"]
    progress = inspect.Parameter(
        "progress", inspect.Parameter.KEYWORD_ONLY, default=False, annotation=bool
    )
    sampler.__signature__ = inspect.Signature([*params, progress], return_annotation=Samples)  # type: ignore[attr-defined]
    sampler.__name__ = sampler.__qualname__ = name
    sampler.__doc__ = kernel.__doc__
    sampler.__module__ = kernel.__module__
    return sampler


def chain_seed(seed: int, chain: int) -> int:
    """Chain ``chain``'s own seed, derived from the run's seed: the same wherever it runs."""
    return int(np.random.SeedSequence([seed, chain]).generate_state(1)[0])


@dataclass
class Sampled:
    """The chains of a batched sampler run: constrained draws ``site -> (chains, draws, *shape)``,
    per-draw statistics ``(chains, draws)``, the flat unconstrained draws, each group's
    :class:`~zoo_inference.samplers.base.Samples` and, for a run to an ESS target, how it
    stopped."""

    posterior: dict[str, np.ndarray]
    stats: dict[str, np.ndarray]
    theta: torch.Tensor
    parts: list[Samples]
    groups: int
    workers: int
    stopping: dict[str, Any] | None = None


INITS = (None, "pathfinder")  # the chains' starts: the density's own, or Pathfinder's draws
R_HAT_TARGET = 1.01  # an ESS target also asks every R-hat to be at most this
MAX_DRAWS_FACTOR = 10  # default limit of a run to an ESS target: this many times num_samples
FIRST_BLOCK = 100  # draws a chain first, in a run to an ESS target that names no num_samples
TARGET_CHAINS = 8  # chains of a run to an ESS target that names no num_chains (at most)


def target_sizes(defaults: dict[str, Any], options: dict[str, Any]) -> dict[str, Any]:
    """The sizes of a run to an ESS target whose ``options`` name no ``num_samples``: the
    target decides the draws, so the first block is short (:data:`FIRST_BLOCK` draws a chain,
    or fewer where the engine's ``num_samples`` or ``max_draws`` is smaller), the limit is what
    it would have been (:data:`MAX_DRAWS_FACTOR` times the engine's ``num_samples``) and, unless
    the options name them, the chains are at most :data:`TARGET_CHAINS`: R-hat <= 1.01 asks a
    few hundred draws of every chain, so more chains only draw an ESS past the target."""
    limit = options.get("max_draws") or MAX_DRAWS_FACTOR * defaults["num_samples"]
    sizes = {"num_samples": min(FIRST_BLOCK, defaults["num_samples"], limit), "max_draws": limit}
    if "num_chains" in defaults and "num_chains" not in options:
        sizes["num_chains"] = min(defaults["num_chains"] or TARGET_CHAINS, TARGET_CHAINS)
    return sizes


def sample_chains(
    ctx: EngineContext,
    sampler: Sampler,
    *,
    num_samples: int,
    warmup: int,
    num_chains: int,
    jit: bool | None,
    parallel: bool,
    device: str = "cpu",
    superchain: int = 1,
    min_group: int = 1,
    batch: dict[str, torch.Tensor] | None = None,
    chain_groups: int | None = None,
    ess: float | None = None,
    max_draws: int | None = None,
    init: str | None = None,
    **options: Any,
) -> Sampled:
    """Run ``sampler`` on the model's batched log density: the chains in ``chain_groups``
    lockstep groups (None: ``min(num_chains // min_group, cores)``), each seeded from the run's
    seed and its index, the groups in forked worker processes when ``parallel`` (the same
    numbers either way; the layout, not the processes, fixes the numbers). On a GPU
    (``device="cuda"``) all chains are one group, every tensor of the run on the device.
    ``batch``: per-chain data (``(num_chains, *shape)`` per batched argument; see
    :class:`~zoo_inference.density.BatchedDensity`), each group taking its chains' rows.

    ``ess``: after ``warmup`` and ``num_samples`` draws a chain, the chains go on drawing (the
    sampler's ``resume``, no new warmup) in blocks sized from the ESS so far, until the least
    bulk ESS of every continuous parameter reaches ``ess`` and every R-hat is at most
    :data:`R_HAT_TARGET`, or the chains hold ``max_draws`` draws each (default
    :data:`MAX_DRAWS_FACTOR` times ``num_samples``); :attr:`Sampled.stopping` says which.

    ``init``: where the chains start: None, Uniform(-2, 2) on the unconstrained space
    (:meth:`~zoo_inference.density.BatchedDensity.initial_points`); ``"pathfinder"``, draws of one
    multi-path Pathfinder run a chain group (:func:`zoo_inference.pathfinder.initial_points`)."""
    if init not in INITS:
        raise ZooError(f"option 'init' must be one of {list(INITS)}, got {init!r}")
    if init == "pathfinder" and batch:
        raise ZooError("init='pathfinder' needs one data set; these chains have one each (batch)")
    if max_draws is not None and ess is None:
        raise ZooError("max_draws limits a run to an ESS target: give ess= with it")
    if max_draws is not None and max_draws < num_samples:
        raise ZooError(f"max_draws={max_draws} is fewer than num_samples={num_samples}")
    s = ctx.structure
    dev = device_of(device)
    groups = chain_layout(num_chains, min_group, chain_groups, dev)
    sizes = [num_chains // groups + (g < num_chains % groups) for g in range(groups)]
    compile_ = bool(jit) and (has_compiler() or dev.type != "cpu")
    starts = np.cumsum([0, *sizes])
    densities = [  # groups of one size share a density (batched_density's cache), unless batched
        batched_density(
            ctx.model,
            ctx.data,
            s,
            n,
            compile=compile_,
            device=dev,
            batch={k: v[starts[g] : starts[g] + n] for k, v in batch.items()} if batch else None,
        )  # fmt: skip
        for g, n in enumerate(sizes)
    ]
    workers = groups if parallel else 1
    previous: list[Samples] = []  # each group's draws so far (a run to an ESS target)
    block = [num_samples, warmup]  # the draws and warmup of the next call

    def one(g: int) -> Samples:
        density = densities[g]
        density.start_run(auto_compile=jit is None)  # None: compiled once the run shows it pays
        gen = density.generator(chain_seed(ctx.seed, g))
        more = dict(options)
        more_evals = 0  # Pathfinder's, where it chose the starts
        if previous:  # the chains go on from their last draws, as the sampler left them
            state = dict(previous[g].state)
            gen.set_state(state.pop("rng"))
            # contiguous: a compiled step guards its inputs' strides, a slice's differ
            theta0 = previous[g].theta[:, -1].to(dev).contiguous()
            more["resume"] = state
        elif init == "pathfinder":
            theta0, more_evals = pathfinder_points(ctx.model, ctx.data, s, gen, density)
        else:
            theta0 = density.initial_points(gen)
        if not previous and superchain > 1:  # chains of a superchain start together (nested R-hat)
            theta0 = theta0[(torch.arange(len(theta0)) // superchain) * superchain]
        with torch.no_grad(), on_device(dev):
            result = sampler(
                density,
                theta0,
                num_samples=block[0],
                warmup=block[1],
                gen=gen,
                # groups in worker processes: the first one's bar stands for them all (each
                # worker writes to the same terminal; one bar each would overwrite each other)
                progress=ctx.progress and (workers == 1 or g == 0),
                **more,
            )
        result.info["density"] = density.mode
        if init == "pathfinder" and not previous:  # the run's gradients include the start's
            result.info["init_gradient_evals"] = more_evals
            result = replace(result, gradient_evals=result.gradient_evals + more_evals)
        result.info["compile_s"] = density.compile_s
        if ess is not None:
            result.state["rng"] = gen.get_state()
        return result

    parts = map_indices(one, groups, workers)
    density = densities[0]
    stopping = None
    if ess is not None:
        limit = max_draws or MAX_DRAWS_FACTOR * num_samples
        blocks, drawn = 1, num_samples
        while True:
            theta = torch.cat([p.theta for p in parts])
            least, worst = convergence(density.constrain(theta.reshape(-1, density.dim)), theta)
            reached = least >= ess and worst <= R_HAT_TARGET
            if reached or drawn >= limit:
                break
            block[:] = [next_block(drawn, least, worst, ess, limit), 0]
            previous[:] = parts
            more = map_indices(one, groups, workers)
            parts = [joined(a, b) for a, b in zip(parts, more, strict=True)]
            blocks, drawn = blocks + 1, drawn + block[0]
        stopping = {
            "ess_target": ess,
            "stopped": "target reached" if reached else f"draw limit ({limit} a chain)",
            "blocks": blocks,
            "draws_per_chain": drawn,
        }
        num_samples = drawn
    theta = torch.cat([p.theta for p in parts])
    flat = density.constrain(theta.reshape(-1, density.dim))
    posterior = {
        k: v.reshape((num_chains, num_samples, *v.shape[1:])).cpu().numpy() for k, v in flat.items()
    }
    stats = {k: torch.cat([p.stats[k] for p in parts]).cpu().numpy() for k in parts[0].stats}
    return Sampled(posterior, stats, theta.cpu(), parts, groups, workers, stopping)


def convergence(flat: dict[str, torch.Tensor], theta: torch.Tensor) -> tuple[float, float]:
    """The least bulk ESS and the largest R-hat over every scalar of the constrained draws
    ``flat`` (site -> ``(chains * draws, *shape)``) of ``theta`` ``(chains, draws, D)``."""
    chains, draws = theta.shape[:2]
    arrays = {
        k: v.reshape(chains, draws, -1).cpu().numpy().astype(np.float64) for k, v in flat.items()
    }
    data = arviz().convert_to_dataset(arrays)
    with np.errstate(invalid="ignore", divide="ignore"):
        ess = arviz().ess(data, method="bulk")
        rhat = arviz().rhat(data)
    least = min(float(np.nanmin(ess[k].values)) for k in arrays)
    worst = max(float(np.nanmax(rhat[k].values)) for k in arrays)
    return least, worst


def next_block(drawn: int, least: float, worst: float, target: float, limit: int) -> int:
    """Draws a chain for the next block of a run to an ESS target, from the least ESS and the
    largest R-hat so far: the draws scaled so that the ESS reaches the target (ESS grows about
    linearly with the draws) and R-hat's excess over 1 falls to :data:`R_HAT_TARGET`'s (it
    shrinks about as 1 / draws: its bias and its noise both go as tau / 2n), whichever asks more,
    with a tenth to spare; at least a quarter of the draws so far, at most three times as many
    (an ESS or R-hat of short chains extrapolates poorly: the chains may still be settling) and
    at most what the limit leaves."""
    scale = target / max(least, 1.0)
    if math.isfinite(worst) and worst > R_HAT_TARGET:
        scale = max(scale, (worst - 1) / (R_HAT_TARGET - 1))
    need = min(drawn * scale * 1.1 - drawn, 3 * drawn)
    return int(min(max(need, drawn / 4, 1), limit - drawn))


def joined(first: Samples, then: Samples) -> Samples:
    """One group's draws of two consecutive calls (the second resumed from the first)."""
    info = dict(first.info)
    info["compile_s"] = first.info.get("compile_s", 0.0) + then.info.get("compile_s", 0.0)
    n, m = first.theta.shape[1], then.theta.shape[1]
    for key in ("acceptance_rate",):  # per-chain rates: weighted by the draws
        if isinstance(first.info.get(key), list) and isinstance(then.info.get(key), list):
            a, b = first.info[key], then.info[key]
            info[key] = [(x * n + y * m) / (n + m) for x, y in zip(a, b, strict=True)]
    return Samples(
        torch.cat([first.theta, then.theta], 1),
        {k: torch.cat([first.stats[k], then.stats[k]], 1) for k in first.stats},
        first.gradient_evals + then.gradient_evals,
        info,
        then.state,
    )


def chain_layout(
    num_chains: int, min_group: int, chain_groups: int | None, device: torch.device
) -> int:
    """How many lockstep groups ``num_chains`` run in: ``chain_groups`` when given (at least
    ``min_group`` chains a group), else one per core on a CPU (as many as the chains allow) and
    one on a GPU. Fewer groups take fewer sampler steps: a step moves every chain of its group,
    and a group ends with its slowest chain. More groups run side by side on more cores."""
    if chain_groups is None:
        return (min(num_chains // min_group, cores()) or 1) if device.type == "cpu" else 1
    most = max(1, num_chains // min_group)
    if chain_groups > most:
        raise ZooError(
            f"chain_groups={chain_groups} is more groups than {num_chains} chains make"
            + (f" at {min_group} chains or more a group" if min_group > 1 else "")
            + f"; at most {most} here"
        )
    if chain_groups > 1 and device.type != "cpu":
        raise ZooError(f"on {device} every chain runs in one batch: chain_groups must be 1")
    return chain_groups
