"""Plain-language findings computed from a comparison's numbers.

Every sentence here is backed by a number in the comparison table or a run's diagnostics, and a
difference is only called a difference when it is larger than the Monte-Carlo noise of the engine
that produced it (estimated from its effective sample size) and larger than a fixed tolerance.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import pandas as pd

from zoo_inference.accuracy import reference_engine, table_engines, with_reference
from zoo_inference.results import GroundTruth, Run
from zoo_inference.verdict import flags, is_finite, weighed_against

from .status import explain_failure

MEAN_TOL = 0.1  # posterior sd: smaller mean errors are never reported as errors
SD_TOL = 0.05  # relative: smaller sd errors are never reported as errors
# An engine without Monte-Carlo noise (a closed-form approximation: CAVI, Laplace) is held to
# 1%: its error is all bias, and CAVI's 6.5% narrower sd(mu) on normal_gamma is worth saying
EXACT_TOL = 0.01
NOISE_Z = 3.0  # a difference must exceed this many Monte-Carlo standard errors
POINT_SD = 1e-12  # an sd at or below this is a point estimate
# Below this many effective draws (3 Monte-Carlo sds of a mean: 0.3 posterior sd) agreement
# within noise says little: the finding says the draws are too few to judge instead
MIN_JUDGE_ESS = 100.0
LEVELS = ("good", "info", "warn", "bad")
# Numbers a model's own evaluation of a fit gives (``ModelEntry.evaluate``: diagnostics) or a
# peer reports (a reference engine's ``extras``): key -> label, per item (image, document, ...)
MODEL_SCORES = {
    "heldout_log_lik": "held-out log-likelihood",
    "heldout_elbo": "held-out ELBO",
    "train_log_lik": "training log-likelihood",
    "train_elbo": "training ELBO",
    "cluster_accuracy": "clustering accuracy",
    "heldout_cluster_accuracy": "held-out clustering accuracy",
}

STORED_KEY = "stored"  # run.extras[STORED_KEY]: {"draws": the run's, "every": k}, when thinned


@dataclass(frozen=True)
class Finding:
    """One sentence about one engine (``engine`` None: about the model)."""

    engine: str | None
    # failed | unreliable | accuracy | point | evidence | mcmc | svi | reference | held-out
    # | clustering
    topic: str
    level: str  # good | info | warn | bad
    text: str
    # how far the engine is from the truth (or the reference), in posterior sds: the mean's
    # |mean - truth| / truth sd, an sd's |sd / truth sd - 1|; 0 where nothing was measured
    score: float = 0.0
    # what an accuracy finding measured: mean_off | sd_under | sd_over | agree | too_few
    measure: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def worst_error(table: pd.DataFrame, engine: str) -> float | None:
    """Largest finite standardised error of ``engine`` over the table's rows (None if none)."""
    if (engine, "error_in_sds") not in table.columns:
        return None
    vals = pd.to_numeric(table[(engine, "error_in_sds")], errors="coerce").to_numpy(dtype=float)
    vals = vals[np.isfinite(vals)]
    return float(vals.max()) if vals.size else None


def row_site(row: str) -> str:
    return str(row).split("[", 1)[0]


def _fmt(x: float) -> str:
    return f"{x:.4g}".replace("-", "\u2212")


def _signed(x: float, digits: int = 4) -> str:
    return f"{x:.{digits}f}".replace("-", "\u2212")


def percent(x: float) -> str:
    """A relative error as a percentage: one decimal below 10% (6.5%), none above (40%)."""
    return f"{x * 100:.1f}%" if x < 0.095 else f"{x * 100:.0f}%"


def listing(items: Sequence[str], limit: int = 3) -> str:
    items = list(items)
    if len(items) > limit:
        return ", ".join(items[:limit]) + f" and {len(items) - limit} more"
    if len(items) <= 2:
        return " and ".join(items)
    return ", ".join(items[:-1]) + f" and {items[-1]}"


def n_eff(run: Run | None, row: str) -> float:
    """Effective number of draws behind a run's summary row: bulk ESS where the run has one,
    the importance weights' effective sample size (sum w)^2 / sum w^2 for a weighted run, else
    its number of draws, else infinity (exact numbers, and the moments of a run given as
    distributions: no Monte-Carlo noise)."""
    if run is None or run.closed_form:
        return math.inf  # a closed form's moments (exact, CAVI, Laplace) carry no noise
    summary = run.summary
    if "ess_bulk" in summary.columns and row in summary.index:
        if is_finite(summary.loc[row, "ess_bulk"]):
            return max(float(summary.loc[row, "ess_bulk"]), 1.0)
    weighted = run.diagnostics.get("ess")  # the weights' ESS, not the resampled draws' count
    if is_finite(weighted):
        return max(float(weighted), 1.0)
    if STORED_KEY in run.extras:  # a report's cell keeps a thinned set (zoo.store.stored_form)
        return float(run.extras[STORED_KEY]["draws"])
    if run.idata is not None and "posterior" in run.idata.groups():
        sizes = run.idata.posterior.sizes  # type: ignore[attr-defined]  # arviz sets groups as attributes
        return float(sizes.get("chain", 1) * sizes.get("draw", 1))
    return math.inf


def _ok(run: Run | None) -> bool:
    return run is None or run.ok


def findings(
    table: pd.DataFrame,
    *,
    runs: Mapping[str, Run] | None = None,
    truth: GroundTruth | None = None,
    discrete: Collection[str] = (),
    truth_label: str = "the exact posterior",
) -> list[Finding]:
    """Findings for one comparison.

    ``table`` is ``Comparison.table_wide`` (rows: parameters; columns
    ``(truth|engine, mean|sd|...)``). ``runs`` (engine -> Run) adds failures, evidence, MCMC
    and SVI diagnostics and Monte-Carlo noise levels; ``truth`` (a GroundTruth) adds the exact
    log evidence. ``discrete`` names discrete sites: their sd follows from their mean, so only
    means are judged. With no truth in the table, a converged MCMC run (if any) serves as the
    reference.
    """
    runs = dict(runs or {})
    out: list[Finding] = []
    has_truth = ("truth", "mean") in table.columns and bool(
        np.isfinite(pd.to_numeric(table[("truth", "mean")], errors="coerce")).any()
    )
    ref_name = None
    if not has_truth and runs:
        ref_name = reference_engine(runs)
        if ref_name is not None:
            table = with_reference(table, ref_name)
            d = runs[ref_name].diagnostics
            truth_label = f"{ref_name}'s draws"
            out.append(
                Finding(
                    None,
                    "reference",
                    "info",
                    f"No exact posterior is known for this model: accuracy is measured against "
                    f"{ref_name} (max R-hat {float(d['max_r_hat']):.3f}, "
                    f"min bulk ESS {float(d['min_ess_bulk']):.0f}).",
                )
            )
    for engine in table_engines(table):
        run = runs.get(engine)
        if run is not None and not run.ok:
            text = f"{engine} failed. {explain_failure(run.error)} The error: {run.error}"
            out.append(Finding(engine, "failed", "bad", text))
            continue
        if run is not None and run.status == "unreliable":
            text = f"{engine}'s numbers are unreliable: {run.caveat}"
            out.append(Finding(engine, "unreliable", "bad", text.rstrip(".") + "."))
        fixed = run.model_data if run is not None else {}
        if fixed:
            shown = ", ".join(f"{k}={v!r}" for k, v in fixed.items())
            out.append(
                Finding(
                    engine,
                    "variant",
                    "info",
                    f"{engine} runs the model with {shown}: its differences from "
                    f"{truth_label} are the model's, not the engine's.",
                )
            )
        if (has_truth or ref_name is not None) and engine != ref_name:
            ref_run = runs.get(ref_name) if ref_name else None
            out += _accuracy(table, engine, run, ref_run, discrete, truth_label)
        if run is not None:
            out += _evidence(engine, run, truth)
            out += _sampler(engine, run)
    return out + _held_out(runs) + _clustering(runs)


def model_scores(run: Run) -> dict[str, float]:
    """The :data:`MODEL_SCORES` a run holds (its diagnostics, else its extras), finite ones."""
    if not run.ok:
        return {}
    out = {}
    for key in MODEL_SCORES:
        value = run.diagnostics.get(key, run.extras.get(key))
        if is_finite(value) and not isinstance(value, bool):
            out[key] = float(value)
            se = run.diagnostics.get(f"{key}_se")
            if is_finite(se):
                out[f"{key}_se"] = float(se)
    return out


def _held_out(runs: Mapping[str, Run]) -> list[Finding]:
    """Each engine's held-out log-likelihood against its held-out ELBO, and which engine's is
    highest (only differences beyond 3 standard errors are called differences)."""
    scores = {e: model_scores(r) for e, r in runs.items()}
    scores = {e: s for e, s in scores.items() if "heldout_log_lik" in s}
    out = []
    for engine, s in scores.items():
        ll, se = s["heldout_log_lik"], s.get("heldout_log_lik_se")
        k = runs[engine].diagnostics.get("heldout_particles")
        text = f"{engine}: held-out log-likelihood {_signed(ll, 2)} per item"
        if se is not None:
            text += f" ± {se:.2f}"
        if is_finite(k):
            text += f" (importance sampling, {int(k)} draws of the guide per item)"
        if "heldout_elbo" in s:
            gap = ll - s["heldout_elbo"]
            text += (
                f", {gap:.2f} above its held-out ELBO {_signed(s['heldout_elbo'], 2)}: the "
                "bound's gap, the KL from the guide to the exact posterior, on average"
            )
        out.append(Finding(engine, "held-out", "info", text + "."))
    if len(scores) > 1:
        ranked = sorted(scores, key=lambda e: -scores[e]["heldout_log_lik"])
        best, runner = ranked[0], ranked[1]
        b, r = scores[best], scores[runner]
        margin = b["heldout_log_lik"] - r["heldout_log_lik"]
        noise = NOISE_Z * math.hypot(b.get("heldout_log_lik_se", 0), r.get("heldout_log_lik_se", 0))
        others = ", ".join(f"{e} {_signed(scores[e]['heldout_log_lik'], 2)}" for e in ranked[1:])
        if margin > noise:
            text = (
                f"{best} has the highest held-out log-likelihood, "
                f"{_signed(b['heldout_log_lik'], 2)} per item ({others})."
            )
        else:
            text = (
                f"The held-out log-likelihoods of {best} and {runner} agree within their "
                f"Monte-Carlo error ({_signed(b['heldout_log_lik'], 2)}; {others})."
            )
        out.append(Finding(None, "held-out", "info", text))
    return out


def _clustering(runs: Mapping[str, Run]) -> list[Finding]:
    """Clustering accuracy against the labels, engine by engine, best first."""
    scores = {e: model_scores(r) for e, r in runs.items()}
    scores = {e: s for e, s in scores.items() if "cluster_accuracy" in s}
    if not scores:
        return []
    ranked = sorted(scores, key=lambda e: -scores[e]["cluster_accuracy"])
    parts = []
    for e in ranked:
        s = scores[e]
        part = f"{e} {s['cluster_accuracy']:.3f}"
        if "heldout_cluster_accuracy" in s:
            part += f" (held-out {s['heldout_cluster_accuracy']:.3f})"
        parts.append(part)
    text = (
        "Clustering accuracy against the labels (clusters matched one-to-one to labels by the "
        "Hungarian method), best first: " + "; ".join(parts) + "."
    )
    return [Finding(None, "clustering", "info", text)]


def _accuracy(
    table: pd.DataFrame,
    engine: str,
    run: Run | None,
    ref_run: Run | None,
    discrete: Collection[str],
    label: str,
) -> list[Finding]:
    if (engine, "mean") not in table.columns:
        return []
    rows = []
    for row in table.index:
        t_mean, t_sd = table.loc[row, ("truth", "mean")], table.loc[row, ("truth", "sd")]
        mean, sd = table.loc[row, (engine, "mean")], table.loc[row, (engine, "sd")]
        if not (is_finite(t_mean) and is_finite(t_sd) and float(t_sd) > 0 and is_finite(mean)):
            continue
        n = n_eff(run, row)
        if ref_run is not None:  # both sides are noisy
            n = 1.0 / (1.0 / n + 1.0 / n_eff(ref_run, row))
        rows.append((str(row), float(mean), float(sd), float(t_mean), float(t_sd), n))
    if not rows:
        return []
    out: list[Finding] = []
    point = [
        r for r in rows if is_finite(r[2]) and r[2] <= POINT_SD and row_site(r[0]) not in discrete
    ]
    if point:
        point_errs = [abs(r[1] - r[3]) / r[4] for r in point]
        if len(point_errs) == 1:
            where = f"{point_errs[0]:.2f} posterior sd from the posterior mean"
        else:
            lo, hi = min(point_errs), max(point_errs)
            where = f"{lo:.2f}\u2013{hi:.2f} posterior sd from the posterior means"
        out.append(
            Finding(
                engine,
                "point",
                "info",
                f"{engine} gives point estimates (sd 0) for {listing([r[0] for r in point])}, "
                f"{where}: it says nothing about their posterior uncertainty.",
            )
        )
    point_rows = {r[0] for r in point}
    spread = [r for r in rows if r[0] not in point_rows]
    if not spread:
        return out

    # against the truth, a closed form's error is all bias: held to EXACT_TOL
    mean_tol, sd_tol = (
        (EXACT_TOL, EXACT_TOL)
        if run is not None and run.closed_form and ref_run is None
        else (MEAN_TOL, SD_TOL)
    )
    # means: |mean - truth| / truth_sd against max(MEAN_TOL, NOISE_Z / sqrt(n_eff))
    errs = [(abs(m - tm) / ts, r, m, tm, n) for r, m, _, tm, ts, n in spread]
    bad_mean = sorted(
        (e for e in errs if e[0] > max(mean_tol, NOISE_Z / math.sqrt(e[4]))),
        reverse=True,
    )
    worst = max(e[0] for e in errs)
    where = f"for {spread[0][0]}" if len(spread) == 1 else f"for all {len(spread)} parameters"
    if bad_mean:
        err, row, m, tm, _ = bad_mean[0]
        more = len(bad_mean) - 1
        text = (
            f"{engine}'s posterior mean of {row} is {err:.2f} posterior sd from {label} "
            f"({_fmt(m)} vs {_fmt(tm)})"
        )
        if more:
            text += f"; {more} more parameter{'s' if more > 1 else ''} also off by more than noise"
        level = "bad" if err >= 1 else "warn"
        out.append(Finding(engine, "accuracy", level, text + ".", err, "mean_off"))

    # sds: sd / truth_sd - 1 against max(SD_TOL, NOISE_Z * sqrt(1 / (2 n_eff)))
    cont = [r for r in spread if row_site(r[0]) not in discrete and is_finite(r[2])]
    ratios = [(r[2] / r[4] - 1.0, r[0], r[5], r[2], r[4]) for r in cont]
    sig = [x for x in ratios if abs(x[0]) > max(sd_tol, NOISE_Z * math.sqrt(0.5 / x[2]))]
    for word, pick in (("under", lambda x: x[0] < 0), ("over", lambda x: x[0] > 0)):
        chosen = sorted((x for x in sig if pick(x)), key=lambda x: -abs(x[0]))
        if chosen:
            parts = [
                f"sd({row}) by {percent(abs(ratio))} ({_fmt(sd)} vs {_fmt(t_sd)})"
                for ratio, row, _, sd, t_sd in chosen
            ]
            level = "bad" if abs(chosen[0][0]) >= 0.3 else "warn"
            out.append(
                Finding(
                    engine,
                    "accuracy",
                    level,
                    f"{engine} {word}-estimates {listing(parts)} against {label}.",
                    abs(chosen[0][0]),
                    f"sd_{word}",
                )
            )
    if bad_mean and (sig or not cont):
        return out
    worst_sd = max((abs(x[0]) for x in ratios), default=0.0)
    mean_txt = f"means within {worst:.2f} posterior sd {where}"
    sd_where = where if len(cont) == len(spread) else f"for {listing([r[0] for r in cont])}"
    pct = f"{worst_sd * 100:.0f}%" if worst_sd >= 0.005 else "1%"
    sd_txt = f"sds within {pct} {sd_where}"
    fewest = min(r[5] for r in spread)
    if not bad_mean and not sig and fewest < MIN_JUDGE_ESS:
        text = (
            f"{engine} has too few effective draws to judge its accuracy (min ESS "
            f"{fewest:.0f}): means within {worst:.2f} posterior sd, sds within {pct} of {label} "
            f"{where}, all within its Monte-Carlo noise"
        )
        out.append(Finding(engine, "accuracy", "warn", text + ".", measure="too_few"))
        return out
    if not bad_mean and cont and not sig:
        if len(cont) == len(spread):
            text = (
                f"{engine} agrees with {label} {where}: means within {worst:.2f} posterior sd, "
                f"sds within {pct}"
            )
        else:
            text = f"{engine} agrees with {label}: {mean_txt}, {sd_txt}"
    elif not bad_mean:
        text = f"{engine}'s posterior means are within {worst:.2f} posterior sd of {label} {where}"
    else:
        text = f"{engine}'s sds are within {pct} of {label} {sd_where}"
    measure = "agree" if not bad_mean and not sig else None
    out.append(Finding(engine, "accuracy", "good", text + ".", measure=measure))
    return out


def _evidence(engine: str, run: Run, truth: GroundTruth | None) -> list[Finding]:
    ev = run.evidence
    if ev is None or not is_finite(ev.value):
        return []
    le = float(ev.value)
    d = run.diagnostics
    exact = truth.log_evidence if truth is not None and is_finite(truth.log_evidence) else None
    vs = f" (exact log evidence {_signed(exact)})" if exact is not None else ""
    if ev.kind == "conditional":
        sites = listing(list(ev.conditional_on) or ["some sites"], limit=6)
        source = str(d.get("params_source", ""))
        if run.kind == "point":
            how = f"is the log likelihood at its point estimate of {sites}"
        elif "MAP" in source:
            how = f"is conditional on {sites} held at their MAP"
        elif source == "given":
            how = f"is conditional on {sites} held at the given values"
        else:
            how = f"is conditional on {sites} held fixed"
        text = f"{engine}'s log evidence {_signed(le)} {how}, not integrated over them{vs}."
        return [Finding(engine, "evidence", "info", text)]
    if ev.kind == "lower_bound":
        if exact is None:
            text = f"{engine}'s ELBO {_signed(le)} is a lower bound on the log evidence"
            level = "info"
        elif le <= exact:
            text = (
                f"{engine}'s ELBO {_signed(le)} is {exact - le:.4f} nats below the exact "
                f"log evidence {_signed(exact)}"
            )
            level = "info"
        else:
            text = (
                f"{engine}'s ELBO estimate {_signed(le)} lies {le - exact:.4f} nats above the "
                f"exact log evidence {_signed(exact)}, which a lower bound cannot: the estimate "
                f"is noisy"
            )
            level = "warn"
        is_le = d.get("is_log_evidence")
        if is_finite(is_le):
            text += f"; importance sampling with the guide estimates {_signed(float(is_le))}"
            if exact is not None:
                text += f" ({_signed(float(is_le) - exact)} from exact)"
        return [Finding(engine, "evidence", level, text + ".")]
    what = "log evidence estimate" if ev.kind == "estimate" else "log evidence"
    if exact is None:
        return [Finding(engine, "evidence", "info", f"{engine}'s {what} is {_signed(le)}.")]
    diff = le - exact
    if abs(diff) <= 1e-4 * max(1.0, abs(exact)):
        return [
            Finding(
                engine,
                "evidence",
                "good",
                f"{engine}'s {what} {_signed(le)} matches the exact value.",
            )
        ]
    level = "warn" if abs(diff) > 0.1 else "info"
    text = f"{engine}'s {what} {_signed(le)} differs from the exact {_signed(exact)} by "
    return [Finding(engine, "evidence", level, text + f"{_signed(diff)}.")]


def _sampler(engine: str, run: Run) -> list[Finding]:
    d = run.diagnostics
    out: list[Finding] = []
    if is_finite(d.get("max_r_hat")):
        rhat = float(d["max_r_hat"])
        div = int(d.get("divergences") or 0)
        parts = [f"max R-hat {rhat:.3f}", f"{div} divergence{'' if div == 1 else 's'}"]
        ess = d.get("min_ess_bulk")
        wall = d.get("wall_time_s")
        if is_finite(ess):
            per_s = f" ({float(ess) / float(wall):.1f}/s)" if is_finite(wall) and wall > 0 else ""
            parts.append(f"min bulk ESS {float(ess):.0f}{per_s}")
        notes = []
        if rhat > 1.01:
            notes.append("R-hat above 1.01: the chains disagree, run longer")
        if div:
            notes.append("divergent transitions: the sampler may miss part of the posterior")
        level = "bad" if rhat > 1.1 else "warn" if notes else "good"
        text = f"{engine}: " + ", ".join(parts) + (" \u2014 " + "; ".join(notes) if notes else "")
        out.append(Finding(engine, "mcmc", level, text + "."))
    k = d.get("pareto_k")
    # an unreliable run's reasons say it already (the engine's own, or the k-hat's check)
    if is_finite(k) and not {"caveat", "pareto_k"} & set(flags(run)):
        k = float(k)
        proposal = d.get("proposal")  # importance sampling: the proposal it weighted
        q = weighed_against(d)
        if k <= 0.5:
            level, what = "good", f"{q} is a reliable importance proposal for the posterior"
        elif k <= 0.7:
            level, what = "info", "importance weights are usable but converge slowly"
        else:
            level, what = "warn", f"{q} misses part of the posterior (weights unreliable)"
        text = f"{engine}: Pareto k\u0302 {_signed(k, 2)} \u2014 {what}."
        share = d.get("pareto_k_share_above_0_7")
        if is_finite(share):  # an amortised guide: one k-hat per data point, k is their median
            text = (
                f"{engine}: Pareto k\u0302 per data point, median {_signed(k, 2)} "
                f"({float(share):.0%} above 0.7, largest {float(d['pareto_k_max']):.2f}): "
                f"for a typical data point, {what}."
            )
        topic = "importance" if proposal is not None else "approximation"
        out.append(Finding(engine, topic, level, text))
    return out


def accuracy_level(found: Sequence[Finding], engine: str) -> str | None:
    """The worst verdict of an engine's accuracy findings (means and sds against the truth or
    the reference): ``good``, ``warn`` or ``bad``; None when nothing was judged. An index cell is
    green only when both the means and the sds are right. A variant that runs the model under
    other arguments is not judged (its differences are the model's)."""
    if any(f.engine == engine and f.topic == "variant" for f in found):
        return None
    levels = [f.level for f in found if f.engine == engine and f.topic == "accuracy"]
    for level in ("bad", "warn", "good"):
        if level in levels:
            return level
    return None


# ---------------------------------------------------------------- ranking on a page
TOP_FINDINGS = 5  # at most this many findings first on a model page ...
MIN_TOP = 3  # ... and at least this many (when there are)
DISTANCE_MEASURES = ("mean_off", "sd_under", "sd_over")


def _tier(f: Finding) -> int:
    """0: an engine off the truth beyond noise; 1: a failed or unreliable run (or what the
    accuracy is measured against); 2: other warnings; 3: agreement; 4: the rest."""
    if f.topic == "accuracy" and f.measure in DISTANCE_MEASURES:
        return 0
    if f.topic in ("failed", "unreliable", "reference"):
        return 1
    if f.level in ("bad", "warn"):
        return 2
    return 3 if f.level == "good" else 4


def rank_findings(
    found: Sequence[Finding], top: int = TOP_FINDINGS, least: int = MIN_TOP
) -> tuple[list[Finding], list[dict[str, Any]]]:
    """The findings that matter first, and the rest grouped per engine.

    First: the engines furthest from the truth (or the reference) in posterior sds
    (:attr:`Finding.score`, largest first), then failed and unreliable runs, then other
    warnings; at most ``top`` of them, filled up to ``least`` with the next (agreement). The
    rest: ``[{"engine": name or None, "level": worst level, "findings": [...]}]`` in the
    engines' order (None, the model's own findings, first)."""
    order = sorted(range(len(found)), key=lambda i: (_tier(found[i]), -found[i].score, i))
    urgent = sum(_tier(found[i]) <= 2 for i in order)
    chosen = set(order[: min(top, max(least, urgent))])
    first = [found[i] for i in sorted(chosen, key=order.index)]
    groups: dict[str | None, list[Finding]] = {}
    for i, f in enumerate(found):
        if i not in chosen:
            groups.setdefault(f.engine, []).append(f)
    keys = sorted(groups, key=lambda e: e is not None)  # stable: the model's own first
    rest = [
        {
            "engine": e,
            "level": max((f.level for f in groups[e]), key=LEVELS.index),
            "findings": groups[e],
        }
        for e in keys
    ]
    return first, rest


def accuracy_measures(found: Sequence[Finding], engine: str) -> dict[str, float | None]:
    """An engine's distances from the truth its findings measured: the worst mean error beyond
    noise (posterior sds) and the largest under- and over-estimate of an sd beyond noise
    (relative); None where none was found."""
    out: dict[str, float | None] = dict.fromkeys(DISTANCE_MEASURES)
    for f in found:
        if f.engine == engine and f.topic == "accuracy" and f.measure in out:
            out[f.measure] = max(out[f.measure] or 0.0, f.score)
    return out
