"""Topic models: latent Dirichlet allocation (seed 002 §16.2; 001 §2.5)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pyro
import pyro.distributions as dist
import torch
from pyro.distributions import constraints
from pyro.ops.indexing import Vindex

import zoo
from zoo_inference.algorithms.cavi import lda_cavi_steps, lda_responsibilities
from zoo_inference.algorithms.gibbs import lda_collapsed_gibbs
from zoo_inference.distributions import IndexCategorical
from zoo_inference.peers import sklearn as sklearn_peer

# Known topics of the synthetic corpus: topic k puts 0.22 on each of words 4k..4k+3 (0.88 in
# all) and 0.015 on each of the other eight words.
K_TRUE, V_TRUE = 3, 12


def true_topics() -> np.ndarray:
    """The synthetic corpus's topic-word matrix (3, 12); rows sum to one."""
    phi = np.full((K_TRUE, V_TRUE), 0.015)
    for k in range(K_TRUE):
        phi[k, 4 * k : 4 * k + 4] = 0.22
    return phi


def lda_synthetic(
    seed: int, docs: int = 40, length: int = 20, alpha: float = 0.5
) -> tuple[dict[str, Any], dict[str, Any]]:
    """``docs`` documents of ``length`` words from the known topics: theta_d ~ Dir(alpha),
    z_dn ~ Cat(theta_d), w_dn ~ Cat(phi_{z_dn}); numpy's generator seeded by ``seed``."""
    rng = np.random.default_rng(seed)
    phi = true_topics()
    theta = rng.dirichlet(np.full(K_TRUE, alpha), size=docs)
    z = np.stack([rng.choice(K_TRUE, size=length, p=t) for t in theta])  # (D, N)
    w = np.array([[rng.choice(V_TRUE, p=phi[k]) for k in row] for row in z])
    truth = {
        "phi": torch.tensor(phi, dtype=torch.float32),
        "theta": torch.tensor(theta, dtype=torch.float32),
        "z": torch.tensor(z.T),  # the model's layout: (words, docs)
    }
    return {"words": torch.tensor(w), "K": K_TRUE, "V": V_TRUE}, truth


def _corpus(seed: int = 0) -> dict[str, Any]:
    """40 documents of 20 words over 12 word types from 3 known topics (the synthetic
    generator at seed 0: the default data are fixed)."""
    return lda_synthetic(0)[0]


def relabel_topics(phi: np.ndarray) -> np.ndarray:
    """The permutation that orders topics by their most probable word (phi (..., K, V) ->
    (..., K)): one labelling of the K! equivalent ones, the same for every estimate."""
    return np.argsort(phi.argmax(-1), axis=-1, kind="stable")


def check_corpus(words: torch.Tensor, K: int, V: int, *, values: bool = True) -> None:
    """A corpus is an integer matrix (documents, words) of word ids in 0..V-1, and K >= 2.
    The model checks shapes only (``values=False``): the batched log density traces it, and
    a check of the ids' values would be a branch on data inside the trace (zoo.run's data
    validation refuses ids outside the Categorical's support before the model runs)."""
    if words.ndim != 2 or words.dtype not in (torch.int64, torch.int32):
        raise zoo.ZooError(
            f"words must be an integer matrix (documents, words), got {tuple(words.shape)}"
        )
    if values and words.numel() and (int(words.min()) < 0 or int(words.max()) >= V):
        raise zoo.ZooError(f"words must be word ids in 0..{V - 1} (V = {V})")
    if not (isinstance(K, int) and K >= 2):
        raise zoo.ZooError(f"K must be an integer >= 2, got {K!r}")


@zoo.register(
    data=_corpus,
    figures={"topics": {"topic_word": "phi", "top": 6}},  # each topic as its top words
    engines=("svi",),
    params=("phi",),
    engine_options={"svi": {"num_steps": 1000, "lr": 0.05}},
    # q(theta_d) from an encoder of document d's words instead of a Dirichlet per document
    variants={"svi_amortised": ("svi", {}, {"amortised": True})},
    seed_ref="002 §16.2 (L2960–3008); 001 §2.5 (L750–1040)",
    math=[
        r"\phi_k \sim \mathrm{Dirichlet}(\eta, \ldots, \eta), \quad k = 1, \ldots, K",
        r"\theta_d \sim \mathrm{Dirichlet}(\alpha, \ldots, \alpha), \quad d = 1, \ldots, D",
        r"z_{dn} \mid \theta_d \sim \mathrm{Categorical}(\theta_d),"
        r" \quad w_{dn} \mid z_{dn} \sim \mathrm{Categorical}(\phi_{z_{dn}})",
    ],
)
def lda(
    words: torch.Tensor,
    K: int = 3,
    V: int = 12,
    alpha: float = 0.5,
    eta: float = 0.5,
    amortised: bool = False,
) -> None:
    r"""Latent Dirichlet allocation: documents are mixtures of topics, topics are distributions
    over words (Blei, Ng & Jordan 2003).

    Generative story (seed 002 §16.2 L2962–2984; 001 §2.5 eqs 106–108)::

        phi_k     ~ Dirichlet(eta, ..., eta),   k = 1..K        topic k's word distribution
        theta_d   ~ Dirichlet(alpha, ..., alpha), d = 1..D      document d's topic proportions
        z_dn      ~ Categorical(theta_d),       n = 1..N        topic of word n of document d
        w_dn | z_dn ~ Categorical(phi_{z_dn})                   the observed word

          alpha --> theta_d --> (z_dn) --> [w_dn] <-- phi_k <-- eta     n in N, d in D, k in K

    alpha = eta = 0.5 (below one): sparse priors, a document uses few topics and a topic few
    words, as in text; the synthetic corpus is drawn with the same alpha. The z_dn are
    enumerated (K values a word) by ``svi``; ``cavi`` is the seed's mean-field coordinate ascent
    (001 eqs 113, 117, 118) with its closed-form ELBO (eq 130); ``gibbs`` is collapsed Gibbs
    (Griffiths & Steyvers 2004: theta and phi integrated out, named in 002 L2996).

    ``amortised`` picks the guide's family, not the model: with it, q(theta_d) is amortised
    (variant ``svi_amortised``, see the guide); the model ignores it.

    Label switching: the topics are exchangeable. The reference engines report topics ordered by
    their most probable word (:func:`relabel_topics`); compare other fits after matching topics
    (the tests use the Hungarian algorithm, scipy's linear_sum_assignment).
    """
    check_corpus(words, K, V, values=False)
    D, N = words.shape
    phi = pyro.sample("phi", dist.Dirichlet(torch.full((K, V), float(eta))).to_event(1))
    with pyro.plate("docs", D, dim=-1):
        theta = pyro.sample("theta", dist.Dirichlet(torch.full((K,), float(alpha))))
        with pyro.plate("words", N, dim=-2):
            z = pyro.sample("z", dist.Categorical(theta))  # (N, D)
            pyro.sample("w", dist.Categorical(Vindex(phi)[..., z, :]), obs=words.T)


@lda.set_guide
def _(words: torch.Tensor, K: int, V: int, alpha: float, amortised: bool = False) -> None:
    """Mean-field Dirichlets, the family of the seed's CAVI (001 eq 109): q(phi_k) =
    Dir(lambda_k), q(theta_d) = Dir(gamma_d); the z_dn are enumerated exactly in the model
    (TraceEnum_ELBO: a tighter bound than CAVI's, whose q(z) is a factor of its own). lambda
    starts near uniform with noise, which breaks the topics' symmetry.

    ``amortised``: gamma_d = encoder(c_d) instead of a free parameter per document, with c_d
    document d's word frequencies (Srivastava & Sutton 2017; Pyro's LDA example): one network
    serves every document, new ones included, so its parameters do not grow with the corpus
    (here V*H + H + H*K + K = 195 against D*K = 120 free gammas for 40 documents)."""
    D = words.shape[0]
    lam = pyro.param("q_phi_conc", lambda: 1.0 + torch.rand(K, V), constraint=constraints.positive)
    pyro.sample("phi", dist.Dirichlet(lam).to_event(1))
    if amortised:
        gamma = topic_encoder(word_frequencies(words, V), K)
    else:
        gamma = pyro.param(
            "q_theta_conc",
            lambda: torch.full((D, K), float(alpha) + 1.0),
            constraint=constraints.positive,
        )
    with pyro.plate("docs", D, dim=-1):
        pyro.sample("theta", dist.Dirichlet(gamma))


def word_frequencies(words: torch.Tensor, V: int) -> torch.Tensor:
    """c_dv = (number of times word v occurs in document d) / (document length): (D, V)."""
    counts = torch.zeros(words.shape[0], V).scatter_add_(1, words, torch.ones(words.shape))
    return counts / words.shape[1]


def topic_encoder(c: torch.Tensor, K: int, hidden: int = 12) -> torch.Tensor:
    """gamma_d = softplus(W2 softplus(W1 c_d + b1) + b2) + 0.01: a one-hidden-layer network
    from word frequencies to the concentrations of q(theta_d) (the 0.01 floor keeps every
    Dirichlet proper). Its weights are Pyro params, drawn N(0, 1/fan_in) at the first step;
    b2 starts at softplus^-1(alpha + 1 - 0.01) ~ 1.4, so q(theta_d) starts where the
    per-document guide does."""
    V = c.shape[-1]
    W1 = pyro.param("enc_W1", lambda: torch.randn(V, hidden) / V**0.5)
    b1 = pyro.param("enc_b1", lambda: torch.zeros(hidden))
    W2 = pyro.param("enc_W2", lambda: torch.randn(hidden, K) / hidden**0.5)
    b2 = pyro.param("enc_b2", lambda: torch.full((K,), 1.4))
    h = torch.nn.functional.softplus(c @ W1 + b1)
    return torch.nn.functional.softplus(h @ W2 + b2) + 0.01


@lda.reference("cavi")
def _(
    words: torch.Tensor,
    K: int,
    V: int,
    alpha: float,
    eta: float,
    *,
    max_iter: int = 500,
    tol: float = 1e-10,
    progress: bool = False,
) -> zoo.Factors:
    """Mean-field CAVI (seed 001 §2.5): Dirichlet factors for phi and theta, ELBO eq 130."""
    check_corpus(words, K, V)
    w = words.numpy()
    lam0 = eta + np.random.gamma(100.0, 0.01, size=(K, V)) * w.size / (K * V)
    lam, gamma, resp, trace = lda_cavi_steps(w, K, V, alpha, eta, lam0, max_iter, tol, progress)
    order = relabel_topics(lam)
    lam, gamma, resp = lam[order], gamma[:, order], resp[..., order]
    f64: dict[str, Any] = dict(dtype=torch.float64)
    return zoo.Factors(
        {
            "phi": dist.Dirichlet(torch.tensor(lam, **f64)).to_event(1),
            "theta": dist.Dirichlet(torch.tensor(gamma, **f64)),
            # q(z_dn) in the model's layout (words, docs)
            "z": IndexCategorical(torch.tensor(resp.transpose(1, 0, 2), **f64)),
        },
        traces={"elbo": trace},
        log_evidence=trace[-1],
        evidence_kind="lower_bound",
        extras={"q_z": resp, "lambda": lam, "gamma": gamma},
    )


@lda.reference("gibbs")
def _(
    words: torch.Tensor,
    K: int,
    V: int,
    alpha: float,
    eta: float,
    *,
    num_samples: int = 100,
    warmup: int = 100,
    num_chains: int = 2,
    progress: bool = False,
) -> zoo.Draws:
    """Collapsed Gibbs on the topic assignments; theta and phi drawn from their Dirichlet
    conditionals given each state, topics ordered by their most probable word."""
    check_corpus(words, K, V)
    out = lda_collapsed_gibbs(
        words.numpy(), K, V, alpha, eta, num_samples, warmup, num_chains, relabel_topics, progress
    )
    return zoo.Draws(out, chains=True)


@lda.reference("sklearn")
def _(
    words: torch.Tensor,
    K: int,
    V: int,
    alpha: float,
    eta: float,
    *,
    n_init: int = 3,
    max_iter: int = 1000,
    perp_tol: float = 1e-6,
    mean_change_tol: float = 1e-6,
) -> zoo.Factors:
    """scikit-learn's LatentDirichletAllocation (batch variational Bayes), the peer.

    The same mean-field family and updates as ``cavi`` (Blei et al. 2003; Hoffman et al. 2010) on
    the documents' word counts, with doc_topic_prior = alpha, topic_word_prior = eta,
    learning_method = "batch"; it stops when the perplexity, checked every 10 passes, changes by
    less than ``perp_tol``. scikit-learn fits from one random start (``random_state``, from the
    run's seed); the engine keeps the best bound of ``n_init`` starts (one start in 40 on the
    synthetic corpora stayed at a local optimum 35 nats lower, its topics 0.42 from the truth).
    Its factors are the run: q(phi_k) = Dir(components_k), q(theta_d) =
    Dir(transform(normalize=False)_d), and q(z_dn) ∝ exp(E[log theta_dk] + E[log phi_{k,
    w_dn}]), the E-step it runs on counts, given per token. Topics ordered by their most
    probable word, as ``cavi``'s. log_evidence = ``score``, its variational bound: the ELBO of
    eq 130 at these factors (a lower bound). extras: the topic-word matrix normalised
    ("topic_word") and the documents' topic proportions ("doc_topic"), as scikit-learn reports
    them; "scores": every start's bound.
    """
    check_corpus(words, K, V)
    w = words.numpy()
    counts = np.stack([np.bincount(row, minlength=V) for row in w])  # (D, V) bag of words
    fits = sklearn_peer.lda(
        counts,
        K,
        alpha=alpha,
        eta=eta,
        n_init=n_init,
        max_iter=max_iter,
        perp_tol=perp_tol,
        mean_change_tol=mean_change_tol,
    )
    score, peer = max(fits, key=lambda f: f[0])
    order = relabel_topics(peer.components_)
    lam = peer.components_[order]
    gamma = peer.transform(counts, normalize=False)[:, order]
    resp = lda_responsibilities(w, lam, gamma)
    f64: dict[str, Any] = dict(dtype=torch.float64)
    return zoo.Factors(
        {
            "phi": dist.Dirichlet(torch.tensor(lam, **f64)).to_event(1),
            "theta": dist.Dirichlet(torch.tensor(gamma, **f64)),
            "z": IndexCategorical(torch.tensor(resp.transpose(1, 0, 2), **f64)),
        },
        log_evidence=score,
        evidence_kind="lower_bound",
        extras={
            "topic_word": lam / lam.sum(1, keepdims=True),
            "doc_topic": gamma / gamma.sum(1, keepdims=True),
            "q_z": resp,
            "lambda": lam,
            "gamma": gamma,
            "n_iter": int(peer.n_iter_),
            "scores": [f[0] for f in fits],
        },
    )


@lda.synthetic
def _(seed: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """40 documents of 20 words from the known topics (:func:`true_topics`), alpha = 0.5."""
    return lda_synthetic(seed)
