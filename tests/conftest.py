import warnings

import pytest

warnings.filterwarnings("ignore", category=FutureWarning)


@pytest.fixture(autouse=True)
def _quiet(monkeypatch):
    """No progress bars in tests."""
    monkeypatch.setattr("sys.stderr.isatty", lambda: False, raising=False)
