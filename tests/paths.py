"""Where the tests find the repository and their saved data, wherever a test file sits."""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]  # the repository
DATA = Path(__file__).resolve().parent / "data"  # what the tests read: oracles saved by scripts
