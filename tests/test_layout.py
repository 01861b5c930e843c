"""The packages import one way (the import-linter contracts in pyproject.toml: zoo on reports on
inference on the data, model files through the façade, no cycles between a package's modules),
no module reaches around them with a dynamic import, and no import hides inside a function."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# each package's import name and its folder (pyproject.toml's package-dir)
FOLDERS = {
    "zoo_datasets": "datasets",
    "zoo_inference": "inference",
    "zoo_reports": "reports",
    "zoo": "zoo",
}
PACKAGES = tuple(FOLDERS)
# packages below the façade: a dynamic import of the project there would slip past the contracts
NO_DYNAMIC = ("zoo_datasets", "zoo_inference", "zoo_reports")
LAZY_OK = {
    "zoo/cli.py",  # the CLI imports torch lazily so that `zoo --help` is instant
    "datasets/__init__.py",  # scikit-learn (a second) and pandas only when a loader runs
    "datasets/gym.py",  # inference_gym's data modules (0.7 MB of source) only when one is read
    "inference/arviz_io.py",  # ArviZ on first use: listing or registering models needs none
    "inference/samplers/mams.py",  # ArviZ's ESS when mams tunes L (a kernel imports no arviz_io)
    # torch's and Pyro's private parts only where their versions are verified (backend/versions)
    "inference/backend/compile.py",  # and TorchInductor (half a second) only when compiling
    "inference/backend/contraction.py",
    "inference/backend/tracing.py",
}


def modules() -> dict[str, Path]:
    out = {}
    for pkg, folder in FOLDERS.items():
        for path in sorted((ROOT / folder).rglob("*.py")):
            rel = path.relative_to(ROOT / folder).with_suffix("")
            name = ".".join([pkg, *(rel.parts[:-1] if rel.name == "__init__" else rel.parts)])
            out[name] = path
    return out


def test_import_contracts_hold() -> None:
    """``lint-imports`` (import-linter, as ``make lint`` runs it) on this source tree."""
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    code = "import sys; from importlinter.cli import lint_imports_command as lint; sys.exit(lint())"
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert "0 broken" in done.stdout


def _dynamic_imports(tree: ast.AST) -> list[tuple[int, str, str | None]]:
    """(line, call, module name or None where it is computed) of every import of a module by a
    name given at run time: ``import_module``, ``__import__``, ``spec_from_file_location``, a
    lookup in ``sys.modules``."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            fn = node.func
            call = fn.attr if isinstance(fn, ast.Attribute) else getattr(fn, "id", "")
            if ast.unparse(fn) == "sys.modules.get":
                call = "sys.modules.get"
            elif call not in ("import_module", "__import__", "spec_from_file_location"):
                continue
            arg = node.args[0] if node.args else None
        elif isinstance(node, ast.Subscript) and ast.unparse(node.value) == "sys.modules":
            call, arg = "sys.modules[]", node.slice
        else:
            continue
        literal = (
            arg.value if isinstance(arg, ast.Constant) and isinstance(arg.value, str) else None
        )
        found.append((node.lineno, call, literal))
    return found


def test_no_dynamic_import_reaches_around_the_contracts() -> None:
    """import-linter sees import statements only: below the façade, no module imports one of
    the project's modules by name at run time (as reports once looked up ``zoo`` to re-run a
    model); a computed name, which could be anything, is refused too."""
    bad = []
    for name, path in modules().items():
        if name.split(".")[0] not in NO_DYNAMIC:
            continue
        for line, call, module in _dynamic_imports(ast.parse(path.read_text(encoding="utf-8"))):
            if module is None or module.split(".")[0] in PACKAGES:
                bad.append(f"{name} line {line}: {call}({module or 'a computed name'})")
    assert not bad, "\n".join(bad)


def test_the_dynamic_import_check_sees_an_escape() -> None:
    escape = ast.parse('import importlib\nentry = importlib.import_module("zoo").get_model("m")')
    assert _dynamic_imports(escape) == [(2, "import_module", "zoo")]
    assert _dynamic_imports(ast.parse("import sys\nsys.modules[name]")) == [
        (2, "sys.modules[]", None)
    ]
    torch_config = ast.parse('sys.modules.get("torch._inductor.config")')
    assert _dynamic_imports(torch_config) == [(1, "sys.modules.get", "torch._inductor.config")]


def test_no_import_inside_functions():
    bad = []
    for name, path in modules().items():
        if str(path.relative_to(ROOT)) in LAZY_OK:
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for fn in ast.walk(tree):
            if isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
                for node in ast.walk(fn):
                    if isinstance(node, ast.Import | ast.ImportFrom):
                        bad.append(f"{name}.{fn.name} imports at line {node.lineno}")
    assert not bad, "\n".join(bad)


def test_the_guide_table_lists_every_engine_with_its_options():
    """Engines are declared once (inference/engines.py); the guide's table must keep up."""
    from zoo_inference.engines import GENERIC_ENGINES

    guide = (ROOT / "docs" / "guide" / "engines.md").read_text()
    rows = {
        line.split("|")[1].strip(): line
        for line in guide.splitlines()
        if line.startswith("| `") and line.count("|") >= 4
    }
    for name, spec in GENERIC_ENGINES.items():
        row = next((r for key, r in rows.items() if f"`{name}`" in key), None)
        assert row is not None, f"docs/guide/engines.md's table has no row for {name!r}"
        options = row.split("|")[3]
        missing = [o for o in spec.defaults if f"`{o}`" not in options and o != "progress"]
        assert not missing, f"docs/guide/engines.md's row for {name!r} does not name {missing}"


def test_the_tests_mirror_the_packages():
    """Each folder of tests/ is a folder of the repository (tests/inference/samplers holds the
    tests of inference/samplers), and a test file is named for what it tests."""
    tests = ROOT / "tests"
    folders = [p for p in tests.rglob("*") if p.is_dir() and p.name not in ("data", "__pycache__")]
    assert folders
    stray = [str(p.relative_to(tests)) for p in folders if "data" not in p.relative_to(tests).parts
             and not (ROOT / p.relative_to(tests)).is_dir()]  # fmt: skip
    assert not stray, f"test folders with no package folder of that name: {stray}"
    for p in folders:
        if "data" not in p.relative_to(tests).parts:
            assert (p / "__init__.py").is_file(), f"{p}: a package, so that names do not clash"
