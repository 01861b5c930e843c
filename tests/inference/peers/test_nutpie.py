"""nutpie, the peer sampler on the zoo's own log density (engine ``nutpie``, only where named):
it draws a known posterior, repeats by seed in one process and in another, takes a point
outside the support as a divergence, joins the leaderboard, and says how to install it."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys

import arviz as az
import numpy as np
import pytest
import torch

import zoo
import zoo.leaderboard as bench
from tests.paths import ROOT
from tests.sampling import agree
from tests.seeding import shifted
from zoo_inference.peers import nutpie as peer

needs_nutpie = pytest.mark.skipif(
    importlib.util.find_spec("nutpie") is None, reason="nutpie is not installed (dev extra)"
)
SMALL = {"num_samples": 300, "warmup": 300, "num_chains": 2, "chain_groups": 1}
REPEAT = (
    "import json, zoo; r = zoo.run('normal_normal', 'nutpie', seed={seed}, progress=False, "
    "num_samples=20, warmup=20, num_chains=2, chain_groups=1); "
    "print(json.dumps(r.idata.posterior['mu'].values.tolist()))"
)


@needs_nutpie
def test_nutpie_draws_the_known_posterior():
    """normal_normal's posterior is N(1.6, 0.447²): nutpie's mean within 4.5 Monte-Carlo
    standard errors (its own ESS), every gradient counted."""
    entry = zoo.get_model("normal_normal")
    run = zoo.run("normal_normal", "nutpie", seed=shifted(0), progress=False, **SMALL)
    assert run.status == "ok", run.reasons
    agree(run, entry.ground_truth(), "mu")
    steps = run.idata.sample_stats["n_steps"].values
    assert steps.shape == (2, 300) and run.diagnostics["gradient_evals"] > steps.sum()
    assert run.diagnostics["metric"] == "diagonal"


@needs_nutpie
def test_the_same_seed_gives_the_same_draws_here_and_in_a_fresh_process():
    seed = shifted(4)
    runs = [
        zoo.run(
            "normal_normal",
            "nutpie",
            seed=seed,
            progress=False,
            **{**SMALL, "num_samples": 20, "warmup": 20},
        )
        for _ in range(2)
    ]
    here = [r.idata.posterior["mu"].values.tolist() for r in runs]
    assert here[0] == here[1], "twice in one process: different draws"
    out = subprocess.run(
        [sys.executable, "-c", REPEAT.format(seed=seed)],
        capture_output=True, text=True, cwd=ROOT, timeout=300,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    assert json.loads(out.stdout.strip().splitlines()[-1]) == here[0], "in a fresh process"
    other = zoo.run("normal_normal", "nutpie", seed=seed + 1, progress=False, num_samples=20,
                    warmup=20, num_chains=2, chain_groups=1)  # fmt: skip
    assert other.idata.posterior["mu"].values.tolist() != here[0]


def half_normal(q: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """N(0, I) on coordinate 0 > 0 (-inf beyond): coordinate 0 is half-normal, mean
    sqrt(2 / pi), sd sqrt(1 - 2 / pi)."""
    inside = q[:, 0] > 0
    value = torch.where(inside, -0.5 * (q * q).sum(-1), torch.tensor(-torch.inf, dtype=q.dtype))
    return value, -q


@needs_nutpie
def test_a_point_outside_the_support_is_a_divergence_not_a_crash():
    gen = torch.Generator().manual_seed(shifted(2))
    start = torch.full((2, 2), 0.5, dtype=torch.float64)
    s = peer.nutpie_sampler(half_normal, start, num_samples=600, warmup=300, gen=gen)
    assert int(s.stats["diverging"].sum()) > 0
    x = s.theta[..., 0].numpy()
    assert (x > 0).all()
    mcse = np.sqrt(1 - 2 / np.pi) / np.sqrt(float(az.ess(x)))
    assert abs(x.mean() - np.sqrt(2 / np.pi)) < 4.5 * mcse


@needs_nutpie
def test_nutpie_joins_the_leaderboard(tmp_path):
    """Named, the opt-in peer is a row of the leaderboard: gradients counted per draw (its
    n_steps); it cannot go on from its last draw, so its time to ESS comes from a budget
    ladder of cold runs."""
    board = zoo.benchmark(["nutpie"], ["gym_banana"], size="smoke", out=tmp_path / "b")
    cell = board.cells[board.cells["engine"] == "nutpie"].iloc[0]
    assert cell["status"] in ("ok", "unreliable"), cell["reason"]
    assert cell["gradients"] > 0 and cell["ess_per_1000_gradients"] > 0
    assert "budget ladder" in cell["time_to_ess_reason"]
    assert "nutpie" not in zoo.get_model("gym_banana").engines  # only where named


def test_without_nutpie_the_engine_says_how_to_install_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "nutpie", None)  # an import of it raises ImportError
    with pytest.raises(zoo.ZooError, match=r"pip install 'nutpie>=0\.13'"):
        peer.nutpie_module()
    assert bench.check_engines(["nutpie"], ["gym_banana"]) == ["nutpie"]
