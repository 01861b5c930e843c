"""Pages of simulation-based calibration results (:class:`zoo_inference.sbc.Calibration`): ECDF
and rank-histogram figures, one page per model and engine (HTML, Markdown, JSON, CSV of the
ranks) and the index of every result in a folder. Text only: the caller writes the files."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from matplotlib.figure import Figure
from scipy import stats

from zoo_inference.sbc import Calibration, bin_edges, binned, ecdf_difference
from zoo_inference.serialize import dumps

from .figures import FigureImage, to_base64_png
from .render import now_utc, render, to_csv, versions

MAX_PANELS = 12  # parameters drawn in the figures (those with the smallest p-values)
INDEX = ("sbc.html", "sbc.md")


def shown_params(result: Calibration, limit: int = MAX_PANELS) -> list[int]:
    """Column indices of the parameters drawn: all, or the ``limit`` smallest p-values."""
    order = np.argsort(np.nan_to_num(result.p_values, nan=1.0), kind="stable")
    return sorted(int(j) for j in order[:limit])


def figures(result: Calibration, limit: int = MAX_PANELS) -> list[FigureImage]:
    """ECDF-difference plots with simultaneous 95% bands and rank histograms, one panel per
    parameter (up to ``limit``: those with the smallest p-values)."""
    if len(result.rep_ids) == 0:
        return []
    shown = shown_params(result, limit)
    some = (
        ""
        if len(shown) == len(result.params)
        else f" The {len(shown)} of {len(result.params)} parameters with the smallest p-values."
    )
    return [
        FigureImage(
            "ecdf",
            "Rank ECDF minus uniform CDF",
            "The ECDF of the normalised ranks minus the uniform CDF (line) and the "
            "simultaneous 95% band of a uniform ECDF (shaded; ArviZ's optimised band). A "
            "curve leaving the band is miscalibration: a rise then a fall (ranks in the "
            "middle) is a posterior too wide, a fall then a rise (ranks at both ends) one "
            "too narrow, a curve on one side a biased one." + some,
            to_base64_png(_ecdf_figure(result, shown)),
        ),
        FigureImage(
            "ranks",
            "Rank histograms",
            f"Ranks in {result.bins} bins; the line is the expected count under uniformity and "
            "the dashed lines its 99% binomial range per bin." + some,
            to_base64_png(_histogram_figure(result, shown)),
        ),
    ]


def _grid(n: int) -> tuple[Figure, list[Any]]:
    cols = min(4, n)
    rows = math.ceil(n / cols)
    fig = Figure(figsize=(3.1 * cols, 2.4 * rows), layout="constrained")
    axes = fig.subplots(rows, cols, squeeze=False).ravel().tolist()
    for ax in axes[n:]:
        ax.set_visible(False)
    return fig, axes[:n]


def _ecdf_figure(result: Calibration, shown: Sequence[int]) -> Figure:
    fig, axes = _grid(len(shown))
    for ax, j in zip(axes, shown, strict=True):
        e = ecdf_difference(result.ranks[:, j], result.num_draws)
        ax.fill_between(e["z"], e["lower"], e["upper"], color="#d9dee3", lw=0)
        ax.step(e["z"], e["difference"], where="mid", color="#1f77b4", lw=1.3)
        ax.axhline(0.0, color="#5b6570", lw=0.7)
        ax.set_xlim(0, 1)
        ax.set_title(f"{result.params[j]}  (p = {result.p_values[j]:.2g})", fontsize=9)
        ax.tick_params(labelsize=7)
    axes[0].set_ylabel("ECDF − uniform", fontsize=8)
    return fig


def _histogram_figure(result: Calibration, shown: Sequence[int]) -> Figure:
    fig, axes = _grid(len(shown))
    assert result.bins is not None  # set by Calibration.__post_init__
    edges = bin_edges(result.num_draws, int(result.bins))
    n = len(result.rep_ids)
    counts, probs = binned(result.ranks, result.num_draws, int(result.bins))
    lo, hi = stats.binom.interval(0.99, n, probs)
    for ax, j in zip(axes, shown, strict=True):
        ax.stairs(counts[j], edges, fill=True, color="#1f77b4", alpha=0.75)
        ax.stairs(probs * n, edges, color="#5b6570", lw=0.9)
        for bound in (lo, hi):
            ax.stairs(bound, edges, color="#5b6570", lw=0.7, ls="--")
        ax.set_xlim(0, result.num_draws + 1)
        ax.set_title(f"{result.params[j]}", fontsize=9)
        ax.tick_params(labelsize=7)
    axes[0].set_ylabel("replications", fontsize=8)
    return fig


def page(result: Calibration, *, generated: str | None = None) -> dict[str, str]:
    """The result's files: ``sbc-MODEL-ENGINE.html``, ``.md``, ``.json`` (everything) and
    ``.csv`` (the ranks), as ``{filename: text}``."""
    generated = generated or now_utc()
    record = {**result.record(), "generated": generated, "versions": versions()}
    ctx = _context([record], details=[_details(result)], generated=generated)
    return {
        f"{result.stem}.html": render("sbc.html.j2", **ctx),
        f"{result.stem}.md": render("sbc.md.j2", **ctx),
        f"{result.stem}.json": dumps(record),
        f"{result.stem}.csv": to_csv(result.ranks_frame()),
    }


def _details(result: Calibration) -> dict[str, Any]:
    table = result.table
    shown = table.sort_values("p_value").head(40)
    return {
        "stem": result.stem,
        "rows": [{"name": str(k), **v} for k, v in shown.to_dict(orient="index").items()],
        "more_rows": max(0, len(table) - len(shown)),
        "figures": figures(result),
    }


def _context(
    records: Sequence[Mapping[str, Any]],
    *,
    details: Sequence[Mapping[str, Any]] | None,
    generated: str,
) -> dict[str, Any]:
    first = records[0]
    return {
        "records": list(records),
        "details": list(details) if details is not None else None,
        "single": details is not None and len(records) == 1,
        "generated": generated,
        "profile": "sbc",
        "seed": first["seed"] if len({r["seed"] for r in records}) == 1 else "various",
        "versions": versions(),
    }


def is_record(rec: Any) -> bool:
    """Whether ``rec`` (a page's JSON, read back) is an SBC result's record."""
    return isinstance(rec, dict) and {"model", "engine", "verdict", "page"} <= set(rec)


def pages(
    results: Sequence[Calibration], earlier: Mapping[str, Any] | None = None
) -> dict[str, str]:
    """Every result's files and the index (``sbc.html``, ``sbc.md``) of them and of the
    ``earlier`` records (stem -> record, read from the folder), as ``{filename: text}``."""
    generated = now_utc()
    files: dict[str, str] = {}
    records = {k: v for k, v in (earlier or {}).items() if is_record(v)}
    for res in results:
        files.update(page(res, generated=generated))
        records[res.stem] = json.loads(files[f"{res.stem}.json"])
    ordered = [records[k] for k in sorted(records)]
    ctx = _context(ordered, details=None, generated=generated)
    files["sbc.html"] = render("sbc.html.j2", **ctx)
    files["sbc.md"] = render("sbc.md.j2", **ctx)
    return files
