"""The result types every engine shares: :class:`Run`, :class:`Evidence`, :class:`GroundTruth`
and :class:`Comparison`. Plain data: nothing here runs inference."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from html import escape
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
import pandas as pd

if TYPE_CHECKING:
    import arviz as az

RunKind = Literal["draws", "point", "conditional"]
"""What a run's posterior group holds: ``draws`` from the posterior of every latent site, a
``point`` estimate (EM, MAP: one draw, sd 0), or draws ``conditional`` on some sites held fixed
(``Run.conditional_on``), such as exact enumeration at given parameters."""

EvidenceKind = Literal["exact", "lower_bound", "estimate", "conditional"]
"""``exact`` log p(y); a ``lower_bound`` on it (an ELBO); a Monte-Carlo ``estimate`` of it
(importance sampling); or ``conditional``: log p(y | fixed sites), not integrated over them."""

RunStatus = Literal["ok", "unreliable", "failed"]
"""``ok``; ``unreliable``: the run finished but a diagnostic says its numbers are not to be
trusted (``Run.reasons`` say which: R-hat above 1.01, divergences, importance weights with Pareto
k-hat above 0.7, ...; :mod:`zoo_inference.verdict`); ``failed``: no numbers (``Run.error`` says
why)."""


class ZooError(ValueError):
    """A wrong call: unknown name, bad data or bad option. Raised before any work starts."""


class NumericalFailure(RuntimeError):
    """An engine ran but its numbers are unusable (NaN ELBO, every transition divergent, ...)."""


def one_line(err: BaseException) -> str:
    """An exception as one line: its type and the first line of its message (Pyro appends a
    multi-line dump of trace shapes to shape errors)."""
    lines = str(err).strip().splitlines()
    return f"{type(err).__name__}: {lines[0]}" if lines else type(err).__name__


@dataclass(frozen=True)
class Evidence:
    """A log evidence and what kind of number it is."""

    value: float
    kind: EvidenceKind
    conditional_on: tuple[str, ...] = ()

    def describe(self) -> str:
        if self.kind == "exact":
            return "exact log evidence"
        if self.kind == "lower_bound":
            return "ELBO (a lower bound on the log evidence)"
        if self.kind == "estimate":
            return "log evidence estimate"
        return f"log likelihood given {', '.join(self.conditional_on) or 'fixed sites'}"


@dataclass
class Run:
    """One engine run on one model.

    What was run: ``model`` (registered name), ``engine``, ``options`` (every engine option, as
    validated), ``seed``, ``data`` (the model's keyword arguments it ran on) and
    ``model_data`` (the model arguments a variant fixed on top of ``data``, as
    ``robust_regression``'s Gaussian fit; empty for every other run). The runner
    (``zoo.run``) sets them when it builds the Run it returns.

    What came out: ``idata`` is an ``arviz.InferenceData`` whose ``posterior`` group is named by
    latent sites (and, for a run of posterior draws made by ``zoo.run``, whose
    ``posterior_predictive`` group holds data sets replicated from some of them:
    :mod:`zoo_inference.predictive`); ``summary`` is indexed like ``arviz.summary``; ``diagnostics``
    holds numbers (always ``wall_time_s``); ``traces`` the named per-iteration traces (``elbo``,
    ``log_likelihood``). ``kind`` says what the posterior group holds and ``conditional_on``
    which sites were held fixed; ``closed_form`` that the run was given as distributions (exact
    posterior, CAVI factors, a Laplace approximation), so its summary holds their exact moments,
    free of Monte-Carlo noise. ``status`` is ``ok``, ``unreliable`` (numbers present but not to
    be trusted: ``reasons`` say why, ``caveat`` is them in one line) or ``failed`` (``error``
    set, ``reasons`` holding it, ``idata`` None): the one verdict of :mod:`zoo_inference.verdict`,
    which the runner gives every Run it returns (an engine may set ``unreliable`` and its
    ``caveat`` itself: the verdict keeps it as the first reason).
    ``warnings``: what the engine's libraries warned while a report ran it.
    """

    engine: str
    idata: az.InferenceData | None = None
    summary: pd.DataFrame = field(default_factory=pd.DataFrame)
    kind: RunKind = "draws"
    conditional_on: tuple[str, ...] = ()
    evidence: Evidence | None = None
    traces: dict[str, list[float]] = field(default_factory=dict)
    diagnostics: dict[str, Any] = field(default_factory=dict)
    model: str = ""
    seed: int = 0
    options: dict[str, Any] = field(default_factory=dict)
    data: dict[str, Any] = field(default_factory=dict, repr=False)
    model_data: dict[str, Any] = field(default_factory=dict)
    closed_form: bool = False
    status: RunStatus = "ok"
    error: str | None = None
    caveat: str | None = None
    reasons: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()
    extras: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        """The run has results (``status`` ``ok`` or ``unreliable``): not failed."""
        return self.status != "failed"

    @property
    def log_evidence(self) -> float | None:
        return None if self.evidence is None else self.evidence.value

    @property
    def wall_time_s(self) -> float | None:
        return self.diagnostics.get("wall_time_s")

    def __repr__(self) -> str:
        state = {"ok": "ok", "unreliable": f"unreliable: {self.caveat}"}.get(
            self.status, f"failed: {self.error}"
        )
        wall = self.wall_time_s
        wall_s = f", {wall:.2f}s" if wall is not None else ""
        return f"Run({self.model!r}, {self.engine!r}, {state}{wall_s})"

    def key_diagnostics(self) -> dict[str, Any]:
        """The numbers worth a glance: time, evidence, and the engine's own checks."""
        keys = (
            "wall_time_s",
            "divergences",
            "max_r_hat",
            "min_ess_bulk",
            "final_elbo",
            "pareto_k",
            "ess",
        )
        out = {k: self.diagnostics[k] for k in keys if k in self.diagnostics}
        if self.evidence is not None:
            out[self.evidence.describe()] = self.evidence.value
        return out

    def _repr_html_(self) -> str:
        """Notebook display: status, time, key diagnostics and the summary table."""
        head = f"<b>{escape(self.model)}</b> · <code>{escape(self.engine)}</code> · "
        if not self.ok:
            return head + f'<span style="color:#b00">failed</span>: {escape(str(self.error))}'
        what = {
            "draws": "posterior draws",
            "point": "a point estimate",
            "conditional": "draws conditional on " + ", ".join(self.conditional_on),
        }
        head += f"{escape(self.status)}, {escape(what[self.kind])}"
        if self.caveat:
            head += f' <span style="color:#b60">({escape(self.caveat)})</span>'
        diag = "".join(
            f"<tr><th style='text-align:left'>{escape(k)}</th><td>{_fmt(v)}</td></tr>"
            for k, v in self.key_diagnostics().items()
        )
        table = self.summary.head(40).to_html(float_format=lambda v: f"{v:.4g}")
        more = f"<p>… {len(self.summary) - 40} more rows</p>" if len(self.summary) > 40 else ""
        return f"<div><p>{head}</p><table>{diag}</table>{table}{more}</div>"


def _fmt(v: Any) -> str:
    if isinstance(v, float | np.floating):
        return f"{float(v):.4g}"
    return escape(str(v))


def site_rows(site: str, value: Any) -> dict[str, float]:
    """Per-element values of a site named the way ``arviz.summary`` names its rows
    (``"p"``, ``"z[3]"``, ``"beta[0, 1]"``)."""
    arr = np.asarray(value, dtype=float)
    if arr.ndim == 0:
        return {site: float(arr)}
    return {
        f"{site}[{', '.join(str(i) for i in idx)}]": float(arr[idx])
        for idx in np.ndindex(arr.shape)
    }


def parse_row(row: str) -> tuple[str, tuple[int, ...]]:
    """``"locs[1]"`` -> ``("locs", (1,))``; ``"p"`` -> ``("p", ())``."""
    site, _, rest = str(row).partition("[")
    if not rest:
        return site, ()
    return site, tuple(int(i) for i in rest.rstrip("]").split(","))


Density = Callable[[np.ndarray], np.ndarray]
"""A site's exact marginal density: grid ``x`` of shape (G,) -> (G, *site_shape), the density of
each element of the site at each grid point."""


@dataclass
class GroundTruth:
    """What a model knows exactly about its posterior, per site.

    ``mean`` / ``sd`` map a latent site to an array of its shape (a scalar site: a 0-d array) of
    exact posterior means / standard deviations; ``density`` maps a site to its exact marginal
    densities (:data:`Density`); ``log_evidence`` is log p(data) when known; ``source`` says where
    the numbers come from. ``mean_se`` maps a site to the standard errors of its ``mean`` where the
    truth is itself a Monte-Carlo estimate (a published reference run); absent: exact.
    ``var_sq`` maps a site to Var[x²] of each element, where known (exact, or a reference run's):
    the scale of the squared bias of second moments that the leaderboard measures (``zoo.
    benchmark``); absent, it takes a Gaussian's 2 sd⁴ + 4 mean² sd² and says so.
    """

    mean: Mapping[str, Any]
    sd: Mapping[str, Any]
    log_evidence: float | None = None
    density: Mapping[str, Density] = field(default_factory=dict)
    source: str = "closed form"
    mean_se: Mapping[str, Any] = field(default_factory=dict)
    var_sq: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.mean = {k: np.asarray(v, dtype=float) for k, v in self.mean.items()}
        self.sd = {k: np.asarray(v, dtype=float) for k, v in self.sd.items()}
        self.mean_se = {k: np.asarray(v, dtype=float) for k, v in self.mean_se.items()}
        for name, extra in (("standard errors", self.mean_se), ("Var[x²]", self.var_sq)):
            stray = sorted(set(extra) - set(self.mean))
            if stray:
                raise ValueError(f"ground truth has {name} but no mean for {stray}")
        self.var_sq = {  # a scalar stands for every element of its site
            k: np.broadcast_to(np.asarray(v, dtype=float), self.mean[k].shape).copy()
            for k, v in self.var_sq.items()
        }
        missing = sorted(set(self.mean) ^ set(self.sd))
        if missing:
            raise ValueError(f"ground truth needs both a mean and an sd for {missing}")
        for k in self.mean:
            if self.mean[k].shape != self.sd[k].shape:
                raise ValueError(
                    f"ground truth of {k!r}: mean shape {self.mean[k].shape} != "
                    f"sd shape {self.sd[k].shape}"
                )

    def rows(self) -> dict[str, tuple[float, float]]:
        """``{summary row: (mean, sd)}``, rows named as in ``Run.summary``."""
        out = {}
        for site, mean in self.mean.items():
            sds = site_rows(site, self.sd[site])
            out.update({row: (m, sds[row]) for row, m in site_rows(site, mean).items()})
        return out

    def row_density(self, row: str) -> Callable[[np.ndarray], np.ndarray] | None:
        """The exact density of one summary row's element, or None."""
        site, idx = parse_row(row)
        fn = self.density.get(site)
        if fn is None:
            return None
        key: tuple[slice | int, ...] = (slice(None), *idx)
        return lambda x: np.asarray(fn(np.asarray(x, dtype=float)))[key]


@dataclass(frozen=True)
class ModelInfo:
    """What a report says about a model, as plain data (no model code)."""

    name: str
    description: str = ""
    doc: str = ""
    seed_ref: str = ""
    engines: tuple[str, ...] = ()  # engines that apply
    params: tuple[str, ...] = ()  # sites compared in tables
    discrete: tuple[str, ...] = ()  # discrete latent sites
    figures: Mapping[str, Any] = field(default_factory=dict)  # figures the model asks for
    math: tuple[str, ...] = ()  # the generative story as LaTeX lines
    family: str = ""  # the module that registered it (zoo.models.conjugate: "conjugate")
    # where a user's model is defined, for zoo.load_models (engines.origin); None: the zoo's own
    origin: str | None = None
    # each continuous latent site's support as (lower, upper): a figure's band stays inside it
    bounds: Mapping[str, tuple[float, float]] = field(default_factory=dict)


@dataclass
class Comparison:
    """Runs of several engines on one model, and their table against the truth: ``table``, one
    row per parameter and engine (index ``(parameter, engine)``, columns ``mean``, ``sd``,
    ``error_in_sds``; the truth's row first), and ``table_wide``, one row per parameter
    (columns ``(truth|engine, mean|sd|error_in_sds)``); see :mod:`zoo_inference.accuracy`. A model
    without a truth is compared against ``reference``, the run a report measures accuracy
    against (the converged MCMC run with most effective draws), when there is one.

    ``data`` is the model's keyword arguments every run used, ``seed`` the seed they ran with,
    ``profile`` the report profile that sized their options (``custom``: options as given to
    ``zoo.compare`` or ``zoo.run``; each run's are in ``Run.options``)."""

    model: ModelInfo
    runs: dict[str, Run]
    table: pd.DataFrame
    truth: GroundTruth | None
    data: dict[str, Any]
    seed: int = 0
    profile: str = "custom"
    table_wide: pd.DataFrame = field(default_factory=pd.DataFrame)
    reference: str | None = None

    @property
    def warnings(self) -> list[str]:
        """The distinct warnings the runs recorded (``Run.warnings``), sorted."""
        return sorted({w for run in self.runs.values() for w in run.warnings})

    def __repr__(self) -> str:
        return f"Comparison({self.model.name!r}, engines={list(self.runs)})"

    def _repr_html_(self) -> str:
        """Notebook display: the engines' status and time, then the parameter x engine table
        with the truth."""
        rows = "".join(
            f"<tr><td><code>{escape(e)}</code></td><td>{escape(r.status)}</td>"
            f"<td>{_fmt(r.wall_time_s)} s</td><td>{escape(r.error or r.caveat or '')}</td></tr>"
            for e, r in self.runs.items()
        )
        truth = f"<p>ground truth: {escape(self.truth.source)}</p>" if self.truth else ""
        if self.reference is not None:
            truth = f"<p>no ground truth: against {escape(self.reference)}'s draws</p>"
        table = self.table.head(40).to_html(float_format=lambda v: f"{v:.4g}")
        return (
            f"<div><p><b>{escape(self.model.name)}</b>: {len(self.runs)} engines</p>"
            f"<table><tr><th>engine</th><th>status</th><th>time</th><th></th></tr>{rows}"
            f"</table>{truth}{table}</div>"
        )
