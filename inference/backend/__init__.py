"""The compiler behind one door: everything of the zoo that touches torch's or Pyro's private
internals or TorchScript. Nothing outside this package uses them.

- :mod:`~zoo_inference.backend.tracing`: ``make_fx`` in one fake mode, failed factorisations as NaN;
- :mod:`~zoo_inference.backend.simplify`: the traced graph's constant folding, identities, repeats;
- :mod:`~zoo_inference.backend.compile`: TorchInductor, buffer reuse in its code, TorchScript;
- :mod:`~zoo_inference.backend.contraction`: the log-einsum in Pyro's contraction, its factors;
- :mod:`~zoo_inference.backend.potential`: Pyro's potential on per-chain data;
- :mod:`~zoo_inference.backend.policy`: when compiling a run pays;
- :mod:`~zoo_inference.backend.versions`: the versions each private path was verified on. Outside
  them a path falls back to a public form (the FX graph, the eager density, Pyro's own
  contraction), tested to give the same values (``tests/inference/backend/test_backend.py``).
"""

from .compile import (
    VEC_ISA_ENV,
    VECTORISE_FROM,
    cannot_compile,
    compile_in_this_process,
    has_compiler,
    inductor,
    jit_elbo,
    reusing,
    script,
    scripting,
)
from .contraction import functional, log_contraction, log_einsum, log_joint_over_plate
from .potential import check_per_chain_data, potential_with
from .simplify import simplify
from .tracing import failed_factor_as_nan, make_fx
from .versions import PATHS, PrivatePath, unverified

__all__ = [
    "PATHS",
    "VECTORISE_FROM",
    "VEC_ISA_ENV",
    "PrivatePath",
    "cannot_compile",
    "check_per_chain_data",
    "compile_in_this_process",
    "failed_factor_as_nan",
    "functional",
    "has_compiler",
    "inductor",
    "jit_elbo",
    "log_contraction",
    "log_einsum",
    "log_joint_over_plate",
    "make_fx",
    "potential_with",
    "reusing",
    "script",
    "scripting",
    "simplify",
    "unverified",
]
