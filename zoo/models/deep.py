"""Deep generative models with continuous latents: the variational autoencoder, the conditional
VAE and VaDE, the VAE with a Gaussian-mixture prior (seed 000 §3.3; 001 §3; 002 §20.1).

Each is a Pyro model with a neural decoder and a hand-written amortised guide (a neural encoder
q(z_i | x_i)), both ``torch.nn`` networks registered with ``pyro.module`` and built afresh for
each run (:func:`zoo.network`: the run's seed fixes their initial weights). Each model draws its
own minibatches, ``pyro.plate("data", N, subsample_size=100)``: the seed's M = 100 images a step
with L = 1 draw each (001 L1114), the log densities scaled by N/M = 15 (000 L948–954), so a
step costs the same whatever N. After an ``svi`` fit each model scores itself on the 297
held-out images (``evaluate``): log p(x) by importance sampling with the encoder as proposal, the
held-out ELBO, reconstructions and samples as image grids, and VaDE its clustering accuracy.

Budgets: the ``quick`` report profile's 1000 steps and 500 draws (67 passes over the 1500
training images) take seconds a fit, evaluation included; the ``full`` profile's 3000 steps and
2000 draws (200 passes) bring the training ELBO within about a nat per image of a much longer
fit at a third of the learning rate. Longer at this learning rate does not help (the ELBO
wanders).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import lru_cache
from typing import Any, cast

import numpy as np
import pyro
import pyro.distributions as dist
import pyro.poutine as poutine
import torch
from pyro.distributions import constraints
from pyro.poutine.runtime import Message
from torch import nn
from torch.nn.functional import one_hot, softplus

import zoo
from zoo_datasets import load_digits_split
from zoo_inference.algorithms.bayes_nn import (
    flatten,
    sample_weights,
    weight_posterior,
    with_weights,
)
from zoo_inference.algorithms.evaluation import (
    cluster_accuracy,
    held_out_scores,
    held_out_scores_over_weights,
)
from zoo_inference.peers import sklearn as sklearn_peer

LATENT = 8  # latent dimensions d (the seed's 128 is for 28x28 MNIST; the digits are 8x8)
HIDDEN = 128  # units of each network's one hidden layer
SIGMA_MIN = 1.0 / 16  # the decoder's smallest sd: one grey level (see vae's docstring)
BATCH = 100  # the minibatch: the seed's M = 100 (001 L1114)
CLASSES = 10  # digits 0..9: cvae's labels, vade's clusters
HELD_OUT_PARTICLES = 1000  # K importance samples per held-out image for log p(x)
HELD_OUT_ELBO_PARTICLES = 100  # independent draws per held-out image for its ELBO
IMAGES = 10  # images per row of a figure's grid
SHAPE = (8, 8)
LR = 0.01  # Adam's step (decaying tenfold over the run), for networks of this size
MU_INIT = 0.5  # sd of VaDE's cluster means at the start (see mixture_prior)
WEIGHTS = "decoder_weights"  # the Bayesian decoder's weights: one global latent site
WEIGHT_PRIOR_SCALE = 1.0  # p(theta) = N(0, I), the seed's p_alpha(theta) (001 §3.3)
WEIGHT_INIT_SCALE = 0.01  # q(theta)'s sds at the start: near the point decoder's first steps
HELD_OUT_WEIGHT_DRAWS = 20  # theta_s ~ q(theta) sharing HELD_OUT_PARTICLES (50 z draws each)

# Why the generic engines other than svi do not apply (`zoo info`, the engine's error).
AMORTISED = (
    "amortised model: one latent z_i per image inferred by a neural encoder q(z_i | x_i); the "
    "networks' weights are parameters that only SVI fits (sampling 1500 z_i under untrained "
    "networks, or the weights themselves, is not what the seed teaches)"
)
# What the three models register alike: svi only (AMORTISED says why), no parameter table (the
# weights are not posterior quantities), Adam at LR, the image grids their scores draw.
AMORTISED_SVI: dict[str, Any] = {
    "engines": ("svi",),
    "not_applicable": AMORTISED,
    "params": (),
    "engine_options": {"svi": {"lr": LR}},
    "figures": {"images": {"shape": SHAPE}},
}

# ----------------------------------------------------------------------------------- data


def digits(seed: int = 0) -> dict[str, torch.Tensor]:
    """scikit-learn's 8x8 digits, pixels in [0, 1] (``zoo_datasets.load_digits_split``): 1500
    training images ``x`` and the 297 fixed held-out images ``x_test``. The split is fixed;
    ``seed`` is ignored."""
    d = load_digits_split()
    f32: dict[str, Any] = dict(dtype=torch.float32)
    return {"x": torch.tensor(d["x_train"], **f32), "x_test": torch.tensor(d["x_test"], **f32)}


def labelled_digits(seed: int = 0) -> dict[str, torch.Tensor]:
    """:func:`digits` with their labels ``y`` and ``y_test`` (0..9)."""
    d = load_digits_split()
    labels: dict[str, Any] = dict(dtype=torch.int64)
    y = {"y": torch.tensor(d["y_train"], **labels), "y_test": torch.tensor(d["y_test"], **labels)}
    return {**digits(seed), **y}


def check_sizes(x: torch.Tensor, **sizes: int) -> None:
    """Images as a float matrix (N, D) and positive integer sizes, or a clear error."""
    if x.ndim != 2 or not x.is_floating_point():
        raise zoo.ZooError(f"x must be a float matrix of images (N, D), got {tuple(x.shape)}")
    for name, v in sizes.items():
        if isinstance(v, bool) or not (isinstance(v, int) and v >= 1):
            raise zoo.ZooError(f"{name} must be a positive integer, got {v!r}")


def check_labels(y: torch.Tensor, n: int, classes: int) -> None:
    """``n`` integer labels in 0..classes-1, or a clear error."""
    if y.shape != (n,) or y.dtype != torch.int64:
        raise zoo.ZooError(f"y must be {n} integer labels, got {tuple(y.shape)} {y.dtype}")
    if len(y) and (int(y.min()) < 0 or int(y.max()) >= classes):
        raise zoo.ZooError(f"labels must lie in 0..{classes - 1}")


# ------------------------------------------------------------------------------ networks


class Gaussian(nn.Module):
    """An MLP with one softplus hidden layer from its input to the mean and sd of a diagonal
    Gaussian, R^n_in -> R^n_out x R^n_out_+ (the seed's shapes: encoder R^D -> R^2d, decoder
    R^d -> R^2D, 000 L847–853); the sd is ``floor`` + softplus(.)."""

    def __init__(self, n_in: int, n_out: int, hidden: int, floor: float) -> None:
        super().__init__()
        self.hidden = nn.Linear(n_in, hidden)
        self.out = nn.Linear(hidden, 2 * n_out)
        self.floor = floor

    def forward(self, u: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        loc, raw = self.out(softplus(self.hidden(u))).chunk(2, dim=-1)
        return loc, self.floor + softplus(raw)


def decoder(name: str, n_in: int, D: int, hidden: int) -> Gaussian:
    """p(x | z): a Gaussian over the D pixels with sd at least SIGMA_MIN; the run's network
    ``name``, built on first use from the run's seeded generator (:func:`zoo.network`)."""
    build = lambda: Gaussian(n_in, D, hidden, SIGMA_MIN)  # noqa: E731
    return zoo.network(name, build, key=(n_in, D, hidden))


@lru_cache(maxsize=8)
def decoder_template(n_in: int, D: int, hidden: int) -> Gaussian:
    """The decoder's structure with no weights of its own (meta device): the Bayesian decoder
    runs it with drawn weights."""
    with torch.device("meta"):
        return Gaussian(n_in, D, hidden, SIGMA_MIN)


def encoder(name: str, n_in: int, latent_dim: int, hidden: int) -> Gaussian:
    """q(z | x): a Gaussian over the latent coordinates (sd at least 1e-4, for stability)."""
    build = lambda: Gaussian(n_in, latent_dim, hidden, 1e-4)  # noqa: E731
    return zoo.network(name, build, key=(n_in, latent_dim, hidden))


def with_labels(u: torch.Tensor, y: torch.Tensor, classes: int) -> torch.Tensor:
    """[u; onehot(y)], the one-hot labels broadcast over u's leading dims (particles, draws):
    the seed's "concatenate the input X with Y" (002 L3831)."""
    onehot = one_hot(y, classes).to(u.dtype)
    return torch.cat([u, onehot.expand(*u.shape[:-1], classes)], -1)


def fitted(name: str) -> bool:
    """Whether Pyro's param store holds the network ``name``: an svi fit of the model's own
    guide leaves its encoder there (an autoguide's fit does not train it)."""
    return any(k.startswith(f"{name}$$$") for k in pyro.get_param_store().keys())


# ------------------------------------------------------------------------------------ vae


@zoo.register(
    data=digits,
    **AMORTISED_SVI,
    variants={
        "svi_meanfield": ("svi", {"elbo": "meanfield"}),
        "svi_iwae": ("svi", {"elbo": "iwae", "num_particles": 5}),
        # 50 draws of the decoder's 17,664 weights: a stored run stays a few MB, not 35
        "svi_bayes_decoder": (
            "svi",
            {"elbo": "meanfield", "num_samples": 50},
            {"bayesian_decoder": True},
        ),
    },
    seed_ref="000 §3.3.2, §3.3.5 (L819–954); 001 §3 (L1055–1224); 002 §20.1 (L3738–3805)",
    math=[
        r"z_i \sim \mathcal{N}(0,\, I_d), \quad i = 1, \ldots, N",
        r"x_i \mid z_i \sim \mathcal{N}(\mu_\theta(z_i),\, \mathrm{diag}\, \sigma_\theta^2(z_i))",
        r"q_\phi(z_i \mid x_i) = \mathcal{N}(m_\phi(x_i),\, \mathrm{diag}\, s_\phi^2(x_i))",
    ],
    known=dict.fromkeys(
        ("svi_meanfield", "svi_iwae", "svi_bayes_decoder"),
        zoo.Known(
            "slow",
            "SVI steps, then held-out importance sampling; test_deep runs the engine at a"
            " smaller size",
        ),
    ),
)
def vae(
    x: torch.Tensor,
    x_test: torch.Tensor | None = None,
    latent_dim: int = LATENT,
    hidden: int = HIDDEN,
    batch_size: int = BATCH,
    bayesian_decoder: bool = False,
) -> None:
    r"""Variational autoencoder: each image is a neural network's Gaussian image of a Gaussian
    latent code, which a neural encoder infers (Kingma & Welling 2014).

    Generative story (000 L823–826; 001 eqs 167–168; 002 L3751–3765), D = 64 pixels, d = 8::

        z_i       ~ N(0, I_d)                                    i = 1..N
        x_i | z_i ~ N(mu(z_i), diag sigma^2(z_i))                decoder theta: R^d -> R^2D
        q(z_i | x_i) = N(m(x_i), diag s^2(x_i))                  encoder phi:   R^D -> R^2d

            theta                      phi
              |                         |
           (z_i) ---> [x_i]       [x_i] ---> q(z_i | x_i)           i = 1..N

    Each network has one hidden layer of 128 softplus units. The ELBO (000 L940; 001 eq 148;
    002 L3790), E_q log p(x_i | z_i) - KL(q(z_i | x_i) || N(0, I)), is maximised over theta and
    phi on minibatches of 100 images (000 L948–954: the gradient (N/|U|) sum over the batch U),
    through the reparameterisation z = m + s eps, eps ~ N(0, I) (001 eq 150). Three engines
    estimate it three ways:

    - ``svi``: Trace_ELBO, the seed's estimator A (001 eq 152): log p(x, z) - log q(z | x) at
      one draw z;
    - ``svi_meanfield``: TraceMeanField_ELBO, estimator B (001 eq 153): the KL term in closed
      form (eq 168, ``zoo_inference.algorithms.evaluation.gaussian_kl``) plus one draw of
      log p(x | z);
    - ``svi_iwae``: the importance-weighted bound L_K = E log (1/K) sum_k p(x, z_k)/q(z_k | x),
      K = 5 (Burda et al. 2016; named by 002 §20.1.4, RenyiELBO with alpha = 0), tighter than
      the ELBO (L_1 = ELBO <= L_K <= log p(x)).

    A fourth, ``svi_bayes_decoder`` (``bayesian_decoder=True``), is the seed's full variational
    Bayes (001 §3.3, eqs 155–162): the decoder's 17664 weights theta become one global latent
    site with the prior N(0, I) (the seed's p_alpha(theta)) and a mean-field posterior
    q(theta) = N(m, diag s^2) in the guide beside the amortised encoder
    (:mod:`zoo_inference.algorithms.bayes_nn`; m starts at a freshly built decoder's weights, s at
    0.01). Its ELBO is eq 160, N (log p(x | z, theta) + log p(z) - log q(z | x)) + log p(theta)
    - log q(theta), with both KL terms in closed form (TraceMeanField_ELBO, eq 162): the
    weights' KL is counted once a step, the data terms carry the minibatch's N/B. Its held-out
    log p(x) integrates over the weights too: log E_q(theta) p(x | theta) by importance sampling
    over 20 draws of theta x 50 encoder draws of z (:func:`held_out_scores_over_weights`);
    the generic engine's per-image evidence does not apply (the weights are shared by every
    image), so the run has none. The report compares its held-out log-likelihood with the point
    decoder's (``svi_meanfield``, the same estimator B); the weights' KL starts larger than the
    images' whole ELBO at the point decoder's fit, so the Bayesian decoder fits less in a budget.

    After its fit each engine is scored on the held-out images (:func:`score`): log p(x) per
    image by importance sampling, log (1/K) sum_k p(x, z_k)/q(z_k | x) over K = 1000 encoder
    draws (consistent, biased low by less as K grows), and the held-out ELBO.

    The pixels are grey levels 0..16 scaled to [0, 1], 17 values: a Gaussian density narrower
    than their spacing would grow without bound on the pixels that never leave 0 (the corners),
    so the decoder's sd is at least one grey level, 1/16 (``SIGMA_MIN``). The log-likelihoods
    are densities of the pixel values, in nats per image: comparable between engines, not with a
    discrete likelihood's.

    Engines: ``svi`` and its three variants. The other generic engines do not apply (``zoo info
    vae`` says why): the networks are parameters, not latents, and with one z_i per image only
    an amortised fit is what the seed teaches (000 M15, "NUTS is not appropriate").
    """
    check_sizes(x, latent_dim=latent_dim, hidden=hidden, batch_size=batch_size)
    if not isinstance(bayesian_decoder, bool):
        raise zoo.ZooError(f"bayesian_decoder must be True or False, got {bayesian_decoder!r}")
    N, D = x.shape
    if bayesian_decoder:  # theta ~ N(0, I), global: outside the plate, its KL counted once
        net = sample_weights(WEIGHTS, decoder_template(latent_dim, D, hidden), WEIGHT_PRIOR_SCALE)
    else:
        net = decoder("vae_decoder", latent_dim, D, hidden)
    with pyro.plate("data", N, subsample_size=min(batch_size, N)) as idx:
        z = pyro.sample("z", dist.Normal(0.0, 1.0).expand([latent_dim]).to_event(1))
        loc, scale = net(z)
        pyro.sample("x", dist.Normal(loc, scale).to_event(1), obs=x[idx])


@vae.set_guide
def _(
    x: torch.Tensor, latent_dim: int, hidden: int, batch_size: int, bayesian_decoder: bool
) -> None:
    """q(z_i | x_i) = N(m(x_i), diag s^2(x_i)), amortised: one encoder for every image (001 eq
    167), on the same minibatch as the model (Pyro replays the guide's subsample into it). With
    the Bayesian decoder also q(theta) = N(m, diag s^2) over its weights (001 §3.3), m started
    at a freshly built decoder's weights."""
    if bayesian_decoder:
        D = x.shape[1]
        build = lambda: flatten(Gaussian(latent_dim, D, hidden, SIGMA_MIN))  # noqa: E731
        weight_posterior(WEIGHTS, build, WEIGHT_INIT_SCALE)
    sample_codes("vae_encoder", x, latent_dim, hidden, batch_size)


def sample_codes(
    name: str,
    x: torch.Tensor,
    latent_dim: int,
    hidden: int,
    batch_size: int,
    y: torch.Tensor | None = None,
    classes: int = 0,
) -> None:
    """The amortised guides' one site: z_i ~ N(m(u_i), diag s^2(u_i)) for the minibatch's
    images, u_i = x_i, or [x_i; onehot(y_i)] given labels, m and s from the encoder ``name``."""
    N, D = x.shape
    net = encoder(name, D + (classes if y is not None else 0), latent_dim, hidden)
    with pyro.plate("data", N, subsample_size=min(batch_size, N)) as idx:
        u = x[idx] if y is None else with_labels(x[idx], y[idx], classes)
        loc, scale = net(u)
        pyro.sample("z", dist.Normal(loc, scale).to_event(1))


@vae.evaluate
def score(
    x: torch.Tensor,
    x_test: torch.Tensor | None,
    latent_dim: int,
    hidden: int,
    batch_size: int,
    bayesian_decoder: bool,
) -> dict[str, Any]:
    """After an svi fit of the model's own guide, on the held-out images: the scores of
    :func:`held_out_scores` (with the Bayesian decoder, of :func:`held_out_scores_over_weights`:
    the weights drawn from q(theta) too), their reconstructions and 3 x IMAGES samples mu(z),
    z ~ N(0, I) (image grids, ``images``; the Bayesian decoder's at its posterior mean)."""
    if x_test is None or not len(x_test) or not fitted("vae_encoder"):
        return {}
    held = {
        "x": x_test,
        "latent_dim": latent_dim,
        "hidden": hidden,
        "batch_size": batch_size,
        "bayesian_decoder": bayesian_decoder,
    }
    model, guide = vae.model, vae.guide
    if bayesian_decoder:
        scores = held_out_scores_over_weights(
            model,
            guide,
            held,
            WEIGHTS,
            HELD_OUT_WEIGHT_DRAWS,
            HELD_OUT_PARTICLES,
            HELD_OUT_ELBO_PARTICLES,
        )
        mean_weights = pyro.param(f"{WEIGHTS}_loc").detach()
        model, guide = (
            with_weights(model, WEIGHTS, mean_weights),
            with_weights(guide, WEIGHTS, mean_weights),
        )
    else:
        scores = held_out_scores(model, guide, held, HELD_OUT_PARTICLES, HELD_OUT_ELBO_PARTICLES)
    z = torch.randn(3 * IMAGES, latent_dim)
    prior = {**held, "x": x_test.new_zeros(3 * IMAGES, x.shape[1]), "batch_size": 3 * IMAGES}
    samples = decoded_mean(model, prior, z)
    return {
        **scores,
        "images": {
            "held-out images and their reconstructions": reconstructions(model, guide, held),
            "samples from the prior": grid(samples, ["samples"] * 3),
        },
    }


# ----------------------------------------------------------------------- scores and images


def grid(images: torch.Tensor, rows: list[str]) -> dict[str, Any]:
    """An image grid for the report's ``images`` figure: pixels (rows, columns, 8, 8) clipped
    to [0, 1], and a label per row."""
    pixels = images.detach().clamp(0.0, 1.0).reshape(len(rows), -1, *SHAPE)
    return {"pixels": pixels.numpy(), "rows": list(rows)}


def _normal_loc(site: Message) -> torch.Tensor:
    """The loc of a site drawn from ``Normal(loc, scale).to_event(1)``."""
    fn = cast(dist.Independent, site["fn"])
    return cast(dist.Normal, fn.base_dist).loc


def decoded_mean(model: Callable[..., Any], data: dict[str, Any], z: torch.Tensor) -> torch.Tensor:
    """The decoder's mean image mu(z) for each z: the model run on ``data`` with z given."""
    with torch.no_grad(), pyro.validation_enabled(False):
        trace = poutine.trace(poutine.condition(model, data={"z": z})).get_trace(**data)
    return _normal_loc(trace.nodes["x"])


def encoded_mean(guide: Callable[..., Any], data: dict[str, Any]) -> torch.Tensor:
    """The encoder's mean m(x) for each image of ``data``."""
    with torch.no_grad(), pyro.validation_enabled(False):
        trace = poutine.trace(guide).get_trace(**data)
    return _normal_loc(trace.nodes["z"])


def reconstructions(
    model: Callable[..., Any], guide: Callable[..., Any], data: dict[str, Any]
) -> dict[str, Any]:
    """The first IMAGES images of ``data`` above their reconstructions mu(m(x))."""
    first = {k: v[:IMAGES] if k in ("x", "y") else v for k, v in data.items()}
    recon = decoded_mean(model, first, encoded_mean(guide, first))
    return grid(torch.cat([first["x"], recon]), ["held-out", "reconstructed"])


# ----------------------------------------------------------------------------------- cvae


@zoo.register(
    data=labelled_digits,
    **AMORTISED_SVI,
    seed_ref="002 §20.1.2 (L3806–3832)",
    math=[
        r"z_i \sim \mathcal{N}(0,\, I_d), \quad y_i:\ \mathrm{the\ digit,\ one\ hot}",
        r"x_i \mid z_i, y_i \sim \mathcal{N}(\mu_\theta([z_i; y_i]),\,"
        r" \mathrm{diag}\, \sigma_\theta^2([z_i; y_i]))",
        r"q_\phi(z_i \mid x_i, y_i) = \mathcal{N}(m_\phi([x_i; y_i]),\,"
        r" \mathrm{diag}\, s_\phi^2([x_i; y_i]))",
    ],
    known={
        "svi": zoo.Known(
            "slow",
            "SVI steps, then held-out importance sampling; test_deep runs it at a smaller size",
        ),
    },
)
def cvae(
    x: torch.Tensor,
    y: torch.Tensor,
    x_test: torch.Tensor | None = None,
    y_test: torch.Tensor | None = None,
    classes: int = CLASSES,
    latent_dim: int = LATENT,
    hidden: int = HIDDEN,
    batch_size: int = BATCH,
) -> None:
    r"""Conditional VAE: the VAE with each image's label given to the decoder and the encoder,
    so the latent code keeps the style and the label says the digit (Sohn et al. 2015).

    Generative story (002 L3814–3831), y_i the digit of image i::

        z_i            ~ N(0, I_d)                       p(z | y) = N(0, I): "we cannot impact
        x_i | z_i, y_i ~ N(mu([z_i; y_i]), diag sigma^2) the z by y" (L3831)
        q(z_i | x_i, y_i) = N(m([x_i; y_i]), diag s^2)   "concatenate the input X with Y"

                    theta                     phi
                      |                        |
           (z_i) ---> [x_i] <--- [y_i]   [x_i, y_i] ---> q(z_i | x_i, y_i)      i = 1..N

    y enters as a one-hot vector; the networks are the VAE's (:func:`vae`) with 10 more inputs.
    The bound (L3814, derived by Jensen's inequality in eqs 20.1–20.5) is log p(x | y) >=
    E_q log p(x | y, z) - KL(q(z | x, y) || p(z | y)), fitted by ``svi`` (Trace_ELBO) on
    minibatches of 100. After the fit (:func:`score_cvae`): log p(x | y) of the held-out images
    by importance sampling (K = 1000), the held-out ELBO, reconstructions, and samples of each
    digit, the decoder's mean at z ~ N(0, I) for y = 0..9 (one row per digit).

    Engines: ``svi`` only (``zoo info cvae`` says why the others do not apply).
    """
    check_sizes(x, classes=classes, latent_dim=latent_dim, hidden=hidden, batch_size=batch_size)
    N, D = x.shape
    check_labels(y, N, classes)
    net = decoder("cvae_decoder", latent_dim + classes, D, hidden)
    with pyro.plate("data", N, subsample_size=min(batch_size, N)) as idx:
        z = pyro.sample("z", dist.Normal(0.0, 1.0).expand([latent_dim]).to_event(1))
        loc, scale = net(with_labels(z, y[idx], classes))
        pyro.sample("x", dist.Normal(loc, scale).to_event(1), obs=x[idx])


@cvae.set_guide
def _(
    x: torch.Tensor, y: torch.Tensor, classes: int, latent_dim: int, hidden: int, batch_size: int
) -> None:
    """q(z_i | x_i, y_i) = N(m([x_i; y_i]), diag s^2([x_i; y_i])), amortised."""
    sample_codes("cvae_encoder", x, latent_dim, hidden, batch_size, y, classes)


@cvae.evaluate
def score_cvae(
    x: torch.Tensor,
    x_test: torch.Tensor | None,
    y_test: torch.Tensor | None,
    classes: int,
    latent_dim: int,
    hidden: int,
    batch_size: int,
) -> dict[str, Any]:
    """After an svi fit of the model's own guide, on the held-out images and their labels:
    :func:`held_out_scores` (of log p(x | y)), reconstructions, and IMAGES samples of each
    digit (image grids)."""
    if x_test is None or y_test is None or not len(x_test) or not fitted("cvae_encoder"):
        return {}
    sizes = {"classes": classes, "latent_dim": latent_dim, "hidden": hidden}
    held = {"x": x_test, "y": y_test, **sizes, "batch_size": batch_size}
    model, guide = cvae.model, cvae.guide
    digit = torch.arange(classes).repeat_interleave(IMAGES)
    blank = x_test.new_zeros(len(digit), x.shape[1])
    z = torch.randn(len(digit), latent_dim)
    samples = decoded_mean(model, {**held, "x": blank, "y": digit, "batch_size": len(z)}, z)
    return {
        **held_out_scores(model, guide, held, HELD_OUT_PARTICLES, HELD_OUT_ELBO_PARTICLES),
        "images": {
            "held-out images and their reconstructions": reconstructions(model, guide, held),
            "samples of each digit y": grid(samples, [f"y = {k}" for k in range(classes)]),
        },
    }


# ----------------------------------------------------------------------------------- vade


@zoo.register(
    data=labelled_digits,
    **AMORTISED_SVI,
    seed_ref="002 §20.1.3 (L3833–3865)",
    math=[
        r"c_i \sim \mathrm{Categorical}(1/C, \ldots, 1/C), \quad C = 10",
        r"z_i \mid c_i \sim \mathcal{N}(\mu_{c_i},\, \sigma_{c_i}^2 I_d)",
        r"x_i \mid z_i \sim \mathcal{N}(\mu_\theta(z_i),\, \mathrm{diag}\, \sigma_\theta^2(z_i))",
        r"q_\phi(z_i \mid x_i) = \mathcal{N}(m_\phi(x_i),\, \mathrm{diag}\, s_\phi^2(x_i))",
    ],
    known={
        "svi": zoo.Known(
            "slow",
            "SVI steps, then held-out importance sampling; test_deep runs it at a smaller size",
        ),
    },
)
def vade(
    x: torch.Tensor,
    x_test: torch.Tensor | None = None,
    y: torch.Tensor | None = None,
    y_test: torch.Tensor | None = None,
    clusters: int = CLASSES,
    latent_dim: int = LATENT,
    hidden: int = HIDDEN,
    batch_size: int = BATCH,
) -> None:
    r"""VaDE (variational deep embedding): a VAE whose prior is a mixture of Gaussians, so the
    latent codes fall into clusters, and the cluster of an image is a discrete latent (Jiang et
    al. 2017).

    Generative story (002 L3835–3846), C = 10 clusters::

        c_i       ~ Categorical(pi),  pi = (1/C, ..., 1/C)   mu_c, sigma_c: parameters
        z_i | c_i ~ N(mu_{c_i}, sigma_{c_i}^2 I_d)          (isotropic, as the seed prints)
        x_i | z_i ~ N(mu(z_i), diag sigma^2(z_i))           the VAE's decoder
        q(z_i | x_i) = N(m(x_i), diag s^2(x_i))             the VAE's encoder

               mu_c, sigma_c                       theta
                 |                                   |
              (c_i) ---> (z_i) -------------------> [x_i]             i = 1..N

    The seed's ELBO (L3848–3858) takes a mean-field q(z, c | x) = q(z | x) q(c | x) (L3862).
    Here c_i is enumerated in the model instead (TraceEnum_ELBO: sum over the C values of
    p(c) p(z | c), exactly), so only z_i is drawn from the encoder and the bound is the tighter
    one E_q log [sum_c p(c) p(z | c) p(x | z) / q(z | x)]; q(c | x) follows from it as p(c | z)
    at z ~ q(z | x) (the seed's "assignment probability of the Gaussian mixture", L3864).

    The cluster means mu_c and sds sigma_c are fitted by SVI with the networks (maximum
    likelihood, as in VaDE; :func:`mixture_prior` says where they start). The weights pi are held
    at 1/C: fitted too, the clusters that start with few images lose weight, then images, and
    die (a lower clustering accuracy over seeds than with pi fixed). VaDE as
    published starts from a pretrained autoencoder and a GMM fitted to its codes; here all of it
    starts from scratch in one SVI run, and the peers below cluster the digits better. After the
    fit
    (:func:`score_vade`) each image's cluster is argmax_c p(c | z = m(x)); the clustering
    accuracy is the share of images whose cluster maps to their digit under the best one-to-one
    map of clusters to digits (Hungarian method, scipy's linear_sum_assignment), on the training
    and held-out images. The labels ``y``, ``y_test`` only score the clusters; the model never
    sees them. Beside it, the peers: scikit-learn's GaussianMixture on the pixels (``sklearn``)
    and on PCA features (``sklearn_pca``), scored the same way.

    Engines: ``svi`` (``zoo info vade`` says why the other generic engines do not apply) and
    the two scikit-learn peers.
    """
    check_sizes(x, clusters=clusters, latent_dim=latent_dim, hidden=hidden, batch_size=batch_size)
    N, D = x.shape
    mu, sigma = mixture_prior(clusters, latent_dim)
    pi = torch.full((clusters,), 1.0 / clusters)
    net = decoder("vade_decoder", latent_dim, D, hidden)
    with pyro.plate("data", N, subsample_size=min(batch_size, N)) as idx:
        c = pyro.sample("c", dist.Categorical(pi), infer={"enumerate": "parallel"})
        # mu[c], sigma[c]: the cluster's parameters under any enumeration or draw dims of c
        z = pyro.sample("z", dist.Normal(mu[c], sigma[c].unsqueeze(-1)).to_event(1))
        loc, scale = net(z)
        pyro.sample("x", dist.Normal(loc, scale).to_event(1), obs=x[idx])


def mixture_prior(clusters: int, latent_dim: int) -> tuple[torch.Tensor, torch.Tensor]:
    """VaDE's cluster means mu (clusters, latent_dim) and sds sigma (clusters,), ``pyro.param``
    sites of the model. They start overlapping, mu_c ~ N(0, MU_INIT^2 I), sigma_c = 1, where the
    untrained encoder puts every image: each cluster claims images from the start and they pull
    apart as the codes do (started far apart, most clusters began far from every code and
    never won one)."""
    mu = pyro.param("vade_mu", lambda: MU_INIT * torch.randn(clusters, latent_dim))
    sigma = pyro.param("vade_sigma", lambda: torch.ones(clusters), constraint=constraints.positive)
    return mu, sigma


@vade.set_guide
def _(x: torch.Tensor, latent_dim: int, hidden: int, batch_size: int) -> None:
    """q(z_i | x_i): the VAE's amortised encoder; c_i is summed out in the model."""
    sample_codes("vade_encoder", x, latent_dim, hidden, batch_size)


def assignments(z: torch.Tensor, clusters: int) -> torch.Tensor:
    """argmax_c p(c | z) = argmax_c pi_c N(z | mu_c, sigma_c^2 I) at the fitted prior."""
    mu, sigma = mixture_prior(clusters, z.shape[-1])
    with torch.no_grad():  # pi is uniform: the most probable cluster has the densest prior
        prior = dist.Normal(mu, sigma.unsqueeze(-1)).to_event(1)
        return prior.log_prob(z.unsqueeze(-2)).argmax(-1)


@vade.evaluate
def score_vade(
    x: torch.Tensor,
    x_test: torch.Tensor | None,
    y: torch.Tensor | None,
    y_test: torch.Tensor | None,
    clusters: int,
    latent_dim: int,
    hidden: int,
    batch_size: int,
) -> dict[str, Any]:
    """After an svi fit: the clustering accuracy against the labels on the training and
    held-out images (``cluster_accuracy``, ``heldout_cluster_accuracy``), the held-out scores
    (:func:`held_out_scores`, c summed out), reconstructions, and IMAGES samples of each
    cluster, z ~ N(mu_c, sigma_c^2 I), rows in the order of the digits they map to."""
    if not fitted("vade_encoder"):
        return {}
    sizes = {"clusters": clusters, "latent_dim": latent_dim, "hidden": hidden}
    model, guide = vade.model, vade.guide
    out: dict[str, Any] = {}
    train = assignments(encoded_mean(guide, {"x": x, **sizes, "batch_size": len(x)}), clusters)
    label_of = np.arange(clusters)
    if y is not None:
        out["cluster_accuracy"], label_of = cluster_accuracy(train.numpy(), y.numpy())
    mu, sigma = mixture_prior(clusters, latent_dim)
    order = np.argsort(np.where(label_of >= 0, label_of, clusters + np.arange(clusters)))
    z = mu[order].repeat_interleave(IMAGES, 0) + sigma[order].repeat_interleave(IMAGES)[
        :, None
    ] * torch.randn(clusters * IMAGES, latent_dim)
    blank = x.new_zeros(len(z), x.shape[1])
    samples = decoded_mean(model, {"x": blank, **sizes, "batch_size": len(z)}, z.detach())
    rows = [
        f"cluster {c} (digit {label_of[c]})" if label_of[c] >= 0 else f"cluster {c}" for c in order
    ]
    images = {"samples of each cluster": grid(samples, rows)}
    if x_test is not None and len(x_test):
        held = {"x": x_test, **sizes, "batch_size": batch_size}
        out.update(held_out_scores(model, guide, held, HELD_OUT_PARTICLES, HELD_OUT_ELBO_PARTICLES))
        if y_test is not None:
            test = assignments(encoded_mean(guide, {**held, "batch_size": len(x_test)}), clusters)
            out["heldout_cluster_accuracy"] = float(
                np.mean(label_of[test.numpy()] == y_test.numpy())
            )
        images = {
            "held-out images and their reconstructions": reconstructions(model, guide, held),
            **images,
        }
    return {**out, "images": images}


def gmm_peer(
    x: torch.Tensor,
    x_test: torch.Tensor | None,
    y: torch.Tensor | None,
    y_test: torch.Tensor | None,
    clusters: int,
    batch_size: int,
    features: int | None,
    n_init: int,
) -> zoo.Estimate:
    """scikit-learn's GaussianMixture (full covariances, ``n_init`` starts from k-means, the
    best kept) with ``clusters`` components on the training images' pixels, or on their first
    ``features`` principal components (PCA fitted on the training images); scored like VaDE:
    the clustering accuracy on the training and held-out images (their clusters mapped to digits
    by the map the training images give). The estimate of the model's site c: the clusters of the
    first ``batch_size`` training images (the minibatch whose draws the svi run holds)."""
    train, test = x.double().numpy(), None if x_test is None else x_test.double().numpy()
    c, c_test = sklearn_peer.gaussian_mixture_clusters(train, test, clusters, n_init, features)
    extras: dict[str, Any] = {"features": "pixels" if features is None else f"PCA ({features})"}
    if y is not None:
        extras["cluster_accuracy"], label_of = cluster_accuracy(c, y.numpy())
        if c_test is not None and y_test is not None:
            extras["heldout_cluster_accuracy"] = float(np.mean(label_of[c_test] == y_test.numpy()))
    return zoo.Estimate({"c": c[: min(batch_size, len(c))]}, extras=extras)


@vade.reference("sklearn")
def _(
    x: torch.Tensor,
    x_test: torch.Tensor | None,
    y: torch.Tensor | None,
    y_test: torch.Tensor | None,
    clusters: int,
    batch_size: int,
    *,
    n_init: int = 3,
) -> zoo.Estimate:
    """scikit-learn's GaussianMixture on the pixels, the peer (clustering accuracy)."""
    return gmm_peer(x, x_test, y, y_test, clusters, batch_size, None, n_init)


@vade.reference("sklearn_pca")
def _(
    x: torch.Tensor,
    x_test: torch.Tensor | None,
    y: torch.Tensor | None,
    y_test: torch.Tensor | None,
    clusters: int,
    latent_dim: int,
    batch_size: int,
    *,
    n_init: int = 3,
) -> zoo.Estimate:
    """scikit-learn's GaussianMixture on the first latent_dim principal components, the peer
    in a space of VaDE's latent dimension."""
    return gmm_peer(x, x_test, y, y_test, clusters, batch_size, latent_dim, n_init)
