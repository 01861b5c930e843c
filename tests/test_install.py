"""The wheel as a user installs it: every package and data file in it, under import names that
shadow no well-known distribution, beside Hugging Face's ``datasets`` in one environment.

The fresh environment borrows the zoo's dependencies (torch, Pyro, ...) from the running one
through a ``.pth`` file placed after its own site-packages, so that only the zoo's wheel and
Hugging Face's package are installed into it; PyPI is asked for ``datasets`` alone (its
dependencies too in the slow test)."""

from __future__ import annotations

import shutil
import subprocess
import sys
import sysconfig
import time
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = {
    "zoo": "zoo",
    "zoo_datasets": "datasets",
    "zoo_inference": "inference",
    "zoo_reports": "reports",
}
# import names the project must not install: those of well-known distributions
TAKEN = {"datasets", "inference", "reports"}
PIP = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]

CHECK = """
import importlib.metadata as md, importlib.util, pathlib
import zoo, zoo_datasets
from zoo_reports import render

hf = md.distribution("datasets")
spec = importlib.util.find_spec("datasets")
assert pathlib.Path(spec.origin) == pathlib.Path(hf.locate_file("datasets/__init__.py"))
assert "load_dataset" in pathlib.Path(spec.origin).read_text()
tops = {f.parts[0] for f in md.distribution("pyro-zoo").files}
assert not tops & TAKEN, tops
assert zoo_datasets.load_faithful().shape == (272, 2)
assert zoo.get_model("gaussian_mixture").load_data()["y"].shape == (272,)
assert sorted(render.environment().list_templates()) == TEMPLATES, TEMPLATES
assert zoo.run("beta_bernoulli", "exact").ok
"""


def _run(cmd: list[str], **kw) -> str:
    done = subprocess.run(cmd, capture_output=True, text=True, **kw)
    assert done.returncode == 0, f"{' '.join(map(str, cmd))}:\n{done.stdout}\n{done.stderr}"
    return done.stdout


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """The project's wheel, built from a copy of the source (the build leaves its folders there,
    not in the checkout), with the running environment's setuptools."""
    src = tmp_path_factory.mktemp("src")
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    for folder in FOLDERS.values():
        shutil.copytree(ROOT / folder, src / folder, ignore=shutil.ignore_patterns("__pycache__"))
    out = tmp_path_factory.mktemp("wheel")
    _run([*PIP, "wheel", "--no-deps", "--no-build-isolation", "-w", str(out), str(src)])
    (built,) = out.glob("pyro_zoo-*.whl")
    return built


def _environment(path: Path) -> Path:
    """A fresh virtual environment at ``path`` that sees its own packages first, then the
    running environment's; its Python."""
    _run([sys.executable, "-m", "venv", "--without-pip", str(path)])
    python = path / "bin" / "python"
    own = _run([str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"])
    borrowed = [p for p in sys.path if Path(p).name in ("site-packages", "dist-packages")]
    assert sysconfig.get_path("purelib") in borrowed
    Path(own.strip(), "borrowed.pth").write_text("\n".join(borrowed) + "\n")
    return python


def _templates() -> list[str]:
    return sorted(p.name for p in (ROOT / "reports" / "templates").iterdir() if p.is_file())


def test_the_wheel_holds_every_module_and_data_file_under_its_own_names(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    tops = {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")}
    assert tops == set(FOLDERS)
    want = {
        f"{pkg}/{path.relative_to(ROOT / folder).as_posix()}"
        for pkg, folder in FOLDERS.items()
        for path in (ROOT / folder).rglob("*")
        if path.is_file() and "__pycache__" not in path.parts
    }
    missing = sorted(want - set(names))
    assert not missing, f"not in the wheel (pyproject's [tool.setuptools] packages?): {missing}"


def test_the_wheel_installs_beside_hugging_faces_datasets(wheel, tmp_path):
    """Both installed in one environment: ``datasets`` is Hugging Face's, the zoo's wheel takes
    none of the taken names, and the zoo's loaders, data files and templates work. Hugging
    Face's package comes without its dependencies here (the clash is one of files and names,
    and its dependencies are slow to install); the slow test below imports it too."""
    python = _environment(tmp_path / "venv")
    _run([*PIP, "--python", str(python), "install", "--no-deps", "datasets", str(wheel)])
    code = f"TEMPLATES = {_templates()!r}\nTAKEN = {TAKEN!r}\n{CHECK}"
    _run([str(python), "-c", code], cwd=tmp_path)


@pytest.mark.slow
def test_hugging_faces_datasets_and_the_zoo_import_together(wheel, tmp_path):
    python = _environment(tmp_path / "venv")
    started = time.perf_counter()
    _run([*PIP, "--python", str(python), "install", "datasets"])  # with its dependencies
    _run([*PIP, "--python", str(python), "install", "--no-deps", str(wheel)])
    print(f"installed in {time.perf_counter() - started:.0f} s")
    code = f"TEMPLATES = {_templates()!r}\nTAKEN = {TAKEN!r}\n{CHECK}\nimport datasets\n"
    code += "assert callable(datasets.load_dataset)"
    _run([str(python), "-c", code], cwd=tmp_path)
