import warnings

import pytest

import zoo

warnings.filterwarnings("ignore", category=FutureWarning)


@pytest.fixture(autouse=True)
def _quiet(monkeypatch):
    """No progress bars in tests."""
    monkeypatch.setattr("sys.stderr.isatty", lambda: False, raising=False)


@pytest.fixture
def registry():
    """Models a test registers are forgotten after it (the built-in ones stay)."""
    with zoo.isolated():
        yield
