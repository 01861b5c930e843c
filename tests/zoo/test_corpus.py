"""Foreign models, written the way Pyro's and NumPyro's examples write them (``foreign_corpus``),
registered with ``zoo.register`` as a user would and run through every engine that applies.

Default run (smoke size): every (model, engine) is ok, its posterior holds every latent and
deterministic site with the right shape, nothing is observed that is not, and the exact engines
(enumeration of discrete-only models) reproduce the reference to the last digits. Slow run:
every engine's means against the closed-form reference within Monte-Carlo error."""

from __future__ import annotations

import numpy as np
import pytest

import zoo
from tests.foreign_corpus import CORPUS, ForeignCase
from zoo_inference.engines import GENERIC_ENGINES, budget

# Sizes: the engines' own smoke budgets (declared with each engine in inference/engines.py);
# the slow reference check runs longer, with a full-rank guide and proposal where it matters.
SMOKE = {name: budget(name, "smoke") for name in GENERIC_ENGINES}
LONG = {
    "svi": {"num_steps": 3000, "num_samples": 4000, "guide": "mvn", "lr": 0.02},
    "nuts": {"num_samples": 1000, "warmup": 500, "num_chains": 2},
    "hmc": {"num_samples": 1000, "warmup": 500, "num_chains": 2},
    "mh": {"num_samples": 10000, "warmup": 5000, "num_chains": 2},
    "importance": {"num_samples": 20000, "fit_steps": 2000, "proposal": "mvn"},
    "enum": {"num_samples": 2000},
    "chees": {"num_samples": 200, "warmup": 500, "num_chains": 32},
    "mams": {"num_samples": 200, "warmup": 500, "num_chains": 32},
}


def truth_of(case: ForeignCase) -> zoo.GroundTruth | None:
    if case.mean is None:
        return None
    return zoo.GroundTruth(case.mean, case.sd, case.log_evidence, source="closed form")


def register(case: ForeignCase) -> zoo.ModelEntry:
    truth = truth_of(case)
    return zoo.register(
        case.name,
        model=case.model,
        data=case.data,
        ground_truth=None if truth is None else (lambda **data: truth),
    )


CELLS = [(case, engine) for case in CORPUS for engine in GENERIC_ENGINES]
# hmc, chees and mams share nuts's whole path (the batched density, which test_samplers checks on
# every corpus case, initialisation, post-processing): the default run takes them on the
# conformance suite's models and leaves their corpus cells to the slow run
BATCHED = {"hmc", "chees", "mams"}
# pathfinder too runs on the batched density, its 30 corpus cells costly on loop-form
# densities: the slow run keeps them
BATCHED |= {"pathfinder"}
# 10-13 s each in the default run of 2026-11-25 (the suite was at 13 minutes): the slow run
# keeps them; the same cases run every other engine in the default one
HEAVY = {
    ("lkj_cholesky_mvn", "importance"),
    ("mixture_fixed_components_weight", "importance"),
    ("hmm_markov_continuous_shift", "enum"),
    # the exact samplers' optimisation and grid are slow on loop-form densities
    ("mixture_fixed_components_weight", "inverse_cdf"),
    ("gp_marginal_lognormal_hypers", "rejection"),
    ("factor_normal_loglik", "inverse_cdf"),
}
SMOKE_CELLS = [
    pytest.param(
        c,
        e,
        id=f"{c.name}-{e}",
        marks=[pytest.mark.slow] if e in BATCHED or (c.name, e) in HEAVY else [],
    )
    for c, e in CELLS
]


@pytest.mark.parametrize("case, engine", SMOKE_CELLS)
def test_every_engine_runs_the_model_as_written(case, engine, registry):
    entry = register(case)
    if engine not in entry.engines:
        pytest.skip(f"{engine} does not apply: {_why(entry, engine)}")
    opts = {k: v for k, v in SMOKE[engine].items() if k in entry.engine_spec(engine).defaults}
    run = zoo.run(entry, engine, seed=0, **opts)
    assert run.ok, run.error
    s = entry.structure
    post = run.idata.posterior
    expected = set(s.latent) | set(s.deterministic)
    assert set(post.data_vars) == expected
    for site in expected:
        assert post[site].shape[2:] == s.shapes[site], site
    assert not set(s.deterministic) & set(s.observed)
    if s.observed and "log_likelihood" in run.idata.groups():
        assert set(run.idata.log_likelihood.data_vars) == set(s.observed)
    if engine == "enum" and not s.continuous and case.mean is not None:
        # exact inference over discrete sites only: evidence and marginals are exact
        assert run.evidence.kind == "exact"
        assert run.log_evidence == pytest.approx(case.log_evidence, abs=2e-4)
        for row, (mean, _) in truth_of(case).rows().items():
            assert run.summary.loc[row, "mean"] == pytest.approx(mean, abs=1e-4), row


def _why(entry: zoo.ModelEntry, engine: str) -> str:
    try:
        entry.engine_spec(engine)
    except ValueError as e:
        return str(e)
    return ""


@pytest.mark.slow
@pytest.mark.parametrize("case, engine", CELLS, ids=[f"{c.name}-{e}" for c, e in CELLS])
def test_engine_matches_the_reference(case, engine, registry):
    """Long runs against the closed form: means within 5 Monte-Carlo standard errors (SVI with a
    full-rank guide: within 0.2 posterior sd), log evidence of importance sampling within its
    own error."""
    if case.mean is None:
        pytest.skip("no closed form")
    if engine == "laplace":  # a Gaussian approximation: its error is bias (test_laplace)
        pytest.skip("an approximation whose error is not Monte-Carlo noise")
    entry = register(case)
    if engine not in entry.engines:
        pytest.skip(f"{engine} does not apply")
    long = LONG.get(engine, budget(engine, "full"))
    opts = {k: v for k, v in long.items() if k in entry.engine_spec(engine).defaults}
    run = zoo.run(entry, engine, seed=0, **opts)
    assert run.ok, run.error
    if run.kind != "draws":
        return
    n = run.idata.posterior.sizes["chain"] * run.idata.posterior.sizes["draw"]
    for row, (mean, sd) in truth_of(case).rows().items():
        if row not in run.summary.index or not sd > 0:
            continue
        got = run.summary.loc[row, "mean"]
        if engine == "svi":
            assert abs(got - mean) < 0.2 * sd, (row, got, mean, sd)
            continue
        ess = run.summary.loc[row].get("ess_bulk", np.nan)
        if engine == "importance":
            ess = run.diagnostics["ess"]
        ess = n if not np.isfinite(ess) else ess
        assert abs(got - mean) < 5 * sd / np.sqrt(ess) + 1e-3 * sd, (row, got, mean, sd, ess)
