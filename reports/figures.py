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
from scipy.optimize import linear_sum_assignment

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
