"""scikit-learn, the peer of the mixture and topic reference engines, on plain arrays."""

from __future__ import annotations

import importlib
from typing import Any

import numpy as np

from zoo_inference.algorithms.ppca import canonical_loadings
from zoo_inference.results import ZooError


def scikit_learn(module: str) -> Any:
    """A scikit-learn module (``"mixture"`` or ``"decomposition"``), imported when a peer engine
    runs: listing or registering models never loads scikit-learn (tests/test_import_cost.py)."""
    if module == "mixture":
        return importlib.import_module("sklearn.mixture")
    if module == "decomposition":
        return importlib.import_module("sklearn.decomposition")
    if module == "cluster":
        return importlib.import_module("sklearn.cluster")
    raise ValueError(f"no scikit-learn peer uses sklearn.{module}")


def peer_random_state() -> int:
    """scikit-learn's ``random_state`` for a peer engine, drawn from numpy's global stream, which
    the runner seeds like every reference engine's (same ``seed``, same numbers)."""
    return int(np.random.randint(2**31 - 1))


def check_n_init(n_init: int) -> None:
    if isinstance(n_init, bool) or not (isinstance(n_init, int) and n_init >= 1):
        raise ZooError(f"n_init must be a positive integer, got {n_init!r}")


def gaussian_mixture(
    x: np.ndarray, K: int, *, n_init: int, max_iter: int, tol: float, reg_covar: float
) -> tuple[dict[str, np.ndarray], float, dict[str, Any]]:
    """scikit-learn's GaussianMixture (EM) on the 1-D data ``x`` (N, 1): maximum likelihood,
    best of ``n_init`` k-means starts ("spherical": a variance per component). Components by
    increasing location. Returns ({weights, locs, scales}, log-likelihood at the estimate,
    extras: responsibilities, converged, n_iter)."""
    check_n_init(n_init)
    gm = scikit_learn("mixture").GaussianMixture(
        n_components=K,
        covariance_type="spherical",
        n_init=n_init,
        max_iter=max_iter,
        tol=tol,
        reg_covar=reg_covar,
        random_state=peer_random_state(),
    )
    gm.fit(x)
    order = np.argsort(gm.means_.ravel())  # increasing location: identifiable labels
    values = {
        "weights": gm.weights_[order],
        "locs": gm.means_.ravel()[order],
        "scales": np.sqrt(gm.covariances_[order]),
    }
    extras = {
        "responsibilities": gm.predict_proba(x)[:, order],
        "converged": bool(gm.converged_),
        "n_iter": int(gm.n_iter_),
    }
    return values, float(gm.score(x)) * x.shape[0], extras


def kmeans(
    x: np.ndarray, centres: np.ndarray, *, max_iter: int, tol: float
) -> tuple[np.ndarray, np.ndarray, float, int]:
    """scikit-learn's KMeans (Lloyd's algorithm, one start at ``centres`` (K, D)) on ``x``
    (N, D): the centres, each row's cluster, the inertia and the iterations taken."""
    km = scikit_learn("cluster").KMeans(
        n_clusters=centres.shape[0],
        init=centres,
        n_init=1,
        algorithm="lloyd",
        max_iter=max_iter,
        tol=tol,
        random_state=peer_random_state(),
    )
    km.fit(x)
    return km.cluster_centers_, km.labels_, float(km.inertia_), int(km.n_iter_)


def dp_gaussian_mixture(
    x: np.ndarray,
    T: int,
    *,
    alpha: float,
    sigma: float,
    mu0: float,
    tau0: float,
    n_init: int,
    max_iter: int,
    tol: float,
    spread_dof: float,
) -> Any:
    """scikit-learn's BayesianGaussianMixture fitted to the 1-D data ``x`` (N, 1): mean-field
    variational Bayes on a truncated stick-breaking mixture of T components, sticks Beta(1,
    alpha), atoms' prior N(mu0, tau0^2) and each component's variance pinned near sigma^2 by
    ``spread_dof`` prior degrees of freedom (covariance_prior = spread_dof sigma^2,
    mean_precision_prior = sigma^2 / tau0^2). Returns the fitted estimator."""
    check_n_init(n_init)
    bgm = scikit_learn("mixture").BayesianGaussianMixture(
        n_components=T,
        covariance_type="spherical",
        weight_concentration_prior_type="dirichlet_process",
        weight_concentration_prior=float(alpha),
        mean_prior=[float(mu0)],
        mean_precision_prior=float(sigma / tau0) ** 2,
        covariance_prior=float(spread_dof * sigma**2),
        degrees_of_freedom_prior=float(spread_dof),
        n_init=n_init,
        max_iter=max_iter,
        tol=tol,
        random_state=peer_random_state(),
    )
    bgm.fit(x)
    return bgm


def ppca(
    x: np.ndarray, d: int, *, fa_max_iter: int, fa_tol: float
) -> tuple[dict[str, np.ndarray], float, dict[str, Any]]:
    """scikit-learn's PCA(n_components=d) (exact SVD) as PPCA's maximum likelihood, and
    FactorAnalysis(d) (lapack SVD, ``fa_tol`` on the log-likelihood's change) beside it.

    mu = mean_, W = components_^T (L_d - sigma^2 I)^(1/2) on principal axes
    (:func:`canonical_loadings`), sigma^2 = noise_variance_. scikit-learn's variances divide by
    N - 1; the ML divides by N, so they are rescaled by (N - 1) / N. Returns ({W, mu, sigma},
    score(X) N at the rescaled fit, extras: sigma2, score_unbiased (at its own N - 1 fit) and
    factor_analysis)."""
    n = x.shape[0]
    decomposition = scikit_learn("decomposition")
    pca = decomposition.PCA(n_components=d, svd_solver="full").fit(x)
    score_unbiased = float(pca.score(x)) * n
    pca.explained_variance_ = pca.explained_variance_ * (n - 1) / n
    pca.noise_variance_ = float(pca.noise_variance_) * (n - 1) / n
    sigma2 = float(pca.noise_variance_)
    scale = np.sqrt(np.maximum(pca.explained_variance_ - sigma2, 0.0))
    W = canonical_loadings(pca.components_.T * scale)
    fa = decomposition.FactorAnalysis(
        n_components=d, svd_method="lapack", max_iter=fa_max_iter, tol=fa_tol
    ).fit(x)
    extras = {
        "sigma2": sigma2,
        "score_unbiased": score_unbiased,
        "factor_analysis": {
            "log_likelihood": float(fa.score(x)) * n,
            "W": canonical_loadings(fa.components_.T),
            "mu": fa.mean_,
            "noise_variance": fa.noise_variance_,
            "n_iter": int(fa.n_iter_),
        },
    }
    return {"W": W, "mu": pca.mean_, "sigma": np.sqrt(sigma2)}, float(pca.score(x)) * n, extras


def lda(
    counts: np.ndarray,
    K: int,
    *,
    alpha: float,
    eta: float,
    n_init: int,
    max_iter: int,
    perp_tol: float,
    mean_change_tol: float,
) -> list[tuple[float, Any]]:
    """scikit-learn's LatentDirichletAllocation (batch variational Bayes) on the documents' word
    counts (D, V), doc_topic_prior = alpha, topic_word_prior = eta, from ``n_init`` random
    starts; the perplexity is checked every 10 passes. Returns each start's (score, fit)."""
    check_n_init(n_init)
    decomposition = scikit_learn("decomposition")
    fits = []
    for _ in range(n_init):
        peer = decomposition.LatentDirichletAllocation(
            n_components=K,
            doc_topic_prior=float(alpha),
            topic_word_prior=float(eta),
            learning_method="batch",
            max_iter=max_iter,
            evaluate_every=10,
            perp_tol=perp_tol,
            mean_change_tol=mean_change_tol,
            max_doc_update_iter=1000,
            random_state=peer_random_state(),
        ).fit(counts)
        fits.append((float(peer.score(counts)), peer))
    return fits


def gaussian_mixture_clusters(
    train: np.ndarray, test: np.ndarray | None, clusters: int, n_init: int, features: int | None
) -> tuple[np.ndarray, np.ndarray | None]:
    """scikit-learn's GaussianMixture (full covariances, ``n_init`` k-means starts, the best
    kept) fitted to the rows of ``train``, or to their first ``features`` principal components
    (PCA fitted on ``train``). Returns the clusters of the training rows and of ``test``."""
    if features is not None:
        pca = scikit_learn("decomposition").PCA(n_components=features)
        train = pca.fit_transform(train)
        test = None if test is None else pca.transform(test)
    gmm = (
        scikit_learn("mixture")
        .GaussianMixture(n_components=clusters, n_init=n_init, random_state=peer_random_state())
        .fit(train)
    )
    return gmm.predict(train), None if test is None else gmm.predict(test)
