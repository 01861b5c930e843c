"""What a new user hit (issue: output folders, scalar data, global state, progress, notebook
display, CLI gaps): each defect with the test that would have caught it."""

from __future__ import annotations

import errno
import json
import os
import random
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pyro
import pytest
import torch
from torch.distributions import constraints

import zoo
from zoo import sweep
from zoo.cli import main
from zoo.files import locked

# ----------------------------------------------------------------------------- output folders


def fake_runs(cells, seed, **kwargs):
    """Cells as instant runs of a cheap engine: these tests are about files, not inference."""
    cheap = {"beta_bernoulli": ("exact", {"num_samples": 50}), "three_coin": ("em", {})}
    out = {}
    for c in cells:
        engine, opts = cheap[c.model]
        out[(c.model, c.engine)] = zoo.run(c.model, engine, **opts)
    return out


def test_output_on_another_filesystem_is_staged_there(tmp_path, monkeypatch):
    """A rename across filesystems fails (EXDEV): files must be staged inside --out."""
    out = tmp_path / "mounted"
    out.mkdir()
    real_replace, real_rename = os.replace, os.rename

    def same_fs_only(fn):
        def move(src, dst):
            src, dst = Path(src).resolve(), Path(dst).resolve()
            inside = out.resolve() in src.parents and out.resolve() in dst.parents
            if not inside:  # across the mount point
                raise OSError(errno.EXDEV, "Invalid cross-device link")
            return fn(src, dst)

        return move

    monkeypatch.setattr(os, "replace", same_fs_only(real_replace))
    monkeypatch.setattr(os, "rename", same_fs_only(real_rename))
    monkeypatch.setattr(sweep, "run_cells", fake_runs)
    index = zoo.report(["beta_bernoulli"], out=out, profile="smoke", engines=["exact"])
    assert index.exists() and (out / "beta_bernoulli.html").exists()
    assert not [p for p in out.iterdir() if p.name.startswith(".zoo-staging")]


@pytest.mark.parametrize("command", ["report", "run"])
def test_unwritable_output_fails_before_any_work(command, capsys, monkeypatch):
    monkeypatch.setattr(sweep, "run_cells", lambda *a, **k: pytest.fail("work started"))
    start = time.perf_counter()
    if command == "report":
        argv = ["report", "beta_bernoulli", "--out", "/proc/zoo-out", "--profile", "smoke"]
    else:
        argv = ["run", "beta_bernoulli", "-e", "nuts", "--out", "/proc/zoo-out"]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("zoo: error: cannot write to '/proc/zoo-out'") and "\n" not in err
    assert time.perf_counter() - start < 5  # nothing ran


def test_a_second_writer_is_refused_not_lost(tmp_path, monkeypatch):
    out = tmp_path / "r"
    out.mkdir()
    monkeypatch.setattr(sweep, "run_cells", fake_runs)
    with locked(out):  # another report is writing into the folder
        with pytest.raises(ValueError, match="another zoo process is writing"):
            zoo.report(["beta_bernoulli"], out=out, profile="smoke", engines=["exact"])
    zoo.report(["beta_bernoulli"], out=out, profile="smoke", engines=["exact"])
    zoo.report(["three_coin"], out=out, profile="smoke", engines=["em"])
    models = json.loads((out / "results.json").read_text())["models"]
    assert sorted(models) == ["beta_bernoulli", "three_coin"]


# ----------------------------------------------------------------------------- data and options


@pytest.mark.parametrize(
    "scalars, message",
    [
        ({"a": -1}, r"data\['a'\] = -1.0 is outside the support"),
        ({"b": 0.0}, r"data\['b'\] = 0.0 is outside the support"),
        ({"a": float("inf")}, r"data\['a'\] must be finite"),
        ({"a": float("nan")}, r"data\['a'\] must be finite"),
        ({"a": "2"}, r"data\['a'\] must be a number"),
        ({"a": torch.ones(2)}, r"data\['a'\] must be a number, got an array"),
    ],
)
def test_scalar_data_is_validated(scalars, message):
    data = {"y": [1.0, 0.0, 1.0], "a": 1.0, "b": 1.0, **scalars}
    with pytest.raises(ValueError, match=message):
        zoo.run("beta_bernoulli", "exact", data=data)


def test_integer_and_tensor_scalars_that_convert_exactly_are_accepted():
    base = {"y": [1.0, 1.0, 0.0]}
    for a in (2, 2.0, torch.tensor(2.0), np.float32(2.0), torch.tensor(2)):
        run = zoo.run("beta_bernoulli", "exact", data={**base, "a": a, "b": 1})
        assert run.summary.loc["p", "mean"] == pytest.approx(4 / 6)  # Beta(4, 2)
    y = zoo.get_model("gaussian_mixture").load_data()["y"]
    assert zoo.run("gaussian_mixture", "em", data={"y": y, "K": 3.0}).ok
    with pytest.raises(ValueError, match=r"data\['K'\] must be an integer, got 2.5"):
        zoo.run("gaussian_mixture", "em", data={"y": y, "K": 2.5})


def test_a_shape_error_is_one_sentence():
    y = zoo.get_model("gaussian_mixture").load_data()["y"]
    with pytest.raises(ValueError) as info:
        zoo.run("gaussian_mixture", "em", data={"y": y, "K": 0})
    assert "data['K'] = 0" in str(info.value) and "\n" not in str(info.value)


@pytest.mark.parametrize(
    "engine, options, message",
    [
        ("enum", {"params": {"pi": 1.5, "p": 0.5, "q": 0.5}}, r"params\['pi'\] = 1.5 is outside"),
        ("enum", {"params": {"pi": float("nan"), "p": 0.5, "q": 0.5}}, r"must be finite"),
        ("em", {"init": "abc"}, r"option 'init' must be 3 numbers"),
        ("em", {"init": (0.4, 0.6)}, r"option 'init' must be 3 numbers"),
        ("em", {"init": (0.4, 1.2, 0.5)}, r"init must be three probabilities"),
        ("svi", {"jit": "yes"}, r"option 'jit' must be True, False or None"),
    ],
)
def test_every_option_is_checked_before_work_the_same_way(engine, options, message):
    with pytest.raises(ValueError, match=message):
        zoo.run("three_coin", engine, **options)


# ----------------------------------------------------------------------------- global state


def _seed_all(seed: int) -> tuple[float, float, float]:
    """Seed numpy, random and torch with ``seed``; returns the next number each then gives
    (and seeds them again, so the caller's next numbers are these)."""
    for reseed in (True, False):
        np.random.seed(seed)
        random.seed(seed)
        torch.manual_seed(seed)
        if reseed:
            expected = (np.random.rand(), random.random(), torch.rand(()).item())
    return expected


def test_a_run_leaves_the_callers_random_state_alone():
    expected = _seed_all(123)
    threads = torch.get_num_threads()
    zoo.run("beta_bernoulli", "svi", num_steps=20, num_samples=10, seed=0)
    assert (np.random.rand(), random.random(), torch.rand(()).item()) == expected
    assert torch.get_num_threads() == threads


SMOKE = {
    "svi": {"num_steps": 20, "num_samples": 10},
    "nuts": {"num_samples": 10, "warmup": 10, "num_chains": 2},
}


def _draws(run) -> dict[str, np.ndarray]:
    assert run.ok, run.error
    return {k: v.values for k, v in run.idata.posterior.data_vars.items()}


def test_a_run_leaves_the_callers_param_store_alone_and_its_numbers_do_not_depend_on_it():
    """zoo.run and zoo.compare give the user's Pyro parameter store back as it was (the same
    names, constraints and tensors, values unchanged) and the random generators where they
    were; a run's numbers are those of a run from an empty store and another random state."""
    pyro.clear_param_store()
    runs = {e: zoo.run("beta_bernoulli", e, seed=3, **o) for e, o in SMOKE.items()}
    store = pyro.get_param_store()
    loc = pyro.param("loc", torch.tensor([1.0, 2.0]))
    pyro.param("scale", torch.tensor(0.5), constraint=constraints.positive)
    tensors = dict(store.named_parameters())  # the unconstrained tensors themselves
    values = {k: v.detach().clone() for k, v in tensors.items()}
    constraint = store.get_state()["constraints"]
    expected = _seed_all(7)
    again = {e: zoo.run("beta_bernoulli", e, seed=3, **o) for e, o in SMOKE.items()}
    compared = zoo.compare("beta_bernoulli", list(SMOKE), seed=3, **SMOKE)
    assert (np.random.rand(), random.random(), torch.rand(()).item()) == expected
    assert dict(store.named_parameters()) == tensors  # the same tensor objects
    assert all(torch.equal(p, values[k]) for k, p in store.named_parameters())
    assert store.get_state()["constraints"] == constraint
    assert pyro.param("loc") is loc
    pyro.clear_param_store()
    for engine, run in runs.items():
        want = _draws(run)
        for other in (again[engine], compared.runs[engine]):
            got = _draws(other)
            assert want.keys() == got.keys() and all(np.array_equal(want[k], got[k]) for k in want)


def test_one_chain_runs_print_no_arviz_warning(capfd):
    zoo.run("beta_bernoulli", "nuts", num_samples=5, warmup=5, num_chains=1)
    zoo.run("three_coin", "em")
    captured = capfd.readouterr()
    assert "Shape validation failed" not in captured.err + captured.out


# ----------------------------------------------------------------------------- command line


def test_cli_help_is_fast_and_imports_no_torch():
    code = "import sys, zoo.cli; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.stdout.strip() == "False"
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "zoo", "--help"], capture_output=True, text=True)
    assert proc.returncode == 0 and "report" in proc.stdout
    assert time.perf_counter() - start < 3  # interpreter start included; torch alone takes ~2 s


def test_cli_version_and_profiles_help(capsys):
    with pytest.raises(SystemExit):
        main(["--version"])
    assert capsys.readouterr().out.startswith(f"zoo {zoo.__version__}")
    with pytest.raises(SystemExit):
        main(["report", "--help"])
    help_text = capsys.readouterr().out
    for profile in ("quick", "full", "smoke"):
        assert profile in help_text


def test_cli_empty_engines_is_an_error(capsys, tmp_path):
    assert main(["report", "beta_bernoulli", "--engines", "", "--out", str(tmp_path / "r")]) == 2
    assert "--engines is empty" in capsys.readouterr().err
    assert main(["compare", "beta_bernoulli", "--engines", ","]) == 2


def test_cli_report_takes_engines_and_options(tmp_path, capsys):
    out = tmp_path / "r"
    argv = ["report", "beta_bernoulli", "--out", str(out), "--profile", "smoke", "-q"]
    argv += ["--engines", "exact,svi", "-o", "svi.num_steps=30", "-o", "num_samples=40"]
    argv += ["--workers", "1"]
    assert main(argv) == 0
    page = json.loads((out / "beta_bernoulli.json").read_text())
    assert set(page["runs"]) == {"exact", "svi"}
    assert page["runs"]["svi"]["options"]["num_steps"] == 30
    assert page["runs"]["svi"]["options"]["num_samples"] == 40
    assert page["runs"]["exact"]["options"]["num_samples"] == 40
    assert main(argv[:-2] + ["-o", "nonsense=1"]) == 2
    assert "taken by none" in capsys.readouterr().err


def test_cli_loads_models_from_a_file(tmp_path, capsys):
    script = tmp_path / "my_models.py"
    script.write_text(
        "import pyro, pyro.distributions as dist, torch\n"
        "import zoo\n\n"
        "@zoo.register(data={'y': torch.tensor([0.5, 1.5])})\n"
        "def my_level(y):\n"
        "    mu = pyro.sample('mu', dist.Normal(0.0, 1.0))\n"
        "    with pyro.plate('n', len(y)):\n"
        "        pyro.sample('y', dist.Normal(mu, 1.0), obs=y)\n"
    )
    with zoo.isolated():
        argv = ["run", "my_level", "-e", "svi", "--models", str(script), "-q"]
        assert main([*argv, "-o", "num_steps=50", "-o", "num_samples=20"]) == 0
    assert "mu" in capsys.readouterr().out
    assert main(["list", "--models", str(tmp_path / "missing.py")]) == 2
    assert "no such file" in capsys.readouterr().err


def test_cli_compare_labels_the_elbo_as_a_bound(capsys):
    argv = ["compare", "beta_bernoulli", "--engines", "exact,svi", "-q"]
    assert main([*argv, "-o", "num_samples=100", "-o", "svi.num_steps=100"]) == 0
    out = capsys.readouterr().out
    assert "ELBO (a lower bound on the log evidence)" in out
    assert "exact log evidence -7.185387" in out


def test_ctrl_c_early_is_clean():
    """SIGINT while the CLI is still importing: one line, exit 130, no traceback."""
    # Python's own SIGINT handler, as under a terminal: a runner started in the background
    # (bash's `cmd &`) passes SIGINT down as ignored, and Python then installs no handler
    code = (
        "import signal, os, sys; sys.argv = ['zoo', 'list'];"
        "signal.signal(signal.SIGINT, signal.default_int_handler);"
        "import zoo.cli;"
        "import builtins; real = builtins.__import__\n"
        "def slow(name, *a, **k):\n"
        "    if name == 'torch': os.kill(os.getpid(), signal.SIGINT)\n"
        "    return real(name, *a, **k)\n"
        "builtins.__import__ = slow\n"
        "sys.exit(zoo.cli.main())"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 130, proc.stderr
    assert proc.stderr.strip() == "zoo: interrupted"


# ----------------------------------------------------------------------------- display


def test_short_reprs_and_html():
    entry = zoo.get_model("beta_bernoulli")
    assert repr(entry).startswith("ModelEntry('beta_bernoulli'") and len(repr(entry)) < 120
    assert "<b>beta_bernoulli</b>" in entry._repr_html_() and "exact" in entry._repr_html_()
    run = zoo.run("beta_bernoulli", "exact", num_samples=100)
    html = run._repr_html_()
    assert "ok, posterior draws" in html and "exact log evidence" in html and "<table" in html
    cmp = zoo.compare("beta_bernoulli", ["exact"], num_samples=100)
    assert "ground truth: closed form" in cmp._repr_html_() and "truth" in cmp._repr_html_()


def test_registering_again_in_a_notebook_cell(registry):
    def m(y):
        import pyro  # noqa: PLC0415 - a user's model, as written in a notebook cell

        pyro.sample("mu", pyro.distributions.Normal(0.0, 1.0))

    zoo.register("cell_model", model=m, data={"y": torch.zeros(1)})
    zoo.register("cell_model", model=m, data={"y": torch.zeros(2)}, replace=True)
    assert zoo.get_model("cell_model").load_data()["y"].shape == (2,)


def test_no_public_name_is_shadowed_by_a_submodule():
    """Importing a submodule binds its name on the package: a public function named like one
    (``zoo.sbc`` was, beside ``zoo/sbc.py``) would become the module for whoever imported it."""
    import importlib
    import pkgutil
    import types

    for info in pkgutil.iter_modules(zoo.__path__):
        if info.name != "__main__":  # the command line itself
            importlib.import_module(f"zoo.{info.name}")
    for name in zoo.__all__:
        assert not isinstance(getattr(zoo, name), types.ModuleType), name
