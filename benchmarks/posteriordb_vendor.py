"""Vendor posteriordb's data, Stan programs and reference posteriors into datasets/posteriordb/.

posteriordb (stan-dev/posteriordb, BSD-3-Clause) holds each reference posterior as 10 chains of
1,000 draws from long Stan runs (25 MB zipped for all). For each posterior named (default: each
one vendored already, refreshed) this writes, from a checkout or bare clone of its repository:

- ``data/<data name>.json``: the data, as posteriordb gives it;
- ``stan/<model name>.stan``: the Stan program (Stan's log density checks the zoo's translation:
  benchmarks/stan_log_densities.py);
- ``reference/<posterior>.json``: per parameter element the mean, sd, E[x^2], Var[x^2] and the
  5/50/95% quantiles, each with its Monte-Carlo standard error from ArviZ (ESS-based: ``mcse``),
  the bulk ESS and R-hat, and ``THINNED`` draws (every chain thinned evenly) for the tests.

Run: ``python benchmarks/posteriordb_vendor.py PATH_TO_POSTERIORDB [POSTERIOR ...]`` (a bare
git directory is read at HEAD); ``--list`` prints the snapshot's posteriors with reference
draws. The snapshot's commit is recorded in every reference file.
"""

from __future__ import annotations

import argparse
import io
import json
import subprocess
import sys
import zipfile
from pathlib import Path

import arviz as az
import numpy as np

OUT = Path(__file__).resolve().parents[1] / "datasets" / "posteriordb"
DB = "posterior_database"
THINNED = 200  # draws kept for the tests: 20 a chain


class Snapshot:
    """posteriordb's files, from a work tree or (``git show HEAD:path``) a bare clone."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.bare = not (root / DB).is_dir()
        self.commit = self._git("rev-parse", "HEAD").decode().strip()

    def _git(self, *args: str) -> bytes:
        return subprocess.run(
            ["git", "-C", str(self.root), *args], check=True, capture_output=True
        ).stdout

    def read(self, path: str) -> bytes:
        if self.bare:
            return self._git("show", f"HEAD:{DB}/{path}")
        return (self.root / DB / path).read_bytes()

    def references(self) -> list[str]:
        """The posteriors with reference draws."""
        folder = f"{DB}/reference_posteriors/draws/draws/"
        if self.bare:
            names = self._git("ls-tree", "--name-only", "HEAD", folder).decode().split()
        else:
            names = [p.name for p in (self.root / folder).iterdir()]
        return sorted(Path(n).name.removesuffix(".json.zip") for n in names)

    def json(self, path: str) -> object:
        raw = self.read(path)
        if path.endswith(".zip"):
            with zipfile.ZipFile(io.BytesIO(raw)) as z:
                (name,) = z.namelist()
                raw = z.read(name)
        return json.loads(raw)


def moments(x: np.ndarray) -> dict[str, float]:
    """One parameter element's reference moments, ``x`` shaped (chain, draw), each with its
    Monte-Carlo standard error (ArviZ's, from the effective sample size)."""
    sq = x**2
    sd_sq = float(np.std(sq, ddof=1))
    out = {
        "mean": float(np.mean(x)),
        "mean_mcse": float(az.mcse(x, method="mean")),
        "sd": float(np.std(x, ddof=1)),
        "sd_mcse": float(az.mcse(x, method="sd")),
        "mean_sq": float(np.mean(sq)),
        "mean_sq_mcse": float(az.mcse(sq, method="mean")),
        # Var[x^2] = sd(x^2)^2: its standard error by the delta method, 2 sd se(sd)
        "var_sq": sd_sq**2,
        "var_sq_mcse": 2.0 * sd_sq * float(az.mcse(sq, method="sd")),
        "ess_bulk": float(az.ess(x, method="bulk")),
        "r_hat": float(az.rhat(x)),
    }
    for q in (0.05, 0.5, 0.95):
        key = f"q{round(q * 100):02d}"
        out[key] = float(np.quantile(x, q))
        out[f"{key}_mcse"] = float(az.mcse(x, method="quantile", prob=q))
    return out


def vendor(snap: Snapshot, posterior: str) -> None:
    info = snap.json(f"posteriors/{posterior}.json")
    data_name, model_name = info["data_name"], info["model_name"]
    (OUT / "data").mkdir(parents=True, exist_ok=True)
    (OUT / "stan").mkdir(parents=True, exist_ok=True)
    (OUT / "reference").mkdir(parents=True, exist_ok=True)
    data = snap.json(f"data/data/{data_name}.json.zip")
    (OUT / "data" / f"{data_name}.json").write_text(json.dumps(data) + "\n")
    program = snap.read(f"models/stan/{model_name}.stan").decode()
    (OUT / "stan" / f"{model_name}.stan").write_text(program)
    chains = snap.json(f"reference_posteriors/draws/draws/{posterior}.json.zip")
    names = list(chains[0])
    draws = {n: np.array([c[n] for c in chains], dtype=float) for n in names}  # (chain, draw)
    per_chain = THINNED // len(chains)
    step = draws[names[0]].shape[1] // per_chain
    reference = {
        "posterior": posterior,
        "model": model_name,
        "data": data_name,
        "keywords": info.get("keywords", []),
        "urls": info.get("urls"),
        "references": info.get("references"),
        "snapshot": f"stan-dev/posteriordb@{snap.commit}",
        "chains": len(chains),
        "draws_per_chain": int(draws[names[0]].shape[1]),
        "parameters": {n: moments(draws[n]) for n in names},
        "thinned": {n: draws[n][:, ::step].ravel().tolist() for n in names},
    }
    (OUT / "reference" / f"{posterior}.json").write_text(json.dumps(reference, indent=1) + "\n")
    print(f"{posterior}: {len(names)} parameters, {len(reference['thinned'][names[0]])} draws")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("snapshot", type=Path, help="a posteriordb checkout or bare clone")
    parser.add_argument("posteriors", nargs="*", help="default: every vendored one, refreshed")
    parser.add_argument("--list", action="store_true", help="the snapshot's reference posteriors")
    args = parser.parse_args(argv)
    snap = Snapshot(args.snapshot)
    if args.list:
        print("\n".join(snap.references()))
        return 0
    vendored = sorted(p.stem for p in (OUT / "reference").glob("*.json"))
    for posterior in args.posteriors or vendored:
        vendor(snap, posterior)
    return 0


if __name__ == "__main__":
    sys.exit(main())
