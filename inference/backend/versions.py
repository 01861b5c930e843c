"""The private parts of torch, Pyro and opt_einsum the backend uses, each with the versions it was
verified on. A path is used only where every library it touches is installed at a verified
version; elsewhere the backend falls back to a public form (the plain traced graph, the eager
density, Pyro's own contraction) and the caller keeps working, slower.
``tests/inference/backend/test_backend.py`` forces each fallback (:func:`unverified`) and checks
it gives the same values."""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from importlib.metadata import PackageNotFoundError, version

Release = tuple[int, ...]


@cache
def installed(library: str) -> Release | None:
    """The installed release of a distribution (``2.13.0+cpu``: ``(2, 13, 0)``), or None."""
    try:
        text = version(library)
    except PackageNotFoundError:
        return None
    return tuple(int(p) for p in re.findall(r"\d+", text.split("+")[0])[:3])


def _show(release: Release) -> str:
    return ".".join(map(str, release))


@dataclass(frozen=True)
class PrivatePath:
    """One use of private internals: ``needs`` maps a distribution to the releases it was
    verified on, ``low <= installed < high``."""

    name: str
    needs: tuple[tuple[str, Release, Release], ...]

    def usable(self) -> bool:
        return self.name not in _forced_off and not self.reason()

    def reason(self) -> str:
        """Why the path is not used ("" when it is)."""
        if self.name in _forced_off:
            return f"{self.name}: turned off"
        for library, low, high in self.needs:
            got = installed(library)
            if got is None or not low <= got < high:
                shown = "not installed" if got is None else _show(got)
                return (
                    f"{self.name} is verified on {library}>={_show(low)},<{_show(high)} "
                    f"({shown} here)"
                )
        return ""


def _torch(name: str) -> PrivatePath:
    return PrivatePath(name, (("torch", (2, 13), (2, 15)),))


# torch: make_fx in one fake mode (torch._guards, torch._subclasses), the graph's aten overloads
# (torch._ops), the factorisation checks (aten._linalg_check_errors), inductor's graph compiler
# and its config, the generated code's buffer allocation, TorchScript (deprecated from 2.14)
ONE_FAKE_MODE = _torch("tracing in one fake mode")
SIMPLIFY = _torch("graph simplification")
FAILED_FACTOR = _torch("failed factorisations as NaN")
INDUCTOR = _torch("inductor's graph compiler")
BUFFER_REUSE = _torch("buffer reuse in inductor's code")
TORCHSCRIPT = _torch("TorchScript")
# Pyro (and opt_einsum's backend cache): the log-space einsum and safe log its contraction calls,
# TraceEnum_ELBO's model factors, the potential's keyword arguments
PYRO = (("pyro-ppl", (1, 9), (1, 10)),)
OPT_EINSUM = (("opt_einsum", (3, 3), (4,)),)
LOG_EINSUM = PrivatePath("the log-einsum in Pyro's contraction", PYRO + OPT_EINSUM)
MODEL_FACTORS = PrivatePath("TraceEnum_ELBO's model factors", PYRO)
POTENTIAL_DATA = PrivatePath("per-chain data in Pyro's potential", PYRO)

PATHS = (
    ONE_FAKE_MODE, SIMPLIFY, FAILED_FACTOR, INDUCTOR, BUFFER_REUSE, TORCHSCRIPT, LOG_EINSUM,
    MODEL_FACTORS, POTENTIAL_DATA,
)  # fmt: skip
_forced_off: set[str] = set()


@contextlib.contextmanager
def unverified(*paths: PrivatePath) -> Iterator[None]:
    """Within the block, ``paths`` are treated as unverified: their fallbacks run (tests)."""
    added = {p.name for p in paths} - _forced_off
    _forced_off.update(added)
    try:
        yield
    finally:
        _forced_off.difference_update(added)
