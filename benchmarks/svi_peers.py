"""The zoo's ``svi`` engine against NumPyro's SVI and Pyro's on the same model, data and guide:
steps per second and time to converge.

    python benchmarks/svi_peers.py [--models logistic_regression,eight_schools_noncentered]
        [--steps N] [--seed S] [--tools zoo,zoo-jit,pyro,numpyro,numpyro-scan] [--out FILE]

Every tool fits a mean-field Gaussian on the unconstrained space (the zoo's ``guide="normal"``,
Pyro's and NumPyro's ``AutoNormal``) from the prior median (scale 0.1) by Adam with gradients
clipped to 10 and the learning rate (0.05) decayed tenfold over ``--steps`` steps, one particle a
step. Each (model, tool) cell runs in a fresh process, twice: the first fit (cold: model
building, tracing, compiling) and the same fit again (warm). Figures:

* steps/s: ``--steps`` / the warm fit's wall time;
* time to converge: the cold fit's fixed cost (cold minus warm time) plus the steps until the
  ELBO's trailing 100-step mean first comes within 1 nat of the best final ELBO of any tool
  (mean of its last 20% of steps), at the warm rate.

The zoo's figures are those of a whole ``zoo.run`` (after the fit it draws 1000 times from the
guide and computes their importance weights, Pareto k-hat and pointwise log-likelihoods), which
the peers' figures (the fit alone) do not include. ``zoo`` runs at the engine's defaults (it
compiles once the run shows it pays), ``zoo-jit`` with ``jit=True``; ``pyro`` is Pyro's own SVI
through the zoo (``backend="pyro"``); ``numpyro`` is ``SVI.run`` at its defaults (a jitted step
per Python iteration, with its progress bar off-screen), ``numpyro-scan`` with
``progress_bar=False`` (every step inside one ``lax.scan``). Prints ``RATIO <model>-svi-<figure>
<zoo / best peer>`` (higher is better) and writes the table to ``--out`` (default
benchmarks/results/svi_peers.md).
"""

from __future__ import annotations

import argparse
import io
import json
import math
import os
import subprocess
import sys
import tempfile
import time
import warnings
from contextlib import redirect_stderr
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from compare_peers import (  # noqa: E402 - the benchmark's shared pieces
    ROOT,
    Clock,
    load_average,
    machine,
    missing_peer,
    model_data,
    numpyro_model,
)

MODELS = ("logistic_regression", "eight_schools_noncentered")
TOOLS = ("zoo", "zoo-jit", "pyro", "numpyro", "numpyro-scan")
LR, CLIP, INIT_SCALE = 0.05, 10.0, 0.1
TOLERANCE = 1.0  # nats: "converged" = trailing mean within this of the best final ELBO
WINDOW = 100


def fit_zoo(model: str, steps: int, seed: int, **options: Any) -> list[float]:
    import zoo

    run = zoo.run(
        model, "svi", seed=seed, guide="normal", num_steps=steps, lr=LR, progress=False, **options
    )
    if not run.ok:
        raise RuntimeError(run.error)
    return [float(x) for x in run.diagnostics["elbo"]]


def fit_numpyro(model: str, steps: int, seed: int, scan: bool) -> list[float]:
    import jax
    import numpyro
    from numpyro.infer import SVI, Trace_ELBO, init_to_median
    from numpyro.infer.autoguide import AutoNormal
    from numpyro.optim import ClippedAdam

    jax.config.update("jax_platform_name", "cpu")
    numpyro.set_host_device_count(1)
    fn = numpyro_model(model, model_data(model))
    guide = AutoNormal(fn, init_loc_fn=init_to_median(num_samples=15), init_scale=INIT_SCALE)

    def schedule(i: Any) -> Any:
        return LR * 0.1 ** ((i + 1) / steps)

    svi = SVI(fn, guide, ClippedAdam(step_size=schedule, clip_norm=CLIP), Trace_ELBO())
    with redirect_stderr(io.StringIO()):  # the progress bar, off-screen
        result = svi.run(jax.random.PRNGKey(seed), steps, progress_bar=not scan)
    return [-float(x) for x in np.asarray(result.losses)]


def fit(model: str, tool: str, steps: int, seed: int) -> list[float]:
    if tool == "zoo":
        return fit_zoo(model, steps, seed)
    if tool == "zoo-jit":
        return fit_zoo(model, steps, seed, jit=True)
    if tool == "pyro":
        return fit_zoo(model, steps, seed, backend="pyro")
    return fit_numpyro(model, steps, seed, scan=tool == "numpyro-scan")


def cell_main(model: str, tool: str, steps: int, seed: int, out: Path) -> None:
    """Child process: the cold fit, then the warm one; times and the warm fit's ELBO trace."""
    warnings.filterwarnings("ignore")
    result: dict[str, Any] = {}
    try:
        clock = Clock()
        fit(model, tool, steps, seed)
        result["cold_s"] = time.perf_counter() - clock.wall
        clock = Clock()
        result["elbo"] = fit(model, tool, steps, seed)
        result["warm_s"] = time.perf_counter() - clock.wall
        result["warm_cpu_s"] = Clock._cpu() - clock.cpu
    except Exception as e:  # noqa: BLE001 - reported by the parent
        result = {"error": f"{type(e).__name__}: {e}".splitlines()[0][:300]}
    out.write_text(json.dumps(result))


def spawn(model: str, tool: str, steps: int, seed: int, timeout: float) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "cell.json"
        cmd = [sys.executable, __file__, "--cell", model, tool, "--cell-out", str(out)]
        cmd += ["--steps", str(steps), "--seed", str(seed)]
        env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
        }
        try:
            proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            return {"error": f"timed out after {timeout:.0f} s"}
        if not out.exists():
            tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
            return {"error": f"exit {proc.returncode}: {tail[0][:300]}"}
        return json.loads(out.read_text())


def final_elbo(trace: list[float]) -> float:
    tail = np.asarray(trace[-max(1, len(trace) // 5) :])
    return float(np.mean(tail[np.isfinite(tail)]))


def converge_step(trace: list[float], target: float) -> int | None:
    """First step whose trailing ``WINDOW``-step mean ELBO reaches ``target``; None if never."""
    x = np.asarray(trace, dtype=float)
    x = np.where(np.isfinite(x), x, -1e30)
    means = np.convolve(x, np.ones(WINDOW) / WINDOW, mode="valid")
    hit = np.nonzero(means >= target)[0]
    return int(hit[0]) + WINDOW if len(hit) else None


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--models", default=",".join(MODELS))
    p.add_argument("--tools", default=",".join(TOOLS))
    p.add_argument("--steps", type=int, default=2000)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--timeout", type=float, default=900.0)
    p.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "svi_peers.md"))
    p.add_argument("--cell", nargs=2, metavar=("MODEL", "TOOL"), help=argparse.SUPPRESS)
    p.add_argument("--cell-out", help=argparse.SUPPRESS)
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse(argv)
    if args.cell:
        cell_main(*args.cell, args.steps, args.seed, Path(args.cell_out))
        return
    info = machine()
    tools = [t for t in args.tools.split(",") if t]
    unknown = set(tools) - set(TOOLS)
    if unknown:
        sys.exit(f"unknown tools {sorted(unknown)}; tools: {', '.join(TOOLS)}")
    skipped = []
    if any(t.startswith("numpyro") for t in tools) and missing_peer("numpyro"):
        skipped.append(f"numpyro: {missing_peer('numpyro')}")
        print(f"skipping numpyro: {missing_peer('numpyro')}", flush=True)
        tools = [t for t in tools if not t.startswith("numpyro")]
    lines = [
        "# SVI: the zoo against NumPyro and Pyro",
        "",
        f"`python benchmarks/svi_peers.py {' '.join(argv or sys.argv[1:])}`".replace(" `", "`"),
        "",
        *[f"- {k}: {v}" for k, v in info.items()],
        "",
        f"Mean-field Gaussian guide, {args.steps} steps, one particle, Adam (lr {LR}, decayed "
        "tenfold, gradients clipped to 10). Time to converge: cold fixed cost plus the steps "
        f"until the trailing {WINDOW}-step mean ELBO is within {TOLERANCE} nat of the best final "
        "ELBO, at the warm rate. The zoo's times are whole `zoo.run` calls (1000 guide draws, "
        "importance weights and log-likelihoods included).",
        "",
        "| model | tool | cold s | warm s | steps/s | final ELBO | converged at step | "
        "time to converge s |",
        "|---|---|---|---|---|---|---|---|",
    ]
    ratios = []
    for model in (m for m in args.models.split(",") if m):
        cells = {t: spawn(model, t, args.steps, args.seed, args.timeout) for t in tools}
        ok = {t: c for t, c in cells.items() if "error" not in c}
        for t, c in cells.items():
            if "error" in c:
                print(f"{model} {t}: FAILED {c['error']}", flush=True)
                lines.append(f"| {model} | {t} | failed: {c['error']} | | | | | |")
        if not ok:
            continue
        target = max(final_elbo(c["elbo"]) for c in ok.values()) - TOLERANCE
        for t, c in ok.items():
            c["steps_per_s"] = args.steps / c["warm_s"]
            step = converge_step(c["elbo"], target)
            fixed = max(c["cold_s"] - c["warm_s"], 0.0)
            c["converge_s"] = fixed + step / c["steps_per_s"] if step is not None else math.inf
            conv = f"{c['converge_s']:.2f}" if step is not None else "never"
            print(
                f"{model} {t}: cold {c['cold_s']:.2f} s, warm {c['warm_s']:.2f} s "
                f"({c['steps_per_s']:.0f} steps/s), final ELBO {final_elbo(c['elbo']):.2f}, "
                f"converged at step {step}, time to converge {conv} s",
                flush=True,
            )
            lines.append(
                f"| {model} | {t} | {c['cold_s']:.2f} | {c['warm_s']:.2f} | "
                f"{c['steps_per_s']:.0f} | {final_elbo(c['elbo']):.2f} | {step} | {conv} |"
            )
        peers = {t: c for t, c in ok.items() if not t.startswith("zoo")}
        zoo_cell = ok.get("zoo")
        if peers and zoo_cell:
            best_rate = max(c["steps_per_s"] for c in peers.values())
            best_time = min(c["converge_s"] for c in peers.values())
            ratios.append((f"{model}-svi-steps_per_s", zoo_cell["steps_per_s"] / best_rate))
            ratios.append((f"{model}-svi-time_to_converge", best_time / zoo_cell["converge_s"]))
    lines += ["", f"Load average at the end: {load_average()}.", ""]
    lines += [f"- RATIO {name} {value:.3g}" for name, value in ratios]
    lines += [f"- skipped {s}" for s in skipped]
    for name, value in ratios:
        print(f"RATIO {name} {value:.4g}")
    Path(args.out).write_text("\n".join(lines) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
