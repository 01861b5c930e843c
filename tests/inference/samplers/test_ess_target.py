"""Runs to an ESS target (``ess=``): warm up once, draw in blocks until every continuous
parameter has the bulk ESS asked for and R-hat <= 1.01, or stop at the draw limit and say so.
The blocks continue the chains (their first draws are a fixed-size run's), and the draws agree
with the exact posterior."""

import numpy as np
import pytest
import torch

import zoo
from zoo_inference.samplers import Samples
from zoo_inference.samplers.driver import FIRST_BLOCK, R_HAT_TARGET, TARGET_CHAINS, next_block

FAST = {"num_chains": 4, "chain_groups": 1, "parallel": False}
SAMPLERS = {
    "nuts": {"warmup": 150, "num_samples": 60},
    "chees": {"warmup": 150, "num_samples": 30, "num_chains": 16},
    "hmc": {"warmup": 150, "num_samples": 60},
    "mams": {"warmup": 150, "num_samples": 30, "num_chains": 16},
    "mh": {"warmup": 400, "num_samples": 150},
}


def exact_mu() -> tuple[float, float]:
    """normal_normal's posterior mean and sd of mu, in closed form (the `exact` engine)."""
    post = zoo.run("normal_normal", "exact").idata.posterior["mu"].values.ravel()
    return float(post.mean()), float(post.std())


@pytest.mark.parametrize("engine", list(SAMPLERS))
def test_each_sampler_stops_at_the_target_with_the_exact_posterior(engine):
    target = 300
    run = zoo.run("normal_normal", engine, seed=3, ess=target, **{**FAST, **SAMPLERS[engine]})
    d = run.diagnostics
    assert d["stopped"] == "target reached", d
    assert d["min_ess_bulk"] >= target and d["max_r_hat"] <= R_HAT_TARGET
    drawn = run.idata.posterior.sizes["draw"]
    assert d["draws_per_chain"] == d["num_samples"] == drawn
    assert d["blocks"] >= 1 and drawn >= SAMPLERS[engine]["num_samples"]
    assert run.idata.sample_stats["diverging"].shape[1] == drawn
    mean, sd = exact_mu()
    draws = run.idata.posterior["mu"].values.ravel()
    # the ESS is at least `target`: the mean is off by more than 5 MC standard errors with
    # probability below 1e-6, the sd's relative error of sqrt(1 / (2 ESS)) kept likewise
    assert abs(draws.mean() - mean) <= 5 * sd / np.sqrt(target)
    assert abs(draws.std() / sd - 1) <= 5 / np.sqrt(2 * target)


def test_the_blocks_continue_the_fixed_size_run():
    """A run to a target draws what a fixed-size run draws, then goes on from its last state."""
    opts = {**FAST, "warmup": 150, "num_samples": 40}
    fixed = zoo.run("eight_schools_noncentered", "nuts", seed=5, **opts)
    with pytest.warns(RuntimeWarning, match="draw limit"):  # 2000 is out of reach: 3 blocks
        target = zoo.run(
            "eight_schools_noncentered", "nuts", seed=5, ess=2000, max_draws=120, **opts
        )
    assert target.diagnostics["blocks"] > 1
    for site in ("mu", "tau", "eta"):
        a = fixed.idata.posterior[site].values
        b = target.idata.posterior[site].values
        assert b.shape[1] == 120
        np.testing.assert_array_equal(b[:, :40], a)
        assert not np.array_equal(b[:, 40:80], b[:, :40])  # a continuation, not a rerun


@pytest.mark.parametrize("engine", ["nuts", "chees"])
def test_compiled_steps_go_on_from_the_last_draws(engine):
    """jit=True: the blocks' starts are the last draws, a slice of the draws so far; the
    compiled step took them as they were and failed on their strides."""
    opts = {**FAST, **SAMPLERS[engine], "jit": True}
    with pytest.warns(RuntimeWarning, match="draw limit"):  # out of reach: several blocks
        run = zoo.run("normal_normal", engine, seed=3, ess=10**6, max_draws=90, **opts)
    assert run.ok, run.error
    assert run.diagnostics["blocks"] > 1 and run.diagnostics["density"] == "compiled"


def test_a_run_that_cannot_reach_the_target_says_so():
    with pytest.warns(RuntimeWarning, match=r"draw limit \(300 a chain\) short of ess=100000"):
        run = zoo.run(
            "normal_normal", "mh", seed=1, ess=100_000, max_draws=300,
            **{**FAST, "warmup": 200, "num_samples": 100},
        )  # fmt: skip
    d = run.diagnostics
    assert d["stopped"] == "draw limit (300 a chain)" and d["draws_per_chain"] == 300
    assert d["min_ess_bulk"] < 100_000
    assert run.idata.posterior.sizes["draw"] == 300


def test_block_sizes_follow_the_ess_and_r_hat_and_stay_under_the_limit():
    ok = R_HAT_TARGET  # an R-hat already at the target asks nothing
    assert next_block(100, 100.0, ok, 400.0, 10_000) == 300  # 4x, less the cap of 3x more
    assert next_block(100, 200.0, ok, 400.0, 10_000) == 120  # 2x the draws, a tenth to spare
    assert next_block(100, 390.0, ok, 400.0, 10_000) == 25  # at least a quarter more
    assert next_block(100, 0.0, ok, 400.0, 10_000) == 300  # no ESS yet: three times as many
    assert next_block(900, 10.0, ok, 400.0, 1000) == 100  # at most what the limit leaves
    # R-hat's excess shrinks as 1 / draws: 1.02 asks twice the draws, whatever the ESS
    assert next_block(100, 1000.0, 1.02, 400.0, 10_000) == 120
    assert next_block(100, 1000.0, float("nan"), 400.0, 10_000) == 25


def test_a_target_without_sizes_starts_small_and_keeps_the_engines_limit():
    """Given ``ess`` and no ``num_samples``, the first block is FIRST_BLOCK draws a chain on at
    most TARGET_CHAINS chains (the target, not the engine's fixed-run sizes, decides the
    draws), the limit still ten times the engine's draws; sizes given are kept."""
    spec = zoo.get_model("normal_normal").engine_spec("chees")
    run = zoo.run("normal_normal", "chees", seed=1, ess=200, warmup=150, parallel=False)
    assert run.options["num_samples"] == FIRST_BLOCK
    assert run.options["num_chains"] == TARGET_CHAINS < spec.defaults["num_chains"]
    assert run.options["max_draws"] == 10 * spec.defaults["num_samples"]
    assert run.diagnostics["stopped"] == "target reached"
    assert run.idata.posterior.sizes["chain"] == TARGET_CHAINS
    given = zoo.run("normal_normal", "mh", seed=1, ess=50, num_samples=300, num_chains=3)
    assert given.options["num_samples"] == 300 and given.options["num_chains"] == 3
    assert given.idata.posterior.sizes["draw"] >= 300


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"ess": -1}, "option 'ess' must be a positive number"),
        ({"ess": "many"}, "option 'ess' must be a positive number"),
        ({"max_draws": 500}, "max_draws limits a run to an ESS target"),
        ({"ess": 100, "max_draws": 10}, "max_draws=10 is fewer than num_samples"),
        ({"ess": 100, "backend": "pyro"}, "unknown option 'backend' for engine 'nuts'"),
    ],
)
def test_bad_targets_are_named(options, message):
    with pytest.raises(zoo.ZooError, match=message):
        zoo.run("normal_normal", "nuts", num_samples=50, warmup=50, **options)


def walk(density, theta0, *, num_samples, warmup, gen, progress=False, step=0.5, resume=None):
    """A user's random-walk Metropolis sampler that can go on (``resume``): its state is its
    step, halved or doubled in warmup towards an acceptance of about a quarter."""
    q, (lp, _) = theta0, density(theta0)
    step = step if resume is None else resume["step"]
    draws, taken = [], 0.0
    for it in range(warmup + num_samples):
        prop = q + step * torch.randn(q.shape, generator=gen, dtype=q.dtype)
        lp_new, _ = density(prop)
        take = torch.rand(len(q), generator=gen, dtype=q.dtype).log() < lp_new - lp
        q, lp = torch.where(take[:, None], prop, q), torch.where(take, lp_new, lp)
        taken += float(take.double().mean())
        if it < warmup and (it + 1) % 50 == 0:  # the last 50 iterations' acceptance
            step *= 1.5 if taken / 50 > 0.3 else 1 / 1.5
            taken = 0.0
        if it >= warmup:
            draws.append(q)
    n = len(q) * (1 + warmup + num_samples)
    return Samples(torch.stack(draws, 1), {}, n, {}, {"step": step})


def test_a_user_sampler_that_can_go_on_runs_to_a_target(registry):
    zoo.register_sampler("walk", walk)
    opts = {**FAST, "warmup": 500, "num_samples": 100, "max_draws": 3000}
    run = zoo.run("normal_normal", "walk", seed=2, ess=200, **opts)
    assert run.diagnostics["stopped"] == "target reached"
    assert run.diagnostics["min_ess_bulk"] >= 200
    assert "resume" not in zoo.get_model("normal_normal").engine_spec("walk").defaults


def test_a_user_sampler_that_cannot_go_on_is_refused_before_any_work(registry):
    def plain(density, theta0, *, num_samples, warmup, gen, progress=False):
        raise AssertionError("never called")

    zoo.register_sampler("plain", plain)
    with pytest.raises(zoo.ZooError, match="cannot run to an ESS target.*takes no `resume`"):
        zoo.run("normal_normal", "plain", ess=100)


def test_cli_takes_an_ess_target(tmp_path, capsys):
    from zoo.cli import main

    out = tmp_path / "run"
    args = ["run", "normal_normal", "-e", "nuts", "-o", "ess=200", "-o", "num_samples=50"]
    args += ["-o", "warmup=100", "-o", "num_chains=4", "-o", "chain_groups=1", "-q"]
    assert main([*args, "--out", str(out)]) == 0
    text = (out / "diagnostics.json").read_text()
    assert '"stopped": "target reached"' in text and '"ess_target": 200' in text
