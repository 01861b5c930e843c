"""The built-in models, one module per family. Importing this package registers them."""

from . import conjugate, mixtures  # noqa: F401
