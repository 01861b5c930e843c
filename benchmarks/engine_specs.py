"""Zoo engine specs on a benchmark's command line: ``nuts``, ``nuts:metric=low_rank`` or
``chees:metric=low_rank,dense_mass=True``, several separated by ',' (or ';'). Imported as a
file by ``compare_peers.py`` and ``gradients_to_bias.py``."""

from __future__ import annotations

import ast
from typing import Any


def parse_engine(spec: str) -> tuple[str, dict[str, Any]]:
    """``nuts:metric=low_rank,dense_mass=True`` -> ("nuts", {...}); values as Python literals
    where they parse, strings otherwise."""
    name, _, rest = spec.partition(":")
    options: dict[str, Any] = {}
    for item in filter(None, rest.split(",")):
        key, eq, value = item.partition("=")
        if not eq:
            raise ValueError(f"engine option {item!r} in {spec!r} is not key=value")
        try:
            options[key] = ast.literal_eval(value)
        except (ValueError, SyntaxError):
            options[key] = value
    return name, options


def split_engines(text: str) -> list[str]:
    """Engine specs separated by ',' or ';': a piece ``key=value`` without ``:`` is one more
    option of the spec before it (``nuts,chees:metric=low_rank,dense_mass=True``)."""
    specs: list[str] = []
    for piece in (s.strip() for s in text.replace(";", ",").split(",")):
        if not piece:
            continue
        if "=" in piece and ":" not in piece:
            if not specs:
                raise ValueError(f"engine option {piece!r} comes before any engine")
            specs[-1] += "," + piece
        else:
            specs.append(piece)
    return specs
