"""Figures for a model page, as base64 PNG strings ready for ``data:`` URIs.

Drawn with matplotlib's object API on the Agg canvas (no pyplot, no global backend switch), so
making a report never opens a window or disturbs a user's interactive session.

Every figure reads only the Run contract: posterior draws from ``run.idata.posterior``, the ELBO
trace from ``traces["elbo"]``, an EM trace from ``traces["log_likelihood"]`` and MCMC
chains from runs whose InferenceData has ``sample_stats``.
"""

from __future__ import annotations

import base64
import io
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator
from scipy import stats

from inference.results import Comparison, Density, GroundTruth, Run

if TYPE_CHECKING:
    import xarray as xr

MAX_DENSITY_ROWS = 8
MAX_TRACE_ROWS = 4
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


def to_base64_png(fig: Figure) -> str:
    FigureCanvasAgg(fig)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI, bbox_inches="tight")
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


def kde(
    x: np.ndarray, grid: np.ndarray, lower: float | None = None, upper: float | None = None
) -> np.ndarray:
    """Gaussian kernel density of draws ``x`` on ``grid``, reflected at known support ends."""
    k = stats.gaussian_kde(x)
    y = k(grid)
    if lower is not None:
        y += k(2 * lower - grid)
    if upper is not None:
        y += k(2 * upper - grid)
    return y


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
    if ax.get_legend_handles_labels()[0]:
        ax.legend(
            fontsize=7,
            frameon=False,
            loc="upper center",
            bbox_to_anchor=(0.5, -0.2),
            ncol=3,
            columnspacing=1.2,
            handlelength=1.8,
        )
    png = to_base64_png(fig)
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


def mcmc_figure(
    cmp: Comparison, engine: str, rows: Sequence[str], colors: dict[str, str]
) -> FigureImage | None:
    """Per-chain traces and rank histograms of an MCMC run (rank plots: flat when mixed)."""
    run = cmp.runs[engine]
    if not run.ok or run.idata is None or "sample_stats" not in run.idata.groups():
        return None
    series = [(row, draws_for(run, row)) for row in rows[:MAX_TRACE_ROWS]]
    series = [(row, d) for row, d in series if d is not None and d.shape[1] > 1]
    if not series:
        return None
    fig = Figure(figsize=(9.0, 1.9 * len(series) + 0.5))
    n_chain = series[0][1].shape[0]
    chain_colors = [_PALETTE[(i + 3) % len(_PALETTE)] for i in range(n_chain)]
    for i, (row, d) in enumerate(series):
        ax_t = fig.add_subplot(len(series), 2, 2 * i + 1)
        ax_r = fig.add_subplot(len(series), 2, 2 * i + 2)
        ranks = stats.rankdata(d.ravel()).reshape(d.shape)
        bins = np.linspace(0.5, d.size + 0.5, min(20, max(2, d.shape[1] // 10)) + 1)
        for c in range(d.shape[0]):
            ax_t.plot(d[c], color=chain_colors[c], lw=0.7, alpha=0.8, label=f"chain {c}")
            ax_r.hist(ranks[c], bins=bins, histtype="step", color=chain_colors[c], lw=1.3)
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
                ncol=min(n_chain, 4),
                borderaxespad=0.1,
            )
        if i == len(series) - 1:
            ax_t.set_xlabel("draw", fontsize=9)
            ax_r.set_xlabel("rank among all draws", fontsize=9)
    fig.tight_layout()
    caption = f"{engine}: {n_chain} chains; dotted line: the count of a uniform rank histogram."
    return FigureImage("mcmc", f"{engine}: traces and rank plots", caption, to_base64_png(fig))


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
    return figs
