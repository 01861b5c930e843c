"""The leaderboard (zoo.benchmark, zoo bench): the measure on draws whose answer is known, a
user's sampler beside a built-in one at smoke size, resuming from the store, the same figures
for the same seeds, and bad input refused before any work."""

from __future__ import annotations

import json
import runpy

import pytest

import zoo
import zoo.leaderboard as bench
from tests.paths import ROOT
from zoo.cli import main
from zoo_inference import bias

EXAMPLE = ROOT / "examples" / "mala.py"
TARGET = "gym_banana"


def test_every_gym_truth_with_an_exact_var_x2_gives_it():
    """The analytic targets carry Var[x²] in their truth: the banana's x0 = 10 u has
    Var[x0²] = 100² Var[u²] = 2e4."""
    truth = zoo.get_model(TARGET).ground_truth()
    assert float(truth.var_sq["x0"]) == pytest.approx(2e4)
    sites, ex2, var, how = bias.second_moments(truth)
    assert sites == ["x0", "x1"] and how == "the truth's Var[x²]"
    assert ex2[0] == pytest.approx(100.0) and var.shape == (2,)
    pdb = zoo.get_model("pdb_arK_arK").ground_truth()
    assert set(pdb.var_sq) == set(pdb.mean)  # posteriordb's reference keeps Var[x²] too


@pytest.fixture
def mala(registry):
    runpy.run_path(str(EXAMPLE))  # the README's sampler, registered as a user registers it
    yield "mala"


def test_a_users_sampler_joins_the_leaderboard_in_one_call(mala, tmp_path, monkeypatch):
    out = tmp_path / "board"
    board = zoo.benchmark(["nuts", mala], [TARGET], seeds=(0, 1), size="smoke", out=out)
    cells = board.cells[board.cells["seed"].notna()]
    assert sorted(cells["engine"].unique()) == ["mala", "nuts"] and len(cells) == 4
    assert set(cells["status"]) <= {"ok", "unreliable"}, cells[["engine", "reason"]]
    assert (cells["gradients"] > 0).all() and (cells["ess_per_1000_gradients"] > 0).all()
    mala_rows = cells[cells["engine"] == "mala"]
    assert (mala_rows["gradients_from"].str.startswith("the run's total")).all()
    published = board.table[board.table["engine"].str.startswith("published ")]
    assert set(published["engine"]) == {"published nuts", "published mams"}
    assert set(board.ranking["engine"]) == {"nuts", "mala"}
    index = (out / "index.html").read_text()
    assert "<code>mala</code>" in index and "Overall ranking" in index
    page = (out / bench.pages.page_name(TARGET)).read_text()
    assert "data:image/png;base64," in page
    stored = json.loads((out / "leaderboard.json").read_text())
    assert {r["engine"] for r in stored["ranking"]} == {"nuts", "mala"}
    assert (out / "leaderboard.csv").read_text().startswith("target,engine")

    def no_run(*args, **kwargs):
        raise AssertionError("a stored cell was run again")

    monkeypatch.setattr(bench, "fresh_cell", no_run)
    again = zoo.benchmark(["nuts", mala], [TARGET], seeds=(0, 1), size="smoke", out=out)
    figures = ["gradients", "final_b2_max", "ess_per_1000_gradients", "divergences"]
    assert again.cells[figures].equals(board.cells[figures])


def test_a_sampler_that_cannot_go_on_climbs_a_budget_ladder(monkeypatch):
    """Without ``resume`` a sampler cannot run to ``ess=``: its time to ESS is the wall time of
    the first rung of the size's ladder, each run cold in a process of its own, to reach the
    ESS target with every R-hat <= 1.01; the rungs tried are named beside it."""
    results = iter(
        [
            {"wall": 1.0, "ok": True, "error": None, "ess": 30.0, "r_hat": 1.0, "stopped": None},
            {"wall": 2.5, "ok": True, "error": None, "ess": 80.0, "r_hat": 1.005, "stopped": None},
        ]
    )
    calls = []

    def forked(fn, model, engine, seed, options):
        assert fn is bench.timed_run and "max_draws" not in options and "ess" not in options
        calls.append(options["num_samples"])
        return next(results)

    monkeypatch.setattr(bench, "forked", forked)
    with zoo.isolated():  # the README's mala, which takes no resume
        runpy.run_path(str(EXAMPLE))
        spec = zoo.get_model(TARGET).engine_spec("mala")
        assert spec.goes_on is False and zoo.get_model(TARGET).engine_spec("nuts").goes_on
        got = bench.time_to_ess(TARGET, "mala", 0, bench.SIZES["smoke"], spec)
    assert calls == [60, 120]
    assert got["time_to_ess_s"] == 2.5
    assert got["time_to_ess_reason"].endswith("120 draws a chain; tried 60 (1.0 s), 120 (2.5 s)")
    results = iter([{"wall": 1.0, "ok": False, "error": "boom", "ess": 0.0, "r_hat": 9.0,
                     "stopped": None}])  # fmt: skip
    with zoo.isolated():
        runpy.run_path(str(EXAMPLE))
        got = bench.time_to_ess(TARGET, "mala", 0, bench.SIZES["smoke"], spec)
    assert got["time_to_ess_s"] == float("inf") and "failed: boom" in got["time_to_ess_reason"]


TIMING = {"time_to_ess_s", "timed_wall_s", "wall_s", "process"}


def test_the_same_seed_gives_the_same_figures(tmp_path):
    """A cell in a fresh process, twice, and once in this process: everything but the clock's
    figures repeats to the last digit."""
    runs = [
        zoo.benchmark(["nuts"], [TARGET], size="smoke", out=tmp_path / "b", fresh=True)
        for _ in range(2)
    ]
    first, second = ({k: v for k, v in r.cells.iloc[0].items() if k not in TIMING} for r in runs)
    assert json.dumps(first, default=str) == json.dumps(second, default=str)
    assert runs[0].curves == runs[1].curves
    here = bench.measure_cell(TARGET, "nuts", 0, "smoke")
    assert here.pop("curve") == runs[0].curves[(TARGET, "nuts", 0)]
    assert all(first[k] == v for k, v in here.items() if k not in TIMING), here


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (dict(engines=["nutz"]), "unknown engine 'nutz'; did you mean 'nuts'"),
        (dict(suite="gymm"), "unknown suite 'gymm'"),
        (dict(suite=["eight_schools_cp_missing"]), "unknown model"),
        (dict(suite=["hmm"]), "has no ground truth"),
        (dict(size="huge"), "unknown size 'huge'"),
        (dict(seeds=["a"]), "seeds must be integers"),
        (dict(workers=0), "workers must be a positive integer"),
    ],
)
def test_bad_input_is_refused_before_any_work(call, message, tmp_path, monkeypatch):
    monkeypatch.setattr(bench, "fresh_cell", lambda *a: pytest.fail("work started"))
    kwargs = {"engines": ["nuts"], "suite": [TARGET], "out": tmp_path / "b", **call}
    with pytest.raises(zoo.ZooError, match=message):
        zoo.benchmark(**kwargs)
    assert not (tmp_path / "b" / "index.html").exists()


def test_zoo_bench_writes_the_leaderboard(tmp_path, capsys):
    out = tmp_path / "lb"
    code = main(["bench", TARGET, "--engines", "nuts", "--size", "smoke", "--out", str(out)])
    assert code == 0
    printed = capsys.readouterr()
    assert f"leaderboard written to {out}/index.html" in printed.out
    assert f"{TARGET}/nuts seed 0:" in printed.err  # a line a cell in a log
    stored = json.loads((out / "leaderboard.json").read_text())
    (cell,) = [c for c in stored["cells"] if c["engine"] == "nuts"]
    assert cell["seed"] == 0 and cell["chains"] == 2 and cell["draws"] == 60
    assert cell["gradients"] > 0 and cell["ess_per_1000_gradients"] > 0
    assert [r["engine"] for r in stored["ranking"]] == ["nuts"]
    assert "<code>nuts</code>" in (out / "index.html").read_text()
