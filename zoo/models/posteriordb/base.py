"""What every posteriordb translation shares: Stan's flat prior, the reference as truth, and
the registrar."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import numpy as np
import pyro.distributions as dist
import torch
from pyro.distributions import constraints

import zoo
from zoo_datasets.posteriordb import posteriordb_reference

SOURCE = "posteriordb reference posterior"
# zoo name -> why nuts at its default size is known to fail the reference check (its measured
# R-hat or divergences): tests/zoo/models/test_posteriordb.py expects those failures
NUTS_FAILS: dict[str, str] = {}
_ELEMENT = re.compile(r"^([A-Za-z_][A-Za-z0-9_.]*)(?:\[([0-9,]+)\])?$")


def flat(support: constraints.Constraint, *shape: int) -> dist.ImproperUniform:
    """Stan's implicit prior on a parameter without a prior statement: flat on its support."""
    return dist.ImproperUniform(support, (), tuple(shape))


def reference_truth(posterior: str, params: tuple[str, ...]) -> zoo.GroundTruth:
    """The reference posterior's mean, sd and the mean's standard error per site, from Stan's
    elements (``beta[1]`` .. ``beta[K]``, 1-based) gathered into arrays of the sites' shapes."""
    ref = posteriordb_reference(posterior)
    found: dict[str, dict[tuple[int, ...], dict[str, float]]] = {}
    for element, values in ref["parameters"].items():
        m = _ELEMENT.match(element)
        if m is None:
            raise ValueError(f"{posterior}: unreadable parameter name {element!r}")
        index = tuple(int(i) - 1 for i in m.group(2).split(",")) if m.group(2) else ()
        found.setdefault(m.group(1), {})[index] = values
    if sorted(found) != sorted(params):
        raise ValueError(f"{posterior}: reference parameters {sorted(found)} != {sorted(params)}")
    out: dict[str, dict[str, np.ndarray]] = {"mean": {}, "sd": {}, "mean_mcse": {}}
    for site, elements in found.items():
        shape = tuple(max(i[d] for i in elements) + 1 for d in range(len(next(iter(elements)))))
        for key in out:
            arr = np.full(shape, np.nan)
            for index, values in elements.items():
                arr[index] = values[key]
            out[key][site] = arr
    return zoo.GroundTruth(
        mean=out["mean"],
        sd=out["sd"],
        mean_se=out["mean_mcse"],
        source=f"{SOURCE} {posterior} ({ref['snapshot']}; 10 chains x 1,000 draws)",
    )


def posterior(
    name: str,
    model: Callable[..., Any],
    data: Callable[[], dict[str, Any]],
    *,
    params: tuple[str, ...],
    math: list[str],
    story: str,
    nuts_fails: str | None = None,
) -> Any:
    """Register posteriordb's ``name`` (``"kidiq-kidscore_momiq"``) as ``pdb_kidiq_kidscore_momiq``:
    ``model`` on ``data()``, its reference as the truth on that data alone. ``nuts_fails``: why
    nuts at its default size fails the reference check on it (:data:`NUTS_FAILS`)."""
    ref = posteriordb_reference(name)
    doc = (
        f"{story}\n\n    posteriordb: {name} (data {ref['data']}, Stan program {ref['model']});"
        f" keywords: {', '.join(ref['keywords'])}; source: {ref['urls']} ({ref['references']}).\n"
        f"\n{model.__doc__ or ''}"
    )

    def truth(**given: Any) -> zoo.GroundTruth | None:
        """The reference, on the posterior's own data only."""
        same = all(_same(given.get(k), v) for k, v in data().items())
        return reference_truth(name, params) if same else None

    if nuts_fails is not None:
        NUTS_FAILS[f"pdb_{name.replace('-', '_')}"] = nuts_fails
    return zoo.register(
        f"pdb_{name.replace('-', '_')}",
        model=model,
        data=lambda seed=0: data(),
        ground_truth=truth,
        params=params,
        opt_in=True,
        seed_ref=f"beyond the seeds: posteriordb, {name}",
        math=math,
        doc=doc,
    )


def _same(a: Any, b: Any) -> bool:
    if torch.is_tensor(b):
        return torch.is_tensor(a) and a.shape == b.shape and torch.equal(a.to(b.dtype), b)
    return a == b
