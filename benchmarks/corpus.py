"""The foreign-model corpus (tests/foreign_corpus.py) through every engine that applies, with
moderate sizes: a model x engine table of status and error against the closed-form reference.

    python benchmarks/corpus.py [--out corpus.csv] [--workers 2]

``error`` is the largest |mean - exact mean| / exact sd over a case's latent sites (the
error in posterior sds); ``evidence`` the log evidence's difference from the exact one where the
engine gives an exact value or an estimate.
"""

from __future__ import annotations

import argparse
import multiprocessing
import sys
import time
import warnings
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np
import pandas as pd

import zoo

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from foreign_corpus import CORPUS  # noqa: E402  (the tests' corpus, imported as a file)

warnings.filterwarnings("ignore")
SIZES = {
    "svi": {"num_steps": 1500, "num_samples": 2000, "guide": "mvn", "lr": 0.03},
    "nuts": {"num_samples": 500, "warmup": 500, "num_chains": 2},
    "hmc": {"num_samples": 500, "warmup": 500, "num_chains": 2},
    "mh": {"num_samples": 4000, "warmup": 2000, "num_chains": 2},
    "importance": {"num_samples": 10000, "fit_steps": 1000},
    "enum": {"num_samples": 1000},
}


def run_case(case: object) -> list[dict]:
    """Every engine that applies on one corpus case: a row per engine."""
    rows = []
    truth = None
    if case.mean is not None:
        truth = zoo.GroundTruth(case.mean, case.sd, case.log_evidence)
    with zoo.isolated():
        entry = zoo.register(
            case.name,
            model=case.model,
            data=case.data,
            ground_truth=None if truth is None else (lambda t=truth, **_: t),
        )
        for engine in ("svi", "nuts", "hmc", "mh", "importance", "enum"):
            if engine not in entry.engines:
                continue
            spec = entry.engine_spec(engine)
            opts = {k: v for k, v in SIZES[engine].items() if k in spec.defaults}
            if "parallel" in spec.defaults:
                opts["parallel"] = False  # the cases already run in parallel
            t = time.perf_counter()
            run = zoo.run(entry, engine, progress=False, **opts)
            wall = time.perf_counter() - t
            err = ev = np.nan
            if run.ok and truth is not None and run.kind == "draws":
                errs = [
                    abs(run.summary.loc[r, "mean"] - m) / s
                    for r, (m, s) in truth.rows().items()
                    if r in run.summary.index and s > 0
                ]
                err = max(errs) if errs else np.nan
                if run.log_evidence is not None and case.log_evidence is not None:
                    if run.evidence.kind in ("exact", "estimate"):
                        ev = run.log_evidence - case.log_evidence
            rows.append(
                {
                    "model": case.name,
                    "engine": engine,
                    "ok": run.ok,
                    "error_in_sds": err,
                    "evidence_diff": ev,
                    "wall_s": wall,
                    "reason": run.error or "",
                }
            )
            print(
                f"{case.name:<40} {engine:<10} {'ok' if run.ok else 'FAILED':<6} "
                f"err {err:6.3f}  ev {ev:8.4f}  {wall:6.1f}s {run.error or ''}",
                flush=True,
            )
    return rows


def run_case_at(i: int) -> list[dict]:
    return run_case(CORPUS[i])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default=None)
    p.add_argument("--workers", type=int, default=1, help="cases run in this many processes")
    args = p.parse_args()
    if args.workers > 1:
        ctx = multiprocessing.get_context("fork")
        with ProcessPoolExecutor(args.workers, mp_context=ctx) as pool:
            # cases travel as indices: some case functions do not pickle by reference
            per_case = list(pool.map(run_case_at, range(len(CORPUS))))
    else:
        per_case = [run_case(case) for case in CORPUS]
    table = pd.DataFrame([row for rows in per_case for row in rows])
    pivot = table.pivot(index="model", columns="engine", values="error_in_sds")
    print(pivot.to_string(float_format=lambda v: f"{v:.2f}"))
    if args.out:
        table.to_csv(args.out, index=False)


if __name__ == "__main__":
    main()
