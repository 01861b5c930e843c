"""posteriordb's reference posteriors: each translation's log density is Stan's, up to a constant,
at the reference draws (Stan's values saved by benchmarks/stan_log_densities.py, so no Stan is
needed here), its gradient on the unconstrained space is Stan's, and its truth is the reference."""

from __future__ import annotations

import json

import numpy as np
import pyro
import pyro.poutine as poutine
import pytest
import torch
from torch.distributions import biject_to

import zoo
from tests.paths import DATA
from zoo.models.posteriordb.base import NUTS_FAILS
from zoo_datasets.posteriordb import posteriordb_reference, vendored_posteriors
from zoo_inference.reference import default_dtype

STAN = {
    p.stem: json.loads(p.read_text()) for p in sorted((DATA / "stan_log_densities").glob("*.json"))
}
MODELS = sorted(m for m in zoo.list_models() if m.startswith("pdb_"))
MAX_SD = 1e-8  # of (Pyro's log joint - Stan's log density) over the saved draws


def zoo_name(posterior: str) -> str:
    return "pdb_" + posterior.replace("-", "_")


def log_joint(name: str, values: dict, data: dict | None = None, grad: bool = False):
    """The zoo model's log joint at Stan's parameter ``values`` (float64), and with ``grad`` the
    log joint plus the log-Jacobian of Stan's unconstraining transforms and its gradient with
    respect to the unconstrained parameters, in Stan's order (the sites' declaration order)."""
    entry = zoo.get_model(name)
    with default_dtype(torch.float64):
        data = entry.load_data() if data is None else data
        given = {k: torch.as_tensor(np.asarray(v, dtype=float)) for k, v in values.items()}
        with pyro.validation_enabled(False):
            at = poutine.trace(poutine.condition(entry.model, data=given)).get_trace(**data)
        sites = [(k, s["fn"]) for k, s in at.nodes.items() if s["type"] == "sample" and k in given]
        point, us, logdet = {}, [], torch.zeros((), dtype=torch.float64)
        for site, fn in sites:
            x = given[site]
            t = biject_to(fn.support)
            u = t.inv(x).detach().requires_grad_(grad)
            x = t(u)
            logdet = logdet + t.log_abs_det_jacobian(u, x).sum()
            point[site], us = x, [*us, u]
        with pyro.validation_enabled(False):
            tr = poutine.trace(poutine.condition(entry.model, data=point)).get_trace(**data)
        lp = tr.log_prob_sum()
        if not grad:
            return float(lp)
        g = torch.autograd.grad(lp + logdet, us)
        return float(lp), np.concatenate([gi.reshape(-1).numpy() for gi in g])


def test_every_posteriordb_model_has_stans_log_density_and_a_reference() -> None:
    assert MODELS == sorted(zoo_name(p) for p in vendored_posteriors())
    assert sorted(zoo_name(p) for p in STAN) == MODELS
    assert all({"pystan", "httpstan"} <= set(saved["versions"]) for saved in STAN.values())


@pytest.mark.parametrize("posterior", sorted(STAN))
def test_log_density_is_stans_up_to_a_constant(posterior: str) -> None:
    """At 20 reference draws, log joint - Stan's log density has an sd below 1e-8 (Stan drops
    the constants of its ``~`` statements); the gradient with respect to the unconstrained
    parameters, the transforms' Jacobian included, is Stan's."""
    diffs = []
    for row in STAN[posterior]["points"]:
        lp, grad = log_joint(zoo_name(posterior), row["values"], grad=True)
        diffs.append(lp - row["log_density"])
        np.testing.assert_allclose(grad, row["gradient_adjusted"], rtol=1e-8, atol=1e-8)
    assert len(diffs) >= 10
    assert np.std(diffs) < MAX_SD, np.std(diffs)


def test_a_broken_translation_fails_the_check() -> None:
    """sigma's Cauchy scale at 3 instead of Stan's 2.5: the difference is no longer constant."""
    posterior = "kidiq-kidscore_momiq"
    with default_dtype(torch.float64):
        data = zoo.get_model(zoo_name(posterior)).load_data() | {"sigma_scale": 3.0}
    diffs = [
        log_joint(zoo_name(posterior), row["values"], data) - row["log_density"]
        for row in STAN[posterior]["points"]
    ]
    assert np.std(diffs) > 1e3 * MAX_SD


@pytest.mark.parametrize("name", MODELS)
def test_truth_is_the_reference_on_its_own_data_only(name: str) -> None:
    entry = zoo.get_model(name)
    ref = next(posteriordb_reference(p) for p in vendored_posteriors() if zoo_name(p) == name)
    truth = entry.ground_truth()
    assert truth is not None
    rows = truth.rows()
    for element, values in ref["parameters"].items():
        site, _, index = element.partition("[")
        row = f"{site}[{int(index.rstrip(']')) - 1}]" if index else site
        assert rows[row] == (pytest.approx(values["mean"]), pytest.approx(values["sd"]))
        # the reference's own moments agree with each other: E[x^2] = mean^2 + var (ddof 1)
        n = ref["chains"] * ref["draws_per_chain"]
        assert values["mean_sq"] == pytest.approx(
            values["mean"] ** 2 + values["sd"] ** 2 * (n - 1) / n, rel=1e-9
        )
        assert values["q05"] < values["q50"] < values["q95"]
        assert all(values[k] > 0 for k in values if k.endswith("_mcse"))
        assert values["r_hat"] < 1.01 and values["ess_bulk"] > 1000
    other = entry.load_data()
    first = next(k for k, v in other.items() if torch.is_tensor(v) and v.is_floating_point())
    other[first] = other[first] + 1.0
    assert entry.ground_truth(other) is None


def nuts_cases() -> list:
    """Every posterior, those whose registration says nuts fails on it expected to fail."""
    return [
        pytest.param(m, marks=pytest.mark.xfail(reason=NUTS_FAILS[m])) if m in NUTS_FAILS else m
        for m in MODELS
    ]


@pytest.mark.slow
@pytest.mark.parametrize("name", nuts_cases())
def test_nuts_agrees_with_the_reference(name: str) -> None:
    """Every mean within 5 combined standard errors (the reference's and the run's)."""
    run = zoo.run(name, "nuts", seed=0, progress=False)
    assert run.status == "ok", run.reasons
    truth = zoo.get_model(name).ground_truth()
    for row, (mean, sd) in truth.rows().items():
        site, _, index = row.partition("[")
        idx = int(index.rstrip("]")) if index else ()
        se_ref = float(np.asarray(truth.mean_se[site])[idx])
        se_run = float(run.summary.loc[row, "sd"]) / np.sqrt(run.summary.loc[row, "ess_bulk"])
        z = (run.summary.loc[row, "mean"] - mean) / np.hypot(se_ref, se_run)
        assert abs(z) < 5, (row, z)
        assert run.summary.loc[row, "sd"] == pytest.approx(sd, rel=0.1)


def test_suites_partition_the_zoo(capsys) -> None:
    from zoo.cli import main

    suites = {s: zoo.list_models(suite=s) for s in ("seeds", "gym", "posteriordb", "user")}
    assert suites["posteriordb"] == MODELS
    assert suites["gym"] and all(m.startswith("gym_") for m in suites["gym"])
    assert "beta_bernoulli" in suites["seeds"] and not suites["user"]
    assert sorted(m for ms in suites.values() for m in ms) == zoo.list_models()
    with pytest.raises(ValueError, match="unknown suite 'stan'; the suites are seeds, gym"):
        zoo.list_models(suite="stan")
    assert main(["list", "--suite", "posteriordb"]) == 0
    listed = [line.split()[0] for line in capsys.readouterr().out.splitlines() if line[0] != " "]
    assert listed == MODELS
