"""ODE solvers for the posteriordb ODE posteriors: torchdiffeq against torchode, both
Dormand-Prince 5(4) with gradients by backprop through the solver's steps.

    python benchmarks/ode_solvers.py [--repeats 5]

For each ODE posterior (zoo/models/posteriordb/ode.py) and each solver, at the Stan program's
tolerances and at those times 1e-2 and 1e-4: the sd over Stan's 20 reference draws of
(log joint - Stan's log density) (tests/data/stan_log_densities/), the largest difference of
the unconstrained gradient from Stan's (relative to 1 + |Stan's|), and the median time per
log density + gradient evaluation (CPU seconds, one thread; the machine is shared). The model's
own ``integrate_ode`` is swapped for each solver; everything else is the zoo's model in
float64. Writes ``benchmarks/results/ode_solvers.md``.
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from collections.abc import Callable
from importlib.metadata import version
from pathlib import Path
from typing import Any
from unittest import mock

import numpy as np
import pyro
import pyro.poutine as poutine
import torch
import torchdiffeq
import torchode
from torch.distributions import biject_to

import zoo
from zoo.models.posteriordb import ode
from zoo_inference.reference import default_dtype

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "benchmarks" / "results" / "ode_solvers.md"
STAN = ROOT / "tests" / "data" / "stan_log_densities"
POSTERIORS = ("hudson_lynx_hare-lotka_volterra", "one_comp_mm_elim_abs-one_comp_mm_elim_abs")
SCALES = (1.0, 1e-2, 1e-4)  # the program's tolerances times these


def torchdiffeq_solve(rhs, y0, t0, ts, theta, x_r=None, *, rel_tol, abs_tol, max_num_steps):
    t = torch.cat([torch.as_tensor([t0], dtype=ts.dtype), ts])
    z = torchdiffeq.odeint(
        lambda s, y: rhs(s, y, theta, x_r),
        y0,
        t,
        rtol=rel_tol,
        atol=abs_tol,
        method="dopri5",
        options={"max_num_steps": max_num_steps},
    )
    return z[1:]


def torchode_solve(rhs, y0, t0, ts, theta, x_r=None, *, rel_tol, abs_tol, max_num_steps):
    """torchode solves a batch: one problem here, its batch dimension added and dropped."""
    term = torchode.ODETerm(lambda s, y: rhs(s, y, theta, x_r))
    solver = torchode.AutoDiffAdjoint(
        torchode.Dopri5(term=term),
        torchode.IntegralController(atol=abs_tol, rtol=rel_tol, term=term),
        max_steps=max_num_steps,
    )
    t = torch.cat([torch.as_tensor([t0], dtype=ts.dtype), ts])
    sol = solver.solve(torchode.InitialValueProblem(y0=y0[None], t_eval=t[None]), term=term)
    return sol.ys[0, 1:]


SOLVERS = {"torchdiffeq": torchdiffeq_solve, "torchode": torchode_solve}


def scaled(solve: Callable[..., Any], scale: float) -> Callable[..., Any]:
    """``solve`` at the program's relative and absolute tolerances times ``scale``."""

    def solve_scaled(*args: Any, rel_tol: float, abs_tol: float, max_num_steps: int) -> Any:
        return solve(*args, rel_tol=rel_tol * scale, abs_tol=abs_tol * scale, max_num_steps=10**6)

    return solve_scaled


def density(name: str, values: dict[str, Any]) -> Callable[[], tuple[float, np.ndarray]]:
    """The model's log joint at Stan's values and the gradient, on the unconstrained space, of
    the log joint plus the transforms' log-Jacobian (as tests/zoo/models/test_posteriordb.py), as a
    function of nothing: what a sampler's step evaluates."""
    entry = zoo.get_model(name)
    data = entry.load_data()
    given = {k: torch.as_tensor(np.asarray(v, dtype=float)) for k, v in values.items()}
    with pyro.validation_enabled(False):
        at = poutine.trace(poutine.condition(entry.model, data=given)).get_trace(**data)
    transforms = {site: biject_to(at.nodes[site]["fn"].support) for site in given}
    unconstrained = {site: t.inv(given[site]).detach() for site, t in transforms.items()}

    def evaluate() -> tuple[float, np.ndarray]:
        us = [u.clone().requires_grad_(True) for u in unconstrained.values()]
        point, logdet = {}, torch.zeros((), dtype=torch.float64)
        for (site, t), u in zip(transforms.items(), us, strict=True):
            point[site] = t(u)
            logdet = logdet + t.log_abs_det_jacobian(u, point[site]).sum()
        with pyro.validation_enabled(False):
            tr = poutine.trace(poutine.condition(entry.model, data=point)).get_trace(**data)
        lp = tr.log_prob_sum()
        g = torch.autograd.grad(lp + logdet, us)
        return float(lp.detach()), np.concatenate([gi.reshape(-1).numpy() for gi in g])

    return evaluate


def measure(posterior: str, solve: Callable[..., Any], repeats: int) -> dict[str, float]:
    saved = json.loads((STAN / f"{posterior}.json").read_text())
    name = "pdb_" + posterior.replace("-", "_")
    diffs, grads, times = [], [], []
    with default_dtype(torch.float64), mock.patch.object(ode, "integrate_ode", solve):
        for row in saved["points"]:
            evaluate = density(name, row["values"])
            lp, grad = evaluate()
            diffs.append(lp - row["log_density"])
            stan = np.asarray(row["gradient_adjusted"])
            grads.append(float(np.max(np.abs(grad - stan) / (1 + np.abs(stan)))))
            for _ in range(repeats):
                start = time.process_time()
                evaluate()
                times.append(time.process_time() - start)
    return {"sd": float(np.std(diffs)), "grad": max(grads), "ms": 1e3 * float(np.median(times))}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5, help="timed evaluations a draw")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    lines = [
        "# ODE solvers for the posteriordb ODE posteriors: torchdiffeq vs torchode",
        "",
        f"Written by `benchmarks/ode_solvers.py` ({platform.machine()}, Python "
        f"{platform.python_version()}, torch {torch.__version__}, torchdiffeq "
        f"{version('torchdiffeq')}, torchode {version('torchode')}): both Dormand-Prince 5(4), "
        "gradients by backprop through the steps, float64, at Stan's 20 reference draws a "
        "posterior. sd: of (log joint - Stan's log density); grad: the largest "
        "|gradient - Stan's| / (1 + |Stan's|) on the unconstrained space; ms: median CPU time "
        f"of one log density + gradient (one thread, {args.repeats} evaluations a draw, shared "
        "machine). Tolerances: the program's (rk45: rtol 1e-5, atol 1e-3; bdf: 1e-6, 1e-6), "
        "or both times a factor; at the smallest the difference is Stan's own error. The zoo's "
        "model solves at a hundredth of the program's tolerances (ode.TOLERANCE_FACTOR).",
        "",
        "| posterior | solver | tolerances | sd | grad | ms |",
        "|---|---|---|---|---|---|",
    ]
    for posterior in POSTERIORS:
        for solver, solve in SOLVERS.items():
            for scale in SCALES:
                label = "Stan's" if scale == 1 else f"Stan's x {scale:g}"
                r = measure(posterior, scaled(solve, scale), args.repeats)
                row = (
                    f"| {posterior} | {solver} | {label} | {r['sd']:.2g} | {r['grad']:.2g} | "
                    f"{r['ms']:.1f} |"
                )
                print(row, flush=True)
                lines.append(row)
                OUT.write_text("\n".join(lines) + "\n")  # row by row: a long run keeps its rows
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
