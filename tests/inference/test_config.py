"""The settings object (``zoo.config()``, ``zoo.configure(...)``): the one place that reads the
environment, checked names and values, and the code that follows it."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

import zoo
from zoo import store
from zoo_inference import config as config_module
from zoo_inference.density import batched_density


def test_the_defaults_and_the_environment_variables_that_give_them():
    read = config_module._from_environment
    assert zoo.Config() == zoo.Config(auto_compile=True, uncompiled="torchscript")
    assert read({}) == {}
    assert read({"ZOO_AUTO_COMPILE": " No ", "ZOO_CODE_VERSION": "v1"}) == {
        "auto_compile": False,
        "code_version": "v1",
    }
    assert read({"ZOO_AUTO_COMPILE": "1", "ZOO_UNCOMPILED": " fx "}) == {
        "auto_compile": True,
        "uncompiled": "fx",
    }
    assert read({"ZOO_AUTO_COMPILE": "", "ZOO_CODE_VERSION": ""}) == {}  # empty: unset
    with pytest.raises(zoo.ZooError, match="ZOO_AUTO_COMPILE='maybe': use 1 or 0"):
        read({"ZOO_AUTO_COMPILE": "maybe"})
    with pytest.raises(zoo.ZooError, match="ZOO_UNCOMPILED: uncompiled must be one of"):
        read({"ZOO_UNCOMPILED": "jit"})


def test_a_new_process_reads_the_environment():
    env = {**os.environ, "ZOO_AUTO_COMPILE": "0", "ZOO_UNCOMPILED": "fx", "ZOO_CODE_VERSION": "x"}
    code = "import zoo; print(zoo.config())"
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == "Config(auto_compile=False, uncompiled='fx', code_version='x')"


def test_configure_changes_settings_for_a_block_or_for_good():
    before = zoo.config()
    with zoo.configure(uncompiled="fx", code_version="pinned") as inside:
        assert inside == zoo.config()
        assert (inside.uncompiled, inside.code_version) == ("fx", "pinned")
        assert inside.auto_compile == before.auto_compile  # the others untouched
        with zoo.configure(uncompiled="torchscript"):
            assert zoo.config().uncompiled == "torchscript"
        assert zoo.config().uncompiled == "fx"
    assert zoo.config() == before
    restore = zoo.configure(auto_compile=not before.auto_compile)  # a plain call: it stays
    try:
        assert zoo.config().auto_compile is not before.auto_compile
    finally:
        restore.__exit__(None, None, None)
    assert zoo.config() == before


@pytest.mark.parametrize(
    "changes, message",
    [
        ({"auto_compil": False}, "unknown setting 'auto_compil' \\(did you mean 'auto_compile'"),
        ({"threads": 2}, "unknown setting 'threads'; settings: auto_compile, uncompiled"),
        ({"auto_compile": 0}, "auto_compile must be True or False, got 0"),
        ({"uncompiled": "eager"}, "uncompiled must be one of \\('torchscript', 'fx'\\)"),
        ({"code_version": 3}, "code_version must be a non-empty str or None, got 3"),
        ({"code_version": ""}, "code_version must be a non-empty str"),
    ],
)
def test_a_bad_setting_is_refused_and_changes_nothing(changes, message):
    before = zoo.config()
    with pytest.raises(zoo.ZooError, match=message):
        zoo.configure(**{"code_version": "pinned", **changes})
    assert zoo.config() == before


def test_the_density_and_the_store_follow_the_settings(configured):
    e = zoo.get_model("beta_bernoulli")
    density = batched_density(e.model, e.load_data(), e.structure, 2)
    configured(auto_compile=True)
    density.start_run(auto_compile=True)
    assert density.auto_compile
    with zoo.configure(auto_compile=False):
        density.start_run(auto_compile=True)
        assert not density.auto_compile
    configured(code_version=None)
    assert store.code_version()["source"] == store.source_hash()
    with zoo.configure(code_version="pinned"):
        assert store.code_version()["source"] == "pinned"
