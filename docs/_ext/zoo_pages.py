"""Sphinx extension: the pages written from the code and its results when the build starts.

- ``gallery/``: one page per registered model, from the registry (its generative story drawn by
  the report's mathtext, its graph by ``pyro.render_model``, its source, data, ground truth and
  engines) and from a quick report (``ZOO_DOCS_REPORT``, the folder ``zoo report`` wrote): the
  report's own tables (its Markdown page's sections) and figures (its HTML page's images).
- ``benchmarks/``: one page per file the benchmark scripts write under ``benchmarks/results/``.

Both folders are build outputs (not committed); a file is rewritten only when its text changes,
so Sphinx rereads only the pages that changed. The report's HTML pages are copied beside the
site (``_build/html/report/``), where the gallery links to them.
"""

from __future__ import annotations

import ast
import base64
import inspect
import json
import os
import re
import shutil
import textwrap
import warnings
from collections.abc import Iterable
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

from sphinx.application import Sphinx
from sphinx.errors import ExtensionError

REPORT_ENV = "ZOO_DOCS_REPORT"
ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "benchmarks" / "results"
MAX_TRUTH_ROWS = 20  # the gallery lists the first rows of a ground truth; the report has them all
REPORT_SECTIONS = ("Findings", "Engines", "Posterior", "Predictive accuracy: LOO and WAIC")


# --------------------------------------------------------------------------- small helpers
def write_if_changed(path: Path, content: str | bytes) -> None:
    """Write ``path`` unless it already holds ``content`` (Sphinx rereads changed files only)."""
    data = content.encode() if isinstance(content, str) else content
    if path.is_file() and path.read_bytes() == data:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)


def md_escape(text: str) -> str:
    """Plain text as Markdown that renders it as it is (CommonMark escapes ASCII punctuation)."""
    return re.sub(r"([\\`*_\[\]<>|#$~{}])", r"\\\1", " ".join(str(text).split()))


def fence(code: str, lang: str = "") -> str:
    """A fenced code block long enough for any backticks inside ``code``."""
    ticks = "`" * max(3, 1 + max((len(m) for m in re.findall(r"`+", code)), default=0))
    return f"{ticks}{lang}\n{code.rstrip()}\n{ticks}\n"


def strip_links(markdown: str) -> str:
    """Markdown links to files outside the site as their text; a report page's links to its own
    HTML page (``NAME.html``) point at the copy beside the site (``report/``)."""
    markdown = re.sub(
        r"\[([^\]]*)\]\(([\w.-]+\.html)\)", r'<a href="../report/\2">\1</a>', markdown
    )
    return re.sub(r"\[([^\]]*)\]\((?!https?:)[^)]*\)", r"\1", markdown)


def shift_headings(markdown: str, by: int) -> str:
    return re.sub(r"^(#+) ", lambda m: "#" * (len(m.group(1)) + by) + " ", markdown, flags=re.M)


# --------------------------------------------------------------------------- the report
class _Figures(HTMLParser):
    """The ``<figure>`` elements of a report page: (PNG bytes, title, caption) each."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.figures: list[tuple[bytes, str, str]] = []
        self._img: tuple[bytes, str] | None = None
        self._caption: list[str] = []
        self._in_figure = self._in_caption = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag == "figure":
            self._in_figure, self._img, self._caption = True, None, []
        elif tag == "img" and self._in_figure:
            src = a.get("src") or ""
            if src.startswith("data:image/png;base64,"):
                self._img = (base64.b64decode(src.split(",", 1)[1]), a.get("alt") or "")
        elif tag == "figcaption" and self._in_figure:
            self._in_caption = True

    def handle_data(self, data: str) -> None:
        if self._in_caption:
            self._caption.append(data)

    def handle_endtag(self, tag: str) -> None:
        if tag == "figcaption":
            self._in_caption = False
        elif tag == "figure" and self._in_figure:
            if self._img is not None:
                self.figures.append((*self._img, "".join(self._caption).strip()))
            self._in_figure, self._img = False, None


def report_figures(page: Path) -> list[tuple[bytes, str, str]]:
    parser = _Figures()
    parser.feed(page.read_text(encoding="utf-8"))
    return parser.figures


def report_sections(page: Path) -> str:
    """The report's Markdown page's results sections (its top findings, engine table, posterior
    table, LOO), one heading level down. The engine table's status cells keep their verdict
    (the findings above say why), so the table fits the page."""
    text = page.read_text(encoding="utf-8")
    parts = re.split(r"^## ", text, flags=re.M)
    keep = []
    for part in parts[1:]:
        title = part.split("\n", 1)[0].strip()
        if title == "Findings":
            part = part.split("\n### ", 1)[0]  # the top findings, not every engine's
        elif title == "Engines":
            failed = re.findall(r"^\| (`[^`]+`) \| \*\*failed\*\*: ((?:[^|\\]|\\.)*)", part, re.M)
            part = re.sub(r"(\*\*(?:unreliable|failed)\*\*): (?:[^|\\]|\\.)*", r"\1 ", part)
            why = "".join(f"- {engine} failed: {text.strip()}\n" for engine, text in failed)
            part = part.replace("\nOptions:", f"\n{why}\nOptions:" if why else "\nOptions:", 1)
        if title in REPORT_SECTIONS:
            keep.append("## " + part.rstrip() + "\n\n")
    return shift_headings(strip_links("".join(keep)), 1)


class Report:
    """A folder ``zoo report`` wrote: its ``results.json`` and the pages of its models."""

    def __init__(self, folder: Path) -> None:
        index = folder / "results.json"
        if not index.is_file():
            raise ExtensionError(
                f"{REPORT_ENV}={folder}: no report there (no results.json); run "
                f"`zoo report --profile quick --out {folder}` or `make docs` without REPORT"
            )
        self.folder = folder
        self.results = json.loads(index.read_text(encoding="utf-8"))
        self.models: dict[str, Any] = self.results.get("models", {})

    def has(self, name: str) -> bool:
        return name in self.models and (self.folder / f"{name}.json").is_file()

    def page_json(self, name: str) -> dict[str, Any]:
        return json.loads((self.folder / f"{name}.json").read_text(encoding="utf-8"))


# --------------------------------------------------------------------------- a model's page
def summary(entry: Any) -> str:
    """The docstring's first paragraph on one line (a model's first line may break mid-phrase)."""
    first = inspect.cleandoc(entry.doc or "").split("\n\n")[0]
    return " ".join(first.split()) or entry.name


def source_of(fn: Any, *, elide_doc: bool = False) -> tuple[str, str]:
    """The source of a model function or a bound part (``elide_doc``: its docstring left out,
    where the page shows it already), and its file relative to the project."""
    fn = getattr(fn, "fn", fn)  # a companion: the function as written
    fn = inspect.unwrap(fn)
    path = Path(inspect.getsourcefile(fn) or "")
    try:
        where = str(path.resolve().relative_to(ROOT))
    except ValueError:
        where = path.name
    lines = textwrap.dedent(inspect.getsource(fn)).splitlines()
    tree = ast.parse("\n".join(lines))
    body = tree.body[0].body if tree.body and hasattr(tree.body[0], "body") else []
    if (
        elide_doc
        and body
        and isinstance(body[0], ast.Expr)
        and isinstance(body[0].value, ast.Constant)
    ):
        doc = body[0]
        if isinstance(doc.value.value, str) and doc.end_lineno is not None:
            indent = " " * doc.col_offset
            lines[doc.lineno - 1 : doc.end_lineno] = [f'{indent}"""..."""  # the docstring above']
    return "\n".join(lines) + "\n", where


def graph_svg(entry: Any, data: dict[str, Any]) -> bytes:
    """The model's graphical model by Pyro's own ``render_model`` (Graphviz's ``dot``), traced
    as the zoo traces a model (a prior without a sampler, Stan's flat priors, initialised)."""
    import pyro
    import torch

    from zoo_inference.structure import traceable

    # a fixed seed and no support checks, as trace_model traces: a prior draw (arma11's theta
    # beyond 1, say) can overflow the model's arithmetic, which says nothing about its graph
    with warnings.catch_warnings(), torch.random.fork_rng(), pyro.validation_enabled(False):
        warnings.simplefilter("ignore")
        torch.manual_seed(0)
        graph = pyro.render_model(
            traceable(entry.model),
            model_kwargs=dict(data),
            render_distributions=True,
            render_params=True,
        )
    return graph.pipe(format="svg")


def engines_section(entry: Any) -> str:
    from zoo_inference.engines import GENERIC_ENGINES

    rows = []
    for engine in entry.engines:
        if engine == "exact" and entry.posterior_fn is not None:
            what = "the posterior in closed form (the model's `posterior`)"
        elif engine in entry.references:
            fn = getattr(entry.references[engine], "fn", entry.references[engine])
            doc = inspect.getdoc(fn) or ""
            what = "the model's reference algorithm" + (
                f": {md_escape(doc.split(chr(10) + chr(10))[0])}" if doc else ""
            )
        elif engine in entry.variants:
            base, options, fixed = entry.variants[engine]
            fixes = ", ".join(f"{k}={v!r}" for k, v in {**options, **fixed}.items())
            what = f"`{base}` with {md_escape(fixes) or 'its own options'}"
        elif engine in GENERIC_ENGINES:
            what = "generic engine ({doc}`../guide/engines`)"
        else:
            what = "the model's own engine"
        rows.append(f"| `{engine}` | {what} |")
    out = ["| engine | what it is |", "|---|---|", *rows, ""]
    for engine, why in entry.not_applicable.items():
        out.append(f"- `{engine}` does not apply: {md_escape(why)}")
    return "\n".join(out) + "\n"


def data_section(entry: Any, data: dict[str, Any]) -> str:
    from zoo_reports.extras import data_provenance
    from zoo_reports.render import describe_data

    out = []
    provenance = data_provenance(entry.doc)
    if provenance:
        out.append(md_escape(provenance) + "\n")
    out += ["| key | type | shape | values |", "|---|---|---|---|"]
    for d in describe_data(data):
        values = d["preview"] + (f" ({d['stats']})" if d.get("stats") else "")
        out.append(
            f"| `{d['key']}` | {md_escape(d['type'])} | {md_escape(d['shape'])} | "
            f"{md_escape(values)} |"
        )
    return "\n".join(out) + "\n"


def truth_section(entry: Any, page: dict[str, Any] | None) -> str:
    truth = page.get("truth") if page else None
    if truth:
        out = [f"Source: {md_escape(truth['source'])}."]
        if truth.get("log_evidence") is not None:
            out[0] += f" Log evidence {truth['log_evidence']:.6g}."
        rows = list(truth.get("rows", {}).items())
        if rows:
            out += ["", "| parameter | mean | sd |", "|---|--:|--:|"]
            out += [
                f"| `{r}` | {v['mean']:.4g} | {v['sd']:.4g} |" for r, v in rows[:MAX_TRUTH_ROWS]
            ]
            if len(rows) > MAX_TRUTH_ROWS:
                out += ["", f"The first {MAX_TRUTH_ROWS} of {len(rows)} rows (the report has all)."]
        return "\n".join(out) + "\n"
    if entry.posterior_fn is not None:
        return "The posterior in closed form (the model's `posterior`: the `exact` engine).\n"
    if entry.ground_truth_fn is not None:
        return "Computed by the model's `truth` function (quadrature or brute force).\n"
    return "None known: the report compares the engines with each other.\n"


def model_page(name: str, out: Path, report: Report | None) -> str:
    """The gallery page of one model (writes its images under ``out/img/NAME``)."""
    import zoo
    from zoo_reports.extras import render_math

    entry = zoo.get_model(name)
    data = dict(entry.load_data())
    img = out / "img" / name
    lines = [f"(gallery-{name})=", f"# `{name}`", ""]
    lines += [md_escape(summary(entry)), ""]
    facts = [f"**Family:** {md_escape(entry.info().family)}"]
    if entry.seed_ref:
        facts.append(f"**Source:** {md_escape(entry.seed_ref)}")
    tags = zoo.model_tags(name)
    if tags is not None:
        facts.append(f"**Measured tags** ({{doc}}`tags`): {md_escape(str(tags))}")
    lines += [" · ".join(facts), ""]

    lines += ["## Generative story", ""]
    if entry.math:
        for i, latex in enumerate(entry.math):
            try:
                drawn = render_math(latex)
            except ValueError:
                lines += [fence(latex, "latex")]
                continue
            write_if_changed(img / f"math-{i}.png", base64.b64decode(drawn["png"]))
            lines += [
                f"```{{image}} img/{name}/math-{i}.png",
                f":alt: {' '.join(latex.split())}",
                f":width: {drawn['width']}px",
                ":class: story-line",
                "```",
                "",
            ]
    if entry.doc:
        lines += [fence(inspect.cleandoc(entry.doc), "text")]

    lines += ["## Graphical model", ""]
    write_if_changed(img / "graph.svg", graph_svg(entry, data))
    lines += [
        f"```{{figure}} img/{name}/graph.svg",
        f":alt: the graphical model of {name}",
        "",
        f"`pyro.render_model` of `{name}` on its data: observed sites shaded, plates as boxes.",
        "```",
        "",
    ]

    lines += ["## Source", ""]
    code, where = source_of(entry.model, elide_doc=bool(entry.doc))
    lines += [f"The model, in `{where}`:", "", fence(code, "python")]
    if entry.guide is not None:
        code, where = source_of(entry.guide)
        lines += [f"Its guide, in `{where}`:", "", fence(code, "python")]

    lines += ["## Data", "", data_section(entry, data)]

    page = report.page_json(name) if report is not None and report.has(name) else None
    lines += ["## Ground truth", "", truth_section(entry, page)]
    lines += ["## Engines that apply", "", engines_section(entry)]

    lines += ["## Results of a quick report", ""]
    if page is None and entry.opt_in:
        lines += [
            "This model is opt-in (heavy to run everywhere), so the whole-zoo report that "
            "`make docs` runs leaves it out; `zoo report "
            f"{name} --profile quick` runs it, and `make docs REPORT=<that folder>` shows it "
            "here.",
            "",
        ]
    elif page is None:
        lines += [
            "This build was given no report of this model (`make docs` runs one; see "
            "{doc}`../guide/install`).",
            "",
        ]
    else:
        assert report is not None
        lines += [
            f"Profile `{page['profile']}`, seed {page['seed']}: the report's own tables and "
            "figures. "
            f'<a href="../report/{name}.html">The report\'s page</a> has every figure and '
            f"number, and how to reproduce them.",
            "",
            report_sections(report.folder / f"{name}.md"),
            "",
            "### Figures",
            "",
        ]
        for i, (png, title, caption) in enumerate(report_figures(report.folder / f"{name}.html")):
            write_if_changed(img / f"report-{i}.png", png)
            lines += [
                f"```{{figure}} img/{name}/report-{i}.png",
                f":alt: {' '.join(title.split())}",
                "",
                md_escape(caption or title),
                "```",
                "",
            ]
        reproduce = page.get("reproduce", {})
        if reproduce.get("python"):
            lines += ["### Reproduce", "", fence(reproduce["python"], "python")]
    return "\n".join(lines).rstrip() + "\n"


def gallery_index(names: Iterable[str], report: Report | None) -> str:
    import zoo

    by_family: dict[str, list[str]] = {}
    for name in names:
        by_family.setdefault(zoo.get_model(name).info().family, []).append(name)
    lines = [
        "# Gallery",
        "",
        "One page per registered model, written from the registry when the site is built: the "
        "generative story, the graphical model drawn by `pyro.render_model`, the source, the "
        "data, the ground truth, the engines that apply, and the tables and figures of a quick "
        "report: `make docs` runs one, or shows the one `make docs REPORT=FOLDER` names "
        "({doc}`../guide/install`).",
        "",
        "The models' measured tags (funnel, multimodal, heavy tails, divergences under "
        "default nuts, ...) are on {doc}`tags`.",
        "",
        "```{toctree}",
        ":hidden:",
        "",
        "tags",
        *sorted(names),
        "```",
        "",
    ]
    for family in sorted(by_family):
        lines += [
            f"## {md_escape(family.replace('_', ' ').capitalize())}",
            "",
            "| model | what it is | engines |",
            "|---|---|---|",
        ]
        for name in by_family[family]:
            entry = zoo.get_model(name)
            lines.append(
                f"| {{doc}}`{name}` | {md_escape(summary(entry))} | "
                + ", ".join(f"`{e}`" for e in entry.engines)
                + " |"
            )
        lines.append("")
    return "\n".join(lines)


def tags_page(names: Iterable[str]) -> str:
    """The measured tags of every model (zoo/tags.json, by benchmarks/model_tags.py), a row
    each: the figures, then the labels their thresholds give."""
    import zoo
    from zoo.tags import measured, r_hat
    from zoo_inference import tags as t

    meta = measured()
    lines = [
        "# Measured tags",
        "",
        "What each model's posterior is like to sample, measured by `benchmarks/model_tags.py` "
        f"(seed {meta.get('seed', 0)}, {meta.get('measured', '-')}, torch "
        f"{meta.get('versions', {}).get('torch', '-')}), never typed in; "
        "`zoo.model_tags(name)` and `zoo list --tag TAG` read the same file. The columns:",
        "",
        "- *dim*: unconstrained continuous coordinates; the tags *discrete* (discrete latent "
        "sites) and *ode* (one evaluation of the log density calls an ODE solver, profiled);",
        "- *scale ratio*: how far one coordinate sets another's spread over default nuts's "
        "draws (the widest conditional sd across its range over the narrowest; 1 for a "
        f"Gaussian): *funnel* from {t.FUNNEL} (Neal's funnel, a centred hierarchy, a strongly "
        "curved banana);",
        "- *optima*: distinct optima L-BFGS reaches from "
        f"{t.STARTS} dispersed starts (none: it found none, as at a funnel's unbounded neck): "
        "*multimodal* from 2;",
        f"- *kurtosis*: the largest excess kurtosis of a coordinate: *heavy tails* from "
        f"{t.HEAVY_TAILS};",
        "- *div. / R-hat*: default nuts at seed 0: its divergences and largest R-hat (*r-hat* "
        "above 1.01), or why it did not run.",
        "",
        ":::{container} tags-table",
        "| model | dim | scale ratio | optima | kurtosis | div. / R-hat | tags |",
        "|---|---:|---:|---:|---:|---|---|",
    ]

    def num(x: Any, fmt: str = "{:.2f}") -> str:
        return "-" if x is None else fmt.format(x)

    for name in names:
        tags = zoo.model_tags(name)
        if tags is None:
            lines.append(f"| {{doc}}`{name}` | not measured |  |  |  |  |  |")
            continue
        f = tags.figures
        nuts = f.get("nuts") or {}
        if nuts.get("max_r_hat") is not None:
            ran = f"{nuts.get('divergences', 0)} / {r_hat(nuts['max_r_hat'])}"
        else:
            ran = md_escape(str(nuts.get("status") or f.get("error") or "-"))
        measured_draws = f.get("scale_ratio") is not None  # the optima were looked for
        optima = num(f.get("modes"), "{}") if f.get("modes") or not measured_draws else "none"
        lines.append(
            f"| {{doc}}`{name}` | {num(f.get('dimension'), '{}')} | "
            f"{num(f.get('scale_ratio'))} | {optima} | "
            f"{num(f.get('excess_kurtosis'))} | {ran} | {', '.join(tags.labels)} |"
        )
    return "\n".join([*lines, ":::"]) + "\n"


def write_gallery(out: Path, report: Report | None) -> None:
    import zoo

    names = zoo.list_models()
    for name in names:
        write_if_changed(out / f"{name}.md", model_page(name, out, report))
    write_if_changed(out / "index.md", gallery_index(names, report))
    write_if_changed(out / "tags.md", tags_page(names))
    for stale in out.glob("*.md"):
        if stale.stem not in ("index", "tags") and stale.stem not in names:
            stale.unlink()


# --------------------------------------------------------------------------- benchmarks
def write_benchmarks(out: Path) -> None:
    """A page per ``benchmarks/results/*.md``, as the script wrote it (links to files outside
    the site as plain text), and an index."""
    files = sorted(RESULTS.glob("*.md"))
    pages = []
    for f in files:
        text = strip_links(f.read_text(encoding="utf-8"))
        if not text.lstrip().startswith("# "):
            text = f"# {f.stem.replace('_', ' ').capitalize()}\n\n{text}"
        write_if_changed(out / f.name, text)
        title = text.lstrip().split("\n", 1)[0][2:].strip()
        pages.append((f.stem, title))
    lines = [
        "# Benchmarks",
        "",
        "Each page is a file a benchmark script writes under `benchmarks/results/`, shown as it "
        "is; the file names the script and the command that wrote it. Timings depend on the "
        "machine and its load: compare within one page only.",
        "",
        "```{toctree}",
        ":maxdepth: 1",
        "",
        *(f"{title} ({stem}) <{stem}>" for stem, title in pages),
        "```",
        "",
    ]
    write_if_changed(out / "index.md", "\n".join(lines))
    names = {f.name for f in files} | {"index.md"}
    for stale in out.glob("*.md"):
        if stale.name not in names:
            stale.unlink()


# --------------------------------------------------------------------------- Sphinx hooks
def report_folder(app: Sphinx) -> Path | None:
    given = app.config.zoo_report
    return Path(given).resolve() if given else None


def generate(app: Sphinx) -> None:
    folder = report_folder(app)
    report = Report(folder) if folder is not None else None
    src = Path(app.srcdir)
    write_gallery(src / "gallery", report)
    write_benchmarks(src / "benchmarks")


def copy_report(app: Sphinx, exception: Exception | None) -> None:
    """The report's HTML pages (figures embedded) beside the site, where the gallery links."""
    folder = report_folder(app)
    if exception is not None or folder is None or app.builder.format != "html":
        return
    dest = Path(app.outdir) / "report"
    dest.mkdir(parents=True, exist_ok=True)
    for page in folder.glob("*.html"):
        shutil.copy2(page, dest / page.name)


def setup(app: Sphinx) -> dict[str, Any]:
    app.add_config_value("zoo_report", os.environ.get(REPORT_ENV) or None, "env")
    app.connect("builder-inited", generate)
    app.connect("build-finished", copy_report)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
