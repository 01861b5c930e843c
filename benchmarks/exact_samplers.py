"""The exact samplers of seed 003 (``rejection``, ``inverse_cdf``) on every model they apply to
that has a ground truth: acceptance, cost and error against the truth.

    python benchmarks/exact_samplers.py [--samples 2000] [--seed 0]

Per model and engine (rejection with each envelope where the prior's acceptance is not hopeless,
inverse_cdf on the one-dimensional posteriors): wall seconds, acceptance rate and proposals,
the largest |mean - truth| / (truth sd / sqrt(n)) over the compared parameters (a z-score of
independent draws: below about 3 for an exact sampler), and the log evidence's error with its
Monte-Carlo SE (rejection's ``log_evidence_se``: sqrt((1 - a) / (a N)) for acceptance a over
the N proposals under the final bound). Writes a
Markdown table to ``benchmarks/results/exact_samplers.md``.
"""

from __future__ import annotations

import argparse
import platform
import time
from pathlib import Path

import numpy as np

import zoo

OUT = Path(__file__).parent / "results" / "exact_samplers.md"
# (model, engine, options): the prior envelope where its acceptance is above about 1e-3
CELLS = [
    *[
        (m, "rejection", {})
        for m in (
            "normal_normal",
            "beta_bernoulli",
            "gamma_poisson",
            "normal_gamma",
            "bayesian_linear_regression",
            "three_coin",
            "gaussian_process",
        )
    ],
    *[
        (m, "rejection", {"envelope": "prior"})
        for m in ("normal_normal", "beta_bernoulli", "gamma_poisson", "normal_gamma", "three_coin")
    ],
    *[(m, "inverse_cdf", {}) for m in ("normal_normal", "beta_bernoulli", "gamma_poisson")],
]


def row(model: str, engine: str, options: dict, samples: int, seed: int) -> str:
    entry = zoo.get_model(model)
    truth = entry.ground_truth()
    start = time.perf_counter()
    run = zoo.run(entry, engine, seed=seed, num_samples=samples, **options)
    wall = time.perf_counter() - start
    if not run.ok:
        return f"| {model} | {engine} {options or ''} | failed: {run.error} |"
    n = run.diagnostics["num_samples"]
    z = max(
        abs(run.summary.loc[r, "mean"] - m) / (s / np.sqrt(n))
        for r, (m, s) in truth.rows().items()
        if r in run.summary.index and s > 0 and r.split("[")[0] in entry.compared_params()
    )
    d = run.diagnostics
    rate = d.get("acceptance_rate")
    ev = ""
    if truth.log_evidence is not None and run.log_evidence is not None:
        err = run.log_evidence - truth.log_evidence
        se = d.get("log_evidence_se", 0.0)
        ev = f"{err:+.4f}" + (f" (SE {se:.4f})" if rate else " (quadrature)")
    label = engine + (f" ({options['envelope']})" if options else "")
    acc = f"{rate:.3g}" if rate is not None else "—"
    props = str(d.get("proposals", "—"))
    return f"| {model} | {label} | {wall:.2f} | {acc} | {props} | {z:.2f} | {ev} |"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    lines = [
        "# Exact samplers (seed 003): rejection and inverse-CDF against the ground truth",
        "",
        f"Written by `benchmarks/exact_samplers.py` ({platform.machine()}, "
        f"{platform.python_version()}): {args.samples} draws, seed {args.seed}, default data; "
        "wall seconds on a shared machine (first runs include building the model's density). "
        "max z: the largest |mean - truth| / (truth sd / sqrt(n)) over the compared parameters.",
        "",
        "| model | engine | wall s | acceptance | proposals | max z | log evidence error |",
        "|---|---|---|---|---|---|---|",
    ]
    for model, engine, options in CELLS:
        lines.append(row(model, engine, options, args.samples, args.seed))
        print(lines[-1], flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("\n".join(lines) + "\n", encoding="utf-8")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
