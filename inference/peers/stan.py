"""Stan's NUTS (PyStan 3, ISC; Stan, BSD-3-Clause) on a posteriordb posterior's own Stan
program: the peer that runs what posteriordb's references were drawn with, as Stan's users
run it. Opt-in (only where a call names it), and only on a model that carries its program
(:func:`add_program`: the ``pdb_*`` models).

Stan samples its own density, not the zoo's: its draws are the program's parameters, which the
model's :class:`StanProgram` maps onto the model's latent sites (the same map the translation's
log-density check uses), and the zoo then adds deterministic sites and the pointwise
log-likelihood from the Pyro model as for any engine. PyStan builds a program once and keeps
the compiled model in httpstan's cache (``~/.cache/httpstan``): the first build of a program
costs a C++ compile, a later one a cache hit; ``compile_s`` in the
diagnostics says which it was. Its seed is the run's, so draws repeat by seed on one machine.
PyStan's own progress and messages show where the run shows progress, and nowhere else.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import importlib
import io
import multiprocessing
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from zoo_inference.context import EngineContext
from zoo_inference.mcmc import chains_run
from zoo_inference.results import Run, ZooError


@dataclass(frozen=True)
class StanProgram:
    """A model's Stan program: its ``code``, its ``data()`` as Stan reads it, whether the data
    of a call are the program's (``matches(data)``: Stan runs on its own data only) and
    ``to_latent``, which maps the draws of the program's parameters, transformed parameters
    and generated quantities (name -> array of any leading shape) to the model's latent sites
    (names the model has no site of are dropped)."""

    code: str
    data: Callable[[], Mapping[str, Any]]
    matches: Callable[[Mapping[str, Any]], bool]
    to_latent: Callable[[dict[str, np.ndarray]], dict[str, np.ndarray]]


PROGRAMS: dict[str, StanProgram] = {}


def add_program(model: str, program: StanProgram) -> None:
    """Give the zoo model ``model`` its Stan program, for the ``stan`` engine."""
    PROGRAMS[model] = program


def stan_module() -> Any:
    """PyStan, imported when the engine runs, or a clear error."""
    try:
        return importlib.import_module("stan")
    except ImportError as e:
        raise ZooError(
            "the stan engine needs PyStan: pip install 'pystan>=3.10' 'setuptools<80' "
            f"(the stan extra; {e})"
        ) from None


def own_executor() -> None:
    """Give httpstan a pool of sampling processes of this process's own. Its pool is made once,
    at import; a process forked after the pool started (a leaderboard cell) inherits a pool
    whose workers are its parent's, and its run would wait on them for ever."""
    stub: Any = importlib.import_module("httpstan.services_stub")
    if getattr(stub, "zoo_owner", None) != os.getpid():
        stub.executor = concurrent.futures.ProcessPoolExecutor(
            mp_context=multiprocessing.get_context("fork"), initializer=stub.init_worker
        )
        stub.zoo_owner = os.getpid()


def program_of(ctx: EngineContext) -> StanProgram:
    """The model's Stan program, or an error that says which models have one."""
    program = PROGRAMS.get(ctx.name)
    if program is None:
        raise ZooError(
            f"stan runs a model's own Stan program, and {ctx.name!r} has none: the posteriordb "
            "models have theirs (`zoo list --suite posteriordb`)"
        )
    if not program.matches(ctx.data):
        raise ZooError(f"stan runs {ctx.name!r} on its own data only, not on other data")
    return program


def stan_engine(
    ctx: EngineContext,
    *,
    num_samples: int = 1000,
    warmup: int = 1000,
    num_chains: int = 4,
    target_accept: float = 0.8,
    max_tree_depth: int = 10,
) -> Run:
    """Stan's NUTS with its default adaptation (diagonal metric, Stan's windows) on the model's
    Stan program: ``num_chains`` chains of ``warmup`` + ``num_samples`` iterations, seeded with
    the run's seed; ``target_accept`` is Stan's ``delta``, ``max_tree_depth`` its
    ``max_depth``. ``gradient_evals`` counts the leapfrog steps of warmup and sampling."""
    program = program_of(ctx)
    stan = stan_module()
    own_executor()
    with contextlib.ExitStack() as quiet:
        if not ctx.progress:  # PyStan's own bars and messages, on Python's streams
            sink = io.StringIO()
            quiet.enter_context(contextlib.redirect_stdout(sink))
            quiet.enter_context(contextlib.redirect_stderr(sink))
        start = time.perf_counter()
        posterior = stan.build(program.code, data=dict(program.data()), random_seed=ctx.seed)
        compile_s = time.perf_counter() - start
        fit = posterior.sample(
            num_chains=num_chains,
            num_samples=num_samples,
            num_warmup=warmup,
            save_warmup=True,
            delta=target_accept,
            max_depth=max_tree_depth,
        )
    total = warmup + num_samples

    def by_chain(name: str) -> np.ndarray:
        """``fit[name]``, (*dims, iterations x chains) with the chain running fastest, as
        (chain, iteration, *dims)."""
        x = np.asarray(fit[name], dtype=float)
        if name.endswith("__"):  # a sampler statistic: PyStan gives it a leading 1
            x = x.reshape(-1)
        x = x.reshape(*x.shape[:-1], total, num_chains)
        return np.moveaxis(np.moveaxis(x, -1, 0), -1, 1)

    latent = program.to_latent({p: by_chain(p)[:, warmup:] for p in fit.param_names})
    s = ctx.structure
    missing = [k for k in s.continuous if k not in latent]
    if missing:
        raise ZooError(f"stan: the program of {ctx.name!r} gives no draws of its sites {missing}")
    draws = {
        k: np.asarray(v).reshape(num_chains, num_samples, *s.shapes[k])
        for k, v in latent.items()
        if k in s.latent
    }
    steps = by_chain("n_leapfrog__").astype(np.int64)
    diverging = by_chain("divergent__")[:, warmup:] > 0
    stats = {
        "n_steps": steps[:, warmup:],
        "diverging": diverging,
        "accept": by_chain("accept_stat__")[:, warmup:],
        "step_size": by_chain("stepsize__")[:, warmup:],
        "tree_depth": by_chain("treedepth__")[:, warmup:].astype(np.int64),
    }
    diagnostics: dict[str, Any] = {
        "divergences": int(diverging.sum()),
        "num_chains": num_chains,
        "num_samples": num_samples,
        "warmup": warmup,
        "gradient_evals": int(steps.sum()),
        "warmup_gradient_evals": int(steps[:, :warmup].sum()),
        "compile_s": compile_s,
        "metric": "diagonal",
        "backend": "stan",
        "httpstan": importlib.import_module("httpstan").__version__,
    }
    return chains_run(ctx, "stan", draws, stats, diagnostics)
