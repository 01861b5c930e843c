"""The ARM book's regressions in posteriordb (Gelman & Hill 2007): kidiq, kidiq_with_mom_work
and earnings."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pyro
import pyro.distributions as dist
import torch
from pyro.distributions import constraints

from zoo.models.posteriordb.base import flat, posterior
from zoo.models.regression import linear_predictor
from zoo_datasets.posteriordb import posteriordb_data


def normal_regression(y: torch.Tensor, X: torch.Tensor, sigma_scale: float = 0.0) -> None:
    """The ARM book's linear regressions in Stan (Gelman & Hill 2007)::

        beta  ~ flat on R^K                      (no prior statement)
        sigma ~ Cauchy(0, sigma_scale), sigma > 0 (sigma_scale 0: flat on sigma > 0)
        y_n   ~ Normal(X_n . beta, sigma),  n = 1..N

            (beta, sigma) ----> [y_n]   n = 1..N       X: the program's design

    ``X``'s columns are the linear predictor's terms, as the program's ``transformed data``
    block builds them (an intercept's column of ones first).
    """
    beta = pyro.sample("beta", flat(constraints.real, X.shape[-1]))
    if sigma_scale > 0:
        sigma = pyro.sample("sigma", dist.HalfCauchy(torch.as_tensor(sigma_scale, dtype=X.dtype)))
    else:
        sigma = pyro.sample("sigma", flat(constraints.positive))
    with pyro.plate("n", y.shape[0]):
        pyro.sample("y", dist.Normal(linear_predictor(X, beta), sigma), obs=y)


def _design(
    source: str,
    response: Callable[[dict[str, torch.Tensor]], torch.Tensor],
    terms: Callable[[dict[str, torch.Tensor]], list[torch.Tensor]],
    scale: float,
) -> Callable[[], dict[str, Any]]:
    """One ARM program's data: its ``response`` and the ``terms`` of its linear predictor (after
    the intercept) from the data set's columns, computed in float64 as the program's transformed
    data computes them, then in torch's default dtype (float64 inside
    ``zoo_inference.reference.default_dtype(torch.float64)``)."""

    def data() -> dict[str, Any]:
        raw = posteriordb_data(source)
        cols = {
            k: torch.tensor(v, dtype=torch.float64) for k, v in raw.items() if isinstance(v, list)
        }
        y = response(cols)
        X = torch.stack([torch.ones_like(y), *terms(cols)], dim=-1)
        dtype = torch.get_default_dtype()
        return {"y": y.to(dtype), "X": X.to(dtype), "sigma_scale": scale}

    return data


def _centred(x: torch.Tensor) -> torch.Tensor:
    return x - x.mean()


def _standardised(x: torch.Tensor) -> torch.Tensor:
    """Gelman's scaling by two sds (Stan's ``sd``: the sample sd)."""
    return (x - x.mean()) / (2 * x.std(unbiased=True))


KIDIQ_STORY = (
    "Children's cognitive test scores (kid_score, 434 three- and four-year-olds) regressed on "
    "their mothers' {what}: Gelman & Hill (2007), ARM ch. {chapter}."
)
KIDIQ_MATH = [
    r"\sigma \sim \mathrm{HalfCauchy}(2.5), \quad \beta \sim \mathrm{flat}",
    r"\mathrm{kid\_score}_n \sim \mathcal{N}(x_n^\top \beta,\, \sigma^2)",
]
MOM_WORK_MATH = [
    r"\beta \sim \mathrm{flat}, \quad \sigma \sim \mathrm{flat\ on}\ (0, \infty)",
    r"\mathrm{kid\_score}_n \sim \mathcal{N}(x_n^\top \beta,\, \sigma^2)",
]
KIDIQ = {
    # posterior: (data, terms after the intercept, sigma's Cauchy scale, what the story says)
    "kidiq-kidscore_momhs": (
        "kidiq",
        lambda c: [c["mom_hs"]],
        2.5,
        "high-school completion (mom_hs)",
    ),
    "kidiq-kidscore_momiq": ("kidiq", lambda c: [c["mom_iq"]], 2.5, "IQ (mom_iq)"),
    "kidiq-kidscore_momhsiq": (
        "kidiq",
        lambda c: [c["mom_hs"], c["mom_iq"]],
        2.5,
        "high-school completion and IQ",
    ),
    "kidiq-kidscore_interaction": (
        "kidiq",
        lambda c: [c["mom_hs"], c["mom_iq"], c["mom_hs"] * c["mom_iq"]],
        2.5,
        "high-school completion, IQ and their interaction",
    ),
    "kidiq_with_mom_work-kidscore_interaction_c": (
        "kidiq_with_mom_work",
        lambda c: [
            _centred(c["mom_hs"]),
            _centred(c["mom_iq"]),
            _centred(c["mom_hs"]) * _centred(c["mom_iq"]),
        ],
        0.0,
        "centred high-school completion and IQ, with their interaction",
    ),
    "kidiq_with_mom_work-kidscore_interaction_c2": (
        "kidiq_with_mom_work",
        lambda c: [c["mom_hs"] - 0.5, c["mom_iq"] - 100, (c["mom_hs"] - 0.5) * (c["mom_iq"] - 100)],
        0.0,
        "high-school completion and IQ centred on 0.5 and 100, with their interaction",
    ),
    "kidiq_with_mom_work-kidscore_interaction_z": (
        "kidiq_with_mom_work",
        lambda c: [
            _standardised(c["mom_hs"]),
            _standardised(c["mom_iq"]),
            _standardised(c["mom_hs"]) * _standardised(c["mom_iq"]),
        ],
        0.0,
        "high-school completion and IQ scaled by two sds, with their interaction",
    ),
    "kidiq_with_mom_work-kidscore_mom_work": (
        "kidiq_with_mom_work",
        lambda c: [(c["mom_work"] == k).to(torch.float64) for k in (2, 3, 4)],
        0.0,
        "work pattern (mom_work 1-4, as indicators of 2, 3 and 4)",
    ),
}

for _name, (_source, _terms, _scale, _what) in KIDIQ.items():
    posterior(
        _name,
        normal_regression,
        _design(_source, lambda c: c["kid_score"], _terms, _scale),
        params=("beta", "sigma"),
        math=KIDIQ_MATH if _scale else MOM_WORK_MATH,
        story=KIDIQ_STORY.format(what=_what, chapter=3 if _source == "kidiq" else 4),
    )

EARNINGS_STORY = (
    "Yearly earnings of 1,192 US adults (1990 survey) regressed on {what}: Gelman & Hill (2007), "
    "ARM ch. 4."
)
EARNINGS_MATH = [
    r"\beta \sim \mathrm{flat}, \quad \sigma \sim \mathrm{flat\ on}\ (0, \infty)",
    r"({y})_n \sim \mathcal{{N}}(x_n^\top \beta,\, \sigma^2)",
]


def _z(x: torch.Tensor) -> torch.Tensor:
    """Standardised by the sample sd (Stan's ``sd``)."""
    return (x - x.mean()) / x.std(unbiased=True)


EARNINGS = {
    # posterior: (response, its name in the math, terms after the intercept, what)
    "earnings-earn_height": (lambda c: c["earn"], "earn", lambda c: [c["height"]], "height"),
    "earnings-log10earn_height": (
        lambda c: torch.log10(c["earn"]),
        r"\log_{10} \mathrm{earn}",
        lambda c: [c["height"]],
        "height (log10 earnings)",
    ),
    "earnings-logearn_height": (
        lambda c: torch.log(c["earn"]),
        r"\log \mathrm{earn}",
        lambda c: [c["height"]],
        "height (log earnings)",
    ),
    "earnings-logearn_height_male": (
        lambda c: torch.log(c["earn"]),
        r"\log \mathrm{earn}",
        lambda c: [c["height"], c["male"]],
        "height and sex (log earnings)",
    ),
    "earnings-logearn_interaction": (
        lambda c: torch.log(c["earn"]),
        r"\log \mathrm{earn}",
        lambda c: [c["height"], c["male"], c["height"] * c["male"]],
        "height, sex and their interaction (log earnings)",
    ),
    "earnings-logearn_interaction_z": (
        lambda c: torch.log(c["earn"]),
        r"\log \mathrm{earn}",
        lambda c: [_z(c["height"]), c["male"], _z(c["height"]) * c["male"]],
        "standardised height, sex and their interaction (log earnings)",
    ),
    "earnings-logearn_logheight_male": (
        lambda c: torch.log(c["earn"]),
        r"\log \mathrm{earn}",
        lambda c: [torch.log(c["height"]), c["male"]],
        "log height and sex (log earnings)",
    ),
}


def flat_regressions(
    source: str, table: dict[str, tuple[Any, ...]], math: list[str], story: str
) -> None:
    """Register each of ``table``'s posteriors (rows: the response, its name in the math, the
    terms after the intercept, what the story says) as :func:`normal_regression` on ``source``'s
    data with flat priors; ``math[1]`` and ``story`` are templates of ``{y}`` and ``{what}``."""
    for name, (response, y, terms, what) in table.items():
        posterior(
            name,
            normal_regression,
            _design(source, response, terms, 0.0),
            params=("beta", "sigma"),
            math=[math[0], math[1].format(y=y)],
            story=story.format(what=what),
        )


flat_regressions("earnings", EARNINGS, EARNINGS_MATH, EARNINGS_STORY)
