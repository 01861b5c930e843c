"""vae's Bayesian decoder (full variational Bayes, seed 001 §3.3, eqs 155–162): the weights'
term of the mean-field ELBO is the closed-form KL(q(theta) || N(0, I)), counted once and not
scaled by the minibatch (eq 160); the network run with drawn weights is the network; training
raises the ELBO; the held-out predictive estimate, which draws the weights from q(theta), is
finite and consistent with the held-out ELBO; bad input is refused. Which decoder scores
better on the held-out images is a measured outcome (the report's figure), not a test."""

from __future__ import annotations

import math

import numpy as np
import pyro
import pyro.poutine as poutine
import pytest
import torch
from pyro.infer import TraceMeanField_ELBO

import zoo
from tests.seeding import shifted
from zoo.models import deep
from zoo_inference.algorithms.bayes_nn import flatten, unflatten, weight_shapes, with_weights
from zoo_inference.algorithms.evaluation import gaussian_kl, held_out_scores_over_weights
from zoo_inference.runtime import threads

VAE = zoo.get_model("vae")
TINY = {"latent_dim": 1, "hidden": 2, "batch_size": 2, "bayesian_decoder": True}


@pytest.fixture(autouse=True)
def _one_thread():
    with threads(1):
        yield
    pyro.clear_param_store()


def tiny_data() -> dict:
    x = torch.rand(4, 3, generator=torch.Generator().manual_seed(0))
    return {"x": x, "x_test": None, **TINY}


def test_weights_round_trip_through_the_flat_vector():
    net = deep.Gaussian(2, 3, 4, deep.SIGMA_MIN)
    theta = flatten(net)
    assert theta.shape == (sum(p.numel() for p in net.parameters()),)
    back = unflatten(theta, weight_shapes(net))
    for name, p in net.named_parameters():
        assert torch.equal(back[name], p.detach())
    with pytest.raises(ValueError, match="weight vector"):
        unflatten(theta[:-1], weight_shapes(net))
    # the structure-only template runs with these weights as the network itself does
    z = torch.randn(5, 2)
    out = torch.func.functional_call(deep.decoder_template(2, 3, 4), back, (z,))
    torch.testing.assert_close(out, net(z))


def test_the_weights_term_is_the_closed_form_kl_counted_once():
    """Tiny case (N = 4 images of 3 pixels, minibatches of 2, so the data terms carry N/B = 2):
    at one replayed draw of (theta, z), -TraceMeanField_ELBO of the full model equals that of
    the model given theta plus KL(N(m, diag s^2) || N(0, I)) from the closed form, unscaled."""
    pyro.set_rng_seed(shifted(61))
    pyro.clear_param_store()
    data = tiny_data()
    guide_trace = poutine.trace(VAE.guide).get_trace(**data)
    store = pyro.get_param_store()
    gen = torch.Generator().manual_seed(shifted(62))
    loc = torch.randn(store["decoder_weights_loc"].shape, generator=gen)
    scale = 0.1 + torch.rand(loc.shape, generator=gen)
    store["decoder_weights_loc"] = loc
    store["decoder_weights_scale"] = scale
    guide_trace = poutine.trace(VAE.guide).get_trace(**data)  # q(theta) at the new values
    theta = guide_trace.nodes["decoder_weights"]["value"]
    guide = poutine.replay(VAE.guide, trace=guide_trace)
    elbo = TraceMeanField_ELBO(max_plate_nesting=1)
    with torch.no_grad():
        full = elbo.loss(VAE.model, guide, **data)
        given = elbo.loss(
            with_weights(VAE.model, "decoder_weights", theta),
            with_weights(guide, "decoder_weights", theta),
            **data,
        )
    kl = float(gaussian_kl(loc, scale**2, torch.zeros_like(loc), torch.ones_like(loc)))
    assert kl > 1.0  # a term the check can see
    assert full == pytest.approx(given + kl, rel=1e-5, abs=1e-4), (full, given, kl)
    # the subsample's scale N/B = 2 is on the data terms only
    assert guide_trace.nodes["decoder_weights"]["scale"] == 1.0
    assert guide_trace.nodes["z"]["scale"] == pytest.approx(2.0)


@pytest.fixture(scope="module")
def bayes_run():
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(deep, "HELD_OUT_PARTICLES", 100)
        mp.setattr(deep, "HELD_OUT_ELBO_PARTICLES", 20)
        mp.setattr(deep, "HELD_OUT_WEIGHT_DRAWS", 5)
        return zoo.run(VAE, "svi_bayes_decoder", seed=shifted(63), num_steps=200)


def test_training_raises_the_elbo(bayes_run):
    """The ELBO (one draw a step, with the weights' KL) over the last 20 of 200 steps beats the
    first 20 by more than 5 standard errors of their difference."""
    assert bayes_run.ok, bayes_run.error
    trace = np.asarray(bayes_run.traces["elbo"])
    first, last = trace[:20], trace[-20:]
    se = math.sqrt(first.var(ddof=1) / 20 + last.var(ddof=1) / 20)
    assert last.mean() - first.mean() > 5 * se, (first.mean(), last.mean(), se)


def test_held_out_estimate_integrates_over_the_weights(bayes_run):
    """The held-out predictive log-likelihood, from 5 weight draws x 20 codes per image, is
    finite, with a finite standard error, and at or above the held-out ELBO (importance
    sampling against its Jensen bound) up to their Monte-Carlo errors; the run says the
    weights were drawn, and the weights are a draw of the posterior group."""
    d = bayes_run.diagnostics
    assert d["heldout_weight_draws"] == 5 and d["heldout_particles"] == 100
    for key in ("heldout_log_lik", "heldout_log_lik_se", "heldout_elbo", "heldout_elbo_se"):
        assert math.isfinite(d[key]), key
    tol = 5 * math.hypot(d["heldout_log_lik_se"], d["heldout_elbo_se"])
    assert d["heldout_log_lik"] >= d["heldout_elbo"] - tol
    post = bayes_run.idata.posterior
    assert post["decoder_weights"].shape[-1] == sum(
        p.numel() for p in deep.Gaussian(deep.LATENT, 64, deep.HIDDEN, 1.0).parameters()
    )
    assert bayes_run.model_data == {"bayesian_decoder": True}


def test_bad_flag_is_refused():
    """zoo.run takes only data keys (x, x_test); the model itself checks the flag."""
    with pytest.raises(zoo.ZooError, match="bayesian_decoder must be True or False"):
        VAE.model(tiny_data()["x"], bayesian_decoder="yes")
    with pytest.raises(zoo.ZooError, match="unknown data key"):
        zoo.run(VAE, "svi", data={**VAE.load_data(), "bayesian_decoder": True}, num_steps=2)


def test_engine_is_listed():
    assert "svi_bayes_decoder" in VAE.engines
    spec = VAE.engine_spec("svi_bayes_decoder")
    assert "num_steps" in spec.defaults and "bayesian_decoder=True" in spec.summary


def test_held_out_estimate_against_quadrature():
    """Tiny case (d = 1, 3 pixels, 6 held-out images), q(theta) collapsed to its mean (sds
    1e-6), q(z | x) the prior: the estimate over weight draws equals log p(x | m) by 80-node
    Gauss–Hermite quadrature over z, within 5 of its standard errors (plus 0.01 for the
    estimate's O(1/K) bias), per image on average."""
    pyro.set_rng_seed(shifted(64))
    pyro.clear_param_store()
    x = torch.rand(6, 3, generator=torch.Generator().manual_seed(1))
    data = {"x": x, "x_test": None, **{**TINY, "batch_size": 6}}
    VAE.guide(**data)  # q(theta) and the encoder at their initial values
    store = pyro.get_param_store()
    store["decoder_weights_scale"] = torch.full_like(store["decoder_weights_loc"], 1e-6)
    # q(z | x) = N(0, 1), the prior: the weights are the likelihood, a proposal as good for
    # every initial network (an untrained encoder can miss the posterior of z, and the log of
    # the weights' mean is then biased below the truth by more than their spread shows)
    with torch.no_grad():
        store["vae_encoder$$$out.weight"].zero_()
        store["vae_encoder$$$out.bias"].copy_(torch.tensor([0.0, math.log(math.expm1(1 - 1e-4))]))
    scores = held_out_scores_over_weights(
        VAE.model, VAE.guide, data, "decoder_weights", 4, 4000, 40
    )
    loc = store["decoder_weights_loc"].detach()
    net = deep.decoder_template(1, 3, 2)
    nodes, weights = np.polynomial.hermite.hermgauss(80)
    z = torch.tensor(nodes * math.sqrt(2.0), dtype=torch.float32)[:, None]
    with torch.no_grad():
        mean, sd = torch.func.functional_call(net, unflatten(loc, weight_shapes(net)), (z,))
        log_lik = torch.distributions.Normal(mean[:, None], sd[:, None]).log_prob(x).sum(-1)
    log_w = torch.tensor(np.log(weights / math.sqrt(math.pi)), dtype=torch.float32)[:, None]
    exact = float(torch.logsumexp(log_w + log_lik, 0).mean())
    tol = 5 * scores["heldout_log_lik_se"] + 0.01
    assert abs(scores["heldout_log_lik"] - exact) < tol, (scores, exact)
    assert scores["heldout_elbo"] <= exact + 5 * scores["heldout_elbo_se"]
