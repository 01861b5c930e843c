"""Time one cold quick report (inductor's compile cache empty) and append a row to
benchmarks/results/report_times.md: wall and CPU seconds, the cells' own seconds, and the
count of cells by status. Paired runs (before and after a change, back to back) are two calls:

    python benchmarks/report_time.py --label after
    python benchmarks/report_time.py --label before --source ../old-checkout

``--source`` runs the zoo of another source folder (put first on the import path: for a
checkout whose packages import by their folder names, as before their install names changed)."""

from __future__ import annotations

import argparse
import collections
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results" / "report_times.md"
COLUMNS = ("when (UTC)", "label", "source", "revision", "profile", "wall s", "CPU s", "cell s")
HEADER = "| " + " | ".join([*COLUMNS, "cells by status"]) + " |\n" + "|---" * 9 + "|\n"


def revision(folder: Path) -> str:
    done = subprocess.run(
        ["git", "-C", str(folder), "rev-parse", "--short", "HEAD"], capture_output=True, text=True
    )
    return done.stdout.strip() or "?"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--label", required=True)
    p.add_argument("--source", default=str(ROOT), help="the source folder whose zoo runs")
    p.add_argument("--profile", default="quick")
    p.add_argument("--out", default=str(RESULTS))
    args = p.parse_args(argv)
    source = Path(args.source).resolve()
    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(Path(tmp) / "inductor")}
        if source != ROOT:
            env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(source), env.get("PYTHONPATH")]))
        report = Path(tmp) / "report"
        cmd = [sys.executable, "-m", "zoo", "report", "--out", str(report)]
        cmd += ["--profile", args.profile, "-q"]
        start = time.perf_counter()
        subprocess.run(cmd, cwd=source, env=env, check=True, stdout=subprocess.DEVNULL)
        wall = time.perf_counter() - start
        usage = resource.getrusage(resource.RUSAGE_CHILDREN)
        results = json.loads((report / "results.json").read_text())
    cells = [r for m in results["models"].values() for r in m["engines"].values()]
    statuses = collections.Counter(r["status"] for r in cells)
    cell_s = sum(r["wall_time_s"] or 0 for r in cells)
    when = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M")
    shown = ", ".join(f"{n} {s}" for s, n in sorted(statuses.items()))
    row = (
        f"| {when} | {args.label} | {source.name} | {revision(source)} | {args.profile} "
        f"| {wall:.0f} | {usage.ru_utime + usage.ru_stime:.0f} | {cell_s:.0f} | {shown} |\n"
    )
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    if not out.exists():
        out.write_text("# Cold report times (benchmarks/report_time.py)\n\n" + HEADER)
    with out.open("a") as f:
        f.write(row)
    print(row, end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
