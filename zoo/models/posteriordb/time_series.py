"""Time-series models in posteriordb (Stan's stat_comp_benchmarks): an AR(K), an ARMA(1, 1) and
a GARCH(1, 1) on simulated series."""

from __future__ import annotations

from typing import Any

import pyro
import pyro.distributions as dist
import torch
from pyro.distributions import constraints

from zoo.models.posteriordb.base import flat, posterior
from zoo_datasets.posteriordb import posteriordb_data


def lagged(y: torch.Tensor, K: int) -> torch.Tensor:
    """The lags of ``y`` for the steps t = K+1..T (1-based): ``out[t - K - 1, k - 1] = y[t - k]``,
    shaped (T - K, K)."""
    return y.unfold(0, K, 1)[:-1].flip(-1)


def first_order_recursion(c: torch.Tensor, a: torch.Tensor) -> torch.Tensor:
    """x_1 = c_1, x_t = c_t + a x_{t-1} (t = 2..T), the loop of a Stan program solved at once:
    x solves (I - a S) x = c, S the T x T shift (ones below the diagonal), a unit-triangular
    system whose forward substitution is the loop itself. ``a`` shaped (..., 1) broadcasts
    against ``c`` (..., T), as a batch of draws lays parameters out."""
    T = c.shape[-1]
    shift = torch.diag(c.new_ones(T - 1), -1)
    L = torch.eye(T, dtype=c.dtype) - a[..., None] * shift
    return torch.linalg.solve_triangular(L, c[..., None], upper=False, unitriangular=True)[..., 0]


def ar_k(y: torch.Tensor, K: int) -> None:
    """Stan's AR(K) benchmark (arK.stan)::

        alpha ~ Normal(0, 10),  beta_k ~ Normal(0, 10) for k = 1..K
        sigma ~ Cauchy(0, 2.5), sigma > 0
        mu_t = alpha + sum_k beta_k y_{t-k}
        y_t ~ Normal(mu_t, sigma),  t = K+1..T

            (alpha, beta, sigma) ----> [y_t] <---- y_{t-1} .. y_{t-K}    t = K+1..T

    The first K values only condition: they have no term of their own.
    """
    alpha = pyro.sample("alpha", dist.Normal(y.new_tensor(0.0), 10.0))
    beta = pyro.sample("beta", dist.Normal(y.new_zeros(K), 10.0).to_event(1))
    sigma = pyro.sample("sigma", dist.HalfCauchy(y.new_tensor(2.5)))
    # a broadcasting dot product, so that a batch of betas (..., 1, K) gives (..., T - K)
    mu = alpha + torch.einsum("...k,...k->...", lagged(y, K), beta)
    with pyro.plate("t", y.shape[0] - K):
        pyro.sample("y", dist.Normal(mu, sigma), obs=y[K:])


def arma11(y: torch.Tensor) -> None:
    """Stan's ARMA(1, 1) benchmark (arma11.stan), the error before the first step taken as 0::

        mu ~ Normal(0, 10),  phi ~ Normal(0, 2),  theta ~ Normal(0, 2)
        sigma ~ Cauchy(0, 2.5), sigma > 0
        nu_1 = mu + phi mu,                        err_1 = y_1 - nu_1
        nu_t = mu + phi y_{t-1} + theta err_{t-1}, err_t = y_t - nu_t,   t = 2..T
        err_t ~ Normal(0, sigma),  t = 1..T

            (mu, phi, theta, sigma) ----> [y_t] <---- y_{t-1}, err_{t-1}

    With r_t = y_t - mu - phi y_{t-1} (y_0 = mu), the loop is err_t = r_t - theta err_{t-1}.
    """
    mu = pyro.sample("mu", dist.Normal(y.new_tensor(0.0), 10.0))
    phi = pyro.sample("phi", dist.Normal(y.new_tensor(0.0), 2.0))
    theta = pyro.sample("theta", dist.Normal(y.new_tensor(0.0), 2.0))
    sigma = pyro.sample("sigma", dist.HalfCauchy(y.new_tensor(2.5)))
    mu_, phi_, theta_ = (v.unsqueeze(-1) for v in (mu, phi, theta))  # (..., 1): a batch's slot
    previous = torch.cat([mu_, y[:-1].expand(*mu_.shape[:-1], -1)], -1)
    err = first_order_recursion(y - mu_ - phi_ * previous, -theta_)
    # y -> err is unit-triangular (Jacobian 1): err's density is the likelihood of y
    pyro.sample("err", dist.Normal(0.0, sigma.unsqueeze(-1)).to_event(1), obs=err)


def garch11(y: torch.Tensor, sigma1: float) -> None:
    """Stan's GARCH(1, 1) benchmark (garch11.stan), no prior statements (flat)::

        mu,  alpha0 > 0,  0 < alpha1 < 1,  0 < beta1 < 1 - alpha1
        sigma_1 = sigma1 (data)
        sigma_t^2 = alpha0 + alpha1 (y_{t-1} - mu)^2 + beta1 sigma_{t-1}^2,  t = 2..T
        y_t ~ Normal(mu, sigma_t),  t = 1..T

            (mu, alpha0, alpha1, beta1) ----> [y_t] <---- y_{t-1}, sigma_{t-1}

    beta1's bound depends on alpha1, and Pyro's potential fixes a site's bijection at its first
    trace: the model draws beta1's share of its range, beta1 = (1 - alpha1) share, share flat
    on (0, 1), and adds log(1 - alpha1), that map's Jacobian, so that (alpha1, beta1) stay flat
    on their triangle. share's logit is Stan's unconstrained beta1 (Stan maps it by
    (1 - alpha1) logistic), so the gradients are Stan's.
    """
    mu = pyro.sample("mu", flat(constraints.real))
    alpha0 = pyro.sample("alpha0", flat(constraints.positive))
    alpha1 = pyro.sample("alpha1", flat(constraints.unit_interval))
    share = pyro.sample("beta1_share", flat(constraints.unit_interval))
    beta1 = pyro.deterministic("beta1", (1 - alpha1) * share)
    pyro.factor("beta1_jacobian", torch.log1p(-alpha1))
    mu_, alpha0_, alpha1_, beta1_ = (v.unsqueeze(-1) for v in (mu, alpha0, alpha1, beta1))
    # sigma_t^2 = c_t + beta1 sigma_{t-1}^2: c_1 = sigma1^2, c_t = alpha0 + alpha1 (y_{t-1} - mu)^2
    shock = alpha0_ + alpha1_ * (y[:-1] - mu_) ** 2
    c = torch.cat([torch.full_like(shock[..., :1], sigma1**2), shock], -1)
    sigma = first_order_recursion(c, beta1_).sqrt()
    pyro.sample("y", dist.Normal(mu_, sigma).to_event(1), obs=y)


def garch_from_stan(values: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """garch11's latent sites at Stan's parameter values: beta1 as its share of (0, 1 - alpha1)."""
    rest = {k: v for k, v in values.items() if k != "beta1"}
    return rest | {"beta1_share": values["beta1"] / (1 - values["alpha1"])}


def _series(source: str, *ints: str, floats: tuple[str, ...] = ()) -> Any:
    def data() -> dict[str, Any]:
        raw = posteriordb_data(source)
        y = torch.tensor(raw["y"], dtype=torch.float64).to(torch.get_default_dtype())
        return {"y": y} | {k: int(raw[k]) for k in ints} | {k: float(raw[k]) for k in floats}

    return data


posterior(
    "arK-arK",
    ar_k,
    _series("arK", "K"),
    params=("alpha", "beta", "sigma"),
    math=[
        r"\alpha \sim \mathcal{N}(0, 10^2), \quad \beta_k \sim \mathcal{N}(0, 10^2),"
        r" \quad \sigma \sim \mathrm{HalfCauchy}(2.5)",
        r"y_t \sim \mathcal{N}(\alpha + \sum_{k=1}^K \beta_k y_{t-k},\, \sigma^2),"
        r" \quad t = K+1, \ldots, T",
    ],
    story=(
        "An AR(5) autoregression fitted to 200 steps simulated from an AR(5) process: Stan's "
        "stat_comp_benchmarks (arK)."
    ),
)

posterior(
    "arma-arma11",
    arma11,
    _series("arma"),
    params=("mu", "phi", "theta", "sigma"),
    math=[
        r"\mu \sim \mathcal{N}(0, 10^2), \quad \phi, \theta \sim \mathcal{N}(0, 2^2),"
        r" \quad \sigma \sim \mathrm{HalfCauchy}(2.5)",
        r"\epsilon_t = y_t - \mu - \phi y_{t-1} - \theta \epsilon_{t-1}"
        r" \quad (y_0 = \mu,\ \epsilon_0 = 0)",
        r"\epsilon_t \sim \mathcal{N}(0, \sigma^2), \quad t = 1, \ldots, T",
    ],
    story=(
        "An ARMA(1, 1) model fitted to 200 steps simulated from an ARMA(1, 1) process: Stan's "
        "stat_comp_benchmarks (arma)."
    ),
)

posterior(
    "garch-garch11",
    garch11,
    _series("garch", floats=("sigma1",)),
    params=("mu", "alpha0", "alpha1", "beta1"),
    math=[
        r"\mu,\ \alpha_0 > 0,\ 0 < \alpha_1 < 1,\ 0 < \beta_1 < 1 - \alpha_1"
        r" \ \text{flat}, \quad \sigma_1 \text{ given}",
        r"\sigma_t^2 = \alpha_0 + \alpha_1 (y_{t-1} - \mu)^2 + \beta_1 \sigma_{t-1}^2,"
        r" \quad y_t \sim \mathcal{N}(\mu, \sigma_t^2), \quad t = 1, \ldots, T",
    ],
    story=(
        "A GARCH(1, 1) volatility model fitted to 200 steps simulated from a GARCH(1, 1) "
        "process: Stan's stat_comp_benchmarks (garch)."
    ),
    from_stan=garch_from_stan,
)
