"""Optimisation shared by the engines: the SVI loop and MAP of the continuous sites."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pyro
import pyro.poutine as poutine
import torch
from pyro.infer import TraceEnum_ELBO
from pyro.infer import autoguide as ag
from pyro.infer import util as infer_util
from pyro.optim.clipped_adam import ClippedAdam
from pyro.poutine.messenger import Messenger
from tqdm.auto import tqdm

from .backend import log_contraction
from .context import EngineContext
from .discrete import enumerated
from .reference import in_float64
from .results import NumericalFailure, one_line
from .sites import site_value
from .structure import fit_init

AUTOGUIDES: dict[str, Callable[..., Any]] = {
    "normal": ag.AutoNormal,
    "mvn": ag.AutoMultivariateNormal,
    "lowrank": ag.AutoLowRankMultivariateNormal,
    "delta": ag.AutoDelta,
    "flow": ag.AutoIAFNormal,
}


def autoguide(ctx: EngineContext, name: str) -> ag.AutoGuide:
    """An autoguide over the continuous latent sites (discrete ones hidden: enumerated)."""
    hidden = ctx.structure.discrete
    blocked = poutine.block(ctx.model, hide=list(hidden)) if hidden else ctx.model
    if name == "delta":
        return ag.AutoDelta(blocked, init_loc_fn=fit_init)
    if name == "flow":
        return ag.AutoIAFNormal(blocked)
    return AUTOGUIDES[name](blocked, init_loc_fn=fit_init)


@contextlib.contextmanager
def site_shape_checks(enabled: bool) -> Iterator[None]:
    """Pyro's inference-time site shape checks on or off (distribution checks stay on)."""
    before = infer_util.is_validation_enabled()
    infer_util.enable_validation(before and enabled)
    try:
        yield
    finally:
        infer_util.enable_validation(before)


class Subsample(Messenger):
    """Minibatches: every ``pyro.plate`` of more than ``size`` elements that does not subsample
    itself is entered with ``size`` of its indices, drawn anew (without replacement) each time,
    and Pyro scales the log densities inside it by size / ``size``. A model and guide that index
    their data by the plate's indices (``with pyro.plate("data", N) as idx: ... x[idx]``) see a
    minibatch under this handler and all the data without it."""

    def __init__(self, size: int) -> None:
        super().__init__()
        self.size = size

    def _pyro_sample(self, msg: Any) -> None:
        # a plate's index site: its distribution has the plate's size and a subsample size
        # (Pyro's own class for it is private)
        fn = msg["fn"]
        index_site = getattr(fn, "subsample_size", 0) is None and hasattr(fn, "size")
        if index_site and msg["value"] is None:
            if fn.size > self.size:
                msg["value"] = torch.randperm(fn.size)[: self.size]


def fit(
    model: Callable[..., Any],
    guide: Callable[..., Any],
    data: dict[str, Any],
    elbo: pyro.infer.ELBO,
    *,
    num_steps: int,
    lr: float,
    progress: bool,
    desc: str,
    check_shapes: bool = True,
    subsample_size: int | None = None,
    plain: pyro.infer.ELBO | None = None,
) -> tuple[list[float], str | None]:
    """Run Adam on -ELBO (lr decays tenfold over the run); return the ELBO trace and, where
    ``plain`` (the eager form of ``elbo``, a JIT-compiled ELBO) replaced ``elbo``, why.

    ``check_shapes=False`` skips Pyro's check that every batch dim of a site is declared by a
    plate: an ELBO without enumeration sums each site's log density whole, so a model written
    with undeclared batch dims (as NUTS accepts them) is still fitted right. ``subsample_size``:
    each step sees minibatches of the model's larger plates (:class:`Subsample`), so a step's
    cost does not grow with the data; each step's ELBO is then an unbiased estimate.
    ``plain``: ``elbo`` is checked against it first (:func:`jit_disagrees`), and replaced by it
    where they disagree."""
    pyro.clear_param_store()
    if subsample_size is not None:
        model, guide = Subsample(subsample_size)(model), Subsample(subsample_size)(guide)
    # enumerated sites summed out as the batched density sums them, for the whole fit (fewer
    # nodes to trace and differentiate than Pyro's own contraction)
    with log_contraction():
        why = None
        if plain is not None:
            with site_shape_checks(check_shapes):
                why = jit_disagrees(model, guide, data, elbo, plain)
            if why is not None:
                elbo = plain
        optim = OneAdam(lr, lrd=0.1 ** (1.0 / num_steps))
        trace: list[float] = []
        bar = tqdm(range(num_steps), desc=desc, disable=not progress, leave=False)
        for step in bar:
            with site_shape_checks(check_shapes), poutine.trace(param_only=True) as params:
                loss = elbo.loss_and_grads(model, guide, **data)  # type: ignore[attr-defined]  # pyro's ELBO base class omits it
            values = [site_value(s) for s in params.trace.nodes.values()]
            optim({v.unconstrained() for v in values})  # type: ignore[attr-defined]  # pyro sets it on params
            loss = float(loss)
            if not np.isfinite(loss):
                # the JIT ELBO does not validate: the plain one's error names the site and its
                # parameter
                if plain is not None and why is None:
                    plain.loss(model, guide, **data)  # type: ignore[attr-defined]  # pyro's ELBO base class omits it
                raise NumericalFailure(f"ELBO is {-loss} at step {step}")
            trace.append(-loss)
            if progress and step % 100 == 0:
                bar.set_postfix(elbo=f"{-loss:.3f}")
        return trace, why


class OneAdam:
    """Pyro's ``ClippedAdam`` as ``SVI`` steps it, in one torch optimiser call a step: each
    parameter its own group (its learning rate decays by ``lrd`` at each step it takes part in,
    from the base rate at its first), the step over this step's parameters only. Pyro keeps one
    optimiser a parameter and calls each, and a torch optimiser's call has a fixed cost: one
    call a step saves it, to the same numbers."""

    def __init__(self, lr: float, lrd: float) -> None:
        # a placeholder parameter: the optimiser holds the defaults (lr, lrd, ...) each new
        # group starts from; its groups are set anew each step
        self.optimizer = ClippedAdam([torch.zeros(0)], lr=lr, lrd=lrd)
        self.groups: dict[torch.Tensor, dict[str, Any]] = {}

    def __call__(self, params: set[torch.Tensor]) -> None:
        """One step on ``params`` (by their gradients), which are then zeroed."""
        for p in params:
            if p not in self.groups:  # a group of its own, at the base rate
                self.optimizer.param_groups = []  # (add_param_group scans those held)
                self.optimizer.add_param_group({"params": [p]})
                self.groups[p] = self.optimizer.param_groups[0]
        self.optimizer.param_groups = [self.groups[p] for p in params]
        self.optimizer.step()
        infer_util.zero_grads(params)


def jit_disagrees(
    model: Callable[..., Any],
    guide: Callable[..., Any],
    data: dict[str, Any],
    jitted: pyro.infer.ELBO,
    plain: pyro.infer.ELBO,
) -> str | None:
    """Why Pyro's JIT-compiled ELBO ``jitted`` cannot stand in for ``plain`` on this model and
    guide, or None. It is traced at one random state (its tracing call's loss is not the plain
    one's at that state), then run at two fresh ones, where its loss must equal the plain ELBO's
    (relative 1e-4): a traced graph that froze a Python branch on a sampled value, or a value
    computed outside torch, differs there; a model it cannot trace raises. The random state is
    restored afterwards and the checks' gradients cleared, so the fit's first step is as without
    them (its parameters are created here)."""
    state = pyro.util.get_rng_state()
    seeds = torch.randint(2**31 - 1, (3,)).tolist()
    try:
        pyro.set_rng_seed(seeds[0])
        jitted.loss_and_grads(model, guide, **data)  # type: ignore[attr-defined]  # pyro's ELBO base class omits it (traces)
        pairs = []
        for seed in seeds[1:]:
            losses = []
            for elbo in (plain, jitted):
                pyro.set_rng_seed(seed)
                losses.append(float(elbo.loss_and_grads(model, guide, **data)))  # type: ignore[attr-defined]  # pyro's ELBO base class omits it
            pairs.append(losses)
    except Exception as e:  # noqa: BLE001 - any failure: the plain ELBO is always there
        return f"Pyro's JIT cannot trace it ({one_line(e)})"
    finally:
        pyro.util.set_rng_state(state)
        for _, p in pyro.get_param_store().named_parameters():
            p.grad = None
    for a, b in pairs:
        if not (np.isfinite(a) and abs(a - b) <= 1e-4 * (1 + abs(a))):
            return (
                "its loss differs from the plain ELBO's at a fresh random state "
                f"({b:.6g} against {a:.6g})"
            )
    return None


MAP_STARTS = 4  # at most as many L-BFGS runs from prior-median starts; the best is kept


def fit_map(
    ctx: EngineContext, *, num_steps: int, lr: float
) -> tuple[dict[str, torch.Tensor], list[float], str]:
    """MAP of the continuous sites with the discrete ones enumerated: AutoDelta's loss,
    -log p(y, theta) with the discrete sites summed out (TraceEnum_ELBO; the density in theta
    itself, no Jacobian), minimised in float64 by L-BFGS with a strong-Wolfe line search (at most
    ``num_steps`` iterations) from up to :data:`MAP_STARTS` starts (each the median of 15 prior
    draws), the best kept; it stops once two starts have ended at the best loss. The loss is
    deterministic, so a quasi-Newton method converges in tens of evaluations where Adam took
    ``num_steps`` (hmm's MAP: 1000 Adam steps were 95% of its ``enum`` cell). Several starts
    because a mixture's or HMM's loss has local optima: gaussian_hmm's ended 2 nats below the
    best from 2 of 6 starts. Where no start ends at a finite loss (a line search stepped where
    the model's density fails), Adam (``lr``) for ``num_steps`` steps instead. Returns the
    values (in the data's dtype), -loss per evaluation of the best start and how the MAP was
    found."""
    model = enumerated(ctx.model)
    elbo = TraceEnum_ELBO(max_plate_nesting=ctx.structure.max_plate_nesting)
    floats = [v for v in ctx.data.values() if isinstance(v, torch.Tensor) and v.is_floating_point()]
    dtype = floats[0].dtype if floats else torch.get_default_dtype()
    keep = ctx.structure.continuous

    def lbfgs(**data: Any) -> tuple[dict[str, torch.Tensor], list[float]]:
        pyro.clear_param_store()
        guide = autoguide(ctx, "delta")
        elbo.differentiable_loss(model, guide, **data)  # creates the guide's parameters
        params = [p for _, p in pyro.get_param_store().named_parameters()]
        opt = torch.optim.LBFGS(
            params, max_iter=num_steps, line_search_fn="strong_wolfe", tolerance_grad=1e-9,
            tolerance_change=1e-12, history_size=20,
        )  # fmt: skip
        trace: list[float] = []

        def closure() -> torch.Tensor:
            opt.zero_grad()
            loss = elbo.differentiable_loss(model, guide, **data)
            loss.backward()
            trace.append(-float(loss.detach()))
            return loss

        opt.step(closure)
        with torch.no_grad():
            values = guide.median(**data)
        return {k: v.detach().to(dtype) for k, v in values.items() if k in keep}, trace

    best: tuple[dict[str, torch.Tensor], list[float]] | None = None
    agree, runs = 0, 0  # starts that ended at the best loss so far; starts run
    for start in range(MAP_STARTS):
        if agree >= 2:
            break
        runs += 1
        pyro.set_rng_seed(ctx.seed * MAP_STARTS + start)  # the start's prior draws
        try:
            with pyro.validation_enabled(False):  # a line search may step far out
                values, trace = in_float64(lbfgs, ctx.data)
        except (ValueError, RuntimeError):
            continue
        finite = np.isfinite(trace[-1]) and all(
            bool(torch.isfinite(v).all()) for v in values.values()
        )
        if not finite:
            continue
        if best is not None and abs(trace[-1] - best[1][-1]) <= 1e-6 * (1 + abs(best[1][-1])):
            agree += 1
        elif best is None or trace[-1] > best[1][-1]:
            best, agree = (values, trace), 1
    if best is not None:
        return *best, f"L-BFGS, the best of {runs} starts"
    pyro.set_rng_seed(ctx.seed)
    guide = autoguide(ctx, "delta")
    trace, _ = fit(
        model,
        guide,
        dict(ctx.data),
        elbo,
        num_steps=num_steps,
        lr=lr,
        progress=ctx.progress,
        desc=f"{ctx.name} MAP",
    )
    with torch.no_grad():
        values = guide.median(**ctx.data)
    how = f"Adam, {num_steps} steps: L-BFGS failed from every start"
    return {k: v.detach() for k, v in values.items() if k in keep}, trace, how
