"""A run's one verdict: ``ok`` only where its own diagnostics say its numbers can be used,
``unreliable`` (with the reasons) where one of them says they cannot, ``failed`` (with the
error) where there are no numbers. :func:`judged` applies it once, where the runner finalises
every engine's Run (``zoo.api.execute``); ``run.status``, ``run.reasons`` and ``run.caveat``
then say it everywhere: ``repr(run)``, the CLI, the report's progress log and pages, SBC and the
sweeps."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeGuard

import numpy as np

from .results import Run, RunStatus

# A run is ``ok`` only when its own diagnostics say its numbers can be used; any one of these
# makes it ``unreliable`` (the reason in words beside it). An engine may already have set
# ``unreliable`` itself (importance weights, ``zoo_inference.importance``): its caveat is the first
# reason, and no check upgrades a status.
MAX_R_HAT = 1.01  # rank-normalised split R-hat (Vehtari et al. 2021): above, the chains disagree
MIN_ESS = 100.0  # bulk ESS of the worst parameter (and the importance weights' ESS): below, the
# Monte-Carlo error of a mean is above 0.1 posterior sd and R-hat itself is unreliable
MAX_DIVERGENCES = 0  # any divergent transition: the sampler may miss part of the posterior
MAX_PARETO_K = 0.7  # PSIS k-hat of importance weights (a guide's, or importance sampling's)
ELBO_WINDOW = 0.1  # the ELBO's last 10% of steps are compared with the 10% before them
ELBO_MIN_WINDOW = 5  # steps in a window: shorter traces are not judged
ELBO_RISE = 0.01  # still rising by more than 1% of its rise over the whole run ...
ELBO_NOISE_Z = 3.0  # ... and by more than 3 standard errors of the windows' means: unconverged


def is_finite(x: Any) -> TypeGuard[float]:
    """``x`` is a finite number (or converts to one with ``float``)."""
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
class Verdict:
    """A run's status: ``ok``, ``unreliable`` or ``failed``; ``reasons`` in words (the engine's
    own caveat first; a failed run's error) and ``flags``, short codes of the failed checks
    (``r_hat``, ``ess``, ``divergences``, ``pareto_k``, ``elbo``, ``caveat``, ``failed``)."""

    status: RunStatus
    reasons: tuple[str, ...] = ()
    flags: tuple[str, ...] = ()

    @property
    def caveat(self) -> str | None:
        """The reasons in one line, for a run with numbers (None for ``ok`` and ``failed``)."""
        if self.status != "unreliable":
            return None
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


def _checks(run: Run, own: bool) -> list[tuple[str, str]]:
    """``(flag, reason)`` of every check of the run's diagnostics that fails; ``own``: the
    engine gave its own caveat (its Pareto k-hat and weights' ESS are then not said twice)."""
    d = run.diagnostics
    out: list[tuple[str, str]] = []
    rhat = d.get("max_r_hat")
    if is_finite(rhat) and float(rhat) > MAX_R_HAT:
        # three decimals near the bound: 1.0105 read "1.01 > 1.01"
        shown = f"{float(rhat):.3f}" if float(rhat) < 1.1 else f"{float(rhat):.2f}"
        out.append(("r_hat", f"R\u0302 {shown} > {MAX_R_HAT}: the chains disagree"))
    ess = d.get("min_ess_bulk")
    if is_finite(ess) and float(ess) < MIN_ESS:
        reason = f"min bulk ESS {float(ess):.0f} < {MIN_ESS:.0f}: too few effective draws"
        out.append(("ess", reason))
    div = d.get("divergences")
    if is_finite(div) and int(div) > MAX_DIVERGENCES:
        n = int(div)
        out.append(
            (
                "divergences",
                f"{n} divergent transition{'' if n == 1 else 's'}: the sampler may miss part of "
                "the posterior",
            )
        )
    k = d.get("pareto_k")
    if is_finite(k) and float(k) > MAX_PARETO_K and run.kind != "point" and not own:
        which = "median per-data-point " if is_finite(d.get("pareto_k_share_above_0_7")) else ""
        q = weighed_against(d)
        out.append(
            (
                "pareto_k",
                f"{which}Pareto k\u0302 {float(k):.2f} > {MAX_PARETO_K}: {q} misses part of the "
                "posterior",
            )
        )
    weights_ess = d.get("ess")
    if is_finite(weights_ess) and float(weights_ess) < MIN_ESS and not own:
        out.append(("ess", f"importance weights' ESS {float(weights_ess):.0f} < {MIN_ESS:.0f}"))
    rise = elbo_rise(run.traces.get("elbo", ()))
    if rise is not None:
        up, total, se = rise
        if up > ELBO_NOISE_Z * se and up > ELBO_RISE * abs(total):
            pct = f" ({up / total:.0%} of its rise over the run)" if total > 0 else ""
            out.append(
                (
                    "elbo",
                    f"the ELBO still rose by {up:.3g}{pct} over the last {ELBO_WINDOW:.0%} of "
                    "steps: not converged",
                )
            )
    return out


def assess(run: Run) -> Verdict:
    """The verdict on ``run``: the checks of :data:`MAX_R_HAT`, :data:`MIN_ESS`,
    :data:`MAX_DIVERGENCES`, :data:`MAX_PARETO_K` and the ELBO's convergence (:func:`elbo_rise`)
    on the diagnostics the run has, after the engine's own caveat; a run without any is ``ok``.
    The same verdict again on a run :func:`judged` already finalised (its reasons are those
    checks' and the engine's own)."""
    if not run.ok:
        return Verdict("failed", (str(run.error or "failed"),), ("failed",))
    if run.reasons:  # judged already: the engine's own are the reasons no check gives
        given = {reason for _, reason in _checks(run, own=False)}
        own = tuple(r for r in run.reasons if r not in given)
    elif run.status == "unreliable":
        own = (str(run.caveat or "the engine marked its numbers unreliable"),)
    else:
        own = ()
    checks = _checks(run, own=bool(own))
    reasons = own + tuple(reason for _, reason in checks)
    if not reasons:
        return Verdict("ok")
    flags = ("caveat",) * bool(own) + tuple(flag for flag, _ in checks)
    return Verdict("unreliable", reasons, tuple(dict.fromkeys(flags)))


def flags(run: Run) -> tuple[str, ...]:
    """The short codes of what makes ``run`` unreliable or failed (:attr:`Verdict.flags`)."""
    return assess(run).flags


def judged(run: Run) -> Run:
    """``run`` with its verdict (:func:`assess`) as its ``status``, ``reasons`` and ``caveat``."""
    v = assess(run)
    return dataclasses.replace(run, status=v.status, reasons=v.reasons, caveat=v.caveat)
