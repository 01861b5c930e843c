"""The test suite's seeds, shifted by the environment variable ``ZOO_TEST_SEED_SHIFT``.

A stochastic assertion must hold for any seed with high probability, never for one lucky
stream: ``ZOO_TEST_SEED_SHIFT=1000 pytest`` reruns the suite on other streams. ``conftest.py``
shifts the seed of every run (``zoo.run``, ``compare``, ``report`` and the CLI, default seed
included); the tests pass the seeds they draw with themselves (``entry.simulate``, numpy's
``default_rng``) through :func:`shifted`. The default shift 0 keeps the written seeds.
"""

from __future__ import annotations

import os

SHIFT: int = int(os.environ.get("ZOO_TEST_SEED_SHIFT", "0"))


def shifted(seed: int) -> int:
    """``seed`` moved by ``ZOO_TEST_SEED_SHIFT`` (unchanged when it is unset)."""
    return seed + SHIFT
