"""NUTS (zoo_inference.samplers.nuts, nuts_tree): the tree's checkpoints and typed state, the
asynchronous chains, agreement with Pyro's NUTS, same seed same numbers."""

from __future__ import annotations

import dataclasses
from typing import Annotated

import numpy as np
import pytest
import torch

import zoo
from tests.foreign_corpus import CORPUS
from tests.sampling import PaceRecorder
from tests.seeding import shifted
from zoo_inference import samplers
from zoo_inference.samplers.base import PackedState
from zoo_inference.samplers.nuts import nuts_sample
from zoo_inference.samplers.nuts_tree import TreeState, checkpoints
from zoo_inference.samplers.windows import first_window_start


def test_checkpoint_indices_follow_their_definition():
    """Leaf n's U-turn checks run over the stored momenta hi..lo: hi = popcount(n >> 1) and
    hi - lo + 1 = the number of trailing one bits of n."""
    for leaf in range(1024):
        lo, hi = checkpoints(leaf)
        assert hi == bin(leaf >> 1).count("1")
        trailing = 0
        while (leaf >> trailing) & 1:
            trailing += 1
        assert hi - lo + 1 == trailing


@dataclasses.dataclass(slots=True)
class _Record(PackedState):  # kinds interleaved on purpose: packing groups them
    x: Annotated[torch.Tensor, "vector"]
    done: Annotated[torch.Tensor, "flag"]
    v: Annotated[torch.Tensor, "vector"]


def test_a_state_record_packs_by_the_kinds_of_its_fields():
    """The packing is derived from the fields' annotations: a new field is one line, and the
    packed tensors round-trip to the same record."""
    assert _Record.layout() == (("x", "v"), ("done",)) and _Record.kinds() == ("vector", "flag")
    st = _Record.zeros({"vector": ((3, 2), torch.float64), "flag": ((3,), torch.bool)})
    st.x, st.v = torch.randn(3, 2, dtype=torch.float64), torch.randn(3, 2, dtype=torch.float64)
    st.done = torch.tensor([True, False, True])
    packed = st.pack()
    assert [t.shape for t in packed] == [(2, 3, 2), (1, 3)]
    back = _Record.unpack(packed)
    assert torch.equal(back.x, st.x) and torch.equal(back.v, st.v)
    assert torch.equal(back.done, st.done)
    with pytest.raises(ValueError, match="_Record packs into 2 tensors, not 1"):
        _Record.unpack(packed[:1])
    with pytest.raises(ValueError, match=r"no shape given for the kinds \['flag'\]"):
        _Record.zeros({"vector": ((3, 2), torch.float64)})

    @dataclasses.dataclass(slots=True)
    class Unannotated(PackedState):
        y: torch.Tensor

    with pytest.raises(TypeError, match=r"Unannotated.y: annotate it Annotated\[torch.Tensor"):
        Unannotated.layout()
    # NUTS's tree: 36 named fields in five tensors, one a shape and dtype
    assert sum(map(len, TreeState.layout())) == 36
    assert TreeState.kinds() == ("vector", "scalar", "count", "flag", "checkpoints")


def _pair(name, **kw):
    zoo_run = zoo.run(name, "nuts", seed=3, **kw)
    # Pyro's NUTS with its JIT-compiled potential: the same sampler, 2-3 times faster here
    pyro_run = zoo.run(name, "pyro_nuts", seed=4, jit=True, **kw)
    return zoo_run, pyro_run


def _agree_pair(a, b, sites, k=4.5):
    """Two samplers' means within k combined Monte-Carlo standard errors."""
    for site in sites:
        ra, rb = a.summary.loc[site], b.summary.loc[site]
        se = np.hypot(ra["sd"] / np.sqrt(ra["ess_bulk"]), rb["sd"] / np.sqrt(rb["ess_bulk"]))
        assert abs(ra["mean"] - rb["mean"]) <= k * se, (site, ra["mean"], rb["mean"])


def test_lockstep_nuts_agrees_with_pyros_nuts_on_an_enumerated_mixture():
    a, b = _pair("three_coin", num_samples=150, warmup=150, num_chains=2)
    assert b.diagnostics["backend"] == "pyro"
    _agree_pair(a, b, ["pi", "p", "q"])


@pytest.mark.slow  # 20 s; the enumerated mixture above is the default run's check against Pyro
def test_lockstep_nuts_agrees_with_pyros_nuts_on_eight_schools():
    a, b = _pair("eight_schools_noncentered", num_samples=250, warmup=250, num_chains=2)
    _agree_pair(a, b, ["mu", "tau", "eta[0]"])


def test_lockstep_nuts_on_a_foreign_model_that_does_not_broadcast(registry):
    case = next(c for c in CORPUS if c.name == "conj_linreg_matmul")
    zoo.register(case.name, model=case.model, data=case.data)
    # 8 chains, not the default 32: the density runs chain by chain here (the model does not
    # broadcast), so each chain is its own cost (32 chains took 20 s of a 2-core test run)
    run = zoo.run(case.name, "nuts", num_samples=300, warmup=300, num_chains=8, seed=shifted(5))
    post = run.idata.posterior
    for site, mean in case.mean.items():
        if site not in post:
            continue
        draws = post[site].values.reshape((-1, *np.shape(mean)))
        ess = run.diagnostics["min_ess_bulk"]
        se = np.asarray(case.sd[site]) / np.sqrt(ess)
        assert np.all(np.abs(draws.mean(0) - mean) <= 4.5 * se), site


def test_same_seed_same_numbers():
    kw = dict(num_samples=50, warmup=50, num_chains=3)
    a = zoo.run("eight_schools_noncentered", "nuts", seed=9, **kw)
    b = zoo.run("eight_schools_noncentered", "nuts", seed=9, **kw)
    c = zoo.run("eight_schools_noncentered", "nuts", seed=10, **kw)
    np.testing.assert_array_equal(a.idata.posterior["mu"], b.idata.posterior["mu"])
    assert not np.array_equal(a.idata.posterior["mu"], c.idata.posterior["mu"])


def test_asynchronous_nuts_wastes_no_call_and_samples_a_gaussian():
    """Chains do not wait for each other: the density calls equal the largest per-chain count
    of leapfrog steps (not the sum over draws of the batch's longest tree), and the draws of a
    correlated Gaussian have its moments within Monte-Carlo error (per-chain warmup included)."""
    cov = torch.tensor([[1.0, 0.9], [0.9, 1.0]], dtype=torch.float64)
    prec = torch.linalg.inv(cov)

    def density(q):
        return -0.5 * ((q @ prec) * q).sum(-1), -(q @ prec)

    B, n = 8, 400
    gen = torch.Generator().manual_seed(shifted(3))
    q = torch.randn(B, 2, generator=gen, dtype=torch.float64) * 3
    logp, grad = density(q)
    step = torch.full((B,), 0.2, dtype=torch.float64)
    draws, stats, calls, *_ = nuts_sample(
        density, q, logp, grad, step, torch.ones(B, 2, dtype=torch.float64), gen, n
    )
    steps = stats["n_steps"].sum(1)
    assert calls == int(steps.max())  # no warmup: every call advances the slowest chain
    assert calls < 0.8 * stats["n_steps"].max(0).values.sum()  # lockstep would make more
    samples = samplers.nuts(density, q, num_samples=n, warmup=300, gen=gen)
    x = samples.theta.reshape(-1, 2).numpy()
    ess = len(x) / 4  # conservative: NUTS on this target gives about one draw in two
    assert np.all(np.abs(x.mean(0)) < 5 / np.sqrt(ess))
    c = np.cov(x.T)  # sd of a sample covariance: sqrt((s12^2 + s11 s22) / n), variance sqrt(2/n)
    assert abs(c[0, 1] - 0.9) < 5 * np.sqrt(1.81 / ess)
    assert np.all(np.abs(np.diag(c) - 1) < 5 * np.sqrt(2 / ess))


def test_nuts_runs_with_a_warmup_too_short_for_windows():
    """Stan's windows need 20 warmup iterations; fewer adapt the step size only, and the
    draws still follow the posterior: Beta(8, 4)'s mean within 5 Monte-Carlo errors."""
    run = zoo.run(
        "beta_bernoulli", "nuts", num_samples=300, warmup=15, num_chains=1, seed=shifted(0)
    )
    assert run.ok, run.error
    truth = zoo.get_model("beta_bernoulli").ground_truth()
    row = run.summary.loc["p"]
    assert abs(row["mean"] - truth.mean["p"]) < 5 * truth.sd["p"] / np.sqrt(row["ess_bulk"])


def test_nuts_weighs_its_compile_from_the_first_metric_window():
    """NUTS asks the density whether to compile only from the end of warmup's fast initial
    buffer (75 iterations of a 200-iteration warmup) on, the pace counted from there: in that
    buffer the trees run deep while the step size settles under a unit metric, and would
    overstate the run."""
    recording = PaceRecorder()
    gen = torch.Generator().manual_seed(shifted(0))
    q = torch.randn(4, 2, generator=gen, dtype=torch.float64)
    samplers.nuts(recording, q, num_samples=20, warmup=200, gen=gen)
    events = recording.events
    start = first_window_start(200)
    assert start == 75 and events[0] == "restart"
    ticks = events[1:]
    assert ticks and all(t[1] == 200 + 20 - start and t[0] >= 0 for t in ticks), ticks
    assert ticks[-1] == (200 + 20 - start - 1, 200 + 20 - start)
