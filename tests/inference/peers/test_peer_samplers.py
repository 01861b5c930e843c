"""The peer samplers on the zoo's own log density, nutpie and NumPyro's NUTS (engines ``nutpie``
and ``numpyro``, only where named): each draws a known posterior, repeats by seed in one process
and in another, takes a point outside the support as a divergence, joins the leaderboard, and
says how to install its library where it is missing."""

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
from zoo_inference import parallel
from zoo_inference.peers import numpyro as numpyro_peer
from zoo_inference.peers import nutpie as nutpie_peer

LIBRARIES = {"nutpie": ("nutpie",), "numpyro": ("numpyro", "jax")}
KERNELS = {"nutpie": nutpie_peer.nutpie_sampler, "numpyro": numpyro_peer.numpyro_sampler}


def peers(slow: tuple[str, ...] = ()) -> list:
    """The peers as parameters, each skipped where its library is missing; those in ``slow``
    run in the slow suite only (numpyro's JAX start and compile in each of its processes)."""
    return [
        pytest.param(
            name,
            marks=[
                pytest.mark.skipif(
                    any(importlib.util.find_spec(m) is None for m in modules),
                    reason=f"{' and '.join(modules)} not installed (dev extra)",
                ),
                *([pytest.mark.slow] if name in slow else []),
            ],
        )
        for name, modules in LIBRARIES.items()
    ]


PEERS = peers()
SMALL = {"num_samples": 300, "warmup": 300, "num_chains": 2, "chain_groups": 1}
TINY = {**SMALL, "num_samples": 20, "warmup": 20}
REPEAT = (
    "import json, zoo; r = zoo.run('normal_normal', {engine!r}, seed={seed}, progress=False, "
    "**{options!r}); print(json.dumps(r.idata.posterior['mu'].values.tolist()))"
)


@pytest.mark.parametrize("engine", PEERS)
def test_a_peer_draws_the_known_posterior(engine):
    """normal_normal's posterior is N(1.6, 0.447²): the peer's mean within 4.5 Monte-Carlo
    standard errors (its own ESS), every gradient counted, the trees' steps per draw kept."""
    entry = zoo.get_model("normal_normal")
    run = zoo.run("normal_normal", engine, seed=shifted(0), progress=False, **SMALL)
    assert run.status == "ok", run.reasons
    agree(run, entry.ground_truth(), "mu")
    steps = run.idata.sample_stats["n_steps"].values
    assert steps.shape == (2, 300) and run.diagnostics["gradient_evals"] > steps.sum()
    assert run.diagnostics["metric"] == "diagonal"


@pytest.mark.parametrize("engine", peers(slow=("numpyro",)))
def test_the_same_seed_gives_the_same_draws_here_and_in_a_fresh_process(engine):
    seed = shifted(4)
    runs = [zoo.run("normal_normal", engine, seed=seed, progress=False, **TINY) for _ in range(2)]
    here = [r.idata.posterior["mu"].values.tolist() for r in runs]
    assert here[0] == here[1], "twice in one process: different draws"
    code = REPEAT.format(engine=engine, seed=seed, options=TINY)
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=300
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert json.loads(out.stdout.strip().splitlines()[-1]) == here[0], "in a fresh process"
    other = zoo.run("normal_normal", engine, seed=seed + 1, progress=False, **TINY)
    assert other.idata.posterior["mu"].values.tolist() != here[0]


def half_normal(q: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """N(0, I) on coordinate 0 > 0 (-inf beyond): coordinate 0 is half-normal, mean
    sqrt(2 / pi), sd sqrt(1 - 2 / pi)."""
    inside = q[:, 0] > 0
    value = torch.where(inside, -0.5 * (q * q).sum(-1), torch.tensor(-torch.inf, dtype=q.dtype))
    return value, -q


@pytest.mark.parametrize("engine", PEERS)
def test_a_point_outside_the_support_is_a_divergence_not_a_crash(engine):
    gen = torch.Generator().manual_seed(shifted(2))
    start = torch.full((2, 2), 0.5, dtype=torch.float64)
    s = KERNELS[engine](half_normal, start, num_samples=600, warmup=300, gen=gen)
    assert int(s.stats["diverging"].sum()) > 0
    x = s.theta[..., 0].numpy()
    assert (x > 0).all()
    mcse = np.sqrt(1 - 2 / np.pi) / np.sqrt(float(az.ess(x)))
    assert abs(x.mean() - np.sqrt(2 / np.pi)) < 4.5 * mcse


@pytest.mark.parametrize("engine", peers(slow=("numpyro",)))
def test_a_peer_joins_the_leaderboard(engine, tmp_path):
    """Named, the opt-in peer is a row of the leaderboard: gradients counted per draw (its
    n_steps); it cannot go on from its last draw, so its time to ESS comes from a budget
    ladder of cold runs."""
    board = zoo.benchmark([engine], ["gym_banana"], size="smoke", out=tmp_path / "b")
    cell = board.cells[board.cells["engine"] == engine].iloc[0]
    assert cell["status"] in ("ok", "unreliable"), cell["reason"]
    assert cell["gradients"] > 0 and cell["ess_per_1000_gradients"] > 0
    assert "budget ladder" in cell["time_to_ess_reason"]
    assert engine not in zoo.get_model("gym_banana").engines  # only where named


@pytest.mark.parametrize(
    ("engine", "module", "install"),
    [
        ("nutpie", "nutpie", "pip install 'nutpie>=0.13'"),
        ("numpyro", "numpyro.infer", "pip install 'numpyro>=0.15'"),
    ],
)
def test_without_its_library_a_peer_says_how_to_install_it(engine, module, install, monkeypatch):
    monkeypatch.setitem(sys.modules, module, None)  # an import of it raises ImportError
    find = {"nutpie": nutpie_peer.nutpie_module, "numpyro": numpyro_peer.jax_modules}[engine]
    with pytest.raises(zoo.ZooError, match=install.replace("(", r"\(").replace(".", r"\.")):
        find()
    assert bench.check_engines([engine], ["gym_banana"]) == [engine]


FORK_CHECK = (
    "from zoo_inference.parallel import fork_is_safe; before = fork_is_safe(); "
    "import jax.numpy as jnp; jnp.ones(2).block_until_ready(); print(before, fork_is_safe())"
)


IN_PROCESS = (
    "import json, torch; from zoo_inference import parallel; "
    "from zoo_inference.peers import numpyro as peer; "
    "from tests.inference.peers.test_peer_samplers import half_normal; "
    "parallel.may_fork_child = lambda: False; "
    "gen = torch.Generator().manual_seed({seed}); "
    "start = torch.full((2, 2), 0.5, dtype=torch.float64); "
    "s = peer.numpyro_sampler(half_normal, start, num_samples=30, warmup=30, gen=gen); "
    "print(parallel.fork_is_safe(), json.dumps(s.theta.tolist()))"
)


@pytest.mark.skipif(importlib.util.find_spec("numpyro") is None, reason="numpyro not installed")
def test_numpyro_runs_jax_in_a_child_and_this_process_may_still_fork():
    """The numpyro engine forks a process for JAX: after its run, this process's chain groups
    and leaderboard cells still fork, and its draws are those of a run kept in its process
    (where none may fork), which then forks no more."""
    run = zoo.run("normal_normal", "numpyro", seed=shifted(5), progress=False, **TINY)
    assert run.idata.posterior["mu"].shape == (2, 20)
    assert parallel.fork_is_safe() and not jax_is_live()
    seed = shifted(6)
    gen = torch.Generator().manual_seed(seed)
    start = torch.full((2, 2), 0.5, dtype=torch.float64)
    forked = numpyro_peer.numpyro_sampler(half_normal, start, num_samples=30, warmup=30, gen=gen)
    out = subprocess.run(
        [sys.executable, "-c", IN_PROCESS.format(seed=seed)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    safe, theta = out.stdout.strip().splitlines()[-1].split(" ", 1)
    assert safe == "False" and json.loads(theta) == forked.theta.tolist()


def jax_is_live() -> bool:
    return bool(getattr(sys.modules.get("jax._src.xla_bridge"), "_backends", None))


@pytest.mark.skipif(importlib.util.find_spec("jax") is None, reason="jax not installed (dev extra)")
def test_once_jax_runs_here_nothing_forks():
    """JAX's thread pool does not survive a fork (a forked cell or chain group would hang), so
    after a numpyro run in a process its chain groups and leaderboard cells stay in it."""
    out = subprocess.run(
        [sys.executable, "-c", FORK_CHECK], capture_output=True, text=True, cwd=ROOT, timeout=300
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["True", "False"]
