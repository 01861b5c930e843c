"""The model page's extras: the forest plot, the posterior predictive check, the LOO/WAIC table,
the generative story rendered by matplotlib's mathtext and the data's provenance."""

from __future__ import annotations

import base64
import io
import re
import struct
from collections.abc import Sequence
from typing import Any

import matplotlib
from matplotlib import mathtext
from matplotlib.font_manager import FontProperties

from zoo_inference.results import Comparison

from .figures import (
    engine_colors,
)
from .findings import STORED_KEY
from .forest import forest_figure
from .loo import loo_comparison
from .predictive import ppc_figure

MATH_DPI = 200  # math images are drawn at twice the size they are shown
MATH_POINTS = 13  # their font size


def render_math(latex: str, dpi: int = MATH_DPI) -> dict[str, Any]:
    """One line of LaTeX (without ``$``) as a PNG by matplotlib's mathtext: ``{"latex", "png"
    (base64), "width", "height"}`` (the size to show, half the drawn pixels). A line mathtext
    cannot parse raises ValueError."""
    buf = io.BytesIO()
    with matplotlib.rc_context({"mathtext.fontset": "cm"}):
        mathtext.math_to_image(
            f"${latex}$",
            buf,
            prop=FontProperties(size=MATH_POINTS),
            dpi=dpi,
            format="png",
            color="#1d232a",
        )
    raw = buf.getvalue()
    width, height = struct.unpack(">II", raw[16:24])
    return {
        "latex": latex,
        "png": base64.b64encode(raw).decode("ascii"),
        "width": max(1, round(width * 100 / dpi)),
        "height": max(1, round(height * 100 / dpi)),
    }


def math_images(lines: Sequence[str]) -> list[dict[str, Any]]:
    """A model's generative story as rendered lines; empty (the page shows the docstring) if
    any line does not parse."""
    try:
        return [render_math(line) for line in lines]
    except ValueError:
        return []


_DATA_NOTE = re.compile(r"(?:^|\s)(Default data:.*?)(?:\n\s*\n|$)", re.S)


def data_provenance(doc: str) -> str | None:
    """The paragraph of a model's docstring that says where its default data come from
    (``Default data: ...``), joined into one line; None if it has none."""
    m = _DATA_NOTE.search(doc or "")
    return " ".join(m.group(1).replace("``", "").split()) if m else None


def stored_note(cmp: Comparison) -> list[str]:
    """The runs whose draws the report keeps thinned (``extras[STORED_KEY]``, see
    ``zoo.store.stored_form``): ``"mams: one draw in 4 of its 16000"``."""
    return [
        f"{engine}: one draw in {s['every']} of its {s['draws']}"
        for engine, run in cmp.runs.items()
        if (s := run.extras.get(STORED_KEY))
    ]


# --------------------------------------------------------------------------- page hook
def page_extras(cmp: Comparison, *, figures: bool = True) -> dict[str, Any]:
    """The model page's forest plot, posterior predictive check, LOO/WAIC table, rendered math
    and data provenance, as context keys ``forest``, ``ppc``, ``loo``, ``math``,
    ``provenance`` (``forest``/``ppc`` None and ``math`` empty when ``figures`` is False)."""
    colors = engine_colors(cmp.runs)
    return {
        "forest": forest_figure(cmp, colors) if figures else None,
        "ppc": ppc_figure(cmp, colors) if figures else None,
        "loo": loo_comparison(cmp),
        "math": math_images(cmp.model.math) if figures else [],
        "provenance": data_provenance(cmp.model.doc),
        "stored": stored_note(cmp),
    }
