"""Gradient evaluations until the squared bias of every second moment falls below 0.01: the
comparison of the MAMS paper (Robnik, Cohn-Gordon & Seljak 2025, arXiv 2503.01707) and the
MCLMC paper (Robnik et al. 2023, JMLR), on the Inference Gym's targets (zoo/models/gym.py).

    python benchmarks/gradients_to_bias.py [--targets banana,brownian_motion] \
        [--engines nuts,chees,mams,nuts:metric=low_rank] [--chains 16] [--draws 2000] \
        [--warmup N] [--seed 0] [--out benchmarks/results/gradients_to_bias.md] [--quick] \
        [--reference FILE] [--reference-draws N]

For parameter i after n draws of a chain, b²_i(n) = (Ê_n[x_i²] - E[x_i²])² / Var[x_i²], x in
the Gym's constrained ("identity") parameterisation, which is the zoo's; b²_max = max_i and
b²_avg = mean_i. The papers' aggregation (sampler-benchmarks' ``sampler_grads_to_low_error``):
the median over chains of b²(n), and the draws after which that curve stays below 0.01, times
the gradients a draw costs; beside it, the median over chains of each chain's own crossing.
Gradients after warmup come from each draw's ``gradient_evals`` or ``n_steps`` statistic (one
gradient a leapfrog step); warmup's are the run's ``gradient_evals`` less those, per chain.

E[x²] = sd² + mean² from the zoo's truth: the Gym's published truth, except on Brownian motion,
whose exact truth replaces it (the Gym's Stan run is 7 and 18 standard errors off on the two
scales: b² 0.020 and 0.047 against the exact posterior, a floor no sampler could pass). Var[x²]
is exact where the target is analytic (banana, Neal's funnel, the Gaussian) or integrable
(Brownian motion, by quadrature); elsewhere it is read from a reference run cached in
benchmarks/results/gradients_to_bias_reference.json (``--reference FILE`` for another;
``--reference-draws N`` makes one with the zoo's nuts), or, failing that, the Gaussian value
2 sd⁴ + 4 mean² sd², marked as such.
Engines the installed zoo lacks (an unknown engine or option) are skipped with a message.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import platform
import time
from pathlib import Path
from typing import Any

import numpy as np
from engine_specs import parse_engine, split_engines  # noqa: E402  (a file beside this one)

import zoo
from zoo.published import PUBLISHED
from zoo_inference import bias
from zoo_inference.bias import Measured, draw_gradients, flat_draws, measure

RESULTS = Path(__file__).parent / "results"
OUT = RESULTS / "gradients_to_bias.md"
REFERENCE = RESULTS / "gradients_to_bias_reference.json"
TARGETS = (
    "gym_banana",
    "gym_neals_funnel",
    "gym_ill_conditioned_gaussian",
    "gym_brownian_motion",
    "gym_item_response_theory",
    "gym_stochastic_volatility_small",
    "gym_stochastic_volatility",
    "gym_radon",
    "gym_german_credit",
    "gym_german_credit_sparse",
)
SIZES = {"chains": 16, "draws": 2000}
QUICK = {"chains": 4, "draws": 200, "warmup": 200}


# ----------------------------------------------------------------- the truth of x and x²


def second_moments(
    target: str, reference: dict[str, Any]
) -> tuple[list[str], np.ndarray, np.ndarray, str]:
    """Sites, E[x²] and Var[x²] (flattened as :func:`flat_draws`) and where Var[x²] comes from:
    the truth's (:func:`zoo_inference.bias.second_moments`), else a cached reference run's,
    else a Gaussian's."""
    truth = zoo.get_model(target).ground_truth()
    if truth is None:
        raise ValueError(f"{target} has no ground truth on its default data")
    sites, ex2, var, how = bias.second_moments(truth)
    if all(s in truth.var_sq for s in sites):
        return sites, ex2, var, f"{how} ({truth.source})"
    if target not in reference:
        return sites, ex2, var, how
    ref, var = reference[target], np.asarray(reference[target]["var_x2"], dtype=float)
    if var.shape != ex2.shape:
        raise ValueError(f"the cached reference of {target} has {var.size} values, not {ex2.size}")
    how = f"reference run: {ref['how']}"
    if "ex2" in ref:  # the run's own E[x²] against the truth's: far above 0.01, they disagree
        b2 = (np.asarray(ref["ex2"], dtype=float) - ex2) ** 2 / var
        shapes = {s: np.shape(truth.mean[s]) for s in sites}
        names = [f"{s}{list(i) if i else ''}" for s in sites for i in np.ndindex(shapes[s])]
        how += (
            f"; its own b² against the truth: max {b2.max():.3g} ({names[b2.argmax()]}), "
            f"avg {b2.mean():.3g}"
        )
    return sites, ex2, var, how


def make_reference(target: str, draws: int, chains: int, seed: int) -> dict[str, Any]:
    """Var[x²] (and E[x²], to check the truth by) per parameter from a long run of the zoo's
    nuts, its draws pooled."""
    sites = list(zoo.get_model(target).ground_truth().mean)
    warmup = 1000
    run = zoo.run(target, "nuts", num_samples=draws, warmup=warmup, num_chains=chains, seed=seed)
    if not run.ok:
        raise RuntimeError(f"reference run on {target} failed: {run.error}")
    x = flat_draws(run.idata.posterior, sites)
    x2 = x.reshape(-1, x.shape[-1]) ** 2
    d = run.diagnostics
    how = (
        f"zoo {zoo.__version__} nuts, {chains} x ({warmup} + {draws}), seed {seed}, "
        f"{datetime.date.today()}; min bulk ESS {d.get('min_ess_bulk', float('nan')):.0f}, "
        f"max R-hat {d.get('max_r_hat', float('nan')):.3f}"
    )
    return {"var_x2": x2.var(0).tolist(), "ex2": x2.mean(0).tolist(), "how": how}


# ------------------------------------------------------------------------- the engines


def cell(
    target: str,
    spec: str,
    sizes: dict[str, int],
    seed: int,
    reference: dict[str, Any],
) -> dict[str, Any]:
    name, options = parse_engine(spec)
    sites, ex2, var_x2, var_source = second_moments(target, reference)
    kw = {"num_samples": sizes["draws"], "num_chains": sizes["chains"], **options}
    if sizes.get("warmup") is not None:
        kw["warmup"] = sizes["warmup"]
    start = time.perf_counter()
    try:
        run = zoo.run(target, name, seed=seed, progress=False, **kw)
    except zoo.ZooError as e:  # an engine or option this zoo lacks: raised before any work
        return {"target": target, "engine": spec, "skipped": str(e)}
    wall = time.perf_counter() - start
    if not run.ok:
        return {"target": target, "engine": spec, "skipped": f"failed: {run.error}"}
    x = flat_draws(run.idata.posterior, sites)
    if x.shape[-1] != ex2.shape[0]:
        raise ValueError(f"{target}: {x.shape[-1]} parameters drawn, {ex2.shape[0]} in truth")
    grads = draw_gradients(run.idata.sample_stats, run.engine)
    m = measure(x, grads, ex2, var_x2)
    chains = x.shape[0]
    warm = run.diagnostics["gradient_evals"] / chains - m.sampling_gradients
    return {
        "target": target,
        "engine": spec,
        "params": int(x.shape[-1]),
        "chains": chains,
        "draws": int(x.shape[1]),
        "warmup": int(run.diagnostics.get("warmup", 0)),
        "warmup_gradients": warm,
        "gradients_per_draw": m.sampling_gradients / x.shape[1],
        "measured": m,
        "var_source": var_source,
        "wall_s": wall,
    }


# ----------------------------------------------------------------------------- report


def fmt(g: float, limit: float) -> str:
    return f"not reached within {limit:,.0f}" if math.isinf(g) else f"{g:,.0f}"


def fmt_pub(p: tuple[float, float] | None, i: int) -> str:
    if p is None:
        return "—"
    return "not reached" if math.isinf(p[i]) else f"{p[i]:,.0f}"


def report(rows: list[dict[str, Any]], args: argparse.Namespace, sizes: dict[str, Any]) -> str:
    import pyro
    import torch

    lines = [
        "# Gradient evaluations until b² < 0.01 on the Inference Gym's targets",
        "",
        f"Written by `benchmarks/gradients_to_bias.py` on {datetime.date.today()} "
        f"({platform.machine()}, {platform.processor() or platform.system()}, Python "
        f"{platform.python_version()}, torch {torch.__version__}, pyro {pyro.__version__}, "
        f"zoo {zoo.__version__}). Command: `python benchmarks/gradients_to_bias.py "
        f"--targets {','.join(args.targets)} --engines '{';'.join(args.engines)}' "
        f"--chains {sizes['chains']} --draws {sizes['draws']}"
        + (f" --warmup {sizes['warmup']}" if sizes.get("warmup") is not None else "")
        + f" --seed {args.seed}`"
        + (" (--quick)" if args.quick else "")
        + ".",
        "",
        "b²_i(n) = (Ê_n[x_i²] − E[x_i²])² / Var[x_i²] after n draws of a chain, tuning apart; "
        "gradients are per chain. **median curve**: the draws after which the median over chains "
        "of b²(n) stays below 0.01 (the papers' aggregation), times the chains' mean "
        "gradients by then; **per chain**: the median over chains of each chain's own "
        "crossing. Warmup gradients: the run's count per chain less the draws' (for nuts the "
        "lockstep driver's count, idle steps of finished chains included). Final b²: the "
        "median curve's last value.",
        "",
        "| target | engine | P | chains × draws | warmup grads | grads/draw "
        "| b²_max median curve | b²_avg median curve | b²_max per chain | b²_avg per chain "
        "| final b²_max / b²_avg | published NUTS max / avg | published MAMS max / avg "
        "| published tuning NUTS / MAMS |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    notes: dict[str, str] = {}
    skipped: list[str] = []
    for r in rows:
        t = r["target"]
        pub = PUBLISHED.get(t)
        pn = f"{fmt_pub(pub.nuts, 0)} / {fmt_pub(pub.nuts, 1)}" if pub else "not in the paper"
        pm = f"{fmt_pub(pub.mams, 0)} / {fmt_pub(pub.mams, 1)}" if pub else "not in the paper"
        pt = " / ".join("—" if g is None else f"{g:,.0f}" for g in pub.tuning) if pub else "—"
        if "skipped" in r:
            skipped.append(f"- {t} / {r['engine']}: {r['skipped']}")
            continue
        m: Measured = r["measured"]
        lim = m.sampling_gradients
        notes[t] = r["var_source"]
        lines.append(
            f"| {t} | {r['engine']} | {r['params']} | {r['chains']} × {r['draws']} "
            f"| {r['warmup_gradients']:,.0f} | {r['gradients_per_draw']:.1f} "
            f"| {fmt(m.median_curve[0], lim)} | {fmt(m.median_curve[1], lim)} "
            f"| {fmt(m.per_chain[0], lim)} | {fmt(m.per_chain[1], lim)} "
            f"| {m.final[0]:.3g} / {m.final[1]:.3g} | {pn} | {pm} | {pt} |"
        )
    if skipped:
        lines += ["", "## Skipped (not in this zoo, or failed)", "", *skipped]
    lines += ["", "## Var[x²] used", ""]
    lines += [f"- {t}: {src}" for t, src in notes.items()]
    lines += [
        "",
        "## The published figures",
        "",
        "The MAMS paper's Table 1 itself could not be read offline. The figures beside ours are "
        "the authors' results files in github.com/reubenharry/sampler-benchmarks (snapshot "
        "7ad0700d), which its papers/MAMS/results.md says produce Table 1: NUTS (BlackJAX, "
        "5000 tuning steps, diagonal metric) and MAMS (`adjusted_microcanonical`), 128 chains, "
        "b² of x² with the same median-over-chains aggregation. The paper's German credit is "
        "the sparse logistic regression (gym_german_credit_sparse); radon, the small "
        "stochastic volatility and the plain German credit are not in the paper.",
        "",
    ]
    for t, p in PUBLISHED.items():
        lines.append(f"- {t}: {p.note}. Source: {p.source}.")
    return "\n".join(lines) + "\n"


def target_name(name: str) -> str:
    return name if name.startswith("gym_") else f"gym_{name}"


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--targets", default=",".join(TARGETS), help="comma-separated Gym targets")
    p.add_argument(
        "--engines",
        default="nuts,chees,mams",
        help="engine specs: 'nuts,chees,nuts:metric=low_rank' (options after ':')",
    )
    p.add_argument("--chains", type=int, default=None)
    p.add_argument("--draws", type=int, default=None)
    p.add_argument("--warmup", type=int, default=None, help="default: each engine's own")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", type=Path, default=OUT)
    p.add_argument(
        "--reference",
        type=Path,
        default=REFERENCE,
        help="the cached Var[x²] references, read (and written by --reference-draws); "
        "wherever --out goes",
    )
    p.add_argument("--quick", action="store_true", help="4 chains x (200 + 200), smoke size")
    p.add_argument(
        "--reference-draws",
        type=int,
        default=0,
        help="first make (and cache) a nuts reference of Var[x²] with this many draws per "
        "chain for each non-analytic target lacking one",
    )
    args = p.parse_args(argv)
    args.targets = [target_name(t.strip()) for t in args.targets.split(",") if t.strip()]
    args.engines = split_engines(args.engines)
    sizes: dict[str, Any] = {**SIZES, "warmup": None, **(QUICK if args.quick else {})}
    for key in ("chains", "draws", "warmup"):
        if getattr(args, key) is not None:
            sizes[key] = getattr(args, key)
    ref_file = args.reference
    reference = json.loads(ref_file.read_text()) if ref_file.exists() else {}
    if args.reference_draws:
        for t in args.targets:
            if not zoo.get_model(t).ground_truth().var_sq and t not in reference:
                print(f"reference run on {t} ...", flush=True)
                reference[t] = make_reference(t, args.reference_draws, 8, args.seed + 1000)
                ref_file.parent.mkdir(parents=True, exist_ok=True)
                ref_file.write_text(json.dumps(reference) + "\n", encoding="utf-8")
    rows = []
    for t in args.targets:
        for spec in args.engines:
            r = cell(t, spec, sizes, args.seed, reference)
            rows.append(r)
            if "skipped" in r:
                print(f"{t} {spec}: skipped ({r['skipped']})", flush=True)
            else:
                m = r["measured"]
                print(
                    f"{t} {spec}: median curve {m.median_curve}, per chain {m.per_chain}, "
                    f"final {m.final}, warmup {r['warmup_gradients']:.0f}, {r['wall_s']:.1f} s",
                    flush=True,
                )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(report(rows, args, sizes), encoding="utf-8")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
