"""posteriordb's other linear regressions: the ARM book's nes (Gelman & Hill 2007, ch. 4),
arm.py's :func:`~zoo.models.posteriordb.arm.normal_regression` on its own design.

Every one is a normal linear model of its response on its program's design::

    (coefficients, sigma) ----> [y_n] <---- x_n     n = 1..N
"""

from __future__ import annotations

import torch

from zoo.models.posteriordb.arm import _design, normal_regression
from zoo.models.posteriordb.base import posterior

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
