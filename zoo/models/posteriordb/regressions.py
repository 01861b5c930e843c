"""posteriordb's other linear regressions: the ARM book's nes and mesquite (Gelman & Hill 2007,
ch. 4), which are arm.py's :func:`~zoo.models.posteriordb.arm.normal_regression` on their own
designs.

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

for _name, (_response, _y, _terms, _what) in MESQUITE.items():
    posterior(
        _name,
        normal_regression,
        _design("mesquite", _response, _terms, 0.0),
        params=("beta", "sigma"),
        math=[MESQUITE_MATH[0], MESQUITE_MATH[1].format(y=_y)],
        story=MESQUITE_STORY.format(what=_what),
    )
