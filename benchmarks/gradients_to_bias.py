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
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from engine_specs import parse_engine, split_engines  # noqa: E402  (a file beside this one)

import zoo

RESULTS = Path(__file__).parent / "results"
OUT = RESULTS / "gradients_to_bias.md"
REFERENCE = RESULTS / "gradients_to_bias_reference.json"
THRESHOLD = 0.01
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

# ---------------------------------------------------------------- the published figures
# The paper's Table 1 could not be read offline. These are the authors' own results files in
# github.com/reubenharry/sampler-benchmarks (snapshot 7ad0700d, 2026-03-11), whose
# papers/MAMS/results.md says sampler-comparison/results/<model>/main.py writes the Table 1
# results: rows `statistic` = square (x², "x2" in older files), max = True / False.
REPO = "reubenharry/sampler-benchmarks@7ad0700d: sampler-comparison/results/"


@dataclass(frozen=True)
class Published:
    nuts: tuple[float, float] | None  # (b²_max, b²_avg) gradients; inf: not reached
    mams: tuple[float, float] | None
    tuning: tuple[float | None, float | None]  # NUTS's and MAMS's tuning gradients per chain
    source: str
    note: str


PUBLISHED: dict[str, Published] = {
    "gym_banana": Published(
        (95_520, 58_750),
        (41_053, 39_606),
        (39_504, 152_081),
        REPO + "other/Banana_MAMS_Paper/{nuts,adjusted_microcanonical}_Banana_MAMS_Paper.csv "
        "(commit 6443564)",
        "same target (results.md: their banana aligns with the Gym's); an older NUTS file, "
        "results/banana/nuts_banana.csv (75c09b7), gives 111,691 / 83,598",
    ),
    "gym_neals_funnel": Published(
        (math.inf, 26_392),
        (1_432_043, 96_921),
        (147_482, 2_755_424),
        REPO + "Neals_Funnel_MAMS_Paper/{nuts,adjusted_microcanonical}_Neals_Funnel_MAMS_Paper"
        ".csv (commit 93cfe2b)",
        "their own funnel (results.md: 'should be similar or the same' as the Gym's)",
    ),
    "gym_ill_conditioned_gaussian": Published(
        (21_674, 2_757),
        None,
        (5_986, None),
        REPO + "ICG/nuts_ICG.csv (commit 93cfe2b); no MAMS file under main.py's name",
        "NOT the same target: their Gaussian is unrotated (results.md), the Gym's is rotated",
    ),
    "gym_brownian_motion": Published(
        (33_462, 6_270),
        None,
        (13_157, None),
        REPO + "vector_brownian_motion_unknown_scales_missing_middle_observations/"
        "nuts_vector_brownian_motion_unknown_scales_missing_middle_observations.csv "
        "(commit e8d652f); no MAMS file under main.py's name",
        "same target; a later ALBA-tuned MAMS variant file (5d05331) gives 14,366 / 3,113",
    ),
    "gym_item_response_theory": Published(
        (71_758, 5_848),
        (47_414, 3_806),
        (22_453, 289_702),
        REPO + "vector_synthetic_item_response_theory/{nuts,adjusted_microcanonical}_"
        "vector_synthetic_item_response_theory.csv (commit 93cfe2b)",
        "same target",
    ),
    "gym_stochastic_volatility": Published(
        (1_628_519, 29_872),
        (482_668, 35_783),
        (130_240, 1_669_241),
        REPO + "Stochastic_Volatility_MAMS_Paper/{nuts,adjusted_microcanonical}_"
        "Stochastic_Volatility_MAMS_Paper.csv (commit 93cfe2b)",
        "NOT the same target: NumPyro's stochastic volatility (results.md: other dimensions, "
        "about 10x harder than the Gym's)",
    ),
    "gym_german_credit_sparse": Published(
        (93_361, 11_465),
        (54_688, 6_743),
        (55_507, 708_265),
        REPO + "vector_german_credit_numeric_sparse_logistic_regression/{nuts,"
        "adjusted_microcanonical}_vector_german_credit_numeric_sparse_logistic_regression.csv "
        "(commit 93cfe2b)",
        "same target: the Gym's GermanCreditNumericSparseLogisticRegression (51 parameters; "
        "sampler_evaluation/models/german_credit.py wraps it in a VectorModel, global scale, "
        "local scales, unscaled weights in that order, and its 2-million-draw expectations "
        "agree with the Gym's truth: b² of E[x²] 6e-5 at most); an older run "
        "(MAMS_PAPER_2025/table1/german_credit, commit 9f0acd0) gives NUTS 88,976 / 10,326 "
        "and MAMS 55,749 / 6,783",
    ),
}

# ------------------------------------------------------------------------- the measure


def running_bias(x: np.ndarray, ex2: np.ndarray, var_x2: np.ndarray) -> np.ndarray:
    """b²(n) per chain, draw and parameter: ``x`` (chains, draws, P) -> (chains, draws, P)."""
    n = np.arange(1, x.shape[1] + 1)[None, :, None]
    return (np.cumsum(x**2, axis=1) / n - ex2) ** 2 / var_x2


def draws_to_threshold(curve: np.ndarray, threshold: float = THRESHOLD) -> float:
    """The draws after which ``curve`` (b² after 1, 2, ... draws) stays below ``threshold``
    (the papers' ``find_crossing``); inf where its last value is not below."""
    above = np.flatnonzero(~(curve < threshold))
    if len(above) == 0:
        return 1.0
    if above[-1] == len(curve) - 1:
        return math.inf
    return float(above[-1] + 2)


def gradients_at(cumulative: np.ndarray, draws: float) -> float:
    """Gradients spent by ``draws`` draws: ``cumulative`` (draws,) the running total."""
    return math.inf if math.isinf(draws) else float(cumulative[int(draws) - 1])


@dataclass
class Measured:
    median_curve: tuple[float, float]  # gradients to b²_max, b²_avg < threshold: the papers'
    per_chain: tuple[float, float]  # median over chains of each chain's gradients
    final: tuple[float, float]  # the median curve's last b²_max, b²_avg
    sampling_gradients: float  # per chain, all draws


def measure(x: np.ndarray, grads: np.ndarray, ex2: np.ndarray, var_x2: np.ndarray) -> Measured:
    """``x`` (chains, draws, P) draws, ``grads`` (chains, draws) each draw's gradients."""
    b2 = running_bias(x, ex2, var_x2)
    curves = (b2.max(-1), b2.mean(-1))  # (chains, draws) each
    cum = np.cumsum(grads, axis=1)
    mean_cum = cum.mean(0)
    median = tuple(gradients_at(mean_cum, draws_to_threshold(np.median(c, 0))) for c in curves)
    per_chain = tuple(
        float(np.median([gradients_at(cum[k], draws_to_threshold(c[k])) for k in range(len(c))]))
        for c in curves
    )
    final = tuple(float(np.median(c, 0)[-1]) for c in curves)
    return Measured(median, per_chain, final, float(mean_cum[-1]))  # type: ignore[arg-type]


# ----------------------------------------------------------------- the truth of x and x²


def flat_draws(run: zoo.Run, sites: list[str]) -> np.ndarray:
    """The draws of ``sites`` as (chains, draws, P), each site's elements in C order."""
    parts = []
    for s in sites:
        v = np.asarray(run.idata.posterior[s].values, dtype=float)
        parts.append(v.reshape(v.shape[0], v.shape[1], -1))
    return np.concatenate(parts, axis=-1)


def exact_var_x2(target: str) -> dict[str, np.ndarray] | None:
    """Var[x²] per site where the target is analytic."""
    from zoo.models import gym

    if target == "gym_banana":
        # x0 = 10 u, x1 = a (u² - 1) + e with a = 100 c, u and e standard normal
        a = 100.0 * gym.BANANA_CURVATURE
        return {"x0": np.array(2e4), "x1": np.array(56 * a**4 + 8 * a**2 + 2)}
    if target == "gym_neals_funnel":  # z ~ N(0, 9); x | z ~ N(0, e^z): E x⁴ = 3 E e^{2z}
        var_x = 3 * math.exp(18.0) - math.exp(9.0)
        return {"z": np.array(2 * 81.0), "x": np.full(gym.FUNNEL_DIMS - 1, var_x)}
    if target == "gym_ill_conditioned_gaussian":  # a zero-mean Gaussian: 2 sd⁴
        return {"x": 2 * np.diag(gym.icg_covariance()) ** 2}
    if target == "gym_brownian_motion":  # E[x⁴] by quadrature, as the zoo's truth
        y = zoo.get_model(target).load_data()["observed_locs"].numpy()
        return {s: m[2] - m[1] ** 2 for s, m in gym.brownian_motion_moments(y).items()}
    return None


EXACT_HOW = {"gym_brownian_motion": "exact (quadrature over the log-scales, locs Kalman-smoothed)"}


def second_moments(
    target: str, reference: dict[str, Any]
) -> tuple[list[str], np.ndarray, np.ndarray, str]:
    """Sites, E[x²] and Var[x²] (flattened as :func:`flat_draws`) and where Var[x²] comes from."""
    truth = zoo.get_model(target).ground_truth()
    if truth is None:
        raise ValueError(f"{target} has no ground truth on its default data")
    sites = list(truth.mean)
    mean = {s: np.asarray(truth.mean[s], dtype=float) for s in sites}
    sd = {s: np.asarray(truth.sd[s], dtype=float) for s in sites}
    ex2 = np.concatenate([(sd[s] ** 2 + mean[s] ** 2).ravel() for s in sites])
    exact = exact_var_x2(target)
    if exact is not None:
        var = np.concatenate([np.broadcast_to(exact[s], mean[s].shape).ravel() for s in sites])
        return sites, ex2, var, EXACT_HOW.get(target, "exact (analytic)")
    if target in reference:
        ref, var = reference[target], np.asarray(reference[target]["var_x2"], dtype=float)
        if var.shape != ex2.shape:
            raise ValueError(
                f"the cached reference of {target} has {var.size} values, not {ex2.size}"
            )
        how = f"reference run: {ref['how']}"
        if "ex2" in ref:  # the run's own E[x²] against the truth's: far above 0.01, they disagree
            b2 = (np.asarray(ref["ex2"], dtype=float) - ex2) ** 2 / var
            names = [f"{s}{list(i) if i else ''}" for s in sites for i in np.ndindex(mean[s].shape)]
            how += (
                f"; its own b² against the truth: max {b2.max():.3g} ({names[b2.argmax()]}), "
                f"avg {b2.mean():.3g}"
            )
        return sites, ex2, var, how
    var = np.concatenate([(2 * sd[s] ** 4 + 4 * mean[s] ** 2 * sd[s] ** 2).ravel() for s in sites])
    return sites, ex2, var, "APPROXIMATE: Gaussian 2 sd⁴ + 4 mean² sd² from the Gym's truth"


def make_reference(target: str, draws: int, chains: int, seed: int) -> dict[str, Any]:
    """Var[x²] (and E[x²], to check the truth by) per parameter from a long run of the zoo's
    nuts, its draws pooled."""
    sites = list(zoo.get_model(target).ground_truth().mean)
    warmup = 1000
    run = zoo.run(target, "nuts", num_samples=draws, warmup=warmup, num_chains=chains, seed=seed)
    if not run.ok:
        raise RuntimeError(f"reference run on {target} failed: {run.error}")
    x = flat_draws(run, sites)
    x2 = x.reshape(-1, x.shape[-1]) ** 2
    d = run.diagnostics
    how = (
        f"zoo {zoo.__version__} nuts, {chains} x ({warmup} + {draws}), seed {seed}, "
        f"{datetime.date.today()}; min bulk ESS {d.get('min_ess_bulk', float('nan')):.0f}, "
        f"max R-hat {d.get('max_r_hat', float('nan')):.3f}"
    )
    return {"var_x2": x2.var(0).tolist(), "ex2": x2.mean(0).tolist(), "how": how}


# ------------------------------------------------------------------------- the engines


def draw_gradients(run: zoo.Run) -> np.ndarray:
    """Each draw's gradient evaluations (chains, draws): its ``gradient_evals`` statistic, or
    its ``n_steps`` (one gradient a leapfrog step)."""
    stats = run.idata.sample_stats
    for name in ("gradient_evals", "n_steps"):
        if name in stats:
            return np.asarray(stats[name].values, dtype=float)
    raise ValueError(
        f"{run.engine} records no per-draw gradient_evals or n_steps statistic "
        f"(it has {sorted(stats.data_vars)})"
    )


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
    x = flat_draws(run, sites)
    if x.shape[-1] != ex2.shape[0]:
        raise ValueError(f"{target}: {x.shape[-1]} parameters drawn, {ex2.shape[0]} in truth")
    grads = draw_gradients(run)
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
            if exact_var_x2(t) is None and t not in reference:
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
