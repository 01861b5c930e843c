"""Sweeps that lose nothing: a report stores every finished cell (``OUT/cells``), and a report run
again resumes: finished cells are read, not recomputed (their files untouched); a corrupt,
partial or stale cell is detected, logged and recomputed; the results equal an uninterrupted
run's. The interruption is real: a ``zoo report`` subprocess killed with SIGKILL."""

from __future__ import annotations

import gzip
import hashlib
import json
import logging
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pyro
import pyro.distributions as dist
import pytest
import torch
from scipy.special import betaln

import zoo
import zoo.api
import zoo.sweep
from tests.seeding import shifted
from zoo import store as cell_store
from zoo.cli import main

MODEL = "beta_bernoulli"
ENGINES = "mh,importance,laplace,exact"  # mh first: a second, then three short cells
SEED = shifted(0)
ARGS = [MODEL, "--engines", ENGINES, "--profile", "smoke", "--workers", "1", "--seed", str(SEED)]
VOLATILE = {"generated", "wall_time_s", "ess_per_s"}
TIMED = re.compile(r"fastest|per second", re.IGNORECASE)


def _plain_seed(seed):
    return seed


@pytest.fixture(scope="module", autouse=True)
def _unshifted_and_pinned():
    """The suite shifts every in-process run's seed (conftest); a subprocess is not shifted.
    Here every report passes ``--seed shifted(0)`` itself, in-process or not, so the stored
    keys and numbers of both kinds of run agree. The code version's source hash is pinned
    (``code_version``; ``ZOO_CODE_VERSION`` for subprocesses): an edit of the packages while
    the module runs (another checkout's work) is not a change these tests are about;
    ``test_a_code_change_recomputes_every_cell`` and the hashing tests below are."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(zoo.api, "check_seed", _plain_seed)
        mp.setattr(zoo.sweep, "check_seed", _plain_seed)
        mp.setenv("ZOO_CODE_VERSION", "test_resume")  # for the CLI's subprocesses
        with zoo.configure(code_version="test_resume"):
            yield


def report(out: Path, *extra: str) -> int:
    return main(["report", *ARGS, "--out", str(out), *extra])


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> Path:
    """An uninterrupted report (its store included)."""
    out = tmp_path_factory.mktemp("reference")
    assert report(out, "-q") == 0
    return out


def cell_files(out: Path) -> dict[str, tuple[int, int]]:
    """Every stored cell file: (inode, mtime in ns)."""
    return {
        p.name: (p.stat().st_ino, p.stat().st_mtime_ns)
        for p in sorted((out / "cells" / MODEL).glob("*-seed*.*"))
    }


def normalised(path: Path) -> object:
    """A report's JSON without what differs between two runs of the same cells: times, the
    generation date, ESS per second (the findings' "(12.3/s)"), and findings that rank engines
    by time ("Fastest engine ...")."""

    def clean(obj: object) -> object:
        if isinstance(obj, dict):
            return {k: clean(v) for k, v in obj.items() if k not in VOLATILE}
        if isinstance(obj, list):
            return [
                clean(v)
                for v in obj
                if not (isinstance(v, dict) and TIMED.search(str(v.get("text"))))
            ]
        if isinstance(obj, str):
            return re.sub(r" \([0-9.]+/s\)", "", obj)
        return obj

    return clean(json.loads(path.read_text(encoding="utf-8")))


def assert_same_results(out: Path, reference: Path) -> None:
    for name in (f"{MODEL}.json", "results.json"):
        assert normalised(out / name) == normalised(reference / name), name
    assert (out / f"{MODEL}.csv").read_text() == (reference / f"{MODEL}.csv").read_text()


def copy_report(reference: Path, tmp_path: Path) -> Path:
    out = tmp_path / "report"
    shutil.copytree(reference, out)
    return out


def test_a_killed_report_resumes_without_recomputing_its_finished_cells(
    reference, tmp_path, capsys
):
    out = tmp_path / "killed"
    with open(tmp_path / "stderr.txt", "wb") as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "zoo", "report", *ARGS, "--out", str(out)],
            stdout=subprocess.DEVNULL,
            stderr=err,
            start_new_session=True,  # its own process group: the kill takes any worker too
        )
        try:
            deadline = time.monotonic() + 180
            while not list((out / "cells" / MODEL).glob("*.json.gz")):
                assert proc.poll() is None, (tmp_path / "stderr.txt").read_text()[-2000:]
                assert time.monotonic() < deadline, "no cell was stored in 180 s"
                time.sleep(0.01)
        finally:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == -signal.SIGKILL
    assert not (out / "index.html").exists()  # killed before its pages
    before = {n: v for n, v in cell_files(out).items() if n.endswith(".json.gz")}
    before |= {n[:-8] + ".nc": cell_files(out)[n[:-8] + ".nc"] for n in before}
    assert 1 <= len(before) // 2 < 4, before

    capsys.readouterr()
    assert report(out) == 0
    err = capsys.readouterr().err
    finished = len(before) // 2
    assert f"resumed {finished} of 4 cells" in err, err
    after = cell_files(out)
    assert {n: after[n] for n in before} == before  # read, not rewritten
    assert len(after) == 8  # every cell stored now
    # exactly the cells not finished before the kill ran (one progress line each)
    assert len(re.findall(rf"\] {MODEL}/\w+: (?:ok|unreliable) ", err)) == 4 - finished, err
    assert_same_results(out, reference)


def test_corrupt_partial_or_mismatched_cells_are_logged_and_recomputed(
    reference, tmp_path, capsys, caplog
):
    out = copy_report(reference, tmp_path)
    cells = out / "cells" / MODEL
    nc = cells / f"mh-seed{SEED}.nc"
    nc.write_bytes(nc.read_bytes()[: nc.stat().st_size // 2])  # a netCDF cut short
    bad_json = cells / f"importance-seed{SEED}.json.gz"
    bad_json.write_bytes(bad_json.read_bytes()[:100])  # a record cut short
    record_path = cells / f"laplace-seed{SEED}.json.gz"
    record = cell_store.read_record(record_path)
    record["key"] = "0" * 64  # a record whose key does not match
    record_path.write_bytes(gzip.compress(json.dumps(record).encode()))
    (cells / f".exact-seed{SEED}.json.gz.abc.tmp").write_text("left by a killed writer")
    untouched = {n: v for n, v in cell_files(out).items() if n.startswith("exact")}

    with caplog.at_level(logging.WARNING, logger="zoo.store"):
        assert report(out) == 0
    logged = "\n".join(r.getMessage() for r in caplog.records)
    assert f"{MODEL}/mh: its netCDF does not match its record" in logged
    assert f"{MODEL}/importance: unreadable JSON" in logged
    assert f"{MODEL}/laplace: its key does not match" in logged
    err = capsys.readouterr().err
    assert "resumed 1 of 4 cells" in err and "(3 to run, 3 corrupt)" in err
    after = cell_files(out)
    assert {n: after[n] for n in untouched} == untouched
    assert not list(cells.glob(".*.tmp"))
    assert_same_results(out, reference)  # recomputed: the same numbers

    caplog.clear()
    before = cell_files(out)
    with caplog.at_level(logging.WARNING, logger="zoo.store"):
        assert report(out) == 0  # stored whole again: a finished report reads every cell
    assert not caplog.records
    err = capsys.readouterr().err
    assert "resumed 4 of 4 cells" in err and f"] {MODEL}/" not in err
    assert cell_files(out) == before
    assert_same_results(out, reference)


def test_changed_options_recompute_only_the_cells_they_touch(reference, tmp_path, capsys, caplog):
    out = copy_report(reference, tmp_path)
    before = cell_files(out)
    with caplog.at_level(logging.INFO, logger="zoo.store"):
        assert report(out, "-o", "mh.num_samples=60") == 0
    assert f"{MODEL}/mh: stale: options changed" in caplog.text
    err = capsys.readouterr().err
    assert "resumed 3 of 4 cells" in err and "(1 to run, 1 stale)" in err
    assert re.search(rf"{MODEL}/mh: (ok|unreliable) ", err), err  # recomputed: a line for it
    after = cell_files(out)
    assert {n for n in before if after[n] != before[n]} == {
        f"mh-seed{SEED}.json.gz",
        f"mh-seed{SEED}.nc",
    }
    page = json.loads((out / f"{MODEL}.json").read_text())
    assert page["runs"]["mh"]["options"]["num_samples"] == 60

    assert report(out, "--fresh") == 0  # runs every cell again: back to the profile's options
    err = capsys.readouterr().err
    assert (
        "resumed" not in err and len(re.findall(rf"\] {MODEL}/\w+: (?:ok|unreliable) ", err)) == 4
    )
    assert all(cell_files(out)[n] != before[n] for n in before)
    assert_same_results(out, reference)


def test_a_code_change_recomputes_every_cell(reference, tmp_path, capsys, caplog, monkeypatch):
    out = copy_report(reference, tmp_path)
    with zoo.configure(code_version="another version"), caplog.at_level(logging.INFO, "zoo.store"):
        assert report(out) == 0
    assert caplog.text.count("stale: code changed; recomputing") == 4
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert "resumed 0 of 4 cells" in capsys.readouterr().err
    assert_same_results(out, reference)


def coin(y):
    p = pyro.sample("p", dist.Beta(1.0, 1.0))
    with pyro.plate("flips", len(y)):
        pyro.sample("y", dist.Bernoulli(p), obs=y)


def coin_posterior(y):
    k, n = float(y.sum()), len(y)
    return {"p": dist.Beta(1.0 + k, 1.0 + n - k)}, float(betaln(1.0 + k, 1.0 + n - k))


def explode(y):
    m = pyro.sample("m", dist.Normal(0.0, 1.0))
    with pyro.plate("n", y.shape[0]):
        pyro.sample("y", dist.Normal(m, torch.exp(m * 1e4)), obs=y)


@pytest.mark.usefixtures("registry")
def test_changed_data_or_a_failed_cell_is_recomputed(tmp_path, capsys, caplog):
    zoo.register("resume_coin", model=coin, posterior=coin_posterior, data={"y": torch.ones(3)})
    argv = ["report", "resume_coin", "--engines", "exact", "--workers", "1", "--seed", str(SEED)]
    argv += ["--out", str(tmp_path / "coin")]
    assert main(argv) == 0
    assert main(argv) == 0
    assert "resumed 1 of 1 cells" in capsys.readouterr().err
    data = {"y": torch.tensor([1.0, 1.0, 1.0, 0.0])}
    zoo.register("resume_coin", model=coin, posterior=coin_posterior, data=data, replace=True)
    with caplog.at_level(logging.INFO, logger="zoo.store"):
        assert main(argv) == 0
    assert "resume_coin/exact: stale: data changed" in caplog.text
    page = json.loads((tmp_path / "coin" / "resume_coin.json").read_text())
    assert page["runs"]["exact"]["summary"]["p"]["mean"] == pytest.approx(4 / 6)

    # a failed cell is stored (its reason on disk) and run again next time
    zoo.register("resume_explode", model=explode, data={"y": torch.ones(3)})
    argv = ["report", "resume_explode", "--engines", "svi", "--workers", "1", "--seed", str(SEED)]
    argv += ["-o", "svi.num_steps=20", "-o", "svi.lr=10.0", "--out", str(tmp_path / "x")]
    assert main(argv) == 0
    record = tmp_path / "x" / "cells" / "resume_explode" / f"svi-seed{SEED}.json.gz"
    stored = cell_store.read_record(record)
    assert stored["status"] == "failed" and stored["error"] and stored["netcdf"] is None
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="zoo.store"):
        assert main(argv) == 0
    assert "resume_explode/svi: it failed last time (" in caplog.text
    assert "resumed 0 of 1 cells" in capsys.readouterr().err and "1 failed" in caplog.text


# ---- the store's parts ---------------------------------------------------------------------


def test_results_round_trip_exactly_through_json():
    frame = pd.DataFrame(
        {"mean": [0.5, np.nan], "ess_bulk": [np.inf, 3.0], "n": np.array([1, 2], np.int32)},
        index=pd.Index(["p", "z[0, 1]"]),
    )
    value = {
        "float": 0.1 + 0.2,
        "nan": float("nan"),
        "ninf": float("-inf"),
        "scalar": np.float32(1.5),
        "tuple": (1, "a", None, True),
        "int_keys": {0: "a", (1, 2): np.arange(3)},
        "__tagged__": {"__tuple__": [1]},
        "tensor": torch.tensor([[1.0, 2.5]], dtype=torch.float64),
        "bools": np.array([True, False]),
        "objects": np.array(["x", 1], dtype=object),
        "frame": frame,
        "series": pd.Series([1.0, 2.0], index=["a", "b"], name="s"),
    }
    text = json.dumps(cell_store.encode(value), allow_nan=False)
    back = cell_store.decode(json.loads(text))
    assert set(back) == set(value) and back["float"] == value["float"]
    assert np.isnan(back["nan"]) and back["ninf"] == -np.inf
    assert type(back["scalar"]) is np.float32 and back["scalar"] == 1.5
    assert back["tuple"] == value["tuple"] and back["__tagged__"] == value["__tagged__"]
    assert back["int_keys"][0] == "a" and np.array_equal(back["int_keys"][(1, 2)], np.arange(3))
    assert back["tensor"].dtype == torch.float64 and torch.equal(back["tensor"], value["tensor"])
    assert back["bools"].dtype == bool and list(back["objects"]) == ["x", 1]
    pd.testing.assert_frame_equal(back["frame"], frame)
    pd.testing.assert_series_equal(back["series"], value["series"])
    with pytest.raises(cell_store.Unstorable, match="Beta"):
        cell_store.encode(dist.Beta(1.0, 1.0))


def test_the_code_version_covers_the_source_and_a_foreign_model(tmp_path, monkeypatch, configured):
    configured(code_version=None)
    own = cell_store.code_version(coin)  # defined here, outside the packages: its file counts
    assert own["model_source"] == hashlib.sha256(Path(__file__).read_bytes()).hexdigest()
    assert "model_source" not in cell_store.code_version(zoo.get_model(MODEL).model)
    assert own["source"] == cell_store.source_hash() and own["pyro-zoo"] == zoo.__version__
    folders = {pkg: tmp_path / pkg for pkg in cell_store.SOURCE_PACKAGES}
    for folder in folders.values():
        folder.mkdir()
        (folder / "a.py").write_text("x = 1\n")
    monkeypatch.setattr(cell_store, "SOURCE_PACKAGES", folders)
    first = cell_store.source_hash.__wrapped__()
    (folders["zoo_inference"] / "a.py").write_text("x = 2\n")
    assert cell_store.source_hash.__wrapped__() != first
    assert cell_store.fingerprint({"y": torch.ones(3)}) != cell_store.fingerprint(
        {"y": torch.ones(3, dtype=torch.float64)}
    )


def test_a_cell_that_cannot_be_stored_is_logged_and_run_again(tmp_path, caplog):
    store = cell_store.CellStore(tmp_path)
    summary = pd.DataFrame({"mean": [0.5], "sd": [0.1]}, index=["p"])
    run = zoo.Run("exact", summary=summary, model=MODEL, options={"guide": coin})
    with caplog.at_level(logging.WARNING, logger="zoo.store"):
        assert not store.save(MODEL, "exact", SEED, run.options, run)
    assert "cell beta_bernoulli/exact: not stored (cannot store function)" in caplog.text
    assert store.load(MODEL, "exact", SEED, run.options) == cell_store.Found(None)  # none
    run.options = {"num_samples": 10}
    assert store.save(MODEL, "exact", SEED, run.options, run)
    found = store.load(MODEL, "exact", SEED, run.options)
    pd.testing.assert_frame_equal(found.run.summary, summary)
    assert found.run.idata is None and found.run.data.keys() == {"y", "a", "b"}
    assert (
        cell_store.CellStore(tmp_path, reuse=False).load(MODEL, "exact", SEED, run.options).run
        is None
    )


def test_a_stored_cell_keeps_its_posterior_predictive_draws(tmp_path):
    """The report's predictive check reads the draws from the stored cell: the group, its
    values and the discrete flag come back from netCDF as they were."""
    run = zoo.run(MODEL, "exact", seed=SEED, progress=False, num_samples=200)
    assert "posterior_predictive" in run.idata.groups()
    store = cell_store.CellStore(tmp_path)
    assert store.save(MODEL, "exact", SEED, run.options, run)
    back = store.load(MODEL, "exact", SEED, run.options).run
    before, after = run.idata.posterior_predictive, back.idata.posterior_predictive
    assert list(after.data_vars) == list(before.data_vars)
    for name in before.data_vars:
        assert np.array_equal(after[name].values, before[name].values)
        assert after[name].attrs["discrete"] == before[name].attrs["discrete"] == 1  # Bernoulli
