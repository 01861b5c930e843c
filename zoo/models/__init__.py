"""The built-in models, one module per family. Importing this package registers them."""

from . import (  # noqa: F401
    classification,
    conjugate,
    deep,
    discrete_vae,
    factor,
    gaussian_process,
    gym,
    hierarchical,
    mixtures,
    nonparametric,
    posteriordb,
    regression,
    sequential,
    state_space,
    topics,
    unnormalised,
)
