"""When NUTS's compile rule decides, against when it should have: the rule of
inference/backend/policy.py replayed on recorded runs.

Each run (model x seed x size) is made traced, in this process (``parallel=False``), while the
modelled seconds of its graph calls (what the rule counts) are recorded iteration by iteration
for each chain group. The recording is then replayed under two schedules of the same rule
(:func:`zoo_inference.backend.policy.worth_compiling`, priced by the density's own
``compile_cost_s``):

- *first window* (the committed one): the work is weighed from the end of warmup's fast initial
  buffer (``loop.pace_from``), as ``DrivenLoop`` and ``BatchedDensity.tick`` do;
- *from the start*: the same checks from iteration 0 (the schedule of the wall-clock rule this
  project had before, with counts in place of seconds);

and against *hindsight*: compile at the first check exactly where that pays over the whole
recorded run. Each gives the run's modelled seconds: the traced work up to the compile, the
compile's price, the rest at ``COMPILED_PACE``. The table is the evidence for where the rule
starts weighing; a new rule can be replayed on the same recordings.

    python benchmarks/compile_pace.py --out benchmarks/results/compile_pace.md
"""

from __future__ import annotations

import argparse
import platform
import warnings
from dataclasses import dataclass, field
from datetime import UTC, datetime

import torch
from compile_policy import write_out  # a file beside this one

import zoo
from zoo_inference.backend import policy
from zoo_inference.density import BatchedDensity
from zoo_inference.samplers.driver import DrivenLoop

MODELS = ("eight_schools_noncentered", "logistic_regression", "gaussian_mixture", "naive_bayes")
# the matched benchmark's sizes (the engine's defaults) and the time-to-400 call's (ess=400)
SIZES = {"defaults": {}, "ess=400": {"ess": 400}}


@dataclass
class Recording:
    """One chain group's run: the modelled work done by the end of each iteration (``work[i]``
    after ``i + 1`` iterations), where the committed schedule starts weighing, and the price."""

    start: int
    cost: float
    offset: float  # the density's work banked before this run (an earlier group's)
    work: list[float] = field(default_factory=list)


def record(name: str, seed: int, opts: dict) -> list[Recording]:
    """The chain groups of ``zoo.run(name, "nuts", seed=seed, **opts)``, made traced."""
    recordings: dict[int, Recording] = {}
    banked: dict[int, float] = {}  # work counted before each density's pace restarts
    restart, done = BatchedDensity.restart_pace, DrivenLoop.done

    def restart_pace(self: BatchedDensity) -> None:
        banked[id(self)] = banked.get(id(self), 0.0) + getattr(self, "_work", 0.0)
        restart(self)

    def loop_done(self: DrivenLoop, iterations: int) -> None:
        done(self, iterations)
        d = self.density
        if id(self) not in recordings:
            recordings[id(self)] = Recording(self.start, d.compile_cost_s(), banked.get(id(d), 0.0))
        rec = recordings[id(self)]
        while len(rec.work) < iterations:
            rec.work.append(banked.get(id(d), 0.0) + d._work - rec.offset)

    BatchedDensity.restart_pace, DrivenLoop.done = restart_pace, loop_done
    try:
        with zoo.configure(auto_compile=False), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            run = zoo.run(name, "nuts", seed=seed, progress=False, parallel=False, **opts)
    finally:
        BatchedDensity.restart_pace, DrivenLoop.done = restart, done
    if not run.ok:
        raise RuntimeError(f"{name} seed {seed}: {run.error}")
    return [r for r in recordings.values() if r.work]


def decide(rec: Recording, start: int) -> int | None:
    """The iteration the rule compiles at when it weighs the work from ``start`` on (None:
    never), replaying ``DrivenLoop.done`` and ``BatchedDensity.tick``."""
    total, next_check = len(rec.work), 0
    base = rec.work[start - 1] if start else 0.0
    for i in range(start + 1, total + 1):
        n, span = i - start, total - start
        if n < max(10, span // 50, next_check):
            continue
        next_check = 2 * n
        if policy.worth_compiling(rec.work[i - 1] - base, n, span, rec.cost):
            return i
    return None


def seconds(rec: Recording, at: int | None) -> float:
    """The run's modelled seconds when it compiles after iteration ``at`` (None: never)."""
    whole = rec.work[-1]
    if at is None:
        return whole
    return rec.work[at - 1] + rec.cost + policy.COMPILED_PACE * (whole - rec.work[at - 1])


def hindsight(rec: Recording) -> tuple[int | None, float]:
    """Compile at the first check (the earliest the rule looks) where that pays in hindsight."""
    first = max(10, len(rec.work) // 50)
    at = first if seconds(rec, first) < rec.work[-1] else None
    return at, seconds(rec, at)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", default=",".join(MODELS))
    p.add_argument("--seeds", default="0,1,2")
    p.add_argument("--out", default=None)
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    rows, totals = [], {"first window": 0.0, "from the start": 0.0, "hindsight": 0.0}
    for name in args.models.split(","):
        for size, opts in SIZES.items():
            for seed in (int(s) for s in args.seeds.split(",")):
                recs = [r for r in record(name, seed, opts) if len(r.work) >= 100]
                for g, rec in enumerate(recs):
                    committed, early = decide(rec, rec.start), decide(rec, 0)
                    best_at, best = hindsight(rec)
                    got = seconds(rec, committed), seconds(rec, early)
                    totals["first window"] += got[0] - best
                    totals["from the start"] += got[1] - best
                    rows.append(
                        (name, size, seed, g, len(rec.work), rec.work[-1], rec.cost,
                         committed, got[0], early, got[1], best_at, best)
                    )  # fmt: skip
                    print(rows[-1][:5], f"{got[0]:.1f} {got[1]:.1f} {best:.1f}", flush=True)
    command = "python benchmarks/compile_pace.py" + (f" --out {args.out}" if args.out else "")

    def at(i: int | None) -> str:
        return "never" if i is None else str(i)

    lines = [
        "# NUTS's compile decision, replayed on recorded runs",
        "",
        f"Generated by `{command}` on {datetime.now(UTC):%Y-%m-%d %H:%M} UTC,"
        f" {platform.processor() or 'cpu'}, torch {torch.__version__}.",
        "Each row is one chain group of `zoo.run(model, 'nuts', seed=seed, parallel=False)` at the"
        " engine's defaults or with `ess=400`, made traced; its modelled work per iteration"
        " replayed under two schedules of the compile rule (`policy.worth_compiling`, compile"
        f" priced by the density, compiled pace {policy.COMPILED_PACE}). Seconds are modelled"
        " (`policy.call_seconds`), not timed: the same on any machine.",
        "",
        "Modelled seconds lost against hindsight, summed over the rows: "
        + ", ".join(f"{k} {v:.1f}" for k, v in totals.items() if k != "hindsight")
        + ".",
        "",
        "| model | size | seed | group | iterations | traced work s | compile s | first window:"
        " compiles at | s | from the start: compiles at | s | hindsight: compiles at | s |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        name, size, seed, g, n, work, cost, c_at, c_s, e_at, e_s, b_at, b_s = row
        lines.append(
            f"| {name} | {size} | {seed} | {g} | {n} | {work:.1f} | {cost:.1f} | {at(c_at)} |"
            f" {c_s:.1f} | {at(e_at)} | {e_s:.1f} | {at(b_at)} | {b_s:.1f} |"
        )
    write_out(lines, args.out)


if __name__ == "__main__":
    main()
