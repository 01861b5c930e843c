"""The zoo's exact HMM log-likelihood against hmmlearn's ``score``, in one process.

    OMP_NUM_THREADS=1 python benchmarks/hmm_enum.py [--repeats 7]

Categorical emissions, T = 1000, K = 5 states, 8 symbols, random parameters: both compute
log p(x) from the same symbols and parameters (the zoo by the matrix-product form of the forward
algorithm, ``zoo_inference.algorithms.hmm.hmm_log_likelihood``; hmmlearn by its compiled
forward pass).
Checks that the two values agree, prints ``ratio_vs_hmmlearn: X`` (zoo time / hmmlearn time,
best of several repeats each), then how the zoo's time grows with T and with K, and the time
for a batch of 100 sequences (one call for the zoo; a loop over ``score`` for hmmlearn).
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import numpy as np
from hmmlearn import hmm as hl

from zoo_inference.algorithms.hmm import forward_backward, hmm_log_likelihood


def best_of(fn: Callable[[], object], repeats: int) -> float:
    """Best wall time of ``repeats`` calls (each repeated until it lasts 20 ms at least)."""
    fn()
    n, t = 1, 0.0
    while True:  # calls per timing, so short calls are timed over 20 ms
        start = time.perf_counter()
        for _ in range(n):
            fn()
        t = time.perf_counter() - start
        if t > 0.02:
            break
        n *= 2
    best = t / n
    for _ in range(repeats - 1):
        start = time.perf_counter()
        for _ in range(n):
            fn()
        best = min(best, (time.perf_counter() - start) / n)
    return best


def random_hmm(rng: np.random.Generator, K: int, M: int) -> tuple[np.ndarray, ...]:
    return (
        rng.dirichlet(np.ones(K)),
        rng.dirichlet(np.ones(K), size=K),
        rng.dirichlet(np.ones(M), size=K),
    )


def peer(pi: np.ndarray, A: np.ndarray, B: np.ndarray) -> hl.CategoricalHMM:
    m = hl.CategoricalHMM(n_components=len(pi), init_params="", params="")
    m.n_features = B.shape[1]
    m.startprob_, m.transmat_, m.emissionprob_ = pi, A, B
    return m


def zoo_loglik(pi: np.ndarray, A: np.ndarray, B: np.ndarray, x: np.ndarray) -> float:
    """What the zoo computes from the symbols: emission log-likelihoods, then log p(x)."""
    return hmm_log_likelihood(pi, A, np.log(B[:, x].T))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=7)
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    K, M, T = 5, 8, 1000
    pi, A, B = random_hmm(rng, K, M)
    x = rng.integers(0, M, T)
    model = peer(pi, A, B)
    ours, theirs = float(zoo_loglik(pi, A, B, x)), model.score(x[:, None])
    seq = forward_backward(pi, A, np.log(B[:, x].T)).log_likelihood
    print(f"log p(x): zoo {ours:.10f}  hmmlearn {theirs:.10f}  forward-backward {seq:.10f}")
    assert abs(ours - theirs) < 1e-8 * abs(theirs), (ours, theirs)
    assert abs(ours - seq) < 1e-8 * abs(seq), (ours, seq)
    t_zoo = best_of(lambda: zoo_loglik(pi, A, B, x), args.repeats)
    t_peer = best_of(lambda: model.score(x[:, None]), args.repeats)
    print(f"T={T} K={K} M={M}: zoo {t_zoo * 1e3:.3f} ms, hmmlearn {t_peer * 1e3:.3f} ms")
    print(f"ratio_vs_hmmlearn: {t_zoo / t_peer:.3f}")

    print("\ngrowth with T (K=5, M=8): T, zoo ms, hmmlearn ms, ratio")
    for T_ in (100, 1000, 10_000, 100_000):
        xs = rng.integers(0, M, T_)
        tz = best_of(lambda xs=xs: zoo_loglik(pi, A, B, xs), 3)
        tp = best_of(lambda xs=xs: model.score(xs[:, None]), 3)
        print(f"  {T_:>7d}  {tz * 1e3:9.3f}  {tp * 1e3:9.3f}  {tz / tp:6.2f}")

    print("\ngrowth with K (T=1000, M=8): K, zoo ms, hmmlearn ms, ratio")
    for K_ in (2, 4, 8, 16, 32, 64):
        p_, A_, B_ = random_hmm(rng, K_, M)
        m_ = peer(p_, A_, B_)
        tz = best_of(lambda p_=p_, A_=A_, B_=B_: zoo_loglik(p_, A_, B_, x), 3)
        tp = best_of(lambda m_=m_: m_.score(x[:, None]), 3)
        print(f"  {K_:>3d}  {tz * 1e3:9.3f}  {tp * 1e3:9.3f}  {tz / tp:6.2f}")

    print("\nbatch of 100 sequences (T=1000, K=5): one call against a loop over score")
    X = rng.integers(0, M, (100, T))
    log_b = np.log(B[:, X].transpose(1, 2, 0))  # (100, T, K)
    batch = hmm_log_likelihood(pi, A, log_b)
    loop = np.array([model.score(row[:, None]) for row in X])
    assert np.allclose(batch, loop, rtol=1e-8), np.abs(batch - loop).max()
    tz = best_of(lambda: hmm_log_likelihood(pi, A, np.log(B[:, X].transpose(1, 2, 0))), 3)
    tp = best_of(lambda: [model.score(row[:, None]) for row in X], 3)
    print(f"  zoo {tz * 1e3:.2f} ms, hmmlearn {tp * 1e3:.2f} ms, ratio {tz / tp:.2f}")


if __name__ == "__main__":
    main()
