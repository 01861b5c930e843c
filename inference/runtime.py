"""The process state a run touches, set for the run and restored after it: random generators
(seeded from the run's seed), Pyro's parameter store (empty) and torch's intra-op threads (one
per worker)."""

from __future__ import annotations

import contextlib
import random
import sys
from collections.abc import Iterator

import numpy as np
import pyro
import torch
from threadpoolctl import threadpool_limits


@contextlib.contextmanager
def untouched_generators() -> Iterator[None]:
    """Run a block whose random draws must not move the caller's streams (torch's, numpy's,
    Python's): work that is cached within a process, such as building a model's batched
    density (Pyro's initialisation draws from the prior), so that a run draws the same
    numbers whether it built the cached object or found it."""
    saved = (torch.get_rng_state(), np.random.get_state(), random.getstate())
    try:
        yield
    finally:
        torch.set_rng_state(saved[0])
        np.random.set_state(saved[1])
        random.setstate(saved[2])


@contextlib.contextmanager
def seeded(seed: int) -> Iterator[None]:
    """Seed torch, numpy and Python's ``random`` (as ``pyro.set_rng_seed``) and restore the
    caller's generator states afterwards."""
    with untouched_generators():
        pyro.set_rng_seed(seed)
        yield


@contextlib.contextmanager
def own_param_store() -> Iterator[None]:
    """Run with Pyro's parameter store empty, and give the caller's back afterwards: the same
    names, constraints and tensors (a user's fit goes on where it was)."""
    store = pyro.get_param_store()
    saved = store.get_state()
    store.clear()
    try:
        yield
    finally:
        store.clear()
        store.set_state(saved)


@contextlib.contextmanager
def threads(n: int = 1) -> Iterator[None]:
    """Run with ``n`` torch intra-op threads and ``n`` BLAS / OpenMP threads (numpy's, scipy's
    and scikit-learn's, through threadpoolctl), restoring the caller's settings. On a busy
    machine more than one thread per process makes small models several times slower (torch),
    and scikit-learn's GaussianMixture on the digits far slower still."""
    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        with threadpool_limits(n):
            yield
    finally:
        torch.set_num_threads(before)


@contextlib.contextmanager
def default_dtype(dtype: torch.dtype) -> Iterator[None]:
    """Run with ``dtype`` as torch's default floating dtype, restoring the caller's after."""
    before = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        yield
    finally:
        torch.set_default_dtype(before)


def interactive() -> bool:
    """Whether a person is watching: a terminal on stderr, or a Jupyter kernel (where stderr is
    not a terminal but tqdm's notebook bars show)."""
    return sys.stderr.isatty() or "ipykernel" in sys.modules


def device_of(value: str | torch.device) -> torch.device:
    """``value`` (``"cpu"``, ``"cuda"``, ``"cuda:1"``, ...) as a device this process can use;
    ValueError naming the problem otherwise (before any work starts)."""
    try:
        device = torch.device(value)
    except (RuntimeError, TypeError) as e:
        raise ValueError(f"device must be 'cpu' or 'cuda[:N]', got {value!r}") from e
    if device.type == "cpu":
        return device
    if device.type != "cuda":
        raise ValueError(f"device must be 'cpu' or 'cuda[:N]', got {value!r}")
    if not torch.cuda.is_available():
        build = "a CPU-only build" if torch.version.cuda is None else f"CUDA {torch.version.cuda}"
        raise ValueError(
            f"device {value!r} asks for a GPU, but torch {torch.__version__} ({build}) sees none"
        )
    if device.index is not None and device.index >= torch.cuda.device_count():
        raise ValueError(
            f"device {value!r}: there are {torch.cuda.device_count()} GPUs (cuda:0 ...)"
        )
    return device


def on_device(device: torch.device) -> contextlib.AbstractContextManager[object]:
    """Tensors created without a device (``torch.zeros``, ``torch.randn``, a model's own
    constants) are created on ``device`` inside. A no-op on the CPU: the context is a torch
    function mode, which every eager call would pay for."""
    return contextlib.nullcontext() if device.type == "cpu" else device
