"""Every registered model through every engine that applies to it, in smoke size.

For each (model, engine): the run is ok; the posterior group holds the model's latent sites with
their shapes (and its deterministic sites); the summary has a row for every element of the
compared sites; where the model has a ground truth, the means lie within a tolerance derived
from the run's own Monte-Carlo error. Per-model files test the model's own mathematics.
"""

from __future__ import annotations

import numpy as np
import pytest

import zoo
from zoo_inference import inspect_model
from zoo_inference.engines import GENERIC_ENGINES, REFERENCE_BUDGETS, budget

# Sizes: each engine's "check" budget, declared with the engine (inference/engines.py).
SMOKE = {name: budget(name, "check") for name in [*GENERIC_ENGINES, *REFERENCE_BUDGETS]}
# What an engine is known to do on a model (too slow for the default run, not mixing, failing,
# an approximation that cannot hold the posterior) is declared with the model
# (``register(..., known=...)``, :class:`zoo.Known`); an engine whose error is an
# approximation's bias on every model says so on its declaration (``EngineSpec.biased``).
Z = 5.0  # Monte-Carlo z-score allowed for a mean
SVI_SDS = 1.0  # a smoke-size SVI fit: its mean within this many posterior sds (optimiser error)


def cells() -> list[tuple[str, str]]:
    return [(m, e) for m in zoo.list_models() for e in zoo.get_model(m).engines]


def known(model: str, engine: str, kind: str) -> str | None:
    """The reason the model declares for ``engine`` being of ``kind``, else None."""
    what = zoo.get_model(model).known.get(engine)
    return what.reason if what is not None and what.kind == kind else None


def slow(model: str, engine: str) -> bool:
    """A cell its model declares slow, or any cell of an opt-in model (a benchmark target the
    default report and the default test run leave out: test_gym checks their mathematics)."""
    return known(model, engine, "slow") is not None or zoo.get_model(model).opt_in


def params() -> list:
    return [
        pytest.param(m, e, id=f"{m}-{e}", marks=[pytest.mark.slow] if slow(m, e) else [])
        for m, e in cells()
    ]


def smoke_options(entry: zoo.ModelEntry, engine: str) -> dict:
    accepted = entry.engine_spec(engine).defaults
    base = entry.variants[engine][0] if engine in entry.variants else engine
    return {k: v for k, v in SMOKE.get(base, {}).items() if k in accepted}


@pytest.mark.parametrize("model, engine", params())
def test_model_engine(model: str, engine: str) -> None:
    entry = zoo.get_model(model)
    run = zoo.run(entry, engine, seed=1, **smoke_options(entry, engine))
    what = entry.known.get(engine)
    if what is not None and what.kind == "fails":
        assert not run.ok and what.error in run.error, (what.reason, run.error)
        return
    assert run.ok, run.error
    s = entry.structure
    if engine in entry.variants and entry.variants[engine][2]:  # the model under other arguments
        s = inspect_model(entry.model, {**entry.load_data(), **entry.variants[engine][2]})
    post = run.idata.posterior
    draws_of = set(post.data_vars)
    if run.kind == "point":
        assert draws_of <= set(s.latent), draws_of
    else:
        assert draws_of == set(s.latent) | set(s.deterministic), draws_of
    for site in draws_of:
        assert post[site].shape[2:] == s.shapes[site], site
    # a summary row for every element of the compared sites the run drew
    for site in set(entry.compared_params()) & draws_of:
        n = int(np.prod(s.shapes[site]))
        rows = [r for r in run.summary.index if r == site or r.startswith(f"{site}[")]
        assert len(rows) == n, (site, rows)
    if what is not None and what.kind == "not_mixing":
        assert run.diagnostics["max_r_hat"] > 1.1, what.reason
        return
    if run.status == "unreliable":
        # the run says its own numbers cannot be used (importance weights with Pareto k > 0.7,
        # as on the centred funnel at some seeds): that warning is the contract, not the means
        assert run.caveat, "an unreliable run says why"
        return
    if entry.opt_in:
        # a benchmark target (the Inference Gym's) is built to defeat smoke-size runs: radon's
        # intercept and contextual weight, 1.29 by SVI and ChEES at this size against the Gym's
        # 1.39 (sd 0.05); test_gym and the report check their truths at sizes that can
        return
    truth = entry.ground_truth()
    base = entry.variants[engine][0] if engine in entry.variants else engine
    approximate = what is not None and what.kind == "approximate"
    if truth is None or run.kind != "draws" or entry.engine_spec(engine).biased or approximate:
        return
    n_draws = post.sizes["chain"] * post.sizes["draw"]
    for row, (t_mean, t_sd) in truth.rows().items():
        if row not in run.summary.index or not t_sd > 0:
            continue
        mean = run.summary.loc[row, "mean"]
        if base == "svi":
            assert abs(mean - t_mean) < SVI_SDS * t_sd, (row, mean, t_mean, t_sd)
            continue
        # MCMC: the row's bulk ESS; importance sampling: the weights' ESS; exact draws: n
        ess = run.summary.loc[row].get("ess_bulk", run.diagnostics.get("ess", n_draws))
        tol = Z * t_sd / np.sqrt(max(ess, 10))
        assert abs(mean - t_mean) < tol, (row, mean, t_mean, tol)


def test_every_model_has_an_engine() -> None:
    assert {m for m, _ in cells()} == set(zoo.list_models())


def test_what_a_model_declares_of_an_engine_names_one_of_its_engines() -> None:
    declared = [(m, e) for m in zoo.list_models() for e in zoo.get_model(m).known]
    assert declared, "no model declares what an engine is known to do"
    stray = [(m, e) for m, e in declared if e not in zoo.get_model(m).engines]
    assert not stray, f"known= names engines the model does not have: {stray}"
    assert all(len(zoo.get_model(m).known[e].reason) > 10 for m, e in declared)
    with pytest.raises(ValueError, match="kind 'slowish' is not one of slow, not_mixing"):
        zoo.Known("slowish", "a reason")
    with pytest.raises(ValueError, match="error= gives the text"):
        zoo.Known("fails", "no mode")
