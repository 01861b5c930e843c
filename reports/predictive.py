"""The posterior predictive check: the data against the data sets replicated from a run's
posterior draws (its InferenceData's ``posterior_predictive`` group, drawn when the run was made
by :mod:`zoo_inference.predictive`)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from zoo_inference.predictive import DISCRETE
from zoo_inference.results import Comparison, Run

from .figures import _PALETTE, FigureImage, posterior_of, to_base64_png

MAX_PPC_SITES = 3  # observed sites shown
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
        idatas = [(e, cmp.runs[e].idata) for e in engines]
        mcmc = [e for e, i in idatas if i is not None and "sample_stats" in i.groups()]
        for group in (["exact"], ["nuts"], mcmc, engines):
            for e in group:
                if e in engines:
                    return e
    return None


def replicates_of(run: Run) -> list[Replicates] | None:
    """The run's replicated data sets (its InferenceData's ``posterior_predictive``, made by
    :mod:`zoo_inference.predictive`) beside the observed values; None where the run has none.
    Observed sites named ``x_0 .. x_T`` (one per step of a sequence) are pooled into one; at
    most ``MAX_PPC_SITES`` groups are kept."""
    if run.idata is None or "posterior_predictive" not in run.idata.groups():
        return None
    pred = run.idata.posterior_predictive  # type: ignore[attr-defined]  # arviz sets groups as attributes
    held = run.idata.observed_data if "observed_data" in run.idata.groups() else {}  # type: ignore[attr-defined]  # arviz sets groups as attributes
    names = [n for n in pred.data_vars if n in held]
    if not names:
        return None
    groups: dict[str, list[str]] = {}  # sites x_0 .. x_T (one per step): one group, pooled
    for n in names:
        groups.setdefault(re.sub(r"_?\d+$", "", n) or n, []).append(n)
    out = []
    for group in list(groups.values())[:MAX_PPC_SITES]:
        obs = [np.asarray(held[n].values, dtype=float) for n in group]
        rep = [np.asarray(pred[n].values[0], dtype=float) for n in group]
        if len(group) > 1:
            obs = [np.concatenate([o.ravel() for o in obs])]
            rep = [np.concatenate([r.reshape(len(r), -1) for r in rep], axis=1)]
        out.append(
            Replicates(
                site=group[0] if len(group) == 1 else f"{group[0]} .. {group[-1]}",
                observed=obs[0],
                replicated=rep[0],
                discrete=all(bool(pred[n].attrs.get(DISCRETE, 0)) for n in group),
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
    the best run's posterior draws (``exact``, else ``nuts``, else MCMC); None where that run
    has no posterior-predictive draws (see :func:`zoo_inference.predictive.replicate`)."""
    engine = ppc_engine(cmp)
    if engine is None:
        return None
    run = cmp.runs[engine]
    reps = replicates_of(run)
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
