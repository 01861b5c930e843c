"""benchmarks/compare_peers.py: its tables of matched runs and time to N effective draws. The
peers are not installed in the test environment: these run the zoo's side and check the
bookkeeping that makes the comparisons fair."""

from __future__ import annotations

import importlib.util
import math
import sys
from pathlib import Path

from tests.paths import ROOT

sys.path.insert(0, str(ROOT / "benchmarks"))
spec = importlib.util.spec_from_file_location("compare_peers", ROOT / "benchmarks/compare_peers.py")
cp = importlib.util.module_from_spec(spec)
sys.modules["compare_peers"] = cp  # its dataclasses look their module up
spec.loader.exec_module(cp)


def test_every_peer_has_modules_and_a_ladder() -> None:
    for tool in (*cp.DEFAULT_PEERS, *cp.PEERS):
        assert tool in cp.PEER_MODULES, tool
        assert tool in cp.LADDERS, tool
    assert set(cp.MATCHED.values()) <= {"nuts", "chees"}


def test_every_ladder_steps_by_at_most_five_thirds() -> None:
    """No tool's smallest sufficient budget is overshot by much more than another's: each rung's
    warmup at most 5/3 of the last (sqrt(2) where the numbers round evenly)."""
    for tool, (_, rungs) in cp.LADDERS.items():
        warmups = [w for w, _ in rungs]
        assert warmups == sorted(warmups), tool
        assert all(b <= 5 / 3 * a for a, b in zip(warmups[:-1], warmups[1:], strict=True)), (
            tool,
            warmups,
        )


def test_matched_sizes_are_the_zoo_engines_own() -> None:
    # logistic_regression registers nuts with a dense metric; the matched peers get it too
    assert cp.matched_sizes("logistic_regression", "nuts", None) == (32, 500, 500, True)
    assert cp.matched_sizes("eight_schools_noncentered", "nuts", None) == (32, 500, 500, False)
    assert cp.matched_sizes("eight_schools_noncentered", "chees", 8) == (8, 300, 1000, False)


def test_ratios_against_the_best_and_the_matched_peer() -> None:
    def row(tool: str, ess_s: float) -> cp.Row:
        return cp.Row("m", tool, cp.Cell(), ess_per_s=ess_s, ess_per_cpu_s=ess_s / 2)

    rows = [row("zoo:nuts", 100.0), row("numpyro", 50.0), row("numpyro-vec", 200.0)]
    ratios = cp.model_ratios("m", rows)
    assert ("m", "nuts", 0.5, "numpyro-vec", 0.5) in ratios
    assert ("m", "nuts", 0.5, "matched numpyro-vec", 0.5) in ratios
    assert len(ratios) == 2  # numpyro is matched to no zoo engine


def test_an_attempt_reaches_only_with_both_ess_and_rhat() -> None:
    a = cp.Attempt("numpyro", 2, 10, 10, cp.Cell(), 400, ess=401.0, rhat=1.005)
    assert a.reached
    assert not cp.Attempt("numpyro", 2, 10, 10, cp.Cell(), 400, ess=399.0, rhat=1.0).reached
    assert not cp.Attempt("numpyro", 2, 10, 10, cp.Cell(), 400, ess=900.0, rhat=1.02).reached
    failed = cp.Cell(error="boom")
    assert not cp.Attempt("numpyro", 2, 10, 10, failed, 400, ess=900.0, rhat=1.0).reached


def test_time_to_ess_runs_the_zoo_with_its_target(tmp_path: Path, capsys) -> None:
    out = tmp_path / "t.md"
    cp.main(
        ["--time-to-ess", "100", "--models", "gamma_poisson", "--engines", "chees", "--peers",
         "", "--out", str(out)]
    )  # fmt: skip
    text = out.read_text()
    row = next(line for line in text.splitlines() if line.startswith("| gamma_poisson | zoo:chees"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[2].startswith("8 x (200 + ")  # the first rung, extended by ess=
    assert float(cells[5].replace(",", "")) >= 100 and float(cells[6]) <= cp.R_HAT_MAX
    ratio = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("RATIO"))
    assert ratio.split()[1:3] == ["time-to-100", "gamma_poisson-chees"]
    assert math.isnan(float(ratio.split()[3]))  # no peer ran


def test_engine_specs_carry_options() -> None:
    assert cp.parse_engine("nuts") == ("nuts", {})
    assert cp.split_engines("nuts:metric=low_rank,dense_mass=True,chees") == [
        "nuts:metric=low_rank,dense_mass=True",
        "chees",
    ]
    assert cp.parse_engine("nuts:metric=low_rank,dense_mass=True") == (
        "nuts",
        {"metric": "low_rank", "dense_mass": True},
    )
    assert cp.ladder_key("zoo:chees:metric=low_rank") == "zoo:chees"
    for engine in ("nuts", "chees", "mams"):
        assert f"zoo:{engine}" in cp.LADDERS
    assert cp.missing_engine("eight_schools_noncentered", "nuts:metric=low_rank") is None
    assert "nope" in cp.missing_engine("eight_schools_noncentered", "nope:x=1")
