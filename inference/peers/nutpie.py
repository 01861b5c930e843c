"""nutpie (pymc-devs/nutpie, MIT), the peer sampler that runs on any target: its NUTS with its
own adaptation (a diagonal mass matrix from draws and gradients, or its low-rank modification)
on the zoo's own log density, through nutpie's Python-function model (``from_pyfunc``).

No port is needed and none can drift: the density nutpie samples is the zoo's, to the last
digit, so the leaderboard's figures that count gradients (b² against gradients, ESS per
gradient) compare the algorithms alone. Its wall time is not nutpie's usual one: each gradient
is a Python call for one point, where nutpie's compiled PyMC or Stan models call native code.

Each chain runs in a ``nutpie.sample`` call of its own, from the zoo's starting point for it
and with a seed drawn from the chain group's generator, so the draws repeat by seed whatever
nutpie's threads do. A chain's point is evaluated in its row of the group's batch (the other
rows held at their starts): a call's cost is mostly fixed, so a group of two chains costs
little more than one.
"""

from __future__ import annotations

import importlib
from typing import Any

import numpy as np
import torch

from zoo_inference.results import ZooError
from zoo_inference.samplers.base import Density, Samples


def nutpie_module() -> tuple[Any, Any]:
    """nutpie and its ``from_pyfunc``, imported when the engine runs, or a clear error."""
    try:
        return importlib.import_module("nutpie"), importlib.import_module("nutpie.compiled_pyfunc")
    except ImportError:
        raise ZooError(
            "the nutpie engine needs nutpie: pip install 'nutpie>=0.13' (the peers extra)"
        ) from None


def nutpie_sampler(
    density: Density,
    theta0: torch.Tensor,
    *,
    num_samples: int,
    warmup: int,
    gen: torch.Generator,
    progress: bool = False,
    target_accept: float = 0.8,
    max_tree_depth: int = 10,
    low_rank: bool = False,
) -> Samples:
    """nutpie's NUTS from each row of ``theta0``: ``warmup`` tuning iterations (nutpie's
    ``tune``), then ``num_samples`` draws. ``low_rank``: nutpie's low-rank modified mass
    matrix instead of its diagonal one. A point where the density is -inf is a divergence to
    nutpie."""
    nutpie, pyfunc = nutpie_module()
    chains, dim = theta0.shape
    seeds = torch.randint(0, 2**62, (chains,), generator=gen).tolist()
    settings = {
        "draws": num_samples,
        "tune": warmup,
        "low_rank_modified_mass_matrix": low_rank,
        "target_accept": target_accept,
        "maxdepth": max_tree_depth,
    }
    settings["progress_bar"] = progress  # nutpie's own bar, a chain at a time
    runs = [_chain(nutpie, pyfunc, density, theta0, c, seeds[c], settings) for c in range(chains)]
    draws = torch.stack([r[0] for r in runs])
    stats = {k: torch.stack([r[1][k] for r in runs]) for k in runs[0][1]}
    info = {
        "step_size": [float(r[1]["step_size"][-1]) if num_samples else None for r in runs],
        "metric": "low-rank" if low_rank else "diagonal",
        "nutpie": nutpie.__version__,
    }
    return Samples(draws, stats, gradient_evals=sum(r[2] for r in runs), info=info)


STATS = {  # the zoo's name of a per-draw statistic: nutpie's name, its dtype (None: the draws')
    "n_steps": ("n_steps", torch.long),
    "diverging": ("diverging", torch.bool),
    "accept": ("mean_tree_accept", None),
    "tree_depth": ("depth", torch.long),
    "step_size": ("step_size", None),
}


def _chain(
    nutpie: Any,
    pyfunc: Any,
    density: Density,
    theta0: torch.Tensor,
    c: int,
    seed: int,
    settings: dict[str, Any],
) -> tuple[torch.Tensor, dict[str, torch.Tensor], int]:
    """Chain ``c`` of the group: its draws, statistics and density calls."""
    dtype, dim = theta0.dtype, theta0.shape[1]
    points = theta0.clone()  # the group's other rows stay at their starts
    calls = 0

    def logp(x: np.ndarray, **_: Any) -> tuple[float, np.ndarray]:
        nonlocal calls
        calls += 1
        points[c] = torch.as_tensor(x, dtype=dtype)
        value, grad = density(points)
        return float(value[c]), grad[c].double().numpy()  # -inf: to nutpie a divergence

    def expand(x: np.ndarray, **_: Any) -> dict[str, np.ndarray]:
        return {"theta": np.asarray(x, dtype=np.float64)}

    start = theta0[c].double().numpy()
    model = pyfunc.from_pyfunc(
        dim,
        lambda: logp,
        lambda *_, **__: expand,
        [np.dtype("float64")],
        [(dim,)],
        ["theta"],
        make_initial_point_fn=lambda _seed: start.copy(),
    )
    trace = nutpie.sample(model, chains=1, cores=1, seed=seed, **settings)
    draws = torch.as_tensor(trace.posterior["theta"].values[0], dtype=dtype)
    s = trace.sample_stats
    stats = {
        name: torch.as_tensor(np.asarray(s[key].values[0])).to(kind or dtype)
        for name, (key, kind) in STATS.items()
    }
    return draws, stats, calls
