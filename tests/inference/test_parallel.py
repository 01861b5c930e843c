"""Both cores, one thread each: chains and report cells in worker processes give exactly the
numbers of the sequential run; bad models give one clear error or a failed run, never a
traceback from a worker."""

from __future__ import annotations

import gc
import math
import subprocess
import sys

import numpy as np
import pyro
import pyro.distributions as dist
import pytest
import torch

import zoo
from zoo import sweep
from zoo_inference.parallel import cores, map_indices, mark_worker

needs_two_cores = pytest.mark.skipif(cores() < 2, reason="needs two cores")


@needs_two_cores
@pytest.mark.parametrize("engine", ["nuts", "mh"])
def test_parallel_chains_give_the_sequential_numbers(engine):
    kw = dict(num_samples=40, warmup=40, num_chains=2, seed=7)
    par = zoo.run("three_coin", engine, parallel=True, **kw)
    seq = zoo.run("three_coin", engine, parallel=False, **kw)
    assert par.diagnostics["chains_in_parallel"] and not seq.diagnostics["chains_in_parallel"]
    for site in ("pi", "p", "q", "z"):
        np.testing.assert_array_equal(
            par.idata.posterior[site].values, seq.idata.posterior[site].values
        )


@pytest.mark.parametrize("engine", ["nuts", "chees", "mh"])
def test_the_chain_layout_not_the_cores_fixes_the_numbers(engine, monkeypatch):
    """``chain_groups`` given, a run gives the same draws on a machine of 1, 2 or 4 cores (the
    report's profiles give it, so a page's numbers come again anywhere); left out, the layout
    follows the cores."""
    from zoo_inference.samplers import driver

    kw = dict(num_samples=30, warmup=30, num_chains=32 if engine == "chees" else 4, seed=7)
    draws, layouts = [], []
    for n in (1, 2, 4):
        monkeypatch.setattr(driver, "cores", lambda n=n: n)
        run = zoo.run("three_coin", engine, chain_groups=1, **kw)
        assert run.diagnostics["chain_groups"] == 1
        draws.append(run.idata.posterior["pi"].values)
        layouts.append(zoo.run("three_coin", engine, **kw).diagnostics["chain_groups"])
    for d in draws[1:]:
        np.testing.assert_array_equal(d, draws[0])
    assert layouts == ([1, 2, 2] if engine == "chees" else [1, 2, 4])


_COMPILE_AFTER_FORK = """
import torch
from zoo_inference.parallel import map_indices

torch.compile(lambda x: x.sin().sum())(torch.randn(8))  # the parent's compile pool starts


def one(i):
    return float(torch.compile(lambda x: (x * 3 + i).cos().sum())(torch.ones(5 + i)))


print(map_indices(one, 2, 2))
"""


@needs_two_cores
def test_torch_compile_in_a_forked_worker_after_one_in_the_parent_finishes():
    # the parent's inductor thread pool does not survive fork: a worker that compiled through it
    # (the samplers compile once a run shows it pays) waited for ever
    out = subprocess.run(
        [sys.executable, "-c", _COMPILE_AFTER_FORK], capture_output=True, text=True, timeout=240
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert [round(v, 4) for v in eval(out.stdout)] == [
        round(5 * math.cos(3.0), 4),
        round(6 * math.cos(4.0), 4),
    ]


def _frozen(i: int) -> tuple[int, int]:
    frozen = gc.get_freeze_count()
    task_objects = [[] for _ in range(1000)]  # made after the worker started
    mark_worker()  # as a Dask worker does before each task
    again = gc.get_freeze_count() - frozen
    del task_objects
    return frozen, again


@needs_two_cores
def test_a_worker_keeps_what_it_inherited_out_of_the_garbage_collectors_passes():
    # the modules and registry a worker inherits live as long as it does: frozen, a full pass
    # of the collector does not walk them (a report's cells: half the time in the collector);
    # once a process: what its tasks make later stays collectable
    assert gc.get_freeze_count() == 0
    for frozen, frozen_later in map_indices(_frozen, 2, 2):
        assert frozen > 10_000
        assert frozen_later == 0


@needs_two_cores
def test_report_cells_in_worker_processes_give_the_same_numbers(tmp_path):
    opts = {"svi": {"num_steps": 50, "num_samples": 50}}
    cells = sweep.plan_report(
        ["beta_bernoulli"], profile="smoke", engines=["svi", "exact"], options=opts
    )
    one = sweep.run_cells(cells, seed=3, workers=1)
    two = sweep.run_cells(cells, seed=3, workers=2)
    for key, run in one.items():
        assert two[key].ok and run.ok
        np.testing.assert_array_equal(
            run.idata.posterior["p"].values, two[key].idata.posterior["p"].values
        )


def test_a_model_that_raises_is_one_clear_error(registry):
    def broken(y):
        raise KeyError("no column 'age'")

    zoo.register("broken_model", model=broken, data={"y": torch.ones(2)})
    with pytest.raises(ValueError, match=r"model 'broken_model' raised KeyError: .no column"):
        zoo.run("broken_model", "nuts")


def test_a_model_without_latent_sites(registry):
    def observed_only(y):
        with pyro.plate("n", len(y)):
            pyro.sample("y", dist.Normal(0.0, 1.0), obs=y)

    zoo.register("no_latents", model=observed_only, data={"y": torch.ones(2)})
    assert zoo.get_model("no_latents").engines == ()
    with pytest.raises(ValueError, match="does not apply.*no latent sites"):
        zoo.run("no_latents", "svi")


def test_nan_log_density_everywhere_is_a_failed_run(registry):
    def nan_model(y):
        mu = pyro.sample("mu", dist.Normal(0.0, 1.0))
        pyro.factor("nan", mu * float("nan"))
        with pyro.plate("n", len(y)):
            pyro.sample("y", dist.Normal(mu, 1.0), obs=y)

    zoo.register("nan_model", model=nan_model, data={"y": torch.ones(2)})
    for engine, kw in (("nuts", {"num_samples": 5, "warmup": 5}), ("svi", {"num_steps": 5})):
        with pytest.warns(RuntimeWarning, match="failed"):
            run = zoo.run("nan_model", engine, **kw)
        assert not run.ok and "\n" not in run.error


def test_data_the_model_cannot_take(registry):
    def needs_matrix(X, y):
        beta = pyro.sample("beta", dist.Normal(0.0, 1.0).expand([2]).to_event(1))  # 2 columns
        with pyro.plate("n", len(y)):
            pyro.sample("y", dist.Normal(X @ beta, 1.0), obs=y)

    zoo.register(
        "needs_matrix", model=needs_matrix, data={"X": torch.ones(4, 2), "y": torch.ones(4)}
    )
    with pytest.raises(ValueError, match=r"data\['X'\] has shape \(4, 3\); expected"):
        zoo.run("needs_matrix", "svi", data={"X": torch.ones(4, 3), "y": torch.ones(4)})
    with pytest.raises(ValueError, match="does not fit model 'needs_matrix'"):
        zoo.run("needs_matrix", "svi", data={"X": torch.ones(4, 2), "y": torch.ones(5)})


@needs_two_cores
def test_a_failing_chain_in_a_worker_is_a_failed_run_not_a_traceback(registry, capfd):
    def nan_model(y):
        mu = pyro.sample("mu", dist.Normal(0.0, 1.0))
        pyro.factor("nan", mu * float("nan"))

    zoo.register("nan_chains", model=nan_model, data={"y": torch.ones(2)})
    with pytest.warns(RuntimeWarning, match="failed"):
        run = zoo.run("nan_chains", "nuts", num_samples=5, warmup=5, num_chains=2)
    assert not run.ok
    assert "Traceback" not in capfd.readouterr().err
