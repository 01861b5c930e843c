"""ChEES (zoo_inference.samplers.chees, trajectory): its Halton jitter, a short trajectory on a
Gaussian, its metric windows, its compile weighed on its draws, stuck chains restarted."""

from __future__ import annotations

import importlib
import math

import numpy as np
import pytest
import torch

from tests.sampling import PaceRecorder, counting
from tests.seeding import shifted
from zoo_inference import samplers
from zoo_inference.samplers import trajectory


def test_halton_is_the_van_der_corput_sequence():
    assert [trajectory.halton(i) for i in range(1, 6)] == [0.5, 0.25, 0.75, 0.125, 0.625]


def test_chees_adapts_a_short_trajectory_on_a_gaussian():
    """On a Gaussian (sds from 0.1 to 10), once the mass matrix holds the variances, the
    jittered ChEES optimum is a fraction of a period: T 2.4-2.7 at 3.4-3.8 leapfrog steps a
    draw (seeds 0-5). Before the running average and the clipped moves, Adam's raw iterate on
    the noisy gradient wandered: T 4-50, 5.6-63 steps a draw on the same seeds."""
    sd = torch.logspace(-1, 1, 10, dtype=torch.float64)

    def density(q):
        z = q / sd
        return -0.5 * (z * z).sum(-1), -z / sd

    gen = torch.Generator().manual_seed(shifted(5))
    q = torch.randn(16, 10, generator=gen, dtype=torch.float64) * 2
    # the diagonal metric these figures were measured under (dense is the default at D = 10)
    s = samplers.chees(density, q, num_samples=200, warmup=300, gen=gen, dense_mass=False)
    T = s.info["trajectory_length"]
    assert 1.0 < T < 3.5, T
    assert float(s.stats["n_steps"].mean()) < 5
    x = s.theta.reshape(-1, 10) / sd
    ess = len(x) / 4  # conservative
    assert float(x.mean(0).abs().max()) < 5 / np.sqrt(ess)
    assert float((x.var(0) - 1).abs().max()) < 5 * np.sqrt(2 / ess)


def test_chees_metric_windows_leave_out_the_fast_initial_buffer(monkeypatch):
    """ChEES estimates its mass matrix over Stan's slow windows only (75-100 and 100-150 of a
    200-iteration warmup), as the windowed NUTS does: the fast initial buffer holds the
    chains' way in from their starts, and a metric estimated from it is far too wide (the
    figures on naive_bayes are in the commit that made this test)."""
    chees_module = importlib.import_module("zoo_inference.samplers.chees")
    seen: list[int] = []
    estimate = chees_module.regularised_covariance

    def recording(draws: torch.Tensor) -> torch.Tensor:
        seen.append(draws.shape[1])
        return estimate(draws)

    monkeypatch.setattr(chees_module, "regularised_covariance", recording)

    def density(q):
        return -0.5 * (q * q).sum(-1), -q

    gen = torch.Generator().manual_seed(shifted(2))
    q = 30 + torch.randn(16, 2, generator=gen, dtype=torch.float64)  # 30 sds out
    s = samplers.chees(density, q, num_samples=50, warmup=200, gen=gen, dense_mass=True)
    assert seen == [25, 50]
    diag = torch.diagonal(s.state["inv_mass"][0])
    assert bool(((diag > 0.3) & (diag < 3)).all()), diag  # a standard normal's, not the way in


def test_chees_weighs_its_compile_on_the_work_of_its_draws(monkeypatch, configured):
    """ChEES asks the density whether to compile only while it draws, the pace measured from
    the end of warmup: its warmup's first iterations, before the metric settles, cost several
    times the draws. The density's pace restarts where the sampler says."""
    recording = PaceRecorder()
    gen = torch.Generator().manual_seed(shifted(0))
    q = torch.randn(8, 2, generator=gen, dtype=torch.float64)
    samplers.chees(recording, q, num_samples=30, warmup=40, gen=gen)
    events = recording.events
    assert events == ["restart", *((i, 30) for i in range(30))]

    d, compiled = counting(monkeypatch, configured)
    d.start_run(auto_compile=True)
    for it in range(9):  # a second of work an iteration, before the first check: 990 s to go
        d._work += 1.0
        d.tick(it, 1000)
    d.restart_pace()
    for it in range(20):  # then 5 ms an iteration: 5 s to go, not worth a compile
        d._work += 0.005
        d.tick(it, 1000)
    assert not compiled


def _normal_with_a_trap(q):
    """log [N(q; 0, I) + exp(-60) N(q; c, 0.1^2 I)] up to a constant, c = (30, 30): a basin of
    no mass (its peak 60 nats below the mode, 840 nats of wall around it) that a chain started
    in never leaves."""
    c = torch.full_like(q[0], 30.0)
    a, b = -0.5 * (q * q).sum(-1), -60 - 50 * ((q - c) ** 2).sum(-1)
    lp = torch.logaddexp(a, b)
    wa, wb = torch.exp(a - lp)[:, None], torch.exp(b - lp)[:, None]
    return lp, wa * -q + wb * -100 * (q - c)


@pytest.mark.parametrize("restart", [True, False])
def test_chees_restarts_chains_stuck_in_a_basin_of_no_mass(monkeypatch, restart):
    """Half the chains start in the trap. ChEES restarts them where the others are at the first
    window's end, and every draw is the normal's; without restarts (the check that this test can
    fail) they sample the trap to the end."""
    if not restart:
        monkeypatch.setattr(trajectory, "STUCK_NATS", math.inf)
    gen = torch.Generator().manual_seed(shifted(3))
    q = torch.randn(16, 2, generator=gen, dtype=torch.float64) * 0.5
    q[8:] += 30.0
    s = samplers.chees(_normal_with_a_trap, q, num_samples=200, warmup=300, gen=gen)
    x = s.theta.reshape(-1, 2)
    trapped = (x - 30).abs().max(-1).values < 1
    if not restart:
        assert s.info["restarted_chains"] == 0 and int(trapped.sum()) == 8 * 200
        return
    assert s.info["restarted_chains"] >= 8 and not trapped.any()
    ess = len(x) / 4  # conservative
    assert float(x.mean(0).abs().max()) < 5 / np.sqrt(ess)
    assert float((x.var(0) - 1).abs().max()) < 5 * np.sqrt(2 / ess)


def test_stuck_chains_are_those_far_below_the_best():
    lp = torch.tensor([[-3.0, -2.0], [-1.0, -2.0], [-40.0, -41.0], [-torch.inf, -1.0]])
    # the bar at D = 2: 20 + 4 = 24 nats below the best chain's mean (-1.5)
    assert trajectory.stuck_chains(lp, 2).tolist() == [False, False, True, True]
    assert not trajectory.stuck_chains(torch.full((3, 4), -torch.inf), 2).any()
