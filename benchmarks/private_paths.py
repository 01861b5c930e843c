"""Whether each private path of inference/backend/ pays for itself: every path of
``zoo_inference.backend.versions.PATHS`` timed on the workload it exists for, with the path and
with it forced off (``versions.unverified``: its public fallback runs), in one process, back to
back.

    python benchmarks/private_paths.py [--paths SIMPLIFY,INDUCTOR] [--chains 32] [--out FILE]

The workloads:

- ``ONE_FAKE_MODE``: building a batched density (tracing it, checking each form) of a big graph;
- ``SIMPLIFY``: a call of the traced density and of NUTS's fused step (TorchScript), and the
  density's node count;
- ``FAILED_FACTOR``: the compile of a density with a factorisation in a second fresh process
  (whether inductor's on-disk cache keys a graph that keeps the check), and a compiled density's
  call on a batch where one chain's factorisation fails (the fallback evaluates it per chain);
- ``INDUCTOR``: NUTS's fused step compiled against the same step as TorchScript;
- ``BUFFER_REUSE``: the compiled step with and without its buffers reused;
- ``TORCHSCRIPT``: the density as TorchScript against the FX graph, and the fused step against
  the eager step (the fallback runs both);
- ``LOG_EINSUM``: a call of the density of a model with enumerated sites;
- ``MODEL_FACTORS``: the log joint of many draws with discrete sites summed out
  (``zoo_inference.joint.log_joint_draws``);
- ``POTENTIAL_DATA``: a simulation-based calibration, its replications as the chains of one
  sampler against one run each.

Times are CPU seconds of this process (one torch thread; a fresh process's own, for the
compile), the least over the repeats, each repeat timing with and without back to back (the
machine is shared: CPU time, not wall time). Writes a Markdown table to
``benchmarks/results/private_paths.md``.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import pyro
import pyro.distributions as dist
import torch
from torch.distributions import constraints
from uncompiled_forms import nuts_step  # a file beside this one

import zoo
from zoo_inference import backend, inspect_model
from zoo_inference.backend import versions
from zoo_inference.density import BatchedDensity
from zoo_inference.joint import log_joint_draws

OUT = Path(__file__).parent / "results" / "private_paths.md"
BUYS = {
    "ONE_FAKE_MODE": "faster tracing: one fake mode for the graph, not one a node",
    "SIMPLIFY": "fewer nodes in every traced density and fused step, so faster calls; "
    "TorchScript fails to trace the unsimplified fused steps (they then run eagerly)",
    "FAILED_FACTOR": "no per-chain fallback when a factorisation fails in a compiled graph "
    "(inductor's on-disk cache keys the graph either way)",
    "INDUCTOR": "compiled densities and sampler steps (zoo's compile policy, jit=True)",
    "BUFFER_REUSE": "no allocation a call of a compiled sampler step",
    "TORCHSCRIPT": "the uncompiled graph and fused steps run by TorchScript's interpreter",
    "LOG_EINSUM": "a vmappable, traceable density for models with enumerated sites",
    "MODEL_FACTORS": "the log joint of all draws at once for models with discrete sites",
    "POTENTIAL_DATA": "SBC's replications as the chains of one batched sampler",
}


def cpu() -> float:
    """CPU seconds of this process and of the children it waited for (inductor's C compiler)."""
    child = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + child.ru_utime + child.ru_stime


def paired(
    fns: dict[str, Callable[[], Any]], repeats: int, budget_s: float = 0.05, *, warm: bool = True
) -> dict[str, float]:
    """Seconds a call of each of ``fns``: the least over ``repeats`` of the mean over a batch of
    calls (sized to ``budget_s``; one call where it is 0), the functions timed in turn within
    each repeat, after a first call each (``warm``)."""
    sizes = dict.fromkeys(fns, 1)
    for key, fn in fns.items():
        if warm:
            fn()
        if budget_s > 0:
            start = time.process_time()
            fn()
            sizes[key] = max(1, int(budget_s / max(time.process_time() - start, 1e-6)))
    best = dict.fromkeys(fns, float("inf"))
    for _ in range(repeats):
        for key, fn in fns.items():
            gc.collect()
            start = time.process_time()
            for _ in range(sizes[key]):
                fn()
            best[key] = min(best[key], (time.process_time() - start) / sizes[key])
    return best


def off(path: versions.PrivatePath, fn: Callable[[], Any]) -> Callable[[], Any]:
    """``fn`` run with ``path`` forced off."""

    def call() -> Any:
        with versions.unverified(path):
            return fn()

    return call


def row(path: str, model: str, measure: str, unit: str, w: float, wo: float) -> dict[str, Any]:
    scale = {"us": 1e6, "ms": 1e3, "s": 1.0, "nodes": 1.0}[unit]
    out = {"path": path, "model": model, "measure": f"{measure} ({unit})"}
    out.update({"with": w * scale, "without": wo * scale, "gain": wo / w if w else float("nan")})
    print(
        f"  {path} {model} {measure}: {out['with']:.4g} / {out['without']:.4g} {unit}", flush=True
    )
    return out


def density(name: str, chains: int, **kwargs: Any) -> BatchedDensity:
    e = zoo.get_model(name)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return BatchedDensity(e.model, e.load_data(), e.structure, chains, **kwargs)


# ------------------------------------------------------------------------------ the workloads
def one_fake_mode(chains: int, repeats: int) -> list[dict[str, Any]]:
    rows = []
    for name in ("hmm", "probabilistic_pca"):
        build = partial(density, name, chains)
        t = paired({"with": build, "without": off(versions.ONE_FAKE_MODE, build)}, repeats, 0)
        rows.append(row("ONE_FAKE_MODE", name, "building the density", "s", *t.values()))
    return rows


def simplify(chains: int, repeats: int) -> list[dict[str, Any]]:
    rows = []
    for name in ("eight_schools_noncentered", "logistic_regression", "hmm"):
        w = density(name, chains)
        with versions.unverified(versions.SIMPLIFY):
            wo = density(name, chains)
        x = w._probe
        n = [len(d._graph.graph.nodes) for d in (w, wo)]
        rows.append(row("SIMPLIFY", name, "density graph", "nodes", *n))
        t = paired({"with": partial(w, x), "without": partial(wo, x)}, 2 * repeats)
        rows.append(row("SIMPLIFY", name, "density call", "us", *t.values()))
        # NUTS's step as the sampler runs it: fused through each density, or eagerly where the
        # density cannot fuse it
        step, args = _step(name, chains)[1:]
        fused = w.fuse(step, args, reuse_outputs=True)
        with versions.unverified(versions.SIMPLIFY):
            plain = wo.fuse(step, args, reuse_outputs=True)
        measure = "NUTS step call"
        if plain is None:
            print(f"  {name}: not fused without ({wo.reasons.get('fused')})", flush=True)
            plain, measure = partial(step, wo), "NUTS step call (eager without: not fused)"
        t = paired({"with": partial(fused, *args), "without": partial(plain, *args)}, 2 * repeats)
        rows.append(row("SIMPLIFY", name, measure, "us", *t.values()))
    return rows


def _correlated_pair(y: torch.Tensor) -> None:
    # a support wider than the positive definite region: a sampler can step outside it, while
    # the density's check points all lie inside (else no traced form is built at all)
    rho = pyro.sample("rho", dist.ImproperUniform(constraints.interval(-1.2, 1.2), (), ()))
    cov = torch.eye(2) + rho * torch.tensor([[0.0, 1.0], [1.0, 0.0]])
    pyro.sample("y", dist.MultivariateNormal(torch.zeros(2), cov), obs=y)


def compile_child(name: str, chains: int, without: bool) -> None:
    """In a fresh process: the CPU seconds of compiling ``name``'s density, printed as JSON."""
    backend.compile_in_this_process()  # its CPU time is this process's (and its compiler's)
    with versions.unverified(*([versions.FAILED_FACTOR] if without else [])):
        d = density(name, chains)
    check = torch.ops.aten._linalg_check_errors.default
    checks = sum(n.target is check for n in d._graph.graph.nodes)
    start = cpu()
    backend.inductor(d._graph, [d._probe], rows=chains)
    print(json.dumps({"s": cpu() - start, "checks": checks}))


def failed_factor(chains: int, repeats: int) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    if not backend.has_compiler():  # TorchScript's trace drops the check: only compiled graphs
        return rows
    name, second = "gaussian_process", {}
    for label, flag in (("with", []), ("without", ["--without"])):
        with tempfile.TemporaryDirectory(prefix="paths-inductor-") as cache:
            env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": cache, "OMP_NUM_THREADS": "1"}
            cmd = [sys.executable, __file__, "--compile-child", name, f"--chains={chains}"]
            runs = []
            for _ in range(2):
                out = subprocess.run(
                    cmd + flag, env=env, capture_output=True, text=True, check=True
                )
                runs.append(json.loads(out.stdout.strip().splitlines()[-1]))
            print(f"  {name} {label}: fresh processes {runs}", flush=True)
            second[label] = runs[1]["s"]
    rows.append(row("FAILED_FACTOR", name, "compile, second fresh process", "s", *second.values()))
    backend.compile_in_this_process()
    data = {"y": torch.tensor([0.4, -0.1])}
    s = inspect_model(_correlated_pair, data)
    made = []
    for paths in ((), (versions.FAILED_FACTOR,)):
        with versions.unverified(*paths), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            d = BatchedDensity(_correlated_pair, data, s, chains, compile=True)
            d._compile_bare()  # the compiled density, as after its first calls in compiled mode
        made.append(d)
    w, wo = made
    rho = torch.linspace(-0.9, 0.9, chains)
    rho[1] = 1.1  # this chain's covariance is not positive definite
    theta = w.transforms["rho"](rho)[:, None]
    torch.testing.assert_close(w(theta), wo(theta))
    t = paired({"with": partial(w, theta), "without": partial(wo, theta)}, repeats)
    rows.append(
        row("FAILED_FACTOR", "a 2-d normal", "compiled call, a chain failing", "us", *t.values())
    )
    return rows


_STEPS: dict[str, tuple[BatchedDensity, Callable[..., Any], tuple]] = {}


def _step(name: str, chains: int) -> tuple[BatchedDensity, Callable[..., Any], tuple]:
    if name not in _STEPS:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            _STEPS[name] = nuts_step(name, chains)
    return _STEPS[name]


def _fused_script(graph: torch.fx.GraphModule, step: Callable[..., Any], args: tuple) -> Any:
    example = tuple(a.clone() for a in args)
    with backend.functional():
        traced = backend.make_fx(lambda *a: step(graph, *a))(*example)
    backend.simplify(traced)
    return backend.script(traced, example)


def _compiled_step(
    graph: torch.fx.GraphModule, step: Callable[..., Any], args: tuple, chains: int
) -> Any:
    example = [a.clone() for a in args]
    return backend.inductor(lambda *a: step(graph, *a), example, rows=chains, reuse_outputs=True)


def inductor_and_buffers(chains: int, repeats: int) -> list[dict[str, Any]]:
    rows = []
    if not backend.has_compiler():
        return rows
    backend.compile_in_this_process()
    for name in ("eight_schools_noncentered", "logistic_regression"):
        d, step, args = _step(name, chains)
        graph = d._graph
        scripted = _fused_script(graph, step, args)
        reused = _compiled_step(graph, step, args, chains)
        with versions.unverified(versions.BUFFER_REUSE):
            plain = _compiled_step(graph, step, args, chains)
        for a, b in zip(reused(*args), scripted(*args), strict=True):
            if a.is_floating_point():
                torch.testing.assert_close(a, b, rtol=1e-3, atol=1e-3)
        fns = {
            "reused": partial(reused, *args),
            "plain": partial(plain, *args),
            "script": partial(scripted, *args),
        }
        t = paired(fns, repeats)
        rows.append(row("INDUCTOR", name, "NUTS step", "us", t["plain"], t["script"]))
        rows.append(row("BUFFER_REUSE", name, "compiled NUTS step", "us", t["reused"], t["plain"]))
    return rows


def torchscript(chains: int, repeats: int) -> list[dict[str, Any]]:
    rows = []
    for name in ("eight_schools_noncentered", "hmm"):
        d, step, args = _step(name, chains)
        graph, x = d._graph, d._probe
        scripted = backend.script(graph, (x,))
        t = paired({"with": partial(scripted, x), "without": partial(graph, x)}, repeats)
        rows.append(row("TORCHSCRIPT", name, "density call", "us", *t.values()))
        fused = _fused_script(graph, step, args)
        fns = {"with": partial(fused, *args), "without": partial(step, graph, *args)}
        t = paired(fns, repeats)
        rows.append(row("TORCHSCRIPT", name, "NUTS step (eager without)", "us", *t.values()))
    return rows


def log_einsum(chains: int, repeats: int) -> list[dict[str, Any]]:
    rows = []
    for name in ("gaussian_mixture", "hmm"):
        w = density(name, chains)
        with versions.unverified(versions.LOG_EINSUM):
            wo = density(name, chains)
        print(f"  {name}: {w.mode} with, {wo.mode} without", flush=True)
        x = w._probe
        fns = {"with": partial(w, x), "without": off(versions.LOG_EINSUM, partial(wo, x))}
        t = paired(fns, max(2, repeats // 2))
        measure = f"density call ({w.mode} / {wo.mode})"
        rows.append(row("LOG_EINSUM", name, measure, "ms", *t.values()))
    return rows


def model_factors(chains: int, repeats: int, draws: int = 400) -> list[dict[str, Any]]:
    rows = []
    for name in ("three_coin", "hmm"):
        e = zoo.get_model(name)
        data = e.load_data()
        d = density(name, 2)
        theta = 2 * torch.rand(draws, d.dim, generator=d.generator(0)) - 1  # Uniform(-1, 1)
        points = d.constrain(theta)
        points = {k: v for k, v in points.items() if k in e.structure.continuous}

        def joint(e=e, data=data, points=points) -> Any:  # noqa: ANN001
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                return log_joint_draws(e.model, data, points, e.structure)

        t = paired({"with": joint, "without": off(versions.MODEL_FACTORS, joint)}, 1, 0)
        rows.append(row("MODEL_FACTORS", name, f"log joint of {draws} draws", "s", *t.values()))
    return rows


def potential_data(chains: int, repeats: int, reps: int = 8) -> list[dict[str, Any]]:
    name = "eight_schools_noncentered"

    def sbc(reps: int = reps) -> Any:  # at SBC's nuts budget, 4 chains a replication
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return zoo.sbc(name, "nuts", reps=reps, seed=0, workers=1, progress=False)

    warm = partial(sbc, 2)
    paired({"with": warm, "without": off(versions.POTENTIAL_DATA, warm)}, 1, 0, warm=False)
    t = paired({"with": sbc, "without": off(versions.POTENTIAL_DATA, sbc)}, 1, 0, warm=False)
    return [row("POTENTIAL_DATA", name, f"SBC of {reps} replications", "s", *t.values())]


WORKLOADS: dict[str, Callable[[int, int], list[dict[str, Any]]]] = {
    "ONE_FAKE_MODE": one_fake_mode,
    "SIMPLIFY": simplify,
    "FAILED_FACTOR": failed_factor,
    "INDUCTOR": inductor_and_buffers,  # and BUFFER_REUSE: the same compiled steps
    "TORCHSCRIPT": torchscript,
    "LOG_EINSUM": log_einsum,
    "MODEL_FACTORS": model_factors,
    "POTENTIAL_DATA": potential_data,
}


def table(rows: list[dict[str, Any]], chains: int, seconds: float) -> str:
    lines = [
        "# The backend's private paths: with and without",
        "",
        f"`python benchmarks/private_paths.py` on torch {torch.__version__}, Pyro "
        f"{pyro.__version__}, {platform.python_implementation()} {platform.python_version()}, "
        f"{chains} chains, one torch thread, {os.cpu_count()} cores ({seconds:.0f} s). Each path "
        "timed on its workload with it and forced off (`versions.unverified`: its fallback "
        "runs), back to back in one process; CPU time, the least of the repeats. Gain: without / "
        "with.",
        "",
        "| path | model | measure | with | without | gain |",
        "| --- | --- | --- | ---: | ---: | ---: |",
    ]
    for r in rows:
        lines.append(
            f"| {r['path']} | {r['model']} | {r['measure']} | {r['with']:.4g} | "
            f"{r['without']:.4g} | {r['gain']:.2f}x |"
        )
    weak = [f"{r['path']} ({r['model']}, {r['gain']:.2f}x)" for r in rows if r["gain"] < 1.1]
    lines += ["", f"Gains under 1.1x: {', '.join(weak) or 'none'}."]
    lines += ["", "What each path buys:", ""]
    for path in dict.fromkeys(r["path"] for r in rows):
        lines.append(f"- `{path}`: {BUYS[path]}.")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--paths", default=",".join(WORKLOADS))
    parser.add_argument("--chains", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--sbc-reps", type=int, default=8, help="POTENTIAL_DATA's replications")
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--compile-child", help=argparse.SUPPRESS)
    parser.add_argument("--without", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    os.environ.setdefault("ZOO_AUTO_COMPILE", "0")
    torch.set_num_threads(1)
    warnings.filterwarnings("ignore")
    if args.compile_child:
        compile_child(args.compile_child, args.chains, args.without)
        return
    started = time.perf_counter()
    rows = []
    for path in args.paths.split(","):
        print(f"{path} ({time.perf_counter() - started:.0f} s)", flush=True)
        more = {"reps": args.sbc_reps} if path == "POTENTIAL_DATA" else {}
        rows += WORKLOADS[path](args.chains, args.repeats, **more)
    text = table(rows, args.chains, time.perf_counter() - started)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
