"""The same call with the same seed gives bit-identical draws, statistics and summaries: twice
in one process and once in a fresh process, for every engine that draws at random (built in,
a registered sampler and a registered engine), and for a run that compiles mid-run (the rule
reads counts, never the clock: inference/backend/policy.py).

The user's sampler is the README's (examples/mala.py). The calls and their digests are made by
``_digests`` below, which the subprocess runs too (``python -m tests.test_reproducible CASE``):
one definition of what is compared."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import runpy
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pyro
import pytest
import torch

import zoo
from zoo_inference.backend import has_compiler
from zoo_inference.engines import budget

HERE = Path(__file__).resolve().parent
EXAMPLE = HERE.parent / "examples" / "mala.py"
MODELS = ("beta_bernoulli", "three_coin")  # one continuous site; discrete sites beside continuous


def _prior_draws(ctx, *, num_samples: int = 300):
    """A user's engine: draws of every latent site from the prior, with torch's generator."""
    draws = []
    for _ in range(num_samples):
        trace = pyro.poutine.trace(ctx.model).get_trace(**ctx.data)
        draws.append({k: trace.nodes[k]["value"] for k in ctx.structure.latent})
    return zoo.Draws({k: torch.stack([d[k] for d in draws]) for k in draws[0]})


@contextlib.contextmanager
def _users_engines() -> Iterator[None]:
    """The README's sampler (examples/mala.py, registered as the example registers it) and a
    user's engine, forgotten afterwards (zoo.isolated)."""
    with zoo.isolated():
        runpy.run_path(str(EXAMPLE))
        zoo.register_engine("repeat_prior", _prior_draws, needs="latent")
        yield


def _cases() -> list[tuple[str, str, dict]]:
    """(model, engine, options): every engine that applies to the two models, at smoke size;
    the deterministic ones (closed forms, EM, Kalman) are left out. Inside _users_engines."""
    out = []
    for model in MODELS:
        entry = zoo.get_model(model)
        for engine in entry.engines:
            if engine in ("exact", "em", "enum_map") or engine.startswith("cavi"):
                continue
            out.append((model, engine, budget(engine, "smoke")))
    return out


def _digest(run: zoo.Run) -> str:
    """The run's draws, per-draw statistics and summary, hashed to the last bit."""
    assert run.ok, (run.engine, run.error)
    h = hashlib.sha256()
    for group in ("posterior", "sample_stats"):
        if group in run.idata.groups():
            ds = run.idata[group]
            for name in sorted(ds.data_vars):
                h.update(name.encode())
                h.update(np.ascontiguousarray(ds[name].values).tobytes())
    h.update(run.summary.to_csv().encode())
    return h.hexdigest()


def _digests(cases: list[tuple[str, str, dict]], *, compiling: bool = False) -> list[str]:
    out = []
    for model, engine, options in cases:
        run = zoo.run(model, engine, seed=5, **options)
        if compiling:  # the run must have switched to the compiled form part way
            assert run.diagnostics["compiled_from_iteration"] > 0, run.diagnostics
        out.append(_digest(run))
    return out


def _in_a_fresh_process(which: str) -> list[str]:
    # as a module of the tests package, from the repository: a script's own folder (tests/)
    # first on sys.path would make tests/zoo the package ``zoo``
    env = {**os.environ, "PYTHONPATH": str(HERE.parent)}
    out = subprocess.run(
        [sys.executable, "-m", "tests.test_reproducible", which],
        cwd=HERE.parent,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_every_random_engine_repeats_in_one_process_and_in_another():
    with _users_engines():
        cases = _cases()
        first, second = _digests(cases), _digests(cases)
    engines = {e for _, e, _ in cases}
    # every generic sampler and engine that draws, the user's two, and the models' own
    assert {"svi", "nuts", "chees", "hmc", "mams", "mh", "importance", "laplace"} <= engines
    assert {"pathfinder", "rejection", "inverse_cdf", "enum", "mala"} <= engines
    assert {"repeat_prior", "ip"} <= engines  # three_coin's imputation-posterior sampler
    differ = [c[:2] for c, a, b in zip(cases, first, second, strict=True) if a != b]
    assert not differ, f"twice in one process, different draws: {differ}"
    fresh = _in_a_fresh_process("engines")
    differ = [c[:2] for c, a, b in zip(cases, first, fresh, strict=True) if a != b]
    assert not differ, f"in a fresh process, different draws: {differ}"


COMPILING = [("eight_schools_noncentered", "nuts", {"num_samples": 30, "warmup": 30})]


def _compile_early(monkeypatch: pytest.MonkeyPatch | None = None) -> None:
    """The policy's thresholds at zero: a smoke-sized run compiles at its first check (10
    iterations in), so that the switch from the traced to the compiled form happens mid-run."""
    from zoo_inference.backend import policy

    for name in ("COMPILE_AFTER_S", "COMPILE_S", "COMPILE_S_PER_NODE"):
        if monkeypatch is None:
            setattr(policy, name, 0.0)
        else:
            monkeypatch.setattr(policy, name, 0.0)


@pytest.mark.skipif(not has_compiler(), reason="no C compiler for inductor")
def test_a_run_that_compiles_mid_run_repeats(monkeypatch):
    _compile_early(monkeypatch)
    cases = [(m, e, {**budget(e, "smoke"), **o}) for m, e, o in COMPILING]
    first, second = _digests(cases, compiling=True), _digests(cases, compiling=True)
    assert first == second, "a mid-run compile, twice in one process: different draws"
    assert _in_a_fresh_process("compiling") == first, "in a fresh process: different draws"


if __name__ == "__main__":  # the fresh process of the tests above
    if sys.argv[1] == "compiling":
        _compile_early()
        cases = [(m, e, {**budget(e, "smoke"), **o}) for m, e, o in COMPILING]
        print(json.dumps(_digests(cases, compiling=True)))
    else:
        with _users_engines():
            print(json.dumps(_digests(_cases())))
