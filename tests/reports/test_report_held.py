"""``zoo.report`` of results a user already holds: a Comparison or Runs become pages and index
entries with the numbers they hold; nothing runs again."""

from __future__ import annotations

import json

import pandas as pd
import pytest

import zoo
from zoo import api, sweep

SVI = {"num_steps": 30, "num_samples": 50}


@pytest.fixture(scope="module")
def held():
    """A small comparison of beta_bernoulli and two runs of normal_normal."""
    cmp = zoo.compare(
        "beta_bernoulli", ["exact", "svi"], exact={"num_samples": 200}, svi=SVI, seed=4
    )
    exact = zoo.run("normal_normal", "exact", num_samples=200, seed=4)
    svi = zoo.run("normal_normal", "svi", seed=4, **SVI)
    return cmp, exact, svi


@pytest.fixture
def no_running(monkeypatch):
    """Any engine run from here on fails the test."""

    def refuse(*args, **kwargs):
        raise AssertionError("a held result was run again")

    monkeypatch.setattr(api, "execute", refuse)
    monkeypatch.setattr(sweep, "execute", refuse)


def read_json(path):
    return json.loads(path.read_text(encoding="utf-8"))


def test_held_results_become_pages_with_their_own_numbers(held, tmp_path, no_running):
    cmp, exact, svi = held
    out = tmp_path / "report"
    index = zoo.report([cmp, exact, svi], out=out)
    assert index == out / "index.html"
    for name in ("beta_bernoulli", "normal_normal"):
        for ext in ("html", "md", "json", "csv"):
            assert (out / f"{name}.{ext}").is_file()
    listed = read_json(out / "results.json")["models"]
    assert set(listed) == {"beta_bernoulli", "normal_normal"}
    html = (out / "index.html").read_text(encoding="utf-8")
    assert 'href="beta_bernoulli.html"' in html and 'href="normal_normal.html"' in html

    page = read_json(out / "beta_bernoulli.json")
    assert page["profile"] == "custom" and page["seed"] == 4
    for engine, run in cmp.runs.items():
        got = page["runs"][engine]
        assert got["diagnostics"]["wall_time_s"] == run.wall_time_s  # the held number, exactly
        assert got["options"] == json.loads(json.dumps(run.options))
        for row, values in got["summary"].items():
            assert values["mean"] == run.summary.loc[row, "mean"]
    table = pd.read_csv(out / "beta_bernoulli.csv")
    assert table["svi_mean"].tolist() == pytest.approx(cmp.table_wide[("svi", "mean")].tolist())
    assert listed["beta_bernoulli"]["engines"]["svi"]["wall_time_s"] == cmp.runs["svi"].wall_time_s

    # Runs of one model share a page: a comparison of the engines they ran
    runs = read_json(out / "normal_normal.json")["runs"]
    assert set(runs) == {"exact", "svi"}
    assert runs["svi"]["diagnostics"]["wall_time_s"] == svi.wall_time_s
    assert runs["exact"]["diagnostics"]["wall_time_s"] == exact.wall_time_s


def test_a_single_run_is_a_one_engine_page_beside_earlier_models(held, tmp_path, no_running):
    cmp, exact, _ = held
    out = tmp_path / "report"
    zoo.report(cmp, out=out)
    zoo.report(exact, out=out)  # a later report into the same folder keeps beta_bernoulli
    assert set(read_json(out / "results.json")["models"]) == {"beta_bernoulli", "normal_normal"}
    page = read_json(out / "normal_normal.json")
    assert list(page["runs"]) == ["exact"]
    assert page["truth"]["log_evidence"] == pytest.approx(exact.log_evidence)


def test_held_results_are_checked_before_anything_is_written(held, tmp_path, no_running):
    cmp, exact, svi = held
    out = tmp_path / "report"
    with pytest.raises(ValueError, match="model names .* or results you hold .*not both"):
        zoo.report([cmp, "three_coin"], out=out)
    with pytest.raises(ValueError, match="profile, seed size the runs"):
        zoo.report(cmp, out=out, profile="quick", seed=1)
    with pytest.raises(ValueError, match="'beta_bernoulli'.* more than one result"):
        zoo.report([cmp, cmp], out=out)
    with pytest.raises(ValueError, match="more than one Run of engine"):
        zoo.report([exact, exact], out=out)
    assert not out.exists() or not any(out.iterdir())


def test_runs_of_other_seeds_or_data_or_an_unknown_model_are_refused(held, tmp_path, registry):
    import torch

    _, exact, svi = held
    other_seed = zoo.run("normal_normal", "exact", num_samples=10, seed=5)
    with pytest.raises(ValueError, match="different seeds"):
        zoo.report([svi, other_seed], out=tmp_path / "r")
    data = {**zoo.get_model("normal_normal").load_data(), "x": torch.tensor([9.0, 8.0])}
    other = zoo.run("normal_normal", "svi", data=data, seed=4, **SVI)
    with pytest.raises(ValueError, match="different data"):
        zoo.report([exact, other], out=tmp_path / "r")
    entry = zoo.get_model("normal_normal")
    zoo.register("gone", model=entry.model, data=entry.load_data())
    run = zoo.run("gone", "svi", **SVI)
    zoo.unregister("gone")
    with pytest.raises(ValueError, match="unknown model 'gone'"):
        zoo.report(run, out=tmp_path / "r")
