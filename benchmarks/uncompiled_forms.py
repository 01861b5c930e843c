"""What runs the traced density (and a sampler's step fused through it) when nothing is compiled:
the candidates for TorchScript's place, now that torch 2.14 deprecates ``torch.jit.trace``.

    python benchmarks/uncompiled_forms.py [--models a,b] [--chains 32] [--out FILE]

For each model, the density's traced aten graph at ``--chains`` chains and NUTS's fused step
(the function NUTS hands to ``density.fuse``, caught in a short run) are timed per call as:

- ``fx``: the FX ``GraphModule`` run as Python (what runs where TorchScript is unverified);
- ``torchscript``: ``torch.jit.trace`` of that graph, run by TorchScript's interpreter;
- ``compile-eager``: ``torch.compile(graph, backend="eager")`` (TorchDynamo, no code
  generation: the lightest ``torch.compile``);
- ``eager step``: the step run eagerly, calling the FX density (no fusion).

Each time is the least over ``--repeats`` repeats of the mean CPU time over a batch of calls
(the machine is shared: CPU time, not wall time). Writes a Markdown table to
``benchmarks/results/uncompiled_forms.md``.
"""

from __future__ import annotations

import argparse
import os
import platform
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

import zoo
from zoo_inference import backend
from zoo_inference.density import BatchedDensity, batched_density

MODELS = ("eight_schools_noncentered", "logistic_regression", "hmm")
OUT = Path(__file__).parent / "results" / "uncompiled_forms.md"


def per_call_us(fn: Callable[[], Any], repeats: int, budget_s: float = 0.05) -> float:
    """The least over ``repeats`` of the mean CPU seconds a call, in microseconds: the process's
    CPU time (one torch thread), which other processes on a shared machine do not inflate."""
    fn()
    start, n = time.process_time(), 0
    while time.process_time() - start < budget_s / 4:
        fn()
        n += 1
    n = max(n * 4, 3)
    best = float("inf")
    for _ in range(repeats):
        start = time.process_time()
        for _ in range(n):
            fn()
        best = min(best, (time.process_time() - start) / n)
    return best * 1e6


def nuts_step(name: str, chains: int) -> tuple[BatchedDensity, Callable[..., Any], tuple]:
    """The density ``zoo.run`` builds for NUTS at ``chains`` chains (the same cached object), and
    the step NUTS fuses through it with the arguments of its first call."""
    caught: list[tuple[Callable[..., Any], tuple]] = []
    fuse = BatchedDensity.fuse

    def catch(self, step, args, **kwargs):  # noqa: ANN001, ANN202
        caught.append((step, tuple(a.clone() for a in args)))
        return fuse(self, step, args, **kwargs)

    BatchedDensity.fuse = catch  # type: ignore[method-assign]
    try:
        zoo.run(name, "nuts", num_samples=2, warmup=2, num_chains=chains, chain_groups=1,
                parallel=False, jit=False, progress=False, seed=0)  # fmt: skip
    finally:
        BatchedDensity.fuse = fuse  # type: ignore[method-assign]
    e = zoo.get_model(name)
    density = batched_density(e.model, e.load_data(), e.structure, chains)
    step, args = max(caught, key=lambda c: len(c[1]))  # the tree's leaf step
    return density, step, args


def forms(graph: torch.fx.GraphModule, example: tuple) -> dict[str, Callable[..., Any]]:
    out: dict[str, Callable[..., Any]] = {"fx": graph}
    out["torchscript"] = backend.script(graph, example)
    compiled = torch.compile(graph, backend="eager", fullgraph=True, dynamic=False)
    compiled(*example)
    out["compile-eager"] = compiled
    return out


def measure(name: str, chains: int, repeats: int) -> list[dict[str, Any]]:
    density, step, args = nuts_step(name, chains)
    graph = density._graph
    assert isinstance(graph, torch.fx.GraphModule)
    theta = density._probe
    rows = []
    nodes = len(graph.graph.nodes)
    for form, fn in forms(graph, (theta,)).items():
        us = per_call_us(lambda fn=fn: fn(theta), repeats)
        rows.append({"model": name, "what": f"density ({nodes} nodes)", "form": form, "us": us})

    def through_graph(*a: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return step(graph, *a)

    example = tuple(a.clone() for a in args)
    with backend.functional():
        fused = backend.make_fx(through_graph)(*example)
    backend.simplify(fused)
    nodes = len(fused.graph.nodes)
    for form, fn in forms(fused, example).items():
        us = per_call_us(lambda fn=fn: fn(*args), repeats)
        rows.append({"model": name, "what": f"NUTS step ({nodes} nodes)", "form": form, "us": us})
    us = per_call_us(lambda: step(graph, *args), repeats)
    rows.append(
        {"model": name, "what": f"NUTS step ({nodes} nodes)", "form": "eager step", "us": us}
    )
    return rows


def table(rows: list[dict[str, Any]], chains: int, seconds: float) -> str:
    form_names = list(dict.fromkeys(r["form"] for r in rows))
    keys = list(dict.fromkeys((r["model"], r["what"]) for r in rows))
    by = {(r["model"], r["what"], r["form"]): r["us"] for r in rows}
    lines = [
        "# The uncompiled form: per-call times",
        "",
        f"`python benchmarks/uncompiled_forms.py` on torch {torch.__version__}, "
        f"{platform.python_implementation()} {platform.python_version()}, {chains} chains, "
        f"one torch thread, {os.cpu_count()} cores ({seconds:.0f} s). Microseconds a call, the "
        "least of the repeats, in CPU time; in brackets, against TorchScript.",
        "",
        "| model | call | " + " | ".join(form_names) + " |",
        "| --- | --- | " + " | ".join("---:" for _ in form_names) + " |",
    ]
    for model, what in keys:
        ts = by.get((model, what, "torchscript"))
        cells = []
        for f in form_names:
            us = by.get((model, what, f))
            cells.append("" if us is None else f"{us:.0f} ({us / ts:.2f}x)" if ts else f"{us:.0f}")
        lines.append(f"| {model} | {what} | " + " | ".join(cells) + " |")
    lines += [
        "",
        "The choice (inference/backend/compile.py): TorchScript stays the uncompiled form on the",
        "torch releases it is verified on (pyproject.toml's range; torch 2.14's FutureWarning is",
        "silenced), the FX graph elsewhere, where a sampler's step runs eagerly (as it does with",
        "zoo.configure(uncompiled='fx'): at most a quarter slower than the FX graph fused in",
        "runs here, often faster). torch.compile's lightest backend is the slowest of the three.",
    ]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--chains", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    os.environ.setdefault("ZOO_AUTO_COMPILE", "0")
    torch.set_num_threads(1)
    warnings.filterwarnings("ignore")
    started = time.perf_counter()
    rows = []
    for name in args.models.split(","):
        rows += measure(name, args.chains, args.repeats)
    text = table(rows, args.chains, time.perf_counter() - started)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
