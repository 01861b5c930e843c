"""Command line: ``zoo list | info | run | compare | report``.

Errors print one line on stderr and exit with status 2 (bad input) or 1 (a run failed); ``zoo
run`` ends with the run's status on stderr (``status: ok``, or ``status: unreliable: `` and the
reasons, exit status 0). Ctrl-C prints ``zoo: interrupted`` and exits with 130. torch and the
engines are imported inside the commands, so ``zoo --help`` answers at once.
"""

from __future__ import annotations

import argparse
import ast
import os
import sys
import tempfile
import textwrap
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NoReturn

PROFILES_HELP = (
    "quick (default: minutes for the whole zoo), full (publication numbers: long runs, 32 chains) "
    "or smoke (tiny runs that check every page renders)"
)


class UsageError(ValueError):
    """A wrong command line (exit status 2)."""


class _Parser(argparse.ArgumentParser):
    """argparse whose errors are a :class:`UsageError` (one line on stderr from :func:`main`,
    exit status 2) instead of a usage block and ``SystemExit``; its subparsers are the same."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{message} (see `{self.prog} --help`)")


def _parse_options(items: Sequence[str]) -> dict[str, Any]:
    """``KEY=VALUE`` pairs; values are Python literals when they parse (``3``, ``0.1``,
    ``(0.4, 0.6, 0.7)``, ``True``), strings otherwise. ``ENGINE.KEY=VALUE`` gives an option to
    one engine only (returned as ``{ENGINE: {KEY: VALUE}}``)."""
    out: dict[str, Any] = {}
    for item in items:
        key, sep, raw = item.partition("=")
        engine, dot, name = key.rpartition(".")
        if not sep or not name.isidentifier() or (dot and not engine.isidentifier()):
            raise UsageError(f"options are KEY=VALUE or ENGINE.KEY=VALUE, got {item!r}")
        try:
            value = ast.literal_eval(raw)
        except (ValueError, SyntaxError):
            value = raw
        if dot:
            out.setdefault(engine, {})[name] = value
        else:
            out[name] = value
    return out


def _engines(text: str | None) -> list[str] | None:
    if text is None:
        return None
    names = [e.strip() for e in text.split(",") if e.strip()]
    if not names:
        raise UsageError("--engines is empty: name at least one engine (or leave it out for all)")
    return names


def _progress(args: argparse.Namespace) -> bool:
    """Bars only on a terminal: a log file or a pipe is not flooded."""
    return not args.quiet and sys.stderr.isatty()


def load_models(sources: Sequence[str]) -> None:
    """Import Python files or modules that register models (``--models my_models.py``)."""
    import zoo

    try:
        zoo.load_models(*sources)
    except zoo.ZooError as e:
        message = str(e)
        raise UsageError(f"--{message}" if message.startswith("models ") else message) from None


def cmd_list(args: argparse.Namespace) -> int:
    import zoo

    try:
        names = zoo.list_models(suite=args.suite, tag=args.tag)
    except zoo.ZooError as e:
        raise UsageError(str(e)) from None
    for name in names:
        entry = zoo.get_model(name)
        head = f"{name:<28} "
        print(head + _cut(entry.description, WIDTH - len(head)))
        print(_fitted(" " * len(head), "engines: " + ", ".join(entry.engines)))
    return 0


def _cut(text: str, width: int) -> str:
    """``text`` in at most ``width`` characters: whole when it fits, else up to its last sentence
    end that fits, else its last word that fits and an ellipsis."""
    text = " ".join(text.split())
    if len(text) <= width:
        return text
    head = text[:width]
    end = head.rfind(". ")
    if end > width // 3:
        return head[: end + 1]
    return head[: width - 1].rsplit(" ", 1)[0].rstrip(",;:") + "\u2026"


def cmd_info(args: argparse.Namespace) -> int:
    import zoo
    from zoo_inference import GENERIC_ENGINES

    entry = zoo.get_model(args.name)
    print(f"{entry.name}  (seed {entry.seed_ref or '-'})\n")
    if entry.doc.strip():
        print(entry.doc.strip(), "\n")
    data = entry.load_data()
    print("default data:")
    for key, value in data.items():
        shape = tuple(value.shape) if hasattr(value, "shape") else type(value).__name__
        print(f"  {key}: {shape}")
    s = entry.structure
    print(f"latent sites: continuous {list(s.continuous)}, discrete {list(s.discrete)}")
    if s.deterministic:
        print(f"deterministic sites: {list(s.deterministic)}")
    print("engines and their options (defaults):")
    for eng in entry.engines:
        spec = entry.engine_spec(eng)
        opts = {**spec.defaults, **entry.registered_options(eng)}
        shown = ", ".join(f"{k}={v!r}" for k, v in opts.items())
        pad = " " * 13  # options under the summary, wrapped at a comma to fit 120 columns
        wrapped = textwrap.fill(shown, 120, initial_indent=pad, subsequent_indent=pad)
        print(f"  {eng:<10} {spec.summary}\n{wrapped or pad + '(no options)'}")
    why_not: dict[str, list[str]] = {}  # reason -> the generic engines it rules out
    for eng, spec in GENERIC_ENGINES.items():
        if eng not in entry.engines and not spec.opt_in:
            why_not.setdefault(str(entry.why_not(eng)), []).append(eng)
    if why_not:
        print("generic engines that do not apply:")
        for reason, engines in why_not.items():
            print(f"  {', '.join(engines)}: {reason}")
    labels = {"not_mixing": "does not mix", "fails": "fails", "approximate": "biased"}
    shown_known = {e: w for e, w in entry.known.items() if w.kind in labels}  # not test costs
    if shown_known:
        print("known of these engines here:")
        for eng, what in shown_known.items():
            line = f"{eng} {labels[what.kind]}: {what.reason}"
            print(textwrap.fill(line, 120, initial_indent="  ", subsequent_indent="    "))
    truth = entry.ground_truth(data)
    print(f"ground truth: {truth.source if truth else 'none (long NUTS is the reference)'}")
    tags = zoo.model_tags(entry.name)
    shown = str(tags) if tags else "not measured (zoo.model_tags(name, measure=True))"
    print(textwrap.fill(f"measured tags: {shown}", 120, subsequent_indent="  "))
    return 0


def _write_run(run: Any, out: Path) -> None:
    """InferenceData (netCDF), summary CSV and diagnostics JSON, written atomically."""
    from zoo.files import locked, write_atomically
    from zoo_inference.serialize import dumps, run_record

    files: dict[str, str | bytes] = {
        "summary.csv": run.summary.to_csv(),
        "diagnostics.json": dumps(run_record(run)),
    }
    if run.idata is not None:
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "idata.nc"
            run.idata.to_netcdf(str(path))
            files["idata.nc"] = path.read_bytes()
    with locked(out):
        write_atomically(out, files)


def cmd_run(args: argparse.Namespace) -> int:
    from zoo.api import execute, prepare
    from zoo.files import check_writable
    from zoo_inference.serialize import dumps

    options = _parse_options(args.option)
    if any(isinstance(v, dict) for v in options.values()):
        raise UsageError("zoo run takes KEY=VALUE options for its one engine (no ENGINE.KEY)")
    prepared = prepare(args.name, args.engine, seed=args.seed, progress=_progress(args), **options)
    made = bool(args.out) and not Path(args.out).exists()
    out = check_writable(args.out) if args.out else None
    run = execute(prepared)
    if not run.ok:
        if made and out is not None and not any(out.iterdir()):
            out.rmdir()  # a failed run leaves no folder behind
        print(f"zoo: {args.name}/{args.engine} failed: {run.error}", file=sys.stderr)
        return 1
    cols = [c for c in ("mean", "sd", "hdi_3%", "hdi_97%", "r_hat", "ess_bulk") if c in run.summary]
    print(run.summary[cols].head(30).to_string(float_format=lambda v: f"{v:.6g}"))
    if len(run.summary) > 30:
        print(f"... {len(run.summary) - 30} more rows")
    if run.evidence is not None:
        print(f"{run.evidence.describe()}: {run.evidence.value:.6f}")
    shown = {k: v for k, v in run.diagnostics.items() if not isinstance(v, list | dict)}
    print(dumps(shown), end="")
    if out is not None:
        _write_run(run, out)
        print(f"wrote {out}/idata.nc, summary.csv, diagnostics.json")
    # the run's one verdict, last: ok, or unreliable with the reasons (exit status 0 either way)
    verdict = "ok" if run.status == "ok" else f"{run.status}: {run.caveat}"
    print(f"status: {verdict}", file=sys.stderr)
    return 0


WIDTH = 120  # the columns every line of zoo compare and zoo list fits in


def _fitted(head: str, text: str) -> str:
    """``head`` then ``text``, wrapped at word breaks to :data:`WIDTH` columns, the lines after
    the first indented under ``text``."""
    import textwrap

    return textwrap.fill(
        text,
        WIDTH,
        initial_indent=head,
        subsequent_indent=" " * len(head),
        break_long_words=False,
        break_on_hyphens=False,
    )


def cmd_compare(args: argparse.Namespace) -> int:
    import zoo
    from zoo.files import check_writable

    out = check_writable(args.out) if args.out else None
    cmp = zoo.compare(
        args.name,
        _engines(args.engines),
        seed=args.seed,
        progress=_progress(args),
        **_parse_options(args.option),
    )
    if cmp.truth is not None and cmp.truth.mean:
        print(f"against the ground truth ({cmp.truth.source})")
    elif cmp.reference is not None:
        print(
            _fitted(
                "",
                f"no ground truth: against {cmp.reference}'s draws (the converged MCMC run with "
                "most effective draws, as the report's page)",
            )
        )
    else:
        print("no ground truth and no converged MCMC run to compare against")
    print(cmp.table.to_string(float_format=lambda v: f"{v:.4g}"))
    print()
    width = max(10, *(len(e) for e in cmp.runs))
    for eng, run in cmp.runs.items():
        status = {"ok": "ok", "unreliable": f"UNRELIABLE: {run.caveat}"}.get(
            run.status, f"FAILED: {run.error}"
        )
        ev = "" if run.evidence is None else f"  {run.evidence.describe()} {run.log_evidence:.6f}"
        print(_fitted(f"{eng:<{width}} {run.diagnostics['wall_time_s']:8.2f} s  ", status + ev))
    if cmp.truth is not None and cmp.truth.log_evidence is not None:
        print(f"{'truth':<{width}} exact log evidence {cmp.truth.log_evidence:.6f}")
    if out is not None:
        _write_comparison(cmp, out)
        print(f"wrote {out}/table.csv, table_wide.csv, runs.json")
    return 0 if all(r.ok for r in cmp.runs.values()) else 1


def _write_comparison(cmp: Any, out: Path) -> None:
    """The long and wide tables (CSV) and every run's record (JSON), written atomically."""
    from zoo.files import locked, write_atomically
    from zoo_inference.serialize import dumps, run_record

    files: dict[str, str | bytes] = {
        "table.csv": cmp.table.to_csv(),
        "table_wide.csv": cmp.table_wide.to_csv(),
        "runs.json": dumps({e: run_record(r) for e, r in cmp.runs.items()}),
    }
    with locked(out):
        write_atomically(out, files)


def cmd_report(args: argparse.Namespace) -> int:
    import zoo

    names = list(args.names)
    if args.suite is not None:
        try:
            names += [n for n in zoo.list_models(suite=args.suite) if n not in names]
        except zoo.ZooError as e:
            raise UsageError(str(e)) from None
        if not names:
            raise UsageError(f"suite {args.suite!r} has no models")
    path = zoo.report(
        names or None,
        out=args.out,
        profile=args.profile,
        seed=args.seed,
        progress=_progress(args) or (False if args.quiet else "lines"),  # a log: a line a cell
        engines=_engines(args.engines),
        options=_parse_options(args.option),
        workers=args.workers,
        scheduler=args.scheduler,
        fresh=args.fresh or None,
    )
    print(f"report written to {path}")
    return 0


def cmd_bench(args: argparse.Namespace) -> int:
    import zoo

    suite: str | list[str] = list(args.names) if args.names else args.suite
    seeds = [int(s) for s in args.seeds.split(",") if s.strip()] if args.seeds else [args.seed]
    board = zoo.benchmark(
        _engines(args.engines) or ["nuts", "chees", "mams"],
        suite,
        seeds=seeds,
        size=args.size,
        out=args.out,
        workers=args.workers,
        scheduler=args.scheduler,
        fresh=args.fresh,
        progress=_progress(args) or (False if args.quiet else "lines"),
    )
    if not args.quiet:
        print(board.ranking.to_string(index=False))
    print(f"leaderboard written to {board.out}/index.html")
    return 0


def cmd_sbc(args: argparse.Namespace) -> int:
    from zoo.calibrate import sbc, sbc_models
    from zoo.files import check_writable
    from zoo.registry import get_model
    from zoo_inference import ZooError

    every = not args.names
    plan = sbc_models(args.names or None, _engines(args.engine) or [])
    out = check_writable(args.out) if args.out else None
    progress = _progress(args) or (False if args.quiet else "lines")
    options = _parse_options(args.option)
    shared = {k: v for k, v in options.items() if not isinstance(v, dict)}
    status = 0
    for name, engine in plan:
        takes = get_model(name).engine_spec(engine).defaults
        mine = shared if len(plan) == 1 else {k: v for k, v in shared.items() if k in takes}
        try:
            result = sbc(
                name,
                engine,
                reps=args.reps,
                seed=args.seed,
                draws=args.draws,
                alpha=args.alpha,
                workers=args.workers,
                scheduler=args.scheduler,
                progress=progress,
                out=out,
                batch=False if args.one_by_one else None,
                **{**mine, **options.get(engine, {})},
            )
        except ZooError as e:
            if not every:
                raise
            print(f"{name}/{engine}: skipped: {e}", file=sys.stderr)
            continue
        print("\n".join(result.findings()))
        cols = ["p_value", "rank_mean", "rank_sd", "shape"]
        table = result.table.sort_values("p_value")[cols].head(10)
        print(table.to_string(float_format=lambda v: f"{v:.3g}"), end="\n\n")
        status = max(status, int(result.verdict == "failed"))
    if out is not None:
        print(f"SBC pages written to {out}/sbc.html")
    return status


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("pyro-zoo")
    except PackageNotFoundError:
        return "unknown"


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="zoo", description="A model zoo on Pyro: run and compare inference engines.")
    p.add_argument("--version", action="version", version=f"zoo {_version()}")
    sub = p.add_subparsers(dest="command", required=True)

    def models_arg(sp: argparse.ArgumentParser) -> None:
        sp.add_argument(
            "--models",
            action="append",
            default=[],
            metavar="FILE_OR_MODULE",
            help="a Python file or module that registers models or engines (repeatable)",
        )

    def common(sp: argparse.ArgumentParser) -> None:
        sp.add_argument(
            "--seed",
            type=int,
            default=0,
            help="the random seed: the same seed, the same numbers (0)",
        )
        sp.add_argument("-q", "--quiet", action="store_true", help="no progress bars")
        models_arg(sp)

    def options_arg(sp: argparse.ArgumentParser, help_text: str) -> None:
        sp.add_argument(
            "--option", "-o", action="append", default=[], metavar="KEY=VALUE", help=help_text
        )

    lst = sub.add_parser("list", help="list registered models")
    lst.add_argument(
        "--suite", help="only one suite's: seeds, gym, posteriordb (its reference posteriors), user"
    )
    lst.add_argument(
        "--tag",
        help="only the models measured to carry a tag: discrete, ode, funnel, multimodal, "
        "heavy tails, divergences, r-hat (`zoo info NAME` shows a model's)",
    )
    models_arg(lst)
    lst.set_defaults(fn=cmd_list)
    info = sub.add_parser("info", help="describe a model, its data and engines")
    info.add_argument("name", help="a model (zoo list names them)")
    models_arg(info)
    info.set_defaults(fn=cmd_info)

    run = sub.add_parser("run", help="run one engine on one model")
    run.add_argument("name", help="a model (zoo list names them)")
    run.add_argument(
        "--engine",
        "-e",
        required=True,
        help="an engine that applies to it (zoo info NAME lists them)",
    )
    run.add_argument("--out", help="folder for idata.nc, summary.csv, diagnostics.json")
    options_arg(run, "engine option, e.g. -o num_steps=500 (repeatable)")
    common(run)
    run.set_defaults(fn=cmd_run)

    cmp = sub.add_parser("compare", help="run several engines and tabulate against the truth")
    cmp.add_argument("name", help="a model (zoo list names them)")
    cmp.add_argument("--engines", help="comma-separated (default: every engine that applies)")
    cmp.add_argument("--out", help="folder for table.csv, table_wide.csv and runs.json")
    options_arg(
        cmp, "KEY=VALUE for every engine that takes it, ENGINE.KEY=VALUE for one (repeatable)"
    )
    common(cmp)
    cmp.set_defaults(fn=cmd_compare)

    rep = sub.add_parser(
        "report",
        help="write the HTML/Markdown comparison report",
        description="Run every cell (model x engine) and write the HTML/Markdown report. Each "
        "finished cell is stored in OUT/cells (netCDF + JSON, written atomically), and a report "
        "run again into OUT reads the cells it finished instead of running them: a report that "
        "was killed resumes. A cell runs again when its model, engine, seed, options, data or "
        "the code changed, when its stored files are corrupt (a line says so), or when it "
        "failed; --fresh runs every cell.",
    )
    rep.add_argument("names", nargs="*", help="models (default: all)")
    rep.add_argument(
        "--suite",
        help="every model of one suite, opt-in ones included: seeds, gym, posteriordb, user",
    )
    rep.add_argument("--out", default="zoo-report", help="the report's folder (zoo-report)")
    rep.add_argument("--profile", default="quick", help=PROFILES_HELP)
    rep.add_argument("--engines", help="comma-separated (default: every engine that applies)")
    rep.add_argument(
        "--workers", type=int, default=None, help="worker processes (default: one per core)"
    )
    rep.add_argument(
        "--scheduler",
        metavar="ADDRESS",
        help="a Dask scheduler to run the cells on (tcp://host:8786; dask[distributed])",
    )
    rep.add_argument(
        "--fresh",
        action="store_true",
        help="run every cell, ignoring the cells stored in OUT/cells (and replacing them)",
    )
    options_arg(
        rep,
        "KEY=VALUE for every engine that takes it, ENGINE.KEY=VALUE for one, over the profile "
        "(repeatable)",
    )
    common(rep)
    rep.set_defaults(fn=cmd_report)

    bench = sub.add_parser(
        "bench",
        help="the leaderboard: engines on every target with a known answer",
        description="Measure engines on every target of a suite the same way: gradients to "
        "b^2 < 0.01 of every second moment (the MAMS paper's measure), effective draws per "
        "1,000 gradients, the cold wall time to an ESS target, divergences; medians over seeds. "
        "Writes OUT/index.html (ranking and tables), a page a target, leaderboard.csv and "
        ".json; the cells are stored in OUT/cells and a run again resumes.",
    )
    bench.add_argument("names", nargs="*", help="targets (default: the suite's)")
    bench.add_argument(
        "--suite", default="gym", help="gym (default), posteriordb, seeds or user: its targets"
    )
    bench.add_argument(
        "--engines", "-e", help="comma-separated engines, a user's too (default nuts,chees,mams)"
    )
    bench.add_argument("--seeds", help="comma-separated seeds (default: --seed alone)")
    bench.add_argument(
        "--size", default="quick", help="smoke, quick (default) or full: the budgets of a cell"
    )
    bench.add_argument("--out", default="leaderboard", help="the leaderboard's folder")
    bench.add_argument(
        "--workers", type=int, default=1, help="cells side by side (default 1: honest timings)"
    )
    bench.add_argument("--scheduler", metavar="ADDRESS", help="a Dask scheduler to run cells on")
    bench.add_argument("--fresh", action="store_true", help="run every cell again")
    common(bench)
    bench.set_defaults(fn=cmd_bench)

    cal = sub.add_parser(
        "sbc",
        help="simulation-based calibration of engines",
        description="Simulation-based calibration (Talts et al. 2018): rank each true parameter "
        "drawn from the prior among the engine's posterior draws of data simulated from it; "
        "chi-square test of uniform ranks per parameter, Bonferroni verdict. Exit status 0 "
        "when it ran (calibrated or not: read the verdict), 1 when no replication finished.",
    )
    cal.add_argument(
        "names", nargs="*", help="models (default: every model with continuous parameters)"
    )
    cal.add_argument(
        "--engine", "-e", default="nuts", help="engine, or comma-separated engines (default nuts)"
    )
    cal.add_argument("--reps", type=int, default=100, help="replications (default 100)")
    cal.add_argument(
        "--draws", type=int, default=99, help="posterior draws each truth is ranked among (99)"
    )
    cal.add_argument("--alpha", type=float, default=0.01, help="level of the test (0.01)")
    cal.add_argument("--out", help="folder for the pages (sbc.html, sbc-MODEL-ENGINE.*)")
    cal.add_argument(
        "--workers", type=int, default=None, help="worker processes (default: one per core)"
    )
    cal.add_argument("--scheduler", help="address of a Dask scheduler to run replications on")
    cal.add_argument(
        "--one-by-one",
        action="store_true",
        help="one engine run per replication (default for nuts: the replications run as the "
        "chains of one batched sampler, each chain on its replication's data)",
    )
    options_arg(cal, "engine option KEY=VALUE, or ENGINE.KEY=VALUE for one engine (repeatable)")
    common(cal)
    cal.set_defaults(fn=cmd_sbc)
    return p


def _bars_get_a_size() -> None:
    """tqdm fits its bars to the terminal's size, and a pseudo-terminal opened without one (by
    ``script`` or ``docker exec -t`` from a program, a CI runner) reports 0 columns and 0 lines:
    every bar would be trimmed to nothing, or hidden below the last line. There, bars get 80
    columns and 24 lines (``TQDM_NCOLS``, ``TQDM_NROWS``; tqdm reads them when it is imported,
    which the commands do later)."""
    if not sys.stderr.isatty():
        return
    try:
        size = os.get_terminal_size(sys.stderr.fileno())
    except (OSError, ValueError):
        return
    if size.columns == 0:
        os.environ.setdefault("TQDM_NCOLS", "80")
    if size.lines == 0:
        os.environ.setdefault("TQDM_NROWS", "24")


def main(argv: Sequence[str] | None = None) -> int:
    _bars_get_a_size()
    try:
        args = build_parser().parse_args(argv)
        load_models(args.models)
        with warnings.catch_warnings():
            # a failed run is reported by the command (one line), not a second time as a warning
            warnings.filterwarnings("ignore", r"\S+/\S+ failed: ", RuntimeWarning)
            return args.fn(args)
    except KeyboardInterrupt:
        print("zoo: interrupted", file=sys.stderr)
        return 130
    except ValueError as e:  # ZooError and UsageError are ValueErrors: a wrong call
        lines = str(e).strip().splitlines() or [type(e).__name__]
        print(f"zoo: error: {lines[0]}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
