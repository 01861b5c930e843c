"""The chees engine's trajectory criteria: ChEES and ChEES per gradient (fun_mc's
``chees_per_grad_criterion``). The gradient estimate of each against the derivative of its
closed-form expectation on a Gaussian; the adapted trajectory on a badly scaled Gaussian; the
sampler's refusal of an unknown one."""

from __future__ import annotations

import importlib.util
import math

import numpy as np
import pytest
import torch

import zoo
from tests.paths import ROOT
from tests.seeding import shifted
from zoo_inference import samplers
from zoo_inference.samplers.trajectory import CRITERIA, TrajectoryLength, criterion_gradient

SD = torch.tensor([0.5, 1.0, 2.0], dtype=torch.float64)
STEP = 0.1


def _expected(criterion: str, u: float, T: float) -> float:
    """The criterion's expectation on N(0, diag SD^2) under the exact dynamics of a unit mass
    for tau = 2 u T: per dimension |q'|^2 - |q|^2 = sd^2 ((y^2 - x^2) sin^2 + 2 x y sin cos),
    x, y standard normal, angle tau / sd, whose second moment is 4 sd^4 sin^2: ChEES is
    sum sd^4 sin^2(tau / sd), and ChEES per gradient that over tau + h / 2."""
    tau = 2 * u * T
    c = float((SD**4 * torch.sin(tau / SD) ** 2).sum())
    return c if criterion == "chees" else c / (tau + STEP / 2)


@pytest.mark.parametrize("criterion", CRITERIA)
def test_criterion_gradient_is_the_derivative_of_its_expectation(criterion):
    """The estimate of d criterion / d log T, averaged over 30 batches of 10,000 chains drawn
    from the Gaussian and moved exactly for 2 u T (acceptance probabilities uniform, which
    weigh without bias), is the finite-difference derivative of :func:`_expected` within 5
    standard errors of the batches' mean (the centring on the batch's mean biases it by
    O(1 / 10,000), far below that)."""
    gen = torch.Generator().manual_seed(shifted(11))
    B, K = 10_000, 30
    ones = torch.ones(B, 3, dtype=torch.float64)
    for u, T in [(0.3, 1.0), (0.7, 2.0), (0.5, 4.0), (0.9, 0.5)]:
        angle = 2 * u * T / SD
        estimates = []
        for _ in range(K):
            q = torch.randn(B, 3, generator=gen, dtype=torch.float64) * SD
            p = torch.randn(B, 3, generator=gen, dtype=torch.float64)
            proposal = q * torch.cos(angle) + p * SD * torch.sin(angle)
            p_end = p * torch.cos(angle) - q / SD * torch.sin(angle)
            accept = torch.rand(B, generator=gen, dtype=torch.float64)
            estimates.append(
                criterion_gradient(criterion, u, T, q, proposal, p_end, accept, ones, STEP)
            )
        e = np.array(estimates)
        eps = 1e-5
        want = (
            _expected(criterion, u, T * math.exp(eps)) - _expected(criterion, u, T * math.exp(-eps))
        ) / (2 * eps)
        se = e.std(ddof=1) / math.sqrt(K)
        assert abs(e.mean() - want) < 5 * se, (u, T, e.mean(), want, se)


def test_chees_per_grad_adapts_a_shorter_trajectory_on_a_gaussian():
    """On a Gaussian with sds from 0.1 to 10 (the diagonal metric holding them), ChEES per
    gradient settles on a shorter T than ChEES, summed over eight seeds: one seed's margin is
    noisy (its mean about 0.37 of T near 2.6, sd 0.24, and 1 seed in 17 reversed it), eight put
    the sum's mean 4 of its sds above zero. Its draws keep the means and variances within 5
    Monte-Carlo errors."""
    sd = torch.logspace(-1, 1, 10, dtype=torch.float64)

    def density(q):
        z = q / sd
        return -0.5 * (z * z).sum(-1), -z / sd

    T = dict.fromkeys(CRITERIA, 0.0)
    kept = []
    for seed in range(8):
        for criterion in CRITERIA:
            gen = torch.Generator().manual_seed(shifted(20 + seed))
            q = torch.randn(16, 10, generator=gen, dtype=torch.float64) * 2
            s = samplers.chees(
                density, q, num_samples=200, warmup=300, gen=gen, dense_mass=False,
                criterion=criterion,
            )  # fmt: skip
            T[criterion] += s.info["trajectory_length"]
            if criterion == "chees_per_grad":
                kept.append(s.theta.reshape(-1, 10) / sd)
    assert T["chees_per_grad"] < T["chees"], T
    for x in kept:
        ess = len(x) / 4  # conservative
        assert float(x.mean(0).abs().max()) < 5 / np.sqrt(ess)
        assert float((x.var(0) - 1).abs().max()) < 5 * np.sqrt(2 / ess)


def test_the_engine_passes_its_criterion_on():
    """``criterion`` reaches the sampler: the same seed adapts another T under each."""
    small = {"num_samples": 50, "warmup": 100, "num_chains": 8, "progress": False}
    runs = {
        c: zoo.run("eight_schools_noncentered", "chees", criterion=c, seed=0, **small)
        for c in CRITERIA
    }
    assert all(r.ok for r in runs.values())
    T = {c: r.diagnostics["trajectory_length"] for c, r in runs.items()}
    assert T["chees"] != T["chees_per_grad"], T


def test_the_sampler_refuses_an_unknown_criterion():
    """The engine's option is checked before any work (tests/zoo/test_bad_input.py); the sampler,
    called directly, refuses one too."""
    with pytest.raises(ValueError, match="criterion must be one of"):
        TrajectoryLength(0.1, 0.05, 1000, "ess")


def test_the_benchmark_divides_the_seeds_mean_effective_draws_per_gradient():
    """benchmarks/chees_criterion.py's summary: per model and criterion the mean over seeds of
    1000 ESS / gradients, and the ratio of per_grad's mean to chees's."""
    script = ROOT / "benchmarks" / "chees_criterion.py"
    spec = importlib.util.spec_from_file_location("chees_criterion", script)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)

    def row(criterion, seed, ess, total_grads):
        fixed = {"rhat": 1.001, "draw_grads": 1e4, "T": 1.0, "n_steps": 2.0}
        return {"model": "m", "criterion": criterion, "seed": seed, "ess": ess, **fixed,
                "total_grads": total_grads}  # fmt: skip

    rows = [row("chees", 0, 100, 2e4), row("chees", 1, 300, 2e4)]
    rows.append(row("chees_per_grad", 0, 300, 1e4))
    lines = bench.summary(rows, ["m"])
    assert "| m | chees | 20.0 (10.0–30.0) | 10.0 (5.0–15.0) |" in lines[2]
    ratio = "- m: chees_per_grad / chees = 1.50 (draw gradients), 3.00 (total gradients)"
    assert lines[-1] == ratio
