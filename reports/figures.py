"""Figures for a model page, as base64 PNG strings ready for ``data:`` URIs.

Drawn with matplotlib's object API on the Agg canvas (no pyplot, no global backend switch), so
making a report never opens a window or disturbs a user's interactive session.

Every figure reads only the Run contract: posterior draws from ``run.idata.posterior``, the ELBO
trace from ``traces["elbo"]``, an EM trace from ``traces["log_likelihood"]`` and MCMC
chains from runs whose InferenceData has ``sample_stats``. The one exception is the posterior
predictive check, which replays draws through the model itself (looked up in the registry by
name). :func:`page_extras` adds the forest plot, that check, the LOO/WAIC table (ArviZ, from the
runs' pointwise log-likelihood) and the generative story rendered by matplotlib's mathtext.
"""

from __future__ import annotations

import base64
import importlib
import io
import re
import struct
import time
import warnings
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import matplotlib
import numpy as np
import pandas as pd
import pyro.distributions as dist
import torch
from matplotlib import mathtext
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.font_manager import FontProperties
from matplotlib.lines import Line2D
from matplotlib.patches import Patch
from matplotlib.ticker import MaxNLocator
from pyro.poutine.util import site_is_subsample
from scipy import stats
from scipy.optimize import linear_sum_assignment

from zoo_inference.arviz_io import _quiet, arviz, to_inference_data
from zoo_inference.replay import replay_one
from zoo_inference.results import Comparison, Density, GroundTruth, Run
from zoo_inference.runtime import seeded
from zoo_inference.structure import trace_model

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
)


@dataclass(frozen=True)
class FigureImage:
    """One embedded figure: ``png`` is base64 PNG data (for ``data:image/png;base64,...``)."""

    kind: str  # density | optimisation | mcmc
    title: str
    caption: str
    png: str


def engine_colors(engines: Iterable[str]) -> dict[str, str]:
    """A fixed colour per engine, the same in every figure of a page."""
    return {e: _PALETTE[i % len(_PALETTE)] for i, e in enumerate(engines)}


def to_base64_png(fig: Figure, *, crop: bool = True) -> str:
    """The figure as a base64 PNG, cropped to what is drawn (``bbox_inches="tight"``, which
    draws the figure once to measure it, then again to save it); ``crop=False`` for a figure
    laid out inside its canvas (fixed margins or constrained layout), saved as it is in one
    draw (the trace, density and forest figures: the quick report's 29 pages took 65 CPU
    seconds to render instead of 80)."""
    FigureCanvasAgg(fig)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI, bbox_inches="tight" if crop else None)
    return base64.b64encode(buf.getvalue()).decode("ascii")


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
    return run.idata.posterior


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
        return values[(slice(None), slice(None), *idx)]
    except IndexError:
        return None


def density_rows(cmp: Comparison, limit: int = MAX_DENSITY_ROWS) -> list[str]:
    """Scalar rows of the comparison table worth a density figure: continuous sites only (a
    per-observation discrete site would give one figure per observation), at most ``limit``."""
    discrete = set(cmp.model.discrete)
    rows = []
    for row in cmp.table.index:
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
    grid x draws: 6 ms a curve at 16000 draws against scipy's 130 (the kernel densities were
    a fifth of a report's page time)."""
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
                    lo, hi = np.percentile(tail, 1), max(np.nanmax(tail), exact or -np.inf)
                    span = max(hi - lo, 1e-6)
                    ax.set_ylim(lo - 0.1 * span, hi + 0.15 * span)
            else:
                ax.plot(x - 1, y, "o-", color=colors[engine], ms=3, lw=1.2, label=f"{engine}")
                ax.xaxis.set_major_locator(MaxNLocator(integer=True))
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
    if not elbo:
        caption = "Log likelihood at each EM iteration."
    elif ll:
        caption += " EM: log likelihood at each iteration."
    return FigureImage("optimisation", "Optimisation traces", caption, to_base64_png(fig))


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
    series = [(row, draws_for(run, row)) for row in rows[:MAX_TRACE_ROWS]]
    series = [(row, d) for row, d in series if d is not None and d.shape[1] > 1]
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
            ax_r.hist(rank[c], bins=bins, histtype="step", color=chain_colors[c], lw=1.3)
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
        if x is None or y is None or "diverging" not in run.idata.sample_stats:
            continue
        div = np.asarray(run.idata.sample_stats["diverging"].values, dtype=bool)
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


def fit_figure(
    cmp: Comparison, spec: Mapping[str, str], colors: dict[str, str]
) -> FigureImage | None:
    """The data with each engine's posterior mean (and 90% band) of a deterministic site that
    gives the fitted curve at every observation. With ``spec["sd"]`` (a site holding the
    conditional sd of the curve given each draw, as a Gaussian process's), the band is mean
    +- 1.645 sd of the mixture of the draws' normals (law of total variance)."""
    data = cmp.data
    x = np.asarray(_as_numpy(data.get(spec.get("x"))), dtype=float)
    y = np.asarray(_as_numpy(data.get(spec.get("y"))), dtype=float)
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


def _site_draws(run: Run | None, site: str) -> np.ndarray | None:
    """A site's draws flattened over chains, ``(draws, *shape)``; None if the run has none."""
    post = posterior_of(run)
    if post is None or site not in post:
        return None
    values = np.asarray(post[site].values)
    return values.reshape(-1, *values.shape[2:])


def _modal(labels: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Per column of integer draws ``(draws, n)``: the most frequent label and its share."""
    counts = np.stack([(labels == j).sum(0) for j in range(k)])  # (k, n)
    return counts.argmax(0), counts.max(0) / len(labels)


def clusters_figure(cmp: Comparison, spec: Mapping[str, str]) -> FigureImage | None:
    """The data coloured by each engine's posterior assignment (the most frequent label over
    the draws; paler where the draws disagree): one row per engine for one-dimensional data, one
    panel per engine on the first two principal components otherwise."""
    data = np.asarray(_as_numpy(cmp.data.get(spec.get("data"))), dtype=float)
    panels = []
    for engine, run in cmp.runs.items():
        z = _site_draws(run, spec.get("assignment", ""))
        resp = run.extras.get("responsibilities") if run.ok else None
        if z is not None and z.shape[1:] == data.shape[:1]:
            z = np.rint(z).astype(int)
            label, share = _modal(z, int(z.max()) + 1)
        elif resp is not None and np.shape(resp)[:1] == data.shape[:1]:  # EM's E-step
            label, share = np.argmax(resp, 1), np.max(resp, 1)
        else:
            continue
        panels.append((engine, label, share))
    if not panels or data.ndim not in (1, 2):
        return None
    cluster_colors = np.array(_PALETTE)
    if data.ndim == 1:
        fig = Figure(figsize=(6.4, 0.6 + 0.45 * len(panels)))
        ax = fig.add_subplot()
        jitter = np.random.default_rng(0).uniform(-0.15, 0.15, len(data))
        for i, (_, label, share) in enumerate(panels):
            rgba = [
                (*_rgb(cluster_colors[lab % len(_PALETTE)]), 0.2 + 0.8 * (sh - 0.5) * 2)
                for lab, sh in zip(label, np.maximum(share, 0.5), strict=True)
            ]
            ax.scatter(data, i + jitter, s=9, c=rgba)
        ax.set_yticks(range(len(panels)), [p[0] for p in panels], fontsize=8)
        ax.set_xlabel(spec["data"], fontsize=9)
        ax.invert_yaxis()
    else:
        centred = data - data.mean(0)
        pcs = centred @ np.linalg.svd(centred, full_matrices=False)[2][:2].T
        fig = Figure(figsize=(3.2 * min(len(panels), 4), 3.0))
        for i, (engine, label, share) in enumerate(panels[:4]):
            ax = fig.add_subplot(1, min(len(panels), 4), i + 1)
            ax.scatter(
                pcs[:, 0],
                pcs[:, 1],
                s=8,
                c=cluster_colors[label % len(_PALETTE)],
                alpha=0.3 + 0.7 * np.clip(2 * share - 1, 0, 1),
            )
            ax.set_title(engine, fontsize=9)
            ax.set_xlabel("PC 1", fontsize=8)
            ax.set_ylabel("PC 2", fontsize=8)
            ax.tick_params(labelsize=7)
    for ax in fig.axes:
        ax.tick_params(labelsize=7)
        ax.spines[["top", "right"]].set_visible(False)
    fig.tight_layout()
    caption = (
        f"The data coloured by each engine's posterior assignment {spec['assignment']} (its most "
        "frequent value over the draws, or EM's most responsible component; paler where the "
        "draws or responsibilities are split). Colours are labels, "
        "compared across engines only as far as the model orders its components."
    )
    return FigureImage("clusters", "Clusters", caption, to_base64_png(fig))


def _rgb(hex_color: str) -> tuple[float, float, float]:
    h = hex_color.lstrip("#")
    return tuple(int(h[i : i + 2], 16) / 255 for i in (0, 2, 4))  # type: ignore[return-value]


def topics_figure(cmp: Comparison, spec: Mapping[str, Any]) -> FigureImage | None:
    """Each topic as its most probable words (posterior mean of the topic-word site), one column
    per engine; topics matched to the first engine's (Hungarian method on the total variation
    between word distributions), so a row is one topic for every engine."""
    site, top = spec.get("topic_word", ""), int(spec.get("top", 8))
    vocabulary = spec.get("vocabulary")
    words = list(cmp.data[vocabulary]) if vocabulary and vocabulary in cmp.data else None
    means = {}
    for engine, run in cmp.runs.items():
        phi = _site_draws(run, site)
        if phi is not None and phi.ndim == 3:
            means[engine] = phi.astype(float).mean(0)
    if not means:
        return None
    ref = next(iter(means.values()))
    columns = []
    for engine, phi in means.items():
        if phi.shape != ref.shape:
            continue
        cost = np.abs(ref[:, None, :] - phi[None, :, :]).sum(-1)
        order = linear_sum_assignment(cost)[1]
        lines = []
        for k, j in enumerate(order):
            best = np.argsort(phi[j])[::-1][:top]
            names = [str(words[w]) if words else f"w{w}" for w in best]
            lines.append(f"{k + 1}: " + " ".join(names))
        columns.append((engine, lines))
    K = ref.shape[0]
    fig = Figure(figsize=(2.6 + 0.42 * top * len(columns), 0.5 + 0.3 * K))
    ax = fig.add_subplot()
    ax.axis("off")
    for c, (engine, lines) in enumerate(columns):
        x = c / len(columns)
        ax.text(x, 1.0, engine, fontsize=9, fontweight="bold", va="bottom", transform=ax.transAxes)
        for k, line in enumerate(lines):
            ax.text(
                x,
                1.0 - (k + 1) / (K + 1),
                line,
                fontsize=8,
                family="monospace",
                va="bottom",
                transform=ax.transAxes,
            )
    caption = (
        f"Each topic's {top} most probable words under each engine (posterior mean of "
        f"{site}); topics matched across engines to the first one's by the Hungarian method."
    )
    return FigureImage("topics", "Topics as word lists", caption, to_base64_png(fig))


def state_shares(run: Run | None, prefix: str, T: int) -> np.ndarray | None:
    """``(states, T)``: the share of a run's draws in each state at each step, the states being
    the sites ``prefix0 .. prefix{T-1}``; None if the run has no draws of them."""
    path = [_site_draws(run, f"{prefix}{t}") for t in range(T)]
    if any(p is None for p in path):
        return None
    z = np.rint(np.stack([p.reshape(len(p)) for p in path], 1)).astype(int)  # (draws, T)
    return np.stack([(z == j).mean(0) for j in range(max(int(z.max()) + 1, 2))])


def states_figure(cmp: Comparison, spec: Mapping[str, str]) -> FigureImage | None:
    """The observed series over time and, per engine, the posterior probability of each hidden
    state at each step (the share of draws in it; a point estimate's decoded path is a share of
    0 or 1), with the most probable state's path drawn over it."""
    x = np.asarray(_as_numpy(cmp.data.get(spec.get("data"))), dtype=float)
    prefix = spec.get("prefix", "z_")
    T = len(x)
    rows = []
    for engine, run in cmp.runs.items():
        probs = state_shares(run, prefix, T)
        if probs is not None:
            rows.append((engine, probs))
    if not rows:
        return None
    fig = Figure(figsize=(6.8, 1.6 + 0.8 * len(rows)))
    grid = fig.add_gridspec(1 + len(rows), 1, height_ratios=[2] + [1] * len(rows))
    ax = fig.add_subplot(grid[0])
    steps = np.arange(T)
    ax.plot(steps, x, color="black", lw=1, marker="o", ms=3)
    ax.set_ylabel(spec["data"], fontsize=8)
    for i, (engine, probs) in enumerate(rows):
        a = fig.add_subplot(grid[i + 1], sharex=ax)
        a.imshow(
            probs,
            aspect="auto",
            cmap="Blues",
            vmin=0,
            vmax=1,
            interpolation="nearest",
            extent=(-0.5, T - 0.5, probs.shape[0] - 0.5, -0.5),
        )
        a.plot(steps, probs.argmax(0), color="#d62728", lw=1)
        a.set_yticks(range(probs.shape[0]))
        a.set_ylabel(engine, fontsize=8, rotation=0, ha="right", va="center")
    for a in fig.axes:
        a.tick_params(labelsize=7, labelbottom=a is fig.axes[-1])
    fig.axes[-1].set_xlabel("t", fontsize=8)
    caption = (
        "The series and, per engine, P(state = k | data) at each step (blue: the share of its "
        "draws; a point estimate shows its decoded path) with the most probable state in red: "
        "Viterbi's path and posterior decoding can differ."
    )
    return FigureImage("states", "Hidden states", caption, to_base64_png(fig))


def _as_numpy(v: Any) -> Any:
    return v.detach().cpu().numpy() if hasattr(v, "detach") else v


def model_figures(cmp: Comparison) -> list[FigureImage]:
    """Every figure of a model page: densities, optimisation traces, MCMC traces, and the
    figures the model asks for (pairs of parameters, the fit over the data)."""
    colors = engine_colors(cmp.runs)
    rows = density_rows(cmp)
    figs = [density_figure(cmp, row, colors) for row in rows]
    opt = optimisation_figure(cmp, colors)
    if opt is not None:
        figs.append(opt)
    for engine in cmp.runs:
        f = mcmc_figure(cmp, engine, rows, colors)
        if f is not None:
            figs.append(f)
    asked = cmp.model.figures
    for x_row, y_row in asked.get("pairs", ()):
        f = pair_figure(cmp, x_row, y_row)
        if f is not None:
            figs.append(f)
    if asked.get("fit"):
        f = fit_figure(cmp, asked["fit"], colors)
        if f is not None:
            figs.append(f)
    for kind, draw in (
        ("clusters", clusters_figure),
        ("topics", topics_figure),
        ("states", states_figure),
        ("estimators", estimators_figure),
        ("images", images_figure),
    ):
        if asked.get(kind):
            f = draw(cmp, asked[kind])
            if f is not None:
                figs.append(f)
    return figs


def estimators_figure(cmp: Comparison, spec: Mapping[str, Any]) -> FigureImage | None:
    """Gradient estimators side by side, from numbers each run's diagnostics hold (a model's own
    scores of its fit): the variance of its gradient over repeated draws at fixed parameters
    (``spec["variance"]``, on a log scale; 0, as exact enumeration's, is marked), and the scores
    ``spec["scores"]`` (``{label: diagnostics key}``, e.g. train and held-out ELBO per image).
    ``spec["label"]`` names the key that says which estimator a run used, ``spec["about"]``
    what the variance is of (for the caption)."""
    rows = []
    for engine, run in cmp.runs.items():
        d = run.diagnostics if run.ok else {}
        var = d.get(spec.get("variance", ""))
        if var is None and not any(d.get(k) is not None for k in spec.get("scores", {}).values()):
            continue
        label = d.get(spec.get("label", ""))
        rows.append((f"{engine} ({label})" if label and label not in engine else engine, d, var))
    if not rows:
        return None
    scores = dict(spec.get("scores", {}))
    fig = Figure(figsize=(9.0, 0.9 + 0.42 * len(rows)))
    ax_v, ax_s = fig.add_subplot(1, 2, 1), fig.add_subplot(1, 2, 2)
    y = np.arange(len(rows))
    finite = [np.log10(v) for _, _, v in rows if isinstance(v, (int, float)) and v > 0]
    left = min(finite) - 0.5 if finite else 0.0
    for i, (_, _, var) in enumerate(rows):
        if isinstance(var, (int, float)) and var > 0:
            ax_v.barh(i, np.log10(var) - left, left=left, color="#1f77b4", height=0.6)
            ax_v.text(np.log10(var), i, f" {np.log10(var):.1f}", va="center", fontsize=7)
        elif var == 0:
            ax_v.text(left, i, " 0 (exact)", va="center", fontsize=7, color="#2ca02c")
    ax_v.set_yticks(y, [r[0] for r in rows], fontsize=8)
    ax_v.set_xlabel("log10 gradient variance", fontsize=9)
    ax_v.set_title("Gradient variance at fixed parameters", fontsize=10)
    markers = ("o", "s", "^", "D")
    for j, (name, key) in enumerate(scores.items()):
        vals = [d.get(key) for _, d, _ in rows]
        pts = [(v, i) for i, v in enumerate(vals) if isinstance(v, (int, float)) and np.isfinite(v)]
        if pts:
            ax_s.scatter(
                *zip(*pts, strict=True),
                marker=markers[j % len(markers)],
                color=_PALETTE[j + 1],
                label=name,
                zorder=3,
            )
    ax_s.set_yticks(y, [""] * len(rows))
    ax_s.set_xlabel("score per observation", fontsize=9)
    ax_s.set_title(", ".join(scores) or "scores", fontsize=10)
    if scores:
        ax_s.legend(fontsize=7, frameon=False, loc="best")
    for ax in (ax_v, ax_s):
        ax.set_ylim(len(rows) - 0.5, -0.5)
        ax.tick_params(labelsize=7)
        ax.grid(axis="x", alpha=0.25)
        ax.spines[["top", "right"]].set_visible(False)
    fig.tight_layout()
    caption = (
        f"Left: the summed variance of {spec.get('about', 'the gradient estimates')} over "
        "repeated draws at each run's fitted parameters, log10 (0: exact, nothing sampled). "
        f"Right: {', '.join(f'{k} ({v})' for k, v in scores.items())}, each run's own scores."
    )
    return FigureImage("estimators", "Gradient estimators", caption, to_base64_png(fig))


def mosaic(pixels: np.ndarray, gap: int = 1) -> np.ndarray:
    """Images (rows, columns, H, W) tiled into one array with ``gap`` pixels of NaN between
    them (drawn blank)."""
    r, c, h, w = pixels.shape
    out = np.full((r * (h + gap) - gap, c * (w + gap) - gap), np.nan)
    for i in range(r):
        for j in range(c):
            out[i * (h + gap) : i * (h + gap) + h, j * (w + gap) : j * (w + gap) + w] = pixels[i, j]
    return out


def images_figure(cmp: Comparison, spec: Mapping[str, Any]) -> FigureImage | None:
    """Image grids each run holds in ``extras["images"]`` (``{title: {"pixels": (rows,
    columns, H, W) or (rows, columns, H * W) in [0, 1], "rows": [label per row]}}``: a model's
    reconstructions and samples), one panel per grid and engine: grids by row, engines by
    column. ``spec["shape"]``: (H, W) of flat images."""
    shape = tuple(spec.get("shape", ()))
    grids: dict[str, dict[str, tuple[np.ndarray, list[str]]]] = {}
    for engine, run in cmp.runs.items():
        held = run.extras.get("images") if run.ok else None
        if not isinstance(held, Mapping):
            continue
        for title, g in held.items():
            pixels = np.asarray(g.get("pixels"), dtype=float)
            if pixels.ndim == 3 and len(shape) == 2:
                pixels = pixels.reshape(*pixels.shape[:2], *shape)
            if pixels.ndim != 4:
                continue
            rows = [str(x) for x in g.get("rows", [""] * pixels.shape[0])]
            grids.setdefault(str(title), {})[engine] = (pixels, rows)
    if not grids:
        return None
    engines = [e for e in cmp.runs if any(e in by for by in grids.values())]
    heights = [max(p.shape[0] * p.shape[2] for p, _ in by.values()) for by in grids.values()]
    widths = max(p.shape[1] * p.shape[3] for by in grids.values() for p, _ in by.values())
    scale = 0.035  # inches per pixel
    fig = Figure(
        figsize=(len(engines) * (widths * scale + 1.3), sum(h * scale + 0.55 for h in heights))
    )
    axes = fig.subplots(len(grids), len(engines), squeeze=False, height_ratios=heights)
    for i, (title, by) in enumerate(grids.items()):
        for j, engine in enumerate(engines):
            ax = axes[i][j]
            ax.set_xticks([])
            ax.set_yticks([])
            for side in ("top", "right", "bottom", "left"):
                ax.spines[side].set_visible(False)
            if engine not in by:
                continue
            pixels, rows = by[engine]
            ax.imshow(mosaic(pixels), cmap="gray_r", vmin=0.0, vmax=1.0, interpolation="nearest")
            h = pixels.shape[2] + 1
            ax.set_yticks([k * h + (h - 1) / 2 for k in range(len(rows))], rows, fontsize=6)
            ax.tick_params(length=0)
            ax.set_title(f"{engine}: {title}", fontsize=8)
    fig.tight_layout()
    caption = (
        "Each engine's image grids after its fit: "
        + "; ".join(grids)
        + " (pixel intensity from white 0 to black 1; reconstructions and samples show the "
        "decoder's mean image)."
    )
    return FigureImage("images", "Images: reconstructions and samples", caption, to_base64_png(fig))


# --------------------------------------------------------------------------- forest plot
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
    table, discrete = cmp.table, set(cmp.model.discrete)
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
        lines = [
            Interval(str(row), source, m[i], m[i] - h[i], m[i] + h[i])
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
    handles = [
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
        + "; a dot without a line is a point estimate."
    )
    if left:
        caption += (
            f" The first {len(shown)} of {len(shown) + len(left)} rows; not shown: "
            f"{_compact_rows(left)} (every row is in the CSV)."
        )
    png = to_base64_png(fig, crop=False)  # constrained layout keeps it inside its canvas
    return FigureImage("forest", "Forest plot: every engine over every parameter", caption, png)


# --------------------------------------------------------------------------- predictive check
MAX_PPC_DRAWS = 50  # posterior draws replayed through the model
MAX_PPC_SITES = 3  # observed sites shown
MAX_PPC_VALUES = 200_000  # observed values above which the check is left out (its cost)
PPC_BUDGET_S = 20.0  # the replay stops (and the check is left out) after this many seconds
PPC_CATEGORIES = 12  # a discrete site with at most this many values: bars, else a histogram


@dataclass
class Replicates:
    """An observed site's data and its replicated data sets, ``(draws, *shape)``."""

    site: str
    observed: np.ndarray
    replicated: np.ndarray
    discrete: bool


def ppc_engine(cmp: Comparison) -> str | None:
    """The run to replay: ``exact`` if it has draws, else ``nuts``, else another MCMC run, else
    another run with posterior draws; a run whose status is ``ok`` before an ``unreliable``
    one."""

    def has_draws(e: str) -> bool:
        r = cmp.runs[e]
        post = posterior_of(r)
        return (
            r.kind == "draws"
            and post is not None
            and post.sizes.get("chain", 0) * post.sizes.get("draw", 0) > 1
        )

    for status in ("ok", "unreliable"):
        engines = [e for e in cmp.runs if cmp.runs[e].status == status and has_draws(e)]
        mcmc = [e for e in engines if "sample_stats" in cmp.runs[e].idata.groups()]
        for group in (["exact"], ["nuts"], mcmc, engines):
            for e in group:
                if e in engines:
                    return e
    return None


def _registered_model(name: str) -> Any:
    """The registered entry of a model (None for a comparison of an unregistered one); looked up
    at call time, as the registry imports the reports."""
    try:
        return importlib.import_module("zoo").get_model(name)
    except ValueError:
        return None


def replicate(
    model: Any,
    data: Mapping[str, Any],
    run: Run,
    *,
    draws: int = MAX_PPC_DRAWS,
    seed: int = 0,
    budget_s: float = PPC_BUDGET_S,
) -> list[Replicates] | None:
    """Replicated data sets from ``draws`` posterior draws of ``run`` (evenly spaced over its
    chains): the model run with its latent sites fixed to a draw, each observed site sampled
    from its distribution there. Latent sites the run has no draws of are drawn from the model
    (discrete sites an engine summed out); None where the check cannot be made: a continuous
    latent site without draws (amortised guides), minibatched plates, non-numeric or very large
    data, or a replay slower than ``budget_s``. Observed sites named ``x_0 .. x_T`` (one per
    step of a sequence) are pooled into one; at most ``MAX_PPC_SITES`` groups are kept."""
    post = posterior_of(run)
    if post is None:
        return None
    first = trace_model(model, data)
    latent, observed = {}, {}
    for name, site in first.nodes.items():
        if site["type"] != "sample":
            continue
        if site_is_subsample(site):
            if int(site["value"].numel()) < int(getattr(site["fn"], "size", 0)):
                return None  # a plate drawing minibatches: each draw sees other data
            continue
        if site["is_observed"]:
            if site["infer"].get("_deterministic") or isinstance(site["fn"], dist.Delta):
                continue
            if isinstance(site["fn"], dist.Unit):
                continue
            observed[name] = site
        else:
            latent[name] = site
    if not observed:
        return None
    for site in observed.values():
        v = site["value"]
        if not isinstance(v, torch.Tensor) or v.dtype.is_complex:
            return None
    if sum(int(s["value"].numel()) for s in observed.values()) > MAX_PPC_VALUES:
        return None
    fixed = [n for n in latent if n in post]
    missing = [n for n in latent if n not in post and not latent[n]["fn"].support.is_discrete]
    if missing:
        return None
    total = post.sizes["chain"] * post.sizes["draw"]
    picks = np.unique(np.linspace(0, total - 1, min(draws, total)).round().astype(int))
    values = {
        n: np.asarray(post[n].values).reshape(total, *post[n].shape[2:])[picks] for n in fixed
    }
    start = time.perf_counter()
    groups: dict[str, list[str]] = {}  # sites x_0 .. x_T (one per step): one group, pooled
    for n in observed:
        groups.setdefault(re.sub(r"_?\d+$", "", n) or n, []).append(n)
    groups = dict(list(groups.items())[:MAX_PPC_SITES])
    reps: dict[str, list[np.ndarray]] = {n: [] for names in groups.values() for n in names}
    with seeded(seed):
        for k in range(len(picks)):
            given = {n: torch.as_tensor(values[n][k]).to(latent[n]["value"].dtype) for n in fixed}
            trace = replay_one(model, data, given)
            for n in reps:
                site = trace.nodes[n]
                y = site["fn"].sample().detach()
                if y.shape != site["value"].shape:
                    y = y.expand(site["value"].shape)
                reps[n].append(y.cpu().numpy().astype(float))
            if time.perf_counter() - start > budget_s:
                return None
    out = []
    for names in groups.values():
        obs = [observed[n]["value"].detach().cpu().numpy().astype(float) for n in names]
        rep = [np.stack(reps[n]) for n in names]
        if len(names) > 1:
            obs = [np.concatenate([o.ravel() for o in obs])]
            rep = [np.concatenate([r.reshape(len(r), -1) for r in rep], axis=1)]
        out.append(
            Replicates(
                site=names[0] if len(names) == 1 else f"{names[0]} .. {names[-1]}",
                observed=obs[0],
                replicated=rep[0],
                discrete=all(bool(observed[n]["fn"].support.is_discrete) for n in names),
            )
        )
    return out


def ppc_p_values(rep: Replicates) -> dict[str, float]:
    """Posterior predictive p-values of the mean and the sd: the share of replicated data sets
    whose statistic is at least the data's (near 0 or 1: the model misses that feature)."""
    y = rep.observed.ravel()
    yr = rep.replicated.reshape(len(rep.replicated), -1)
    out = {}
    for name, stat in (("mean", np.mean), ("sd", np.std)):
        t_obs, t_rep = stat(y), stat(yr, axis=1)
        out[name] = float(np.mean(t_rep >= t_obs))
    return out


def _scott(x: np.ndarray) -> float:
    """Scott's bandwidth of draws ``x`` (positive even for constant draws)."""
    x = x[np.isfinite(x)]
    sd = float(np.std(x)) if x.size > 1 else 0.0
    return max(sd, 1e-9) * max(x.size, 1) ** -0.2


def binned_kde(x: np.ndarray, grid: np.ndarray, width: float) -> np.ndarray:
    """A Gaussian kernel density of ``x`` on an evenly spaced ``grid``: the draws binned onto
    the grid, then smoothed (cost linear in the draws, not draws x grid points)."""
    x = x[np.isfinite(x)]
    step = grid[1] - grid[0]
    edges = np.concatenate([grid - step / 2, [grid[-1] + step / 2]])
    counts = np.histogram(x, bins=edges)[0].astype(float)
    half = int(min(np.ceil(4 * width / step), 4 * len(grid)))
    offsets = np.arange(-half, half + 1) * step
    kernel = np.exp(-0.5 * (offsets / width) ** 2) / (width * np.sqrt(2 * np.pi))
    dens = np.convolve(counts, kernel)[half : half + len(grid)]
    return dens / max(x.size, 1)


def _ppc_panel(ax: Any, rep: Replicates, color: str) -> None:
    y = rep.observed.ravel()
    yr = rep.replicated.reshape(len(rep.replicated), -1)
    values = np.unique(np.concatenate([y, yr.ravel()]))
    if rep.discrete and len(values) <= PPC_CATEGORIES:
        share_obs = np.array([(y == v).mean() for v in values])
        share_rep = np.stack([(yr == v).mean(1) for v in values], 1)  # (draws, K)
        x = np.arange(len(values))
        ax.bar(x, share_obs, color="#d0d5da", edgecolor="black", lw=1.0, label="data", zorder=1)
        lo, mid, hi = np.percentile(share_rep, [5, 50, 95], axis=0)
        ax.errorbar(
            x,
            mid,
            yerr=[mid - lo, hi - mid],
            fmt="o",
            color=color,
            ms=4,
            capsize=3,
            label="replicated (median, 90%)",
            zorder=3,
        )
        ax.set_xticks(x, [f"{v:g}" for v in values], fontsize=8)
        ax.set_ylabel("share of observations", fontsize=8)
        return
    if rep.discrete:
        lo, hi = float(values.min()), float(values.max())
        bins = np.arange(lo - 0.5, hi + 1.5, max(1.0, np.ceil((hi - lo + 1) / 60)))
        for r in yr:
            ax.hist(r, bins=bins, density=True, histtype="step", color=color, alpha=0.15, lw=0.8)
        ax.hist(y, bins=bins, density=True, histtype="step", color="black", lw=1.8)
    else:
        finite = np.concatenate([y, yr.ravel()])
        finite = finite[np.isfinite(finite)]
        lo, hi = np.quantile(finite, [0.005, 0.995])
        pad = 0.05 * (hi - lo) if hi > lo else 0.5
        grid = np.linspace(lo - pad, hi + pad, 256)
        width = _scott(y) if y.size > 1 and np.ptp(y) > 0 else _scott(yr.ravel())
        for r in yr:
            ax.plot(grid, binned_kde(r, grid, width), color=color, alpha=0.15, lw=0.8)
        if y.size > 1 and np.ptp(y) > 0:
            ax.plot(grid, binned_kde(y, grid, width), color="black", lw=2.0)
        else:
            ax.axvline(float(y[0]), color="black", lw=2.0)
        ax.set_ylim(bottom=0)
    ax.set_ylabel("density", fontsize=8)
    ax.legend(
        [Line2D([], [], color="black", lw=2.0), Line2D([], [], color=color, alpha=0.5, lw=1)],
        ["data", "replicated"],
        fontsize=7,
        frameon=False,
    )


def ppc_figure(cmp: Comparison, colors: Mapping[str, str]) -> FigureImage | None:
    """Posterior predictive check: the data's distribution against data sets replicated from
    the best run's posterior draws (``exact``, else ``nuts``, else MCMC); None where the model
    cannot be replayed (see :func:`replicate`)."""
    engine = ppc_engine(cmp)
    entry = _registered_model(cmp.model.name) if engine else None
    if entry is None:
        return None
    run = cmp.runs[engine]
    data = {**cmp.data, **run.model_data}
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            reps = replicate(entry.model, data, run, seed=cmp.seed)
    except Exception:  # noqa: BLE001 - a model that cannot be replayed gets no check
        return None
    if not reps:
        return None
    color = colors.get(engine, _PALETTE[0])
    fig = Figure(figsize=(4.4 * len(reps), 3.0))
    notes = []
    for i, rep in enumerate(reps):
        ax = fig.add_subplot(1, len(reps), i + 1)
        _ppc_panel(ax, rep, color)
        p = ppc_p_values(rep)
        ax.set_title(
            f"{rep.site}: p(mean) {p['mean']:.2f}, p(sd) {p['sd']:.2f}", fontsize=9, loc="left"
        )
        pooled = f" (all {rep.observed.size} values pooled)" if rep.observed.ndim > 1 else ""
        ax.set_xlabel(rep.site + pooled, fontsize=8)
        ax.tick_params(labelsize=7)
        ax.spines[["top", "right"]].set_visible(False)
        notes.append(f"{rep.site} ({rep.observed.size} values)")
    fig.tight_layout()
    n = len(reps[0].replicated)
    caption = (
        f"The data (black) against {n} data sets replicated from {engine}'s posterior draws "
        f"(each draw run through the model; {', '.join(notes)}). p(mean), p(sd): the share of "
        "replicated data sets whose mean (sd) is at least the data's; near 0 or 1, the model "
        "misses that feature of the data."
    )
    if run.status != "ok":
        caption += f" No engine's run was reliable: {engine}'s is {run.status} ({run.caveat})."
    return FigureImage("ppc", "Posterior predictive check", caption, to_base64_png(fig))


# --------------------------------------------------------------------------- LOO / WAIC
MIN_LOO_DRAWS = 20  # a run with fewer posterior draws gets no LOO
# ... and a run with more than this many is thinned evenly for LOO and WAIC (every k-th draw of
# each chain): PSIS is fitted observation by observation, its cost in proportion to the draws,
# and a ChEES run of the quick profile (32 x 500 draws) took most of a page's LOO time
MAX_LOO_DRAWS = 4000


def _pointwise_idata(run: Run) -> Any:
    """The run's InferenceData for LOO: itself when it holds one log-likelihood variable, else
    one whose single variable concatenates every observed site's pointwise values."""
    ll = run.idata.log_likelihood
    names = list(ll.data_vars)
    if len(names) == 1:
        return run.idata
    c, d = ll.sizes["chain"], ll.sizes["draw"]
    joined = np.concatenate([np.asarray(ll[v].values).reshape(c, d, -1) for v in names], axis=2)
    post = {k: v.values for k, v in run.idata.posterior.data_vars.items()}
    return to_inference_data(post, log_likelihood={"+".join(names): joined})


def _ranked(elpd: Mapping[str, Any]) -> pd.DataFrame:
    """ArviZ ``compare``'s columns for runs it could not compare: ranked by elpd_loo, stacking
    weight and dse unknown (NaN) unless there is one run."""
    one = len(elpd) == 1
    table = pd.DataFrame(
        {
            "elpd_loo": [float(v.elpd_loo) for v in elpd.values()],
            "p_loo": [float(v.p_loo) for v in elpd.values()],
            "se": [float(v.se) for v in elpd.values()],
            "weight": 1.0 if one else np.nan,
            "dse": 0.0 if one else np.nan,
        },
        index=list(elpd),
    ).sort_values("elpd_loo", ascending=False, na_position="last")
    table["rank"] = np.arange(len(table))
    table["elpd_diff"] = table["elpd_loo"].iloc[0] - table["elpd_loo"]
    return table


def loo_comparison(cmp: Comparison) -> dict[str, Any] | None:
    """PSIS-LOO and WAIC of every run with a pointwise log-likelihood and posterior draws,
    ranked by ArviZ ``compare`` (elpd_loo, p_loo, se, elpd_diff, dse, stacking weight), with
    each run's Pareto k-hat warnings in words. None when fewer than one run qualifies."""
    az = arviz()
    elpd: dict[str, Any] = {}
    extra: dict[str, dict[str, Any]] = {}
    for engine, run in cmp.runs.items():
        if not run.ok or run.kind != "draws" or run.idata is None:
            continue
        if "log_likelihood" not in run.idata.groups() or not run.idata.log_likelihood.data_vars:
            continue
        ll = run.idata.log_likelihood
        draws = ll.sizes.get("chain", 0) * ll.sizes.get("draw", 0)
        if draws < MIN_LOO_DRAWS:
            continue
        every = -(-draws // MAX_LOO_DRAWS)
        try:
            idata = _pointwise_idata(run)
            if every > 1:
                idata = idata.isel(draw=slice(None, None, every))
            with _quiet(), warnings.catch_warnings():
                warnings.simplefilter("ignore")
                loo = az.loo(idata, pointwise=True)
                waic = az.waic(idata, pointwise=True)
        except Exception:  # noqa: BLE001 - a run whose LOO cannot be computed is left out
            continue
        k = np.asarray(loo.pareto_k).ravel()
        good_k = float(getattr(loo, "good_k", 0.7) or 0.7)
        elpd[engine] = loo
        extra[engine] = {
            "elpd_waic": float(waic.elpd_waic),
            "p_waic": float(waic.p_waic),
            "waic_se": float(waic.se),
            "n_obs": int(k.size),
            "k_bad": int(np.sum(k > good_k)),
            "k_max": float(np.nanmax(k)) if k.size else float("nan"),
            "good_k": good_k,
            "variables": list(run.idata.log_likelihood.data_vars),
            "draws": draws,
            "every": every,  # 1: all draws; k: every k-th draw of each chain
        }
    if not elpd:
        return None
    table = None
    if len(elpd) > 1:
        try:
            with _quiet(), warnings.catch_warnings():
                warnings.simplefilter("ignore")
                table = az.compare(elpd, ic="loo")
        except Exception:  # noqa: BLE001 - without compare: ranked by elpd, no weights
            table = None
    if table is None:
        table = _ranked(elpd)
    rows, warns = [], []
    for engine, r in table.iterrows():
        e = extra[str(engine)]
        rows.append(
            {
                "engine": str(engine),
                "rank": int(r["rank"]),
                "elpd_loo": float(r["elpd_loo"]),
                "se": float(r["se"]),
                "p_loo": float(r["p_loo"]),
                "elpd_diff": float(r["elpd_diff"]),
                "dse": float(r["dse"]),
                "weight": float(r["weight"]),
                **e,
            }
        )
        if e["k_bad"]:
            warns.append(
                f"k\u0302 > {e['good_k']:.2g} at {e['k_bad']} of {e['n_obs']} observations"
                + (f" (max {e['k_max']:.2f})" if np.isfinite(e["k_max"]) else "")
                + f": LOO unreliable for {engine}"
            )
    observed = sorted({v for e in extra.values() for v in e["variables"]})
    thinned = [
        f"{engine}: one draw in {e['every']} of its {e['draws']}"
        for engine, e in extra.items()
        if e["every"] > 1
    ]
    return {
        "rows": rows,
        "warnings": warns,
        "observed": observed,
        "thinned": thinned,
        "max_draws": MAX_LOO_DRAWS,
    }


# --------------------------------------------------------------------------- rendered math
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
    }
