"""The leaderboard's pages (:func:`zoo.benchmark`): an index with the overall ranking and a
table a target, a page a target with its b² curves, and the figures as CSV and JSON beside.

A pure function of the leaderboard's plain data (:func:`render`): running the cells is
:mod:`zoo.leaderboard`'s job."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from matplotlib.figure import Figure

from .figures import engine_colors, to_base64_png
from .render import now_utc, versions
from .render import render as render_template

FIGURES = (  # column, heading, lower is better
    ("gradients_b2_max", "gradients to b²<sub>max</sub> < 0.01", True),
    ("gradients_b2_avg", "gradients to b²<sub>avg</sub> < 0.01", True),
    ("ess_per_1000_gradients", "ESS / 1,000 gradients", False),
    ("time_to_ess_s", "cold s to ESS target", True),
    ("divergences", "divergences", True),
)


def page_name(target: str) -> str:
    """The file of a target's page."""
    return re.sub(r"[^A-Za-z0-9_.-]", "_", target) + ".html"


def _value(v: Any) -> float:
    if v == "inf":
        return math.inf
    return math.nan if v is None else float(v)


def figure_text(row: Mapping[str, Any], column: str) -> str:
    """A table cell: the median over seeds, its range where seeds differ, "not reached" for an
    infinite count, a dash for nothing measured."""
    v = _value(row.get(column))
    if math.isnan(v):
        return "\u2014"
    if math.isinf(v):
        return "not reached"
    digits = 2 if column in ("time_to_ess_s", "ess_per_1000_gradients") else 0
    text = f"{v:,.{digits}f}"
    low, high = _value(row.get(f"{column}_low")), _value(row.get(f"{column}_high"))
    if (row.get("seeds") or 0) > 1 and low != high and not math.isnan(low):
        hi = "inf" if math.isinf(high) else f"{high:,.{digits}f}"
        text += f" ({low:,.{digits}f}\u2013{hi})"
    return text


def best_marks(rows: Sequence[Mapping[str, Any]]) -> dict[tuple[str, str], bool]:
    """Which (engine, column) holds the target's best finite figure among its measured rows."""
    out: dict[tuple[str, str], bool] = {}
    own = [r for r in rows if not str(r["engine"]).startswith("published ")]
    for column, _, lower in FIGURES:
        values = [(_value(r.get(column)), r["engine"]) for r in own]
        finite = [(v, e) for v, e in values if math.isfinite(v)]
        if finite and len(own) > 1:
            best = min(finite) if lower else max(finite)
            out |= {(e, column): v == best[0] for v, e in finite}
    return out


def curve_figure(target: str, curves: Sequence[Mapping[str, Any]], threshold: float) -> str | None:
    """b²_max (solid) and b²_avg (dashed) against gradients a chain, an engine a colour, a
    line a seed, on log axes; the threshold dotted. None where no cell drew."""
    if not curves:
        return None
    colors = engine_colors(dict.fromkeys(c["engine"] for c in curves))
    fig = Figure(figsize=(7.5, 4.2), layout="constrained")
    ax = fig.add_subplot()
    seen: set[str] = set()
    for c in curves:
        g = np.asarray(c["gradients"], dtype=float)
        for key, style in (("b2_max", "-"), ("b2_avg", "--")):
            y = np.asarray(c[key], dtype=float)
            ok = (g > 0) & (y > 0)
            label = c["engine"] if key == "b2_max" and c["engine"] not in seen else None
            seen.add(c["engine"])
            ax.plot(g[ok], y[ok], style, color=colors[c["engine"]], lw=1.3, label=label)
    ax.axhline(threshold, color="#555", ls=":", lw=1)
    ax.set(
        xscale="log",
        yscale="log",
        xlabel="gradient evaluations a chain (after warmup)",
        ylabel="b² (median over chains)",
        title=target,
    )
    ax.legend(fontsize=8, frameon=False)
    return to_base64_png(fig, crop=False)


def render(board: Mapping[str, Any]) -> dict[str, str]:
    """``{filename: text}`` of the leaderboard ``board`` (:func:`zoo.leaderboard._payload`)."""
    table = board["table"]
    targets = list(dict.fromkeys(r["target"] for r in table))
    by_target = {t: [r for r in table if r["target"] == t] for t in targets}
    common = {
        "generated": now_utc(),
        "profile": board["size"],
        "seed": ", ".join(
            str(s) for s in sorted({c["seed"] for c in board["cells"] if c["seed"] is not None})
        ),
        "versions": versions(),
        "size": board["size"],
        "sizes": board["sizes"],
        "threshold": board["threshold"],
        "r_hat_max": board["r_hat_max"],
        "figures": FIGURES,
        "text": figure_text,
        "page_name": page_name,
    }
    files = {
        "index.html": render_template(
            "leaderboard.html.j2",
            ranking=board["ranking"],
            targets=targets,
            by_target=by_target,
            best={t: best_marks(rows) for t, rows in by_target.items()},
            **common,
        ),
        "leaderboard.csv": board["csv"],
        "leaderboard.json": json.dumps(
            {k: board[k] for k in ("size", "sizes", "threshold", "ranking", "table", "cells")},
            indent=1,
        ),
    }
    for t in targets:
        curves = [c for c in board["curves"] if c["target"] == t]
        cells = [c for c in board["cells"] if c["target"] == t]
        files[page_name(t)] = render_template(
            "bench_target.html.j2",
            target=t,
            rows=by_target[t],
            best=best_marks(by_target[t]),
            cells=cells,
            png=curve_figure(t, curves, board["threshold"]),
            **common,
        )
    return files
