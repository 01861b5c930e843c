"""The packages import one way (datasets -> zoo models -> inference -> reports, with the façade on
top), no module imports another in a cycle, and no import hides inside a function."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import zoo

ROOT = Path(__file__).resolve().parents[1]
# each package's folder and the name it is installed (imported) under
FOLDERS = {
    "zoo_datasets": "datasets",
    "zoo_inference": "inference",
    "zoo_reports": "reports",
    "zoo": "zoo",
}
PACKAGES = tuple(FOLDERS)
# what each package (or part) may import from the project
ALLOWED = {
    "zoo_datasets": set(),
    "zoo_inference": {"zoo_inference"},
    "zoo_reports": {"zoo_reports", "zoo_inference"},
    "zoo.models": {"zoo", "zoo_datasets"},  # the public façade only: `import zoo`
    "zoo": {"zoo", "zoo_inference", "zoo_reports", "zoo_datasets"},
}
LAZY_OK = {
    "zoo/cli.py",  # the CLI imports torch lazily so that `zoo --help` is instant
    "datasets/__init__.py",  # scikit-learn (a second) and pandas only when a loader runs
    "inference/arviz_io.py",  # ArviZ on first use: listing or registering models needs none
    "inference/density.py",  # TorchInductor (half a second) only when a step is compiled
}


def modules() -> dict[str, Path]:
    out = {}
    for pkg, folder in FOLDERS.items():
        for path in sorted((ROOT / folder).rglob("*.py")):
            rel = path.relative_to(ROOT / folder).with_suffix("")
            name = ".".join([pkg, *(rel.parts[:-1] if rel.name == "__init__" else rel.parts)])
            out[name] = path
    return out


def project_imports(name: str, path: Path) -> list[tuple[str, ast.AST]]:
    """(imported project module, node) for every import statement of a module."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    is_pkg = path.name == "__init__.py"
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = name.split(".")
                base = base if is_pkg else base[:-1]
                base = base[: len(base) - (node.level - 1)]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            targets = [mod] + [f"{mod}.{a.name}" for a in node.names]
        else:
            continue
        for t in targets:
            if t.split(".")[0] in PACKAGES:
                found.append((t, node))
    return found


def area(name: str) -> str:
    return "zoo.models" if name.startswith("zoo.models") else name.split(".")[0]


def test_packages_import_one_way():
    bad = []
    for name, path in modules().items():
        allowed = ALLOWED[area(name)]
        for target, node in project_imports(name, path):
            if target.split(".")[0] not in allowed and area(target) not in allowed:
                bad.append(f"{name} imports {target} (line {node.lineno})")
            public = ("zoo", "zoo.models", *(f"zoo.{x}" for x in zoo.__all__))
            internal = target.split(".")[0] == "zoo" and not target.startswith("zoo.models.")
            if area(name) == "zoo.models" and internal and target not in public:
                bad.append(f"{name} imports zoo internals {target} (line {node.lineno})")
    assert not bad, "\n".join(bad)


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


@pytest.mark.parametrize("package", PACKAGES)
def test_no_cycles_between_modules(package):
    mods = {n: p for n, p in modules().items() if n.split(".")[0] == package}
    graph = {
        n: {t for t, _ in project_imports(n, p) if t in mods and t != n} for n, p in mods.items()
    }
    # a package's __init__ re-exports its modules: edges into the package root are not cycles
    graph = {n: {t for t in ts if t != package} for n, ts in graph.items()}
    state: dict[str, int] = {}

    def visit(n: str, path: list[str]) -> None:
        state[n] = 1
        for t in graph[n]:
            if state.get(t) == 1:
                raise AssertionError(" -> ".join([*path, n, t]))
            if t not in state:
                visit(t, [*path, n])
        state[n] = 2

    for n in graph:
        if n not in state:
            visit(n, [])


def test_the_readme_table_lists_every_engine_with_its_options():
    """Engines are declared once (inference/engines.py); the README's table must keep up."""
    from zoo_inference.engines import GENERIC_ENGINES

    readme = (ROOT / "README.md").read_text()
    rows = {
        line.split("|")[1].strip(): line
        for line in readme.splitlines()
        if line.startswith("| `") and line.count("|") >= 4
    }
    for name, spec in GENERIC_ENGINES.items():
        row = next((r for key, r in rows.items() if f"`{name}`" in key), None)
        assert row is not None, f"README's engine table has no row for {name!r}"
        options = row.split("|")[3]
        missing = [o for o in spec.defaults if f"`{o}`" not in options and o != "progress"]
        assert not missing, f"README's row for {name!r} does not name {missing}"
