"""Listing models pays only for the models: data sets load, and ArviZ imports, on first use."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_listing_models_imports_neither_scikit_learn_nor_arviz() -> None:
    code = (
        "import sys, zoo; names = zoo.list_models(); "
        "print(len(names), 'sklearn' in sys.modules, 'arviz' in sys.modules)"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True
    )
    count, sklearn, arviz = out.stdout.split()
    assert int(count) > 10
    assert (sklearn, arviz) == ("False", "False"), out.stdout
