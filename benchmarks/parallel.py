"""Speed-ups from using both cores, as ratios measured in one command:

- MCMC chains in worker processes (``parallel=True``) against one after another;
- a report's cells (model x engine) in worker processes (``workers=2``) against in-process.

    python benchmarks/parallel.py [--models a,b] [--repeats 2]

Each side runs ``repeats`` times; the minimum wall time is kept.
"""

from __future__ import annotations

import argparse
import tempfile
import time
import warnings

import zoo

warnings.filterwarnings("ignore")


def best(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def chains(model: str, repeats: int) -> tuple[float, float]:
    kw = dict(num_samples=500, warmup=500, num_chains=2, progress=False)
    seq = best(lambda: zoo.run(model, "nuts", parallel=False, **kw), repeats)
    par = best(lambda: zoo.run(model, "nuts", parallel=True, **kw), repeats)
    return seq, par


def report(models: list[str], repeats: int) -> tuple[float, float]:
    def go(workers: int) -> None:
        with tempfile.TemporaryDirectory() as out:
            zoo.report(models, out=out, profile="quick", workers=workers, progress=False)

    return best(lambda: go(1), repeats), best(lambda: go(2), repeats)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--chain-models", default="three_coin,beta_bernoulli")
    p.add_argument("--models", default="beta_bernoulli,three_coin,gaussian_mixture")
    p.add_argument("--repeats", type=int, default=2)
    args = p.parse_args()
    for model in args.chain_models.split(","):
        seq, par = chains(model, args.repeats)
        print(
            f"nuts 2 chains x 1000 on {model}: sequential {seq:.1f} s, parallel {par:.1f} s, "
            f"speed-up {seq / par:.2f}x",
            flush=True,
        )
    seq, par = report(args.models.split(","), args.repeats)
    print(
        f"quick report of {args.models}: 1 worker {seq:.1f} s, 2 workers {par:.1f} s, "
        f"speed-up {seq / par:.2f}x"
    )


if __name__ == "__main__":
    main()
