"""The zoo's NUTS-family engines against peer tools (NumPyro, PyMC, nutpie, BlackJAX, plain
Pyro) on the same models and data: effective draws per second and per gradient evaluation, and
the time to a given number of effective draws.

    python benchmarks/compare_peers.py [--quick] [--models a,b] [--engines nuts,chees]
        [--peers numpyro,pymc,nutpie,numpyro-vec,blackjax-nuts,blackjax-chees,nutpie-lowrank,pyro]
        [--draws N] [--warmup N] [--seed S] [--warm] [--out FILE]
    python benchmarks/compare_peers.py --time-to-ess 400 [--models ...] [--peers ...]

Matched runs (:data:`MATCHED`, the runners in ``peer_samplers.py``) put a peer on the zoo
engine's own terms: its chain count (32), warmup and draws, and its dense metric where the
model registers one: NumPyro's NUTS with ``chain_method="vectorized"`` and BlackJAX's NUTS
against ``nuts``, BlackJAX's ChEES (diagonal metric) against ``chees``; each gives a ``RATIO
matched <model>-<engine>-<peer>`` line. ``nutpie-lowrank`` is nutpie at the peers' default
sizes with its low-rank mass matrix. ``--warm`` runs every cell twice in its process and
reports the second run's wall time too. ``--time-to-ess N`` writes, instead of the tables, each
tool's smallest budget (``LADDERS``) whose cold run reaches min bulk ESS >= N with every R-hat
<= 1.01, and ``RATIO time-to-N <model>-<engine>`` lines (fastest peer's wall ÷ the zoo's).

Peers need the extra ``peers`` (``pip install -e ".[peers]"``); a missing one is skipped with a
message, as is a zoo engine the zoo does not have. Every (model, tool) cell runs in a fresh
Python process (no tool's threads or forks meet another's); its wall time covers model building,
compilation, warmup and sampling (imports excluded, the zoo's first-use imports too:
``import_zoo``). ESS is ``arviz.ess`` (bulk) of the draws
arranged (chain, draw), computed here the same way for every tool; a cell's figure is the minimum
over every element of the model's continuous sample sites. Prints one line per zoo engine and
model, ``RATIO <model>-<engine> <zoo ESS/s / best peer ESS/s>`` (higher is better), and writes
the tables with the machine's details to ``--out`` (default benchmarks/results/compare_peers.md).

Sizes: peers draw 2 chains x (1000 warmup + 1000 draws), their documented defaults for a run;
the zoo engines run at their own defaults (with the options the model registered). ``--quick``
runs everyone at 200 + 200; ``--draws``/``--warmup`` set every tool's sizes. Metrics: the
peers' NUTS adapt a diagonal one (their defaults); the zoo's ``chees`` a dense one up to 100
dimensions, and its ``nuts`` a dense one where the model asks (logistic_regression does), so
on that model the zoo's figures are under a dense metric against the peers' diagonal.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import importlib.util
import inspect
import json
import math
import os
import platform
import subprocess
import sys
import tempfile
import time
import warnings
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np
from engine_specs import parse_engine, split_engines  # a file beside this one

ROOT = Path(__file__).resolve().parents[1]
MODELS = ("eight_schools_noncentered", "logistic_regression", "gaussian_mixture", "naive_bayes")
PEERS = ("numpyro", "pymc", "nutpie", "pyro")
# peers run at the zoo engine's chain count and sizes (and its dense metric where it has one):
# the matched runs, each against the zoo engine named here
MATCHED = {"numpyro-vec": "nuts", "blackjax-nuts": "nuts", "blackjax-chees": "chees"}
# peers at the defaults' sizes with another adaptation than their defaults
VARIANTS = ("nutpie-lowrank",)
DEFAULT_PEERS = ("numpyro", "pymc", "nutpie", *MATCHED, *VARIANTS)
CHAINS = 2
PEER_DEFAULT_SIZES = (1000, 1000)  # (warmup, draws): the peers' documented defaults
QUICK_SIZES = (200, 200)
# the zoo's engines report their gradient count under one of these keys (first found wins)
GRADIENT_KEYS = ("gradient_evals", "num_gradients", "grad_evals")
VERSIONED = (
    "torch", "pyro-ppl", "numpyro", "jax", "jaxlib", "pymc", "pytensor", "nutpie", "arviz", "numpy",
)  # fmt: skip
# peer -> modules it needs; installing it: pip install -e ".[peers]"
PEER_MODULES = {
    "numpyro": ("numpyro", "jax"),
    "pymc": ("pymc",),
    "nutpie": ("nutpie", "pymc"),
    "pyro": ("pyro",),
    "numpyro-vec": ("numpyro", "jax"),
    "blackjax-nuts": ("blackjax", "numpyro", "jax"),
    "blackjax-chees": ("blackjax", "optax", "numpyro", "jax"),
    "nutpie-lowrank": ("nutpie", "pymc"),
}


# ----------------------------------------------------------------------------- data and models
def model_data(name: str) -> dict[str, Any]:
    """The zoo's default data of model ``name`` as numpy arrays, with the model function's
    default arguments (prior settings) filled in where the data leave them out."""
    import zoo

    entry = zoo.get_model(name)
    data = dict(entry.load_data())
    for arg, p in inspect.signature(entry.model).parameters.items():
        if arg not in data and p.default is not inspect.Parameter.empty:
            data[arg] = p.default
    return {k: v.numpy() if hasattr(v, "numpy") else v for k, v in data.items()}


def continuous_sites(name: str) -> tuple[str, ...]:
    """The model's continuous sample sites (the parameters every tool samples)."""
    import zoo

    return tuple(zoo.get_model(name).structure.continuous)


def numpyro_model(name: str, d: dict[str, Any]) -> Any:
    """The zoo model ``name`` written in NumPyro: same priors, likelihood and data; discrete
    assignments marginalised by logsumexp."""
    import jax.numpy as jnp
    import numpyro
    import numpyro.distributions as dist
    from jax.scipy.special import logsumexp

    if name == "eight_schools_noncentered":
        from zoo.models.hierarchical import MU_SCALE, TAU_SCALE

        def model() -> None:
            mu = numpyro.sample("mu", dist.Normal(0.0, MU_SCALE))
            tau = numpyro.sample("tau", dist.HalfCauchy(TAU_SCALE))
            with numpyro.plate("schools", len(d["y"])):
                eta = numpyro.sample("eta", dist.Normal(0.0, 1.0))
                numpyro.sample("y", dist.Normal(mu + tau * eta, d["sigma"]), obs=d["y"])

    elif name == "logistic_regression":

        def model() -> None:
            X, y = d["X"], d["y"]
            alpha = numpyro.sample("alpha", dist.Normal(0.0, d["intercept_sd"]))
            beta = numpyro.sample(
                "beta", dist.Normal(0.0, d["prior_sd"]).expand([X.shape[1]]).to_event(1)
            )
            with numpyro.plate("data", len(y)):
                numpyro.sample("y", dist.Bernoulli(logits=alpha + X @ beta), obs=y)

    elif name == "gaussian_mixture":

        def model() -> None:
            y, K = d["y"], d["K"]
            weights = numpyro.sample("weights", dist.Dirichlet(jnp.ones(K)))
            # SortedNormal(3, 2; K): iid Normal(3, 2) restricted to ordered vectors
            locs = numpyro.sample(
                "locs", dist.ImproperUniform(dist.constraints.ordered_vector, (), (K,))
            )
            numpyro.factor("locs_prior", dist.Normal(3.0, 2.0).log_prob(locs).sum())
            scales = numpyro.sample(
                "scales", dist.LogNormal(math.log(0.5), 1.0).expand([K]).to_event(1)
            )
            comp = dist.Normal(locs, scales).log_prob(y[:, None])  # (N, K)
            numpyro.factor("y", logsumexp(jnp.log(weights) + comp, axis=-1).sum())

    elif name == "naive_bayes":

        def model() -> None:
            X, y, X_new, C = d["X"], d["y"], d["X_new"], d["C"]
            D = X.shape[1]
            pi = numpyro.sample("pi", dist.Dirichlet(jnp.full(C, float(d["alpha"]))))
            tau = numpyro.sample("tau", dist.Gamma(d["a0"], d["b0"]).expand([C, D]).to_event(2))
            mu = numpyro.sample("mu", dist.Normal(d["m0"], (d["kappa0"] * tau) ** -0.5).to_event(2))
            with numpyro.plate("flowers", len(y)):
                numpyro.sample("y", dist.Categorical(pi), obs=y)
                numpyro.sample("X", dist.Normal(mu[y], tau[y] ** -0.5).to_event(1), obs=X)
            # the new flowers' labels summed out: log sum_c pi_c prod_j N(x_j | mu_cj, tau_cj)
            lp = jnp.log(pi) + dist.Normal(mu, tau**-0.5).log_prob(X_new[:, None, :]).sum(-1)
            numpyro.factor("X_new", logsumexp(lp, axis=-1).sum())

    else:
        raise ValueError(f"no NumPyro version of {name!r}")
    return model


def pymc_model(name: str, d: dict[str, Any]) -> Any:
    """The zoo model ``name`` written in PyMC (also what nutpie compiles): same priors,
    likelihood and data; discrete assignments marginalised by logsumexp."""
    import pymc as pm
    import pytensor.tensor as pt

    def normal_logp(x: Any, mu: Any, tau: Any) -> Any:
        return 0.5 * (pt.log(tau) - math.log(2 * math.pi)) - 0.5 * tau * (x - mu) ** 2

    with pm.Model() as model:
        if name == "eight_schools_noncentered":
            from zoo.models.hierarchical import MU_SCALE, TAU_SCALE

            mu = pm.Normal("mu", 0.0, MU_SCALE)
            tau = pm.HalfCauchy("tau", TAU_SCALE)
            eta = pm.Normal("eta", 0.0, 1.0, shape=len(d["y"]))
            pm.Normal("y", mu + tau * eta, d["sigma"], observed=d["y"])
        elif name == "logistic_regression":
            X, y = d["X"], d["y"]
            alpha = pm.Normal("alpha", 0.0, d["intercept_sd"])
            beta = pm.Normal("beta", 0.0, d["prior_sd"], shape=X.shape[1])
            pm.Bernoulli("y", logit_p=alpha + pt.dot(X, beta), observed=y)
        elif name == "gaussian_mixture":
            y, K = d["y"], d["K"]
            weights = pm.Dirichlet("weights", a=np.ones(K))
            # SortedNormal(3, 2; K); the ordered transform needs an ordered start (PyMC's docs)
            locs = pm.Normal(
                "locs",
                3.0,
                2.0,
                shape=K,
                transform=pm.distributions.transforms.ordered,
                initval=np.linspace(1.0, 5.0, K),
            )
            scales = pm.LogNormal("scales", math.log(0.5), 1.0, shape=K)
            comp = normal_logp(y[:, None], locs, scales**-2)  # (N, K)
            pm.Potential("y", pm.math.logsumexp(pt.log(weights) + comp, axis=-1).sum())
        elif name == "naive_bayes":
            X, y, X_new, C = d["X"], d["y"], d["X_new"], d["C"]
            D = X.shape[1]
            pi = pm.Dirichlet("pi", a=np.full(C, float(d["alpha"])))
            tau = pm.Gamma("tau", alpha=d["a0"], beta=d["b0"], shape=(C, D))
            mu = pm.Normal("mu", d["m0"], sigma=(d["kappa0"] * tau) ** -0.5, shape=(C, D))
            pm.Categorical("y", p=pi, observed=y)
            pm.Normal("X", mu[y], sigma=tau[y] ** -0.5, observed=X)
            lp = pt.log(pi) + normal_logp(X_new[:, None, :], mu, tau).sum(-1)  # (K, C)
            pm.Potential("X_new", pm.math.logsumexp(lp, axis=-1).sum())
        else:
            raise ValueError(f"no PyMC version of {name!r}")
    return model


# ----------------------------------------------------------------------------- one cell
@dataclass
class Cell:
    """What one (model, tool) run gives back: draws (site -> (chain, draw, ...)), wall seconds,
    total gradient evaluations over chains (warmup included; None where unknown), notes."""

    draws: dict[str, np.ndarray] = field(default_factory=dict)
    wall_s: float = math.nan
    gradient_evals: float | None = None
    sizes: str = ""
    notes: list[str] = field(default_factory=list)
    error: str | None = None
    cpu_s: float = math.nan  # CPU seconds of the cell's process and its children
    warm_wall_s: float = math.nan  # the same run again in the same process (caches warm)
    warmup_gradient_evals: float | None = None  # the part of gradient_evals spent in warmup


class Clock:
    """Wall and CPU time from its creation: CPU is this process's (all threads) plus its
    reaped children's (forked chain workers, PyMC's samplers), so that a figure per CPU
    second holds on a loaded machine, where wall time does not."""

    def __init__(self) -> None:
        self.wall, self.cpu = time.perf_counter(), self._cpu()

    @staticmethod
    def _cpu() -> float:
        t = os.times()
        return t.user + t.system + t.children_user + t.children_system


def import_zoo() -> None:
    """Import what a zoo run imports on first use, before its cell's clock starts, as every
    peer's cell imports its tool first: the facade's engines (zoo_inference, pyro, torch),
    ArviZ for the Run's diagnostics with the dask.array that xarray looks for, and
    torch._dynamo, which functorch's first gradient imports."""
    import arviz  # noqa: F401
    import dask.array  # noqa: F401
    import torch._dynamo  # noqa: F401

    import zoo

    zoo.run  # noqa: B018 - the facade imports its engines on first access


def run_zoo(
    name: str, engine: str, seed: int, sizes: tuple[int, int] | None, zoo_opts: dict[str, Any]
) -> Cell:
    """``zoo.run(name, engine, seed=seed)`` at the engine's defaults (or at ``sizes``), with
    ``zoo_opts`` (``device``, ``num_chains``, ``ess``) where given; ``engine`` may carry
    options (``nuts:metric=low_rank``)."""
    import zoo

    import_zoo()
    engine, engine_opts = parse_engine(engine)
    entry = zoo.get_model(name)
    spec = entry.engine_spec(engine)
    opts = {k: zoo_opts[k] for k in ("device", "num_chains", "ess") if zoo_opts.get(k) is not None}
    opts.update(engine_opts)
    if sizes is not None:
        for key, value in zip(("warmup", "num_samples"), sizes, strict=True):
            if key in spec.defaults:
                opts[key] = value
    clock = Clock()
    run = zoo.run(name, engine, seed=seed, progress=False, **opts)
    wall = time.perf_counter() - clock.wall
    cpu = Clock._cpu() - clock.cpu
    if not run.ok:
        return Cell(error=f"zoo run failed: {run.error}")
    post = run.idata.posterior
    cell = Cell({s: post[s].values for s in continuous_sites(name)}, wall)
    cell.cpu_s = cpu
    given = {**spec.defaults, **run.options}
    chains = run.diagnostics.get("num_chains") or given.get("num_chains", "?")
    cell.sizes = f"{chains} x ({given.get('warmup', '?')} + " + (
        f"{given.get('num_samples', '?')})"
    )
    found = [k for k in GRADIENT_KEYS if run.diagnostics.get(k) is not None]
    if found:
        cell.gradient_evals = float(np.sum(run.diagnostics[found[0]]))
        if "n_steps" in run.idata.sample_stats:  # leapfrog steps of the kept draws
            kept = float(run.idata.sample_stats["n_steps"].sum())
            cell.warmup_gradient_evals = cell.gradient_evals - kept
    else:
        cell.notes.append("no gradient count in run.diagnostics")
    if run.options.get("jit"):
        cell.notes.append("jit=True (registered)")
    if "stopped" in run.diagnostics:
        per_chain = run.diagnostics["draws_per_chain"]
        cell.sizes = f"{chains} x ({given.get('warmup', '?')} + {per_chain})"
        cell.notes.append(f"ess={opts['ess']}: {run.diagnostics['stopped']}")
    return cell


def run_numpyro(name: str, seed: int, warmup: int, draws: int) -> Cell:
    """NumPyro NUTS at its defaults, 2 chains in parallel on 2 host devices."""
    import numpyro

    numpyro.set_host_device_count(CHAINS)  # before jax is first used
    import jax
    from numpyro.infer import MCMC, NUTS

    d = model_data(name)
    clock = Clock()
    model = numpyro_model(name, d)

    def make() -> MCMC:
        return MCMC(
            NUTS(model),
            num_warmup=warmup,
            num_samples=draws,
            num_chains=CHAINS,
            chain_method="parallel",
            progress_bar=False,
        )

    mcmc = make()
    mcmc.run(jax.random.PRNGKey(seed), extra_fields=("num_steps",))
    samples = {k: np.asarray(v) for k, v in mcmc.get_samples(group_by_chain=True).items()}
    wall = time.perf_counter() - clock.wall
    cpu = Clock._cpu() - clock.cpu
    steps = float(np.sum(mcmc.get_extra_fields(group_by_chain=True)["num_steps"]))
    # NumPyro keeps extra fields of the draws only: the warmup's steps are counted in a second,
    # untimed warmup from the same key (the same trajectory)
    again = make()
    again.warmup(jax.random.PRNGKey(seed), extra_fields=("num_steps",), collect_warmup=True)
    warm = float(np.sum(again.get_extra_fields(group_by_chain=True)["num_steps"]))
    cell = Cell({s: samples[s] for s in continuous_sites(name)}, wall, steps + warm)
    cell.warmup_gradient_evals = warm
    cell.cpu_s = cpu
    cell.sizes = f"{CHAINS} x ({warmup} + {draws})"
    cell.notes.append(f"{jax.device_count()} host devices")
    return cell


def stats_steps(idata: Any, group: str) -> float:
    """Leapfrog steps (``n_steps``) over chains in ``group`` of an InferenceData
    (``sample_stats`` or ``warmup_sample_stats``), 0 where it has no such group."""
    return float(idata[group]["n_steps"].sum()) if group in idata.groups() else 0.0


def steps_cell(idata: Any, name: str, wall: float, cpu: float, warmup: int, draws: int) -> Cell:
    """A cell of a PyMC-style run: the posterior, its leapfrog steps (warmup apart), times."""
    post = idata.posterior
    warm = stats_steps(idata, "warmup_sample_stats")
    grads = warm + stats_steps(idata, "sample_stats")
    cell = Cell({s: post[s].values for s in continuous_sites(name)}, wall, grads)
    cell.cpu_s, cell.warmup_gradient_evals = cpu, warm
    cell.sizes = f"{CHAINS} x ({warmup} + {draws})"
    return cell


def run_pymc(name: str, seed: int, warmup: int, draws: int) -> Cell:
    """PyMC's own NUTS (``pm.sample``) at its defaults, 2 chains on 2 cores."""
    import pymc as pm

    d = model_data(name)
    clock = Clock()
    model = pymc_model(name, d)
    with model:
        idata = pm.sample(
            draws=draws,
            tune=warmup,
            chains=CHAINS,
            cores=CHAINS,
            random_seed=seed,
            progressbar=False,
            discard_tuned_samples=False,  # keeps the warmup's n_steps
        )
    wall = time.perf_counter() - clock.wall
    return steps_cell(idata, name, wall, Clock._cpu() - clock.cpu, warmup, draws)


def run_nutpie(name: str, seed: int, warmup: int, draws: int) -> Cell:
    """nutpie on the PyMC model (``compile_pymc_model`` + ``sample``) at its defaults."""
    import nutpie

    d = model_data(name)
    clock = Clock()
    compiled = nutpie.compile_pymc_model(pymc_model(name, d))
    idata = nutpie.sample(
        compiled,
        draws=draws,
        tune=warmup,
        chains=CHAINS,
        cores=CHAINS,
        seed=seed,
        progress_bar=False,
    )
    wall = time.perf_counter() - clock.wall
    return steps_cell(idata, name, wall, Clock._cpu() - clock.cpu, warmup, draws)


def run_pyro(name: str, seed: int, warmup: int, draws: int) -> Cell:
    """Plain Pyro: ``pyro.infer.NUTS`` + ``MCMC(num_chains=2)`` at their defaults on the zoo's
    own model function (discrete sites enumerated by Pyro: ``config_enumerate``)."""
    import pyro
    from pyro.infer import MCMC, NUTS, config_enumerate
    from pyro.infer.mcmc.api import _MultiSampler

    import zoo

    class CountingNUTS(NUTS):
        """Pyro's NUTS that counts evaluations of the potential's gradient, per chain."""

        def _initialize_model_properties(self, model_args: Any, model_kwargs: Any) -> None:
            super()._initialize_model_properties(model_args, model_kwargs)
            self.gradient_evals = 0
            inner = self.potential_fn

            def counted(z: dict) -> Any:
                if any(v.requires_grad for v in z.values()):  # called from potential_grad
                    self.gradient_evals += 1
                return inner(z)

            self.potential_fn = counted

        def diagnostics(self) -> dict:
            return {**super().diagnostics(), "gradient_evals": self.gradient_evals}

    entry = zoo.get_model(name)
    data = entry.load_data()
    pyro.set_rng_seed(seed)
    clock = Clock()
    model = config_enumerate(entry.model) if entry.structure.discrete else entry.model
    kernel = CountingNUTS(model, max_plate_nesting=entry.structure.max_plate_nesting)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the warning that chains run one after another
        mcmc = MCMC(
            kernel, num_samples=draws, warmup_steps=warmup, num_chains=CHAINS, disable_progbar=True
        )
    mcmc.run(**data)
    samples = {k: v.numpy() for k, v in mcmc.get_samples(group_by_chain=True).items()}
    wall = time.perf_counter() - clock.wall
    cpu = Clock._cpu() - clock.cpu
    grads = float(sum(mcmc.diagnostics()["gradient_evals"].values()))
    cell = Cell({s: samples[s] for s in continuous_sites(name)}, wall, grads)
    cell.cpu_s = cpu
    cell.sizes = f"{CHAINS} x ({warmup} + {draws})"
    if not isinstance(mcmc.sampler, _MultiSampler):
        cell.notes.append("chains one after another (Pyro needs cores - 1 >= num_chains)")
    return cell


def matched_sizes(model: str, engine: str, zoo_chains: int | None) -> tuple[int, int, int, bool]:
    """The zoo engine's (chains, warmup, draws, dense metric) on ``model``: its defaults with
    the model's registered options; ``zoo_chains`` overrides the chains."""
    import zoo

    entry = zoo.get_model(model)
    given = {**entry.engine_spec(engine).defaults, **(entry.engine_options.get(engine) or {})}
    chains = zoo_chains or given.get("num_chains") or 32
    dense = bool(given.get("dense_mass")) if engine == "nuts" else False
    return chains, given["warmup"], given["num_samples"], dense


def run_peer_sampler(
    name: str, tool: str, seed: int, chains: int, warmup: int, draws: int, dense: bool
) -> Cell:
    """A run of :mod:`peer_samplers` (``tool`` one of :data:`MATCHED` or :data:`VARIANTS`) at
    the sizes given."""
    import peer_samplers

    d = model_data(name)
    sites = continuous_sites(name)
    clock = Clock()
    if tool == "nutpie-lowrank":
        result = peer_samplers.nutpie_low_rank(
            pymc_model(name, d), sites, seed, chains, warmup, draws
        )
    else:
        runner = {
            "numpyro-vec": peer_samplers.numpyro_vectorized,
            "blackjax-nuts": peer_samplers.blackjax_nuts,
            "blackjax-chees": peer_samplers.blackjax_chees,
        }[tool]
        result = runner(numpyro_model(name, d), sites, seed, chains, warmup, draws, dense)
    draws_, after, warm, notes = result
    cell = Cell(draws_, time.perf_counter() - clock.wall, after + warm, notes=notes)
    cell.cpu_s = Clock._cpu() - clock.cpu
    cell.warmup_gradient_evals = warm
    cell.sizes = f"{chains} x ({warmup} + {draws})" + (", dense metric" if dense else "")
    return cell


def run_cell(
    model: str, tool: str, seed: int, sizes: tuple[int, int] | None, zoo_opts: dict[str, Any]
) -> Cell:
    """One (model, tool) cell; ``tool`` is ``zoo:<engine>`` or a peer's name. A matched peer
    runs at ``zoo_opts["num_chains"]`` chains with the zoo engine's sizes, or ``sizes``."""
    if tool.startswith("zoo:"):
        return run_zoo(model, tool[4:], seed, sizes, zoo_opts)
    if tool in MATCHED:
        chains, warmup, draws, dense = matched_sizes(model, MATCHED[tool], zoo_opts["num_chains"])
        warmup, draws = sizes or (warmup, draws)
        return run_peer_sampler(model, tool, seed, chains, warmup, draws, dense)
    if tool in VARIANTS:
        warmup, draws = sizes or PEER_DEFAULT_SIZES
        chains = zoo_opts["num_chains"] or CHAINS
        return run_peer_sampler(model, tool, seed, chains, warmup, draws, False)
    warmup, draws = sizes or PEER_DEFAULT_SIZES
    runner = {"numpyro": run_numpyro, "pymc": run_pymc, "nutpie": run_nutpie, "pyro": run_pyro}
    return runner[tool](model, seed, warmup, draws)


def cell_main(args: argparse.Namespace) -> None:
    """Child process: run one cell and store it under ``args.cell_out`` (.npz + .json)."""
    sizes = (args.warmup, args.draws) if args.draws is not None else None
    warnings.filterwarnings("ignore")
    try:
        cell = run_cell(args.cell[0], args.cell[1], args.seed, sizes, zoo_options(args))
        if args.warm and cell.error is None:  # again, in this process: the caches are warm
            again = run_cell(args.cell[0], args.cell[1], args.seed, sizes, zoo_options(args))
            cell.warm_wall_s = again.wall_s
    except Exception as e:  # noqa: BLE001 - reported by the parent, never fatal to the table
        cell = Cell(error=f"{type(e).__name__}: {e}".splitlines()[0][:300])
    out = Path(args.cell_out)
    np.savez(out.with_suffix(".npz"), **cell.draws)
    meta = {k: v for k, v in cell.__dict__.items() if k != "draws"}
    out.with_suffix(".json").write_text(json.dumps(meta))


def spawn_cell(
    model: str,
    tool: str,
    seed: int,
    sizes: tuple[int, int] | None,
    timeout: float,
    zoo_opts: dict[str, Any],
) -> Cell:
    """Run a cell in a fresh Python process and read back what it stored."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "cell"
        cmd = [sys.executable, __file__, "--cell", model, tool, "--cell-out", str(out)]
        cmd += ["--seed", str(seed), "--device", zoo_opts["device"]]
        if zoo_opts.get("num_chains"):
            cmd += ["--zoo-chains", str(zoo_opts["num_chains"])]
        if zoo_opts.get("ess"):
            cmd += ["--ess", str(zoo_opts["ess"])]
        if zoo_opts.get("warm"):
            cmd += ["--warm"]
        if sizes is not None:
            cmd += ["--warmup", str(sizes[0]), "--draws", str(sizes[1])]
        env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join(
                p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p
            ),
        }
        try:
            proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            return Cell(error=f"timed out after {timeout:.0f} s")
        meta_path = out.with_suffix(".json")
        if not meta_path.exists():
            tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
            return Cell(error=f"exit {proc.returncode}: {tail[0][:300]}")
        cell = Cell(**json.loads(meta_path.read_text()))
        with np.load(out.with_suffix(".npz")) as z:
            cell.draws = {k: z[k] for k in z.files}
    return cell


# ----------------------------------------------------------------------------- figures
def min_ess(draws: dict[str, np.ndarray]) -> float:
    """Minimum bulk ESS over every element of every site (arviz.ess, draws as (chain, draw))."""
    import arviz as az

    ess = az.ess(az.convert_to_dataset({k: np.asarray(v, float) for k, v in draws.items()}))
    return float(min(float(ess[v].min()) for v in ess.data_vars))


def mean_gap(draws: dict[str, np.ndarray], ref: dict[str, np.ndarray]) -> float:
    """max over elements of |mean - reference mean| / reference sd."""
    gaps = []
    for k, v in ref.items():
        m_ref = v.reshape(-1, *v.shape[2:]).mean(0)
        sd_ref = v.reshape(-1, *v.shape[2:]).std(0)
        m = draws[k].reshape(-1, *draws[k].shape[2:]).mean(0)
        gaps.append(np.max(np.abs(m - m_ref) / np.where(sd_ref > 0, sd_ref, np.nan)))
    return float(np.nanmax(gaps))


@dataclass
class Row:
    model: str
    tool: str
    cell: Cell
    ess: float = math.nan
    ess_per_s: float = math.nan
    ess_per_cpu_s: float = math.nan
    grads_per_ess: float = math.nan
    gap: float = math.nan
    ess_per_kgrad: float = math.nan  # per 1,000 gradient evaluations after warmup


def fmt(v: float | None, digits: int = 1) -> str:
    """``v`` with ``digits`` decimals; n/a for None, NaN or inf."""
    return "n/a" if v is None or not math.isfinite(v) else f"{v:,.{digits}f}"


def sig(v: float | None) -> str:
    """``v`` to 3 significant digits; n/a for None, NaN or inf."""
    return "n/a" if v is None or not math.isfinite(v) else f"{v:.3g}"


# ----------------------------------------------------------------------------- machine
def load_average() -> str:
    """The 1, 5 and 15 minute load averages, or n/a."""
    return ", ".join(f"{x:.2f}" for x in os.getloadavg()) if hasattr(os, "getloadavg") else "n/a"


def machine(device: str = "cpu") -> dict[str, str]:
    """CPU model, cores, load average now, Python and package versions."""
    cpu = platform.processor() or "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    info = {
        "date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "cpu": cpu,
        "cores": str(os.cpu_count()),
        "load average (1, 5, 15 min) before start": load_average(),
        "python": platform.python_version(),
        "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "unset"),
        "zoo device": device,
    }
    if device.startswith("cuda"):
        import torch

        info["gpu"] = torch.cuda.get_device_name(torch.device(device))
    for pkg in VERSIONED:
        try:
            info[pkg] = importlib.metadata.version(pkg)
        except importlib.metadata.PackageNotFoundError:
            info[pkg] = "not installed"
    return info


def missing_peer(peer: str) -> str | None:
    """Why ``peer`` cannot run here, or None."""
    absent = [m for m in PEER_MODULES[peer] if importlib.util.find_spec(m) is None]
    if absent:
        return f"{', '.join(absent)} not installed (pip install -e '.[peers]')"
    return None


def missing_engine(model: str, engine: str) -> str | None:
    """Why the zoo cannot run ``engine`` on ``model``, or None."""
    import zoo

    try:
        zoo.get_model(model).engine_spec(parse_engine(engine)[0])
    except ValueError as e:
        return str(e)
    return None


# ----------------------------------------------------------------------------- report
NOTES = """\
## How the figures are made

- **ESS/s**: minimum bulk ESS (`arviz.ess`, draws arranged (chain, draw), computed by this script
  the same way for every tool) over every element of the model's continuous parameters, divided
  by the cell's wall time: model building, compilation, warmup and sampling included, imports
  excluded. Each cell runs in a fresh Python process, one after another, with the environment's
  `OMP_NUM_THREADS`. The zoo's time is the whole `zoo.run` call, which also recovers discrete
  sites and computes the pointwise log-likelihood.
- **ESS/CPU s**: the same ESS per CPU second of the cell (its process's threads and its
  reaped child processes, from `os.times`, over the same span as the wall time): the figure to
  trust when the machine was not quiet (see the load averages above), since a loaded machine
  stretches wall time but hardly CPU time. A tool that keeps both cores busy spends about twice
  its wall time.
- **grads/ESS**: gradient evaluations (leapfrog steps) over all chains, warmup included, per
  effective draw; free of the machine's speed. NumPyro: `num_steps` of the draws plus those of a
  second, untimed warmup from the same key; PyMC and nutpie: `n_steps` of the warmup and the
  draws; Pyro: calls of the potential with gradient, counted in the kernel; the zoo: its
  `run.diagnostics` (`gradient_evals`), n/a where the engine does not report it.
- **max |Δmean|/sd**: the largest difference of a parameter's posterior mean from the reference
  run's (the first zoo engine that ran), in the reference's posterior sds: a mis-written peer
  model shows as a large value. With few draws the noise alone is of order 1/sqrt(ESS).
- **RATIO** = zoo ESS/s ÷ best peer ESS/s (higher is better for the zoo); **RATIO matched**:
  the same against one peer run on the zoo engine's terms (chains, warmup, draws, metric).
- **warm wall s**: the same run again in the same process. The zoo keeps its compiled
  densities between calls; the JAX peers trace and compile a new closure for each call, as a
  notebook cell that builds the model and its sampler again would.
- **warmup grads / draw grads**: gradient evaluations in warmup and after it (the zoo: its
  total less the kept draws' `n_steps`); **ESS per 1k draw grads** counts the latter only.
- **Peers' models** are written in each tool (see `numpyro_model`, `pymc_model`) with the zoo
  model's priors, likelihood and default data; plain Pyro runs the zoo's own model function.
  `gaussian_mixture` and `naive_bayes` have discrete sites: NumPyro and PyMC/nutpie marginalise
  them by logsumexp in the model, Pyro and the zoo enumerate them. The mixture's ordered prior on
  the means (`SortedNormal`: PyMC's `ordered` transform, NumPyro an ordered-vector site with a
  Normal factor) removes label switching in every tool, and `naive_bayes`'s classes are pinned by
  the labelled flowers, so the parameters are compared directly (no label-invariant summaries).
- **Defaults**: each tool's NUTS at its documented defaults (step-size and mass-matrix
  adaptation, target acceptance), 2 chains on 2 cores; progress bars off. NumPyro runs its chains
  with `chain_method="parallel"` on 2 host devices. Pyro's `MCMC` runs chains in parallel only
  when `num_chains <= cores - 1`: on a 2-core machine it draws them one after another (noted in
  its row). PyMC compiles C code with a cache that persists between runs (a cold cache costs
  more than a warm one); nutpie compiles through numba.
"""


def write_results(
    path: Path,
    info: dict[str, str],
    rows: list[Row],
    ratios: list[tuple[str, str, float, str, float]],
    skipped: list[str],
    command: str,
) -> None:
    """The results file: machine, per-model tables, ratios, notes."""
    lines = [
        "# Zoo engines against peer tools",
        "",
        f"Generated by `{command}`; regenerate with the same command (nothing here is typed in).",
        "Timings depend on the machine and its load: compare within one file only.",
        "",
        "## Machine",
        "",
        *[f"- {k}: {v}" for k, v in info.items()],
        "",
    ]
    for model in dict.fromkeys(r.model for r in rows):
        lines += [
            f"## {model}",
            "",
            "| tool | chains x (warmup + draws) | wall s | warm wall s | CPU s | min ESS | ESS/s "
            "| ESS/CPU s | warmup grads | draw grads | grads/ESS | ESS per 1k draw grads "
            "| max abs Δmean/sd | notes |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
        ]
        for r in (r for r in rows if r.model == model):
            c = r.cell
            notes = c.error or "; ".join(c.notes)
            warm = c.warmup_gradient_evals
            drawn = None if warm is None or c.gradient_evals is None else c.gradient_evals - warm
            lines.append(
                f"| {r.tool} | {c.sizes} | {fmt(c.wall_s)} | {fmt(c.warm_wall_s)} "
                f"| {fmt(c.cpu_s)} | {fmt(r.ess, 0)} | {sig(r.ess_per_s)} | {sig(r.ess_per_cpu_s)} "
                f"| {fmt(warm, 0)} | {fmt(drawn, 0)} | {fmt(r.grads_per_ess)} "
                f"| {sig(r.ess_per_kgrad)} | {fmt(r.gap, 2)} | {notes} |"
            )
        lines.append("")
    lines += [
        "## Ratios",
        "",
        "| model | zoo engine | zoo ESS/s ÷ peer ESS/s | peer (best, or matched) "
        "| same, per CPU second |",
        "|---|---|---|---|---|",
    ]
    lines += [f"| {m} | {e} | {sig(v)} | {p} | {sig(c)} |" for m, e, v, p, c in ratios]
    lines.append("")
    if skipped:
        lines += ["## Skipped", "", *[f"- {s}" for s in skipped], ""]
    lines.append(NOTES)
    path.write_text("\n".join(lines))


# ----------------------------------------------------------------------------- main
def parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", default=",".join(MODELS))
    p.add_argument(
        "--engines",
        default="nuts,chees,mams",
        help="zoo engines, each with options as engine:key=value (default: nuts,chees,mams)",
    )
    p.add_argument("--peers", default=",".join(DEFAULT_PEERS))
    p.add_argument("--quick", action="store_true", help="every tool at 200 warmup + 200 draws")
    p.add_argument("--draws", type=int, default=None, help="draws per chain, every tool")
    p.add_argument("--warmup", type=int, default=None, help="warmup per chain, every tool")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--timeout", type=float, default=3600.0, help="seconds per cell")
    p.add_argument("--device", default="cpu", help="the zoo's engines run on it (cpu, cuda)")
    p.add_argument("--zoo-chains", type=int, default=None, help="the zoo's chains (default: 32)")
    p.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "compare_peers.md"))
    p.add_argument(
        "--warm", action="store_true", help="also time each run again in its process (warm)"
    )
    p.add_argument(
        "--time-to-ess",
        type=int,
        default=None,
        metavar="N",
        help="instead of the tables: each tool's smallest budget reaching min bulk ESS >= N and"
        " R-hat <= 1.01, from a cold process (the zoo's engines with ess=N)",
    )
    p.add_argument("--ess", type=int, default=None, help=argparse.SUPPRESS)
    p.add_argument("--cell", nargs=2, metavar=("MODEL", "TOOL"), help=argparse.SUPPRESS)
    p.add_argument("--cell-out", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.quick and args.draws is None and args.warmup is None:
        args.warmup, args.draws = QUICK_SIZES
    if (args.draws is None) != (args.warmup is None):
        warmup, draws = PEER_DEFAULT_SIZES
        args.warmup = warmup if args.warmup is None else args.warmup
        args.draws = draws if args.draws is None else args.draws
    for n in (args.draws, args.warmup):
        if n is not None and n < 4:
            p.error("--draws and --warmup need at least 4")
    if args.zoo_chains is not None and args.zoo_chains < 1:
        p.error("--zoo-chains must be a positive integer")
    from zoo_inference.runtime import device_of

    try:
        args.device = str(device_of(args.device))
    except ValueError as e:
        p.error(str(e))
    return args


def zoo_options(args: argparse.Namespace) -> dict[str, Any]:
    """Options of every cell from the command line: the zoo's device, the chains (the zoo's
    and the matched peers'), an ESS target for the zoo's run, and whether to time a warm rerun."""
    return {
        "device": args.device,
        "num_chains": args.zoo_chains,
        "ess": getattr(args, "ess", None),
        "warm": getattr(args, "warm", False),
    }


def main(argv: list[str] | None = None) -> None:
    args = parse(argv)
    if args.cell:
        cell_main(args)
        return
    if args.time_to_ess:
        time_to_ess(args, argv)
        return
    info = machine(args.device)  # the load average before any work
    sizes = (args.warmup, args.draws) if args.draws is not None else None
    models = [m for m in args.models.split(",") if m]
    engines = split_engines(args.engines)
    skipped: list[str] = []
    peers = []
    for peer in (p for p in args.peers.split(",") if p):
        if peer not in PEER_MODULES:
            sys.exit(f"unknown peer {peer!r}; peers: {', '.join(PEER_MODULES)}")
        why = missing_peer(peer)
        if why:
            skipped.append(f"peer {peer}: {why}")
            print(f"skipping peer {peer}: {why}", flush=True)
        else:
            peers.append(peer)
    rows: list[Row] = []
    ratios: list[tuple[str, str, float, str, float]] = []
    for model in models:
        tools = []
        for engine in engines:
            why = missing_engine(model, engine)
            if why:
                skipped.append(f"zoo engine {engine} on {model}: {why}")
                print(f"skipping zoo engine {engine!r} on {model}: {why}", flush=True)
            else:
                tools.append(f"zoo:{engine}")
        tools += peers
        model_rows = []
        for tool in tools:
            cell = spawn_cell(model, tool, args.seed, sizes, args.timeout, zoo_options(args))
            row = Row(model, tool, cell)
            if cell.error is None:
                row.ess = min_ess(cell.draws)
                row.ess_per_s = row.ess / cell.wall_s
                row.ess_per_cpu_s = row.ess / cell.cpu_s if cell.cpu_s > 0 else math.nan
                if cell.gradient_evals:
                    row.grads_per_ess = cell.gradient_evals / row.ess
                    after = cell.gradient_evals - (cell.warmup_gradient_evals or math.nan)
                    row.ess_per_kgrad = 1000 * row.ess / after if after > 0 else math.nan
            model_rows.append(row)
            if cell.error:
                print(f"{model} {tool}: FAILED {cell.error}", flush=True)
        ok = [r for r in model_rows if r.cell.error is None]
        ref = next((r for r in ok if r.tool.startswith("zoo:")), ok[0] if ok else None)
        for r in ok:
            r.gap = mean_gap(r.cell.draws, ref.cell.draws)
            print(
                f"{model} {r.tool}: {r.cell.sizes}, wall {r.cell.wall_s:.1f} s, "
                f"CPU {r.cell.cpu_s:.1f} s, min ESS {r.ess:.0f}, ESS/s {r.ess_per_s:.3g}, "
                f"ESS/CPU s {r.ess_per_cpu_s:.3g}, grads/ESS "
                f"{fmt(r.grads_per_ess)}, ESS per 1k draw grads {fmt(r.ess_per_kgrad)}, warm "
                f"wall {fmt(r.cell.warm_wall_s)} s, max |mean diff|/sd vs {ref.tool} {r.gap:.2f}"
                + (f" ({'; '.join(r.cell.notes)})" if r.cell.notes else ""),
                flush=True,
            )
        rows += model_rows
        ratios += model_ratios(model, model_rows)
    info["load average (1, 5, 15 min) at the end"] = load_average()
    for model, engine, value, peer, _ in ratios:
        if peer.startswith("matched "):
            print(f"RATIO matched {model}-{engine}-{peer[8:]} {value:.4g}")
        else:
            print(f"RATIO {model}-{engine} {value:.4g}")
    command = "python benchmarks/compare_peers.py " + " ".join(argv or sys.argv[1:])
    write_results(Path(args.out), info, rows, ratios, skipped, command.strip())
    print(f"wrote {args.out}")


# ----------------------------------------------------------------------------- time to N ESS
# Each tool's ladder of budgets, smallest first: (chains, warmup, draws per chain). The zoo's
# engines run with ess=N from (8 chains, warmup, a first block of draws) and extend themselves;
# a peer draws what it is given. Every ladder steps by about sqrt(2), so that no tool's
# smallest budget is overshot by more than another's. ChEES-style tools adapt across an
# ensemble and start with more chains.
PEER_LADDER = tuple((n, n) for n in (250, 350, 500, 700, 1000, 1400, 2000))
ZOO_LADDER = ((200, 100), (300, 100), (500, 100), (700, 200), (1000, 500))
LADDERS: dict[str, tuple[int, tuple[tuple[int, int], ...]]] = {
    "zoo:nuts": (8, ZOO_LADDER),
    "zoo:chees": (8, ZOO_LADDER),
    "zoo:mams": (16, ZOO_LADDER),
    "numpyro": (CHAINS, PEER_LADDER),
    "pymc": (CHAINS, PEER_LADDER),
    "nutpie": (CHAINS, PEER_LADDER),
    "nutpie-lowrank": (CHAINS, PEER_LADDER),
    "pyro": (CHAINS, PEER_LADDER),
    "numpyro-vec": (4, PEER_LADDER),
    "blackjax-nuts": (4, PEER_LADDER),
    "blackjax-chees": (16, ((200, 100), (300, 200), (500, 500), (700, 700), (1000, 1000))),
}
R_HAT_MAX = 1.01


def ladder_key(tool: str) -> str:
    """The key of ``tool``'s ladder: a zoo engine's without its options."""
    return ":".join(tool.split(":")[:2]) if tool.startswith("zoo:") else tool


def max_rhat(draws: dict[str, np.ndarray]) -> float:
    """Largest rank-normalised split R-hat (arviz.rhat) over every element of every site."""
    import arviz as az

    rhat = az.rhat(az.convert_to_dataset({k: np.asarray(v, float) for k, v in draws.items()}))
    return float(max(float(rhat[v].max()) for v in rhat.data_vars))


@dataclass
class Attempt:
    """One rung of a tool's ladder: its budget and what its run gave."""

    tool: str
    chains: int
    warmup: int
    draws: int
    cell: Cell
    target: int
    ess: float = math.nan
    rhat: float = math.nan

    @property
    def reached(self) -> bool:
        return self.cell.error is None and self.ess >= self.target and self.rhat <= R_HAT_MAX


def climb(model: str, tool: str, target: int, args: argparse.Namespace) -> list[Attempt]:
    """``tool``'s rungs on ``model``, each in a cold process, up to the first that reaches
    min bulk ESS >= ``target`` with every R-hat <= :data:`R_HAT_MAX`."""
    chains, rungs = LADDERS[ladder_key(tool)]
    tried = []
    for warmup, draws in rungs:
        opts = {**zoo_options(args), "num_chains": chains, "warm": False}
        if tool.startswith("zoo:"):
            opts["ess"] = target
        cell = spawn_cell(model, tool, args.seed, (warmup, draws), args.timeout, opts)
        a = Attempt(tool, chains, warmup, draws, cell, target)
        if cell.error is None:
            a.ess, a.rhat = min_ess(cell.draws), max_rhat(cell.draws)
        tried.append(a)
        status = cell.error or f"min ESS {a.ess:.0f}, max R-hat {a.rhat:.3f}"
        print(
            f"{model} {tool} {cell.sizes or (chains, warmup, draws)}: "
            f"wall {cell.wall_s:.1f} s, {status}",
            flush=True,
        )
        if a.reached:
            break
    return tried


def time_to_ess(args: argparse.Namespace, argv: list[str] | None) -> None:
    """The table of each tool's time to ``args.time_to_ess`` effective draws, and RATIO lines
    ``RATIO time-to-N <model>-<engine> <best peer's wall ÷ the zoo's>`` (higher is better)."""
    target = args.time_to_ess
    info = machine(args.device)
    tools = [f"zoo:{e}" for e in split_engines(args.engines)]
    tools += [p for p in args.peers.split(",") if p and missing_peer(p) is None]
    unknown = [t for t in tools if ladder_key(t) not in LADDERS]
    if unknown:
        sys.exit(f"no budget ladder for {', '.join(unknown)}")
    lines = [
        f"# Time to {target} effective draws",
        "",
        f"Generated by `python benchmarks/compare_peers.py {' '.join(argv or sys.argv[1:])}`.",
        f"Each tool's smallest budget on its ladder whose run, from a cold process, gives min "
        f"bulk ESS >= {target} and every R-hat <= {R_HAT_MAX} (both computed here by arviz, "
        "the same for every tool); the wall time is that run's, imports excluded. The zoo's "
        f"engines run with `ess={target}` (they stop themselves) and their ladder steps the "
        "warmup; peers draw a fixed budget. Every ladder steps by about sqrt(2). Timings "
        "depend on the machine and its load.",
        "",
        "## Machine",
        "",
        *[f"- {k}: {v}" for k, v in info.items()],
        "",
        "| model | tool | budget that reached it | wall s | CPU s | min ESS | max R-hat "
        "| rungs tried (their wall s) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    ratios = []
    for model in (m for m in args.models.split(",") if m):
        best: dict[str, float] = {}
        for tool in tools:
            if tool.startswith("zoo:") and missing_engine(model, tool[4:]):
                continue
            tried = climb(model, tool, target, args)
            last = tried[-1]
            walls = ", ".join(fmt(a.cell.wall_s) for a in tried)
            if last.reached:
                best[tool] = last.cell.wall_s
                lines.append(
                    f"| {model} | {tool} | {last.cell.sizes} | {fmt(last.cell.wall_s)} "
                    f"| {fmt(last.cell.cpu_s)} | {fmt(last.ess, 0)} | {last.rhat:.3f} "
                    f"| {len(tried)} ({walls}) |"
                )
            else:
                why = last.cell.error or "not reached on the ladder"
                lines.append(f"| {model} | {tool} | {why} | | | | | {len(tried)} ({walls}) |")
        peers = {t: w for t, w in best.items() if not t.startswith("zoo:")}
        fastest = min(peers, key=peers.get, default=None)
        for tool in (t for t in tools if t.startswith("zoo:")):
            value = peers[fastest] / best[tool] if fastest and tool in best else math.nan
            ratios.append((model, tool[4:], value, fastest or "none reached"))
    lines += [
        "",
        "## Ratios",
        "",
        "| model | zoo engine | fastest peer's wall ÷ the zoo's | fastest peer |",
        "|---|---|---|---|",
        *[f"| {m} | {e} | {sig(v)} | {p} |" for m, e, v, p in ratios],
        "",
    ]
    for model, engine, value, _ in ratios:
        print(f"RATIO time-to-{target} {model}-{engine} {value:.4g}")
    out = Path(args.out)
    if out.name == "compare_peers.md":
        out = out.with_name(f"time_to_{target}_ess.md")
    out.write_text("\n".join(lines))
    print(f"wrote {out}")


def model_ratios(model: str, rows: list[Row]) -> list[tuple[str, str, float, str, float]]:
    """(model, zoo engine, zoo ESS/s ÷ peer ESS/s, peer, the same per CPU second): against
    the best peer, and against each peer matched to that engine (peer named ``matched X``)."""
    ok = [r for r in rows if r.cell.error is None]
    peer_rows = [r for r in ok if not r.tool.startswith("zoo:")]
    best = max(peer_rows, key=lambda r: r.ess_per_s, default=None)
    best_cpu = max(peer_rows, key=lambda r: r.ess_per_cpu_s, default=None)
    out = []
    for r in (r for r in rows if r.tool.startswith("zoo:")):
        ok_run = best is not None and r.cell.error is None
        value = r.ess_per_s / best.ess_per_s if ok_run else math.nan
        cpu = r.ess_per_cpu_s / best_cpu.ess_per_cpu_s if ok_run else math.nan
        out.append((model, r.tool[4:], value, best.tool if best else "none ran", cpu))
        for p in (p for p in peer_rows if MATCHED.get(p.tool) == r.tool[4:].partition(":")[0]):
            value = r.ess_per_s / p.ess_per_s if r.cell.error is None else math.nan
            cpu = r.ess_per_cpu_s / p.ess_per_cpu_s if r.cell.error is None else math.nan
            out.append((model, r.tool[4:], value, f"matched {p.tool}", cpu))
    return out


if __name__ == "__main__":
    main()
