# ruff: noqa: E501 - the corpus is tables, one bad input a line
"""Bad input, everywhere (issue 18): a corpus of wrong calls across the Python API, the command
line, registration and data. Each gets one clear error naming the problem (the argument or site
and what is expected), raised before any work; an output folder that did not exist still does
not; a run that fails numerically is a failed Run, and a failing cell never stops a sweep.

The corpus is the ``pytest.param`` tables below (one id per bad input); the tests after them
check what a table cannot: nothing half-written, and sweeps that go on past a failed cell. Bad
inputs tested elsewhere are not repeated here: scalar data and option types (test_user.py), a
report's unknown model or option leaving nothing (test_reports.py), non-callable registration
arguments (test_register_arguments.py), duplicate names and companions (test_extend.py), and
a NaN density under nuts and svi (test_parallel.py)."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyro
import pyro.distributions as dist
import pytest
import torch

import zoo
from zoo import sweep
from zoo.cli import main

P = pytest.param
Y3 = torch.ones(3)


# ------------------------------------------------------------------ models that misbehave
def normal_mean(y):
    m = pyro.sample("m", dist.Normal(0.0, 1.0))
    with pyro.plate("n", y.shape[0]):
        pyro.sample("y", dist.Normal(m, 1.0), obs=y)


def raises_inside(y):
    raise RuntimeError("boom inside the model")


def no_latent(y):
    with pyro.plate("n", y.shape[0]):
        pyro.sample("y", dist.Normal(0.0, 1.0), obs=y)


def nan_density(y):
    m = pyro.sample("m", dist.Normal(0.0, 1.0))
    pyro.factor("broken", m * float("nan"))
    with pyro.plate("n", y.shape[0]):
        pyro.sample("y", dist.Normal(m, 1.0), obs=y)


def raising_guide(y):
    pyro.sample("m", dist.Normal(0.0, 1.0))
    raise RuntimeError("boom inside the guide")


def explode(y):
    m = pyro.sample("m", dist.Normal(0.0, 1.0))
    with pyro.plate("n", y.shape[0]):
        pyro.sample("y", dist.Normal(m, torch.exp(m * 1e4)), obs=y)


def two_args(y, x):
    normal_mean(y)


@pytest.fixture(scope="module", autouse=True)
def bad_models():
    """The misbehaving models, registered for this module only."""
    with zoo.isolated():
        zoo.register("bad_raises", model=raises_inside, data={"y": Y3})
        zoo.register("bad_no_latent", model=no_latent, data={"y": Y3})
        zoo.register("bad_nan", model=nan_density, data={"y": Y3})
        zoo.register("bad_guide", model=normal_mean, guide=raising_guide, data={"y": Y3})
        zoo.register("bad_explode", model=explode, data={"y": Y3})
        zoo.register("bad_params", model=normal_mean, data={"y": Y3}, params=["mu"])
        yield


# ------------------------------------------------------------------ the Python API
API = [
    # unknown names, with the close matches
    P(lambda: zoo.get_model("three_coins"), r"unknown model 'three_coins'; did you mean 'three_coin'", id="model-typo"),
    P(lambda: zoo.get_model("beta_bernouli"), r"did you mean 'beta_bernoulli'", id="model-typo-2"),
    P(lambda: zoo.get_model(3), r"unknown model 3", id="model-not-a-name"),
    P(lambda: zoo.run("three_coin", "svii"), r"unknown engine 'svii'.*did you mean 'svi'", id="engine-typo"),
    # beta_bernoulli has no discrete site: enum does not apply, so it is not suggested for 'enu'
    P(lambda: zoo.run("beta_bernoulli", "enu"), r"unknown engine 'enu' for model 'beta_bernoulli'; did you mean 'nuts'\? \(engines", id="engine-typo-applies"),
    P(lambda: zoo.run("three_coin", None), r"engine must be a name, got None", id="engine-none"),
    P(lambda: zoo.run("beta_bernoulli", "enum"), r"'enum' does not apply.*no discrete latent", id="engine-inapplicable"),
    P(lambda: zoo.run("beta_bernoulli", "em"), r"unknown engine 'em'.*svi, nuts, chees, hmc, mams, mh, importance, laplace, pathfinder, rejection, inverse_cdf, exact", id="engine-of-another-model"),
    # seeds
    P(lambda: zoo.run("three_coin", "em", seed=-1), r"seed must be an integer from 0 to 2\*\*32 - 1, got -1", id="seed-negative"),
    P(lambda: zoo.run("three_coin", "em", seed=1.5), r"seed must be an integer .*got 1.5", id="seed-float"),
    P(lambda: zoo.run("three_coin", "em", seed="1"), r"seed must be an integer .*got '1'", id="seed-string"),
    P(lambda: zoo.run("three_coin", "em", seed=2**40), r"seed must be an integer from 0 to 2\*\*32 - 1", id="seed-too-large"),
    P(lambda: zoo.compare("three_coin", ["em"], seed=-3), r"seed must be an integer", id="compare-seed"),
    # options: counts, numbers, choices, names, types
    P(lambda: zoo.run("three_coin", "svi", num_steps=0), r"'num_steps' must be a positive", id="num_steps-zero"),
    P(lambda: zoo.run("three_coin", "svi", num_steps=-5), r"'num_steps' must be a positive", id="num_steps-negative"),
    P(lambda: zoo.run("three_coin", "svi", num_steps="many"), r"'num_steps' must be a positive integer, got 'many'", id="num_steps-string"),
    P(lambda: zoo.run("three_coin", "nuts", num_samples=0), r"'num_samples' must be", id="num_samples-zero"),
    P(lambda: zoo.run("three_coin", "nuts", num_samples=2.5), r"'num_samples' must be", id="num_samples-float"),
    P(lambda: zoo.run("three_coin", "nuts", num_chains=0), r"'num_chains' must be a positive", id="num_chains-zero"),
    P(lambda: zoo.run("three_coin", "nuts", warmup=-1), r"'warmup' must be a non-negative", id="warmup-negative"),
    P(lambda: zoo.run("three_coin", "nuts", target_accept=1.5), r"'target_accept' must be a probability in \(0, 1\)", id="target_accept-above-1"),
    P(lambda: zoo.run("three_coin", "svi", lr=0), r"'lr' must be a positive number", id="lr-zero"),
    P(lambda: zoo.run("three_coin", "svi", lr=float("nan")), r"'lr' must be a positive number, got nan", id="lr-nan"),
    P(lambda: zoo.run("three_coin", "svi", lr=float("inf")), r"'lr' must be a finite number", id="lr-inf"),
    P(lambda: zoo.run("three_coin", "svi", num_step=10), r"unknown option 'num_step'.*'num_steps'", id="option-typo"),
    P(lambda: zoo.run("three_coin", "svi", guide="gaussian"), r"'guide' must be one of", id="guide-unknown"),
    P(lambda: zoo.run("three_coin", "svi", guide="mvm"), r"'guide' must be one of .*did you mean 'mvn'", id="guide-typo"),
    P(lambda: zoo.run("three_coin", "chees", dense_mass="yes"), r"'dense_mass' must be True, False or None \(auto\)", id="dense_mass-string"),
    P(lambda: zoo.run("three_coin", "chees", criterion="chees_per_gradient"), r"option 'criterion' must be one of \['chees', 'chees_per_grad'\].*did you mean 'chees_per_grad'", id="criterion-typo"),
    P(lambda: zoo.run("three_coin", "nuts", device="gpu"), r"option 'device': device must be 'cpu' or 'cuda\[:N\]', got 'gpu'", id="device-unknown"),
    P(lambda: zoo.run("three_coin", "nuts", device=0.5), r"option 'device': device must be 'cpu' or 'cuda\[:N\]', got 0.5", id="device-number"),
    P(lambda: zoo.run("three_coin", "chees", device="cuda"), r"option 'device': device 'cuda' asks for a GPU, but torch .* sees none", id="device-no-gpu", marks=pytest.mark.skipif(torch.cuda.is_available(), reason="a GPU is here")),
    P(lambda: zoo.run("three_coin", "svi", backend="jax"), r"'backend' must be one of \['zoo', 'pyro'\]", id="backend-unknown"),
    P(lambda: zoo.run("three_coin", "em", progress="yes"), r"progress must be True, False or None", id="progress-string"),
    P(lambda: zoo.run("three_coin", "svi", elbo="trace"), r"must be enumerated: use elbo='enum'", id="elbo-inapplicable"),
    P(lambda: zoo.run("beta_bernoulli", "svi", elbo="iwae"), r"needs num_particles >= 2", id="iwae-one-particle"),
    P(lambda: zoo.run("beta_bernoulli", "svi", guide="flow"), r"at least 2 continuous", id="flow-one-site"),
    P(lambda: zoo.run("three_coin", "svi", guide="flow", jit=True), r"jit=True does not", id="flow-jit"),
    P(lambda: zoo.run("three_coin", "em", init=(0.4, 1.2, 0.5)), r"init must be three", id="init-probability-above-1"),
    P(lambda: zoo.run("three_coin", "enum", params={"pi": 0.5}), r"missing \['p', 'q'\]", id="enum-params-missing"),
    # compare
    P(lambda: zoo.compare("three_coin", ["em", "nope"]), r"unknown engine 'nope'", id="compare-engine-unknown"),
    P(lambda: zoo.compare("three_coin", "emm"), r"unknown engine 'emm'.*did you mean 'em'", id="compare-engine-string-typo"),
    P(lambda: zoo.compare("three_coin", ["em"], foo=1), r"option 'foo' is taken by none", id="compare-option-unknown"),
    P(lambda: zoo.compare("three_coin", ["em"], svi=5), r"options for engine 'svi' must be a dict, got 5", id="compare-engine-options-not-dict"),
    # models that cannot run
    P(lambda: zoo.run("bad_raises", "nuts"), r"model 'bad_raises' raised RuntimeError: boom inside the model when run on its default data", id="model-raises"),
    P(lambda: zoo.run("bad_no_latent", "nuts"), r"'nuts' does not apply .*no latent sites\); engines that apply: none", id="no-latent-run"),
    P(lambda: zoo.compare("bad_no_latent"), r"no engine applies to model 'bad_no_latent' \(the model has no latent sites\)", id="no-latent-compare"),
    P(lambda: zoo.run("bad_params", "laplace"), r"params \['mu'\] of model 'bad_params' are not among its latent .*\['m'\]", id="params-not-sites"),
]  # fmt: skip


@pytest.mark.parametrize("call, message", API)
def test_wrong_calls(call, message):
    with pytest.raises(ValueError, match=message) as err:
        call()
    assert "\n" not in str(err.value)


# ------------------------------------------------------------------ data
Y = [1, 0, 1]
BIGRAM = zoo.get_model("dirichlet_bigram").load_data()

DATA = [
    # three_coin (y: float tensor of 0/1)
    P("three_coin", {"y": Y, "extra": 1}, r"unknown data key\(s\) \['extra'\]", id="key-extra"),
    P("three_coin", {"y": [[1.0, 0.0], [1.0, 1.0]]}, r"data\['y'\] has shape \(2, 2\); expected .*\(N,\)", id="shape-2d"),
    P("three_coin", {"y": 1.0}, r"data\['y'\] has shape \(\); expected .*\(N,\)", id="shape-scalar"),
    P("three_coin", {"y": [[1.0], [0.0, 1.0]]}, r"data\['y'\] is ragged", id="shape-ragged"),
    P("three_coin", {"y": [1.0, float("nan"), 0.0]}, r"data\['y'\] contains NaN", id="nan"),
    P("three_coin", {"y": np.array([1.0, np.inf])}, r"data\['y'\] contains inf", id="inf"),
    P("three_coin", {"y": torch.tensor([0.0, -float("inf")])}, r"data\['y'\] contains inf", id="inf-tensor"),
    P("three_coin", {"y": [1.0, 2.0, 0.0]}, r"observed site 'y'.*outside its support", id="support-bernoulli"),
    P("three_coin", {"y": ["a", "b"]}, r"dtype <U1; expected numbers", id="dtype-string"),
    P("three_coin", {"y": np.array([1 + 1j, 0])}, r"dtype complex128; expected numbers", id="dtype-complex"),
    P("three_coin", {"y": [1, None]}, r"dtype object; expected numbers", id="dtype-object"),
    P("three_coin", {"y": []}, r"data\['y'\] is empty", id="empty"),
    P("three_coin", "y", r"data must be a dict", id="not-a-dict"),
    # counts
    P("gamma_poisson", {"counts": [3, -1, 2], "a": 2.0, "b": 1.0}, r"site 'counts'.*outside its support \(IntegerGreaterThan", id="count-negative"),
    P("gamma_poisson", {"counts": [3, 1.5, 2], "a": 2.0, "b": 1.0}, r"site 'counts'.*outside its support", id="count-fractional"),
    # integer data: word indices and a vocabulary size
    P("dirichlet_bigram", {**BIGRAM, "prev": BIGRAM["prev"] + 0.5}, r"data\['prev'\] must hold integers \(a torch.int64", id="float-for-int-tensor"),
    P("dirichlet_bigram", {**BIGRAM, "num_words": 2.5}, r"data\['num_words'\] must be an integer, got 2.5", id="float-for-int-scalar"),
    P("dirichlet_bigram", {**BIGRAM, "word": BIGRAM["word"] + 100}, r"site 'word'.*outside its support \(IntegerInterval", id="index-too-large"),
    P("dirichlet_bigram", {**BIGRAM, "prev": BIGRAM["prev"] - 100}, r"data\['prev'\] does not fit model 'dirichlet_bigram' \(IndexError", id="index-negative"),
]  # fmt: skip


@pytest.mark.parametrize("model, data, message", DATA)
def test_bad_data(model, data, message):
    engine = {"three_coin": "em"}.get(model, "exact")
    with pytest.raises(ValueError, match=message) as err:
        zoo.run(model, engine, data=data)
    assert "\n" not in str(err.value)


def test_user_data_is_merged_over_the_defaults_or_replaces_them():
    """What data= leaves out keeps its default (the prior's hyperparameters); replace_data=True
    takes it whole. A key given with new rows beside a default of the old ones, and a value
    outside its site's support, are named before any work, with the value received."""
    default = zoo.get_model("beta_bernoulli").load_data()
    a, b = default["a"], default["b"]
    run = zoo.run("beta_bernoulli", "exact", data={"y": [1, 0, 1]})
    assert run.summary.loc["p", "mean"] == pytest.approx((a + 2) / (a + b + 3))
    assert run.data["a"] == a and run.data["y"].tolist() == [1, 0, 1]
    missing = r"missing 'a' \(expected a float; replace_data=True takes the data whole"
    with pytest.raises(ValueError, match=missing):
        zoo.run("beta_bernoulli", "exact", data={"y": [1, 0, 1]}, replace_data=True)
    with pytest.raises(ValueError, match="replace_data must be True or False, got 'yes'"):
        zoo.run("beta_bernoulli", "exact", data={"y": [1, 0, 1]}, replace_data="yes")
    n = len(zoo.get_model("linear_regression").load_data()["X"])
    beside = rf"data\['y'\] has 3 rows, but data\['X'\] kept from the model's default data has {n}"
    with pytest.raises(ValueError, match=beside + ": pass it too$"):
        zoo.run("linear_regression", "nuts", data={"y": torch.randn(3)})
    outside = (
        r"^observed site 'y' of model 'beta_bernoulli' has values outside its support "
        r"\(Boolean\(\)\): 2.0 at index \(2,\), 1 of 3 outside$"
    )
    with pytest.raises(ValueError, match=outside):
        zoo.run("beta_bernoulli", "exact", data={"y": [1.0, 0.0, 2.0]})


def test_good_user_data_is_accepted_and_converted():
    run = zoo.run("three_coin", "em", data={"y": np.array([1, 1, 0, 1])})
    assert run.ok and run.extras["estimate"]["pi"] == pytest.approx(0.5)
    run = zoo.run("beta_bernoulli", "exact", data={"y": [1, 1], "a": 2, "b": 3.0})
    assert run.summary.loc["p", "mean"] == pytest.approx(4 / 7)
    # good input near the bad: an engine name as a string, a numpy integer seed
    cmp = zoo.compare("beta_bernoulli", "exact", seed=np.int64(3), num_samples=10)
    assert list(cmp.runs) == ["exact"] and cmp.runs["exact"].ok


# ------------------------------------------------------------------ registration
def register(name, **kwargs):
    kwargs.setdefault("model", normal_mean)
    kwargs.setdefault("data", {"y": Y3})
    return lambda: zoo.register(name, **kwargs)


def register_twice():
    zoo.register("twice", model=normal_mean, data={"y": Y3})
    return zoo.register(name="twice", data={"y": Y3})(normal_mean)  # the decorator form


REGISTRATION = [
    P(register("beta_bernoulli"), r"a model named 'beta_bernoulli' is already registered .*replace=True", id="duplicate-of-builtin"),
    P(register_twice, r"a model named 'twice' is already registered", id="duplicate-decorator"),
    P(register("my model"), r"model names are Python identifiers, got 'my model'", id="name-not-identifier"),
    P(register("m", data=None), r"register\('m'\) needs data=", id="data-none"),
    P(register("m", data=[1, 2]), r"data must be a dict or a function seed -> dict, got list", id="data-list"),
    P(register("m", data={"z": Y3}), r"data of model 'm' has key\(s\) \['z'\], which the model does not take", id="data-key-unknown"),
    P(register("m", model=two_args), r"data of model 'm' lacks \['x'\], which the model needs", id="data-key-missing"),
    P(register("m", engines=["nutz"]), r"unknown generic engine\(s\) \['nutz'\]; did you mean 'nuts'", id="engines-typo"),
    P(register("m", engines="nutz"), r"unknown generic engine\(s\) \['nutz'\]", id="engines-string"),
    P(register("m", references={"nuts": lambda y: None}), r"reference engine name 'nuts' clashes with a generic engine", id="reference-name-clash"),
    P(register("m", variants={"svi_x": ("svii", {})}), r"variant 'svi_x' must be \(generic engine", id="variant-unknown-base"),
    P(register("m", engine_options={"svi": {"num_steps": -1}}), r"engine_options\['svi'\]: option 'num_steps' must be a positive integer", id="engine-options-bad-value"),
    P(register("m", engine_options={"nuts": {"nsamples": 10}}), r"engine_options\['nuts'\]: unknown option 'nsamples'.*'num_samples'", id="engine-options-typo"),
]  # fmt: skip


@pytest.mark.parametrize("call, message", REGISTRATION)
def test_bad_registration(call, message, registry):
    with pytest.raises(ValueError, match=message):
        call()
    assert "m" not in zoo.list_models()


# ------------------------------------------------------------------ numerical failures
FAILED = [
    P("bad_nan", "laplace", {"num_samples": 10}, "valid initial params", id="nan-density-laplace"),
    P("bad_nan", "importance", {"num_samples": 10, "proposal": "prior"}, "weight is zero or NaN", id="nan-density-importance"),
    P("beta_bernoulli", "svi", {"lr": 1e6, "num_steps": 20, "num_samples": 10}, "concentration", id="svi-diverges-lr-1e6"),
    P("bad_explode", "svi", {"num_steps": 50, "lr": 10.0}, "scale|ELBO is", id="svi-diverges-scale"),
    P("bad_guide", "svi", {"guide": "model", "num_steps": 5, "num_samples": 5}, "boom inside the guide", id="guide-raises"),
]  # fmt: skip


@pytest.mark.parametrize("model, engine, options, reason", FAILED)
def test_a_numerical_failure_is_a_failed_run_not_an_exception(model, engine, options, reason):
    with pytest.warns(RuntimeWarning, match=f"{model}/{engine} failed"):
        run = zoo.run(model, engine, **options)
    assert run.status == "failed" and run.idata is None and not run.ok
    assert re.search(reason, run.error) and "\n" not in run.error
    assert "Traceback" in run.extras["traceback"]


def test_a_failed_engine_does_not_stop_a_comparison():
    with pytest.warns(RuntimeWarning, match="failed"):
        cmp = zoo.compare(
            "bad_guide", ["svi", "laplace"], svi={"guide": "model", "num_steps": 5}, num_samples=50
        )
    assert cmp.runs["svi"].status == "failed" and cmp.runs["laplace"].ok
    assert "laplace" in cmp.table_wide.columns.get_level_values(0)


# ------------------------------------------------------------------ reports
REPORT = [
    P({"names": []}, r"no models to report", id="no-models"),
    P({"names": 5}, r"a report takes a model name, a list of names or results", id="names-not-a-list"),
    P({"profile": "fast"}, r"unknown report profile 'fast'; valid profiles: quick, full, smoke", id="profile-unknown"),
    P({"workers": 0}, r"workers must be a positive integer, got 0", id="workers-zero"),
    P({"workers": "2"}, r"workers must be a positive integer, got '2'", id="workers-string"),
    P({"seed": "0"}, r"seed must be an integer", id="seed-string"),
    P({"engines": ["nutz"]}, r"unknown engine\(s\) \['nutz'\]", id="engine-unknown"),
    P({"engines": ["enum"]}, r"none of the engines \['enum'\] applies to model 'beta_bernoulli'", id="engine-inapplicable"),
    P({"options": {"num_steps": "many"}}, r"option 'num_steps' must be a positive integer, got 'many'", id="option-string"),
    P({"options": 5}, r"options must be a dict", id="options-not-a-dict"),
    P({"out": 123}, r"out must be a folder path \(str or os.PathLike\), got 123", id="out-not-a-path"),
    P({"out": "FILE/sub"}, r"cannot write to '.*FILE/sub': Not a directory", id="out-under-a-file"),
    P({"out": "FILE"}, r"output '.*FILE' exists and is not a directory", id="out-is-a-file"),
    P({"out": "/sys/zoo-out"}, r"cannot write to '/sys/zoo-out'", id="out-read-only-filesystem", marks=pytest.mark.skipif(not Path("/sys").is_dir(), reason="no /sys")),
    P({"out": "READONLY/sub"}, r"cannot write to '.*READONLY/sub': Permission denied", id="out-read-only-dir", marks=pytest.mark.skipif(os.geteuid() == 0, reason="root writes anywhere")),
]  # fmt: skip


@pytest.mark.parametrize("kwargs, message", REPORT)
def test_bad_report_calls_leave_no_folder(kwargs, message, tmp_path, monkeypatch):
    monkeypatch.setattr(sweep, "run_cells", lambda *a, **k: pytest.fail("work started"))
    (tmp_path / "FILE").write_text("a file")
    (tmp_path / "READONLY").mkdir(mode=0o555)
    out = tmp_path / "report"
    kwargs = {"names": ["beta_bernoulli"], "out": out, **kwargs}
    if isinstance(kwargs["out"], str) and kwargs["out"][0].isupper():
        kwargs["out"] = tmp_path / kwargs["out"]
    before = sorted(tmp_path.iterdir())
    with pytest.raises(ValueError, match=message) as err:
        zoo.report(kwargs.pop("names"), **kwargs)
    assert "\n" not in str(err.value)
    assert sorted(tmp_path.iterdir()) == before and list((tmp_path / "READONLY").iterdir()) == []


def test_a_failing_cell_never_stops_a_sweep(tmp_path):
    """One model's cell fails (its log density is NaN), another model's run: both pages are
    written, and the failure is a cell of the index with its reason."""
    out = tmp_path / "r"
    zoo.report(
        ["bad_nan", "beta_bernoulli"],
        out=out,
        profile="smoke",
        engines=["laplace", "exact"],
        options={"num_samples": 100},
        workers=1,
        progress=False,
    )
    assert (out / "bad_nan.html").exists() and (out / "beta_bernoulli.html").exists()
    models = json.loads((out / "results.json").read_text())["models"]
    assert sorted(models) == ["bad_nan", "beta_bernoulli"]
    failed = models["bad_nan"]["engines"]["laplace"]
    assert failed["status"] == "failed" and "valid initial params" in failed["error"]
    engines = models["beta_bernoulli"]["engines"]
    assert engines["laplace"]["status"] == engines["exact"]["status"] == "ok"
    assert not [p for p in out.iterdir() if p.name.startswith(".zoo-staging")]


def test_a_whole_zoo_report_leaves_out_a_model_that_cannot_run(monkeypatch):
    """A broken model (a user's file, a plugin) is left out of a whole-zoo report with a
    warning, not a failed report; named explicitly, it is an error before any work."""
    monkeypatch.setattr(sweep, "list_models", lambda: ["bad_raises", "beta_bernoulli"])
    with pytest.warns(RuntimeWarning, match="leaves out model 'bad_raises'.*boom inside"):
        cells = sweep.plan_report(None, profile="smoke", engines=["exact"])
    assert [(c.model, c.engine) for c in cells] == [("beta_bernoulli", "exact")]
    with pytest.raises(ValueError, match="model 'bad_raises' raised RuntimeError"):
        sweep.plan_report(["bad_raises", "beta_bernoulli"], profile="smoke")


# ------------------------------------------------------------------ the command line
CLI = [
    P(["info", "three_coins"], "did you mean 'three_coin'", id="model-typo"),
    P(["frobnicate"], "invalid choice: 'frobnicate'", id="subcommand-unknown"),
    P([], "the following arguments are required: command", id="no-subcommand"),
    P(["run", "three_coin"], r"required: --engine/-e", id="engine-missing"),
    P(["run", "three_coin", "--engine", "magic"], "unknown engine 'magic'", id="engine-unknown"),
    P(["run", "three_coin", "-e", "em", "--seed", "-1"], "seed must be an integer", id="seed-negative"),
    P(["run", "three_coin", "-e", "em", "--seed", "abc"], "argument --seed: invalid int value: 'abc'", id="seed-string"),
    P(["run", "three_coin", "-e", "em", "--seed", "1.5"], "argument --seed: invalid int value: '1.5'", id="seed-float"),
    P(["run", "three_coin", "-e", "svi", "-o", "num_steps=0"], "'num_steps' must be", id="num_steps-zero"),
    P(["run", "three_coin", "-e", "svi", "-o", "num_steps=many"], "'num_steps' must be a positive integer, got 'many'", id="num_steps-string"),
    P(["run", "three_coin", "-e", "svi", "-o", "lr=0"], "'lr' must be a positive number", id="lr-zero"),
    P(["run", "three_coin", "-e", "svi", "-o", "bogus"], "options are KEY=VALUE", id="option-not-key-value"),
    P(["run", "three_coin", "-e", "svi", "-o", "svi.lr=0.1"], "zoo run takes KEY=VALUE options", id="option-engine-prefix"),
    P(["run", "three_coin", "-e", "em", "--out", "FILE/sub"], "Not a directory", id="out-under-a-file"),
    P(["run", "bad_no_latent", "-e", "nuts"], r"no latent sites\); engines that apply: none", id="no-latent"),
    P(["info", "bad_raises"], "raised RuntimeError: boom inside the model", id="model-raises"),
    P(["compare", "three_coin", "--engines", "em,nope"], "unknown engine 'nope'", id="compare-engine-unknown"),
    P(["compare", "three_coin", "--engines", "em", "--seed", "-4"], "seed must be an integer", id="compare-seed"),
    P(["report", "nope", "--out", "OUT"], "unknown model 'nope'", id="report-model-unknown"),
    P(["report", "beta_bernoulli", "--profile", "fast", "--out", "OUT"], "unknown report profile 'fast'", id="report-profile"),
    P(["report", "beta_bernoulli", "--workers", "0", "--out", "OUT"], "workers must be a positive integer", id="report-workers-zero"),
    P(["report", "beta_bernoulli", "--workers", "two", "--out", "OUT"], "argument --workers: invalid int value: 'two'", id="report-workers-string"),
    P(["report", "beta_bernoulli", "-o", "nope.num_steps=5", "--out", "OUT"], "options name unknown engine 'nope'", id="report-engine-options"),
    P(["report", "beta_bernoulli", "--out", "FILE"], "exists and is not a directory", id="report-out-is-a-file"),
    P(["list", "--models", "BROKEN"], r"could not load models from '.*broken.py': ImportError: no module named 'nonexistent_dep'", id="models-file-raises"),
    P(["list", "--models", "nonexistent_module_xyz"], "ModuleNotFoundError: No module named 'nonexistent_module_xyz'", id="models-module-missing"),
]  # fmt: skip


@pytest.mark.parametrize("argv, message", CLI)
def test_cli_errors_are_one_line(argv, message, capsys, tmp_path, monkeypatch):
    monkeypatch.setattr(sweep, "run_cells", lambda *a, **k: pytest.fail("work started"))
    (tmp_path / "FILE").write_text("a file")
    (tmp_path / "broken.py").write_text("raise ImportError(\"no module named 'nonexistent_dep'\")")
    paths = {"OUT": "out", "FILE": "FILE", "FILE/sub": "FILE/sub", "BROKEN": "broken.py"}
    argv = [str(tmp_path / paths[a]) if a in paths else a for a in argv]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("zoo: error:") and len(err.splitlines()) == 1 and "Traceback" not in err
    assert re.search(message, err), err
    assert not (tmp_path / "out").exists()


def test_cli_run_bad_engine_leaves_no_output(tmp_path):
    out = tmp_path / "run"
    assert main(["run", "three_coin", "-e", "nope", "--out", str(out)]) == 2
    assert not out.exists()


def test_cli_a_failed_run_is_one_line_exit_1_and_leaves_no_folder(tmp_path, capsys):
    out = tmp_path / "run"
    argv = ["run", "bad_nan", "-e", "laplace", "-o", "num_samples=10", "--out", str(out)]
    assert main(argv) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("zoo: bad_nan/laplace failed: ") and len(err.splitlines()) == 1
    assert not out.exists()


@pytest.mark.parametrize(
    "argv, message",
    [
        (["run", "thre_coin", "-e", "em"], "did you mean 'three_coin'"),
        (["run", "three_coin", "-e", "em", "--seed", "abc"], "invalid int value: 'abc'"),
    ],
    ids=["library-error", "argument-error"],
)
def test_python_dash_m_zoo_error_has_no_traceback(argv, message):
    proc = subprocess.run(
        [sys.executable, "-m", "zoo", *argv], capture_output=True, text=True, check=False
    )
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    assert message in proc.stderr


def test_the_corpus_holds_at_least_40_distinct_bad_inputs():
    tables = (API, DATA, REGISTRATION, FAILED, REPORT, CLI)
    for table in tables:
        assert len({p.id for p in table}) == len(table)  # no case listed twice
    assert sum(map(len, tables)) >= 40
