"""Stan's own log density at posteriordb's reference draws: the oracle of the zoo's translations.

For each vendored posterior (datasets/posteriordb/reference/), PyStan compiles its Stan program
on its data and evaluates, at ``POINTS`` of the thinned reference draws, the log density
``log_prob(unconstrain_pars(draw), adjust_transform=False)`` (no Jacobian: the density of the
constrained parameters, up to Stan's dropped constants; where a reference holds a transformed
parameter in place of a parameter, ``PARAMETERS`` gives the program's parameters from it) and
the gradient with respect to the unconstrained parameters (with the transforms' Jacobian, the
only one pystan gives). It writes tests/data/stan_log_densities/<posterior>.json, with the
httpstan (Stan) and pystan versions; tests/zoo/models/test_posteriordb.py checks each Pyro model
against it without Stan.

Needs the ``stan`` extra in a venv of its own (pystan 3 imports ``pkg_resources``):
``python -m venv /tmp/stan && /tmp/stan/bin/pip install "setuptools<80" pystan``, then
``/tmp/stan/bin/python benchmarks/stan_log_densities.py [POSTERIOR ...]`` (default: every
vendored posterior). g++ compiles each program in about 40 s.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import re
import sys
from importlib.metadata import version
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "tests" / "data" / "stan_log_densities"
POINTS = 20  # reference draws per posterior
_ELEMENT = re.compile(r"^([A-Za-z_][A-Za-z0-9_.]*)(?:\[([0-9,]+)\])?$")


def _posteriordb() -> object:
    """datasets/posteriordb.py by its path: it needs nothing beyond the standard library."""
    spec = importlib.util.spec_from_file_location("pdb_files", ROOT / "datasets" / "posteriordb.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def stan_values(draws: dict[str, list[float]], i: int) -> dict[str, object]:
    """Draw ``i`` of the thinned reference as Stan's parameter values (vectors from their
    1-based elements)."""
    sites: dict[str, dict[tuple[int, ...], float]] = {}
    for element, values in draws.items():
        m = _ELEMENT.match(element)
        index = tuple(int(k) - 1 for k in m.group(2).split(",")) if m.group(2) else ()
        sites.setdefault(m.group(1), {})[index] = values[i]
    out: dict[str, object] = {}
    for name, elements in sites.items():
        if () in elements:
            out[name] = elements[()]
            continue
        shape = tuple(max(k[d] for k in elements) + 1 for d in range(len(next(iter(elements)))))
        arr = np.zeros(shape)
        for k, v in elements.items():
            arr[k] = v
        out[name] = arr.tolist()
    return out


def gp_pois_regr_parameters(values: dict[str, object], data: dict[str, object]) -> dict:
    """gp_pois_regr's reference holds the transformed parameter ``f = L f_tilde`` (L the
    Cholesky factor of the program's covariance, jitter 1e-10 included); Stan's parameter is
    ``f_tilde = L^-1 f``."""
    x = np.asarray(data["x"], dtype=float)
    alpha, rho = float(values["alpha"]), float(values["rho"])
    cov = alpha**2 * np.exp(-0.5 * (x[:, None] - x[None, :]) ** 2 / rho**2) + 1e-10 * np.eye(len(x))
    f_tilde = np.linalg.solve(np.linalg.cholesky(cov), np.asarray(values["f"], dtype=float))
    return {"rho": rho, "alpha": alpha, "f_tilde": f_tilde.tolist()}


# Stan programs whose reference draws name transformed parameters: the map to Stan's parameters
TO_PARAMETERS = {
    "gp_pois_regr": gp_pois_regr_parameters,
    # the reference holds theta = mu + tau theta_trans, Stan's parameter is theta_trans
    "eight_schools_noncentered": lambda v, data: {
        "theta_trans": ((np.asarray(v["theta"]) - v["mu"]) / v["tau"]).tolist(),
        "mu": v["mu"],
        "tau": v["tau"],
    },
}


def main(argv: list[str] | None = None) -> int:
    import stan

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("posteriors", nargs="*", help="default: every vendored posterior")
    args = parser.parse_args(argv)
    pdb = _posteriordb()
    names = args.posteriors or pdb.vendored_posteriors()
    OUT.mkdir(exist_ok=True)
    versions = {d: version(d) for d in ("pystan", "httpstan")}
    for name in names:
        ref = pdb.posteriordb_reference(name)
        data = pdb.posteriordb_data(ref["data"])
        fit = stan.build(pdb.stan_program(ref["model"]), data=data, random_seed=1)
        n = len(next(iter(ref["thinned"].values())))
        picks = np.linspace(0, n - 1, POINTS).round().astype(int).tolist()
        rows = []
        for i in picks:
            values = stan_values(ref["thinned"], i)
            if ref["model"] in TO_PARAMETERS:
                values = TO_PARAMETERS[ref["model"]](values, data)
            u = fit.unconstrain_pars(values)
            rows.append(
                {
                    "draw": i,
                    "values": values,
                    "unconstrained": list(map(float, u)),
                    "log_density": float(fit.log_prob(u, adjust_transform=False)),
                    # with the Jacobian of the unconstraining transforms (pystan has no other)
                    "gradient_adjusted": list(map(float, fit.grad_log_prob(u))),
                }
            )
        out = {
            "about": "Stan's log density (adjust_transform=False) at posteriordb reference draws",
            "versions": versions,
            "model": ref["model"],
            "snapshot": ref["snapshot"],
            "points": rows,
        }
        (OUT / f"{name}.json").write_text(json.dumps(out, indent=1) + "\n")
        print(f"{name}: {len(rows)} points", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
