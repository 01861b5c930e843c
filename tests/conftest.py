import contextlib
import warnings

import pytest

import zoo
import zoo.api
from tests.seeding import SHIFT

warnings.filterwarnings("ignore", category=FutureWarning)

# the environment is read once, now: a test that sets a ZOO_ variable for its subprocesses leaves
# this process's settings alone (tests change those with the `configured` fixture)
zoo.config()


@pytest.fixture(scope="session", autouse=True)
def _shift_seeds():
    """Every run's seed moved by ``ZOO_TEST_SEED_SHIFT`` (see ``seeding.py``): patched where
    ``prepare`` validates it, so runs that rely on the default seed move too, and worker
    processes (forked) inherit it. Session scope: module-scoped fixtures' runs are shifted as
    well. Validation comes first, so a bad seed is still refused."""
    if not SHIFT:
        yield
        return
    check = zoo.api.check_seed
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(zoo.api, "check_seed", lambda seed: check(seed) + SHIFT)
        yield


@pytest.fixture
def configured():
    """``configured(**changes)``: ``zoo.configure(**changes)`` until the test ends."""
    with contextlib.ExitStack() as stack:
        yield lambda **changes: stack.enter_context(zoo.configure(**changes))


@pytest.fixture(autouse=True)
def _quiet(monkeypatch):
    """No progress bars in tests."""
    monkeypatch.setattr("sys.stderr.isatty", lambda: False, raising=False)


@pytest.fixture
def registry():
    """Models a test registers are forgotten after it (the built-in ones stay)."""
    with zoo.isolated():
        yield
