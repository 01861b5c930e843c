"""Scores of fitted models: held-out log-likelihood and ELBO of an amortised model by importance
sampling, the KL divergence of diagonal Gaussians, and clustering accuracy against labels."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from scipy.optimize import linear_sum_assignment

from zoo_inference.amortised import pointwise_log_weights

from .bayes_nn import posterior_weights, with_weights


def held_out_scores(
    model: Callable[..., Any],
    guide: Callable[..., Any],
    data: dict[str, Any],
    particles: int,
    elbo_particles: int,
) -> dict[str, float]:
    """Per held-out image, averaged (``data``: the model's arguments with the held-out images):

    - ``heldout_log_lik``: log (1/K) sum_k w_k, w_k = p(x, z_k)/q(z_k | x), K =
      ``particles`` draws z_k ~ q(z | x) (importance sampling, the encoder the proposal);
      ``heldout_log_lik_se``: its Monte-Carlo standard error (delta method, per image
      sd(w) / (sqrt(K) mean(w)));
    - ``heldout_elbo``: mean_k log w_k over ``elbo_particles`` independent draws, and its
      standard error; the importance estimate exceeds it by about KL(q(z | x) || p(z | x))."""
    lw = pointwise_log_weights(model, guide, data, particles, max_plate_nesting=1)
    lw_elbo = pointwise_log_weights(model, guide, data, elbo_particles, max_plate_nesting=1)
    return scores_of_log_weights(lw, lw_elbo)


def held_out_scores_over_weights(
    model: Callable[..., Any],
    guide: Callable[..., Any],
    data: dict[str, Any],
    site: str,
    weight_draws: int,
    particles: int,
    elbo_particles: int,
) -> dict[str, float]:
    """:func:`held_out_scores` for a model whose network weights are the global latent ``site``
    with a posterior q(theta) in the guide (:mod:`.bayes_nn`): the predictive density
    log E_q(theta) p(x | theta) per image, by importance sampling over the pairs (theta_s,
    z_sk), theta_s ~ q(theta) (``weight_draws`` of them, shared by the images), z_sk ~ q(z | x)
    (``particles`` // ``weight_draws`` each), w_sk = p(x, z_sk | theta_s) / q(z_sk | x): consistent
    as both grow. ``heldout_elbo`` is E_q(theta) E_q(z | x) log w, the per-image ELBO without
    the weights' KL (a global term, not an image's)."""
    if weight_draws < 1 or particles < weight_draws or elbo_particles < weight_draws:
        raise ValueError("need weight_draws >= 1 and at least one particle per weight draw")
    lws, lws_elbo = [], []
    for _ in range(weight_draws):
        theta = posterior_weights(guide, site, data)
        m, g = with_weights(model, site, theta), with_weights(guide, site, theta)
        k, k_elbo = particles // weight_draws, elbo_particles // weight_draws
        lws.append(pointwise_log_weights(m, g, data, k, max_plate_nesting=1))
        lws_elbo.append(pointwise_log_weights(m, g, data, k_elbo, max_plate_nesting=1))
    out = scores_of_log_weights(np.concatenate(lws), np.concatenate(lws_elbo))
    return {**out, "heldout_weight_draws": weight_draws}


def scores_of_log_weights(lw: np.ndarray, lw_elbo: np.ndarray) -> dict[str, float]:
    """The scores of :func:`held_out_scores` from the log weights (K, n) of the importance
    estimate and those (K', n) of the ELBO."""
    K, n = lw.shape
    top = lw.max(0)
    w = np.exp(lw - top)
    log_lik = np.log(w.mean(0)) + top
    rel_se = w.std(0) / (np.sqrt(K) * w.mean(0))
    elbo_se = np.sqrt((lw_elbo.var(0, ddof=1) / lw_elbo.shape[0]).sum()) / n
    return {
        "heldout_log_lik": float(log_lik.mean()),
        "heldout_log_lik_se": float(np.sqrt((rel_se**2).sum()) / n),
        "heldout_elbo": float(lw_elbo.mean()),
        "heldout_elbo_se": float(elbo_se),
        "heldout_particles": K,
        "heldout_images": n,
    }


def gaussian_kl(loc_q: Any, var_q: Any, loc_p: Any, var_p: Any) -> torch.Tensor:
    """KL(N(m1, S1) || N(m2, S2)) for diagonal covariances, given as variances (002 L6978–6992;
    the determinant of a diagonal matrix is the product of its diagonal):

        1/2 [ log |S2| / |S1| - n + tr(S2^-1 S1) + (m2 - m1)^T S2^-1 (m2 - m1) ]

    over the last dim, in double precision. With m2 = 0 and S2 = I it is the KL term of the VAE's
    ELBO, 1/2 sum_j (m_j^2 + s_j^2 - 1 - log s_j^2) (001 eq 168), which TraceMeanField_ELBO
    computes in closed form."""
    m1, v1, m2, v2 = (torch.as_tensor(a, dtype=torch.float64) for a in (loc_q, var_q, loc_p, var_p))
    return 0.5 * (torch.log(v2 / v1) - 1.0 + v1 / v2 + (m2 - m1) ** 2 / v2).sum(-1)


def cluster_accuracy(clusters: np.ndarray, labels: np.ndarray) -> tuple[float, np.ndarray]:
    """The share of points whose cluster maps to their label under the best one-to-one map of
    clusters to labels (the Hungarian method on the contingency table), and that map: the label
    of each cluster (-1 for clusters left unmatched)."""
    clusters, labels = np.asarray(clusters, dtype=int), np.asarray(labels, dtype=int)
    k = int(max(clusters.max(), labels.max())) + 1
    table = np.zeros((k, k))
    np.add.at(table, (clusters, labels), 1)
    rows, cols = linear_sum_assignment(-table)
    label_of = np.full(k, -1)
    label_of[rows] = cols
    return float(table[rows, cols].sum() / len(labels)), label_of
