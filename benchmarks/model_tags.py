"""Measure every model's tags (zoo_inference.tags) into zoo/tags.json, the file ``zoo`` reads.

Each model is measured in a process of its own (default nuts at seed 0, then the figures from
its draws), under a time limit: a model that does not finish, or fails, is left out of the file
(it shows as not measured) and named at the end. Resumable: models already in the file are
kept unless named.

Run: ``python benchmarks/model_tags.py [MODEL ...] [--workers 2] [--limit-s 600]``
(default: every registered model not yet measured; ``--suite`` for one suite's).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from importlib.metadata import version
from pathlib import Path

OUT = Path(__file__).resolve().parents[1] / "zoo" / "tags.json"
CHILD = """
import json, sys, time, warnings
warnings.simplefilter("ignore")
import zoo
from zoo_inference.tags import measure
t = time.perf_counter()
name = sys.argv[1]
tags = measure(zoo.get_model(name), lambda: zoo.run(name, "nuts", seed=0, progress=False))
tags["seconds"] = round(time.perf_counter() - t, 1)
print("TAGS " + json.dumps(tags))
"""


def measure_one(name: str, limit_s: float) -> dict | str:
    """The model's figures, or why there are none (a timeout, the child's last line)."""
    started = time.perf_counter()
    env = os.environ | {"OMP_NUM_THREADS": "1"}
    try:
        done = subprocess.run(
            [sys.executable, "-c", CHILD, name],
            capture_output=True, text=True, timeout=limit_s, env=env,
        )  # fmt: skip
    except subprocess.TimeoutExpired:
        return f"not done in {limit_s:.0f} s"
    print(f"{name}: {time.perf_counter() - started:.0f} s", flush=True)
    for line in done.stdout.splitlines():
        if line.startswith("TAGS "):
            return json.loads(line[5:])
    return ((done.stderr or done.stdout).strip().splitlines() or ["no output"])[-1][:300]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="*")
    parser.add_argument("--suite")
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--limit-s", type=float, default=600.0)
    args = parser.parse_args()
    import zoo

    saved = json.loads(OUT.read_text()) if OUT.exists() else {"models": {}}
    names = args.models or [
        m for m in zoo.list_models(suite=args.suite) if m not in saved["models"]
    ]
    saved.update(
        seed=0,
        measured=datetime.now(UTC).date().isoformat(),
        versions={p: version(p) for p in ("torch", "pyro-ppl")},
        limit_s=args.limit_s,
    )

    lock = threading.Lock()
    missing: dict[str, str] = {}

    def one(name: str) -> None:
        tags = measure_one(name, args.limit_s)
        with lock:  # the file holds every model measured so far
            if isinstance(tags, str):
                missing[name] = tags
                saved["models"].pop(name, None)
            else:
                saved["models"][name] = tags
            saved["models"] = dict(sorted(saved["models"].items()))
            OUT.write_text(json.dumps(saved, indent=1) + "\n")

    with ThreadPoolExecutor(args.workers) as pool:
        list(pool.map(one, names))
    for name, why in sorted(missing.items()):
        print(f"not measured: {name}: {why}")


if __name__ == "__main__":
    main()
