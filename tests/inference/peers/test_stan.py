"""The ``stan`` engine: Stan's NUTS (PyStan) on a posteriordb model's own Stan program. Without
Stan: every posteriordb model carries its program, and the engine refuses what it cannot run
and says how to install PyStan. With Stan (the ``stan`` extra; slow: the first build of a
program compiles C++): it draws the reference posterior, repeats by seed, and
joins the leaderboard."""

from __future__ import annotations

import importlib.util
import sys

import numpy as np
import pytest

import zoo
from tests.sampling import agree
from tests.seeding import shifted
from zoo_datasets.posteriordb import vendored_posteriors
from zoo_inference.peers import stan as stan_peer

SCHOOLS = "pdb_eight_schools_eight_schools_noncentered"
SMALL = {"num_samples": 400, "warmup": 400, "num_chains": 2}
needs_stan = pytest.mark.skipif(
    importlib.util.find_spec("stan") is None, reason="pystan not installed (the stan extra)"
)


def test_every_posteriordb_model_carries_its_stan_program() -> None:
    pdb = zoo.list_models(suite="posteriordb")
    assert sorted(stan_peer.PROGRAMS) == pdb
    assert len(pdb) == len(vendored_posteriors())
    for name in pdb:
        program = stan_peer.PROGRAMS[name]
        assert "model" in program.code and program.data(), name
        assert program.matches(zoo.get_model(name).load_data()), name


def test_stan_refuses_a_model_without_a_program_and_other_data() -> None:
    with pytest.raises(zoo.ZooError, match="has none: the posteriordb models"):
        zoo.run("eight_schools_noncentered", "stan")
    data = zoo.get_model(SCHOOLS).load_data()
    other = {**data, "y": data["y"] + 1}
    with pytest.raises(zoo.ZooError, match="on its own data only"):
        zoo.run(SCHOOLS, "stan", data=other)


def test_without_pystan_stan_says_how_to_install_it(monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "stan", None)  # an import of it raises ImportError
    with pytest.raises(zoo.ZooError, match=r"pip install 'pystan>=3\.10' 'setuptools<80'"):
        zoo.run(SCHOOLS, "stan", **SMALL)


@pytest.mark.slow
@needs_stan
def test_stan_draws_the_reference_and_repeats_by_seed(capsys) -> None:
    """Stan's draws of eight schools (non-centred) agree with posteriordb's reference, the
    model's deterministic theta and log-likelihood come from the Pyro model, every leapfrog
    step is counted, the same seed gives the same draws, and without progress PyStan says
    nothing."""
    entry = zoo.get_model(SCHOOLS)
    seed = shifted(0)
    run = zoo.run(SCHOOLS, "stan", seed=seed, progress=False, **SMALL)
    assert run.status in ("ok", "unreliable"), run.reasons
    said = capsys.readouterr()
    assert "Sampling" not in said.out + said.err  # PyStan's bar, silent without progress
    truth = entry.ground_truth()
    for site in ("mu", "tau"):
        agree(run, truth, site)
    post = run.idata.posterior
    assert post["theta_trans"].shape == (2, 400, 8)
    theta = post["mu"].values[..., None] + post["tau"].values[..., None] * post["theta_trans"]
    np.testing.assert_allclose(post["theta"].values, theta, rtol=1e-12)
    assert "y" in run.idata.log_likelihood
    steps = run.idata.sample_stats["n_steps"].values
    assert steps.shape == (2, 400)
    d = run.diagnostics
    assert d["gradient_evals"] == d["warmup_gradient_evals"] + steps.sum() > steps.sum()
    again = zoo.run(SCHOOLS, "stan", seed=seed, progress=False, **SMALL)
    assert np.array_equal(again.idata.posterior["mu"].values, post["mu"].values)
    other = zoo.run(SCHOOLS, "stan", seed=seed + 1, progress=False, **SMALL)
    assert not np.array_equal(other.idata.posterior["mu"].values, post["mu"].values)


@pytest.mark.slow
@needs_stan
def test_stan_joins_the_leaderboard(tmp_path) -> None:
    board = zoo.benchmark(["stan"], [SCHOOLS], size="smoke", out=tmp_path / "b")
    cell = board.cells[board.cells["engine"] == "stan"].iloc[0]
    assert cell["status"] in ("ok", "unreliable"), cell["reason"]
    assert cell["gradients"] > 0 and cell["ess_per_1000_gradients"] > 0
