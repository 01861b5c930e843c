"""Every wrong call gets a clear error naming the problem, before any work, leaving nothing."""

import subprocess
import sys

import numpy as np
import pytest
import torch

import zoo
from zoo.cli import main


@pytest.mark.parametrize(
    "call, message",
    [
        (
            lambda: zoo.get_model("three_coins"),
            r"unknown model 'three_coins'; did you mean 'three_coin'",
        ),
        (lambda: zoo.get_model("beta_bernouli"), r"did you mean 'beta_bernoulli'"),
        (lambda: zoo.run("three_coin", "svii"), r"unknown engine 'svii'.*did you mean 'svi'"),
        (lambda: zoo.run("beta_bernoulli", "enum"), r"'enum' does not apply.*no discrete latent"),
        (
            lambda: zoo.run("beta_bernoulli", "em"),
            r"unknown engine 'em'.*svi, nuts, chees, hmc, mh, importance, laplace, exact",
        ),
        (lambda: zoo.run("three_coin", "svi", num_steps=0), r"'num_steps' must be a positive"),
        (lambda: zoo.run("three_coin", "svi", num_steps=-5), r"'num_steps' must be a positive"),
        (lambda: zoo.run("three_coin", "nuts", num_samples=0), r"'num_samples' must be"),
        (lambda: zoo.run("three_coin", "nuts", num_samples=2.5), r"'num_samples' must be"),
        (lambda: zoo.run("three_coin", "nuts", warmup=-1), r"'warmup' must be a non-negative"),
        (lambda: zoo.run("three_coin", "svi", lr=0), r"'lr' must be a positive number"),
        (
            lambda: zoo.run("three_coin", "svi", num_step=10),
            r"unknown option 'num_step'.*'num_steps'",
        ),
        (lambda: zoo.run("three_coin", "svi", guide="gaussian"), r"'guide' must be one of"),
        (
            lambda: zoo.run("three_coin", "svi", elbo="trace"),
            r"must be enumerated: use elbo='enum'",
        ),
        (lambda: zoo.run("beta_bernoulli", "svi", elbo="iwae"), r"needs num_particles >= 2"),
        (lambda: zoo.run("beta_bernoulli", "svi", guide="flow"), r"at least 2 continuous"),
        (lambda: zoo.run("three_coin", "svi", guide="flow", jit=True), r"jit=True does not"),
        (lambda: zoo.run("three_coin", "em", init=(0.4, 1.2, 0.5)), r"init must be three"),
        (lambda: zoo.run("three_coin", "em", seed=-1), r"seed must be a non-negative"),
        (lambda: zoo.run("three_coin", "enum", params={"pi": 0.5}), r"missing \['p', 'q'\]"),
        (lambda: zoo.compare("three_coin", ["em", "nope"]), r"unknown engine 'nope'"),
        (lambda: zoo.compare("three_coin", ["em"], foo=1), r"option 'foo' is taken by none"),
    ],
)
def test_wrong_calls(call, message):
    with pytest.raises(ValueError, match=message):
        call()


Y = [1, 0, 1]


@pytest.mark.parametrize(
    "data, message",
    [
        ({}, r"missing 'y' \(expected a torch.float32 tensor of shape \(N,\)\)"),
        ({"y": Y, "extra": 1}, r"unknown data key\(s\) \['extra'\]"),
        ({"y": [[1.0, 0.0], [1.0, 1.0]]}, r"data\['y'\] has shape \(2, 2\); expected .*\(N,\)"),
        ({"y": [1.0, float("nan"), 0.0]}, r"data\['y'\] contains NaN"),
        ({"y": np.array([1.0, np.inf])}, r"data\['y'\] contains inf"),
        ({"y": [1.0, 2.0, 0.0]}, r"observed site 'y'.*outside its support"),
        ({"y": ["a", "b"]}, r"dtype <U1; expected numbers"),
        ({"y": []}, r"data\['y'\] is empty"),
        ("y", r"data must be a dict"),
    ],
)
def test_bad_data(data, message):
    with pytest.raises(ValueError, match=message):
        zoo.run("three_coin", "em", data=data)


def test_good_user_data_is_accepted_and_converted():
    run = zoo.run("three_coin", "em", data={"y": np.array([1, 1, 0, 1])})
    assert run.ok and run.extras["estimate"]["pi"] == pytest.approx(0.5)
    run = zoo.run("beta_bernoulli", "exact", data={"y": [1, 1], "a": 2, "b": 3.0})
    assert run.summary.loc["p", "mean"] == pytest.approx(4 / 7)
    with pytest.raises(ValueError, match=r"data\['a'\] must be a number"):
        zoo.run("beta_bernoulli", "exact", data={"y": [1, 1], "a": "2", "b": 3.0})


def test_numerical_failure_is_a_failed_run_not_an_exception():
    import pyro
    import pyro.distributions as dist

    def explode(y):
        m = pyro.sample("m", dist.Normal(0.0, 1.0))
        with pyro.plate("n", y.shape[0]):
            pyro.sample("y", dist.Normal(m, torch.exp(m * 1e4)), obs=y)

    zoo.register("exploding_test", model=explode, data={"y": torch.ones(3)})
    try:
        with pytest.warns(RuntimeWarning, match="failed"):
            run = zoo.run("exploding_test", "svi", num_steps=50, lr=10.0)
        assert run.status == "failed" and run.idata is None
        assert ("scale" in run.error or "ELBO is" in run.error) and "\n" not in run.error
        assert "Traceback" in run.extras["traceback"]
        cmp = zoo.compare("exploding_test", ["svi"], svi={"num_steps": 50, "lr": 10.0})
        assert not cmp.runs["svi"].ok
    finally:
        zoo.unregister("exploding_test")


# ------------------------------------------------------------------------------ CLI


@pytest.mark.parametrize(
    "argv, message",
    [
        (["info", "three_coins"], "did you mean 'three_coin'"),
        (["run", "three_coin", "--engine", "magic"], "unknown engine 'magic'"),
        (["run", "three_coin", "-e", "svi", "-o", "num_steps=0"], "'num_steps' must be"),
        (["run", "three_coin", "-e", "svi", "-o", "bogus"], "options are KEY=VALUE"),
        (["compare", "three_coin", "--engines", "em,nope"], "unknown engine 'nope'"),
        (["report", "nope", "--out", "OUT"], "unknown model 'nope'"),
    ],
)
def test_cli_errors_are_one_line(argv, message, capsys, tmp_path):
    argv = [str(tmp_path / "out") if a == "OUT" else a for a in argv]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and err.startswith("zoo: error:") and len(err.splitlines()) == 1
    assert not (tmp_path / "out").exists()


def test_cli_run_bad_engine_leaves_no_output(tmp_path):
    out = tmp_path / "run"
    assert main(["run", "three_coin", "-e", "nope", "--out", str(out)]) == 2
    assert not out.exists()


def test_python_dash_m_zoo_error_has_no_traceback():
    proc = subprocess.run(
        [sys.executable, "-m", "zoo", "run", "thre_coin", "-e", "em"],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert "did you mean 'three_coin'" in proc.stderr
