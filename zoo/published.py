"""The published figures of the MAMS paper's comparison (Robnik, Cohn-Gordon & Seljak 2025,
arXiv 2503.01707): gradient evaluations to b²_max and b²_avg < 0.01 for NUTS and MAMS on the
Inference Gym's targets, from the authors' own results files; rows of the leaderboard
(:mod:`zoo.leaderboard`) and of ``benchmarks/gradients_to_bias.py``."""

from __future__ import annotations

import math
from dataclasses import dataclass

# The paper's Table 1 could not be read offline. These are the authors' own results files in
# github.com/reubenharry/sampler-benchmarks (snapshot 7ad0700d, 2026-03-11), whose
# papers/MAMS/results.md says sampler-comparison/results/<model>/main.py writes the Table 1
# results: rows `statistic` = square (x², "x2" in older files), max = True / False.
REPO = "reubenharry/sampler-benchmarks@7ad0700d: sampler-comparison/results/"


@dataclass(frozen=True)
class Published:
    nuts: tuple[float, float] | None  # (b²_max, b²_avg) gradients; inf: not reached
    mams: tuple[float, float] | None
    tuning: tuple[float | None, float | None]  # NUTS's and MAMS's tuning gradients per chain
    source: str
    note: str


PUBLISHED: dict[str, Published] = {
    "gym_banana": Published(
        (95_520, 58_750),
        (41_053, 39_606),
        (39_504, 152_081),
        REPO + "other/Banana_MAMS_Paper/{nuts,adjusted_microcanonical}_Banana_MAMS_Paper.csv "
        "(commit 6443564)",
        "same target (results.md: their banana aligns with the Gym's); an older NUTS file, "
        "results/banana/nuts_banana.csv (75c09b7), gives 111,691 / 83,598",
    ),
    "gym_neals_funnel": Published(
        (math.inf, 26_392),
        (1_432_043, 96_921),
        (147_482, 2_755_424),
        REPO + "Neals_Funnel_MAMS_Paper/{nuts,adjusted_microcanonical}_Neals_Funnel_MAMS_Paper"
        ".csv (commit 93cfe2b)",
        "their own funnel (results.md: 'should be similar or the same' as the Gym's)",
    ),
    "gym_ill_conditioned_gaussian": Published(
        (21_674, 2_757),
        None,
        (5_986, None),
        REPO + "ICG/nuts_ICG.csv (commit 93cfe2b); no MAMS file under main.py's name",
        "NOT the same target: their Gaussian is unrotated (results.md), the Gym's is rotated",
    ),
    "gym_brownian_motion": Published(
        (33_462, 6_270),
        None,
        (13_157, None),
        REPO + "vector_brownian_motion_unknown_scales_missing_middle_observations/"
        "nuts_vector_brownian_motion_unknown_scales_missing_middle_observations.csv "
        "(commit e8d652f); no MAMS file under main.py's name",
        "same target; a later ALBA-tuned MAMS variant file (5d05331) gives 14,366 / 3,113",
    ),
    "gym_item_response_theory": Published(
        (71_758, 5_848),
        (47_414, 3_806),
        (22_453, 289_702),
        REPO + "vector_synthetic_item_response_theory/{nuts,adjusted_microcanonical}_"
        "vector_synthetic_item_response_theory.csv (commit 93cfe2b)",
        "same target",
    ),
    "gym_stochastic_volatility": Published(
        (1_628_519, 29_872),
        (482_668, 35_783),
        (130_240, 1_669_241),
        REPO + "Stochastic_Volatility_MAMS_Paper/{nuts,adjusted_microcanonical}_"
        "Stochastic_Volatility_MAMS_Paper.csv (commit 93cfe2b)",
        "NOT the same target: NumPyro's stochastic volatility (results.md: other dimensions, "
        "about 10x harder than the Gym's)",
    ),
    "gym_german_credit_sparse": Published(
        (93_361, 11_465),
        (54_688, 6_743),
        (55_507, 708_265),
        REPO + "vector_german_credit_numeric_sparse_logistic_regression/{nuts,"
        "adjusted_microcanonical}_vector_german_credit_numeric_sparse_logistic_regression.csv "
        "(commit 93cfe2b)",
        "same target: the Gym's GermanCreditNumericSparseLogisticRegression (51 parameters; "
        "sampler_evaluation/models/german_credit.py wraps it in a VectorModel, global scale, "
        "local scales, unscaled weights in that order, and its 2-million-draw expectations "
        "agree with the Gym's truth: b² of E[x²] 6e-5 at most); an older run "
        "(MAMS_PAPER_2025/table1/german_credit, commit 9f0acd0) gives NUTS 88,976 / 10,326 "
        "and MAMS 55,749 / 6,783",
    ),
}
