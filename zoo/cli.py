"""Command line: ``zoo list | info | run | compare | report``.

Errors print one line on stderr and exit with status 2 (bad input) or 1 (a run failed).
"""

from __future__ import annotations

import argparse
import ast
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any


def _parse_options(items: Sequence[str]) -> dict[str, Any]:
    """``KEY=VALUE`` pairs; values are Python literals when they parse (``3``, ``0.1``,
    ``(0.4, 0.6, 0.7)``, ``True``), strings otherwise."""
    out: dict[str, Any] = {}
    for item in items:
        key, sep, raw = item.partition("=")
        if not sep or not key.isidentifier():
            from inference import ZooError

            raise ZooError(f"options are KEY=VALUE, got {item!r}")
        try:
            out[key] = ast.literal_eval(raw)
        except (ValueError, SyntaxError):
            out[key] = raw
    return out


def cmd_list(args: argparse.Namespace) -> int:
    import zoo

    for name in zoo.list_models():
        entry = zoo.get_model(name)
        print(f"{name:<20} {', '.join(entry.engines):<32} {entry.description}")
    return 0


def cmd_info(args: argparse.Namespace) -> int:
    import zoo

    entry = zoo.get_model(args.name)
    print(f"{entry.name}  (seed {entry.seed_ref})\n")
    print(entry.doc.strip(), "\n")
    data = entry.load_data()
    print("default data:")
    for key, value in data.items():
        shape = tuple(value.shape) if hasattr(value, "shape") else type(value).__name__
        print(f"  {key}: {shape}")
    s = entry.structure
    print(f"latent sites: continuous {list(s.continuous)}, discrete {list(s.discrete)}")
    print("engines and their options (defaults):")
    for eng in entry.engines:
        spec = entry.engine_spec(eng)
        opts = {**spec.defaults, **entry.engine_options.get(eng, {})}
        shown = ", ".join(f"{k}={v!r}" for k, v in opts.items())
        print(f"  {eng:<6} {spec.summary}\n         {shown}")
    truth = entry.ground_truth(data)
    print(f"ground truth: {truth.source if truth else 'none (long NUTS is the reference)'}")
    return 0


def _write_run(run: Any, out: Path) -> None:
    """InferenceData (netCDF), summary CSV and diagnostics JSON, written atomically."""
    from inference.serialize import dumps, run_record
    from zoo.files import locked, write_atomically

    files: dict[str, str | bytes] = {
        "summary.csv": run.summary.to_csv(),
        "diagnostics.json": dumps(run_record(run)),
    }
    if run.idata is not None:
        files["idata.nc"] = _netcdf_bytes(run.idata)
    with locked(out):
        write_atomically(out, files)


def _netcdf_bytes(idata: Any) -> bytes:
    """InferenceData as netCDF bytes (written through a temporary file)."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "idata.nc"
        idata.to_netcdf(str(path))
        return path.read_bytes()


def cmd_run(args: argparse.Namespace) -> int:
    import zoo
    from zoo.api import execute, prepare
    from zoo.files import check_writable

    prepared = prepare(
        args.name,
        args.engine,
        seed=args.seed,
        progress=not args.quiet,
        **_parse_options(args.option),
    )
    out = check_writable(args.out) if args.out else None
    run = execute(prepared)
    if not run.ok:
        print(f"zoo: {args.name}/{args.engine} failed: {run.error}", file=sys.stderr)
        return 1
    cols = [c for c in ("mean", "sd", "hdi_3%", "hdi_97%", "r_hat", "ess_bulk") if c in run.summary]
    print(run.summary[cols].head(30).to_string(float_format=lambda v: f"{v:.6g}"))
    if len(run.summary) > 30:
        print(f"... {len(run.summary) - 30} more rows")
    from inference.serialize import dumps

    shown = {k: v for k, v in run.diagnostics.items() if not isinstance(v, list)}
    print(dumps(shown), end="")
    if args.out:
        _write_run(run, out)
        print(f"wrote {args.out}/idata.nc, summary.csv, diagnostics.json")
    del zoo
    return 0


def cmd_compare(args: argparse.Namespace) -> int:
    import zoo

    engines = args.engines.split(",") if args.engines else None
    cmp = zoo.compare(
        args.name, engines, seed=args.seed, progress=not args.quiet, **_parse_options(args.option)
    )
    print(cmp.table.to_string(float_format=lambda v: f"{v:.4g}"))
    print()
    for eng, run in cmp.runs.items():
        status = "ok" if run.ok else f"FAILED: {run.error}"
        ev = "" if run.log_evidence is None else f"  log evidence {run.log_evidence:.6f}"
        print(f"{eng:<6} {run.diagnostics['wall_time_s']:8.2f} s  {status}{ev}")
    return 0 if all(r.ok for r in cmp.runs.values()) else 1


def cmd_report(args: argparse.Namespace) -> int:
    import zoo

    path = zoo.report(
        args.names or None,
        out=args.out,
        profile=args.profile,
        seed=args.seed,
        progress=not args.quiet,
    )
    print(f"report written to {path}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="zoo", description="A model zoo on Pyro.")
    sub = p.add_subparsers(dest="command", required=True)
    sub.add_parser("list", help="list registered models").set_defaults(fn=cmd_list)
    info = sub.add_parser("info", help="describe a model, its data and engines")
    info.add_argument("name")
    info.set_defaults(fn=cmd_info)

    def common(sp: argparse.ArgumentParser) -> None:
        sp.add_argument("--seed", type=int, default=0)
        sp.add_argument("-q", "--quiet", action="store_true", help="no progress bars")

    run = sub.add_parser("run", help="run one engine on one model")
    run.add_argument("name")
    run.add_argument("--engine", "-e", required=True)
    run.add_argument("--out", help="folder for idata.nc, summary.csv, diagnostics.json")
    run.add_argument(
        "--option",
        "-o",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="engine option, e.g. -o num_steps=500 (repeatable)",
    )
    common(run)
    run.set_defaults(fn=cmd_run)

    cmp = sub.add_parser("compare", help="run several engines and tabulate against the truth")
    cmp.add_argument("name")
    cmp.add_argument("--engines", help="comma-separated (default: every engine that applies)")
    cmp.add_argument(
        "--option",
        "-o",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="option for every engine that takes it (repeatable)",
    )
    common(cmp)
    cmp.set_defaults(fn=cmd_compare)

    rep = sub.add_parser("report", help="write the HTML/Markdown comparison report")
    rep.add_argument("names", nargs="*", help="models (default: all)")
    rep.add_argument("--out", default="zoo-report")
    rep.add_argument("--profile", default="quick", help="quick or full")
    common(rep)
    rep.set_defaults(fn=cmd_report)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from inference import ZooError

    try:
        return args.fn(args)
    except (ZooError, ValueError) as e:
        print(f"zoo: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("zoo: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
