"""posteriordb's data, Stan programs and reference posteriors, vendored offline.

posteriordb (stan-dev/posteriordb, BSD-3-Clause; Magnusson, Bürkner & Vehtari 2022) collects
posteriors as a Stan program, its data and, for some, a reference posterior: 10 chains of 1,000
draws from long Stan runs. ``benchmarks/posteriordb_vendor.py`` copies what the zoo uses into
``datasets/posteriordb/``: ``data/`` (the data as posteriordb gives it), ``stan/`` (the programs)
and ``reference/`` (each parameter's moments with Monte-Carlo standard errors, and a thinned set
of 200 draws). Each data set's own source and licence: datasets/README.md.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent / "posteriordb"


def _read(kind: str, name: str, suffix: str = ".json") -> str:
    path = HERE / kind / f"{name}{suffix}"
    if not path.is_file():
        known = sorted(p.stem for p in (HERE / kind).glob(f"*{suffix}"))
        raise ValueError(f"posteriordb has no vendored {kind} {name!r}; vendored: {known}")
    return path.read_text(encoding="utf-8")


@cache
def posteriordb_data(name: str) -> dict[str, Any]:
    """A posteriordb data set (``"kidiq"``) as its JSON gives it: numbers and lists."""
    return json.loads(_read("data", name))


@cache
def posteriordb_reference(posterior: str) -> dict[str, Any]:
    """A reference posterior (``"kidiq-kidscore_momiq"``): ``parameters`` maps each Stan
    parameter element (``"beta[1]"``) to its ``mean``, ``sd``, ``mean_sq`` (E[x^2]), ``var_sq``
    (Var[x^2]), ``q05``/``q50``/``q95``, each with a ``*_mcse``, and ``ess_bulk``, ``r_hat``;
    ``thinned`` maps it to 200 draws; ``snapshot`` names the posteriordb commit."""
    return json.loads(_read("reference", posterior))


def stan_program(model: str) -> str:
    """A posteriordb Stan program's code (``"kidscore_momiq"``)."""
    return _read("stan", model, ".stan")


def vendored_posteriors() -> list[str]:
    """The reference posteriors vendored here."""
    return sorted(p.stem for p in (HERE / "reference").glob("*.json"))
