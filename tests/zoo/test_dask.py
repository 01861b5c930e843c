"""A real distributed engine: a report's cells on a Dask ``LocalCluster`` with worker processes
give the local run's numbers, and a worker killed (SIGKILL) in the middle of a cell loses
nothing: the cell runs again on another worker and the report has every cell."""

from __future__ import annotations

import importlib
import json
import os
import re
import signal
import sys
import threading
import time

import numpy as np
import pandas as pd
import pyro
import pyro.distributions as dist
import pytest
import torch

import zoo
import zoo.api
import zoo.sweep
from zoo.sweep import DaskExecutor, plan_report, run_cells
from zoo_inference import ZooError

distributed = pytest.importorskip("distributed")
cloudpickle = pytest.importorskip("cloudpickle")
cloudpickle.register_pickle_by_value(sys.modules[__name__])  # workers cannot import tests/

MODEL = "beta_bernoulli"
ENGINES = ["mh", "importance", "laplace", "exact"]
# how a run ran, not what it found: a Dask worker runs a cell's chains one group after another
# (a daemon process starts no process pool), a local run in parallel: the same numbers
HOW_IT_RAN = ("wall_time_s", "chains_in_parallel")
SEED = 0  # the workers are other processes: the suite's seed shift does not reach them (below)


def _plain_seed(seed):
    return seed


@pytest.fixture(scope="module")
def cluster():
    """Two worker processes, one thread each, the zoo imported in both before any test."""
    with pytest.MonkeyPatch.context() as mp:
        # conftest shifts the seed of in-process runs only; compare like with like
        mp.setattr(zoo.api, "check_seed", _plain_seed)
        mp.setattr(zoo.sweep, "check_seed", _plain_seed)
        with (
            distributed.LocalCluster(
                n_workers=2, processes=True, threads_per_worker=1, dashboard_address=None
            ) as cl,
            distributed.Client(cl) as client,
        ):
            client.run(importlib.import_module, "zoo.sweep")
            yield cl


@pytest.fixture(scope="module")
def cells():
    return plan_report([MODEL], profile="smoke", engines=ENGINES)


@pytest.fixture(scope="module")
def local(cells, cluster):
    return run_cells(cells, SEED)


def assert_same_runs(runs, reference):
    assert set(runs) == set(reference)
    for key, run in runs.items():
        ref = reference[key]
        assert run.ok and run.status == ref.status, (key, run.error)  # one verdict
        pd.testing.assert_frame_equal(run.summary, ref.summary)
        assert run.log_evidence == ref.log_evidence
        for k, v in ref.diagnostics.items():
            if k not in HOW_IT_RAN:
                assert json.dumps(run.diagnostics[k]) == json.dumps(v), (key, k)
        if ref.idata is not None:
            for site in ref.idata.posterior.data_vars:
                np.testing.assert_array_equal(
                    run.idata.posterior[site].values, ref.idata.posterior[site].values
                )


def test_a_report_on_the_cluster_equals_the_local_report(cluster, cells, local, tmp_path):
    kw = dict(engines=ENGINES, profile="smoke", seed=SEED)
    zoo.report([MODEL], out=tmp_path / "dask", scheduler=cluster.scheduler_address, **kw)
    zoo.report([MODEL], out=tmp_path / "local", workers=1, **kw)
    pages = [json.loads((tmp_path / d / f"{MODEL}.json").read_text()) for d in ("dask", "local")]
    for page in pages:
        for run in page["runs"].values():
            for how in HOW_IT_RAN:
                run["diagnostics"].pop(how, None)
    for engine in ENGINES:
        for field, value in pages[1]["runs"][engine].items():
            assert pages[0]["runs"][engine][field] == value, (engine, field)
    assert pages[0]["table"] == pages[1]["table"]
    per_second = re.compile(r" \([0-9.]+/s\)")  # ESS per second: a time
    found = [[per_second.sub("", f["text"]) for f in page["findings"]] for page in pages]
    assert found[0] == found[1]
    stored = sorted(p.name for p in (tmp_path / "dask" / "cells" / MODEL).glob("*.json.gz"))
    assert stored == sorted(f"{e}-seed{SEED}.json.gz" for e in ENGINES)  # the client stores them


def _executing(dask_worker) -> list[str]:
    return [str(ts.key) for ts in dask_worker.state.executing]


def test_a_worker_killed_mid_cell_loses_nothing(cluster, cells, local):
    client = distributed.Client(cluster)
    killed: dict[str, int] = {}
    stop = threading.Event()

    def kill_a_busy_worker() -> None:
        """SIGKILL the first worker seen running the same cell for 0.1 s, and still running it
        just before the kill."""
        seen: dict[tuple[str, str], float] = {}
        while not stop.is_set() and not killed:
            try:
                busy = client.run(_executing)
            except Exception:  # noqa: BLE001 - a worker coming or going: ask again
                busy = {}
            now = time.monotonic()
            for worker, keys in busy.items():
                for key in keys:
                    if now - seen.setdefault((worker, key), now) > 0.1:
                        pid = client.run(os.getpid, workers=[worker])[worker]
                        if key not in client.run(_executing, workers=[worker])[worker]:
                            continue  # it finished meanwhile: not mid-cell
                        os.kill(pid, signal.SIGKILL)
                        killed.update(worker=worker, pid=pid, key=key)
                        return
            time.sleep(0.02)

    slow = [
        zoo.sweep.Cell(c.model, c.engine, {**c.options, "num_samples": 400})
        if c.engine == "mh"
        else c
        for c in cells
    ]
    reference = run_cells(slow[:1], SEED)
    killer = threading.Thread(target=kill_a_busy_worker, daemon=True)
    killer.start()
    try:
        runs = run_cells(slow, SEED, scheduler=cluster.scheduler_address)
    finally:
        stop.set()
        killer.join(30)
        client.close()
    assert killed, "no cell was seen running long enough to kill its worker"
    print(f"killed worker {killed['worker']} (pid {killed['pid']}) running {killed['key']}")
    with pytest.raises(ProcessLookupError):
        os.kill(killed["pid"], 0)  # the worker is gone
    assert len(runs) == len(cells) and all(r.ok for r in runs.values())
    assert_same_runs(runs, {**local, **reference})


def test_a_wrong_scheduler_address_is_one_clear_error():
    with pytest.raises(ZooError, match="cannot reach the Dask scheduler at 'tcp://127.0.0.1:9'"):
        DaskExecutor("tcp://127.0.0.1:9", timeout=2)


def coin(y):
    p = pyro.sample("p", dist.Beta(1.0, 1.0))
    with pyro.plate("flips", len(y)):
        pyro.sample("y", dist.Bernoulli(p), obs=y)


@pytest.mark.usefixtures("registry")
def test_a_model_only_this_process_knows_is_one_clear_error(cluster):
    zoo.register("dask_local_coin", model=coin, data={"y": torch.ones(3)})
    cells = plan_report(["dask_local_coin"], profile="smoke", engines=["laplace"])
    with pytest.raises(ZooError, match="on a Dask worker: unknown model 'dask_local_coin'"):
        run_cells(cells, SEED, scheduler=cluster.scheduler_address)


def test_a_task_runs_under_the_settings_of_the_process_that_submitted_it(cluster):
    pool = DaskExecutor(cluster.scheduler_address)
    try:
        with zoo.configure(uncompiled="fx", code_version="submitted"):
            want = zoo.config()
            got = pool.submit(zoo.config).result()
        assert got == want
        assert pool.submit(zoo.config).result() == zoo.config()  # and the settings change back
    finally:
        pool.shutdown()
