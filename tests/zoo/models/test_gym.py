"""The Inference Gym's targets (zoo/models/gym.py): each model's log density at a fixed point
against the Gym's formula written out again in scipy, and at saved points against the Gym's own
log density; the Gym's data and published truth load with the Gym's shapes; NUTS against the
analytic truths; the heavier targets marked slow."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pyro
import pytest
import torch
from pyro import poutine
from scipy import stats
from scipy.special import expit, log1p

import zoo
from tests.paths import DATA
from zoo.models import gym as gym_models
from zoo_datasets import gym
from zoo_inference.results import site_rows

Z = 5.0  # Monte-Carlo z-score allowed


def log_joint(name: str, point: dict[str, Any], data: dict[str, Any] | None = None) -> float:
    """The zoo model's log joint (priors and likelihood) at ``point``, in float64, on ``data``
    (default: the model's own)."""
    entry = zoo.get_model(name)
    data = entry.load_data() if data is None else data
    values = {k: torch.as_tensor(np.asarray(v, dtype=float)) for k, v in point.items()}
    with pyro.validation_enabled(False):
        tr = poutine.trace(poutine.condition(entry.model, data=values)).get_trace(**data)
    return float(tr.log_prob_sum())


def test_banana_density() -> None:
    x0, x1 = 4.0, -1.3
    want = stats.norm.logpdf(x0, 0, 10) + stats.norm.logpdf(x1, 0.03 * (x0**2 - 100), 1)
    assert log_joint("gym_banana", {"x0": x0, "x1": x1}) == pytest.approx(want, rel=1e-6)


def test_funnel_density() -> None:
    z, x = -1.7, np.linspace(-2, 2, 9)
    want = stats.norm.logpdf(z, 0, 3) + stats.norm.logpdf(x, 0, np.exp(z / 2)).sum()
    assert log_joint("gym_neals_funnel", {"z": z, "x": x}) == pytest.approx(want, rel=1e-6)


def gym_icg_covariance() -> np.ndarray:
    """The Gym's recipe (IllConditionedGaussian, ndims 100, shape 0.5, seed 10), written again."""
    rng = np.random.RandomState(10)
    lam = 1.0 / np.sort(rng.gamma(shape=0.5, scale=1.0, size=100))
    q, r = np.linalg.qr(rng.randn(100, 100))
    q = q * np.sign(np.diag(r))
    return q @ np.diag(lam) @ q.T


def test_ill_conditioned_gaussian_density_and_truth() -> None:
    cov = gym_icg_covariance()
    x = np.random.default_rng(3).standard_normal(100)
    want = stats.multivariate_normal(np.zeros(100), cov).logpdf(x)
    got = log_joint("gym_ill_conditioned_gaussian", {"x": x})
    assert got == pytest.approx(want, rel=1e-4)
    truth = zoo.get_model("gym_ill_conditioned_gaussian").ground_truth()
    np.testing.assert_allclose(truth.sd["x"], np.sqrt(np.diag(cov)), rtol=1e-10)
    eig = np.linalg.eigvalsh(cov)
    assert eig.max() / eig.min() > 1e4  # the Gym's "ill-conditioned": about 1.3e5


def test_brownian_motion_density() -> None:
    y = gym.brownian_motion_observations()
    assert y.shape == (30,) and np.isnan(y[10:20]).all() and not np.isnan(y[:10]).any()
    inn, obs = 0.15, 0.2
    locs = np.nan_to_num(y, nan=-0.5) + 0.05
    lognormal = stats.lognorm(s=2.0, scale=1.0)
    seen = ~np.isnan(y)
    want = (
        lognormal.logpdf(inn)
        + lognormal.logpdf(obs)
        + stats.norm.logpdf(locs[0], 0, inn)
        + stats.norm.logpdf(np.diff(locs), 0, inn).sum()
        + stats.norm.logpdf(y[seen], locs[seen], obs).sum()
    )
    point = {"innovation_noise_scale": inn, "observation_noise_scale": obs, "locs": locs}
    assert log_joint("gym_brownian_motion", point) == pytest.approx(want, rel=1e-6)


def test_item_response_theory_density() -> None:
    student, question, correct = gym.item_response_theory()
    assert student.shape == question.shape == correct.shape == (30012,)
    assert student.max() == 399 and question.max() == 99
    assert len(set(zip(student.tolist(), question.tolist(), strict=True))) == 30012  # no repeats
    rng = np.random.default_rng(4)
    mean, ability, difficulty = 0.6, rng.normal(size=400), rng.normal(size=100)
    logit = mean + ability[student] - difficulty[question]
    want = (
        stats.norm.logpdf(mean, 0.75, 1)
        + stats.norm.logpdf(ability).sum()
        + stats.norm.logpdf(difficulty).sum()
        + (correct * logit - log1p(np.exp(logit))).sum()
    )
    point = {
        "mean_student_ability": mean,
        "centered_student_ability": ability,
        "question_difficulty": difficulty,
    }
    got = log_joint("gym_item_response_theory", point)
    assert got == pytest.approx(want, rel=1e-6)
    assert np.isfinite(expit(logit)).all()


def test_persistence_prior_expands_for_a_batched_replay() -> None:
    """The persistence prior broadcasts over chains (a batched replay expands every site):
    the same density at each point, its support (-1, 1) kept."""
    prior = gym_models._Persistence()
    wide = prior.expand(torch.Size([3]))
    assert wide.batch_shape == (3,) and wide.support is prior.support
    phi = torch.tensor([-0.5, 0.2, 0.95])
    want = stats.beta.logpdf((phi.numpy() + 1) / 2, 20, 1.5) - np.log(2.0)
    np.testing.assert_allclose(wide.log_prob(phi).numpy(), want, rtol=1e-5)  # float32
    draws = wide.sample(torch.Size([500]))
    assert draws.shape == (500, 3) and bool(((draws > -1) & (draws < 1)).all())


@pytest.mark.parametrize("name", [m for m in zoo.list_models() if m.startswith("gym_")])
def test_replay_is_vectorised(name: str) -> None:
    """Every target broadcasts over draws: the vectorised replay of three prior draws (the one
    reports and LOO use) gives the per-draw replay's log joints and pointwise log-likelihoods."""
    from zoo_inference.replay import _replay_each, _shapes, replay

    entry = zoo.get_model(name)
    data, s = entry.load_data(), entry.structure
    pyro.set_rng_seed(0)
    traces = [poutine.trace(entry.model).get_trace(**data) for _ in range(3)]
    draws = {k: torch.stack([t.nodes[k]["value"] for t in traces]) for k in s.latent}
    fast = replay(entry.model, data, draws, s)
    slow = _replay_each(entry.model, data, draws, s, _shapes(entry.model, data, s))
    assert fast.path == "vectorised"
    np.testing.assert_allclose(fast.log_joint, slow.log_joint, rtol=1e-5)
    for k in s.observed:
        np.testing.assert_allclose(fast.log_lik[k], slow.log_lik[k], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name", ["gym_stochastic_volatility", "gym_stochastic_volatility_small"])
def test_stochastic_volatility_density(name: str) -> None:
    returns = zoo.get_model(name).load_data()["returns"].numpy()
    assert returns.shape == ((2516,) if name == "gym_stochastic_volatility" else (100,))
    assert abs(returns.mean()) < 1e-9  # centred, as the Gym centres them
    phi, mu, sigma = 0.9, 3.0, 0.4
    h = np.log(returns**2 + 1.0)
    want = (
        stats.beta.logpdf((phi + 1) / 2, 20, 1.5)
        - np.log(2.0)
        + stats.cauchy.logpdf(mu, 0, 5)
        + stats.halfcauchy.logpdf(sigma, scale=2)
        + stats.norm.logpdf(h[0], mu, sigma / np.sqrt(1 - phi**2))
        + stats.norm.logpdf(h[1:], mu + phi * (h[:-1] - mu), sigma).sum()
        + stats.norm.logpdf(returns, 0, np.exp(h / 2)).sum()
    )
    point = {
        "persistence_of_volatility": phi,
        "mean_log_volatility": mu,
        "white_noise_shock_scale": sigma,
        "log_volatility": h,
    }
    assert log_joint(name, point) == pytest.approx(want, rel=1e-6)


def test_radon_density_and_data() -> None:
    """The Gym's radon (Minnesota): 919 houses, 85 counties in sorted name order, the
    county's mean floor as covariate; the log joint against the Gym's formula."""
    from zoo_datasets import load_radon_minnesota

    df = load_radon_minnesota()
    assert df.shape == (919, 4) and df["county"].nunique() == 85
    assert set(df["floor"]) == {0, 1} and (df["floor"] == 0).sum() == 766  # mostly basements
    data = zoo.get_model("gym_radon").load_data()
    names = sorted(df["county"].unique())
    county = np.array([names.index(c) for c in df["county"]])
    np.testing.assert_array_equal(data["county"].numpy(), county)
    floor = df["floor"].to_numpy(dtype=float)
    xbar = np.array([floor[county == c].mean() for c in range(85)])[county]
    np.testing.assert_allclose(data["floor_by_county"].numpy(), xbar)
    rng = np.random.default_rng(5)
    m, s, effect = 1.4, 0.3, rng.normal(1.4, 0.3, 85)
    w, sigma = np.array([0.7, -0.7, 0.4]), 0.76
    loc = w[0] * df["log_uranium"].to_numpy() + w[1] * floor + w[2] * xbar + effect[county]
    uniform = stats.uniform(0, 100)
    want = (
        stats.norm.logpdf(m, 0, 1)
        + uniform.logpdf(s)
        + stats.norm.logpdf(effect, m, s).sum()
        + stats.norm.logpdf(w).sum()
        + uniform.logpdf(sigma)
        + stats.norm.logpdf(df["log_radon"].to_numpy(), loc, sigma).sum()
    )
    point = {
        "county_effect_mean": m,
        "county_effect_scale": s,
        "county_effect": effect,
        "weight": w,
        "log_radon_scale": sigma,
    }
    assert log_joint("gym_radon", point) == pytest.approx(want, rel=1e-6)


def test_german_credit_data_and_density() -> None:
    """UCI's numeric German credit as the Gym prepares it: 1000 applicants, 24 integer
    attributes standardised (population sd), 300 bad risks labelled 1; the vendored file's first
    row is UCI's; the log joint against the Gym's formula (intercept last)."""
    from zoo_datasets import load_german_credit_numeric

    df = load_german_credit_numeric()
    assert df.shape == (1000, 25) and list(df.columns[[0, -2, -1]]) == ["a1", "a24", "label"]
    raw = df.to_numpy()
    assert raw.dtype.kind == "i" and (raw[:, -1] == 2).sum() == 300
    # german.data's first applicant: checking account A11, 6 months, history A34, 1169 DM
    # (in hundreds), aged 67 (column 10), a good risk
    np.testing.assert_array_equal(raw[0, [0, 1, 2, 3, 9, 24]], [1, 6, 4, 12, 67, 1])
    data = zoo.get_model("gym_german_credit").load_data()
    x, y = data["features"].numpy(), data["labels"].numpy()
    np.testing.assert_allclose(x.mean(0), 0, atol=1e-12)
    np.testing.assert_allclose(x.std(0), 1, rtol=1e-12)
    np.testing.assert_array_equal(y, raw[:, -1] - 1)
    w = np.random.default_rng(6).normal(0, 0.3, 25)
    logit = x @ w[:24] + w[24]
    want = stats.norm.logpdf(w).sum() + (y * logit - np.logaddexp(0, logit)).sum()
    assert log_joint("gym_german_credit", {"weights": w}) == pytest.approx(want, rel=1e-9)


def test_german_credit_sparse_density() -> None:
    """The sparse logistic regression on the same data: Gamma(0.5, rate 0.5) global and local
    scales, N(0, 1) unscaled weights, each weight their product (intercept last)."""
    data = zoo.get_model("gym_german_credit_sparse").load_data()
    x, y = data["features"].numpy(), data["labels"].numpy()
    rng = np.random.default_rng(7)
    tau, lam, u = 0.35, rng.gamma(2.0, 0.5, 25), rng.normal(0, 1, 25)
    w = u * lam * tau
    logit = x @ w[:24] + w[24]
    gamma = stats.gamma(a=0.5, scale=2.0)  # rate 0.5
    want = (
        gamma.logpdf(tau)
        + gamma.logpdf(lam).sum()
        + stats.norm.logpdf(u).sum()
        + (y * logit - np.logaddexp(0, logit)).sum()
    )
    point = {"global_scale": tau, "local_scales": lam, "unscaled_weights": u}
    # rel 1e-8: the Gamma's lgamma(0.5) normaliser is float32 (its parameters' default dtype)
    assert log_joint("gym_german_credit_sparse", point) == pytest.approx(want, rel=1e-8)


GYM_LOG_DENSITIES = DATA / "gym_log_densities.json"


@pytest.mark.parametrize("name", [m for m in zoo.list_models() if m.startswith("gym_")])
def test_log_density_is_the_gyms(name: str) -> None:
    """The zoo's log joint equals the Gym's own unnormalized_log_prob at the points saved by
    benchmarks/gym_log_densities.py (TFP's NumPy substrate; the additive constant is zero)."""
    saved = json.loads(GYM_LOG_DENSITIES.read_text())["targets"][name]
    data = None
    if name == "gym_ill_conditioned_gaussian":  # the Gym rounds its covariance to float32
        cov32 = gym_models.icg_covariance().astype(np.float32).astype(float)
        data = {"scale_tril": torch.as_tensor(np.linalg.cholesky(cov32))}
    assert len(saved["points"]) >= 2
    diffs = []
    for point, want in zip(saved["points"], saved["gym_log_prob"], strict=True):
        got = log_joint(name, point, data)
        assert got == pytest.approx(want, rel=1e-7, abs=FLOAT32_CONSTANTS.get(name, 1e-6))
        diffs.append(got - want)
    if name in FLOAT32_CONSTANTS:  # a constant offset only: the formula is the Gym's
        assert np.ptp(diffs) < 1e-6


# The Gym's non-centred stochastic volatility takes its N(0, 1) innovations' log normaliser
# -log(2 pi) / 2 in float32 (1.56e-8 off) and its persistence prior's Beta normaliser too: a
# constant -3.93e-5 - 4.3e-6 on the 2516 log returns, -1.56e-6 - 4.3e-6 on the last 100
# (measured -4.37e-5 and -5.84e-6), however the points vary.
FLOAT32_CONSTANTS = {
    "gym_stochastic_volatility_log": 1e-4,
    "gym_stochastic_volatility_log_small": 1e-5,
}


def test_sp500_returns_are_the_gyms() -> None:
    """The Gym's sp500_returns: closing prices differenced, the last n centred on their mean;
    its sp500_log_returns the same of the log prices."""
    from inference_gym.internal.datasets.sp500_closing_prices import CLOSING_PRICES

    r = np.diff(CLOSING_PRICES)[-100:]
    np.testing.assert_allclose(gym.sp500_returns(100), r - r.mean())
    log_r = np.diff(np.log(CLOSING_PRICES))
    np.testing.assert_allclose(gym.sp500_returns(log=True), log_r - log_r.mean())
    assert gym.sp500_returns(log=True).shape == (2516,) and abs(log_r).max() < 0.13


def test_lorenz_and_cox_process_data() -> None:
    """The Lorenz bridge's 30 convections, the middle ten missing; the Cox process's counts on
    a shuffled 10 x 10 unit grid (the order is checked by the Gym's own log density, which
    reads its data, at the saved points)."""
    d = gym.convection_lorenz_bridge()
    y = d.observed_values
    assert y.shape == (30,) and np.isnan(y[10:20]).all() and not np.isnan(y[:10]).any()
    assert (d.innovation_scale, d.observation_scale, d.step_size) == (0.1, 1.0, 0.02)
    locations, extents, counts = gym.log_gaussian_cox_process()
    assert locations.shape == (100, 2) and (extents == 1).all() and (counts >= 1).all()
    grid = sorted(map(tuple, locations.tolist()))
    assert grid == [(float(i), float(j)) for i in range(10) for j in range(10)]
    assert sorted(map(tuple, locations[:10].tolist())) != grid[:10]  # shuffled


def test_ar1_filter_is_the_recursion() -> None:
    """The non-centred stochastic volatility's FFT filter against its recursion, over a batch
    of persistences (one negative, one zero)."""
    g = torch.Generator().manual_seed(0)
    noise = torch.randn(3, 700, generator=g, dtype=torch.float64)
    phi = torch.tensor([0.98, -0.5, 0.0], dtype=torch.float64)
    x = gym_models.ar1_filter(noise, phi)
    want = torch.empty_like(noise)
    want[:, 0] = noise[:, 0] / torch.sqrt(1 - phi**2)
    for t in range(1, 700):
        want[:, t] = phi * want[:, t - 1] + noise[:, t]
    torch.testing.assert_close(x, want, rtol=0, atol=1e-12)


def test_lorenz_chain_draws_its_own_law() -> None:
    """LorenzChain.sample follows its log_prob: a draw's standardised Euler-Maruyama residuals
    are N(0, 1) (the only sampling path: prior predictive, simulate)."""
    torch.manual_seed(0)
    d = gym_models.LorenzChain(torch.tensor([0.1, 1.0], dtype=torch.float64), 0.02, 30)
    x = d.sample(torch.Size([400]))
    assert x.shape == (400, 2, 30, 3) and d.log_prob(x).shape == (400, 2)
    scale = np.sqrt(0.02) * torch.tensor([0.1, 1.0], dtype=torch.float64)[:, None, None]
    resid = ((x[..., 1:, :] - d._mean_next(x[..., :-1, :])) / scale).numpy()
    n = resid.size
    assert abs(resid.mean()) < Z / np.sqrt(n) and abs(resid.var() - 1) < Z * np.sqrt(2 / n)
    assert abs(x[..., 0, :].mean()) < Z / np.sqrt(x[..., 0, :].numel())


@pytest.mark.parametrize(
    ("name", "bad", "match"),
    [
        ("gym_brownian_motion_known_scales", {"observation_noise_scale": None}, "both noise"),
        ("gym_lorenz_bridge", {"innovation_scale": None}, "both noise"),
        ("gym_radon_halfnormal", {"scale_prior": "cauchy"}, "scale_prior must be"),
        ("gym_german_credit_probit", {"link": "cloglog"}, "link must be"),
    ],
)
def test_model_flags_are_checked(name: str, bad: dict[str, Any], match: str) -> None:
    """The shared model functions' flags: one scale known and one not, or a prior or link
    they do not know, is a clear error."""
    entry = zoo.get_model(name)
    with pytest.raises(ValueError, match=match):
        entry.model(**{**entry.load_data(), **bad})


SV_SHAPES = {
    "persistence_of_volatility": (),
    "mean_log_volatility": (),
    "white_noise_shock_scale": (),
}
RADON_SHAPES = {
    "county_effect_mean": (),
    "county_effect_scale": (),
    "county_effect": (85,),
    "weight": (3,),
    "log_radon_scale": (),
}
PUBLISHED = {
    "gym_brownian_motion_known_scales": {"locs": (30,)},
    "gym_lorenz_bridge": {"latents": (30, 3)},
    "gym_lorenz_bridge_unknown_scales": {
        "innovation_scale": (),
        "observation_scale": (),
        "latents": (30, 3),
    },
    "gym_eight_schools": {"avg_effect": (), "log_stddev": (), "school_effects": (8,)},
    "gym_log_gaussian_cox_process": {"amplitude": (), "length_scale": (), "log_intensity": (100,)},
    "gym_german_credit_probit": {"weights": (25,)},
    "gym_radon_halfnormal": RADON_SHAPES,
    "gym_stochastic_volatility_log": {**SV_SHAPES, "log_volatility": (2516,)},
    "gym_stochastic_volatility_log_small": {**SV_SHAPES, "log_volatility": (100,)},
    "gym_german_credit": {"weights": (25,)},
    "gym_german_credit_sparse": {
        "global_scale": (),
        "local_scales": (25,),
        "unscaled_weights": (25,),
    },
    "gym_radon": {
        "county_effect_mean": (),
        "county_effect_scale": (),
        "county_effect": (85,),
        "weight": (3,),
        "log_radon_scale": (),
    },
    "gym_item_response_theory": {
        "mean_student_ability": (),
        "centered_student_ability": (400,),
        "question_difficulty": (100,),
    },
    "gym_stochastic_volatility": {
        "persistence_of_volatility": (),
        "mean_log_volatility": (),
        "white_noise_shock_scale": (),
        "log_volatility": (2516,),
    },
    "gym_stochastic_volatility_small": {
        "persistence_of_volatility": (),
        "mean_log_volatility": (),
        "white_noise_shock_scale": (),
        "log_volatility": (100,),
    },
}


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_published_truth_shapes(name: str) -> None:
    entry = zoo.get_model(name)
    truth = entry.ground_truth()
    shapes = PUBLISHED[name]
    assert {k: v.shape for k, v in truth.mean.items()} == shapes
    assert {k: v.shape for k, v in truth.mean_se.items()} == shapes
    # every latent site has a truth, but the non-centred innovations (their log volatilities,
    # a deterministic site, have it)
    latent = {k: v for k, v in entry.structure.shapes.items() if k != "std_log_volatility"}
    assert latent == {k: torch.Size(s) for k, s in shapes.items()}
    for site in shapes:
        assert (truth.sd[site] > 0).all() and (truth.mean_se[site] > 0).all()
        assert (truth.mean_se[site] < 0.05 * truth.sd[site]).all()  # long reference runs


def test_truth_only_on_the_gyms_data() -> None:
    """Another data set has no published truth: the truth function says None (Brownian
    motion's exact truth aside: below)."""
    for name in ("gym_stochastic_volatility_small", "gym_stochastic_volatility_log_small"):
        entry = zoo.get_model(name)
        data = entry.load_data()
        assert entry.ground_truth({**data, "returns": data["returns"] * 2}) is None
    doubled = {  # one data array of each target twice the Gym's
        "gym_brownian_motion_known_scales": "observed_locs",
        "gym_lorenz_bridge": "observed_values",
        "gym_lorenz_bridge_unknown_scales": "observed_values",
        "gym_eight_schools": "treatment_effects",
        "gym_log_gaussian_cox_process": "counts",
        "gym_radon_halfnormal": "log_radon",
    }
    for name, key in doubled.items():
        entry = zoo.get_model(name)
        data = entry.load_data()
        assert entry.ground_truth() is not None
        assert entry.ground_truth({**data, key: data[key] * 2}) is None, name
    known = zoo.get_model("gym_brownian_motion_known_scales")
    assert known.ground_truth({**known.load_data(), "innovation_noise_scale": 0.2}) is None
    for name in ("gym_german_credit", "gym_german_credit_sparse", "gym_german_credit_probit"):
        german = zoo.get_model(name)
        data = german.load_data()
        assert german.ground_truth({**data, "labels": 1 - data["labels"]}) is None
        assert (
            german.ground_truth(
                {**data, "features": data["features"][:500], "labels": data["labels"][:500]}
            )
            is None
        )


BM = "gym_brownian_motion"
BM_SCALES = ("innovation_noise_scale", "observation_noise_scale")


def test_brownian_smoother_is_the_gaussian_conditional() -> None:
    """The Kalman smoother against the dense Gaussian algebra: log p(y | scales) and the locs'
    conditional means and variances, at one pair of scales and broadcast over a pair."""
    y = gym.brownian_motion_observations()
    seen = ~np.isnan(y)
    inn, obs = 0.13, 0.09
    steps = np.arange(30)
    prior = inn**2 * (np.minimum.outer(steps, steps) + 1)  # a random walk from locs_{-1} = 0
    cov_y = prior[np.ix_(seen, seen)] + obs**2 * np.eye(seen.sum())
    gain = prior[:, seen] @ np.linalg.inv(cov_y)
    loglik, mean, var = gym_models.brownian_motion_smoother(y, inn, obs)
    want = stats.multivariate_normal(np.zeros(seen.sum()), cov_y).logpdf(y[seen])
    assert float(loglik) == pytest.approx(want, rel=1e-10)
    np.testing.assert_allclose(mean, gain @ y[seen], rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(var, np.diag(prior - gain @ prior[seen]), rtol=1e-9)
    loglik2, mean2, _ = gym_models.brownian_motion_smoother(y, [inn, 0.2], [obs, obs])
    assert loglik2.shape == (2,) and mean2.shape == (30, 2)
    np.testing.assert_allclose(mean2[:, 0], mean, rtol=1e-12)


def test_brownian_smoother_matches_the_gyms_known_scale_truth() -> None:
    """With the scales known (0.1, 0.15: the Gym's BrownianMotionMissingMiddleObservations)
    the smoother gives the Gym's published locs: its Stan run checks the data and the smoother."""
    from inference_gym.targets.ground_truth import brownian_motion_missing_middle_observations as g

    _, mean, var = gym_models.brownian_motion_smoother(
        gym.brownian_motion_observations(), 0.1, 0.15
    )
    assert (np.abs(mean - g.IDENTITY_MEAN) < Z * g.IDENTITY_MEAN_STANDARD_ERROR).all()
    np.testing.assert_allclose(np.sqrt(var), g.IDENTITY_STANDARD_DEVIATION, rtol=0.01)


def test_brownian_exact_truth() -> None:
    """The exact truth: converged in the grid (201 against 401 points per log-scale), on any
    data, a clear error where the posterior leaves the grid, and the scales' exact densities."""
    y = gym.brownian_motion_observations()
    coarse, fine = (gym_models.brownian_motion_moments(y, n) for n in (201, 401))
    for site in (*BM_SCALES, "locs"):
        np.testing.assert_allclose(coarse[site], fine[site], rtol=1e-6)
    truth = zoo.get_model(BM).ground_truth()
    assert {k: v.shape for k, v in truth.mean.items()} == {
        "innovation_noise_scale": (),
        "observation_noise_scale": (),
        "locs": (30,),
    }
    assert not truth.mean_se and truth.source.startswith("exact")
    np.testing.assert_allclose(truth.mean["locs"], fine["locs"][0])
    doubled = zoo.get_model(BM).ground_truth({"observed_locs": torch.as_tensor(2 * y)})
    for site in BM_SCALES:  # twice the data, about twice the scales
        assert 1.5 < doubled.mean[site] / truth.mean[site] < 2.5
    with pytest.raises(ValueError, match="edge of the log-scale grid"):
        gym_models.brownian_motion_moments(np.zeros(30))
    # the scales' exact densities: their moments again, integrated over log x, where the
    # densities are smooth and vanish at both ends (the trapezoid rule converges fast there)
    u = np.linspace(np.log(1e-6), np.log(3.0), 1001)
    x = np.exp(u)
    for site in BM_SCALES:
        d = truth.density[site](x)
        assert np.trapezoid(x * d, u) == pytest.approx(1.0, abs=1e-9)
        assert np.trapezoid(x * x * d, u) == pytest.approx(truth.mean[site], rel=1e-9)
    with pytest.raises(ValueError, match="only for"):
        gym_models.brownian_motion_scale_density(y, "locs")


def test_gyms_published_brownian_truth_is_off() -> None:
    """Why the zoo's truth is not the Gym's: the Gym's published scales (a Stan run, 20000
    draws) miss the exact posterior means by 7 and 18 of their standard errors, while the MAMS
    authors' own 2-million-draw NUTS expectations (reubenharry/sampler-benchmarks@7a1dc54,
    vector_brownian_motion_..._expectations.pkl: E[x], E[x²]) agree with it to 0.4%."""
    truth = zoo.get_model(BM).ground_truth()
    target = "brownian_motion_unknown_scales_missing_middle_observations"
    mams = {
        "innovation_noise_scale": (0.11531, 0.014914),
        "observation_noise_scale": (0.11303, 0.014147),
    }
    for site in BM_SCALES:
        published = gym.ground_truth(target, site)
        mean, sd = truth.mean[site], truth.sd[site]
        assert abs(published.mean - mean) > 5 * published.mean_se
        assert mams[site][0] == pytest.approx(mean, rel=0.004)
        assert mams[site][1] == pytest.approx(mean**2 + sd**2, rel=0.004)


def test_chain_distribution_draws_its_own_law() -> None:
    """GaussianChain.sample follows its log_prob: a long stationary AR(1) draw's lag-1
    autocorrelation and variance (the only sampling path: prior predictive, simulate)."""
    torch.manual_seed(0)
    d = gym_models.GaussianChain(1.0, 0.8, 0.5 / 0.6, 0.5, 20000)
    x = d.sample().double().numpy()
    n = x.size
    assert abs(x.mean() - 1.0) < Z * (0.5 / 0.2) / np.sqrt(n)  # long-run sd sigma / (1 - phi)
    c = np.corrcoef(x[:-1], x[1:])[0, 1]
    assert abs(c - 0.8) < Z * np.sqrt((1 - 0.8**2) / n)
    assert abs(x.var() / (0.5**2 / (1 - 0.64)) - 1) < Z * np.sqrt(2 * (1 + 0.64) / (1 - 0.64) / n)


def check_against_truth(name: str, run: zoo.Run, sd_too: bool = True) -> None:
    """Each row's mean within Z combined Monte-Carlo errors: the run's (the truth's sd over the
    root of its bulk ESS) and, for a published truth, the reference run's own (``mean_se``);
    the sd within Z errors of an sd estimate: the larger of the one from the bulk ESS
    (kurtosis from the draws) and ArviZ's ``mcse_sd``, whose ESS is the squared draws' (lower
    than the bulk ESS of a sampler whose draws are anticorrelated, as MAMS's are)."""
    assert run.ok, run.error
    truth = zoo.get_model(name).ground_truth()
    post = run.idata.posterior
    truth_se = {}
    for site, se in truth.mean_se.items():
        truth_se.update(site_rows(site, se))
    for row, (t_mean, t_sd) in truth.rows().items():
        site, _, idx = row.partition("[")
        s = run.summary.loc[row]
        ess = max(float(s["ess_bulk"]), 10.0)
        err = np.hypot(t_sd / np.sqrt(ess), truth_se.get(row, 0.0))
        assert abs(s["mean"] - t_mean) < Z * err, (row, s["mean"], t_mean, err)
        if not sd_too:
            continue
        draws = post[site].values.reshape(-1, *post[site].shape[2:])
        if idx:
            draws = draws[(slice(None), *(int(i) for i in idx.rstrip("]").split(",")))]
        kurt = stats.kurtosis(draws, fisher=False)
        tol = Z * max(t_sd * np.sqrt(max(kurt - 1, 1.0) / (4 * ess)), float(s["mcse_sd"]))
        assert abs(s["sd"] - t_sd) < tol, (row, s["sd"], t_sd, tol)


@pytest.mark.slow  # NUTS's compilation and warmup on a hard target
@pytest.mark.parametrize("name", ["gym_banana", "gym_neals_funnel", "gym_brownian_motion"])
def test_nuts_means_on_analytic_truth(name: str) -> None:
    """Means only: at smoke size NUTS under-reaches the banana's arms and the funnel's neck,
    so their sds come out low (x1's 3.6 against 4.36 in the quick report), a shortfall the
    report shows rather than a test's tolerance hides."""
    run = zoo.run(name, "nuts", seed=0, num_chains=2, warmup=200, num_samples=300)
    check_against_truth(name, run, sd_too=False)


@pytest.mark.slow
def test_nuts_dense_on_ill_conditioned_gaussian() -> None:
    """A dense mass matrix undoes the rotation: every coordinate's mean and sd on the truth."""
    name = "gym_ill_conditioned_gaussian"
    run = zoo.run(name, "nuts", seed=0, num_chains=2, warmup=500, num_samples=300, dense_mass=True)
    check_against_truth(name, run)


@pytest.mark.slow  # 30-40 s each on two busy cores
@pytest.mark.parametrize("name", ["gym_eight_schools", "gym_german_credit_probit"])
def test_nuts_on_published_truth(name: str) -> None:
    """NUTS against the Gym's published truth on two of its targets: the Gym's eight schools
    (centred, a log-normal scale: no divergences) and the probit German credit. Every mean
    within Z combined errors (the run's and the reference's ``mean_se``), every sd within Z
    errors of an sd estimate."""
    run = zoo.run(name, "nuts", seed=0, num_chains=4, warmup=500, num_samples=500)
    assert run.diagnostics["divergences"] == 0 and run.diagnostics["max_r_hat"] < 1.05
    check_against_truth(name, run)


@pytest.mark.parametrize("seed", [0, 1])
def test_mams_on_german_credit_published_truth(seed: int) -> None:
    """The Gym's published truth for German credit (its reference runs) at check size: every
    coefficient's mean and sd within Monte-Carlo error of a short MAMS run (2 s, bulk ESS
    about 400)."""
    name = "gym_german_credit"
    run = zoo.run(name, "mams", seed=seed, num_chains=4, warmup=200, num_samples=200)
    check_against_truth(name, run)


@pytest.mark.slow
@pytest.mark.parametrize("engine", ["nuts", "chees", "mams"])
def test_german_credit_published_truth_long(engine: str) -> None:
    """Longer runs of the gradient samplers on German credit: means within Z errors of runs
    with ESS in the thousands, sds within Z errors of an sd estimate."""
    name = "gym_german_credit"
    run = zoo.run(name, engine, seed=1, num_chains=4, warmup=500, num_samples=1000)
    assert run.diagnostics["min_ess_bulk"] > 1000
    check_against_truth(name, run)


def test_mams_on_sparse_german_credit_published_truth() -> None:
    """The Gym's published truth for the sparse German credit at check size: every scale's and
    unscaled weight's mean and sd within Monte-Carlo error of a short MAMS run (the tolerance
    from each run's own ESS and mcse_sd: the heavy-tailed local scales mix slowly)."""
    name = "gym_german_credit_sparse"
    run = zoo.run(name, "mams", seed=0, num_chains=4, warmup=500, num_samples=600)
    check_against_truth(name, run)


@pytest.mark.slow
@pytest.mark.parametrize("engine", ["nuts", "mams"])
def test_sparse_german_credit_published_truth_long(engine: str) -> None:
    """Longer runs on the sparse German credit: every mean within Z errors, every sd within Z
    errors of an sd estimate, with ESS over 100 on the heavy-tailed local scales."""
    name = "gym_german_credit_sparse"
    run = zoo.run(name, engine, seed=1, num_chains=4, warmup=500, num_samples=1000)
    assert run.diagnostics["min_ess_bulk"] > 100 and run.diagnostics["max_r_hat"] < 1.05
    check_against_truth(name, run)


def test_opt_in_targets_run_only_when_named() -> None:
    """The Gym's targets are opt-in: a whole-zoo report plans none of their cells, a report that
    names one runs it, and a model registered without opt_in stays in the whole-zoo report."""
    from zoo.sweep import plan_report

    gym_names = {n for n in zoo.list_models() if n.startswith("gym_")}
    assert len(gym_names) == 19 and all(zoo.get_model(n).opt_in for n in gym_names)
    whole = {c.model for c in plan_report(profile="smoke")}
    assert not whole & gym_names and "beta_bernoulli" in whole
    named = plan_report(["gym_banana"], profile="smoke")
    assert {c.model for c in named} == {"gym_banana"} and {c.engine for c in named} >= {"nuts"}
    assert not zoo.get_model("beta_bernoulli").opt_in
