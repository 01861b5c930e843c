"""Many-chain samplers on a batched log density: the state of every chain is one row of a
``(chains, D)`` tensor and each step advances all chains at once.

* :func:`nuts` — the No-U-Turn sampler, the chains asynchronous (:mod:`.nuts`, its step
  :mod:`.nuts_tree`); per-chain step size and mass matrix by Stan's windowed warmup.
* :func:`chees` — ChEES-HMC: one step size, one jittered trajectory length and one mass
  matrix shared by the chains (:mod:`.chees`, its adaptation :mod:`.trajectory`).
* :func:`hmc` — static HMC, its integration time jittered around a fixed mean (:mod:`.hmc`).
* :func:`mams` — the Metropolis-adjusted microcanonical sampler: isokinetic dynamics, one
  step size, one jittered trajectory length and one diagonal preconditioner shared by the
  chains (:mod:`.mams`); :func:`mams_laps`, the same after LAPS's ensemble warmup
  (:mod:`.laps`).
* :func:`rwmh` — random-walk Metropolis–Hastings with a diagonal proposal (:mod:`.mh`).

Each is ``fn(density, theta0, *, num_samples, warmup, gen, progress=False, **options) ->``
:class:`Samples`, where ``density(theta) -> (log_density, gradient)`` on a ``(chains, D)``
batch (any callable: a plain function works) and ``theta0`` is ``(chains, D)``: the contract a
user's sampler meets too.

How the package is cut. A **kernel** (one module each) is the algorithm and nothing else:
``kernel(density, theta0, *, num_samples, warmup, gen, loop, **options) -> Samples``, built
from shared parts: :mod:`.integrator` (leapfrog, kinetic energy, momenta), :mod:`.metric`
(variance and covariance estimates, per-chain metric, momentum map), :mod:`.dual_averaging`
(step size, and the first step size's search), :mod:`.windows` (Stan's windowed warmup, in
lockstep or per chain) and :mod:`.trajectory` (ChEES's trajectory length, Adam, Halton). A
kernel never asks the density to compile and imports nothing about compiling: it gets a
``loop`` (:class:`~.base.Loop`) and

* declares each step it calls per density call or iteration with ``step = loop.step(fn,
  eager=None, *, reuse_outputs=False, nodes=0)`` and calls ``step(*tensors)``; ``fn(density,
  *tensors) -> tensors`` has no Python branch on a value and takes the same shapes at every
  call, so that it may run as one compiled graph (``eager``: the same step free to branch);
* reports ``loop.done(iterations)`` as its slowest chain finishes iterations (warmup
  included), and may say ``loop.pace_from(iterations)`` when only the later ones show the
  run's pace.

The **driver** (:mod:`.driver`) is the one place that knows about compiling and loops over
chains: :func:`~.driver.as_sampler` turns a kernel into a sampler (a progress bar, and a
:class:`~.driver.DrivenLoop` whose steps the density may fuse and compile and whose
iterations pace the density's decision to compile), and :func:`~.driver.sample_chains` runs a
sampler on a model's chains (groups, worker processes, seeds, the batched density). Called with
a plain function, a kernel's steps run as written.

A new sampler: a kernel module (the parts above do most of the work: MALA is Stan's
:func:`~.windows.adapted_chains` around a 15-line transition, test_samplers' ``_mala``), made
a sampler by ``as_sampler(kernel, "name")`` and registered by ``zoo.register_sampler(name,
sampler)``, which gives it an engine like ``nuts`` (a plain function meeting the contract
above registers the same way; its steps then run uncompiled): the zoo's own samplers are
registered so too (:mod:`zoo_inference.engines`). The names ``nuts``, ``chees``, ``hmc`` and
``mams`` of this package are the samplers, not their modules: import a module's other names
with ``import zoo_inference.samplers.nuts as nuts_module`` (``from zoo_inference.samplers.nuts
import nuts_sample`` imports the module's names too)."""

from __future__ import annotations

from typing import Any

import torch

from .base import Density, Loop, Samples
from .chees import chees as _chees
from .driver import as_sampler
from .hmc import hmc as _hmc
from .laps import mams_laps as _mams_laps
from .mams import mams as _mams
from .mh import rwmh as _rwmh
from .nuts import nuts as _nuts

MAMS_TUNINGS = {"default": _mams, "laps": _mams_laps}  # mams's warmups


def _mams_tuned(
    density: Density,
    theta0: torch.Tensor,
    *,
    num_samples: int,
    warmup: int,
    gen: torch.Generator,
    loop: Loop,
    target_accept: float = 0.9,
    max_steps: int = 1000,
    tuning: str = "default",
    resume: dict[str, Any] | None = None,
) -> Samples:
    """MAMS (:func:`.mams.mams`) tuned as BlackJAX tunes it, or with ``tuning="laps"`` by LAPS's
    ensemble warmup (:func:`.laps.mams_laps`, ``warmup`` then counting gradient evaluations a
    chain)."""
    if tuning not in MAMS_TUNINGS:
        raise ValueError(f"tuning must be one of {list(MAMS_TUNINGS)}, got {tuning!r}")
    return MAMS_TUNINGS[tuning](
        density, theta0, num_samples=num_samples, warmup=warmup, gen=gen, loop=loop,
        target_accept=target_accept, max_steps=max_steps, resume=resume,
    )  # fmt: skip


nuts = as_sampler(_nuts, "nuts")
chees = as_sampler(_chees, "chees")
hmc = as_sampler(_hmc, "hmc")
mams = as_sampler(_mams_tuned, "mams")
mams_laps = as_sampler(_mams_laps, "mams_laps", desc="mams")
rwmh = as_sampler(_rwmh, "rwmh", desc="mh")

__all__ = [
    "MAMS_TUNINGS",
    "Density",
    "Loop",
    "Samples",
    "as_sampler",
    "chees",
    "hmc",
    "mams",
    "mams_laps",
    "nuts",
    "rwmh",
]
