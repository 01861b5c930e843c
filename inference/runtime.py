"""The process state a run touches, set for the run and restored after it: random generators
(seeded from the run's seed) and torch's intra-op threads (one per worker)."""

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
def seeded(seed: int) -> Iterator[None]:
    """Seed torch, numpy and Python's ``random`` (as ``pyro.set_rng_seed``) and restore the
    caller's generator states afterwards."""
    saved = (torch.get_rng_state(), np.random.get_state(), random.getstate())
    pyro.set_rng_seed(seed)
    try:
        yield
    finally:
        torch.set_rng_state(saved[0])
        np.random.set_state(saved[1])
        random.setstate(saved[2])


@contextlib.contextmanager
def threads(n: int = 1) -> Iterator[None]:
    """Run with ``n`` torch intra-op threads and ``n`` BLAS / OpenMP threads (numpy's, scipy's
    and scikit-learn's, through threadpoolctl), restoring the caller's settings. On a busy
    machine more than one thread per process makes small models several times slower (torch),
    and scikit-learn's GaussianMixture on the digits 45 times slower (11.4 s against 0.25 s)."""
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
