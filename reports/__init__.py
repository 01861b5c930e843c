"""Comparison reports: one page per model (HTML + Markdown, JSON/CSV beside) and a zoo index.

A pure function of results: :func:`render_model_page` turns a :class:`inference.Comparison` into
``{filename: text}``, :func:`render_index` turns the models' summary lines into the index files.
Running the engines and writing the files is the sweep's job (:mod:`zoo.sweep`).

>>> files = render_model_page(zoo.compare("beta_bernoulli"))  # doctest: +SKIP
>>> sorted(files)  # doctest: +SKIP
['beta_bernoulli.csv', 'beta_bernoulli.html', 'beta_bernoulli.json', 'beta_bernoulli.md', 'summary']
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .findings import Finding, findings, worst_error
from .render import model_context, model_summary, now_utc, render_index, render_model_page

__all__ = [
    "Finding",
    "earlier_models",
    "findings",
    "model_context",
    "model_summary",
    "now_utc",
    "render_index",
    "render_model_page",
    "worst_error",
]


def earlier_models(out: Path, exclude: set[str]) -> list[dict[str, Any]]:
    """Index lines of models an earlier report wrote into ``out`` (pages still there), so that a
    report of some models keeps the others in the index."""
    try:
        earlier = json.loads((out / "results.json").read_text(encoding="utf-8"))["models"]
    except (OSError, ValueError, KeyError, TypeError):
        return []
    if not isinstance(earlier, Mapping):
        return []
    keep = []
    for name, m in earlier.items():
        if name in exclude or not isinstance(m, Mapping):
            continue
        if not {"name", "engines", "page"} <= set(m) or not isinstance(m["engines"], Mapping):
            continue
        if (out / f"{name}.html").is_file():
            keep.append(dict(m))
    return keep
