"""A refactor's speed, before and after, back to back: the same zoo calls under two revisions.

Each revision is checked out in a worktree of its own and imported through a folder of links
(its zoo, zoo_inference, zoo_reports and zoo_datasets first on PYTHONPATH, before this venv's
editable install), so both run in this venv with the same libraries. Every call runs in a fresh
process, the revisions alternating in ABBA order so that a drift in the machine's load falls on
both; the table gives each side's median CPU time of ``zoo.run`` (tracing and warmup included,
as a user pays them; CPU time, which other processes on a shared machine inflate less than wall
time; pass ``parallel=false`` to keep a run's chain groups in its process) and wall time, the
CPU ratio after / before, and whether the two drew the same draws (the sha256 of posterior and
sample_stats: a refactor must keep them).

Run: ``python benchmarks/refactor_ab.py --before REV [--after REV] --case MODEL:ENGINE[:k=v,...]
... --repeats N --out benchmarks/results/NAME.md`` (``--after`` defaults to the work tree).
``--per-call MODEL,...`` adds each revision's own ``benchmarks/uncompiled_forms.py`` on those
models (microseconds a call of the density and of NUTS's step in each uncompiled form, CPU
time, the least of its repeats), the revisions alternating as above, the least of the calls
kept: what a change to a kernel's Python costs, which a whole run's time is too noisy to show.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = {"zoo": "zoo", "zoo_inference": "inference", "zoo_reports": "reports"}
PACKAGES["zoo_datasets"] = "datasets"

CALL = """
import hashlib, json, resource, sys, time
import numpy as np
import zoo
model, engine, options = json.loads(sys.argv[1])
def cpu():
    return sum(
        u.ru_utime + u.ru_stime
        for u in map(resource.getrusage, (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN))
    )
t, c = time.perf_counter(), cpu()
run = zoo.run(model, engine, seed=0, progress=False, **options)
wall, cpu_s = time.perf_counter() - t, cpu() - c
h = hashlib.sha256()
for group in ("posterior", "sample_stats"):
    ds = run.idata[group]
    for name in sorted(ds.data_vars):
        h.update(name.encode() + np.ascontiguousarray(ds[name].values).tobytes())
print(json.dumps({"wall": wall, "cpu": cpu_s, "digest": h.hexdigest(), "status": run.status}))
"""


def parse_case(text: str) -> tuple[str, str, dict[str, object]]:
    """``MODEL:ENGINE[:k=v,...]``: values read as JSON where they parse, else as strings."""
    parts = text.split(":")
    if len(parts) not in (2, 3):
        raise SystemExit(f"--case {text!r}: expected MODEL:ENGINE[:k=v,...]")
    options: dict[str, object] = {}
    for item in parts[2].split(",") if len(parts) == 3 and parts[2] else []:
        key, _, value = item.partition("=")
        try:
            options[key] = json.loads(value)
        except json.JSONDecodeError:
            options[key] = value
    return parts[0], parts[1], options


def links(tree: Path, into: Path) -> Path:
    """A folder whose entries are ``tree``'s packages under their import names."""
    into.mkdir(parents=True, exist_ok=True)
    for name, folder in PACKAGES.items():
        (into / name).symlink_to(tree / folder)
    return into


def checkout(rev: str, where: Path) -> Path:
    subprocess.run(
        ["git", "-C", str(ROOT), "worktree", "add", "--detach", str(where), rev],
        check=True,
        capture_output=True,
    )
    return where


def call(path: Path, case: tuple[str, str, dict[str, object]]) -> dict[str, object]:
    env = {**os.environ, "PYTHONPATH": str(path), "OMP_NUM_THREADS": "1"}
    out = subprocess.run(
        [sys.executable, "-c", CALL, json.dumps(case)],
        cwd=path,  # not the repository: its zoo/ would come before PYTHONPATH's
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    if out.returncode != 0:
        raise SystemExit(f"{case} under {path}: failed\n{out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def per_call(tree: Path, path: Path, models: str, out: Path) -> dict[tuple[str, str, str], float]:
    """``tree``'s uncompiled_forms.py on ``models``: microseconds by (model, call, form)."""
    env = {**os.environ, "PYTHONPATH": str(path), "OMP_NUM_THREADS": "1"}
    script = tree / "benchmarks" / "uncompiled_forms.py"
    cmd = [sys.executable, str(script), "--models", models, "--out", str(out)]
    done = subprocess.run(cmd, cwd=path, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"uncompiled_forms.py under {path}: failed\n{done.stderr[-2000:]}")
    rows = [r for r in out.read_text().splitlines() if r.startswith("| ") and "---" not in r]
    header = [c.strip() for c in rows[0].strip("|").split("|")]
    got = {}
    for row in rows[1:]:
        cells = [c.strip() for c in row.strip("|").split("|")]
        for form, cell in zip(header[2:], cells[2:], strict=True):
            if cell:
                got[(cells[0], cells[1], form)] = float(cell.split()[0])
    return got


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", required=True, help="a git revision")
    parser.add_argument("--after", help="a git revision (default: the work tree)")
    parser.add_argument("--case", action="append", default=[], help="MODEL:ENGINE[:k=v,...]")
    parser.add_argument("--per-call", default="", help="models for uncompiled_forms.py")
    parser.add_argument("--repeats", type=int, default=3, help="calls per side and case")
    parser.add_argument("--out", type=Path, required=True, help="the markdown table to write")
    args = parser.parse_args(argv)
    cases = [parse_case(c) for c in args.case]
    if not cases and not args.per_call:
        parser.error("give --case or --per-call (or both)")
    revs = {}
    for side, rev in (("before", args.before), ("after", args.after)):
        revs[side] = "work tree" if rev is None else subprocess.run(
            ["git", "-C", str(ROOT), "rev-parse", "--short", rev],
            check=True, capture_output=True, text=True,
        ).stdout.strip()  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="zoo-ab-") as tmp:
        tmp_path = Path(tmp)
        trees = {"before": checkout(args.before, tmp_path / "before-tree")}
        trees["after"] = checkout(args.after, tmp_path / "after-tree") if args.after else ROOT
        paths = {side: links(tree, tmp_path / f"{side}-links") for side, tree in trees.items()}
        rows = []
        try:
            for case in cases:
                got: dict[str, list[dict[str, object]]] = {"before": [], "after": []}
                for r in range(args.repeats):
                    order = ("before", "after") if r % 2 == 0 else ("after", "before")
                    for side in order:
                        got[side].append(call(paths[side], case))
                        print(case[:2], side, got[side][-1], flush=True)
                walls = {s: statistics.median(float(g["wall"]) for g in got[s]) for s in got}
                cpus = {s: statistics.median(float(g["cpu"]) for g in got[s]) for s in got}
                digests = {s: {str(g["digest"]) for g in got[s]} for s in got}
                same = len(digests["before"] | digests["after"]) == 1
                rows.append((case, cpus, walls, same))
            calls: dict[str, dict[tuple[str, str, str], float]] = {"before": {}, "after": {}}
            for r in range(args.repeats if args.per_call else 0):
                for side in ("before", "after") if r % 2 == 0 else ("after", "before"):
                    out = tmp_path / f"{side}-{r}.md"
                    for key, us in per_call(trees[side], paths[side], args.per_call, out).items():
                        calls[side][key] = min(us, calls[side].get(key, float("inf")))
                    print("per call", side, r, flush=True)
        finally:
            for tree in trees.values():
                if tree != ROOT:
                    subprocess.run(
                        ["git", "-C", str(ROOT), "worktree", "remove", "--force", str(tree)],
                        check=False,
                    )
    lines = [
        f"# {args.out.stem}: before {revs['before']}, after {revs['after']}",
        "",
        f"Written by `benchmarks/refactor_ab.py` ({args.repeats} fresh processes a side and "
        "case, ABBA order, one torch thread; medians of `zoo.run`'s CPU and wall seconds, "
        "seed 0).",
        "",
        "| model | engine | options | CPU s before | CPU s after | after / before "
        "| wall s before | wall s after | same draws |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for (model, engine, options), cpus, walls, same in rows:
        ratio = cpus["after"] / cpus["before"]
        lines.append(
            f"| {model} | {engine} | {options or ''} | {cpus['before']:.2f} | "
            f"{cpus['after']:.2f} | {ratio:.3f} | {walls['before']:.2f} | {walls['after']:.2f} "
            f"| {'yes' if same else 'NO'} |"
        )
    if args.per_call:
        lines += [
            "",
            "Per call (each revision's `benchmarks/uncompiled_forms.py`, microseconds of CPU, the "
            f"least over {args.repeats} runs a side):",
            "",
            "| model | call | form | before us | after us | after / before |",
            "|---|---|---|---|---|---|",
        ]
        for key in sorted(set(calls["before"]) & set(calls["after"])):
            b, a = calls["before"][key], calls["after"][key]
            lines.append(f"| {key[0]} | {key[1]} | {key[2]} | {b:.0f} | {a:.0f} | {a / b:.3f} |")
    args.out.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
