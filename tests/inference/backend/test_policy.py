"""When compiling a run pays (zoo_inference.backend.policy): counted work, never the clock."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

import zoo
import zoo_inference.backend as backend
from tests.sampling import NUTS_TEST_DEPTH, counting
from tests.seeding import shifted
from zoo_inference import density as density_module
from zoo_inference import samplers
from zoo_inference.density import batched_density
from zoo_inference.samplers.nuts_tree import NUTS_STEP_NODES


def test_auto_compile_asks_again_as_the_work_changes(monkeypatch, configured):
    """The decision to compile is taken at 2% of the run (10 iterations at least) and again
    each time the iterations done double: a run whose graph calls are few at first and then
    many (NUTS's trees grow in warmup) is compiled once their modelled time, projected over the
    run, exceeds COMPILE_AFTER_S and the rest of the run compiled saves more than the compile."""
    d, compiled = counting(monkeypatch, configured)
    d.start_run(auto_compile=True)
    total = 1000
    for it in range(20):  # 1 ms of modelled work an iteration: 1 s over the run
        d._work += 0.001
        d.tick(it, total)
    assert not compiled
    for it in range(20, 40):  # then 100 ms an iteration: at 40 done, 50 s over the run
        d._work += 0.1
        d.tick(it, total)
        assert bool(compiled) == (it + 1 >= 40), it
    assert d.mode == "compiled"


def test_auto_compile_counts_graph_calls_not_seconds(monkeypatch, configured):
    """The work is counted: each call of the traced density adds its graph's modelled seconds
    (policy.call_seconds, from the graph's nodes and tensor sizes), whatever the clock says, so
    a busy machine takes the same path as a quiet one."""
    d, _ = counting(monkeypatch, configured)
    d.start_run(auto_compile=True)
    assert d._call_s == pytest.approx(backend.policy.call_seconds(d._graph)) and d._call_s > 0
    theta = d.random_points(d.generator(0))
    clockless = SimpleNamespace(perf_counter=lambda: 1 / 0)  # a clock read would raise
    monkeypatch.setattr(density_module, "time", clockless)
    for _ in range(7):
        d(theta)
    assert d._work == pytest.approx(7 * d._call_s)
    d.restart_pace()
    assert d._work == 0.0


def test_auto_compile_weighs_the_compile_against_what_it_saves(monkeypatch, configured):
    """Past the first rule, a run compiles only where the rest of it, at the compiled pace,
    saves more than the compile is expected to cost: 49 s of work to go save 31.9 s compiled,
    worth a 20 s compile, not a 40 s one. The expected cost grows with the density's graph."""
    d, compiled = counting(monkeypatch, configured)
    for cost, want in ((40.0, False), (20.0, True)):
        monkeypatch.setattr(d, "compile_cost_s", lambda cost=cost: cost)
        compiled.clear()
        d.start_run(auto_compile=True)
        for it in range(20):
            d._work += 0.05  # 49 s to go at this rate
            d.tick(it, 1000)
        assert bool(compiled) is want, cost
    e = zoo.get_model("beta_bernoulli")
    small = batched_density(e.model, e.load_data(), e.structure, 3)
    big = zoo.get_model("hmm")
    large = batched_density(big.model, big.load_data(), big.structure, 3)
    assert backend.policy.COMPILE_S < small.compile_cost_s() < large.compile_cost_s()


def test_each_run_starts_from_the_form_the_density_was_built_in(monkeypatch, configured):
    """A run that compiled mid-run leaves the cached density compiled; the next run of the same
    call starts traced again and takes the same path (the compiled step, made once, is reused)."""
    d, _ = counting(monkeypatch, configured)
    d.start_run(auto_compile=True)
    d.mode = "compiled"  # as a mid-run compile leaves it
    d.start_run(auto_compile=True)
    assert d.mode == "traced" and d._fn is d._traced


def test_a_compile_is_priced_with_the_nodes_its_fused_step_adds():
    """NUTS's tree bookkeeping adds about NUTS_STEP_NODES nodes to the graph it compiles: a NUTS
    run prices its compile with them, an HMC run (whose fused leapfrog adds few) does not, and
    each run starts from the density's own price."""
    e = zoo.get_model("beta_bernoulli")
    d = batched_density(e.model, e.load_data(), e.structure, 2)
    step = backend.policy.COMPILE_S_PER_NODE * NUTS_STEP_NODES
    prices = {}
    for sampler, options in ((samplers.nuts, NUTS_TEST_DEPTH), (samplers.hmc, {})):
        d.start_run(auto_compile=False)
        bare = d.compile_cost_s()
        gen = d.generator(shifted(3))
        sampler(d, d.initial_points(gen), num_samples=5, warmup=5, gen=gen, **options)
        prices[sampler] = d.compile_cost_s() - bare
    d.start_run(auto_compile=False)
    assert prices == {samplers.nuts: pytest.approx(step), samplers.hmc: 0.0}
    assert d.compile_cost_s() == pytest.approx(bare)


def test_a_run_counts_the_same_work_the_second_time(monkeypatch, configured):
    """The work a run's decisions read is the run's own: the checks of a step fused on the
    process's first run are not counted, so a second run of the same call, which finds the step
    built, counts the same work at every iteration and decides the same."""
    d, _ = counting(monkeypatch, configured)
    seen: list[list[float]] = []
    tick = d.tick
    monkeypatch.setattr(d, "tick", lambda i, n: seen[-1].append(d._work) or tick(i, n))
    for _ in range(2):
        seen.append([])
        d.start_run(auto_compile=True)
        gen = d.generator(shifted(5))
        samplers.nuts(d, d.initial_points(gen), num_samples=8, warmup=8, gen=gen, **NUTS_TEST_DEPTH)
    assert d._fused, "the run fused no step: nothing to check"
    assert seen[0] and seen[0] == seen[1]
