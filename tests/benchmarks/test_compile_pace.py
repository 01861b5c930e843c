"""The replay of benchmarks/compile_pace.py against figures worked out by hand."""

from __future__ import annotations

import importlib.util
import sys

import pytest

from tests.paths import ROOT

sys.path.insert(0, str(ROOT / "benchmarks"))  # the script imports compile_policy beside it
spec = importlib.util.spec_from_file_location("compile_pace", ROOT / "benchmarks/compile_pace.py")
cp = importlib.util.module_from_spec(spec)
sys.modules["compile_pace"] = cp  # its dataclass looks its module up there
spec.loader.exec_module(cp)


def steady(pace: float, total: int = 1000, start: int = 75, cost: float = 10.0):
    return cp.Recording(start, cost, 0.0, [pace * (i + 1) for i in range(total)])


def test_a_steady_costly_run_compiles_at_each_schedules_first_check():
    rec = steady(0.1)
    # first check: max(10, span // 50) iterations into the weighed span
    assert cp.decide(rec, rec.start) == 75 + 925 // 50
    assert cp.decide(rec, 0) == 1000 // 50
    # compiled after 20: 2.0 traced + 10 compile + 0.35 x 98.0 of the rest
    assert cp.seconds(rec, 20) == pytest.approx(2.0 + 10.0 + 0.35 * 98.0)
    assert cp.hindsight(rec) == (20, pytest.approx(46.3))


def test_a_cheap_run_never_compiles():
    rec = steady(0.002)  # 2 s of work over the run: under policy.COMPILE_AFTER_S
    assert cp.decide(rec, rec.start) is None and cp.decide(rec, 0) is None
    assert cp.hindsight(rec) == (None, pytest.approx(2.0))
    assert cp.seconds(rec, None) == pytest.approx(2.0)


def test_a_slow_buffer_misleads_only_the_schedule_from_the_start():
    # 0.3 s an iteration over the first 75, then 0.005: 22.5 + 4.625 s of work in all; a compile
    # at 20 costs 6.0 + 20 + 0.35 x 21.125 = 33.39 s, more than staying traced
    work, w = [], 0.0
    for i in range(1000):
        w += 0.3 if i < 75 else 0.005
        work.append(w)
    rec = cp.Recording(75, 20.0, 0.0, work)
    assert cp.decide(rec, 0) == 20
    assert cp.decide(rec, rec.start) is None
    assert cp.seconds(rec, 20) == pytest.approx(33.39375)
    assert cp.hindsight(rec) == (None, pytest.approx(27.125))
