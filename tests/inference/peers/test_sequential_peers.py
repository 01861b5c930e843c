"""The sequential models' peer engines: hmmlearn (``hmm``, ``gaussian_hmm``) and statsmodels
(``linear_gaussian_ssm``) on the same data as the zoo's own engines.

hmmlearn's Baum–Welch started where ``em`` starts runs through the same iterates: its
log-likelihood trace is em's, and since it takes its M-step before testing convergence it stops
one EM step further than em (its answer is em's answer plus one EM step, its log-likelihood
above em's by less than the stopping tolerance). At given parameters its ``score``, Viterbi path
and marginals are the zoo's forward–backward ones. statsmodels' local level, given the model's
x_0 ~ N(m0, P0), has the Kalman log-likelihood of the model at every (q, r).
"""

import importlib.util
import sys

import numpy as np
import pytest
import torch

import zoo
from tests.seeding import shifted
from zoo.models.sequential import SEED_A, SEED_B, SEED_PI
from zoo_inference.algorithms.kalman import kalman_local_level, local_level_mle

needs_hmmlearn = pytest.mark.skipif(
    importlib.util.find_spec("hmmlearn") is None, reason="hmmlearn is not installed (dev extra)"
)
SEED = {"pi": SEED_PI, "A": SEED_A, "B": SEED_B}
TOL = 1e-8  # both engines' default convergence tolerance (gain in log-likelihood per step)


def symbols(text: str) -> torch.Tensor:
    """The catalogue's symbols 1, 2, 3 as 0, 1, 2."""
    return torch.tensor([int(c) - 1 for c in text.split()])


def engine(model: str, name: str, data: dict | None, **options) -> zoo.Estimate:
    """The reference engine's own output (what ``zoo.run`` turns into a Run, here without the
    Run's summaries: 200 steps' states cost seconds of ArviZ; the runs themselves are the
    conformance suite's and the tests below)."""
    entry = zoo.get_model(model)
    return entry.references[name](**(entry.load_data() if data is None else data), **options)


def check_same_hill(model: str, names: tuple[str, ...], data: dict | None, **options) -> None:
    """hmmlearn and em from the same start: the same trace, hmmlearn one EM step further, and
    hmmlearn's answers at em's parameters equal to the zoo's forward–backward."""
    em = engine(model, "em", data, **options)
    peer = engine(model, "hmmlearn", data, **options)
    assert peer.extras["converged"]
    ours, theirs = em.values, peer.values
    trace, peer_trace = em.traces["log_likelihood"], peer.traces["log_likelihood"]
    # stopped on the tolerance, after the same steps
    assert abs(trace[-1] - trace[-2]) < TOL and len(peer_trace) == len(trace) + 1
    np.testing.assert_allclose(peer_trace[:-1], trace, rtol=0, atol=1e-9)
    # the same log-likelihood: one more step gains less than the step that stopped em
    assert 0 <= peer.log_evidence - em.log_evidence < TOL
    assert peer.log_evidence == pytest.approx(peer_trace[-1], abs=1e-12)
    # the same parameters: within sqrt(tol) of em's, and exactly em's next step
    start = {k: ours[k] for k in names}
    step = engine(model, "em", data, init=start, max_iter=1).values
    for k in names:
        np.testing.assert_allclose(theirs[k], ours[k], rtol=0, atol=np.sqrt(TOL), err_msg=k)
        np.testing.assert_allclose(theirs[k], step[k], rtol=0, atol=1e-9, err_msg=k)
    # hmmlearn's score, Viterbi path and marginals at em's parameters are the zoo's
    at = engine(model, "hmmlearn", data, params=start)
    assert at.log_evidence == pytest.approx(em.log_evidence, rel=0, abs=1e-9)
    assert not at.traces and at.extras["converged"] is None
    np.testing.assert_array_equal(at.extras["viterbi"], em.extras["viterbi"])
    np.testing.assert_allclose(at.extras["marginals"], em.extras["marginals"], atol=1e-10)
    assert at.extras["viterbi_log_joint"] == pytest.approx(em.extras["viterbi_log_joint"])
    np.testing.assert_array_equal(at.extras["posterior_decoding"], em.extras["posterior_decoding"])
    n = len(em.extras["viterbi"])
    assert [at.values[f"z_{t}"] for t in range(n)] == list(em.extras["viterbi"])


# ------------------------------------------------------------------------------------- hmm

HMM = ("pi", "A", "B")


@needs_hmmlearn
@pytest.mark.parametrize(
    "x, init",
    [(None, None), (symbols("3 1 2 3"), None), (symbols("3 1 2 3"), SEED)],
    ids=["default", "3123", "3123-from-seed-params"],
)
def test_hmm_hmmlearn_climbs_the_same_hill_as_em(x, init):
    data = None if x is None else {"x": x, "K": 2, "M": 3}
    check_same_hill("hmm", HMM, data, **({} if init is None else {"init": init}))


@needs_hmmlearn
def test_hmm_hmmlearn_one_baum_welch_step_on_313():
    """The catalogue's step: from the seed's parameters one iteration raises p("3 1 3") from
    0.026264 to 0.168543 (a step cut by max_iter: both engines stop at the same parameters)."""
    data = {"x": symbols("3 1 3"), "K": 2, "M": 3}
    em = zoo.run("hmm", "em", data=data, init=SEED, max_iter=1)
    peer = zoo.run("hmm", "hmmlearn", data=data, init=SEED, max_iter=1)
    before, after = peer.traces["log_likelihood"]
    assert np.exp(before) == pytest.approx(0.026264, abs=1e-12)
    assert np.exp(after) == pytest.approx(0.168543, abs=1e-6)
    assert peer.log_evidence == pytest.approx(em.log_evidence, abs=1e-12)
    for k in HMM:
        np.testing.assert_allclose(peer.extras["estimate"][k], em.extras["estimate"][k], atol=1e-12)


@needs_hmmlearn
def test_hmm_hmmlearn_decodings_on_3123():
    """At the seed's parameters the peer shows what the catalogue says: Viterbi HHHH, posterior
    decoding HCHH, p = 0.01078208."""
    data = {"x": symbols("3 1 2 3"), "K": 2, "M": 3}
    run = zoo.run("hmm", "hmmlearn", data=data, params=SEED)
    assert np.exp(run.log_evidence) == pytest.approx(0.01078208, abs=1e-12)
    assert list(run.extras["viterbi"]) == [0, 0, 0, 0]
    assert list(run.extras["posterior_decoding"]) == [0, 1, 0, 0]
    assert np.exp(run.extras["viterbi_log_joint"]) == pytest.approx(0.00351232, abs=1e-12)


# ---------------------------------------------------------------------------- gaussian_hmm

GAUSSIAN = ("pi", "A", "mu", "sigma")


@needs_hmmlearn
@pytest.mark.parametrize("which", ["default", "synthetic"])
def test_gaussian_hmm_hmmlearn_climbs_the_same_hill_as_em(which):
    data = None if which == "default" else zoo.get_model("gaussian_hmm").simulate(shifted(11))[0]
    check_same_hill("gaussian_hmm", GAUSSIAN, data)


@needs_hmmlearn
def test_gaussian_hmm_hmmlearn_relabels_by_increasing_mean():
    """Started with the means in decreasing order, hmmlearn's states come back in the model's
    order, the path and marginals with them, at em's answer from the same start."""
    entry = zoo.get_model("gaussian_hmm")
    x = entry.load_data()["x"].double().numpy()
    start = {
        "pi": np.array([0.3, 0.7]),
        "A": np.array([[0.8, 0.2], [0.3, 0.7]]),
        "mu": np.quantile(x, [0.75, 0.25]),
        "sigma": np.full(2, x.std()),
    }
    em = zoo.run(entry, "em", init=start)
    peer = zoo.run(entry, "hmmlearn", init=start)
    est = peer.extras["estimate"]
    assert np.all(np.diff(est["mu"]) > 0)
    for k in GAUSSIAN:
        np.testing.assert_allclose(est[k], em.extras["estimate"][k], atol=np.sqrt(TOL))
    assert peer.log_evidence == pytest.approx(em.log_evidence, abs=TOL)
    np.testing.assert_array_equal(peer.extras["viterbi"], em.extras["viterbi"])
    np.testing.assert_allclose(peer.extras["marginals"], em.extras["marginals"], atol=1e-4)


# ---------------------------------------------------------------------------- bad input


@pytest.mark.parametrize("model", ["hmm", "gaussian_hmm"])
def test_missing_hmmlearn_is_one_clear_error(model, monkeypatch):
    monkeypatch.setitem(sys.modules, "hmmlearn", None)  # `import hmmlearn` raises ImportError
    monkeypatch.setitem(sys.modules, "hmmlearn.hmm", None)
    with pytest.raises(zoo.ZooError, match=r"needs the hmmlearn package.*pip install hmmlearn"):
        zoo.run(model, "hmmlearn")


@needs_hmmlearn
def test_hmmlearn_takes_a_start_or_parameters_not_both():
    with pytest.raises(zoo.ZooError, match="not both"):
        zoo.run("hmm", "hmmlearn", init=SEED, params=SEED)
    with pytest.raises(zoo.ZooError, match=r"params\['A'\] has shape"):
        zoo.run("hmm", "hmmlearn", params={**SEED, "A": np.eye(3)})
    with pytest.raises(zoo.ZooError, match=r"params\['mu'\] must be increasing"):
        params = {"pi": [0.5, 0.5], "A": np.eye(2), "mu": [1.0, 0.0], "sigma": [1.0, 1.0]}
        zoo.run("gaussian_hmm", "hmmlearn", params=params)


# --------------------------------------------------------------------- linear_gaussian_ssm

ORACLE = {"y": np.array([1.0, 2.0, 0.5]), "t": np.arange(1.0, 4.0), "m0": 0.0, "P0": 1.0}
LEVEL = ("filtered_mean", "filtered_var", "predicted_mean", "predicted_var", "smoothed_mean")


@pytest.mark.parametrize(
    "which, q, r",
    [
        ("oracle", 0.5, 1.0),
        ("oracle", 0.01, 3.0),
        ("nile", 1469.1, 15099.0),  # Durbin & Koopman's estimates
        ("nile", 10.0, 3.0),  # far from them: the likelihood's tails too
    ],
)
def test_statsmodels_llf_is_the_kalman_log_likelihood(which, q, r):
    entry = zoo.get_model("linear_gaussian_ssm")
    data = ORACLE | {"scale": 1.0} if which == "oracle" else None
    d = entry.load_data() if data is None else data
    y = np.asarray(d["y"], dtype=float)
    k = kalman_local_level(y, q, r, d["m0"], d["P0"])
    run = zoo.run(entry, "statsmodels", data=data, q=q, r=r)
    assert run.ok, run.error
    assert run.log_evidence == pytest.approx(float(k.log_likelihood), rel=1e-6)
    assert run.extras["estimate"] == {"q": q, "r": r}
    if which == "oracle" and q == 0.5:
        assert run.log_evidence == pytest.approx(-4.776656, abs=1e-6)
        np.testing.assert_allclose(
            run.extras["filtered_mean"], [0.6, 1.333333, 0.911765], atol=1e-6
        )
    for name in LEVEL:  # the same filter and smoother, step for step
        ours = getattr(k, name)
        np.testing.assert_allclose(run.extras[name], ours, rtol=1e-8, atol=1e-10, err_msg=name)


@pytest.mark.parametrize("which", ["oracle", "nile"])
def test_statsmodels_mle_is_local_level_mle(which):
    """Two optimisers on one likelihood: the same maximum (statsmodels' tight L-BFGS a hair
    higher), the same (q, r) within the flat ridge's slack; on the oracle's three points the
    maximum is on the boundary q = 0."""
    entry = zoo.get_model("linear_gaussian_ssm")
    data = ORACLE | {"scale": 1.0} if which == "oracle" else None
    d = entry.load_data() if data is None else data
    y = np.asarray(d["y"], dtype=float)
    q, r = local_level_mle(y, d["m0"], d["P0"])
    best = float(kalman_local_level(y, q, r, d["m0"], d["P0"]).log_likelihood)
    run = zoo.run(entry, "statsmodels", data=data)
    assert run.ok, run.error
    assert run.extras["converged"]
    est = run.extras["estimate"]
    assert run.log_evidence == pytest.approx(best, abs=1e-6)
    assert run.log_evidence >= best - 1e-8
    at = float(kalman_local_level(y, est["q"], est["r"], d["m0"], d["P0"]).log_likelihood)
    assert run.log_evidence == pytest.approx(at, rel=1e-10)
    assert est["r"] == pytest.approx(r, rel=1e-3)
    if which == "oracle":
        assert est["q"] < 1e-6 and q < 1e-6
    else:
        assert est["q"] == pytest.approx(q, rel=1e-3)
