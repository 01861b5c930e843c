"""Simulation-based calibration: ``zoo.sbc`` and ``zoo sbc``.

The power of the tests, for the chi-square test this module uses (10 bins at 100 replications,
1 parameter, Bonferroni level 1e-3), from 200,000 simulated multinomial rank histograms each
(posterior draws of a Gaussian posterior scaled about their mean by ``f``: the rank's
normalised value is Phi(Z / f)):

* a calibrated engine fails with probability 0.0010 (the level; the chi-square approximation
  holds that far into the tail at 10 expected ranks a bin);
* draws with doubled spread (``f = 2``, variance x4) fail with probability 0.9999;
* a guide with its scale halved (``f = 0.5``) fails with probability 0.997.

So each broken engine below fails, and each correct one passes, for any seed but about one in a
thousand.
"""

from __future__ import annotations

import functools
import json
import os

import numpy as np
import pyro
import pyro.distributions as dist
import pytest
import torch

import zoo
from tests.seeding import shifted
from zoo import cli
from zoo.calibrate import SBCResult, sbc, sbc_models, scaled, simulate
from zoo_inference import sbc as calibration

REPS = 100
ALPHA = 1e-3
inflated = functools.partial(scaled, factor=2.0)  # draws twice as far from their mean
halved = functools.partial(scaled, factor=0.5)  # a guide with its scale halved


# ------------------------------------------------------------------ the statistics alone
def test_ranks_of_exchangeable_draws_are_uniform():
    """A value exchangeable with its draws has a uniform rank on 0..L, whether L draws are
    chosen from more (pool of 300) or spread from fewer (pool of 20)."""
    rng = np.random.default_rng(shifted(1))
    for pool_size in (300, 20):
        r = np.array(
            [
                calibration.rank_among(rng.normal(), rng.normal(size=pool_size), 99, rng)
                for _ in range(2000)
            ]
        )
        assert r.min() >= 0 and r.max() <= 99
        _, p, bins = calibration.uniformity(r[:, None], 99)
        assert bins == 20
        assert p[0] > 1e-4  # false alarm 1e-4 for a correct rank


def test_thinning_keeps_about_ess_draws():
    rng = np.random.default_rng(shifted(2))
    chains = rng.normal(size=(4, 500))
    # stride ceil(2000 / 200) = 10 divides each chain's 500 draws: 50 a chain from any offset
    assert calibration.thin(chains, 200.0, rng).size == 200
    assert calibration.thin(chains, np.nan, rng).size == 4  # no ESS: one draw a chain


def test_uniformity_flags_piled_up_ranks():
    ranks = np.r_[np.zeros(50, int), np.full(50, 99)][:, None]  # every rank at an end
    _, p, _ = calibration.uniformity(ranks, 99)
    assert p[0] < 1e-10


# ------------------------------------------------------------------ simulation
def test_simulate_writes_observations_into_the_data():
    entry = zoo.get_model("normal_normal")
    data, truth = simulate(entry, shifted(3))
    assert set(truth) == {"mu"} and data["x"].shape == entry.load_data()["x"].shape
    assert not torch.equal(data["x"], entry.load_data()["x"])
    # hmm observes x[t] one step at a time: views of its data argument are written back too
    hmm_data, hmm_truth = simulate(zoo.get_model("hmm"), shifted(3))
    assert {"pi", "A", "B"} <= set(hmm_truth)
    assert not torch.equal(hmm_data["x"], zoo.get_model("hmm").load_data()["x"])


def test_a_model_reading_its_data_instead_of_its_draws_is_refused(registry):
    def ar(x):
        rho = pyro.sample("rho", dist.Uniform(-1.0, 1.0))
        pyro.sample("x0", dist.Normal(0.0, 1.0), obs=x[0])
        pyro.sample("x1", dist.Normal(rho * x[0], 1.0), obs=x[1])  # reads the data, not x0

    zoo.register("ar_data", model=ar, data={"x": torch.tensor([0.3, -0.2])})
    with pytest.raises(ValueError, match="does not reproduce the simulation"):
        simulate(zoo.get_model("ar_data"), 0)


# ------------------------------------------------------------------ calibrated and broken
@pytest.fixture(scope="module")
def exact_runs() -> tuple[SBCResult, SBCResult]:
    """The exact posterior's draws, and the same draws spread twice as far (variance x4)."""
    common = dict(reps=REPS, seed=0, workers=1, alpha=ALPHA, num_samples=100)
    return sbc("normal_normal", "exact", **common), sbc(
        "normal_normal", "exact", transform=inflated, **common
    )


def test_exact_posterior_is_calibrated(exact_runs):
    good, _ = exact_runs
    assert good.verdict == "calibrated", good.findings()
    assert good.ranks.shape == (REPS, 1) and good.params == ("mu",)
    assert good.ranks.min() >= 0 and good.ranks.max() <= 99
    assert np.isnan(good.ess).all()  # independent draws: not thinned


def test_inflated_variance_fails(exact_runs):
    _, broken = exact_runs
    assert broken.verdict == "miscalibrated"
    assert broken.table.loc["mu", "flagged"]
    assert "too wide" in broken.table.loc["mu", "shape"]  # ranks piled in the middle


def test_page_and_ranks_files(exact_runs, tmp_path):
    good, broken = exact_runs
    path = good.write(tmp_path)
    assert path.name == "sbc-normal_normal-exact.html"
    html = path.read_text(encoding="utf-8")
    assert "calibrated" in html and html.count("data:image/png;base64,") == 2
    record = json.loads((tmp_path / "sbc-normal_normal-exact.json").read_text(encoding="utf-8"))
    assert record["verdict"] == "calibrated" and len(record["ranks"]) == REPS
    csv = (tmp_path / "sbc-normal_normal-exact.csv").read_text(encoding="utf-8").splitlines()
    assert csv[0] == "rep,mu" and len(csv) == REPS + 1
    assert "sbc-normal_normal-exact.html" in (tmp_path / "sbc.html").read_text(encoding="utf-8")
    assert "miscalibrated" in broken.page()["sbc-normal_normal-exact.md"]


def test_nuts_and_svi_smoke(tmp_path):
    """A small case of each engine family: MCMC draws thinned by their ESS, guide draws not."""
    nuts = sbc("normal_normal", "nuts", reps=3, workers=1, num_samples=60, warmup=60, num_chains=2)
    assert nuts.ranks.shape == (3, 1) and np.isfinite(nuts.ess).all()
    assert (nuts.kept <= 120).all() and (nuts.kept >= 2).all()
    svi = sbc("normal_normal", "svi", reps=3, workers=1, num_steps=100, num_samples=200)
    assert svi.ranks.shape == (3, 1) and np.isnan(svi.ess).all() and (svi.kept == 200).all()


@pytest.fixture(scope="module")
def nuts_runs() -> tuple[SBCResult, SBCResult]:
    """NUTS with the replications as chains of one batched sampler (each chain on its own
    replication's data), and the same draws spread twice as far."""
    common = dict(reps=REPS, seed=0, workers=1, alpha=ALPHA, num_samples=100, warmup=100)
    common.update(num_chains=2)
    return sbc("normal_normal", "nuts", **common), sbc(
        "normal_normal", "nuts", transform=inflated, **common
    )


def test_batched_nuts_is_calibrated_and_its_inflated_draws_are_not(nuts_runs):
    """Were a chain given another replication's data, its ranks would pile at the ends; the
    broken copy fails as the exact one does (power 0.9999: module docstring)."""
    good, broken = nuts_runs
    assert good.verdict == "calibrated", good.findings()
    assert len(good.rep_ids) == REPS and np.isfinite(good.ess).all()
    assert broken.verdict == "miscalibrated" and "too wide" in broken.table.loc["mu", "shape"]


def test_batch_choice():
    """nuts batches by default; ``batch=False`` runs the engine once a replication (the same
    ranks' sizes); a batch is refused, by name, where the engine cannot take one."""
    kw = dict(reps=3, workers=1, num_samples=40, warmup=40, num_chains=2)
    one = sbc("normal_normal", "nuts", batch=False, **kw)
    assert one.ranks.shape == (3, 1) and (one.kept <= 80).all()
    with pytest.raises(ValueError, match="batch=True runs the replications as chains"):
        sbc("normal_normal", "chees", batch=True, reps=2)
    with pytest.raises(ValueError, match="batch must be True, False or None"):
        sbc("normal_normal", "nuts", batch="yes", reps=2)


def test_a_batched_run_that_breaks_falls_back_to_one_by_one(monkeypatch):
    """Whatever breaks the batched run (a model that cannot take per-chain data), the
    replications still run, one engine run each, with a warning that says why."""
    from zoo_inference import mcmc

    original = mcmc.sample_chains

    def broken(*args, **kwargs):  # breaks with per-chain data only
        if kwargs.get("batch"):
            raise RuntimeError("vmap over the data failed")
        return original(*args, **kwargs)

    monkeypatch.setattr(mcmc, "sample_chains", broken)
    why = r"batched run failed \(RuntimeError: vmap over the data failed\)"
    with pytest.warns(RuntimeWarning, match=why):
        res = sbc("normal_normal", "nuts", reps=3, workers=1, num_samples=40, warmup=40)
    assert res.ranks.shape == (3, 1) and not res.failures


# ------------------------------------------------------------------ wrong calls
def test_point_estimates_are_refused():
    with pytest.raises(ValueError, match="point estimate"):
        sbc("three_coin", "em", reps=2, workers=1)


def test_models_without_continuous_parameters_are_refused(registry):
    def coin(y):
        z = pyro.sample("z", dist.Bernoulli(0.5))
        pyro.sample("y", dist.Normal(z, 1.0), obs=y)

    zoo.register("discrete_only", model=coin, data={"y": torch.tensor(0.3)})
    with pytest.raises(ValueError, match="no continuous latent sites"):
        sbc("discrete_only", "enum", reps=2)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"reps": 1}, "reps must be"),
        ({"draws": 0}, "draws must be"),
        ({"alpha": 1.5}, "alpha must be"),
        ({"bins": 1}, "bins must be"),
        ({"engine": "nutz"}, "unknown engine"),
        ({"engine": "enum"}, "does not apply"),
        ({"num_stepz": 3}, "unknown option"),
        ({"seed": -1}, "seed must be"),
        ({"transform": 3}, "transform must be"),
    ],
)
def test_bad_calls(kwargs, match):
    kwargs = {"engine": "exact", **kwargs}
    with pytest.raises(ValueError, match=match):
        sbc("normal_normal", **kwargs)


def test_unsimulatable_model_names_its_site():
    with pytest.raises(ValueError, match="observed site 'x'"):
        sbc("vae", "svi", reps=2, workers=1)


def test_cli(tmp_path, capsys):
    code = cli.main(
        [
            "sbc",
            "normal_normal",
            "--engine",
            "exact",
            "--reps",
            "20",
            "--out",
            str(tmp_path),
            "--workers",
            "1",
            "-q",
            "-o",
            "num_samples=150",
        ]
    )
    shown = capsys.readouterr()
    assert code == 0, shown.err
    assert "exact on normal_normal:" in shown.out
    assert (tmp_path / "sbc-normal_normal-exact.html").is_file()
    assert cli.main(["sbc", "normal_normal", "--engine", "enum", "--reps", "5"]) == 2
    assert "does not apply" in capsys.readouterr().err


# ------------------------------------------------------------------ slow: svi and the zoo
@pytest.mark.slow
def test_svi_guide_with_halved_scale_fails():
    """The fitted guide (normal_normal's posterior family) passes; the same fits with the
    guide's scale halved fail (power 0.997, false alarm 0.001: module docstring)."""
    common = dict(
        reps=REPS, seed=0, workers=2, alpha=ALPHA, num_steps=1000, num_particles=4, guide="normal"
    )
    good = sbc("normal_normal", "svi", **common)
    assert good.verdict == "calibrated", good.findings()
    broken = sbc("normal_normal", "svi", transform=halved, **common)
    assert broken.verdict == "miscalibrated"
    assert "too narrow" in broken.table.loc["mu", "shape"]


CONJUGATE = ("beta_bernoulli", "normal_normal", "gamma_poisson", "normal_gamma")


def _zoo_cells() -> list[tuple[str, str]]:
    cells = []
    for name, engine in sbc_models(None, ("nuts", "chees", "mams", "svi")):
        try:
            simulate(zoo.get_model(name), 0)
        except ValueError:
            continue  # observations that are not data arguments (the VAEs): no SBC
        cells.append((name, engine))
    return cells


@pytest.mark.slow
@pytest.mark.parametrize(("name", "engine"), _zoo_cells())
def test_sbc_of_the_zoo(name, engine, tmp_path):
    """Every model with continuous parameters under nuts, chees, mams and the default svi guide, at
    modest replications; results recorded in ``$ZOO_SBC_OUT`` (default: a temporary folder).
    Exact samplers on the conjugate models must be calibrated; the rest is a finding."""
    out = os.environ.get("ZOO_SBC_OUT") or tmp_path
    result = sbc(name, engine, reps=50, seed=0, alpha=ALPHA, out=out, progress=False)
    print(result, *result.findings(), sep="\n")
    assert len(result.rep_ids) >= 0.9 * result.reps, result.failures
    if name in CONJUGATE and engine in ("nuts", "chees", "mams"):
        assert result.verdict == "calibrated", result.findings()
