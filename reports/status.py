"""A run's honest status in a report: ``ok`` only where its own diagnostics say its numbers can
be used (:func:`assess`), and a failed run's error explained in words."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from zoo_inference.results import Run

# A run is ``ok`` in a report only when its own diagnostics say its numbers can be used; any
# one of these makes it ``unreliable`` (the reason in words beside it). They are the one place
# the report decides a status (an engine may already have set ``unreliable`` itself: importance
# weights, ``inference.importance``; a report never upgrades a status).
MAX_R_HAT = 1.01  # rank-normalised split R-hat (Vehtari et al. 2021): above, the chains disagree
MIN_ESS = 100.0  # bulk ESS of the worst parameter (and the importance weights' ESS): below, the
# Monte-Carlo error of a mean is above 0.1 posterior sd and R-hat itself is unreliable
MAX_DIVERGENCES = 0  # any divergent transition: the sampler may miss part of the posterior
MAX_PARETO_K = 0.7  # PSIS k-hat of importance weights (a guide's, or importance sampling's)
ELBO_WINDOW = 0.1  # the ELBO's last 10% of steps are compared with the 10% before them
ELBO_MIN_WINDOW = 5  # steps in a window: shorter traces are not judged
ELBO_RISE = 0.01  # still rising by more than 1% of its rise over the whole run ...
ELBO_NOISE_Z = 3.0  # ... and by more than 3 standard errors of the windows' means: unconverged


def is_finite(x: Any) -> bool:
    try:
        return x is not None and math.isfinite(float(x))
    except (TypeError, ValueError):
        return False


def weighed_against(d: Mapping[str, Any]) -> str:
    """What a run's Pareto k-hat weighs against the posterior, in words: an importance run's
    proposal, a Gaussian approximation (``approximation``, Laplace's) or SVI's guide."""
    if d.get("proposal") is not None:
        return f"the proposal ({d['proposal']})"
    return str(d.get("approximation") or "the guide")


@dataclass(frozen=True)
class Assessment:
    """A run's status in a report: ``ok``, ``unreliable`` or ``failed``; ``reasons`` in words
    (the engine's own caveat first) and ``flags``, short codes of the failed checks (``r_hat``,
    ``ess``, ``divergences``, ``pareto_k``, ``elbo``, ``caveat``)."""

    status: str
    reasons: tuple[str, ...] = ()
    flags: tuple[str, ...] = ()

    @property
    def caveat(self) -> str | None:
        return "; ".join(self.reasons) or None


def elbo_rise(trace: Sequence[float]) -> tuple[float, float, float] | None:
    """``(rise, total, se)`` of an ELBO trace: the mean of its last :data:`ELBO_WINDOW` of steps
    minus the mean of the window before, the rise of the last window over the first, and the
    standard error of ``rise`` from the windows' spread; None for a trace too short to judge."""
    y = np.asarray([v for v in trace if is_finite(v)], dtype=float)
    w = int(len(y) * ELBO_WINDOW)
    if w < ELBO_MIN_WINDOW:
        return None
    last, before, first = y[-w:], y[-2 * w : -w], y[:w]
    se = math.sqrt((last.var(ddof=1) + before.var(ddof=1)) / w)
    return float(last.mean() - before.mean()), float(last.mean() - first.mean()), se


def assess(run: Run) -> Assessment:
    """The status a report shows for ``run``: the checks of :data:`MAX_R_HAT`,
    :data:`MIN_ESS`, :data:`MAX_DIVERGENCES`, :data:`MAX_PARETO_K` and the ELBO's convergence
    (:func:`elbo_rise`) on the diagnostics the run has; a run without any is ``ok``."""
    if not run.ok:
        return Assessment("failed", (str(run.error or "failed"),), ("failed",))
    d = run.diagnostics
    reasons: list[str] = []
    flags: list[str] = []
    if run.status == "unreliable":
        reasons.append(str(run.caveat or "the engine marked its numbers unreliable"))
        flags.append("caveat")
    rhat = d.get("max_r_hat")
    if is_finite(rhat) and float(rhat) > MAX_R_HAT:
        # three decimals near the bound: 1.0105 read "1.01 > 1.01"
        shown = f"{float(rhat):.3f}" if float(rhat) < 1.1 else f"{float(rhat):.2f}"
        reasons.append(f"R\u0302 {shown} > {MAX_R_HAT}: the chains disagree")
        flags.append("r_hat")
    ess = d.get("min_ess_bulk")
    if is_finite(ess) and float(ess) < MIN_ESS:
        reasons.append(f"min bulk ESS {float(ess):.0f} < {MIN_ESS:.0f}: too few effective draws")
        flags.append("ess")
    div = d.get("divergences")
    if is_finite(div) and int(div) > MAX_DIVERGENCES:
        n = int(div)
        reasons.append(
            f"{n} divergent transition{'' if n == 1 else 's'}: the sampler may miss part of "
            "the posterior"
        )
        flags.append("divergences")
    k = d.get("pareto_k")
    if is_finite(k) and float(k) > MAX_PARETO_K and run.kind != "point" and "caveat" not in flags:
        which = "median per-data-point " if is_finite(d.get("pareto_k_share_above_0_7")) else ""
        q = weighed_against(d)
        reasons.append(
            f"{which}Pareto k\u0302 {float(k):.2f} > {MAX_PARETO_K}: {q} misses part of the "
            "posterior"
        )
        flags.append("pareto_k")
    weights_ess = d.get("ess")
    if is_finite(weights_ess) and float(weights_ess) < MIN_ESS and "caveat" not in flags:
        reasons.append(f"importance weights' ESS {float(weights_ess):.0f} < {MIN_ESS:.0f}")
        flags.append("ess")
    rise = elbo_rise(run.traces.get("elbo", ()))
    if rise is not None:
        up, total, se = rise
        if up > ELBO_NOISE_Z * se and up > ELBO_RISE * abs(total):
            pct = f" ({up / total:.0%} of its rise over the run)" if total > 0 else ""
            reasons.append(
                f"the ELBO still rose by {up:.3g}{pct} over the last {ELBO_WINDOW:.0%} of "
                "steps: not converged"
            )
            flags.append("elbo")
    if not reasons:
        return Assessment("ok")
    return Assessment("unreliable", tuple(reasons), tuple(dict.fromkeys(flags)))


FAILURES = (
    (
        "ELBO is",
        "The optimisation diverged: the ELBO became NaN or infinite (try a smaller "
        "learning rate or a better-scaled model).",
    ),
    (
        "every transition diverged",
        "Every MCMC transition diverged: the sampler could not move "
        "through this posterior (reparameterise, or raise target_accept).",
    ),
    (
        "valid initial",
        "No starting point with a finite log density was found: the model's log "
        "density is NaN or -inf wherever the sampler looked.",
    ),
    (
        "Expected parameter",
        "A distribution received a parameter outside its support during the "
        "run, usually after a numerical overflow.",
    ),
    (
        "importance weight",
        "Every importance weight was zero or NaN: the proposal never hit the posterior.",
    ),
    ("log evidence is", "The exact log evidence came out NaN or infinite."),
)


def explain_failure(error: str | None) -> str:
    """A failed run's reason in plain words, to show before the raw error."""
    text = str(error or "")
    for needle, plain in FAILURES:
        if needle in text:
            return plain
    return "The engine stopped with an error while it ran."
