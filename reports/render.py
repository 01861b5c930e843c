"""Rendering: one Jinja2 environment for every page (HTML autoescaped, Markdown not), and the
machine-readable JSON/CSV beside them.

:func:`model_context` turns a :class:`inference.Comparison` into plain data; the templates, the
JSON and the CSV are all written from that data, so the numbers agree everywhere.
"""

from __future__ import annotations

import ast
import functools
import io
import math
import os
import platform
import shlex
from collections.abc import Mapping, Sequence
from datetime import datetime, timezone
from importlib.metadata import PackageNotFoundError, version
from typing import Any, TypeGuard

import jinja2
import numpy as np
import pandas as pd

from zoo_inference.engines import GENERIC_ENGINES
from zoo_inference.results import Comparison, Run
from zoo_inference.serialize import dumps, frame_records, run_record
from zoo_inference.verdict import (
    ELBO_RISE,
    ELBO_WINDOW,
    MAX_DIVERGENCES,
    MAX_PARETO_K,
    MAX_R_HAT,
    MIN_ESS,
    flags,
)

from .extras import page_extras
from .figures import FigureImage, parse_row
from .findings import (
    MODEL_SCORES,
    Finding,
    accuracy_level,
    accuracy_measures,
    findings,
    model_scores,
    rank_findings,
    reference_engine,
    row_site,
    table_engines,
    worst_error,
)
from .model_figures import model_figures
from .status import explain_failure
from .zoo_findings import zoo_findings

ERROR_GOOD = 0.25  # |mean - truth| / truth_sd below this: green in the tables
ERROR_BAD = 1.0  # at or above this: red
MAX_TABLE_ROWS = 60  # posterior table rows on a page (all of them are in the CSV and JSON)
MAX_JSON_DATA_VALUES = 100_000  # a model's data goes into its JSON up to this many numbers
# a run's summary goes into the page's JSON whole up to this many rows; past it (a VAE's 15,000
# local latents), the rows of the sites the page compares (every row stays in the run's cell)
MAX_JSON_SUMMARY_ROWS = 1000
RUN_COLUMNS = (
    "status",
    "wall_time_s",
    "ess_per_s",
    "min_ess_bulk",
    "max_r_hat",
    "divergences",
    "final_elbo",
    "pareto_k",
    "log_evidence",
    "worst_error",
    "accuracy",
    "mean_off",
    "sd_under",
    "sd_over",
    "flags",
    "error",
    "caveat",
    "explanation",
)
REFERENCE_COLUMN = "reference"  # the index's one column for a model's own algorithms
# The thresholds of an honest status, as the pages state them (reports.findings decides)
THRESHOLDS = {
    "max_r_hat": MAX_R_HAT,
    "min_ess": MIN_ESS,
    "max_divergences": MAX_DIVERGENCES,
    "max_pareto_k": MAX_PARETO_K,
    "elbo_window": ELBO_WINDOW,
    "elbo_rise": ELBO_RISE,
}


# --------------------------------------------------------------------------- environment
@functools.lru_cache(maxsize=1)
def environment() -> jinja2.Environment:
    """The one renderer: templates from ``reports/templates``; ``*.html.j2`` autoescaped."""
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("zoo_reports", "templates"),
        autoescape=jinja2.select_autoescape(
            enabled_extensions=("html.j2", "html"),
            disabled_extensions=("md.j2", "md"),
            default_for_string=True,
            default=True,
        ),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )
    env.filters.update(
        num=fmt_num, fixed=fmt_fixed, secs=fmt_secs, md=md_cell, err_class=error_class
    )
    return env


def render(template: str, **context: Any) -> str:
    return environment().get_template(template).render(**context)


# --------------------------------------------------------------------------- formatting
def _finite(x: Any) -> TypeGuard[float]:
    try:
        return x is not None and not isinstance(x, bool) and math.isfinite(float(x))
    except (TypeError, ValueError):
        return False


def fmt_num(x: Any, digits: int = 4, empty: str = "\u2014") -> str:
    """A number for a table cell: ``digits`` significant digits, NaN/None as a dash."""
    if isinstance(x, (bool, np.bool_)):
        return str(bool(x))
    if isinstance(x, (int, np.integer)):
        return str(int(x))
    if not _finite(x):
        return empty
    x = float(x)
    if x == 0:
        return "0"
    if 1e-3 <= abs(x) < 1e6:
        decimals = max(0, digits - 1 - int(math.floor(math.log10(abs(x)))))
        return f"{x:.{decimals}f}"
    return f"{x:.{digits - 1}e}"


def fmt_fixed(x: Any, decimals: int = 2) -> str:
    """A number with fixed decimals (standardised errors: ``0.00``, ``0.33``, ``12.40``)."""
    if not _finite(x):
        return "\u2014"
    return f"{float(x):.{decimals}f}"


def fmt_secs(x: Any) -> str:
    if not _finite(x):
        return "\u2014"
    x = float(x)
    return f"{x:.3f}" if x < 1 else f"{x:.2f}" if x < 100 else f"{x:.0f}"


def md_cell(x: Any) -> str:
    """Text safe inside a Markdown table cell."""
    return str(x).replace("\\", "\\\\").replace("|", "\\|").replace("\n", " ")


def error_class(x: Any) -> str:
    if not _finite(x):
        return ""
    return "good" if x < ERROR_GOOD else "warn" if x < ERROR_BAD else "bad"


def flat_table(table: pd.DataFrame) -> pd.DataFrame:
    """The comparison table with ``source_stat`` columns and the parameter as a column."""
    flat = table.copy()
    flat.columns = [f"{s}_{t}" for s, t in table.columns]
    return flat.reset_index()


def to_csv(frame: pd.DataFrame) -> str:
    buf = io.StringIO()
    frame.to_csv(buf, index=False, float_format="%.10g", lineterminator="\n")
    return buf.getvalue()


def now_utc() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")  # noqa: UP017


@functools.lru_cache(maxsize=1)
def versions() -> dict[str, str]:
    """Versions of Python and of the packages the numbers depend on."""
    out = {"python": platform.python_version()}
    for pkg in ("pyro-zoo", "pyro-ppl", "torch", "arviz", "numpy", "scipy", "scikit-learn"):
        try:
            out[pkg] = version(pkg)
        except PackageNotFoundError:
            pass
    return out


@functools.lru_cache(maxsize=1)
def machine() -> dict[str, str]:
    """The machine that rendered the report (and, unless a cluster ran them, ran the engines)."""
    return {
        "platform": platform.platform(),
        "processor": platform.machine() or "unknown",
        "cores": str(os.cpu_count() or "unknown"),
    }


# --------------------------------------------------------------------------- model data
def _short(v: Any) -> str:
    """A data value as written: ``1``, ``0.7``, ``3.1416``."""
    if isinstance(v, (bool, np.bool_)) or not _finite(v):
        return str(v)
    return f"{float(v):.5g}"


def describe_data(data: Mapping[str, Any], preview: int = 8) -> list[dict[str, Any]]:
    """Keys, types, shapes and a preview of a model's data."""
    rows = []
    for key, value in data.items():
        if hasattr(value, "detach"):
            value = value.detach().cpu().numpy()
        if isinstance(value, np.ndarray):
            flat = value.ravel()
            shown = ", ".join(_short(v) for v in flat[:preview])
            if flat.size > preview:
                shown += ", \u2026"
            stats = ""
            if flat.size > preview and value.dtype.kind in "biuf":
                stats = (
                    f"{flat.size} values: min {_short(flat.min())}, mean {_short(flat.mean())}, "
                    f"max {_short(flat.max())}"
                )
            shape = ", ".join(map(str, value.shape)) + ("," if value.ndim == 1 else "")
            rows.append(
                {
                    "key": key,
                    "type": f"array ({value.dtype})",
                    "shape": f"({shape})",
                    "preview": f"[{shown}]" if value.ndim else shown,
                    "stats": stats,
                }
            )
        else:
            rows.append(
                {
                    "key": key,
                    "type": type(value).__name__,
                    "shape": "scalar",
                    "preview": _short(value) if isinstance(value, (int, float)) else str(value),
                    "stats": "",
                }
            )
    return rows


def run_row(
    engine: str,
    run: Run,
    table: pd.DataFrame,
    has_truth: bool,
    found: Sequence[Finding] = (),
) -> dict[str, Any]:
    """One engine's line of the engine table (raw numbers; templates format them)."""
    d = run.diagnostics
    wall = d.get("wall_time_s")
    compiled = d.get("compile_s")  # shown beside the wall time where it is a visible share
    ess = d.get("min_ess_bulk")
    acc = d.get("acceptance_rate")
    if isinstance(acc, (list, tuple)) and acc:
        acc = float(np.mean(acc))
    return {
        "engine": engine,
        # the run's one verdict (inference.verdict): ok only where its own diagnostics pass
        "status": run.status,
        "reasons": list(run.reasons),
        "flags": list(flags(run)),
        "ok": run.ok,
        "error": run.error,
        "caveat": run.caveat if run.ok else None,
        "wall_time_s": wall,
        "compile_s": compiled if _finite(compiled) and compiled >= 0.05 else None,
        "ess_per_s": float(ess) / float(wall) if _finite(ess) and _finite(wall) and wall else None,
        "min_ess_bulk": ess,
        "max_r_hat": d.get("max_r_hat"),
        "divergences": d.get("divergences"),
        "acceptance_rate": acc if _finite(acc) else None,
        "final_elbo": d.get("final_elbo"),
        "pareto_k": d.get("pareto_k"),
        "log_evidence": run.log_evidence,
        "evidence_kind": None if run.evidence is None else run.evidence.kind,
        "kind": run.kind,
        "conditional_on": list(run.conditional_on),
        "worst_error": worst_error(table, engine) if has_truth and run.ok else None,
        "accuracy": accuracy_level(found, engine),
        **accuracy_measures(found, engine),
        "explanation": None if run.ok else explain_failure(run.error),
        "options": ", ".join(f"{k}={v}" for k, v in sorted(run.options.items()) if v is not None),
        "scores": model_scores(run),
    }


def _literal(value: Any) -> bool:
    """``repr(value)`` reads back as the same Python literal (so ``-o KEY=VALUE`` can say it)."""
    try:
        return ast.literal_eval(repr(value)) == value
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return False


def _cli_option(key: str, value: Any) -> str:
    """``-o KEY=VALUE`` as ``zoo.cli`` reads it back: a string that is not a Python literal as
    it is (``backend=zoo``), everything else as its literal."""
    text = repr(value)
    if isinstance(value, str):
        try:
            ast.literal_eval(value)
        except (ValueError, SyntaxError, MemoryError, RecursionError):
            text = value
    return "-o " + shlex.quote(f"{key}={text}")


def user_sources(cmp: Comparison) -> tuple[list[str], bool]:
    """The files and modules that registered the comparison's model and engines, where they are
    a user's (``zoo.load_models`` and ``--models`` take them), and whether one of them was defined
    interactively (nothing to load: its code must run first)."""
    found = [cmp.model.origin]
    found += [getattr(GENERIC_ENGINES.get(e), "origin", None) for e in cmp.runs]
    return list(dict.fromkeys(o for o in found if o)), "" in found


BEYOND_SEEDS = "beyond the seeds: "  # a seed_ref's prefix for a model not from the lecture notes


def source_line(seed_ref: str) -> dict[str, str] | None:
    """Where a model comes from, labelled for a page: the lecture notes' sections (the seed
    documents: ``000 §2.1.3``), another source (``Inference Gym, Banana``), or None (a user's
    model that says nothing)."""
    if not seed_ref:
        return None
    if seed_ref.startswith(BEYOND_SEEDS):
        return {"label": "Source", "text": seed_ref.removeprefix(BEYOND_SEEDS)}
    return {"label": "Lecture notes", "text": seed_ref}


def reproduce(cmp: Comparison) -> dict[str, Any]:
    """How to get this page's numbers again: the Python calls and the command lines, per engine
    with its options (those left at their default, None, omitted), the seed and profile, the
    package versions and the machine. A user's models and engines are loaded first: the files
    or modules that registered them, as ``--models`` (CLI) and ``zoo.load_models`` (Python)."""
    name, seed = cmp.model.name, cmp.seed
    engines = list(cmp.runs)
    sources, interactive = user_sources(cmp)
    models = [f"--models {shlex.quote(src)}" for src in sources]
    head = "import zoo\n\n"
    if sources:
        head += f"zoo.load_models({', '.join(map(repr, sources))})\n"
    if interactive:
        head += "# first run the code that registered the model or engine (defined interactively)\n"
    per_engine = []
    compare_lines = [f"cmp = zoo.compare(\n    {name!r},\n    {engines!r},\n    seed={seed},"]
    for engine, run in cmp.runs.items():
        opts = {k: v for k, v in sorted(run.options.items()) if v is not None}
        py_args = "".join(f", {k}={v!r}" for k, v in opts.items())
        cli_opts = [_cli_option(k, v) for k, v in opts.items() if _literal(v)]
        if opts and engine.isidentifier():
            compare_lines.append(f"    {engine}={opts!r},")
        per_engine.append(
            {
                "engine": engine,
                "python": f"run = zoo.run({name!r}, {engine!r}, seed={seed}{py_args})",
                "cli": " ".join(
                    ["zoo run", shlex.quote(name), "--engine", shlex.quote(engine)]
                    + [*models, f"--seed {seed}", *cli_opts]
                ),
                "python_only": [k for k, v in opts.items() if not _literal(v)],
            }
        )
    compare_lines.append(")")
    report = None
    if cmp.profile != "custom":
        report = " ".join(
            ["zoo report", shlex.quote(name), *models, f"--profile {cmp.profile} --seed {seed}"]
        )
        if set(engines) != set(cmp.model.engines):
            report += " --engines " + shlex.quote(",".join(engines))
    return {
        "python": head + "\n".join(compare_lines) + "\nzoo.report(cmp, out='report')",
        "report": report,
        "engines": per_engine,
        "sources": sources,
        "loads": head.removeprefix("import zoo\n\n").strip(),  # the lines after the import
        "versions": versions(),
        "machine": machine(),
        "seed": seed,
        "profile": cmp.profile,
    }


def posterior_rows(table: pd.DataFrame) -> list[dict[str, Any]]:
    """The comparison table as rows of ``{"parameter", "truth": (mean, sd), engine: (...)}``."""
    engines = table_engines(table)
    rows = []
    for row in table.index:
        cells = {}
        for e in engines:
            cells[e] = {
                s: table.loc[row, (e, s)] if (e, s) in table.columns else None
                for s in ("mean", "sd", "error_in_sds")
            }
        rows.append(
            {
                "parameter": str(row),
                "truth": {s: table.loc[row, ("truth", s)] for s in ("mean", "sd")},
                "engines": cells,
            }
        )
    return rows


def model_context(
    cmp: Comparison, *, figures: bool = True, generated: str | None = None
) -> dict[str, Any]:
    """Everything a model page shows, as plain data: the comparison's numbers, its seed and
    profile, and the warnings its runs recorded (listed on the page, not printed)."""
    info, table, truth = cmp.model, cmp.table_wide, cmp.truth
    has_truth = truth is not None and bool(truth.mean)
    discrete = info.discrete
    label = "the exact posterior"
    if truth is not None and not str(truth.source).lower().startswith(("closed form", "exact")):
        label = "the reference posterior"
    found = findings(table, runs=cmp.runs, truth=truth, discrete=discrete, truth_label=label)
    engines = list(cmp.runs)
    figs: list[FigureImage] = model_figures(cmp) if figures else []
    compared = list(info.params)
    rows = posterior_rows(table)
    run_rows = [run_row(e, r, table, has_truth, found) for e, r in cmp.runs.items()]
    scored = {k for r in run_rows for k in r["scores"]}
    top, grouped = rank_findings(found)
    against = "truth" if has_truth else reference_engine(cmp.runs)
    return {
        "name": info.name,
        "description": info.description,
        "doc": info.doc,
        "seed_ref": info.seed_ref,
        "source": source_line(info.seed_ref),
        "profile": cmp.profile,
        "seed": cmp.seed,
        "generated": generated or now_utc(),
        "versions": versions(),
        "engines": engines,
        "applicable": list(info.engines),
        "compared_params": compared,
        "discrete_sites": [s for s in discrete if s in compared],
        "data": describe_data(cmp.data),
        "truth": None
        if truth is None
        else {
            "source": truth.source,
            "log_evidence": truth.log_evidence,
            "mean": dict(truth.mean),
            "sd": dict(truth.sd),
            "rows": {r: {"mean": m, "sd": sd} for r, (m, sd) in truth.rows().items()},
        },
        "has_truth": has_truth,
        "runs": run_rows,
        # the model's own scores of each fit (held-out likelihood, clustering accuracy)
        "score_names": [{"key": k, "label": v} for k, v in MODEL_SCORES.items() if k in scored],
        "posterior": rows[:MAX_TABLE_ROWS],
        "posterior_total": len(rows),
        "findings": [f.to_dict() for f in found],
        "top_findings": [f.to_dict() for f in top],
        "finding_groups": [
            {**g, "findings": [f.to_dict() for f in g["findings"]]} for g in grouped
        ],
        "against": against,
        "family": info.family,
        "reproduce": reproduce(cmp),
        "thresholds": THRESHOLDS,
        "figures": figs,
        "error_good": ERROR_GOOD,
        "error_bad": ERROR_BAD,
        "warnings": cmp.warnings,
        **page_extras(cmp, figures=figures),  # forest, ppc, loo, math, provenance
    }


def _as_array(v: Any) -> Any:
    return v.detach().cpu().numpy() if hasattr(v, "detach") else v


def json_summary(summary: pd.DataFrame, compared: Sequence[str]) -> pd.DataFrame:
    """The summary rows a page's JSON holds: all, or past :data:`MAX_JSON_SUMMARY_ROWS` those
    of the ``compared`` sites (at most that many)."""
    if len(summary) <= MAX_JSON_SUMMARY_ROWS:
        return summary
    keep = [r for r in summary.index if (parse_row(r) or (None,))[0] in set(compared)]
    return summary.loc[keep[:MAX_JSON_SUMMARY_ROWS]]


def model_json(cmp: Comparison, ctx: Mapping[str, Any]) -> dict[str, Any]:
    """The machine-readable page: every number of the page and every run's diagnostics."""
    runs = {}
    rows = {r["engine"]: r for r in ctx["runs"]}
    for engine, run in cmp.runs.items():
        row = rows[engine]
        runs[engine] = {
            **run_record(run),
            "scores": row["scores"],
            "summary": frame_records(json_summary(run.summary, cmp.model.params)) if run.ok else {},
            "summary_rows": len(run.summary),
        }
    keys = (
        "name",
        "description",
        "family",
        "seed_ref",
        "doc",
        "profile",
        "seed",
        "generated",
        "versions",
        "thresholds",
        "reproduce",
    )
    out = {("model" if k == "name" else k): ctx[k] for k in keys}
    out.update(
        data=ctx["data"],
        data_values={
            k: v for k, v in cmp.data.items() if np.size(_as_array(v)) <= MAX_JSON_DATA_VALUES
        },
        truth=ctx["truth"],
        runs=runs,
        table=flat_table(cmp.table_wide).to_dict(orient="records"),
        findings=ctx["findings"],
        warnings=ctx["warnings"],
        loo=ctx["loo"],
        math=list(cmp.model.math),
        provenance=ctx["provenance"],
    )
    return out


def model_summary(ctx: Mapping[str, Any]) -> dict[str, Any]:
    """A model's line of the zoo index (also stored in ``results.json``)."""
    return {
        "name": ctx["name"],
        "description": ctx["description"],
        "seed_ref": ctx["seed_ref"],
        "page": f"{ctx['name']}.html",
        "profile": ctx["profile"],
        "seed": ctx["seed"],
        "generated": ctx["generated"],
        "truth": ctx["truth"]["source"] if ctx["truth"] else None,
        "family": ctx["family"],
        "against": ctx["against"],
        "parameters": ctx["posterior_total"],
        "applicable": ctx["applicable"],
        "engines": {r["engine"]: {k: r.get(k) for k in RUN_COLUMNS} for r in ctx["runs"]},
    }


def render_model_page(cmp: Comparison, *, generated: str | None = None) -> dict[str, str]:
    """A model's page and the files beside it: ``{filename: text}`` for ``NAME.html``,
    ``NAME.md``, ``NAME.json`` (every number, diagnostics, findings) and ``NAME.csv`` (the
    comparison table). Also returns the index line under the key ``"summary"`` as JSON."""
    ctx = model_context(cmp, generated=generated)
    name = ctx["name"]
    return {
        f"{name}.html": render("model.html.j2", **ctx),
        f"{name}.md": render("model.md.j2", **ctx),
        f"{name}.json": dumps(model_json(cmp, ctx)),
        f"{name}.csv": to_csv(flat_table(cmp.table_wide)),
        "summary": dumps(model_summary(ctx)),
    }


# --------------------------------------------------------------------------- the index
def index_engines(models: Sequence[Mapping[str, Any]]) -> list[str]:
    """Every engine run or applicable, in the models' order."""
    seen: list[str] = []
    for m in models:
        for e in [*m.get("applicable", ()), *m["engines"]]:
            if e not in seen:
                seen.append(e)
    return seen


def index_column(engine: str) -> str:
    """The index column of an engine: a generic engine's own; a variant's (``svi_meanfield``)
    its base engine's; every other (the model's own algorithms) :data:`REFERENCE_COLUMN`."""
    if engine in GENERIC_ENGINES:
        return engine
    base = engine.split("_", 1)[0]
    return base if base in GENERIC_ENGINES else REFERENCE_COLUMN


def index_columns(models: Sequence[Mapping[str, Any]]) -> list[str]:
    """The index's columns: the generic engines any model runs or could run, in their
    declared order, then one column for the models' own reference algorithms."""
    used = {index_column(e) for e in index_engines(models)}
    cols = [e for e in GENERIC_ENGINES if e in used]
    return cols + ([REFERENCE_COLUMN] if REFERENCE_COLUMN in used else [])


def _why_short(c: Mapping[str, Any]) -> str:
    """An unreliable cell's reasons as numbers, short enough for an index cell."""
    out = []
    for flag in c.get("flags") or ():
        if flag == "r_hat" and _finite(c.get("max_r_hat")):
            out.append(f"R\u0302 {float(c['max_r_hat']):.2f}")
        elif flag == "ess" and _finite(c.get("min_ess_bulk")):
            out.append(f"ESS {float(c['min_ess_bulk']):.0f}")
        elif flag == "divergences" and _finite(c.get("divergences")):
            out.append(f"{int(c['divergences'])} div.")
        elif flag in ("pareto_k", "caveat") and _finite(c.get("pareto_k")):
            out.append(f"k\u0302 {float(c['pareto_k']):.2f}")
        elif flag == "elbo":
            out.append("ELBO rising")
        elif flag == "ess":
            out.append(f"ESS < {MIN_ESS:.0f}")
    return " \u00b7 ".join(dict.fromkeys(out)) or "see the page"


def index_entry(engine: str, column: str, cell: Mapping[str, Any] | None) -> dict[str, Any]:
    """One engine's entry in an index cell: its colour class, status and what to show."""
    if cell is not None:  # an earlier report's line may lack the newer columns
        cell = {**dict.fromkeys(RUN_COLUMNS), **cell}
    entry: dict[str, Any] = {
        "engine": engine,
        "label": engine if engine != column else "",
        "cell": cell,
        "status": None if cell is None else cell.get("status"),
    }
    if cell is None:
        entry.update(cls="na", why="")
    elif cell.get("status") == "failed":
        entry.update(cls="bad", why=str(cell.get("explanation") or cell.get("error") or ""))
    elif cell.get("status") == "unreliable":
        entry.update(cls="bad" if cell.get("accuracy") == "bad" else "warn", why=_why_short(cell))
    else:
        entry.update(cls=cell.get("accuracy") or "plain", why="")
    return entry


def index_rows(models: Sequence[Mapping[str, Any]], columns: Sequence[str]) -> list[list[Any]]:
    """Per model, per column, the entries of its engines (applicable order, then the rest)."""
    rows = []
    for m in models:
        per: dict[str, list[dict[str, Any]]] = {c: [] for c in columns}
        for e in dict.fromkeys([*m.get("applicable", ()), *m["engines"]]):
            per[index_column(e)].append(index_entry(e, index_column(e), m["engines"].get(e)))
        rows.append([per[c] for c in columns])
    return rows


def families(models: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The models' families (the module that registered them) with their counts, by name."""
    counts: dict[str, int] = {}
    for m in models:
        f = m.get("family") or "other"
        counts[f] = counts.get(f, 0) + 1
    return [{"name": f, "count": counts[f]} for f in sorted(counts)]


def render_index(
    models: Sequence[Mapping[str, Any]],
    *,
    profile: str = "quick",
    seed: int = 0,
    generated: str | None = None,
) -> dict[str, str]:
    """The zoo index: ``index.html``, ``index.md``, ``results.json`` and ``results.csv`` from
    the models' summaries (:func:`model_summary`)."""
    defaults: dict[str, Any] = {"description": "", "seed_ref": "", "truth": None, "family": None}
    defaults.update(against=None, applicable=[], profile=profile, seed=seed, generated="")
    models = sorted(({**defaults, **m} for m in models), key=lambda m: m["name"])
    columns = index_columns(models)
    summary = [f.to_dict() for f in zoo_findings(models, list(GENERIC_ENGINES))]
    ctx = {
        "models": models,
        "columns": columns,
        "rows": index_rows(models, columns),
        "engines": index_engines(models),
        "ran": [e for e in index_engines(models) if any(e in m["engines"] for m in models)],
        "families": families(models),
        "summary": summary,
        # the generic engines (the matrix's columns) and the zoo-wide lines lead; the models'
        # own algorithms and the engine variants (a model or two each) follow, folded in HTML
        "summary_lead": [f for f in summary if f["engine"] in (None, *GENERIC_ENGINES)],
        "summary_more": [f for f in summary if f["engine"] not in (None, *GENERIC_ENGINES)],
        "thresholds": THRESHOLDS,
        "profile": profile,
        "seed": seed,
        "generated": generated or now_utc(),
        "versions": versions(),
        "error_good": ERROR_GOOD,
        "error_bad": ERROR_BAD,
    }
    results = {
        "profile": profile,
        "seed": seed,
        "generated": ctx["generated"],
        "versions": ctx["versions"],
        "summary": ctx["summary"],
        "thresholds": THRESHOLDS,
        "models": {m["name"]: m for m in models},
    }
    lines = [
        {
            "model": m["name"],
            "engine": e,
            **{k: cell.get(k) for k in RUN_COLUMNS},
            "flags": ";".join(cell.get("flags") or ()),
        }
        for m in models
        for e, cell in m["engines"].items()
    ]
    frame = pd.DataFrame(lines, columns=["model", "engine", *RUN_COLUMNS])
    return {
        "index.html": render("index.html.j2", **ctx),
        "index.md": render("index.md.j2", **ctx),
        "results.json": dumps(results),
        "results.csv": to_csv(frame),
    }


__all__ = [
    "dumps",
    "environment",
    "fmt_num",
    "model_context",
    "model_summary",
    "render_index",
    "render_model_page",
    "row_site",
]
