"""One verdict: the status a run is given once, where the runner finalises it
(inference.verdict.judged in zoo.api.execute), is the one Python, the CLI, the report's progress
log, its pages and the cell store all show."""

from __future__ import annotations

import dataclasses

import pytest

import zoo
from zoo import store as cell_store
from zoo.cli import main
from zoo.sweep import Cell, run_cells
from zoo_inference import Run
from zoo_inference.verdict import MAX_R_HAT, assess, judged

MODEL = "beta_bernoulli"
# nuts too short to converge: 2 chains of 50 draws give R-hat above 1.01 and bulk ESS below 100
SHORT = {"num_samples": 50, "warmup": 50, "num_chains": 2}


@pytest.fixture(scope="module")
def short_nuts() -> Run:
    return zoo.run(MODEL, "nuts", progress=False, **SHORT)


def test_a_runs_status_is_the_verdict_of_its_diagnostics(short_nuts: Run) -> None:
    run = short_nuts
    d = run.diagnostics
    assert d["max_r_hat"] > MAX_R_HAT and d["min_ess_bulk"] < 100
    assert run.status == "unreliable" and run.ok
    assert run.reasons[0].startswith(f"R\u0302 {d['max_r_hat']:.3f} > 1.01")
    assert run.reasons[1].startswith(f"min bulk ESS {d['min_ess_bulk']:.0f} < 100")
    assert run.caveat == "; ".join(run.reasons)
    assert f"unreliable: {run.caveat}" in repr(run)
    assert "unreliable" in run._repr_html_() and "min bulk ESS" in run._repr_html_()
    # judged once: the same verdict again changes nothing
    assert assess(run).reasons == run.reasons
    assert dataclasses.replace(judged(run), idata=None) == dataclasses.replace(run, idata=None)
    exact = zoo.run(MODEL, "exact", num_samples=200, progress=False)
    assert exact.status == "ok" and exact.reasons == () and exact.caveat is None


def test_an_engines_own_caveat_stays_the_first_reason() -> None:
    own = Run(
        engine="importance",
        status="unreliable",
        caveat="importance weights have Pareto k\u0302 1.44 > 0.7",
        diagnostics={"pareto_k": 1.44, "max_r_hat": 1.5},
    )
    once = judged(own)
    assert once.reasons == (own.caveat, "R\u0302 1.50 > 1.01: the chains disagree")
    assert judged(once) == once and assess(once).flags == ("caveat", "r_hat")
    failed = judged(Run(engine="svi", status="failed", error="ELBO is nan"))
    assert failed.reasons == ("ELBO is nan",) and failed.caveat is None


def test_the_cli_ends_with_the_status_and_fails_only_for_failed(capsys) -> None:
    argv = ["run", MODEL, "-e", "nuts", *(f"-o{k}={v}" for k, v in SHORT.items())]
    assert main(argv) == 0
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("status: unreliable: R\u0302 1.") and "min bulk ESS" in err[-1]
    assert main(["run", MODEL, "-e", "exact", "-o", "num_samples=100"]) == 0
    assert capsys.readouterr().err.strip().splitlines()[-1] == "status: ok"


def test_the_stored_cell_and_the_progress_log_keep_the_verdict(tmp_path, capsys) -> None:
    store = cell_store.CellStore(tmp_path)
    cell = Cell(MODEL, "nuts", {**zoo.get_model(MODEL).engine_spec("nuts").defaults, **SHORT})
    (run,) = run_cells([cell], 0, progress="lines", store=store).values()
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert line.startswith(f"[1/1] {MODEL}/nuts: unreliable ") and run.caveat in line
    back = store.load(MODEL, "nuts", 0, cell.options).run
    assert back is not None
    assert (back.status, back.reasons, back.caveat) == (run.status, run.reasons, run.caveat)
    record = cell_store.read_record(store.paths(MODEL, "nuts", 0)[0])
    assert record["status"] == "unreliable"
