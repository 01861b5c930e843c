"""posteriordb's other linear regressions: the ARM book's nes and mesquite (Gelman & Hill 2007,
ch. 4), which are arm.py's :func:`~zoo.models.posteriordb.arm.normal_regression` on their own
designs, and kilpisjarvi, diamonds and blr, each with its own priors.

Every one is a normal linear model of its response on its program's design::

    (coefficients, sigma) ----> [y_n] <---- x_n     n = 1..N
"""

from __future__ import annotations

from functools import partial
from typing import Any

import pyro
import pyro.distributions as dist
import torch
from pyro.distributions import constraints

from zoo.models.posteriordb.arm import _design, flat_regressions, normal_regression
from zoo.models.posteriordb.base import flat, posterior
from zoo.models.regression import linear_predictor
from zoo_datasets.posteriordb import posteriordb_data

FLAT_MATH = r"\beta \sim \mathrm{flat}, \quad \sigma \sim \mathrm{flat\ on}\ (0, \infty)"

# ---------------------------------------------------------------------------------------- nes

NES_YEARS = (1972, 1976, 1980, 1984, 1988, 1992, 1996, 2000)
NES_STORY = (
    "Party identification (partyid7, a 7-point scale from strong Democrat to strong Republican) "
    "of the {year} US National Election Study's respondents regressed on their ideology "
    "(real_ideo), race, age group (30-44, 45-64 and 65+ against under 30), education, gender and "
    "income: Gelman & Hill (2007), ARM ch. 4, one of a series of regressions over the survey's "
    "years."
)
NES_MATH = [FLAT_MATH, r"\mathrm{partyid7}_n \sim \mathcal{N}(x_n^\top \beta,\, \sigma^2)"]


def _nes_terms(c: dict[str, torch.Tensor]) -> list[torch.Tensor]:
    """The nes program's predictors after the intercept, age_discrete (1-4) as indicators of 2,
    3 and 4."""
    age = [(c["age_discrete"] == k).to(torch.float64) for k in (2, 3, 4)]
    return [c["real_ideo"], c["race_adj"], *age, c["educ1"], c["gender"], c["income"]]


for _year in NES_YEARS:
    posterior(
        f"nes{_year}-nes",
        normal_regression,
        _design(f"nes{_year}", lambda c: c["partyid7"], _nes_terms, 0.0),
        params=("beta", "sigma"),
        math=NES_MATH,
        story=NES_STORY.format(year=_year),
    )

# ----------------------------------------------------------------------------------- mesquite

MESQUITE_STORY = (
    "The leaf weight of 46 mesquite bushes (two groups measured separately; group, 0/1) "
    "regressed on {what}: Gelman & Hill (2007), ARM ch. 4."
)
MESQUITE_MATH = [FLAT_MATH, r"({y})_n \sim \mathcal{{N}}(x_n^\top \beta,\, \sigma^2)"]


def _volume(c: dict[str, torch.Tensor]) -> torch.Tensor:
    """The canopy's volume as the programs compute it: diam1 .* diam2 .* canopy_height."""
    return c["diam1"] * c["diam2"] * c["canopy_height"]


MESQUITE = {
    # posterior: (response, its name in the math, terms after the intercept, what)
    "mesquite-mesquite": (
        lambda c: c["weight"],
        r"\mathrm{weight}",
        lambda c: [
            c["diam1"],
            c["diam2"],
            c["canopy_height"],
            c["total_height"],
            c["density"],
            c["group"],
        ],
        "the canopy's two diameters and height, the total height, the density and the group",
    ),
    "mesquite-logmesquite": (
        lambda c: torch.log(c["weight"]),
        r"\log \mathrm{weight}",
        lambda c: [
            *(
                torch.log(c[k])
                for k in ("diam1", "diam2", "canopy_height", "total_height", "density")
            ),
            c["group"],
        ],
        "the logs of the canopy's diameters and height, the total height and the density, and "
        "the group (log weight)",
    ),
    "mesquite-logmesquite_logvolume": (
        lambda c: torch.log(c["weight"]),
        r"\log \mathrm{weight}",
        lambda c: [torch.log(_volume(c))],
        "the log of the canopy's volume (log weight)",
    ),
    "mesquite-logmesquite_logva": (
        lambda c: torch.log(c["weight"]),
        r"\log \mathrm{weight}",
        lambda c: [torch.log(_volume(c)), torch.log(c["diam1"] * c["diam2"]), c["group"]],
        "the logs of the canopy's volume and area, and the group (log weight)",
    ),
    "mesquite-logmesquite_logvas": (
        lambda c: torch.log(c["weight"]),
        r"\log \mathrm{weight}",
        lambda c: [
            torch.log(_volume(c)),
            torch.log(c["diam1"] * c["diam2"]),
            torch.log(c["diam1"] / c["diam2"]),
            torch.log(c["total_height"]),
            torch.log(c["density"]),
            c["group"],
        ],
        "the logs of the canopy's volume, area and shape (diam1 / diam2), of the total height "
        "and of the density, and the group (log weight)",
    ),
    "mesquite-logmesquite_logvash": (
        lambda c: torch.log(c["weight"]),
        r"\log \mathrm{weight}",
        lambda c: [
            torch.log(_volume(c)),
            torch.log(c["diam1"] * c["diam2"]),
            torch.log(c["diam1"] / c["diam2"]),
            torch.log(c["total_height"]),
            c["group"],
        ],
        "the logs of the canopy's volume, area and shape (diam1 / diam2) and of the total "
        "height, and the group (log weight)",
    ),
}

flat_regressions("mesquite", MESQUITE, MESQUITE_MATH, MESQUITE_STORY)

# ------------------------------------------------------------------------------ kilpisjarvi


def _tensors(source: str, *keys: str) -> dict[str, torch.Tensor]:
    """A data set's ``keys`` as float64 tensors, then in torch's default dtype (numbers as
    0-d tensors)."""
    raw = posteriordb_data(source)
    dtype = torch.get_default_dtype()
    return {k: torch.tensor(raw[k], dtype=torch.float64).to(dtype) for k in keys}


def kilpisjarvi(
    x: torch.Tensor,
    y: torch.Tensor,
    pmualpha: torch.Tensor,
    psalpha: torch.Tensor,
    pmubeta: torch.Tensor,
    psbeta: torch.Tensor,
) -> None:
    """A straight line with its priors' means and sds given in the data::

    alpha ~ Normal(pmualpha, psalpha),  beta ~ Normal(pmubeta, psbeta)
    sigma ~ flat on sigma > 0           (no prior statement)
    y_n   ~ Normal(alpha + beta x_n, sigma),  n = 1..N

        (alpha, beta, sigma) ----> [y_n] <---- x_n     n = 1..N
    """
    alpha = pyro.sample("alpha", dist.Normal(pmualpha, psalpha))
    beta = pyro.sample("beta", dist.Normal(pmubeta, psbeta))
    sigma = pyro.sample("sigma", flat(constraints.positive))
    with pyro.plate("n", y.shape[0]):
        pyro.sample("y", dist.Normal(alpha + beta * x, sigma), obs=y)


posterior(
    "kilpisjarvi_mod-kilpisjarvi",
    kilpisjarvi,
    lambda: _tensors("kilpisjarvi_mod", "x", "y", "pmualpha", "psalpha", "pmubeta", "psbeta"),
    params=("alpha", "beta", "sigma"),
    math=[
        r"\alpha \sim \mathcal{N}(9.31, 100^2), \quad \beta \sim \mathcal{N}(0, 0.033^2), "
        r"\quad \sigma \sim \mathrm{flat\ on}\ (0, \infty)",
        r"y_n \sim \mathcal{N}(\alpha + \beta x_n,\, \sigma^2)",
    ],
    story=(
        "The mean summer temperature at Kilpisjärvi, Finland (Finnish Meteorological Institute, "
        "62 summers 1952-2013) regressed on the year, uncentred so that the intercept and slope "
        "are strongly correlated (posteriordb's modified data, from Bales et al. 2019's "
        "warm-up benchmarks)."
    ),
    nuts_fails=(
        "alpha and beta correlate almost perfectly (x the uncentred year): on the diagonal "
        "metric the trees near the depth limit (about 590 gradients a draw) and the two's chains "
        "disagree at the default size (32 chains x 500 draws): R-hat 1.017, bulk ESS 1,707; the "
        "means and sds (within 3%) agree with the reference"
    ),
)

# --------------------------------------------------------------------------------- diamonds


def diamonds(Y: torch.Tensor, Xc: torch.Tensor, prior_only: int = 0) -> None:
    """brms's Gaussian regression on centred predictors (brms 2.10 generated the program)::

        b_k       ~ Normal(0, 1),  k = 1..K-1
        Intercept ~ StudentT(3, 8, 10)                 the intercept of the centred predictors
        sigma     ~ StudentT(3, 0, 10) on sigma > 0
        Y_n       ~ Normal(Intercept + Xc_n . b, sigma),  n = 1..N   (unless prior_only)

            (b, Intercept, sigma) ----> [Y_n] <---- Xc_n     n = 1..N

    ``Xc``: the design ``X`` without its intercept column, each column centred on its mean, as
    the program's ``transformed data`` block builds it.
    """
    b = pyro.sample("b", dist.Normal(torch.zeros(Xc.shape[-1], dtype=Xc.dtype), 1.0).to_event(1))
    Intercept = pyro.sample(
        "Intercept", dist.StudentT(3.0, torch.tensor(8.0, dtype=Xc.dtype), 10.0)
    )
    # brms's half Student-t: the t density folded at zero (twice the density on sigma > 0)
    sigma = pyro.sample(
        "sigma",
        dist.FoldedDistribution(dist.StudentT(3.0, torch.tensor(0.0, dtype=Xc.dtype), 10.0)),
    )
    if not prior_only:
        with pyro.plate("n", Y.shape[0]):
            pyro.sample("Y", dist.Normal(Intercept + linear_predictor(Xc, b), sigma), obs=Y)


def _diamonds_data() -> dict[str, Any]:
    raw = posteriordb_data("diamonds")
    X = torch.tensor(raw["X"], dtype=torch.float64)[:, 1:]
    dtype = torch.get_default_dtype()
    return {
        "Y": torch.tensor(raw["Y"], dtype=torch.float64).to(dtype),
        "Xc": (X - X.mean(dim=0)).to(dtype),
        "prior_only": raw["prior_only"],
    }


posterior(
    "diamonds-diamonds",
    diamonds,
    _diamonds_data,
    params=("b", "Intercept", "sigma"),
    math=[
        r"b_k \sim \mathcal{N}(0, 1), \quad \mathrm{Intercept} \sim t_3(8, 10), "
        r"\quad \sigma \sim t_3^+(0, 10)",
        r"Y_n \sim \mathcal{N}(\mathrm{Intercept} + \tilde x_n^\top b,\, \sigma^2)",
    ],
    story=(
        "The log price of 5,000 diamonds (ggplot2's diamonds data, Wickham 2016) regressed by "
        "brms on log(price) ~ carat * (log(x) + log(y) + log(z)) + cut + color + clarity: 24 "
        "strongly correlated predictors, a warm-up benchmark of Bales et al. (2019)."
    ),
)

# -------------------------------------------------------------------------------------- blr


def blr(y: torch.Tensor, X: torch.Tensor) -> None:
    """Bayesian linear regression with Normal(0, 10) priors::

    beta_d ~ Normal(0, 10),  d = 1..D
    sigma  ~ Normal(0, 10) on sigma > 0
    y_n    ~ Normal(X_n . beta, sigma),  n = 1..N

        (beta, sigma) ----> [y_n] <---- X_n     n = 1..N
    """
    beta = pyro.sample(
        "beta", dist.Normal(torch.zeros(X.shape[-1], dtype=X.dtype), 10.0).to_event(1)
    )
    sigma = pyro.sample("sigma", dist.HalfNormal(torch.tensor(10.0, dtype=X.dtype)))
    with pyro.plate("n", y.shape[0]):
        pyro.sample("y", dist.Normal(linear_predictor(X, beta), sigma), obs=y)


BLR = {
    # posterior: (data, the coefficients' posterior correlation the predictors were drawn for,
    # why nuts fails the reference check, if it does)
    "sblrc-blr": ("sblrc", "0.8", None),
    "sblri-blr": (
        "sblri",
        "0",
        "sigma's chains disagree at the default size (32 chains x 500 draws): R-hat 1.013, "
        "bulk ESS 2,338 (the betas' over 20,000); the means and sds agree with the reference",
    ),
}

for _name, (_source, _correlation, _nuts_fails) in BLR.items():
    posterior(
        _name,
        blr,
        partial(_tensors, _source, "y", "X"),
        params=("beta", "sigma"),
        math=[
            r"\beta_d \sim \mathcal{N}(0, 10^2), \quad \sigma \sim \mathcal{N}^+(0, 10^2)",
            r"y_n \sim \mathcal{N}(x_n^\top \beta,\, \sigma^2)",
        ],
        story=(
            f"Simulated data (posteriordb's {_source}, data-raw/sblr/sblr.R): 100 observations "
            "of a linear regression on 5 predictors, drawn so that the coefficients' posterior "
            f"correlation is {_correlation}; every coefficient and sigma 1 in truth."
        ),
        nuts_fails=_nuts_fails,
    )
