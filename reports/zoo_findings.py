"""Findings across the zoo: what the index page says about engines over every model."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from zoo_inference.verdict import MAX_PARETO_K, MAX_R_HAT, MIN_ESS, is_finite

from .findings import LEVELS, Finding, listing, percent

FLAG_WORDS = {
    "caveat": "the engine's own check",
    "r_hat": f"R\u0302 > {MAX_R_HAT}",
    "ess": f"ESS < {MIN_ESS:.0f}",
    "divergences": "divergences",
    "pareto_k": f"Pareto k\u0302 > {MAX_PARETO_K}",
    "elbo": "ELBO not converged",
}


BIG_MODEL = 10  # parameters (posterior table rows): where samplers such as MH stop mixing


def _count(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def _pct_range(values: Sequence[float]) -> str:
    lo, hi = min(values), max(values)
    if percent(lo) == percent(hi):
        return percent(hi)
    return f"{percent(lo).rstrip('%')}\u2013{percent(hi)}"


def _engine_order(models: Sequence[Mapping[str, Any]], generic: Sequence[str]) -> list[str]:
    seen = {e for m in models for e in m.get("engines", {})}
    return [e for e in generic if e in seen] + sorted(seen - set(generic))


def zoo_findings(models: Sequence[Mapping[str, Any]], generic: Sequence[str] = ()) -> list[Finding]:
    """Where each engine wins and fails across the zoo, from the models' index lines
    (``zoo_reports.model_summary``): one line per engine (agreement with the truth, sds under- or
    over-estimated, means off, unreliable runs and why, failures), then which engine is the
    fastest that agrees with the truth and which has the most effective draws per second.
    ``generic`` orders the engines (the rest follow by name)."""
    out: list[Finding] = []
    with_truth = {m["name"] for m in models if m.get("truth")}
    for engine in _engine_order(models, generic):
        cells = [(m["name"], m["engines"][engine]) for m in models if engine in m["engines"]]
        n = len(cells)
        failed = [name for name, c in cells if c.get("status") == "failed"]
        ran = [(name, c) for name, c in cells if c.get("status") != "failed"]
        judged = [(name, c) for name, c in ran if c.get("accuracy")]
        agree = [name for name, c in judged if c.get("accuracy") == "good"]
        parts: list[str] = []
        level = "good"
        for against, which in (("the truth", True), ("the reference run", False)):
            some = [name for name, _ in judged if (name in with_truth) == which]
            if some:
                good = sum(name in agree for name in some)
                parts.append(f"agrees with {against} on {good} of {_count(len(some), 'model')}")
        if len(agree) < len(judged):
            level = "warn" if 2 * len(agree) >= len(judged) else "bad"
        for key, word in (("sd_under", "under"), ("sd_over", "over")):
            vals = [float(c[key]) for _, c in judged if is_finite(c.get(key))]
            if vals:
                worst = "its worst" if len(vals) == 1 else "each one's worst"
                parts.append(
                    f"{word}-estimates some posterior sds on {len(vals)} of "
                    f"{_count(len(judged), 'model')} ({worst} by {_pct_range(vals)})"
                )
                level = max(level, "warn", key=LEVELS.index)
        means = [float(c["mean_off"]) for _, c in judged if is_finite(c.get("mean_off"))]
        if means:
            parts.append(
                f"means off by more than noise on {len(means)} of "
                f"{_count(len(judged), 'model')} (up to "
                f"{max(means):.2f} posterior sd)"
            )
            level = max(level, "warn", key=LEVELS.index)
        unreliable = [(name, c) for name, c in ran if c.get("status") == "unreliable"]
        if unreliable:
            flags: dict[str, int] = {}
            for _, c in unreliable:
                for flag in c.get("flags") or ("caveat",):
                    flags[flag] = flags.get(flag, 0) + 1
            why = ", ".join(f"{FLAG_WORDS.get(f, f)} on {k}" for f, k in flags.items())
            parts.append(f"unreliable on {len(unreliable)} of {_count(n, 'model')} ({why})")
            level = "bad" if 2 * len(unreliable) > n else max(level, "warn", key=LEVELS.index)
            by_size = _by_dimension(models, ran, {name for name, _ in unreliable})
            if by_size:
                parts.append(by_size)
        if failed:
            parts.append(f"failed on {len(failed)} of {_count(n, 'model')} ({listing(failed)})")
            level = "bad"
        if not parts:
            parts.append(f"ran on {_count(n, 'model')}; nothing to judge it against")
            level = "info"
        out.append(Finding(engine, "zoo", level, f"{engine}: " + "; ".join(parts) + "."))
    out += _zoo_wins(models, generic)
    return out


def _by_dimension(
    models: Sequence[Mapping[str, Any]], ran: Sequence[tuple[str, Any]], bad: set[str]
) -> str | None:
    """ "unreliable on all 4 models with more than 10 parameters, 1 of 6 with fewer", when an
    engine fails more often on the larger models (``parameters`` of the index lines)."""
    dims: dict[str, Any] = {m["name"]: m.get("parameters") for m in models}
    big = [name for name, _ in ran if is_finite(dims.get(name)) and dims[name] > BIG_MODEL]
    small = [name for name, _ in ran if is_finite(dims.get(name)) and dims[name] <= BIG_MODEL]
    if not big or not small:
        return None
    nb, ns = sum(x in bad for x in big), sum(x in bad for x in small)
    if nb * len(small) <= ns * len(big):
        return None
    return (
        f"{nb} of the {_count(len(big), 'model')} with more than {BIG_MODEL} parameters, "
        f"{ns} of the {len(small)} with at most {BIG_MODEL}"
    )


def _zoo_wins(models: Sequence[Mapping[str, Any]], generic: Sequence[str]) -> list[Finding]:
    """Per model, the fastest generic engine that is ok and agrees with the truth, and the
    sampler with the most effective draws per second; counted per engine."""
    fastest: dict[str, list[str]] = {}
    per_s: dict[str, list[str]] = {}
    contests = 0
    for m in models:
        ok = {
            e: c
            for e, c in m["engines"].items()
            if c.get("status") == "ok" and (not generic or e in generic)
        }
        good = {e: c for e, c in ok.items() if c.get("accuracy") == "good"}
        timed = {e: c for e, c in good.items() if is_finite(c.get("wall_time_s"))}
        if timed:
            best = min(timed, key=lambda e: float(timed[e]["wall_time_s"]))
            fastest.setdefault(best, []).append(m["name"])
        rated = {e: c for e, c in ok.items() if is_finite(c.get("ess_per_s"))}
        if len(rated) >= 2:
            contests += 1
            best = max(rated, key=lambda e: float(rated[e]["ess_per_s"]))
            per_s.setdefault(best, []).append(m["name"])
    out = []
    if fastest:
        ranked = sorted(fastest, key=lambda e: -len(fastest[e]))
        text = "Fastest engine that is ok and agrees with the truth: " + "; ".join(
            f"{e} on {_count(len(fastest[e]), 'model')} ({listing(fastest[e])})" for e in ranked
        )
        out.append(Finding(None, "zoo", "info", text + "."))
    if per_s:
        ranked = sorted(per_s, key=lambda e: -len(per_s[e]))
        text = (
            f"Most effective draws per second among the samplers that are ok, on the "
            f"{_count(contests, 'model')} where two or more are: "
            + "; ".join(f"{e} on {len(per_s[e])}" for e in ranked)
        )
        out.append(Finding(None, "zoo", "info", text + "."))
    return out
