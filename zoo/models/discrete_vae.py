"""A VAE with a discrete latent and the gradient estimators that train it (seed 000 §3.4)."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import numpy as np
import pyro
import pyro.distributions as dist
import torch
from pyro.infer import ELBO, Trace_ELBO, TraceEnum_ELBO, TraceGraph_ELBO

import zoo
from zoo_datasets import load_digits_split
from zoo_inference.algorithms.gradients import gradient_draws as generic_gradient_draws
from zoo_inference.algorithms.gradients import gradient_statistics
from zoo_inference.algorithms.muprop import MuPropELBO

# The estimators of the seed's §3.4, each a way to differentiate E_q[f(z)] over a discrete z.
ESTIMATORS = ("enum", "reinforce", "baseline", "nvil", "muprop", "gumbel")
HIDDEN = 32  # the encoder's hidden units
BASELINE_HIDDEN = 16  # the NVIL baseline network's hidden units
BASELINE_BETA = 0.9  # the decaying average's memory (Pyro's default; seed notes M20)
GRADIENT_DRAWS = 100  # gradient draws per estimate of an estimator's variance
ENCODER = ("encoder_W0", "encoder_b0", "encoder_W1", "encoder_b1")


# --------------------------------------------------------------------------------- data


def binarised_digits(seed: int = 0) -> dict[str, Any]:
    """scikit-learn's digits as binary images: ``load_digits_split()`` (1500 training, 297 fixed
    held-out images of 8x8 grey levels in [0, 1]) thresholded at 0.5, so each pixel is a
    Bernoulli observation; K = 10 latent classes. The split is fixed; ``seed`` is ignored."""
    d = load_digits_split()
    f32: dict[str, Any] = dict(dtype=torch.float32)
    return {
        "x": torch.tensor(d["x_train"] > 0.5, **f32),
        "x_test": torch.tensor(d["x_test"] > 0.5, **f32),
        "K": 10,
    }


def check_images(x: torch.Tensor, K: int, estimator: str) -> None:
    """Images (N, D), K >= 2 classes and a known estimator, or a clear error."""
    if x.ndim != 2:
        raise zoo.ZooError(f"x must be a matrix of binary images (N, D), got {tuple(x.shape)}")
    if isinstance(K, bool) or not (isinstance(K, int) and K >= 2):
        raise zoo.ZooError(f"K (the number of latent classes) must be an integer >= 2, got {K!r}")
    if estimator not in ESTIMATORS:
        raise zoo.ZooError(f"estimator must be one of {list(ESTIMATORS)}, got {estimator!r}")


def default_temperature(K: int) -> float:
    """The seed's advice for the relaxation, tau <= 1/(K - 1) (000 L1040), at its bound."""
    return 1.0 / (K - 1)


# ----------------------------------------------------------------------------- networks


def mlp(prefix: str, sizes: Sequence[int], x: torch.Tensor, out_scale: float = 1.0) -> torch.Tensor:
    """A tanh network whose weights are ``pyro.param`` sites ``{prefix}_W{i}``, ``{prefix}_b{i}``
    (created on first use: N(0, 1/fan_in) weights, the last layer scaled by ``out_scale``)."""
    h = x
    last = len(sizes) - 2
    for i, (a, b) in enumerate(zip(sizes[:-1], sizes[1:], strict=False)):
        s = (out_scale if i == last else 1.0) / math.sqrt(a)

        def weights(a: int = a, b: int = b, s: float = s) -> torch.Tensor:
            return s * torch.randn(a, b)

        def biases(b: int = b) -> torch.Tensor:
            return torch.zeros(b)

        W = pyro.param(f"{prefix}_W{i}", weights)
        c = pyro.param(f"{prefix}_b{i}", biases)
        h = h @ W + c
        if i < last:
            h = torch.tanh(h)
    return h


def encoder_logits(x: torch.Tensor, K: int) -> torch.Tensor:
    """log q(z = k | x) up to a constant: one hidden tanh layer, started near uniform."""
    return mlp("encoder", (x.shape[-1], HIDDEN, K), x, out_scale=0.1)


def decoder_logits(onehot: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """The pixels' log-odds given a (one-hot or relaxed) class vector: theta = onehot W + b,
    the rows of W the classes' images, b started at the training images' mean log-odds."""
    W = pyro.param("decoder_W", lambda: torch.randn(onehot.shape[-1], x.shape[-1]))
    b = pyro.param("decoder_b", lambda: torch.logit(x.mean(0).clamp(0.02, 0.98)))
    return onehot @ W + b


# -------------------------------------------------------------------------------- model


@zoo.register(
    data=binarised_digits,
    engines=("svi",),
    params=(),
    engine_options={"svi": {"elbo": "enum", "lr": 0.02, "subsample_size": 100}},
    variants={
        "svi_reinforce": ("svi", {"elbo": "graph"}, {"estimator": "reinforce"}),
        "svi_baseline": ("svi", {"elbo": "graph"}, {"estimator": "baseline"}),
        "svi_nvil": ("svi", {"elbo": "graph"}, {"estimator": "nvil"}),
        "svi_muprop": ("svi", {"elbo": "muprop"}, {"estimator": "muprop"}),
        "svi_gumbel": ("svi", {"elbo": "trace"}, {"estimator": "gumbel"}),
    },
    not_applicable=(
        "the networks are parameters that only SVI fits: enumerating or importance-sampling the "
        "1500 z_n would score them under untrained networks (exact enumeration is the svi "
        "engine's estimator here)"
    ),
    figures={
        "estimators": {
            "label": "estimator",
            "variance": "grad_variance",
            "about": "the encoder's gradient (one latent draw per training image)",
            "scores": {"train ELBO": "train_elbo", "held-out ELBO": "heldout_elbo"},
        }
    },
    seed_ref="000 §3.4 (L958–1094)",
    math=[
        r"z_n \sim \mathrm{Categorical}(1/K, \ldots, 1/K), \quad K = 10",
        r"x_{nd} \mid z_n \sim \mathrm{Bernoulli}(\sigma(\theta_{z_n d})),"
        r" \quad \theta = \mathrm{onehot}(z)\, W + b",
        r"q_\phi(z_n \mid x_n) = \mathrm{Categorical}(\mathrm{softmax}(f_\phi(x_n)))",
    ],
    known=dict.fromkeys(
        ("svi_reinforce", "svi_baseline", "svi_nvil", "svi_muprop", "svi_gumbel"),
        zoo.Known(
            "slow",
            "test_discrete_vae trains every estimator and checks that each improves the "
            "held-out ELBO",
        ),
    ),
)
def discrete_vae(
    x: torch.Tensor,
    x_test: torch.Tensor | None = None,
    K: int = 10,
    estimator: str = "enum",
    temperature: float | None = None,
) -> None:
    r"""A variational autoencoder with one categorical latent per image, trained with each
    gradient estimator of the seed's §3.4 for discrete latents.

    Generative story (binary 8x8 digits, D = 64 pixels, K = 10 classes)::

        z_n       ~ Categorical(1/K, ..., 1/K)                   n = 1..N
        x_nd | z_n ~ Bernoulli(sigmoid(theta_{z_n, d})),  theta = onehot(z) W + b
        q(z_n | x_n) = Categorical(softmax(encoder(x_n)))        amortised, one hidden layer

                  W, b
                   |
        (z_n) ---> [x_n]        model: p(z_n) p(x_n | z_n; W, b)          n = 1..N
        [x_n] ···> (z_n)        guide: q(z_n | x_n), the encoder network

    The decoder is a table of K images (logits), the encoder a tanh network 64-32-K; both are
    ``pyro.param`` sites, fitted by SVI on minibatches (``subsample_size``: a plate of 100 of
    the 1500 training images a step, the log densities scaled by 15). The images are the digits
    thresholded at 0.5 (:func:`binarised_digits`); ``x_test`` (297 held-out images) is not seen
    in training: after the fit the engine scores it (:func:`evaluate`).

    The ELBO is E_q[f(z)] with f(z) = log p(x, z) - log q(z | x), z discrete (000 L962). Its
    gradient with respect to the encoder is estimated six ways (``estimator``, one engine each):

    - ``enum`` (engine ``svi``): exact, the sum over the K values (TraceEnum_ELBO with the
      guide's z enumerated); zero sampling variance, K times the decoder's work;
    - ``reinforce`` (``svi_reinforce``): the score-function estimator f(z) grad log q(z | x)
      (000 L958–976), Pyro's TraceGraph_ELBO, no baseline;
    - ``baseline`` (``svi_baseline``): the same minus a decaying average of f, a constant
      control variate (L1072–1078; ``baseline_beta`` 0.9);
    - ``nvil`` (``svi_nvil``): that average plus a network b(x) fitted to the rest of f by
      least squares (NVIL, Mnih & Gregor 2014; L1082–1084), input 64-16-1, its output scaled
      by the plate's N/B as f is;
    - ``muprop`` (``svi_muprop``): MuProp (Gu et al. 2016; L1086–1092), the score-function
      estimator minus the first-order Taylor expansion of f around the mean field mu = E_q z,
      b(z) = f(mu) + f'(mu)^T (z - mu), plus that control variate's expectation's gradient
      f'(mu)^T grad mu(phi) (:class:`~zoo_inference.algorithms.muprop.MuPropELBO`); z is one-hot
      (OneHotCategorical) so the model can score the mean field, a probability vector, with
      its log densities extended linearly; unbiased
      (tests/inference/algorithms/test_muprop.py checks it against enumeration);
    - ``gumbel`` (``svi_gumbel``): the Gumbel-softmax relaxation (L978–1040) of the one term
      that needs sampling, E_q[log p(x | z)]: z becomes the relaxed one-hot vector
      softmax((log q + g) / tau), g ~ Gumbel(0, 1), reparameterised (Trace_ELBO), at temperature
      tau = 1/(K - 1) = 1/9 (the seed's advice tau <= 1/(K - 1), at its bound; no annealing,
      the seed gives none); the other term, KL(q(z | x) || p(z)) between the categoricals, is
      exact (a ``pyro.factor`` in the model; z's relaxed densities are masked out of the
      ELBO), as in Jang et al. 2017. Its gradient is biased for the discrete ELBO; the decoder
      sees relaxed vectors in training and one-hot vectors when scored. Relaxing the whole ELBO
      instead (Concrete densities for z in model and guide, Maddison et al. 2017) left the
      encoder at q = uniform here: a held-out ELBO of -24.5 nats per image after 1000 steps at
      tau = 1/9, 1/2 and 1, where this form reaches -20.5.

    Every estimator is scored on one
    scale after its fit: the exact ELBO and log p(x) (z summed over its K values) per image on
    the training and held-out images, and the variance of its encoder gradient over repeated
    draws at the fitted parameters (:func:`gradient_study`).

    Engines: ``svi`` and its five variants. NUTS, HMC, ChEES, MH and Laplace need continuous
    latent sites (z is discrete; the networks are parameters, not latents), and ``enum`` and
    ``importance`` would sum or sample z under networks nothing has fitted: only SVI fits them.
    Pyro's argument checks are off at the sites (``validate_args=False``: under TraceGraph_ELBO
    they cost a quarter of a step); the model checks that the minibatch's pixels are 0 or 1, and
    ``zoo.run`` checks x's support once before any work.

    Budgets: the quick profile's 1000 steps (67 passes over the images) and the full profile's
    3000, at which every estimator but REINFORCE, the noisiest, has flattened out. The score-
    function estimators step slower than the others (TraceGraph_ELBO tracks dependencies
    through every tensor operation; MuProp's two extra passes of the networks track none).
    """
    check_images(x, K, estimator)
    N, D = x.shape
    prior = torch.full((K,), 1.0 / K)
    with pyro.plate("data", N) as idx:
        xb = x[idx]  # the plate's minibatch (all of x unless the engine subsamples)
        if not bool(((xb == 0) | (xb == 1)).all()):
            raise zoo.ZooError("x must hold binary images: every pixel 0 or 1")
        if estimator == "gumbel":  # relaxed z; the categorical KL in closed form
            tau = torch.tensor(temperature or default_temperature(K))
            relaxed = dist.RelaxedOneHotCategorical(tau, probs=prior, validate_args=False)
            onehot = pyro.sample("z", relaxed.mask(False))
            q = dist.Categorical(logits=encoder_logits(xb, K), validate_args=False)
            kl = torch.distributions.kl_divergence(q, dist.Categorical(prior))
            pyro.factor("z_kl", -kl)
        elif estimator == "muprop":  # one-hot z, so that the mean field (q's probabilities) fits
            onehot = pyro.sample("z", dist.OneHotCategorical(prior, validate_args=False))
        else:
            z = pyro.sample("z", dist.Categorical(prior, validate_args=False))
            onehot = torch.nn.functional.one_hot(z, K).to(x.dtype)
        logits = decoder_logits(onehot, x)
        x_dist = dist.Bernoulli(logits=logits, validate_args=False).to_event(1)
        pyro.sample("x", x_dist, obs=xb)


@discrete_vae.set_guide
def _(x: torch.Tensor, K: int, estimator: str, temperature: float | None) -> None:
    """q(z_n | x_n) = Categorical(softmax(encoder(x_n))) on the plate's minibatch, with what the
    estimator needs at the site: enumeration, a baseline, or the relaxation."""
    N, D = x.shape
    with pyro.plate("data", N) as idx:
        xb = x[idx]
        logits = encoder_logits(xb, K)
        if estimator == "gumbel":
            tau = torch.tensor(temperature or default_temperature(K))
            relaxed = dist.RelaxedOneHotCategorical(tau, logits=logits, validate_args=False)
            pyro.sample("z", relaxed.mask(False))  # reparameterised; the KL is the model's factor
            return
        if estimator == "muprop":
            pyro.sample("z", dist.OneHotCategorical(logits=logits, validate_args=False))
            return
        q = dist.Categorical(logits=logits, validate_args=False)
        infer = site_infer(estimator, xb, N)
        pyro.sample("z", q, infer=infer)  # type: ignore[arg-type]  # InferDict lacks "baseline"


def site_infer(estimator: str, xb: torch.Tensor, N: int) -> dict[str, Any]:
    """The ``infer`` dict of the guide's z for an estimator: enumeration, or a TraceGraph_ELBO
    baseline (nothing for plain REINFORCE)."""
    if estimator == "enum":
        return {"enumerate": "parallel"}
    if estimator == "reinforce":
        return {}
    baseline: dict[str, Any] = {"use_decaying_avg_baseline": True, "baseline_beta": BASELINE_BETA}
    if estimator == "nvil":
        scale = N / xb.shape[0]  # f carries the plate's N/B; the network predicts per image
        sizes = (xb.shape[-1], BASELINE_HIDDEN, 1)
        baseline["nn_baseline"] = lambda u: scale * mlp("baseline", sizes, u).squeeze(-1)
        baseline["nn_baseline_input"] = xb
    return {"baseline": baseline}


@discrete_vae.synthetic
def _(seed: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """Binary images from K = 10 known classes: class k's pixel probabilities are the digit k
    images' mean (binarised digits, clamped to [0.05, 0.95]), z_n uniform; 1500 training and
    297 held-out images, numpy's generator seeded by ``seed``."""
    return discrete_vae_synthetic(seed)


def discrete_vae_synthetic(
    seed: int, n: int = 1500, n_test: int = 297
) -> tuple[dict[str, Any], dict[str, Any]]:
    """See the registered synthetic generator; ``truth`` holds ``probs`` (K, D) and ``z``."""
    d = load_digits_split()
    X, y = d["x_train"] > 0.5, d["y_train"]
    probs = np.stack([X[y == k].mean(0) for k in range(10)]).clip(0.05, 0.95)
    rng = np.random.default_rng(seed)
    z = rng.integers(10, size=n + n_test)
    images = (rng.uniform(size=(n + n_test, probs.shape[1])) < probs[z]).astype(np.float32)
    f32: dict[str, Any] = dict(dtype=torch.float32)
    data = {"x": torch.tensor(images[:n]), "x_test": torch.tensor(images[n:]), "K": 10}
    return data, {"probs": torch.tensor(probs, **f32), "z": torch.tensor(z[:n])}


# --------------------------------------------------------------------- exact evaluation


def exact_scores(x: torch.Tensor, K: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Per image, at the parameters in Pyro's param store, with z summed over its K values:

        ELBO(x)   = sum_k q(k | x) [log p(k) + log p(x | k) - log q(k | x)]
        log p(x)  = log sum_k p(k) p(x | k)

    (the gap is KL(q(z | x) || p(z | x)) >= 0). The decoder sees one-hot z whatever the
    estimator that trained it."""
    with torch.no_grad():
        log_q = torch.log_softmax(encoder_logits(x, K), -1)  # (N, K)
        theta = decoder_logits(torch.eye(K), x)  # (K, D)
        log_px = dist.Bernoulli(logits=theta[:, None, :]).to_event(1).log_prob(x).T  # (N, K)
        log_joint = log_px - math.log(K)
        elbo = (log_q.exp() * (log_joint - log_q)).sum(-1)
        return elbo, torch.logsumexp(log_joint, -1)


# ------------------------------------------------------------------ gradient variance


def estimator_elbo(estimator: str) -> ELBO:
    """The ELBO object that implements an estimator (one particle)."""
    if estimator == "enum":
        return TraceEnum_ELBO(max_plate_nesting=1)
    if estimator == "gumbel":
        return Trace_ELBO()
    if estimator == "muprop":
        return MuPropELBO()
    return TraceGraph_ELBO()


AVERAGE = "__baseline_avg_downstream_cost_z"  # where TraceGraph_ELBO keeps the decaying average


@contextmanager
def held_average(x: torch.Tensor, K: int, estimator: str) -> Iterator[Callable[[], None]]:
    """For the estimators with a decaying-average baseline (``baseline``, ``nvil``): during the
    block that average is held at the value it tracks, the mean of f(z) = log p(x, z) - log
    q(z | x) over images and z ~ q, i.e. the exact ELBO per image (:func:`exact_scores`), so
    every gradient draw uses the same constant control variate. Yields the function that puts
    it back before each draw (TraceGraph_ELBO moves it after each); the param store is
    restored after the block."""
    store = pyro.get_param_store()
    if estimator not in ("baseline", "nvil"):
        yield lambda: None
        return
    saved = store[AVERAGE].detach().clone() if AVERAGE in store else None
    constant = torch.full((x.shape[0],), float(exact_scores(x, K)[0].mean()))

    def reset() -> None:
        store[AVERAGE] = constant.clone()

    try:
        yield reset
    finally:
        if saved is None:
            del store[AVERAGE]
        else:
            store[AVERAGE] = saved


def gradient_draws(
    x: torch.Tensor,
    K: int,
    estimator: str,
    temperature: float | None = None,
    *,
    num_draws: int | None = None,
    params: Sequence[str] = ENCODER,
) -> torch.Tensor:
    """``num_draws`` (default :data:`GRADIENT_DRAWS`) independent draws of an estimator's
    gradient of -ELBO with respect to the named parameters (default: the encoder's), at the
    parameters in Pyro's param store, on all of ``x`` (no subsampling: only the latent draws
    vary). Shaped (num_draws, total size).

    Each draw is one latent sample per image through the estimator's own Pyro ELBO (for
    ``enum``, the exact gradient every time). NVIL's network is the one in the param store (as
    its fit left it); the decaying average is held at the value it tracks (:func:`held_average`)."""
    check_images(x, K, estimator)
    num_draws = GRADIENT_DRAWS if num_draws is None else num_draws
    data = {"x": x, "K": K, "estimator": estimator, "temperature": temperature}
    elbo = estimator_elbo(estimator)
    with held_average(x, K, estimator) as reset:
        return generic_gradient_draws(
            discrete_vae.model, discrete_vae.guide, data, elbo, params, num_draws, reset
        )


def gradient_study(
    x: torch.Tensor,
    K: int,
    estimator: str,
    temperature: float | None = None,
    *,
    num_draws: int | None = None,
) -> dict[str, float | None]:
    """An estimator's encoder gradient over ``num_draws`` draws (:func:`gradient_draws`) at
    fixed parameters, against the exact gradient (enumeration) at the same parameters
    (:func:`zoo_inference.algorithms.gradients.gradient_statistics`; enumeration needs no sampling,
    so two draws show it)."""
    num_draws = 2 if estimator == "enum" else GRADIENT_DRAWS if num_draws is None else num_draws
    g = gradient_draws(x, K, estimator, temperature, num_draws=num_draws).double()
    exact = gradient_draws(x, K, "enum", num_draws=1)[0].double()
    return gradient_statistics(g, exact)


@discrete_vae.evaluate
def evaluate(
    x: torch.Tensor,
    x_test: torch.Tensor | None,
    K: int,
    estimator: str,
    temperature: float | None,
) -> dict[str, Any]:
    """After an SVI fit, at its parameters: the exact ELBO and log-likelihood per image on the
    training and held-out images (:func:`exact_scores`) and the estimator's gradient study
    (:func:`gradient_study`)."""
    train_elbo, train_ll = exact_scores(x, K)
    out: dict[str, Any] = {
        "estimator": estimator,
        "train_elbo": float(train_elbo.mean()),
        "train_log_lik": float(train_ll.mean()),
    }
    if estimator == "gumbel":
        out["temperature"] = temperature or default_temperature(K)
    if x_test is not None and len(x_test):
        test_elbo, test_ll = exact_scores(x_test, K)
        out["heldout_elbo"] = float(test_elbo.mean())
        out["heldout_log_lik"] = float(test_ll.mean())
    out.update(gradient_study(x, K, estimator, temperature))
    return out
