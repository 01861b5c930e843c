"""The Inference Gym's own log densities at a few points of each target the zoo writes
(zoo/models/gym.py), saved for tests/zoo/models/test_gym.py, which checks that the zoo's log
joint is equal to them (CI has no TensorFlow Probability).

    python benchmarks/gym_log_densities.py [--points 3] [--seed 0] \
        [--out tests/data/gym_log_densities.json] [--targets gym_german_credit]

Needs ``inference_gym`` and ``tensorflow-probability`` (the ``gym-reference`` extra; its NumPy
substrate: ``from inference_gym import using_numpy``; TFP 0.25's JAX substrate does not import
with JAX 0.10). Each point is the zoo's truth mean plus one truth sd times a standard normal
draw per element (positive sites by absolute value, the persistence clipped into (-1, 1)),
rounded to 8 significant digits; the Gym's ``unnormalized_log_prob`` (prior plus likelihood,
constrained space) is computed at the rounded point (in float64: the Gym's data are cast up,
except the ill-conditioned Gaussian's covariance, which the Gym rounds to float32 before its
Cholesky factor; tests/zoo/models/test_gym.py gives the zoo's model that rounded factor
there). Radon's Gym target is built from the zoo's vendored Minnesota data (the Gym reads it
through TensorFlow Datasets, which downloads): it checks the model's formula, and
tests/zoo/models/test_gym.py checks the data's preprocessing. So are German credit's: the
Gym's ``LogisticRegression`` and
``SparseLogisticRegression`` (the classes of its ``GermanCreditNumericLogisticRegression`` and
``GermanCreditNumericSparseLogisticRegression``) on the vendored data, prepared as the Gym
prepares it (``zoo_datasets.gym.german_credit_numeric``); the probit regression is the Gym's
``ProbitRegression`` on the same data. The Lorenz bridges are the Gym's ``LorenzSystem`` and
``LorenzSystemUnknownScales`` on its bridge data read into float64 (its ``ConvectionLorenzBridge``
classes hold the data in float32, and so compute). The log-return stochastic volatilities are the
Gym's ``VectorizedStochasticVolatilityLogSP500`` classes, non-centred: their points are the AR(1)
innovations ``std_log_volatility`` that make the drawn log volatilities.
"""

from __future__ import annotations

import argparse
import datetime
import json
from pathlib import Path
from typing import Any

import numpy as np

import zoo
from zoo_datasets import gym as gym_data

OUT = Path(__file__).parents[1] / "tests" / "data" / "gym_log_densities.json"
POSITIVE = {
    "innovation_noise_scale",
    "observation_noise_scale",
    "white_noise_shock_scale",
    "county_effect_scale",
    "log_radon_scale",
    "global_scale",
    "local_scales",
    "innovation_scale",
    "observation_scale",
    "amplitude",
    "length_scale",
}
NONCENTRED_SV = {"gym_stochastic_volatility_log", "gym_stochastic_volatility_log_small"}


def gym_target(name: str) -> Any:
    """The Gym's target (NumPy substrate) that zoo model ``name`` writes."""
    from inference_gym import using_numpy as g

    t = g.targets
    if name == "gym_banana":
        return t.Banana()
    if name == "gym_neals_funnel":
        return t.NealsFunnel()
    if name == "gym_ill_conditioned_gaussian":
        return t.IllConditionedGaussian()
    if name == "gym_brownian_motion":
        return t.BrownianMotionUnknownScalesMissingMiddleObservations(use_markov_chain=True)
    if name == "gym_item_response_theory":
        return t.SyntheticItemResponseTheory()
    if name == "gym_stochastic_volatility":
        return t.StochasticVolatilitySP500(use_markov_chain=True)
    if name == "gym_stochastic_volatility_small":
        return t.StochasticVolatilitySP500Small(use_markov_chain=True)
    if name == "gym_brownian_motion_known_scales":
        return t.BrownianMotionMissingMiddleObservations(use_markov_chain=True)
    if name in ("gym_lorenz_bridge", "gym_lorenz_bridge_unknown_scales"):
        # the Gym's own classes hold its data in float32; its generic classes on the same
        # values in float64 compute in float64
        d = gym_data.convection_lorenz_bridge()
        common = {
            "observed_values": d.observed_values,
            "observation_mask": ~np.isnan(d.observed_values),
            "observation_index": 0,
            "step_size": np.float64(d.step_size),
            "use_markov_chain": True,
        }
        if name == "gym_lorenz_bridge":
            return t.LorenzSystem(
                innovation_scale=np.float64(d.innovation_scale),
                observation_scale=np.float64(d.observation_scale),
                **common,
            )
        return t.LorenzSystemUnknownScales(**common)
    if name == "gym_eight_schools":
        return t.EightSchools()
    if name == "gym_log_gaussian_cox_process":
        return t.SyntheticLogGaussianCoxProcess()
    if name == "gym_stochastic_volatility_log":
        return t.VectorizedStochasticVolatilityLogSP500()
    if name == "gym_stochastic_volatility_log_small":
        return t.VectorizedStochasticVolatilityLogSP500Small()
    if name in ("gym_radon", "gym_radon_halfnormal"):
        d = zoo.get_model("gym_radon").load_data()
        return t.RadonContextualEffects(
            num_counties=int(d["num_counties"]),
            train_log_uranium=d["log_uranium"].numpy(),
            train_floor=d["floor"].numpy().astype(np.int64),
            train_county=d["county"].numpy(),
            train_floor_by_county=d["floor_by_county"].numpy(),
            train_log_radon=d["log_radon"].numpy(),
            prior_scale="halfnormal" if name == "gym_radon_halfnormal" else "uniform",
        )
    if name == "gym_german_credit":
        features, labels = gym_data.german_credit_numeric()
        return t.LogisticRegression(train_features=features, train_labels=labels.astype(np.int32))
    if name == "gym_german_credit_probit":
        features, labels = gym_data.german_credit_numeric()
        return t.ProbitRegression(train_features=features, train_labels=labels.astype(np.int32))
    if name == "gym_german_credit_sparse":
        features, labels = gym_data.german_credit_numeric()
        return t.SparseLogisticRegression(
            train_features=features, train_labels=labels.astype(np.int32)
        )
    raise KeyError(name)


TARGETS = tuple(m for m in zoo.list_models() if m.startswith("gym_"))  # every Gym target


def random_point(name: str, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Truth mean + truth sd * N(0, 1) per element, kept in each site's support."""
    truth = zoo.get_model(name).ground_truth()
    point = {}
    for site, mean in truth.mean.items():
        x = mean + truth.sd[site] * rng.standard_normal(mean.shape)
        if site in POSITIVE:
            x = np.abs(x)
        if site == "persistence_of_volatility":
            x = np.clip(x, -0.999, 0.999)
        point[site] = x
    if name in NONCENTRED_SV:  # the Gym's own parameterisation: the AR(1) innovations
        point["std_log_volatility"] = sv_innovations(point.pop("log_volatility"), point)
    return {
        k: np.vectorize(lambda v: float(f"{v:.8g}"), otypes=[float])(v) for k, v in point.items()
    }


def sv_innovations(h: np.ndarray, point: dict[str, np.ndarray]) -> np.ndarray:
    """The standardised innovations that make log volatilities ``h`` in the non-centred
    stochastic volatility (the inverse of ``zoo.models.gym.ar1_filter``)."""
    phi, mu = point["persistence_of_volatility"], point["mean_log_volatility"]
    x = h - mu
    return (
        np.concatenate([x[:1] * np.sqrt(1 - phi**2), x[1:] - phi * x[:-1]])
        / point["white_noise_shock_scale"]
    )


def gym_value(target: Any, name: str, point: dict[str, np.ndarray]) -> Any:
    """``point`` in the Gym's value structure (an array or its StructTuple)."""
    dtype = target.dtype
    if name == "gym_banana":
        return np.array([point["x0"], point["x1"]])
    if name == "gym_neals_funnel":
        return np.concatenate([np.atleast_1d(point["z"]), point["x"]])
    if name == "gym_ill_conditioned_gaussian":
        return point["x"]
    if name in ("gym_german_credit", "gym_german_credit_probit"):
        return point["weights"]
    if name == "gym_brownian_motion_known_scales":
        return point["locs"]
    if name == "gym_lorenz_bridge":
        return point["latents"]
    if name == "gym_lorenz_bridge_unknown_scales":  # the Gym's chain is its unnamed third part
        return type(dtype)(point["innovation_scale"], point["observation_scale"], point["latents"])
    if isinstance(dtype, dict):
        return {f: point[f] for f in dtype}
    return type(dtype)(**{f: point[f] for f in dtype._fields})


def main(argv: list[str] | None = None) -> None:
    from importlib.metadata import version

    import tensorflow_probability as tfp

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--points", type=int, default=3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", type=Path, default=OUT)
    p.add_argument(
        "--targets",
        default="",
        help="comma-separated targets to (re)compute, the file's other entries kept as they "
        "are (default: every target, the file written anew)",
    )
    args = p.parse_args(argv)
    names = [n.strip() for n in args.targets.split(",") if n.strip()] or list(TARGETS)
    unknown = sorted(set(names) - set(TARGETS))
    if unknown:
        p.error(f"unknown targets {unknown}; known: {list(TARGETS)}")
    rng = np.random.default_rng(args.seed)
    how = (
        f"benchmarks/gym_log_densities.py --points {args.points} --seed {args.seed}"
        + (f" --targets {','.join(names)}" if args.targets else "")
        + f", {datetime.date.today()}: inference_gym {version('inference_gym')} (NumPy "
        f"substrate), tensorflow-probability {tfp.__version__}; the Gym's "
        "unnormalized_log_prob in constrained space"
    )
    out: dict[str, Any] = {"how": how, "targets": {}}
    if args.targets and args.out.exists():  # the others' saved points stay; commands recorded
        out = json.loads(args.out.read_text(encoding="utf-8"))
        out["how"] += f"; then {how}"
    for name in names:
        target = gym_target(name)
        points, lps = [], []
        for _ in range(args.points):
            pt = random_point(name, rng)
            lp = float(np.asarray(target.unnormalized_log_prob(gym_value(target, name, pt))))
            points.append({k: v.tolist() for k, v in pt.items()})
            lps.append(lp)
        out["targets"][name] = {"points": points, "gym_log_prob": lps}
        print(name, lps, flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out) + "\n", encoding="utf-8")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
