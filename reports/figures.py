"""Figures for a model page, as base64 PNG strings ready for ``data:`` URIs.

Drawn with matplotlib's object API on the Agg canvas (no pyplot, no global backend switch), so
making a report never opens a window or disturbs a user's interactive session.

Every figure reads only the Run contract: posterior draws from ``run.idata.posterior``, the ELBO
trace from ``traces["elbo"]``, an EM trace from ``traces["log_likelihood"]`` and MCMC
chains from runs whose InferenceData has ``sample_stats``, and the posterior predictive check
from its ``posterior_predictive`` group (drawn when the run was made): no figure runs a model.
Model-specific figures are :mod:`zoo_reports.model_figures`'s; the forest plot, the predictive
check, the LOO/WAIC table and the rendered math are :mod:`zoo_reports.extras`'s.
"""

from __future__ import annotations

import base64
import io
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import matplotlib
import matplotlib.colors
import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator
from PIL import Image
from scipy import stats

from zoo_inference.results import Comparison, Density, GroundTruth, Run

if TYPE_CHECKING:
    import xarray as xr

MAX_DENSITY_ROWS = 8
MAX_TRACE_ROWS = 4
MAX_TRACE_CHAINS = 8  # more lines than this in one panel are a blur
DPI = 100
_PALETTE = (
    "#1f77b4",
    "#ff7f0e",
    "#2ca02c",
    "#d62728",
    "#9467bd",
    "#8c564b",
    "#e377c2",
    "#17becf",
    "#bcbd22",
    "#7f7f7f",
    # tab20's light shades: a page of up to 20 engines has no two alike
    "#aec7e8",
    "#ffbb78",
    "#98df8a",
    "#ff9896",
    "#c5b0d5",
    "#c49c94",
    "#f7b6d2",
    "#9edae5",
    "#dbdb8d",
    "#c7c7c7",
)


@dataclass(frozen=True)
class FigureImage:
    """One embedded figure: ``png`` is base64 PNG data (for ``data:image/png;base64,...``)."""

    kind: str  # density | optimisation | mcmc
    title: str
    caption: str
    png: str


def engine_colors(engines: Iterable[str]) -> dict[str, str]:
    """A fixed colour per engine, the same in every figure of a page, no two alike (past
    :data:`_PALETTE`'s 20, evenly spaced hues)."""
    engines = list(engines)
    if len(engines) <= len(_PALETTE):
        return dict(zip(engines, _PALETTE, strict=False))
    hues = matplotlib.colormaps["hsv"](np.linspace(0, 1, len(engines), endpoint=False))
    return {e: matplotlib.colors.to_hex(c) for e, c in zip(engines, hues, strict=True)}


def to_base64_png(fig: Figure, *, crop: bool = True) -> str:
    """The figure as a base64 PNG, cropped to what is drawn (``bbox_inches="tight"``, which
    draws the figure once to measure it, then again to save it); ``crop=False`` for a figure
    laid out inside its canvas (fixed margins or constrained layout), saved as it is in one
    draw (the trace, density and forest figures)."""
    FigureCanvasAgg(fig)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI, bbox_inches="tight" if crop else None)
    return base64.b64encode(palette_png(buf.getvalue())).decode("ascii")


def palette_png(raw: bytes) -> bytes:
    """A PNG in 256 colours (Pillow's octree quantiser, transparency kept): a figure of lines and
    fills looks the same in a fraction of the bytes."""
    image = Image.open(io.BytesIO(raw)).convert("RGBA")
    buf = io.BytesIO()
    image.quantize(colors=256, method=Image.Quantize.FASTOCTREE).save(buf, "PNG", optimize=True)
    return buf.getvalue()


_ROW = re.compile(r"^([^\[]+)(?:\[([^\]]*)\])?$")


def parse_row(row: str) -> tuple[str, tuple[int, ...]] | None:
    """``"locs[1]"`` -> ``("locs", (1,))``; ``"p"`` -> ``("p", ())``; None if not a site row."""
    m = _ROW.match(str(row))
    if not m:
        return None
    site, idx = m.group(1), m.group(2)
    if idx is None:
        return site, ()
    try:
        return site, tuple(int(i) for i in idx.split(","))
    except ValueError:
        return None


def posterior_of(run: Run | None) -> xr.Dataset | None:
    """A run's posterior group (an ``xarray.Dataset``), or None if it has none."""
    if run is None or not run.ok or run.idata is None or "posterior" not in run.idata.groups():
        return None
    return run.idata.posterior  # type: ignore[attr-defined]  # arviz sets groups as attributes


def draws_for(run: Run | None, row: str) -> np.ndarray | None:
    """Posterior draws of one summary row, shaped (chain, draw); None if the run has none."""
    parsed = parse_row(row)
    post = posterior_of(run)
    if parsed is None or post is None or parsed[0] not in post:
        return None
    values = np.asarray(post[parsed[0]].values, dtype=float)
    idx = parsed[1]
    if values.ndim != 2 + len(idx):
        return None
    try:
        key: tuple[slice | int, ...] = (slice(None), slice(None), *idx)
        return values[key]
    except IndexError:
        return None


def density_rows(cmp: Comparison, limit: int = MAX_DENSITY_ROWS) -> list[str]:
    """Scalar rows of the comparison table worth a density figure: continuous sites only (a
    per-observation discrete site would give one figure per observation), at most ``limit``."""
    discrete = set(cmp.model.discrete)
    rows = []
    for row in cmp.table_wide.index:
        parsed = parse_row(row)
        if parsed is None or parsed[0] in discrete:
            continue
        if any(draws_for(run, row) is not None for run in cmp.runs.values()):
            rows.append(str(row))
        if len(rows) >= limit:
            break
    return rows


def _truth_density(truth: GroundTruth | None, row: str) -> Density | None:
    return None if truth is None else truth.row_density(row)


KDE_MESH = 2048  # most points the draws are binned onto before smoothing (see kde)


def kde(
    x: np.ndarray, grid: np.ndarray, lower: float | None = None, upper: float | None = None
) -> np.ndarray:
    """Gaussian kernel density of draws ``x`` on ``grid`` with Scott's bandwidth h = sd n^-1/5
    (scipy's ``gaussian_kde``), reflected at known support ends. The draws are first binned
    linearly onto an even mesh at most h/8 apart (:data:`KDE_MESH` points at most), which moves
    each kernel by at most (step/h)^2/8 of its peak (0.2%), and makes the cost grid x mesh, not
    grid x draws, far cheaper than scipy's at many draws."""
    x = np.asarray(x, dtype=float)
    h = float(np.std(x, ddof=1)) * x.size**-0.2 if x.size > 1 else 0.0
    if not np.isfinite(h) or h <= 0:
        raise ValueError("a kernel density needs draws that vary")
    lo, hi = float(x.min()), float(x.max())
    m = int(min(KDE_MESH, max(2, np.ceil(8 * (hi - lo) / h) + 1)))
    step = (hi - lo) / (m - 1)  # hi > lo: the draws vary
    pos = (x - lo) / step
    i = np.clip(np.floor(pos).astype(int), 0, m - 2)
    frac = pos - i
    weight = np.bincount(i, 1 - frac, minlength=m) + np.bincount(i + 1, frac, minlength=m)
    used = weight > 0
    mesh, weight = lo + step * np.flatnonzero(used), weight[used]

    def at(q: np.ndarray) -> np.ndarray:
        return np.exp(-0.5 * ((q[:, None] - mesh[None, :]) / h) ** 2) @ weight

    y = at(grid)
    if lower is not None:
        y += at(2 * lower - grid)
    if upper is not None:
        y += at(2 * upper - grid)
    return y / (x.size * h * np.sqrt(2 * np.pi))


def density_figure(cmp: Comparison, row: str, colors: dict[str, str]) -> FigureImage:
    """Marginal posterior of one parameter row: every engine over the truth."""
    fig = Figure(figsize=(4.6, 2.9))
    ax = fig.add_subplot()
    samples: dict[str, np.ndarray] = {}
    points: dict[str, float] = {}
    for engine, run in cmp.runs.items():
        d = draws_for(run, row)
        if d is None:
            continue
        x = d.ravel()
        x = x[np.isfinite(x)]
        if x.size == 0:
            continue
        if x.size < 2 or np.ptp(x) <= 1e-12 * max(1.0, abs(float(x[0]))):
            points[engine] = float(x[0])
        else:
            samples[engine] = x
    truth = cmp.truth
    t_mean, t_sd = truth.rows().get(row, (None, None)) if truth is not None else (None, None)
    lo_hi: list[float] = []
    for x in samples.values():
        lo_hi += list(np.quantile(x, [0.002, 0.998]))
    lo_hi += list(points.values())
    if t_mean is not None and t_sd is not None and np.isfinite([t_mean, t_sd]).all():
        lo_hi += [t_mean - 4 * t_sd, t_mean + 4 * t_sd]
    lo, hi = (min(lo_hi), max(lo_hi)) if lo_hi else (0.0, 1.0)
    pad = 0.08 * (hi - lo) if hi > lo else 0.5 * max(1.0, abs(lo))
    lo, hi = lo - pad, hi + pad
    # Every draw of every engine non-negative (scales) or in [0, 1] (probabilities): take that as
    # the support, and reflect the kernel density at its ends instead of leaking mass past them.
    every = np.concatenate([*samples.values(), np.array(list(points.values()))])
    lower = 0.0 if every.size and every.min() >= 0 else None
    upper = 1.0 if lower is not None and every.max() <= 1 else None
    lo = max(lo, lower) if lower is not None else lo
    hi = min(hi, upper) if upper is not None else hi
    grid = np.linspace(lo, hi, 256)
    for engine, x in samples.items():
        try:
            ax.plot(grid, kde(x, grid, lower, upper), color=colors[engine], lw=1.6, label=engine)
        except (np.linalg.LinAlgError, ValueError):
            ax.hist(x, bins=30, density=True, histtype="step", color=colors[engine], label=engine)
    for engine, v in points.items():
        ax.axvline(v, color=colors[engine], lw=1.6, ls="--", label=f"{engine} (point)")
    pdf = _truth_density(truth, row)
    caption = "truth: none known"
    if pdf is not None:
        try:
            with np.errstate(all="ignore"):
                y = np.asarray(pdf(grid), dtype=float)
            y = np.where(np.isfinite(y), y, np.nan)
            ax.plot(grid, y, color="black", lw=2.6, alpha=0.85, label="truth", zorder=1)
            caption = "truth: exact density (black)"
        except Exception:  # noqa: BLE001 - a truth density that cannot be evaluated is skipped
            pdf = None
    if pdf is None and t_mean is not None and np.isfinite(t_mean):
        ax.axvline(t_mean, color="black", lw=2.4, label="truth mean")
        caption = "truth: posterior mean (black line)"
    ax.set_title(row, fontsize=11)
    ax.set_xlabel(row, fontsize=9)
    ax.set_ylabel("density", fontsize=9)
    ax.set_ylim(bottom=0)
    ax.tick_params(labelsize=8)
    ax.grid(alpha=0.25)
    ax.spines[["top", "right"]].set_visible(False)
    # margins in inches and the legend's rows (three entries a row) below the axes, so that the
    # figure is laid out inside its canvas and saved uncropped
    entries = len(ax.get_legend_handles_labels()[0])
    legend = 0.17 * -(-entries // 3) + 0.1 if entries else 0.0
    width, height = 4.6, 2.9 + legend
    fig.set_size_inches(width, height)
    left, right = 0.8 / width, 1 - 0.15 / width
    fig.subplots_adjust(
        left=left, right=right, top=1 - 0.32 / height, bottom=(0.5 + legend) / height
    )
    if entries:
        ax.legend(
            fontsize=7,
            frameon=False,
            loc="lower center",
            bbox_to_anchor=((left + right) / 2, 0.05 / height),
            bbox_transform=fig.transFigure,
            ncol=3,
            columnspacing=1.2,
            handlelength=1.8,
        )
    png = to_base64_png(fig, crop=False)
    return FigureImage("density", f"Marginal posterior of {row}", caption, png)


def optimisation_figure(cmp: Comparison, colors: dict[str, str]) -> FigureImage | None:
    """ELBO traces of SVI-like runs and log-likelihood traces of EM-like runs."""
    elbo = {
        e: np.asarray(r.traces["elbo"], dtype=float)
        for e, r in cmp.runs.items()
        if r.ok and len(r.traces.get("elbo") or ()) > 1
    }
    ll = {
        e: np.asarray(r.traces["log_likelihood"], dtype=float)
        for e, r in cmp.runs.items()
        if r.ok and len(r.traces.get("log_likelihood") or ()) > 0
    }
    panels = [p for p in (("elbo", elbo), ("ll", ll)) if p[1]]
    if not panels:
        return None
    fig = Figure(figsize=(4.8 * len(panels), 3.0))
    exact = None if cmp.truth is None else cmp.truth.log_evidence
    ranges: dict[str, tuple[float, float]] = {}  # each ELBO's range after its first 10%
    below: list[str] = []
    for i, (kind, traces) in enumerate(panels):
        ax = fig.add_subplot(1, len(panels), i + 1)
        for engine, y in traces.items():
            x = np.arange(1, y.size + 1)
            if kind == "elbo":
                ax.plot(x, y, color=colors[engine], alpha=0.25, lw=0.8)
                w = max(1, y.size // 50)
                smooth = np.convolve(y, np.ones(w) / w, mode="valid")
                ax.plot(x[w - 1 :], smooth, color=colors[engine], lw=1.6, label=f"{engine} ELBO")
                tail = y[y.size // 10 :]
                tail = tail[np.isfinite(tail)]
                if tail.size:
                    ranges[engine] = (float(np.percentile(tail, 1)), float(np.max(tail)))
            else:
                ax.plot(x - 1, y, "o-", color=colors[engine], ms=3, lw=1.2, label=f"{engine}")
                ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        if kind == "elbo" and ranges:
            below = elbo_axis(ax, ranges, exact)
        if kind == "elbo" and exact is not None and np.isfinite(exact):
            ax.axhline(exact, color="black", lw=1.4, ls="--", label="exact log evidence")
        ax.set_xlabel("step" if kind == "elbo" else "iteration", fontsize=9)
        ax.set_ylabel("ELBO" if kind == "elbo" else "log likelihood", fontsize=9)
        ax.set_title("ELBO per step" if kind == "elbo" else "EM log likelihood", fontsize=11)
        ax.tick_params(labelsize=8)
        ax.grid(alpha=0.25)
        ax.spines[["top", "right"]].set_visible(False)
        ax.legend(fontsize=7, frameon=False, loc="lower right")
    caption = "ELBO: raw (faint) and running mean; the dashed line is the exact log evidence."
    if below:
        caption += (
            " Clipped below the axis: "
            + ", ".join(f"{e} (down to {ranges[e][0]:.4g})" for e in below)
            + "."
        )
    if not elbo:
        caption = "Log likelihood at each EM iteration."
    elif ll:
        caption += " EM: log likelihood at each iteration."
    return FigureImage("optimisation", "Optimisation traces", caption, to_base64_png(fig))


ELBO_SPANS = 20  # the ELBO panel spans this many of the steadiest trace's spans below the best


def elbo_axis(ax: Any, ranges: Mapping[str, tuple[float, float]], exact: float | None) -> list[str]:
    """Fit the ELBO panel's y-axis to the traces' ranges ``(1st percentile, max)`` after their
    first 10%: from :data:`ELBO_SPANS` spans of the steadiest trace below the best ELBO (every
    trace's best in view), so that one engine's fall (pathfinder along a path into a funnel)
    does not flatten the others. Returns the engines whose trace the axis clips."""
    best = max(h for _, h in ranges.values())
    steadiest = max(min(h - lo for lo, h in ranges.values()), 1e-6)
    window = ELBO_SPANS * steadiest
    lo = max(min(lo for lo, _ in ranges.values()), best - window)
    lo = min(lo, min(h for _, h in ranges.values()) - 0.1 * window)
    hi = max(best, exact) if exact is not None and np.isfinite(exact) else best
    span = max(hi - lo, 1e-6)
    ax.set_ylim(lo - 0.1 * span, hi + 0.15 * span)
    return [e for e, (low, _) in ranges.items() if low < lo - 0.1 * span]


def shown_chains(ranks: Sequence[np.ndarray], limit: int = MAX_TRACE_CHAINS) -> np.ndarray:
    """Which chains a trace figure draws when there are more than ``limit``: those whose mean
    ranks are furthest from the middle (a chain stuck apart from the others is among them), in
    chain order. ``ranks``: per row, the ranks among all draws, shaped (chain, draw)."""
    n_chain, n_draw = ranks[0].shape
    if n_chain <= limit:
        return np.arange(n_chain)
    total = n_chain * n_draw
    # a chain's mean rank is (total + 1) / 2 when it mixes, with sd about sqrt((total^2 - 1) /
    # 12 / n) for n independent draws: the z-score of its mean rank, largest over the rows (only
    # the order matters, so autocorrelation, which widens every chain's sd alike, is left out)
    sd = np.sqrt((total**2 - 1) / 12.0 / n_draw)
    z = np.max([np.abs(r.mean(1) - (total + 1) / 2) / sd for r in ranks], axis=0)
    return np.sort(np.argsort(-z, kind="stable")[:limit])


def mcmc_figure(
    cmp: Comparison, engine: str, rows: Sequence[str], colors: dict[str, str]
) -> FigureImage | None:
    """Per-chain traces and rank histograms of an MCMC run (rank plots: flat when mixed); of
    many chains, the :data:`MAX_TRACE_CHAINS` least mixed (:func:`shown_chains`)."""
    run = cmp.runs[engine]
    if not run.ok or run.idata is None or "sample_stats" not in run.idata.groups():
        return None
    candidates = [(row, draws_for(run, row)) for row in rows[:MAX_TRACE_ROWS]]
    series = [(row, d) for row, d in candidates if d is not None and d.shape[1] > 1]
    if not series:
        return None
    ranks = [stats.rankdata(d.ravel()).reshape(d.shape) for _, d in series]
    n_chain = series[0][1].shape[0]
    shown = shown_chains(ranks)
    height = 1.9 * len(series) + 0.5
    fig = Figure(figsize=(9.0, height))
    # fixed margins (inches over the height) instead of tight_layout, which measures every tick
    # label once more (a third of the figure's time), wide enough for the labels: saved uncropped
    fig.subplots_adjust(
        left=0.08, right=0.98, bottom=0.55 / height, top=1 - 0.45 / height, wspace=0.2, hspace=0.3
    )
    chain_colors = {c: _PALETTE[(i + 3) % len(_PALETTE)] for i, c in enumerate(shown)}
    for i, ((row, d), rank) in enumerate(zip(series, ranks, strict=True)):
        ax_t = fig.add_subplot(len(series), 2, 2 * i + 1)
        ax_r = fig.add_subplot(len(series), 2, 2 * i + 2)
        bins = np.linspace(0.5, d.size + 0.5, min(20, max(2, d.shape[1] // 10)) + 1)
        for c in shown:
            ax_t.plot(d[c], color=chain_colors[c], lw=0.7, alpha=0.8, label=f"chain {c}")
            ax_r.hist(rank[c], bins=bins, histtype="step", color=chain_colors[c], lw=1.3)  # type: ignore[arg-type]  # matplotlib takes an array of edges
        ax_r.axhline(d.shape[1] / (len(bins) - 1), color="black", lw=0.8, ls=":")
        ax_t.set_ylabel(row, fontsize=9)
        for ax in (ax_t, ax_r):
            ax.tick_params(labelsize=7)
            ax.spines[["top", "right"]].set_visible(False)
        if i == 0:
            ax_t.set_title("trace", fontsize=10, loc="left")
            ax_r.set_title("rank histogram per chain (flat = mixed)", fontsize=10, loc="left")
            ax_t.legend(
                fontsize=7,
                frameon=False,
                loc="lower right",
                bbox_to_anchor=(1.0, 1.0),
                ncol=min(len(shown), 4),
                borderaxespad=0.1,
            )
        if i == len(series) - 1:
            ax_t.set_xlabel("draw", fontsize=9)
            ax_r.set_xlabel("rank among all draws", fontsize=9)
    which = (
        f"{n_chain} chains"
        if len(shown) == n_chain
        else f"the {len(shown)} of {n_chain} chains whose mean ranks are furthest from the "
        f"middle (ranks among all {n_chain} chains' draws)"
    )
    caption = f"{engine}: {which}; dotted line: the count of a uniform rank histogram."
    png = to_base64_png(fig, crop=False)
    return FigureImage("mcmc", f"{engine}: traces and rank plots", caption, png)


def pair_figure(cmp: Comparison, x_row: str, y_row: str) -> FigureImage | None:
    """Joint MCMC draws of two parameters per MCMC engine, divergent transitions in red: where
    in the posterior (a funnel's neck) a sampler fails."""
    panels = []
    for engine, run in cmp.runs.items():
        if not run.ok or run.idata is None or "sample_stats" not in run.idata.groups():
            continue
        x, y = draws_for(run, x_row), draws_for(run, y_row)
        stats_ = run.idata.sample_stats  # type: ignore[attr-defined]  # arviz sets groups as attributes
        if x is None or y is None or "diverging" not in stats_:
            continue
        div = np.asarray(stats_["diverging"].values, dtype=np.bool_)
        panels.append((engine, x.ravel(), y.ravel(), div.ravel()))
    if not panels:
        return None
    fig = Figure(figsize=(4.2 * len(panels), 3.4))
    for i, (engine, x, y, div) in enumerate(panels):
        ax = fig.add_subplot(1, len(panels), i + 1)
        ax.scatter(x[~div], y[~div], s=5, alpha=0.35, color="#1f77b4", label="draws")
        ax.scatter(x[div], y[div], s=14, color="#d62728", label=f"divergent ({div.sum()})")
        if (y > 0).all():
            ax.set_yscale("log")
        ax.set_xlabel(x_row, fontsize=9)
        ax.set_ylabel(y_row, fontsize=9)
        ax.set_title(engine, fontsize=10)
        ax.tick_params(labelsize=8)
        ax.legend(fontsize=7, frameon=False)
        ax.spines[["top", "right"]].set_visible(False)
    fig.tight_layout()
    caption = (
        f"MCMC draws of {x_row} and {y_row}; red: transitions that diverged (the sampler's "
        "step was too large for the curvature there)."
    )
    return FigureImage("pairs", f"{y_row} against {x_row}", caption, to_base64_png(fig))


def as_numpy(v: Any) -> Any:
    return v.detach().cpu().numpy() if hasattr(v, "detach") else v


def fit_figure(
    cmp: Comparison, spec: Mapping[str, str], colors: dict[str, str]
) -> FigureImage | None:
    """The data with each engine's posterior mean (and 90% band) of a deterministic site that
    gives the fitted curve at every observation. With ``spec["sd"]`` (a site holding the
    conditional sd of the curve given each draw, as a Gaussian process's), the band is mean
    +- 1.645 sd of the mixture of the draws' normals (law of total variance)."""
    data = cmp.data
    x = np.asarray(as_numpy(data.get(spec.get("x", ""))), dtype=float)
    y = np.asarray(as_numpy(data.get(spec.get("y", ""))), dtype=float)
    if x.ndim != 1 or y.shape != x.shape:
        return None
    order = np.argsort(x)
    fig = Figure(figsize=(6.4, 3.6))
    ax = fig.add_subplot()
    ax.scatter(x, y, s=10, color="black", alpha=0.6, label="data", zorder=3)
    drawn = 0
    for engine, run in cmp.runs.items():
        post = posterior_of(run)
        if post is None or spec.get("mean") not in post:
            continue
        mu = np.asarray(post[spec["mean"]].values, dtype=float)
        mu = mu.reshape(-1, *mu.shape[2:])
        if mu.shape[1:] != x.shape:
            continue
        if spec.get("sd") in post:  # a conditional sd per draw: mix the draws' normals
            sd = np.asarray(post[spec["sd"]].values, dtype=float).reshape(mu.shape)
            mid = mu.mean(0)
            half = 1.6449 * np.sqrt((sd**2).mean(0) + mu.var(0))
            lo, hi = mid - half, mid + half
        else:
            lo, mid, hi = np.quantile(mu, [0.05, 0.5, 0.95], axis=0)
        ax.plot(x[order], mid[order], color=colors[engine], lw=1.6, label=engine)
        ax.fill_between(x[order], lo[order], hi[order], color=colors[engine], alpha=0.15)
        drawn += 1
    if not drawn:
        return None
    ax.set_xlabel(spec["x"], fontsize=9)
    ax.set_ylabel(spec["y"], fontsize=9)
    ax.tick_params(labelsize=8)
    ax.legend(fontsize=7, frameon=False)
    ax.spines[["top", "right"]].set_visible(False)
    what = "mean" if spec.get("sd") else "median"
    caption = f"Data and each engine's posterior {what} of {spec['mean']} with its 90% band."
    return FigureImage("fit", "Fit over the data", caption, to_base64_png(fig))
