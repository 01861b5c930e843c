"""What every posteriordb translation shares: Stan's flat prior, the reference as truth, and
the registrar."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyro.distributions as dist
import torch
from pyro.distributions import constraints
from torch.distributions import biject_to, transform_to
from torch.distributions.transforms import Transform

import zoo
from zoo_datasets.posteriordb import posteriordb_data, posteriordb_reference, stan_program
from zoo_inference.peers.stan import StanProgram, add_program

SOURCE = "posteriordb reference posterior"
_ELEMENT = re.compile(r"^([A-Za-z_][A-Za-z0-9_.]*)(?:\[([0-9,]+)\])?$")


@dataclass(frozen=True)
class Tolerance:
    """How closely a translation matches Stan at the reference draws where round-off is out of
    reach (an ODE solver's error): the sd of log joint - Stan's log density, the gradient's
    relative and absolute tolerance, and the measured reason."""

    log_density_sd: float
    gradient: float
    reason: str


# by zoo name, the posteriors checked to a declared tolerance
# (tests/zoo/models/test_posteriordb.py); the others to round-off
TOLERANCES: dict[str, Tolerance] = {}
# by zoo name, the posteriors whose NUTS check (tests/zoo/models/test_posteriordb.py, slow) is
# expected to fail, and the measured reason
NUTS_FAILURES: dict[str, str] = {}
# by zoo name, the posteriors whose density cannot be traced, and why: it runs a chain at a time
# (tests/inference/test_density.py expects that of them, and tracing of every other model)
PER_CHAIN: dict[str, str] = {}
# by zoo name, the posteriors whose model draws a parameter in other coordinates than Stan's
# (a bound that depends on another parameter): the model's latent values at Stan's values
FROM_STAN: dict[str, Callable[[dict[str, torch.Tensor]], dict[str, torch.Tensor]]] = {}


def flat(support: constraints.Constraint, *shape: int) -> dist.ImproperUniform:
    """Stan's implicit prior on a parameter without a prior statement: flat on its support."""
    return dist.ImproperUniform(support, (), tuple(shape))


class _StanPositiveOrdered(type(constraints.positive_ordered_vector)):  # type: ignore[misc]  # torch exports the instance, not its class
    """Stan's ``positive_ordered``: Pyro's constraint, with Stan's bijection (below)."""


stan_positive_ordered = _StanPositiveOrdered()


class StanPositiveOrderedTransform(Transform):
    """Stan's ``positive_ordered`` transform, y_1 = exp(x_1), y_k = y_{k-1} + exp(x_k): Pyro's
    bijection to ``positive_ordered_vector`` is another (exp of its ordered transform), so the
    unconstrained gradients would not be Stan's."""

    domain = constraints.real_vector
    codomain = stan_positive_ordered
    bijective = True

    def __eq__(self, other: object) -> bool:
        return isinstance(other, StanPositiveOrderedTransform)

    def __hash__(self) -> int:
        return hash(type(self))

    def _call(self, x: torch.Tensor) -> torch.Tensor:
        return x.exp().cumsum(-1)

    def _inverse(self, y: torch.Tensor) -> torch.Tensor:
        return torch.cat([y[..., :1], y.diff(dim=-1)], -1).log()

    def log_abs_det_jacobian(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return x.sum(-1)


biject_to.register(_StanPositiveOrdered)(lambda _: StanPositiveOrderedTransform())
transform_to.register(_StanPositiveOrdered)(lambda _: StanPositiveOrderedTransform())


def reference_truth(posterior: str, params: tuple[str, ...]) -> zoo.GroundTruth:
    """The reference posterior's mean, sd, the mean's standard error and Var[x²] per site, from
    Stan's elements (``beta[1]`` .. ``beta[K]``, 1-based) gathered into arrays of the sites'
    shapes."""
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
    out: dict[str, dict[str, np.ndarray]] = {"mean": {}, "sd": {}, "mean_mcse": {}, "var_sq": {}}
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
        var_sq=out["var_sq"],
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
    tolerance: Tolerance | None = None,
    hidden: Callable[[], dict[str, tuple[Any, Any, Any]]] | None = None,
    nuts_fails: str | None = None,
    per_chain: str | None = None,
    from_stan: Callable[[dict[str, torch.Tensor]], dict[str, torch.Tensor]] | None = None,
) -> Any:
    """Register posteriordb's ``name`` (``"kidiq-kidscore_momiq"``) as ``pdb_kidiq_kidscore_momiq``:
    ``model`` on ``data()``, its reference as the truth on that data alone. ``tolerance``: how
    closely it matches Stan's log density, where not to round-off. ``hidden`` gives more of the
    truth, ``{site: (mean, sd, mean's standard error)}``, for what the reference has no draws of
    (an HMM's summed-out states, exact given each reference draw). ``nuts_fails``: why the zoo's
    NUTS, at its defaults, fails the check against the reference (measured). ``per_chain``: why
    its density cannot be traced into one graph for all chains. ``from_stan``: the model's
    latent values at Stan's parameter values, where it draws a parameter in other coordinates."""
    ref = posteriordb_reference(name)
    doc = (
        f"{story}\n\n    posteriordb: {name} (data {ref['data']}, Stan program {ref['model']});"
        f" keywords: {', '.join(ref['keywords'])}; source: {ref['urls']} ({ref['references']}).\n"
        f"\n{model.__doc__ or ''}"
    )

    def truth(**given: Any) -> zoo.GroundTruth | None:
        """The reference, on the posterior's own data only."""
        same = all(_same(given.get(k), v) for k, v in data().items())
        if not same:
            return None
        truth = reference_truth(name, params)
        more = hidden() if hidden else {}
        if not more:
            return truth
        return zoo.GroundTruth(
            mean={**truth.mean, **{k: v[0] for k, v in more.items()}},
            sd={**truth.sd, **{k: v[1] for k, v in more.items()}},
            mean_se={**truth.mean_se, **{k: v[2] for k, v in more.items()}},
            var_sq=truth.var_sq,
            source=f"{truth.source}; {', '.join(more)}: exact given each of its thinned draws",
        )

    zoo_name = f"pdb_{name.replace('-', '_')}"
    if tolerance is not None:
        TOLERANCES[zoo_name] = tolerance
    if nuts_fails is not None:
        NUTS_FAILURES[zoo_name] = nuts_fails
    if per_chain is not None:
        PER_CHAIN[zoo_name] = per_chain
    if from_stan is not None:
        FROM_STAN[zoo_name] = from_stan

    def to_latent(values: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        if from_stan is None:
            return values
        given = {k: torch.as_tensor(v, dtype=torch.float64) for k, v in values.items()}
        return {k: v.numpy() for k, v in from_stan(given).items()}

    add_program(
        zoo_name,
        StanProgram(
            code=stan_program(ref["model"]),
            data=lambda: posteriordb_data(ref["data"]),
            matches=lambda given: all(_same(given.get(k), v) for k, v in data().items()),
            to_latent=to_latent,
        ),
    )
    return zoo.register(
        zoo_name,
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
