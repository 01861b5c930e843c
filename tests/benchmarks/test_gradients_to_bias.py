"""benchmarks/gradients_to_bias.py: the second moments it judges by (the truth's Var[x²], a
cached reference run's, or a Gaussian's), its engine specs, and one end-to-end smoke run (the
measure itself: tests/inference/test_bias.py)."""

from __future__ import annotations

import importlib.util
import json
import math
import sys

import numpy as np
import pytest

from tests.paths import ROOT

SCRIPT = ROOT / "benchmarks" / "gradients_to_bias.py"


@pytest.fixture(scope="module")
def g2b():
    if str(SCRIPT.parent) not in sys.path:  # the script imports engine_specs beside it
        sys.path.insert(0, str(SCRIPT.parent))
    spec = importlib.util.spec_from_file_location("gradients_to_bias", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def test_second_moments_follow_the_truths_sites(g2b):
    sites, ex2, var, source = g2b.second_moments("gym_neals_funnel", {})
    assert sites == ["z", "x"] and ex2.shape == var.shape == (10,)
    np.testing.assert_allclose(ex2, [9.0] + [math.exp(4.5)] * 9)
    assert source.startswith("the truth's Var[x²] (")
    sites, ex2, var, source = g2b.second_moments("gym_radon", {})
    assert ex2.shape == var.shape == (91,) and source.startswith("approximate: a Gaussian's")
    sites, ex2, var, source = g2b.second_moments(
        "gym_radon", {"gym_radon": {"var_x2": list(range(91)), "how": "t"}}
    )
    assert source == "reference run: t" and var[5] == 5.0
    ref = {"var_x2": [1.0] * 91, "ex2": list(ex2), "how": "t"}
    ref["ex2"][3] += 0.5  # the run's own E[x²] off by half an sd of x² at county_effect[1]
    sites, ex2, var, source = g2b.second_moments("gym_radon", {"gym_radon": ref})
    assert source == (
        f"reference run: t; its own b² against the truth: max 0.25 (county_effect[1]), "
        f"avg {0.25 / 91:.3g}"
    )


def test_brownian_motion_second_moments_are_exact(g2b):
    """Brownian motion's E[x²] and Var[x²] from the quadrature, whatever a cached reference
    says; the exact Var[x²] of the innovation scale is 15% above the old reference run's."""
    stand_in = {"gym_brownian_motion": {"var_x2": [1.0] * 32, "how": "t"}}
    sites, ex2, var, source = g2b.second_moments("gym_brownian_motion", stand_in)
    assert sites == ["innovation_noise_scale", "observation_noise_scale", "locs"]
    assert source.startswith("the truth's Var[x²] (exact: quadrature")
    np.testing.assert_allclose(ex2[:2], [0.0149725, 0.0141006], rtol=1e-5)
    np.testing.assert_allclose(var[:2], [1.26544e-4, 7.87336e-5], rtol=1e-5)
    assert (var > 0).all() and ex2.shape == var.shape == (32,)


def test_engine_specs(g2b):
    assert g2b.split_engines("nuts,chees:metric=low_rank,dense_mass=True,mams") == [
        "nuts",
        "chees:metric=low_rank,dense_mass=True",
        "mams",
    ]
    assert g2b.parse_engine("chees:metric=low_rank,dense_mass=True") == (
        "chees",
        {"metric": "low_rank", "dense_mass": True},
    )
    with pytest.raises(ValueError, match="before any engine"):
        g2b.split_engines("dense_mass=True,nuts")


def test_end_to_end_quick_run_writes_the_table(g2b, tmp_path):
    out = tmp_path / "g2b.md"
    # the cached Var[x²] references are read from --reference, wherever the table goes
    ref = {"gym_stochastic_volatility_small": {"var_x2": [1.0] * 103, "how": "a stand-in"}}
    (tmp_path / "refs.json").write_text(json.dumps(ref))
    g2b.main(
        [
            "--quick",
            "--targets",
            "banana,stochastic_volatility_small",
            "--engines",
            "chees,no_such_engine",
            "--chains",
            "2",
            "--draws",
            "60",
            "--warmup",
            "60",
            "--out",
            str(out),
            "--reference",
            str(tmp_path / "refs.json"),
        ]
    )
    text = out.read_text()
    row = next(line for line in text.splitlines() if line.startswith("| gym_banana | chees |"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[2] == "2" and cells[3] == "2 × 60"
    assert float(cells[5]) > 1  # gradients per draw from the n_steps statistic
    assert cells[11] == "95,520 / 58,750"  # the published NUTS figures beside
    assert cells[13] == "39,504 / 152,081"  # and NUTS's and MAMS's tuning gradients
    assert "no_such_engine: unknown engine" in text
    assert "gym_banana: the truth's Var[x²] (Inference Gym" in text
    assert "gym_stochastic_volatility_small: reference run: a stand-in" in text
    assert "| gym_stochastic_volatility_small | chees | 103 | 2 × 60 |" in text
