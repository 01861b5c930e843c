"""Each model's tags, as measured (:mod:`zoo_inference.tags`), never typed in:
``benchmarks/model_tags.py`` measures the zoo's models into ``zoo/tags.json``, which this reads;
a model of your own is measured on request (``zoo.model_tags(name, measure=True)``,
:func:`zoo.api.model_tags`).

``zoo.model_tags("eight_schools").labels`` gives its tags, ``zoo.list_models(tag="funnel")``
the models that carry one.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from zoo_inference import ZooError
from zoo_inference.tags import TAGS, labels

FILE = Path(__file__).with_name("tags.json")


@dataclass(frozen=True)
class ModelTags:
    """A model's measured figures: ``dimension``, ``discrete``, ``ode``, ``scale_ratio``,
    ``modes``, ``excess_kurtosis`` and ``nuts`` (default nuts at seed 0: status, divergences,
    max R-hat, min bulk ESS); ``labels``, the tags they give (a subset of :data:`TAGS`)."""

    name: str
    figures: Mapping[str, Any] = field(default_factory=dict)

    @property
    def labels(self) -> tuple[str, ...]:
        return labels(self.figures)

    def __str__(self) -> str:
        f = self.figures
        nuts = f.get("nuts") or {}
        shown = [f"dimension {f.get('dimension', '-')}"]
        for key, what in (("scale_ratio", "scale ratio"), ("excess_kurtosis", "kurtosis")):
            if f.get(key) is not None:
                shown.append(f"{what} {f[key]:.2f}")
        if f.get("modes") is not None:
            shown.append(f"{f['modes']} optima")
        elif f.get("scale_ratio") is not None:  # measured, and no start converged
            shown.append("no optimum found (the density may grow without bound)")
        if nuts.get("max_r_hat") is not None:
            shown.append(
                f"default nuts: {nuts.get('divergences', 0)} divergences, "
                f"R-hat {r_hat(nuts['max_r_hat'])}"
            )
        elif nuts.get("status"):
            shown.append(f"default nuts: {nuts['status']}")
        return f"{', '.join(self.labels) or 'none'} ({'; '.join(shown)})"


def r_hat(value: float) -> str:
    """An R-hat as read: 3 decimals near 1, the exponent where chains never met (9.86e+15)."""
    return f"{value:.3f}" if value < 10 else f"{value:.3g}"


@cache
def measured() -> dict[str, Any]:
    """The file's contents: ``models`` (name -> figures) and how they were measured."""
    return json.loads(FILE.read_text()) if FILE.exists() else {"models": {}}


_MEASURED_HERE: dict[str, tuple[Any, ModelTags]] = {}  # name -> (its entry, its tags)


def tags_of(entry: Any) -> ModelTags | None:
    """The registered ``entry``'s tags: the file's for the zoo's own models (not one of yours
    registered under a zoo name), else those measured in this process (for this entry, not an
    earlier model of its name), else None."""
    figures = measured()["models"].get(entry.name)
    if figures is not None and str(getattr(entry.model, "__module__", "")).startswith(
        "zoo.models."
    ):
        return ModelTags(entry.name, figures)
    kept = _MEASURED_HERE.get(entry.name)
    return kept[1] if kept is not None and kept[0] is entry else None


def remember(entry: Any, figures: Mapping[str, Any]) -> ModelTags:
    """Keep the tags just measured of ``entry`` for the process."""
    tags = ModelTags(entry.name, figures)
    _MEASURED_HERE[entry.name] = (entry, tags)
    return tags


def check_tag(tag: str) -> None:
    if tag not in TAGS:
        raise ZooError(f"unknown tag {tag!r}; the tags are {', '.join(TAGS)}")
