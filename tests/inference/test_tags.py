"""The measures behind the models' tags: each on a posterior whose answer is known (a Gaussian,
Neal's funnel, a Laplace, two separated modes, an ODE solve), then once end to end."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import pytest
import torch

import zoo
from tests.paths import ROOT
from zoo_inference import tags


def draws(seed: int, n: int = 4000, dim: int = 20) -> torch.Tensor:
    return torch.randn(n, dim, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


@pytest.mark.parametrize("seed", range(3))
def test_a_gaussian_has_no_funnel_and_no_heavy_tails(seed: int) -> None:
    """Correlated too (rho 0.95): a Gaussian's conditional sd is the same everywhere, its
    kurtosis 0; from 4,000 draws the largest of 380 pairs' ratios is ~1.25, of 20 kurtoses
    ~0.2."""
    cov = torch.full((20, 20), 0.95, dtype=torch.float64) + 0.05 * torch.eye(20)
    mix = torch.linalg.cholesky(cov)
    u = draws(seed) @ mix.T
    assert tags.scale_ratio(u) < 1.6 < tags.FUNNEL
    assert tags.excess_kurtosis(u) < 0.5 < tags.HEAVY_TAILS
    assert tags.labels({"scale_ratio": tags.scale_ratio(u), "discrete": 0}) == ()


@pytest.mark.parametrize("seed", range(3))
def test_neals_funnel_is_a_funnel(seed: int) -> None:
    """v ~ N(0, 3^2), x_i | v ~ N(0, e^v): x's sd across v's deciles changes ~400-fold."""
    z = draws(seed, dim=10)
    u = torch.cat([3 * z[:, :1], z[:, 1:] * (1.5 * z[:, :1]).exp()], 1)
    assert tags.scale_ratio(u) > 30 * tags.FUNNEL
    assert "funnel" in tags.labels({"scale_ratio": tags.scale_ratio(u)})


@pytest.mark.parametrize("seed", range(3))
def test_a_laplace_posterior_has_heavy_tails(seed: int) -> None:
    """Laplace: excess kurtosis 3, every moment finite; the estimate from 100,000 draws has an
    sd of about 0.16, so it clears the threshold of 2 by six of them."""
    g = torch.Generator().manual_seed(seed)
    e = -torch.rand(100_000, 2, generator=g, dtype=torch.float64).log()
    u = e[:, :1] - e[:, 1:]  # the difference of two exponentials is Laplace
    assert tags.excess_kurtosis(u) > tags.HEAVY_TAILS
    assert tags.scale_ratio(u) == 1.0  # one coordinate: no pair


def two_modes(x: torch.Tensor) -> torch.Tensor:
    a = torch.distributions.Normal(-3.0, 1.0).log_prob(x).sum()
    b = torch.distributions.Normal(3.0, 1.0).log_prob(x).sum()
    return torch.logaddexp(a, b)


def test_optima_are_counted() -> None:
    starts = torch.linspace(-2, 2, 8, dtype=torch.float64)[:, None]
    one = torch.ones(1, dtype=torch.float64)
    assert tags.distinct_optima(two_modes, starts, one) == 2
    gaussian = torch.distributions.Normal(0.5, 1.0)
    assert tags.distinct_optima(lambda x: gaussian.log_prob(x).sum(), starts, one) == 1
    # a density that grows without bound has no optimum to find
    assert tags.distinct_optima(lambda x: x.sum(), starts, one, max_iter=20) is None
    assert tags.labels({"modes": 2}) == ("multimodal",)


def test_a_start_where_the_model_breaks_finds_no_optimum() -> None:
    """A funnel's climb that overflows the scale to nan (the distribution refuses it with a
    ValueError, as Neal's funnel did under L-BFGS) is a start with no optimum, not a crash."""

    def breaks(x: torch.Tensor) -> torch.Tensor:
        scale = torch.where(x.sum() > 1, torch.nan, 1.0)
        return (
            torch.distributions.Normal(0.0, scale, validate_args=True).log_prob(x).sum()
            + 0.5 * x.sum()
        )

    starts = torch.tensor([[0.0], [2.0]], dtype=torch.float64)
    assert tags.climb(breaks, starts[1], 20) is None
    assert tags.distinct_optima(breaks, starts, torch.ones(1, dtype=torch.float64)) == 1


def test_an_ode_solver_is_seen_in_the_call() -> None:
    from torchdiffeq import odeint

    y0, t = torch.ones(1), torch.linspace(0, 1, 3)
    assert tags.calls_ode_solver(lambda: odeint(lambda t, y: -y, y0, t))
    assert not tags.calls_ode_solver(lambda: torch.exp(-t))


def test_measure_on_a_model() -> None:
    """End to end on a short nuts run of eight_schools_noncentered: its sizes, no ODE, and the
    figures from the run's draws."""
    run = zoo.run(
        "eight_schools_noncentered", "nuts", seed=0, num_samples=200, warmup=200, progress=False
    )
    entry = zoo.get_model("eight_schools_noncentered")
    got = tags.measure(entry, lambda: run)
    assert got["dimension"] == 10 and got["discrete"] == 0 and got["ode"] is False
    assert got["nuts"]["divergences"] == run.diagnostics["divergences"]
    assert got["nuts"]["max_r_hat"] == pytest.approx(float(run.summary["r_hat"].max()))
    assert got["scale_ratio"] >= 1 and math.isfinite(got["excess_kurtosis"])
    assert got["modes"] == 1  # non-centred: one optimum, where the centred one has none
    assert tags.measure(entry, lambda: run) == got  # the same, again


def test_a_model_without_nuts_says_why() -> None:
    got = tags.measure(zoo.get_model("cvae"), lambda: pytest.fail("nuts does not apply"))
    assert got["nuts"]["status"] == "does not apply" and got["nuts"]["reason"]
    assert got["dimension"] is None


MEASURE = """
import json, sys, zoo
from zoo_inference import tags
run = lambda: zoo.run("eight_schools_noncentered", "nuts", seed=0, num_samples=200, warmup=200,
                      progress=False)
print("FIGURES", json.dumps(tags.measure(zoo.get_model("eight_schools_noncentered"), run)))
"""


@pytest.mark.slow  # nuts's own repeat by seed is tests/test_reproducible.py's
def test_the_figures_repeat_by_seed() -> None:
    """Fresh nuts runs, twice in this process and once in another: the same figures, to the
    last digit (nuts and the L-BFGS starts are seeded)."""

    def here() -> dict:
        entry = zoo.get_model("eight_schools_noncentered")
        return tags.measure(
            entry,
            lambda: zoo.run(
                entry.name, "nuts", seed=0, num_samples=200, warmup=200, progress=False
            ),
        )

    first, second = here(), here()
    assert first == second
    out = subprocess.run(
        [sys.executable, "-c", MEASURE], capture_output=True, text=True, check=True, cwd=ROOT
    ).stdout
    line = next(x for x in out.splitlines() if x.startswith("FIGURES "))
    assert json.loads(line.removeprefix("FIGURES ")) == json.loads(json.dumps(first))
