"""The chees engine's two trajectory criteria side by side: ``criterion="chees"`` (the ChEES
criterion, TFP's default) and ``"chees_per_grad"`` (ChEES per gradient, fun_mc's
``chees_per_grad_criterion``), at the engine's default sizes (32 chains × (300 + 1000)).

    python benchmarks/chees_criterion.py [--models eight_schools_noncentered,...] \
        [--seeds 0,1,2] [--out benchmarks/results/chees_criterion.md]

Load-independent figures only, per run: min bulk ESS (arviz.ess) over every element of the
model's continuous sample sites, max rank-normalised split R-hat (arviz.rhat), the gradients of
the draws after warmup (the sum of each draw's ``n_steps``: one gradient a leapfrog step) and
the run's total (``gradient_evals``, warmup included), effective draws per 1,000 of each, the
adapted trajectory length (the mean over chain groups) and the mean leapfrog steps a draw.
"""

from __future__ import annotations

import argparse
import datetime
import platform
from pathlib import Path
from typing import Any

import numpy as np

import zoo

OUT = Path(__file__).parent / "results" / "chees_criterion.md"
MODELS = (
    "eight_schools_noncentered",
    "logistic_regression",
    "gaussian_mixture",
    "naive_bayes",
    "gym_ill_conditioned_gaussian",
)
CRITERIA = ("chees", "chees_per_grad")


def figures(model: str, criterion: str, seed: int) -> dict[str, Any]:
    """One run's figures (see the module's docstring)."""
    import arviz as az

    run = zoo.run(model, "chees", seed=seed, criterion=criterion, progress=False)
    sites = zoo.get_model(model).structure.continuous
    data = az.convert_to_dataset(
        {s: np.asarray(run.idata.posterior[s].values, float) for s in sites}
    )
    ess = az.ess(data, method="bulk")
    rhat = az.rhat(data)
    n_steps = np.asarray(run.idata.sample_stats["n_steps"].values, float)
    T = run.diagnostics["trajectory_length"]
    return {
        "ess": min(float(ess[v].min()) for v in ess.data_vars),
        "rhat": max(float(rhat[v].max()) for v in rhat.data_vars),
        "draw_grads": float(n_steps.sum()),
        "total_grads": float(run.diagnostics["gradient_evals"]),
        "T": float(np.mean(T)),
        "n_steps": float(n_steps.mean()),
    }


def table(rows: list[dict[str, Any]]) -> list[str]:
    lines = [
        "| model | criterion | seed | min bulk ESS | max R-hat | ESS / 1k draw grads "
        "| ESS / 1k total grads | draw grads | total grads | T | mean n_steps |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['model']} | {r['criterion']} | {r['seed']} | {r['ess']:,.0f} | {r['rhat']:.3f} "
            f"| {1000 * r['ess'] / r['draw_grads']:.1f} | {1000 * r['ess'] / r['total_grads']:.1f} "
            f"| {r['draw_grads']:,.0f} | {r['total_grads']:,.0f} | {r['T']:.2f} "
            f"| {r['n_steps']:.1f} |"
        )
    return lines


def summary(rows: list[dict[str, Any]], models: list[str]) -> list[str]:
    """Per model and criterion: the mean over seeds (and the seeds' range) of the effective
    draws per 1k gradients, and the ratio per_grad / chees of those means."""
    lines = [
        "| model | criterion | ESS / 1k draw grads, mean (min–max) | ESS / 1k total grads, mean "
        "(min–max) | max R-hat | mean T | mean n_steps |",
        "|---|---|---|---|---|---|---|",
    ]
    ratios = []
    for m in models:
        means = {}
        for c in CRITERIA:
            sel = [r for r in rows if r["model"] == m and r["criterion"] == c]
            if not sel:
                continue
            d = np.array([1000 * r["ess"] / r["draw_grads"] for r in sel])
            t = np.array([1000 * r["ess"] / r["total_grads"] for r in sel])
            means[c] = (d.mean(), t.mean())
            lines.append(
                f"| {m} | {c} | {d.mean():.1f} ({d.min():.1f}–{d.max():.1f}) | {t.mean():.1f} "
                f"({t.min():.1f}–{t.max():.1f}) | {max(r['rhat'] for r in sel):.3f} "
                f"| {np.mean([r['T'] for r in sel]):.2f} "
                f"| {np.mean([r['n_steps'] for r in sel]):.1f} |"
            )
        if len(means) == 2:
            a, b = means["chees"], means["chees_per_grad"]
            ratios.append(
                f"- {m}: chees_per_grad / chees = {b[0] / a[0]:.2f} (draw gradients), "
                f"{b[1] / a[1]:.2f} (total gradients)"
            )
    return [*lines, "", *ratios]


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args(argv)
    models = args.models.split(",")
    seeds = [int(s) for s in args.seeds.split(",")]
    rows = []
    for m in models:
        for seed in seeds:
            for c in CRITERIA:
                rows.append({"model": m, "criterion": c, "seed": seed, **figures(m, c, seed)})
                print(table(rows[-1:])[-1], flush=True)
    import pyro
    import torch

    text = [
        "# The chees engine's trajectory criteria: ChEES and ChEES per gradient",
        "",
        f"Written by `benchmarks/chees_criterion.py` on {datetime.date.today()} "
        f"({platform.machine()}, {platform.processor() or platform.system()}, Python "
        f"{platform.python_version()}, torch {torch.__version__}, pyro {pyro.__version__}, "
        f"zoo {zoo.__version__}). Command: `python benchmarks/chees_criterion.py --models "
        f"{','.join(models)} --seeds {args.seeds}`. The engine's default sizes: 32 chains × "
        "(300 warmup + 1000 draws), two chain groups on this machine's cores, each adapting its "
        "own step size and T.",
        "",
        "Min bulk ESS and max R-hat (arviz) over every element of the model's continuous sites; "
        "draw grads: the leapfrog steps of the draws after warmup (each draw's `n_steps`, one "
        "gradient a step); total grads: the run's `gradient_evals`, warmup included; T: the "
        "adapted trajectory length, the mean over the chain groups; n_steps: the mean leapfrog "
        "steps a draw. Load-independent: no timings.",
        "",
        "## Per model, over the seeds",
        "",
        *summary(rows, models),
        "",
        "## Every run",
        "",
        *table(rows),
        "",
    ]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("\n".join(text))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
