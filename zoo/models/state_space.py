"""The linear-Gaussian state-space model (local level) on the Nile's flow: Kalman filter and
smoother as its reference, statsmodels as the peer."""

from __future__ import annotations

from typing import Any

import numpy as np
import pyro
import pyro.distributions as dist
import torch
from pyro.distributions import constraints
from scipy.stats import norm

import zoo
from zoo_datasets import load_nile
from zoo_inference.algorithms.kalman import LocalLevelMarginal, kalman_local_level, local_level_mle
from zoo_inference.arguments import positive_variance
from zoo_inference.peers.statsmodels import statsmodels_local_level


def _nile(seed: int = 0) -> dict[str, Any]:
    """The Nile's annual flow 1871-1970 (10^8 m^3); the seed is unused (real data)."""
    years, flow = load_nile()
    return {
        "y": torch.tensor(flow, dtype=torch.float),
        "t": torch.tensor(years, dtype=torch.float),
        "m0": 1000.0,
        "P0": 250000.0,
        "scale": 100.0,
    }


@zoo.register(
    data=_nile,
    params=("q", "r"),
    engines=("svi", "nuts"),
    figures={"fit": {"x": "t", "y": "y", "mean": "level", "sd": "level_sd"}},
    engine_options={"svi": {"num_steps": 1500, "lr": 0.05}},
    # the states drawn instead of integrated out: NUTS over (q, r, x), and a full-rank Gaussian
    # guide over them (exact for the states given (q, r), which are jointly Gaussian)
    variants={
        "nuts_states": ("nuts", {}, {"states": "sampled"}),
        "svi_states": ("svi", {"guide": "mvn"}, {"states": "sampled"}),
    },
    seed_ref="002 ch. 31–32 (§32.2); 000 §1.4",
    math=[
        r"q \sim \mathrm{LogNormal}(\log (s/3)^2,\, 2),"
        r" \quad r \sim \mathrm{LogNormal}(\log s^2,\, 2)",
        r"x_0 \sim \mathcal{N}(m_0,\, P_0), \quad x_t = x_{t-1} + w_t,"
        r" \quad w_t \sim \mathcal{N}(0,\, q)",
        r"y_t = x_t + v_t, \quad v_t \sim \mathcal{N}(0,\, r), \quad t = 1, \ldots, T",
    ],
    known={
        "nuts_states": zoo.Known("slow", "102 dimensions, the states drawn"),
        "svi_states": zoo.Known(
            "approximate",
            "a Gaussian over (log q, log r, unit-scale steps) cannot follow how the "
            "steps' posterior scales with q: q is under-estimated (test_sequential)",
        ),
    },
)
def linear_gaussian_ssm(
    y: torch.Tensor,
    t: torch.Tensor,
    m0: float = 0.0,
    P0: float = 1.0,
    scale: float = 1.0,
    states: str = "marginal",
) -> None:
    r"""Local-level model (a random walk seen through noise): the Kalman filter's model.

    Generative story (seed 002 §32.2, L6096–6108, with F = 1, G = 0, X_k = 1)::

        q   ~ LogNormal(log (scale/3)^2, 2)     variance of the level's yearly step
        r   ~ LogNormal(log scale^2, 2)         variance of the measurement noise
        x_0 ~ N(m0, P0)                         level before the first observation
        x_t = x_{t-1} + w_t,   w_t ~ N(0, q)    t = 1..T
        y_t = x_t + v_t,       v_t ~ N(0, r)

          (x_0) ---> (x_1) ---> (x_2) ---> ... ---> (x_T)        q, r
                       |          |                   |
                      [y_1]      [y_2]               [y_T]

    The states are integrated out: y ~ N(m0 1, P0 11' + q min(s, t) + r I), the same number the
    Kalman filter's prediction-error decomposition gives (the ``kalman`` engine runs the
    filter and RTS smoother). The deterministic sites ``level`` and ``level_sd`` are the
    smoothed mean and sd of x_t given each draw of (q, r), the fit the report draws over the
    data. ``t`` is the time axis (years), used only by that figure. The priors are wide on the
    log scale (95% within a factor 50 of their medians) around ``scale``, the size of the
    measurement error in the data's units: 100 (10^8 m^3) for the Nile, whose flow is about 900
    with year-to-year swings of a few hundred, the level moving about a third as much as the
    noise. Ground truth: the posterior of (q, r) by 2-D quadrature, the smoother at each node.

    ``states="sampled"`` (the variants ``nuts_states`` and ``svi_states``) draws the states
    instead, non-centred (the steps on a unit scale, which both NUTS and the Gaussian guide
    need; drawn as x itself, the path's scale of hundreds and its coupling with q defeat both):
    x_0 = m0 + sqrt(P0) e_0, x_t = x_{t-1} + sqrt(q) e_t, e ~ N(0, 1) (sites ``x0_noise``,
    ``step_noise``; ``x`` the path) and y_t ~ N(x_t, r). The posterior of (q, r) is the same;
    ``level`` and ``level_sd`` are still the smoother given (q, r). A full-rank Gaussian guide
    over (log q, log r, e) cannot follow how the steps' posterior scales with q: it
    under-estimates q (about 220-380 against the exact 1743 on the Nile), a bias the report
    shows beside the exact answer.
    """
    if states not in ("marginal", "sampled"):
        raise zoo.ZooError(f"states must be 'marginal' or 'sampled', got {states!r}")
    q = pyro.sample("q", dist.LogNormal(2 * np.log(scale / 3), 2.0))
    r = pyro.sample("r", dist.LogNormal(2 * np.log(scale), 2.0))
    # y ~ N(m0 1, P0 11' + q min(s, t) + r I), in the basis where min(s, t) is diagonal
    marginal = LocalLevelMarginal(q, r, m0, P0, len(y))
    level, level_var = marginal.smoothed(y)  # the RTS smoother given (q, r)
    pyro.deterministic("level", level)
    pyro.deterministic("level_sd", level_var.clamp(min=0.0).sqrt())
    if states == "marginal":
        pyro.sample("y", marginal, obs=y)
        return
    e0 = pyro.sample("x0_noise", dist.Normal(0.0, 1.0))
    steps = pyro.sample("step_noise", dist.Normal(0.0, 1.0).expand([len(y)]).to_event(1))
    walk = q.sqrt()[..., None] * steps.cumsum(-1)
    x = pyro.deterministic("x", m0 + np.sqrt(P0) * e0[..., None] + walk)
    pyro.sample("y", dist.Normal(x, r.sqrt()[..., None]).to_event(1), obs=y)


@linear_gaussian_ssm.set_guide
def _(y: torch.Tensor, scale: float) -> None:
    """Mean-field LogNormal factors for the two variances, started at the data's own scales:
    r at the variance of y's first differences / 2, q at a tenth of that."""
    d = float(torch.diff(y).var()) if len(y) > 2 else float(scale) ** 2
    start = {"q": np.log(max(d / 20, 1e-6)), "r": np.log(max(d / 2, 1e-6))}
    for name in ("q", "r"):
        loc = pyro.param(f"q_{name}_loc", torch.tensor(start[name], dtype=torch.float))
        sd = pyro.param(f"q_{name}_scale", torch.tensor(0.3), constraint=constraints.positive)
        pyro.sample(name, dist.LogNormal(loc, sd))


@linear_gaussian_ssm.reference("kalman")
def _(
    y: torch.Tensor,
    m0: float,
    P0: float,
    *,
    q: float | None = None,
    r: float | None = None,
) -> zoo.Estimate:
    """Kalman filter and RTS smoother (002 §32.2), exact given the variances (default: their
    maximum-likelihood values, found on the filter's log-likelihood)."""
    ys = np.asarray(y, dtype=float)
    if (q is None) != (r is None):
        raise zoo.ZooError("give both q and r (the two noise variances), or neither (MLE)")
    if q is None:
        q, r = local_level_mle(ys, m0, P0)
    q, r = positive_variance("q", q), positive_variance("r", r)
    k = kalman_local_level(ys, q, r, m0, P0)
    return zoo.Estimate(
        {"q": q, "r": r},
        log_evidence=float(k.log_likelihood),
        extras={
            "filtered_mean": k.filtered_mean,
            "filtered_var": k.filtered_var,
            "predicted_mean": k.predicted_mean,
            "predicted_var": k.predicted_var,
            "smoothed_mean": k.smoothed_mean,
            "smoothed_var": k.smoothed_var,
        },
    )


@linear_gaussian_ssm.reference("statsmodels")
def _(
    y: torch.Tensor,
    m0: float,
    P0: float,
    *,
    q: float | None = None,
    r: float | None = None,
    max_iter: int = 1000,
) -> zoo.Estimate:
    """statsmodels' UnobservedComponents local level, the peer of ``kalman``.

    (q, r) by its own maximum likelihood (L-BFGS, tight tolerances; ``max_iter`` iterations at
    most), or its filter and smoother at given ``q`` and ``r``. Same model, same likelihood:
    statsmodels' first state is the level at its first observation, while this model's prior N(m0,
    P0) is on x_0, one step earlier (the first state's variance would be P0 + q, which moves with q
    during the fit). So the series is given to statsmodels behind one missing observation, its first
    state is x_0 with the known initialisation N(m0, P0), and no term is burnt: its ``llf`` is then
    log p(y_1..y_T | q, r) of the model, the ``kalman`` engine's evidence. ``extras``: its filtered,
    predicted and smoothed level (t = 1..T) and whether its optimiser converged."""
    ys = np.asarray(y, dtype=float)
    if (q is None) != (r is None):
        raise zoo.ZooError("give both q and r (the two noise variances), or neither (MLE)")
    if q is not None:
        q, r = positive_variance("q", q), positive_variance("r", r)
    q_hat, r_hat, llf, extras = statsmodels_local_level(ys, m0, P0, q, r, max_iter)
    return zoo.Estimate({"q": q_hat, "r": r_hat}, log_evidence=llf, extras=extras)


@linear_gaussian_ssm.truth
def _(y: torch.Tensor, m0: float, P0: float, scale: float) -> zoo.GroundTruth:
    """The posterior of (q, r) by Gauss–Legendre quadrature on the log variances (a box of
    +-5 around the maximum-likelihood point, 64^2 nodes), the Kalman filter at every node; the
    moments of ``level`` and ``level_sd`` (functions of q and r) over the same grid."""
    ys = np.asarray(y, dtype=float)
    q_hat, r_hat = local_level_mle(ys, m0, P0)
    uq, wq = zoo.gauss_legendre(64, np.log(q_hat) - 5, np.log(q_hat) + 5)
    ur, wr = zoo.gauss_legendre(64, np.log(r_hat) - 5, np.log(r_hat) + 5)
    U, V = np.meshgrid(uq, ur, indexing="ij")
    k = kalman_local_level(ys, np.exp(U), np.exp(V), m0, P0)
    # density of (log q, log r): the LogNormal priors are Normal on the log scale
    log_prior = norm.logpdf(U, 2 * np.log(scale / 3), 2.0) + norm.logpdf(V, 2 * np.log(scale), 2)
    grid = zoo.grid_posterior(
        np.log(wq)[:, None] + np.log(wr)[None, :] + log_prior + k.log_likelihood
    )
    mean, sd = {}, {}
    # the sites level and level_sd are functions of (q, r): their moments over the grid
    values = {
        "q": np.exp(U),
        "r": np.exp(V),
        "level": np.moveaxis(k.smoothed_mean, 0, -1),
        "level_sd": np.moveaxis(np.sqrt(k.smoothed_var), 0, -1),
    }
    for name, value in values.items():
        mean[name], sd[name] = grid.moments(value)
    return zoo.GroundTruth(
        mean={k: v if v.ndim else float(v) for k, v in mean.items()},
        sd={k: v if v.ndim else float(v) for k, v in sd.items()},
        log_evidence=grid.log_z,
        source="exact: Kalman filter on a 64^2 Gauss–Legendre grid over (log q, log r)",
    )


@linear_gaussian_ssm.synthetic
def _(seed: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """100 steps of a local level with q = 0.1, r = 1 from x_0 ~ N(0, 1) (torch's generator,
    seeded by the runner)."""
    T, q, r = 100, 0.1, 1.0
    x = torch.randn(()) + (q**0.5 * torch.randn(T)).cumsum(0)
    y = x + r**0.5 * torch.randn(T)
    data = {"y": y, "t": torch.arange(1.0, T + 1), "m0": 0.0, "P0": 1.0, "scale": 1.0}
    return data, {"q": torch.tensor(q), "r": torch.tensor(r), "level": x}
