"""Engine wall times on every registered model, and speed-ups measured against a baseline run in
the same process.

    python benchmarks/engines.py [--models a,b] [--profile quick|full] [--out bench.csv]

Prints a model x engine table of wall seconds (and ESS/s for MCMC), then the ratios:
vectorised vs per-draw recovery of discrete sites (``infer_discrete``), JIT vs plain SVI.
"""

from __future__ import annotations

import argparse
import time
import warnings

import pandas as pd
import pyro
import torch

import zoo
from zoo.profiles import PROFILE_NAMES, profiles
from zoo_inference.discrete import _draw_batch, _draw_each
from zoo_inference.replay import batched

warnings.filterwarnings("ignore")


def engine_times(models: list[str], profile: str) -> pd.DataFrame:
    rows = []
    for name in models:
        entry = zoo.get_model(name)
        for engine in entry.engines:
            opts = dict(profiles()[profile].get(engine, {}))
            spec = entry.engine_spec(engine)
            opts = {k: v for k, v in opts.items() if k in spec.defaults}
            run = zoo.run(entry, engine, progress=False, **opts)
            d = run.diagnostics
            ess = d.get("min_ess_bulk")
            rows.append(
                {
                    "model": name,
                    "engine": engine,
                    "status": run.status,
                    "wall_s": round(d["wall_time_s"], 3),
                    "ess_per_s": round(ess / d["wall_time_s"], 1) if ess else None,
                }
            )
            print(f"{name:<18} {engine:<6} {d['wall_time_s']:8.2f} s  {run.status}", flush=True)
    return pd.DataFrame(rows)


def ratio_discrete_recovery(name: str = "gaussian_mixture", n: int = 200) -> float:
    """Seconds of the per-draw loop / seconds of the vectorised batch, same conditions."""
    entry = zoo.get_model(name)
    data, s = entry.load_data(), entry.structure
    torch.manual_seed(0)
    with torch.no_grad():
        prior_draws = batched(entry.model, n, -1 - s.max_plate_nesting)
        prior = pyro.poutine.trace(prior_draws).get_trace(**data)
    draws = {k: prior.nodes[k]["value"].reshape((n,) + s.shapes[k]) for k in s.continuous}
    t = time.perf_counter()
    _draw_batch(entry.model, data, draws, n, s, s.discrete, 1)
    batch = time.perf_counter() - t
    t = time.perf_counter()
    _draw_each(entry.model, data, draws, n, s, s.discrete, 1)
    loop = time.perf_counter() - t
    return loop / batch


def ratio_jit(name: str = "three_coin", steps: int = 300) -> float:
    """Seconds of plain SVI / seconds of JIT-compiled SVI (compile included), same model."""
    t = time.perf_counter()
    zoo.run(name, "svi", num_steps=steps, num_samples=10, progress=False)
    plain = time.perf_counter() - t
    t = time.perf_counter()
    zoo.run(name, "svi", num_steps=steps, num_samples=10, jit=True, progress=False)
    return plain / (time.perf_counter() - t)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", default=",".join(zoo.list_models()))
    p.add_argument("--profile", default="quick", choices=sorted(PROFILE_NAMES))
    p.add_argument("--out", default=None)
    args = p.parse_args()
    table = engine_times(args.models.split(","), args.profile)
    print(table.pivot(index="model", columns="engine", values="wall_s").to_string())
    print(f"\ndiscrete recovery, loop / vectorised: {ratio_discrete_recovery():.1f}x")
    print(f"svi three_coin, plain / jit:           {ratio_jit():.2f}x")
    if args.out:
        table.to_csv(args.out, index=False)


if __name__ == "__main__":
    main()
