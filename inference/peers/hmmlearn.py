"""hmmlearn, the peer of the HMM reference engines: its Baum–Welch and its three problems
(score, Viterbi decoding, marginals) on plain arrays, from given starting parameters."""

from __future__ import annotations

import importlib
from typing import Any

import numpy as np

from zoo_inference.algorithms.hmm import posterior_decoding
from zoo_inference.results import ZooError

PeerFit = tuple[dict[str, np.ndarray], list[float], dict[str, Any]]


def hmmlearn_hmm() -> Any:
    """hmmlearn's ``hmm`` module, imported when a peer engine runs (listing models stays cheap).
    It is an optional package (the zoo's ``dev`` extra): its absence is one clear error."""
    try:
        return importlib.import_module("hmmlearn.hmm")
    except ImportError:
        raise ZooError(
            "engine 'hmmlearn' needs the hmmlearn package (the HMM peer, in the zoo's dev "
            "extra): pip install hmmlearn"
        ) from None


def run_hmmlearn(peer: Any, X: np.ndarray, fit: bool) -> tuple[list[float], dict[str, Any]]:
    """Baum–Welch by hmmlearn on ``X`` from the parameters ``peer`` holds (no fit when ``fit`` is
    False), then hmmlearn's own three problems at its parameters: ``score`` (log p(x)),
    ``decode`` (the Viterbi path and its log p(z, x)) and ``predict_proba`` (the marginals
    p(z_t | x), whose argmax is the posterior decoding). The trace is hmmlearn's log-likelihood
    per iteration (each at the parameters before that iteration's M-step) closed by the score
    at the parameters returned, so that it ends where ``em``'s does."""
    with np.errstate(divide="ignore"):  # log 0 for a probability EM drove to 0
        if fit:
            peer.fit(X)
        score = float(peer.score(X))
        log_joint, path = peer.decode(X, algorithm="viterbi")
        gamma = peer.predict_proba(X)
    trace = [*map(float, peer.monitor_.history), score] if fit else []
    extras = {
        "log_likelihood": score,
        "marginals": gamma,
        "viterbi": np.asarray(path, dtype=int),
        "viterbi_log_joint": float(log_joint),
        "posterior_decoding": posterior_decoding(gamma),
        "converged": bool(peer.monitor_.converged) if fit else None,
        "hmmlearn_iterations": int(peer.monitor_.iter) if fit else 0,
    }
    return trace, extras


def categorical_hmmlearn(
    xs: np.ndarray,
    pi: np.ndarray,
    A: np.ndarray,
    B: np.ndarray,
    *,
    fit: bool,
    max_iter: int,
    tol: float,
) -> PeerFit:
    """hmmlearn's CategoricalHMM on the symbols ``xs`` from (pi, A, B): Baum–Welch when ``fit``
    (``max_iter`` and ``tol`` are its ``n_iter`` and ``tol``), else its answers at (pi, A, B).
    Returns ({pi, A, B}, log-likelihood trace, extras of :func:`run_hmmlearn`)."""
    K, M = B.shape
    peer = hmmlearn_hmm().CategoricalHMM(
        n_components=K,
        n_features=M,
        init_params="",
        params="ste" if fit else "",
        n_iter=max_iter,
        tol=tol,
    )
    peer.startprob_, peer.transmat_, peer.emissionprob_ = pi, A, B
    trace, extras = run_hmmlearn(peer, xs[:, None], fit)
    values = {"pi": peer.startprob_, "A": peer.transmat_, "B": peer.emissionprob_}
    return {k: np.array(v, dtype=float) for k, v in values.items()}, trace, extras


def gaussian_hmmlearn(
    xs: np.ndarray,
    pi: np.ndarray,
    A: np.ndarray,
    mu: np.ndarray,
    sigma: np.ndarray,
    *,
    fit: bool,
    max_iter: int,
    tol: float,
) -> PeerFit:
    """hmmlearn's GaussianHMM (diagonal covariances: in 1-D one variance per state, sigma
    squared; ``covars_prior=0`` makes its M-step maximum likelihood) on the series ``xs`` from
    (pi, A, mu, sigma): Baum–Welch when ``fit``, else its answers at those parameters. The
    states are relabelled by increasing mean (the Viterbi path and the marginals with them).
    Returns ({pi, A, mu, sigma}, log-likelihood trace, extras of :func:`run_hmmlearn`)."""
    K = len(pi)
    peer = hmmlearn_hmm().GaussianHMM(
        n_components=K,
        covariance_type="diag",
        covars_prior=0.0,
        init_params="",
        params="stmc" if fit else "",
        n_iter=max_iter,
        tol=tol,
    )
    peer.n_features = 1
    peer.startprob_, peer.transmat_ = pi, A
    peer.means_, peer.covars_ = mu[:, None], sigma[:, None] ** 2
    trace, extras = run_hmmlearn(peer, xs[:, None], fit)
    mu = np.array(peer.means_[:, 0], dtype=float)
    order = np.argsort(mu, kind="stable")
    rank = np.argsort(order)  # the new label of each of hmmlearn's states
    extras["marginals"] = extras["marginals"][:, order]
    extras["viterbi"] = rank[extras["viterbi"]]
    extras["posterior_decoding"] = rank[extras["posterior_decoding"]]
    values = {
        "pi": np.array(peer.startprob_, dtype=float)[order],
        "A": np.array(peer.transmat_, dtype=float)[np.ix_(order, order)],
        "mu": mu[order],
        "sigma": np.sqrt(np.array(peer.covars_, dtype=float).reshape(K)[order]),
    }
    return values, trace, extras
