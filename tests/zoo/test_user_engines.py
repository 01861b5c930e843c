"""Users' own engines: a sampler registered from a user's file (the README's MALA example, run as
written) agrees with the exact posterior and runs through compare, report, SBC and the CLI; an
engine that is not a sampler; the contract's errors; the entry-point group."""

import os
import re
import shutil
import subprocess
import sys
import textwrap
from itertools import takewhile

import numpy as np
import pytest
import torch

import zoo
from tests.paths import ROOT
from tests.zoo.test_extend import W, X, closed_form, foreign, install_plugin  # noqa: F401 - a fixture
from zoo.profiles import profiles
from zoo_inference.engines import GENERIC_ENGINES

EXAMPLE = ROOT / "examples" / "mala.py"


def readme_block(marker: str) -> str:
    """The Python block that follows ``<!-- example: marker -->`` in the README."""
    text = (ROOT / "README.md").read_text()
    found = re.search(rf"<!-- example: {marker} -->\s*```python\n(.*?)```", text, re.S)
    assert found, f"the README has no example {marker!r}"
    return found.group(1)


def within(estimate: float, truth: float, se: float, k: float = 6.0) -> bool:
    return abs(estimate - truth) <= k * se


@pytest.fixture
def user_dir(tmp_path, monkeypatch, registry):
    """A user's folder holding mala.py, as the current directory and on the import path."""
    shutil.copy(EXAMPLE, tmp_path / "mala.py")
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "mala", raising=False)
    return tmp_path


def test_readme_mala_example_runs_as_written(user_dir, capsys):
    scope: dict = {}
    exec(compile(readme_block("mala"), "README.md", "exec"), scope)
    out = capsys.readouterr().out
    cmp, sbc = scope["cmp"], scope["sbc"]

    run, exact = cmp.runs["mala"], cmp.runs["exact"]
    assert run.ok and run.diagnostics["num_chains"] == 4 and run.diagnostics["gradient_evals"] > 0
    mean, sd = exact.summary.loc["mu", ["mean", "sd"]]
    got = run.summary.loc["mu"]
    ess = got["ess_bulk"]
    assert ess > 200 and got["r_hat"] < 1.05
    assert within(got["mean"], mean, sd / np.sqrt(ess)), (got["mean"], mean)
    assert within(got["sd"], sd, sd / np.sqrt(2 * ess)), (got["sd"], sd)
    assert 0.3 < np.mean(run.diagnostics["acceptance_rate"]) < 0.8  # adapted towards 0.574
    assert "mala" in out

    page = (user_dir / "mala-report" / "normal_normal.html").read_text()
    assert "mala" in page
    assert sbc.engine == "mala" and not sbc.failures and sbc.ranks.shape == (30, 1)
    assert sbc.verdict == "calibrated", sbc.findings()
    assert (user_dir / "mala-sbc" / "sbc-normal_normal-mala.html").exists()


def test_a_sampler_gets_discrete_sites_summed_out_and_recovered(foreign, user_dir):  # noqa: F811
    import mala  # noqa: F401 - registers the sampler

    run = zoo.run(foreign, "mala", num_samples=500, warmup=500)
    assert run.ok, run.error
    mean, sd, pz, _, _ = closed_form(X, W)
    ess = run.summary.loc["mu", "ess_bulk"]
    assert within(run.summary.loc["mu", "mean"], mean, sd / np.sqrt(ess))
    z = run.idata.posterior["z"].values.reshape(-1, len(W))  # recovered given each draw of mu
    assert set(np.unique(z)) <= {0.0, 1.0}
    # z | data does not depend on mu here: the recovered draws are independent Bernoulli(pz)
    assert np.all(np.abs(z.mean(0) - pz) <= 6 * np.sqrt(pz * (1 - pz) / z.shape[0]) + 1e-9)


def test_a_registered_kernel_gets_what_the_built_in_engine_gets(registry):
    """The zoo's own NUTS registered as a user's sampler: the same draws as the nuts engine
    (chain groups, seeds, the density and the packaging are one path)."""
    from zoo_inference import samplers

    zoo.register_sampler("nuts_again", samplers.nuts)
    options = {"num_samples": 60, "warmup": 60, "num_chains": 4, "parallel": False}
    mine = zoo.run("eight_schools_noncentered", "nuts_again", seed=2, **options)
    built_in = zoo.run("eight_schools_noncentered", "nuts", seed=2, **options)
    for group in ("posterior", "sample_stats", "log_likelihood"):
        a, b = mine.idata[group], built_in.idata[group]
        assert sorted(a.data_vars) == sorted(b.data_vars), group
        for name in a.data_vars:
            assert np.array_equal(a[name].values, b[name].values), (group, name)
    timed = {"wall_time_s", "compile_s"}  # the clock's, not the run's
    assert {k: v for k, v in mine.diagnostics.items() if k not in timed} == {
        k: v for k, v in built_in.diagnostics.items() if k not in timed
    }
    assert mine.summary.equals(built_in.summary)
    # the same options, the same defaults: the signature's and the runner's
    assert GENERIC_ENGINES["nuts_again"].defaults == {
        **GENERIC_ENGINES["nuts"].defaults,
        **{k: GENERIC_ENGINES["nuts_again"].defaults[k] for k in ("num_samples", "warmup")},
        "num_chains": 4,
    }


def test_each_sampler_engine_takes_its_defaults_from_its_signature(capsys):
    """The zoo's samplers are registered as a user's are: every keyword option of a sampler's
    signature is an option of its engine with the signature's default (what ``zoo info``
    lists and ``zoo.run`` uses), and nothing else sets it."""
    import inspect

    from zoo import cli
    from zoo_inference.engines import SAMPLER_ARGUMENTS, SAMPLER_DEFAULTS

    samplers = {n: s for n, s in GENERIC_ENGINES.items() if s.sampler is not None}
    assert {"nuts", "chees", "hmc", "mams", "mh"} <= set(samplers)
    for name, spec in samplers.items():
        params = list(inspect.signature(spec.sampler).parameters.values())[2:]
        own = {p.name: p.default for p in params if p.name not in (*SAMPLER_ARGUMENTS, "resume")}
        assert {k: spec.defaults[k] for k in own} == own, name
        assert set(spec.defaults) == set(own) | set(SAMPLER_DEFAULTS), name
    assert cli.main(["info", "eight_schools_noncentered"]) in (0, None)
    shown = capsys.readouterr().out
    for name in ("nuts", "chees", "hmc", "mams", "mh"):
        below = shown.split(f"\n  {name} ", 1)[1].split("\n")[1:]  # its wrapped option lines
        line = " ".join(b.strip() for b in takewhile(lambda b: b.startswith(" " * 13), below))
        assert all(len(b) <= 120 for b in below), name
        for key, value in samplers[name].defaults.items():
            assert f"{key}={value!r}" in line, (name, key)
    assert "learning_rate=0.05" in shown and "lockstep" not in shown
    with pytest.raises(zoo.ZooError, match="'learning_rate' must be a finite number"):
        zoo.run("eight_schools_noncentered", "chees", learning_rate="fast")


def test_an_engine_output_that_does_not_fit_the_model_is_named(registry):
    """What an engine returns is checked against the model's sites before it is packaged: a
    scalar site's draws shaped (draws, 1, 1), a site the model has not, a NaN."""

    def draws_of(values):
        def engine(ctx, *, num_samples: int = 30):
            return zoo.Draws({k: v(num_samples) for k, v in values.items()})

        return engine

    cases = {
        "extra_dims": (
            {"mu": lambda n: torch.zeros(n, 1, 1)},
            r"engine 'extra_dims' returned Draws of site 'mu' shaped \(30, 1, 1\); the model's "
            r"site is shaped \(\), so Draws must be shaped \(draw\)",
        ),
        "unknown_site": (
            {"sigma": lambda n: torch.zeros(n)},
            r"returned Draws of site 'sigma', which the model does not have .*: mu\)",
        ),
        "not_finite": (
            {"mu": lambda n: torch.full((n,), float("nan"))},
            r"returned Draws of site 'mu' with 30 values that are not finite",
        ),
    }
    for name, (values, message) in cases.items():
        zoo.register_engine(name, draws_of(values), needs="latent")
        with pytest.raises(zoo.ZooError, match=message):
            zoo.run("normal_normal", name)
    good = draws_of({"mu": lambda n: torch.zeros(n)})
    zoo.register_engine("fits", good, needs="latent")
    assert zoo.run("normal_normal", "fits").idata.posterior["mu"].shape == (1, 30)


def test_cli_registers_the_sampler_from_a_file(user_dir):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), *sys.path])}
    base = [sys.executable, "-m", "zoo"]
    info = subprocess.run(
        [*base, "info", "normal_normal", "--models", "mala.py"], capture_output=True, text=True,
        env=env,
    )  # fmt: skip
    assert info.returncode == 0, info.stderr
    assert "mala" in info.stdout and "target_accept=0.574" in info.stdout
    ran = subprocess.run(
        [*base, "run", "normal_normal", "--engine", "mala", "--models", "mala.py", "-q",
         "-o", "num_samples=200", "-o", "warmup=200", "-o", "target_accept=0.6"],
        capture_output=True, text=True, env=env,
    )  # fmt: skip
    assert ran.returncode == 0, ran.stderr
    assert re.search(r"^mu\s", ran.stdout, re.M)


def exact_normal(ctx, *, num_samples: int = 1000):
    """normal_normal's posterior drawn from its closed form (an engine that is not a sampler)."""
    x = ctx.data["x"]
    prec = 1 / ctx.data["tau0"] ** 2 + len(x) / ctx.data["sigma"] ** 2
    mean = (ctx.data["mu0"] / ctx.data["tau0"] ** 2 + x.sum() / ctx.data["sigma"] ** 2) / prec
    gen = torch.Generator().manual_seed(ctx.seed)
    draws = mean + torch.randn(2, num_samples, generator=gen, dtype=torch.float64) / prec**0.5
    return zoo.Draws({"mu": draws.numpy()}, chains=True)


def test_register_engine_runs_and_is_sized_by_its_budgets(registry):
    zoo.register_engine(
        "closed_normal", exact_normal, needs="continuous", budgets={"quick": {"num_samples": 300}}
    )
    entry = zoo.get_model("normal_normal")
    assert "closed_normal" in entry.engines
    assert entry.engine_spec("closed_normal").defaults == {"num_samples": 1000}
    assert profiles()["quick"]["closed_normal"] == {"num_samples": 300}
    run = zoo.run("normal_normal", "closed_normal", seed=3, num_samples=4000)
    exact = zoo.run("normal_normal", "exact")
    mean, sd = exact.summary.loc["mu", ["mean", "sd"]]
    assert run.ok and run.idata.posterior["mu"].shape == (2, 4000)
    assert within(run.summary.loc["mu", "mean"], mean, sd / np.sqrt(8000))
    with pytest.raises(zoo.ZooError, match="unknown option 'num_sample'.*num_samples"):
        zoo.run("normal_normal", "closed_normal", num_sample=10)


def test_registered_engines_are_forgotten_after_isolated():
    with zoo.isolated():
        zoo.register_engine("temporary_engine", exact_normal, needs="continuous")
        assert "temporary_engine" in GENERIC_ENGINES
    assert "temporary_engine" not in GENERIC_ENGINES


def _sampler(density, theta0, *, num_samples, warmup, gen, progress=False, scale=1.0):
    return zoo.Samples(theta0[:, None].expand(-1, num_samples, -1).clone(), gradient_evals=0)


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda: zoo.register_sampler("nuts", _sampler), "built in"),
        (lambda: zoo.register_sampler("my sampler", _sampler), "identifier"),
        (lambda: zoo.register_sampler("em", _sampler), "reference engine"),
        (lambda: zoo.register_sampler("s1", lambda d, t, *, num_samples: None), "missing"),
        (
            lambda: zoo.register_sampler(
                "s2", lambda d, t, *, num_samples, warmup, gen, progress, step: None
            ),
            r"\['step'\] need defaults",
        ),
        (
            lambda: zoo.register_sampler(
                "s3", lambda d, t, *, num_samples, warmup, gen, progress, num_chains=2: None
            ),
            "runner's",
        ),
        (lambda: zoo.register_sampler("s4", _sampler, budgets={"huge": {}}), "unknown budget"),
        (lambda: zoo.register_sampler("s5", _sampler, budgets={"quick": {"stp": 1}}), "stp"),
        (lambda: zoo.register_engine("e1", exact_normal, needs="everything"), "needs"),
        (lambda: zoo.register_engine("e2", lambda: None, needs="latent"), "ctx"),
        (lambda: zoo.unregister_engine("nuts"), "built in"),
    ],
)
def test_bad_registrations_are_clear_errors(registry, call, message):
    with pytest.raises(ValueError, match=message):
        call()


def test_a_sampler_breaking_the_contract_is_named(registry):
    def wrong_shape(density, theta0, *, num_samples, warmup, gen, progress=False):
        return zoo.Samples(theta0, gradient_evals=0)

    def wrong_type(density, theta0, *, num_samples, warmup, gen, progress=False):
        return theta0

    zoo.register_sampler("wrong_shape", wrong_shape)
    zoo.register_sampler("wrong_type", wrong_type)
    zoo.register_sampler("standing", _sampler)
    with pytest.raises(zoo.ZooError, match=r"wrong_shape.*theta must be \(2, 100, 1\)"):
        zoo.run("normal_normal", "wrong_shape", num_samples=100, warmup=0, parallel=False)
    with pytest.raises(zoo.ZooError, match="wrong_type.*returned Tensor"):
        zoo.run("normal_normal", "wrong_type", num_samples=100, warmup=0, parallel=False)
    with pytest.raises(zoo.ZooError, match="twice|already registered"):
        zoo.register_sampler("standing", _sampler)
    zoo.register_sampler("standing", _sampler, replace=True)
    with pytest.raises(zoo.ZooError, match="option 'scale' must be a finite number"):
        zoo.run("normal_normal", "standing", scale="big")
    run = zoo.run("normal_normal", "standing", num_samples=20, warmup=0, parallel=False)
    assert run.ok and run.diagnostics["divergences"] == 0  # a chain that never moves: R-hat says
    assert run.diagnostics["max_r_hat"] > 1.05 or np.isnan(run.diagnostics["max_r_hat"])


def test_engines_from_the_entry_point_group(tmp_path, monkeypatch, registry):
    (tmp_path / "zoo_engine_plugin_demo.py").write_text(
        textwrap.dedent("""
        import zoo

        def standing(density, theta0, *, num_samples, warmup, gen, progress=False):
            return zoo.Samples(theta0[:, None].expand(-1, num_samples, -1).clone())

        zoo.register_sampler("plugin_standing", standing)
        """)
    )
    install_plugin(
        tmp_path, monkeypatch, "zoo_engine_plugin_demo", "demo = zoo_engine_plugin_demo",
        group="pyro_zoo.engines",
    )  # fmt: skip
    monkeypatch.delitem(sys.modules, "zoo_engine_plugin_demo", raising=False)
    zoo.registry.rediscover()
    assert "plugin_standing" in zoo.get_model("normal_normal").engines


def test_an_info_key_only_some_groups_give_is_kept_per_group(registry):
    """A key of Samples.info that one chain group gives and another does not (a mid-run compile
    in one group only: compiled_from_iteration) is the run's, None for the group without it."""

    def sampler(density, theta0, *, num_samples, warmup, gen, progress=False):
        out = _sampler(density, theta0, num_samples=num_samples, warmup=warmup, gen=gen)
        if len(theta0) == 1:
            out.info["only_small_groups"] = 7
        return out

    zoo.register_sampler("uneven", sampler)
    run = zoo.run("normal_normal", "uneven", num_chains=3, chain_groups=2, num_samples=10, warmup=0)
    assert run.ok, run.error
    assert run.diagnostics["only_small_groups"] == [None, 7]
