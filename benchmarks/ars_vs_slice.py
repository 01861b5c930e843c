"""gaussian_mixture's Gibbs sampler with its spreads drawn by a slice step or by adaptive
rejection sampling (``spread_step="slice" | "ars"``): cost and mixing.

    python benchmarks/ars_vs_slice.py [--samples 1500] [--warmup 200] [--chains 4] [--seeds 0,1]

For each step and seed: the sampler on the model's default data (272 Old Faithful durations,
K = 2), CPU time per sweep (the machine is shared: CPU time, not wall time), the bulk ESS of
each spread (ArviZ, over the chains) and ESS per CPU second, and the posterior mean of each
spread. Writes a Markdown table to ``benchmarks/results/ars_vs_slice.md``.
"""

from __future__ import annotations

import argparse
import platform
import time
from pathlib import Path

import arviz as az
import numpy as np

import zoo
from zoo.models.mixtures import LOC_PRIOR, SCALE_PRIOR
from zoo_inference.algorithms.gibbs import gaussian_mixture_gibbs

OUT = Path(__file__).parent / "results" / "ars_vs_slice.md"


def measure(step: str, seed: int, samples: int, warmup: int, chains: int) -> dict[str, float]:
    data = zoo.get_model("gaussian_mixture").load_data()
    y, k = data["y"].double().numpy(), int(data.get("K", 2))
    np.random.seed(seed)
    start = time.process_time()
    out = gaussian_mixture_gibbs(
        y, k, (*LOC_PRIOR, *SCALE_PRIOR), samples, warmup, chains, spread_step=step
    )
    cpu = time.process_time() - start
    scales = out["scales"]  # (chains, samples, K)
    ess = [float(az.ess(scales[..., j], method="bulk")) for j in range(k)]
    row = {"cpu_s": cpu, "ms_per_sweep": 1e3 * cpu / (samples + warmup)}
    for j in range(k):
        row[f"ess_s{j}"] = ess[j]
        row[f"ess_per_s_s{j}"] = ess[j] / cpu
        row[f"mean_s{j}"] = float(scales[..., j].mean())
        row[f"mcse_s{j}"] = float(scales[..., j].std() / np.sqrt(ess[j]))
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=1500)
    parser.add_argument("--warmup", type=int, default=200)
    parser.add_argument("--chains", type=int, default=4)
    parser.add_argument("--seeds", default="0,1")
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    seeds = [int(s) for s in args.seeds.split(",")]
    lines = [
        "# gaussian_mixture's Gibbs sampler: spreads by a slice step or by ARS",
        "",
        f"Written by `benchmarks/ars_vs_slice.py` ({platform.machine()}, "
        f"{platform.python_version()}): {args.chains} chains x ({args.warmup} + {args.samples}) "
        "sweeps on the default data (272 points, K = 2); CPU seconds (shared machine); ESS is "
        "ArviZ's bulk ESS over the chains; mean +- its Monte-Carlo SE.",
        "",
        "| step | seed | ms / sweep | ESS s[0] | ESS s[1] | ESS/s s[0] | ESS/s s[1] "
        "| mean s[0] | mean s[1] |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for step in ("slice", "ars"):
        for seed in seeds:
            r = measure(step, seed, args.samples, args.warmup, args.chains)
            lines.append(
                f"| {step} | {seed} | {r['ms_per_sweep']:.2f} | {r['ess_s0']:.0f} | "
                f"{r['ess_s1']:.0f} | {r['ess_per_s_s0']:.0f} | {r['ess_per_s_s1']:.0f} | "
                f"{r['mean_s0']:.4f} +- {r['mcse_s0']:.4f} | "
                f"{r['mean_s1']:.4f} +- {r['mcse_s1']:.4f} |"
            )
            print(lines[-1], flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("\n".join(lines) + "\n", encoding="utf-8")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
