"""The README and the documentation keep up with the code: the README's list of models and
engines is what the registry says, every public name has its place in the API reference, the
README stays short and dated measurements stay out of it. Building the site (``make docs``) is
CI's job (``.ci/run``); ``test_the_site_builds_without_warnings`` (slow) builds it here."""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import zoo

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
MAX_README_BYTES = 12 * 1024


def readme_models():
    spec = importlib.util.spec_from_file_location(
        "readme_models", ROOT / "docs" / "_ext" / "readme_models.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_readme_lists_every_model_and_engine_as_the_registry_does():
    rm = readme_models()
    block = rm.readme_block(README.read_text(encoding="utf-8"))
    assert block is not None, "the README has no models block"
    assert block == rm.models_block(), (
        "the README's list of models is stale: run `python docs/_ext/readme_models.py`"
    )
    rows = [line.split(" | ")[0] for line in block.splitlines() if line.startswith("| `")]
    listed = re.findall(r"`(\w+)`", " ".join(rows))
    assert sorted(listed) == zoo.list_models(suite="seeds")  # each model in one row, once


def test_the_readme_is_short_starts_with_the_set_up_and_holds_no_dated_measurement():
    text = README.read_text(encoding="utf-8")
    assert len(text.encode()) <= MAX_README_BYTES, len(text.encode())
    first_block = re.search(r"```bash\n(.*?)```", text, re.S).group(1)
    assert first_block.splitlines()[0].startswith("make report")
    assert first_block.splitlines()[1].startswith("make test")
    assert not re.findall(r"\b20\d\d-\d\d-\d\d\b", text), "a date in the README"
    assert not re.findall(r"`[0-9a-f]{7,40}`", text), "a commit hash in the README"
    timings = re.findall(r"\b\d+(?:\.\d+)? ?(?:s|ms|µs|min|h)\b", text)
    assert not timings, f"timings in the README: {timings}"


def test_every_public_name_is_in_the_api_reference():
    api = (ROOT / "docs" / "api.md").read_text(encoding="utf-8")
    documented = set(re.findall(r"^\.\. auto\w+:: zoo\.(\w+)$", api, re.M))
    assert documented == set(zoo.__all__), (
        f"missing: {sorted(set(zoo.__all__) - documented)}, "
        f"not public: {sorted(documented - set(zoo.__all__))}"
    )


def test_every_guide_page_is_in_the_table_of_contents():
    index = (ROOT / "docs" / "index.md").read_text(encoding="utf-8")
    pages = sorted(p.stem for p in (ROOT / "docs" / "guide").glob("*.md"))
    assert pages and all(f"guide/{p}\n" in index for p in pages), pages


@pytest.mark.slow
def test_the_site_builds_without_warnings(tmp_path):
    """The site, warnings as errors, without a report (its gallery pages say so), into a
    temporary folder (the generated pages go to docs/gallery and docs/benchmarks, as always)."""
    pytest.importorskip("sphinx")
    pytest.importorskip("myst_parser")
    if shutil.which("dot") is None:
        pytest.skip("Graphviz's dot is not installed (apt-get install graphviz)")
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "sphinx",
            "-W",
            "--keep-going",
            "-q",
            "-b",
            "html",
            "-d",
            str(tmp_path / "doctrees"),
            str(ROOT / "docs"),
            str(tmp_path / "html"),
        ],
        capture_output=True,
        text=True,
        env={**os.environ, "ZOO_DOCS_REPORT": ""},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    pages = {p.stem for p in (tmp_path / "html" / "gallery").glob("*.html")}
    assert set(zoo.list_models()) <= pages


def test_the_engines_the_guides_show_are_three_coins() -> None:
    """The README's and the running guide's ``entry.engines`` comments: three_coin's engines."""
    import re

    want = zoo.get_model("three_coin").engines
    root = Path(__file__).resolve().parents[1]
    for path in (root / "README.md", root / "docs" / "guide" / "running.md"):
        text = path.read_text(encoding="utf-8")
        shown = re.search(r"entry\.engines  # \(([^)]*)\)", text.replace("\n#", "")).group(1)
        names = [n.strip(" '") for n in shown.split(",") if n.strip(" '") != "..."]
        assert tuple(names) == want[: len(names)] and len(names) >= 8, path.name
