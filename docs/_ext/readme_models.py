"""The README's list of models and engines, written from the registry.

``python docs/_ext/readme_models.py`` rewrites the block between the README's ``models`` markers;
``tests/test_docs.py`` checks that the README holds what this writes.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
BEGIN = "<!-- models: begin (python docs/_ext/readme_models.py writes this block) -->"
END = "<!-- models: end -->"


def models_block() -> str:
    """A table of the seed documents' models (suite ``seeds``): the generic engines that apply,
    and its own (models with none of their own share a row with those whose generic engines are
    the same); the benchmark suites (Inference Gym, posteriordb) by count."""
    import zoo
    from zoo_inference.engines import GENERIC_ENGINES

    seeds = zoo.list_models(suite="seeds")
    gym, pdb = (len(zoo.list_models(suite=s)) for s in ("gym", "posteriordb"))
    lines = [
        BEGIN,
        "",
        f"{len(seeds)} models of the seed documents, {gym} Inference Gym targets "
        f"(`zoo list --suite gym`) and {pdb} posteriordb reference posteriors "
        "(`zoo list --suite posteriordb`). Generic engines: "
        + ", ".join(f"`{e}`" for e in GENERIC_ENGINES)
        + "; a model's own engines are its closed form (`exact`), the reference algorithms its"
        " documents derive, peer libraries' fits and variants of the generic engines.",
        "",
        "| model | generic engines | its own engines |",
        "|---|---|---|",
    ]
    groups: dict[tuple[str, ...], list[str]] = {}
    for name in seeds:
        engines = zoo.get_model(name).engines
        generic = " ".join(e for e in engines if e in GENERIC_ENGINES) or "—"
        own = ", ".join(f"`{e}`" for e in engines if e not in GENERIC_ENGINES) or "—"
        # models with no engines of their own and the same generic ones share a row
        key = (generic, own) if own == "—" else (name, generic, own)
        groups.setdefault(key, []).append(name)
    for key, names in groups.items():
        generic, own = key[-2:]
        lines.append(f"| {', '.join(f'`{n}`' for n in names)} | {generic} | {own} |")
    return "\n".join([*lines, "", END])


def readme_block(text: str) -> str | None:
    """The README's block between the markers (markers included), or None."""
    found = re.search(re.escape(BEGIN) + r".*?" + re.escape(END), text, re.S)
    return found.group(0) if found else None


def main() -> int:
    text = README.read_text(encoding="utf-8")
    old = readme_block(text)
    if old is None:
        print(f"{README}: no block between {BEGIN!r} and {END!r}", file=sys.stderr)
        return 2
    README.write_text(text.replace(old, models_block()), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
