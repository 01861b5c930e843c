"""The command line as a user runs it."""

import json
import subprocess
import sys

import arviz as az
import pandas as pd
import pytest

import zoo
from zoo.cli import main


def test_list(capsys):
    """Every line within 120 columns: a model's description (cut at a sentence or a word where
    it is long), then its engines on lines of their own."""
    from zoo.cli import _cut

    assert main(["list"]) == 0
    out = capsys.readouterr().out
    for name in ("beta_bernoulli", "three_coin", "gaussian_mixture"):
        assert name in out
    assert max(len(line) for line in out.splitlines()) <= 120
    assert "engines: svi, nuts" in out
    assert _cut("One sentence here. And a second one that is long.", 30) == "One sentence here."
    assert _cut("a b c supercalifragilistic words", 20) == "a b c\u2026"
    assert _cut("fits", 20) == "fits"


def test_help_describes_every_argument(capsys):
    with pytest.raises(SystemExit):
        main(["run", "--help"])
    text = capsys.readouterr().out
    assert "name                  a model" in text and "an engine that applies" in text
    assert "--seed SEED           the random seed" in text


def test_info(capsys):
    assert main(["info", "three_coin"]) == 0
    out = capsys.readouterr().out
    assert "001 §1.1" in out and "em" in out and "Gauss–Legendre" in out
    assert "known of these engines" not in out  # three_coin declares none a user would see
    # what the model declares of its engines, as declared (the test suite's costs left out)
    assert main(["info", "eight_schools"]) == 0
    out = capsys.readouterr().out
    known = zoo.get_model("eight_schools").known
    assert f"laplace fails: {known['laplace'].reason}" in out
    assert "pathfinder biased: the centred funnel has no mode" in out
    assert "nuts" in known and known["nuts"].reason not in out


def test_run_writes_netcdf_summary_and_diagnostics(tmp_path, capsys):
    out = tmp_path / "run"
    assert (
        main(
            ["run", "three_coin", "-e", "em", "-o", "init=(0.4, 0.6, 0.7)", "-q", "--out", str(out)]
        )
        == 0
    )
    assert "0.406417" in capsys.readouterr().out
    idata = az.from_netcdf(str(out / "idata.nc"))
    assert float(idata.posterior["pi"].values.ravel()[0]) == pytest.approx(76 / 187)
    diag = json.loads((out / "diagnostics.json").read_text())
    assert diag["engine"] == "em" and diag["log_evidence"] == pytest.approx(-6.730117, abs=1e-6)
    assert (out / "summary.csv").read_text().startswith(",mean,sd")


def test_compare(tmp_path, capsys):
    """A row per parameter and engine, the truth's first, every line within 120 columns (a short
    SVI's reasons wrap); --out writes the long and wide tables and the runs' records."""
    out_dir = tmp_path / "cmp"
    argv = ["compare", "beta_bernoulli", "--engines", "exact,svi", "-q", "-o", "num_samples=200"]
    assert main([*argv, "-o", "svi.num_steps=60", "--out", str(out_dir)]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert max(len(line) for line in lines) <= 120, out
    assert lines[0] == "against the ground truth (closed form: p ~ Beta)"
    at = next(i for i, line in enumerate(lines) if line.startswith("p "))
    # truth mean, sd, then exact's mean, sd and error: Beta(8, 4) exactly
    assert lines[at].split() == ["p", "truth", "0.6667", "0.1307", "NaN"]
    assert lines[at + 1].split() == ["exact", "0.6667", "0.1307", "0"]
    assert lines[at + 2].split()[0] == "svi"
    assert "exact" in out and "log evidence -7.185387" in out
    table = pd.read_csv(out_dir / "table.csv", index_col=[0, 1])
    assert list(table.index) == [("p", "truth"), ("p", "exact"), ("p", "svi")]
    assert table.loc[("p", "exact"), "mean"] == pytest.approx(2 / 3, abs=1e-4)
    runs = json.loads((out_dir / "runs.json").read_text())
    assert runs["exact"]["status"] == "ok" and set(runs) == {"exact", "svi"}
    wide = pd.read_csv(out_dir / "table_wide.csv", header=[0, 1], index_col=0)
    assert wide.loc["p", ("exact", "mean")] == table.loc[("p", "exact"), "mean"]


def test_python_dash_m_zoo_list():
    proc = subprocess.run([sys.executable, "-m", "zoo", "list"], capture_output=True, text=True)
    assert proc.returncode == 0 and "three_coin" in proc.stdout


def test_report_in_a_log_prints_a_line_per_cell(tmp_path, capsys):
    """stderr not a terminal (pytest captures it): no bar, one line per finished cell with its
    status, its time and, for a cell that is not ok, the reason; -q prints none."""
    args = ["report", "beta_bernoulli", "--engines", "exact,laplace", "--workers", "1"]
    assert main([*args, "--out", str(tmp_path / "a")]) == 0
    lines = sorted(capsys.readouterr().err.strip().splitlines(), key=lambda s: s.split("] ")[-1])
    assert len(lines) == 2
    for line, engine in zip(lines, ["exact", "laplace"], strict=True):
        assert line.startswith("[") and f"/2] beta_bernoulli/{engine}: ok " in line
        assert line.endswith(" s")
    assert main([*args, "-q", "--out", str(tmp_path / "b")]) == 0
    assert "beta_bernoulli/" not in capsys.readouterr().err
