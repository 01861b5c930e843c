"""Sphinx configuration of the zoo's documentation (``make docs``).

The gallery (one page per registered model) and the benchmark pages are written by
``_ext/zoo_pages.py`` when the build starts, from the registry, a quick report
(``ZOO_DOCS_REPORT``) and ``benchmarks/results/``; they are not committed.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent / "_ext"))

import zoo  # noqa: E402

project = "pyro-zoo"
author = "the pyro-zoo authors"
copyright = "the pyro-zoo authors"
release = zoo.__version__
version = release

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.viewcode",
    "zoo_pages",
]
source_suffix = {".md": "markdown", ".rst": "restructuredtext"}
exclude_patterns = ["_build"]
myst_enable_extensions = ["colon_fence"]
myst_heading_anchors = 3

autodoc_member_order = "bysource"
autodoc_typehints = "description"
autodoc_default_options = {"members": False}

html_theme = "furo"
html_title = "pyro-zoo"
html_static_path = ["_static"]
html_css_files = ["zoo.css"]
# the build and its pages reach no network: no intersphinx, and no page holds math nodes (MathJax
# comes from a CDN): the gallery draws its math as images, with the report's mathtext
