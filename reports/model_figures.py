"""Figures a model asks for (``ModelInfo.figures``): clusters, topics, hidden states, gradient
estimators and images; and :func:`model_figures`, every figure of a model page."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
from matplotlib.figure import Figure
from scipy.optimize import linear_sum_assignment

from zoo_inference.results import Comparison, Run

from .figures import (
    _PALETTE,
    FigureImage,
    as_numpy,
    density_figure,
    density_rows,
    engine_colors,
    fit_figure,
    mcmc_figure,
    optimisation_figure,
    pair_figure,
    posterior_of,
    to_base64_png,
)


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
    data = np.asarray(as_numpy(cmp.data.get(spec.get("data", ""))), dtype=float)
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
    maybe = [_site_draws(run, f"{prefix}{t}") for t in range(T)]
    path = [p for p in maybe if p is not None]
    if len(path) < len(maybe):
        return None
    z = np.rint(np.stack([p.reshape(len(p)) for p in path], 1)).astype(int)  # (draws, T)
    return np.stack([(z == j).mean(0) for j in range(max(int(z.max()) + 1, 2))])


def states_figure(cmp: Comparison, spec: Mapping[str, str]) -> FigureImage | None:
    """The observed series over time and, per engine, the posterior probability of each hidden
    state at each step (the share of draws in it; a point estimate's decoded path is a share of
    0 or 1), with the most probable state's path drawn over it."""
    x = np.asarray(as_numpy(cmp.data.get(spec.get("data", ""))), dtype=float)
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
