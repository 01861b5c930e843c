"""The forest plot: every engine's mean +- 2 sd over every parameter, with the truth."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from matplotlib.artist import Artist
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch

from zoo_inference.results import Comparison

from .figures import FigureImage, parse_row, to_base64_png

MAX_FOREST_ROWS = 40  # parameter rows in the forest plot; the rest are named in its caption
FOREST_COLUMN_ROWS = 14  # above this many rows the plot is laid out in two columns


@dataclass(frozen=True)
class Interval:
    """One line of the forest plot: a source's (engine or ``truth``) mean and mean +- 2 sd."""

    parameter: str
    source: str
    mean: float
    lo: float
    hi: float


def forest_intervals(cmp: Comparison) -> dict[str, list[Interval]]:
    """Every continuous parameter row of the comparison table with its intervals, truth first
    then the engines in run order (mean +- 2 sd from the table; a point estimate: mean only)."""
    table, discrete = cmp.table_wide, set(cmp.model.discrete)
    sources = ["truth", *[e for e in cmp.runs if (e, "mean") in table.columns]]
    columns = {}
    for source in sources:
        if (source, "mean") not in table.columns:
            continue
        mean = table[(source, "mean")].to_numpy(dtype=float)
        sd = (
            table[(source, "sd")].to_numpy(dtype=float)
            if (source, "sd") in table.columns
            else np.zeros_like(mean)
        )
        columns[source] = (mean, np.where(np.isfinite(sd), 2 * sd, 0.0))
    out: dict[str, list[Interval]] = {}
    for i, row in enumerate(table.index):
        parsed = parse_row(row)
        if parsed is None or parsed[0] in discrete:
            continue
        lo, hi = cmp.model.bounds.get(parsed[0], (-np.inf, np.inf))  # the band in the support
        lines = [
            Interval(str(row), source, m[i], max(m[i] - h[i], lo), min(m[i] + h[i], hi))
            for source, (m, h) in columns.items()
            if np.isfinite(m[i])
        ]
        if any(iv.source != "truth" for iv in lines):
            out[str(row)] = lines
    return out


def _compact_rows(rows: Sequence[str]) -> str:
    """Row names grouped by site: ``beta[31..40] (10 rows), sigma``."""
    by_site: dict[str, list[str]] = {}
    for row in rows:
        by_site.setdefault(str(row).partition("[")[0], []).append(str(row))
    parts = []
    for site, names in by_site.items():
        if len(names) == 1:
            parts.append(names[0])
        else:
            first, last = names[0].partition("[")[2], names[-1].partition("[")[2]
            parts.append(f"{site}[{first.rstrip(']')}..{last} ({len(names)} rows)")
    return ", ".join(parts)


def _forest_panels(rows: Sequence[str]) -> list[list[tuple[str, list[str]]]]:
    """Rows as columns of panels, one panel per site (a long site split between columns)."""
    blocks: list[tuple[str, list[str]]] = []
    for row in rows:
        site = row.partition("[")[0]
        if blocks and blocks[-1][0] == site:
            blocks[-1][1].append(row)
        else:
            blocks.append((site, [row]))
    if len(rows) <= FOREST_COLUMN_ROWS:
        return [blocks]
    capacity = -(-len(rows) // 2)
    columns: list[list[tuple[str, list[str]]]] = [[], []]
    used = 0
    for site, names in blocks:
        while names:
            col = 0 if used < capacity else 1
            take = names[: capacity - used] if col == 0 else names
            columns[col].append((site, take))
            used += len(take)
            names = names[len(take) :]
    return [c for c in columns if c]


def forest_plot(
    cmp: Comparison, colors: Mapping[str, str], limit: int = MAX_FOREST_ROWS
) -> tuple[Figure, list[str], list[str]] | None:
    """The forest plot as a matplotlib Figure, the rows it shows and the rows it leaves out.

    One panel per site; in each parameter's row one line per engine (mean +- 2 sd, its colour
    as in every figure of the page) over the truth's band (mean +- 2 sd, grey) and mean
    (black). Each line carries a ``gid`` ``"<source>|<parameter>"``."""
    intervals = forest_intervals(cmp)
    if not intervals:
        return None
    rows = list(intervals)
    shown, left = rows[:limit], rows[limit:]
    engines = [e for e in cmp.runs if any(i.source == e for r in shown for i in intervals[r])]
    per_row = 0.16 + 0.055 * max(1, len(engines))
    columns = _forest_panels(shown)
    tallest = max(sum(len(n) for _, n in col) for col in columns)
    n_panels = max(len(col) for col in columns)
    width = 9.0 if len(columns) > 1 else 7.0
    height = 0.8 + per_row * tallest + 0.5 * n_panels
    fig = Figure(figsize=(width, height), layout="constrained")
    subfigs = fig.subfigures(1, len(columns), squeeze=False)[0]
    offsets = np.linspace(-0.32, 0.32, len(engines)) if len(engines) > 1 else np.zeros(1)
    for subfig, col in zip(subfigs, columns, strict=True):
        heights = [len(names) + 0.9 for _, names in col]
        axes = subfig.subplots(len(col), 1, squeeze=False, height_ratios=heights)[:, 0]
        for ax, (site, names) in zip(axes, col, strict=True):
            for i, row in enumerate(names):
                for iv in intervals[row]:
                    if iv.source == "truth":
                        if iv.hi > iv.lo:
                            ax.fill_betweenx(
                                [i - 0.44, i + 0.44], iv.lo, iv.hi, color="#c8ced4", lw=0, zorder=0
                            )
                        ax.plot(
                            [iv.mean, iv.mean],
                            [i - 0.44, i + 0.44],
                            color="black",
                            lw=1.8,
                            zorder=1,
                            gid=f"truth|{row}",
                        )
                        continue
                    y = i + offsets[engines.index(iv.source)]
                    color = colors.get(iv.source, "#555555")
                    ax.plot(
                        [iv.lo, iv.hi],
                        [y, y],
                        color=color,
                        lw=1.5,
                        zorder=2,
                        gid=f"{iv.source}|{row}",
                    )
                    ax.plot(iv.mean, y, "o", color=color, ms=3.2, zorder=3)
            ax.set_yticks(range(len(names)), names, fontsize=8)
            ax.set_ylim(len(names) - 0.5, -0.5)
            if names != [site]:  # a scalar site's row label names it already
                ax.set_title(site, fontsize=9, loc="left")
            ax.tick_params(axis="x", labelsize=7)
            ax.tick_params(axis="y", length=0)
            ax.grid(axis="x", alpha=0.25)
            for k in range(1, len(names)):
                ax.axhline(k - 0.5, color="#eceff2", lw=0.6, zorder=0)
            ax.spines[["top", "right"]].set_visible(False)
    handles: list[Artist] = [
        Line2D([], [], color=colors.get(e, "#555555"), lw=1.5, marker="o", ms=3) for e in engines
    ]
    labels = list(engines)
    if any(i.source == "truth" for r in shown for i in intervals[r]):
        handles.append(Patch(facecolor="#c8ced4", edgecolor="black", lw=1.2))
        labels.append("truth (mean, \u00b12 sd)")
    fig.legend(
        handles,
        labels,
        loc="outside upper center",
        ncol=min(len(labels), 6),
        fontsize=8,
        frameon=False,
    )
    return fig, shown, left


def forest_figure(cmp: Comparison, colors: Mapping[str, str]) -> FigureImage | None:
    """The forest plot of every engine over every continuous parameter, the truth marked."""
    drawn = forest_plot(cmp, colors)
    if drawn is None:
        return None
    fig, shown, left = drawn
    caption = (
        "Each engine's posterior mean (dot) and mean \u00b1 2 sd (line) for every parameter"
        + ("; grey band and black line: the truth's mean \u00b1 2 sd and mean" if cmp.truth else "")
        + "; a dot without a line is a point estimate. Lines and bands stop at the edge of "
        "each parameter's support."
    )
    if left:
        caption += (
            f" The first {len(shown)} of {len(shown) + len(left)} rows; not shown: "
            f"{_compact_rows(left)} (every row is in the CSV)."
        )
    png = to_base64_png(fig, crop=False)  # constrained layout keeps it inside its canvas
    return FigureImage("forest", "Forest plot: every engine over every parameter", caption, png)
