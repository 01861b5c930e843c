"""Conjugate models: the posterior is in the prior's family, so everything is known exactly."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import numpy as np
import pyro
import pyro.distributions as dist
import torch
from pyro.distributions import constraints
from scipy.special import betaln, gammaln

import zoo
from zoo_inference.algorithms.cavi import normal_gamma_cavi
from zoo_inference.algorithms.conjugate import normal_gamma_log_evidence, normal_mean_update
from zoo_inference.algorithms.gibbs import normal_gamma_gibbs
from zoo_inference.algorithms.markov import bigram_counts


@zoo.register(
    data={"y": torch.tensor([1.0, 1, 0, 1, 1, 1, 0, 1, 1, 0]), "a": 1.0, "b": 1.0},
    seed_ref="000 §2.1.3; 002 §8.1",
    math=[
        r"p \sim \mathrm{Beta}(a,\, b)",
        r"y_i \mid p \sim \mathrm{Bernoulli}(p), \quad i = 1, \ldots, N",
    ],
)
def beta_bernoulli(y: torch.Tensor, a: float = 1.0, b: float = 1.0) -> None:
    r"""Beta–Bernoulli: the heads probability of a coin under a conjugate Beta prior.

    Generative story (seed 000 §2.1.3, table of conjugate pairs; 002 §8.1)::

        p   ~ Beta(a, b)                 prior on the heads probability
        y_i ~ Bernoulli(p),  i = 1..N    independent tosses

            a, b
             |
            (p) ----> [y_i]   i = 1..N

    Posterior Beta(a + k, b + N - k) with k = sum_i y_i; log evidence of the sequence
    log B(a + k, b + N - k) - log B(a, b). Default data: 7 heads in 10 tosses under the uniform
    Beta(1, 1) prior, so the posterior is Beta(8, 4): mean 2/3, MAP 0.7.
    """
    # Beta(1, 1) is uniform on [0, 1]: no preference for any bias before seeing a toss.
    p = pyro.sample("p", dist.Beta(a, b))
    with pyro.plate("tosses", len(y)):
        pyro.sample("y", dist.Bernoulli(p), obs=y)


@beta_bernoulli.set_guide
def _(a: float, b: float) -> None:
    """q(p) = Beta(alpha, beta): the conjugate family, so the optimum is the exact posterior."""
    alpha = pyro.param("q_alpha", torch.tensor(float(a)), constraint=constraints.positive)
    beta = pyro.param("q_beta", torch.tensor(float(b)), constraint=constraints.positive)
    pyro.sample("p", dist.Beta(alpha, beta))


@beta_bernoulli.posterior
def _(y: torch.Tensor, a: float, b: float) -> tuple[dict, float]:
    """Beta(a + k, b + N - k) and log p(y) = log B(a + k, b + N - k) - log B(a, b)."""
    k, n = float(y.sum()), len(y)
    return {"p": dist.Beta(a + k, b + n - k)}, float(betaln(a + k, b + n - k) - betaln(a, b))


@beta_bernoulli.synthetic
def _(seed: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """50 tosses of a coin with heads probability 0.7, the uniform prior kept."""
    p = 0.7
    y = dist.Bernoulli(torch.tensor(p)).sample((50,))
    return {"y": y, "a": 1.0, "b": 1.0}, {"p": torch.tensor(p)}


# ------------------------------------------------------------------------------ shared helpers


def gamma_factor(site: str, mean: float, shape: float) -> torch.Tensor:
    """A guide's Gamma factor for ``site``, parameterised by its mean and shape (rate =
    shape / mean): SVI moves the two nearly independently, where (shape, rate) are strongly
    coupled and converge slowly. Parameters ``q_{site}_mean`` and ``q_{site}_shape``."""
    m = pyro.param(f"q_{site}_mean", torch.tensor(float(mean)), constraint=constraints.positive)
    k = pyro.param(f"q_{site}_shape", torch.tensor(float(shape)), constraint=constraints.positive)
    return pyro.sample(site, dist.Gamma(k, k / m))


# --------------------------------------------------------------------------- gamma_poisson


@zoo.register(
    data={"counts": torch.tensor([3.0, 1.0, 4.0, 1.0, 5.0]), "a": 2.0, "b": 1.0},
    seed_ref="000 §2.1.3",
    math=[
        r"\lambda \sim \mathrm{Gamma}(a,\, b) \quad (\mathrm{shape}\ a,\ \mathrm{rate}\ b)",
        r"\mathrm{counts}_i \mid \lambda \sim \mathrm{Poisson}(\lambda), \quad i = 1, \ldots, N",
    ],
)
def gamma_poisson(counts: torch.Tensor, a: float = 2.0, b: float = 1.0) -> None:
    r"""Gamma–Poisson: the rate of a count process under a conjugate Gamma prior.

    Generative story (seed 000 §2.1.3, table of conjugate pairs: Poisson / lambda / Gamma)::

        rate     ~ Gamma(a, b)                    shape a, rate b: prior mean a / b
        counts_i ~ Poisson(rate),  i = 1..N       independent counts

            a, b
             |
           (rate) ----> [counts_i]   i = 1..N

    Posterior Gamma(a + S, b + N) with S = sum_i counts_i. The evidence is the
    negative-binomial (negative-multinomial) marginal, with y = counts,
    log p(y) = a log b - log G(a) + log G(a + S) - (a + S) log(b + N) - sum_i log y_i!.
    Default data: counts [3, 1, 4, 1, 5] under Gamma(2, 1), so the posterior is Gamma(16, 6):
    mean 8/3 = 2.666667, mode 2.5.
    """
    # Gamma(2, 1): about 2 events per interval, with a wide right tail; as much information as
    # a = 2 events seen in b = 1 interval.
    rate = pyro.sample("rate", dist.Gamma(a, b))
    with pyro.plate("intervals", len(counts)):
        pyro.sample("counts", dist.Poisson(rate), obs=counts)


@gamma_poisson.set_guide
def _(a: float, b: float) -> None:
    """q(rate) = Gamma: the conjugate family, so its optimum is the exact posterior."""
    gamma_factor("rate", a / b, a)


@gamma_poisson.posterior
def _(counts: torch.Tensor, a: float, b: float) -> tuple[dict, float]:
    """Gamma(a + S, b + N) and the negative-binomial log evidence."""
    s, n = float(counts.sum()), len(counts)
    log_z = (
        a * np.log(b)
        - gammaln(a)
        + gammaln(a + s)
        - (a + s) * np.log(b + n)
        - float(torch.lgamma(counts + 1).sum())
    )
    return {"rate": dist.Gamma(a + s, b + n)}, float(log_z)


@gamma_poisson.synthetic
def _(seed: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """50 counts from Poisson(3), the Gamma(2, 1) prior kept."""
    rate = 3.0
    counts = dist.Poisson(torch.tensor(rate)).sample((50,))
    return {"counts": counts, "a": 2.0, "b": 1.0}, {"rate": torch.tensor(rate)}


# --------------------------------------------------------------------------- normal_normal


@zoo.register(
    data={"x": torch.tensor([2.5, 1.0, 3.0, 1.5]), "mu0": 0.0, "tau0": 1.0, "sigma": 1.0},
    seed_ref="000 §2.1.3; 003",
    math=[
        r"\mu \sim \mathcal{N}(\mu_0,\, \tau_0^2)",
        r"x_i \mid \mu \sim \mathcal{N}(\mu,\, \sigma^2),"
        r" \quad i = 1, \ldots, N \quad (\sigma\ \mathrm{known})",
    ],
)
def normal_normal(x: torch.Tensor, mu0: float = 0.0, tau0: float = 1.0, sigma: float = 1.0) -> None:
    r"""Normal–Normal: the mean of Gaussian measurements with known noise sd, Gaussian prior.

    Generative story (seed 000 §2.1.3, table of conjugate pairs: Gaussian / mu / Gaussian)::

        mu  ~ N(mu0, tau0^2)                  prior on the mean
        x_i ~ N(mu, sigma^2),  i = 1..N       sigma known

          mu0, tau0        sigma
              |              |
             (mu) ------> [x_i]   i = 1..N

    Posterior N(m_N, 1/p_N) with precision p_N = 1/tau0^2 + N/sigma^2 and mean
    m_N = (mu0/tau0^2 + sum_i x_i/sigma^2) / p_N. Evidence: x ~ N(mu0 1, sigma^2 I + tau0^2 1 1^T)
    (the multivariate normal marginal of the data). Default data: N = 4 points with mean 2 under
    N(0, 1), sigma = 1: posterior precision 5, so N(1.6, 0.2) (variance 0.2).
    """
    # N(0, 1): the mean is of the order of the unit noise, in either direction.
    mu = pyro.sample("mu", dist.Normal(mu0, tau0))
    with pyro.plate("measurements", len(x)):
        pyro.sample("x", dist.Normal(mu, sigma), obs=x)


@normal_normal.set_guide
def _(mu0: float, tau0: float) -> None:
    """q(mu) = Normal(loc, scale): the posterior's family."""
    loc = pyro.param("q_loc", torch.tensor(float(mu0)))
    scale = pyro.param("q_scale", torch.tensor(float(tau0)), constraint=constraints.positive)
    pyro.sample("mu", dist.Normal(loc, scale))


@normal_normal.posterior
def _(x: torch.Tensor, mu0: float, tau0: float, sigma: float) -> tuple[dict, float]:
    """N(m_N, 1/p_N) and log N(x | mu0 1, sigma^2 I + tau0^2 1 1^T)."""
    n = len(x)
    mean, prec = normal_mean_update(mu0, tau0**-2, float(x.sum()), n, sigma**-2)
    cov = sigma**2 * torch.eye(n) + tau0**2 * torch.ones(n, n)
    log_z = dist.MultivariateNormal(torch.full((n,), float(mu0)), cov).log_prob(x)
    return {"mu": dist.Normal(mean, prec**-0.5)}, float(log_z)


@normal_normal.synthetic
def _(seed: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """20 measurements of mu = 1.3 with unit noise, the N(0, 1) prior kept."""
    mu = 1.3
    x = mu + torch.randn(20)
    return {"x": x, "mu0": 0.0, "tau0": 1.0, "sigma": 1.0}, {"mu": torch.tensor(mu)}


# ---------------------------------------------------------------------------- normal_gamma

NORMAL_GAMMA_X = torch.tensor(
    [1.0, 1.15, 0.86, 0.55, 0.77, 0.5, 1.03, 1.67, 0.75, 0.69, 1.24, 1.18]
)


@zoo.register(
    data={"x": NORMAL_GAMMA_X, "mu0": 0.0, "kappa0": 1.0, "a0": 2.0, "b0": 1.0},
    params=("mu", "tau"),
    seed_ref="001 §2.3",
    math=[
        r"\tau \sim \mathrm{Gamma}(a_0,\, b_0)",
        r"\mu \mid \tau \sim \mathcal{N}(\mu_0,\, (\kappa_0 \tau)^{-1})",
        r"x_i \mid \mu, \tau \sim \mathcal{N}(\mu,\, \tau^{-1}), \quad i = 1, \ldots, N",
    ],
    # one-particle gradients of this two-site ELBO are noisy: at lr 0.05 the fit wanders by a
    # third of a posterior sd; 4 particles at lr 0.02 reach the CAVI fixed point's ELBO. 20000
    # draws from the fitted guide put its sds' Monte-Carlo noise (1.5%) well under the
    # mean-field under-estimate of sd(mu) (6.5%) the report is to show
    engine_options={"svi": {"lr": 0.02, "num_particles": 4, "num_samples": 20000}},
)
def normal_gamma(
    x: torch.Tensor, mu0: float = 0.0, kappa0: float = 1.0, a0: float = 2.0, b0: float = 1.0
) -> None:
    r"""Normal–Gamma: a Gaussian with unknown mean and precision (seed 001 §2.3, eqs 77-80).

    Generative story::

        tau      ~ Gamma(a0, b0)                       precision (shape a0, rate b0), eq 78
        mu | tau ~ N(mu0, 1 / (kappa0 tau))            eq 78
        x_i      ~ N(mu, 1 / tau),  i = 1..N           eq 77

          a0, b0      mu0, kappa0
             |            |
           (tau) -----> (mu)
             \            |
              `-------> [x_i]   i = 1..N

    Exact posterior (eq 80): NG(mu_N, kappa_N, a_N, b_N), kappa_N = kappa0 + N,
    mu_N = (kappa0 mu0 + N xbar) / kappa_N, a_N = a0 + N/2,
    b_N = b0 + 1/2 sum_i (x_i - xbar)^2 + kappa0 N (xbar - mu0)^2 / (2 kappa_N).
    The joint does not factor over the sites, so the closed form gives each site's exact
    MARGINAL: tau ~ Gamma(a_N, b_N) and mu ~ Student-t(2 a_N, mu_N, sqrt(b_N / (a_N kappa_N))).
    The ``exact`` engine therefore draws mu and tau independently: right marginals, not the joint.

    Reference engines: ``cavi`` (mean-field q(mu) q(tau), eqs 84-87, with the shape
    a0 + (N+1)/2: the document's a0 + N/2 drops the 1/2 log tau of p(mu | tau), a typo) and
    ``gibbs`` (the exact conditionals, eq 85 and the corrected eq 88). Mean-field VI
    under-estimates the spread of mu: its variance is b_N/(kappa_N a_N) against the exact
    b_N/(kappa_N (a_N - 1)). A full-rank Gaussian guide on (mu, log tau) does no better: mu and
    tau are uncorrelated a posteriori; their dependence is in the variance, Var(mu | tau) =
    1/(kappa_N tau), which no linear correlation can represent.

    Default data: N = 12 points (drawn once from N(1, 0.5^2), rounded to 2 decimals; mean
    0.949) under mu0 = 0, kappa0 = 1, a0 = 2, b0 = 1.
    """
    # Gamma(2, 1) on the precision: noise sd 1/sqrt(tau) around 0.8, 95% within 0.4 to 2;
    # kappa0 = 1: the prior on the mean is worth one observation.
    tau = pyro.sample("tau", dist.Gamma(a0, b0))
    mu = pyro.sample("mu", dist.Normal(mu0, (kappa0 * tau) ** -0.5))
    with pyro.plate("data", len(x)):
        pyro.sample("x", dist.Normal(mu, tau**-0.5), obs=x)


@normal_gamma.set_guide
def _(x: torch.Tensor, a0: float) -> None:
    """The seed's mean-field family (eq 81): q(mu) = Normal, q(tau) = Gamma, independent.

    Its optimum is the CAVI fixed point, which under-estimates Var(mu) (see the model). It
    starts from the sample moments: mean xbar, sd s/sqrt(N) for mu, mean 1/s^2 for tau (with the
    prior's shape a0)."""
    xbar, var = float(x.mean()), float(x.var()) if len(x) > 1 else 1.0
    gamma_factor("tau", 1.0 / max(var, 1e-6), a0)
    loc = pyro.param("q_mu_loc", torch.tensor(xbar))
    scale = pyro.param(
        "q_mu_scale",
        torch.tensor((max(var, 1e-6) / len(x)) ** 0.5),
        constraint=constraints.positive,
    )
    pyro.sample("mu", dist.Normal(loc, scale))


def normal_gamma_params(
    x: torch.Tensor, mu0: float, kappa0: float, a0: float, b0: float
) -> tuple[float, float, float, float]:
    """(mu_N, kappa_N, a_N, b_N) of the exact Normal–Gamma posterior (seed 001 eq 80)."""
    xs = x.double().numpy()
    n, xbar = xs.size, float(xs.mean())
    mu_n, kappa_n = normal_mean_update(mu0, kappa0, float(xs.sum()), n, 1.0)
    a_n = a0 + n / 2
    b_n = (
        b0 + 0.5 * float(((xs - xbar) ** 2).sum()) + kappa0 * n * (xbar - mu0) ** 2 / (2 * kappa_n)
    )
    return float(mu_n), float(kappa_n), a_n, b_n


@normal_gamma.posterior
def normal_gamma_marginals(
    x: torch.Tensor, mu0: float, kappa0: float, a0: float, b0: float
) -> tuple[dict, float]:
    """Exact marginals tau ~ Gamma(a_N, b_N), mu ~ Student-t(2 a_N, mu_N, (b_N/(a_N kappa_N))^.5)
    and log p(x) = log G(a_N) - log G(a0) + a0 log b0 - a_N log b_N + 1/2 log(kappa0/kappa_N)
    - N/2 log(2 pi)."""
    mu_n, kappa_n, a_n, b_n = normal_gamma_params(x, mu0, kappa0, a0, b0)
    log_z = normal_gamma_log_evidence(len(x), kappa0, a0, b0, kappa_n, a_n, b_n)
    mu = dist.StudentT(2 * a_n, mu_n, np.sqrt(b_n / (a_n * kappa_n)))
    return {"mu": mu, "tau": dist.Gamma(a_n, b_n)}, float(log_z)


@normal_gamma.reference("cavi")
def _(
    x: torch.Tensor,
    mu0: float,
    kappa0: float,
    a0: float,
    b0: float,
    *,
    max_iter: int = 100,
    tol: float = 1e-10,
) -> zoo.Factors:
    """CAVI for the mean-field q(mu) q(tau) (seed 001 §2.3, eqs 84-87, shape corrected).

    q(mu) = N(mu_N, 1 / (kappa_N E[tau])) (eq 84, the second argument a precision);
    q(tau) = Gamma(a0 + (N+1)/2, b0 + 1/2 E_q(mu)[sum_i (x_i - mu)^2 + kappa0 (mu - mu0)^2])
    (eqs 86-87; the document prints the shape a0 + N/2, a typo). Starts at E[tau] = a0/b0 and
    stops when q(tau)'s rate changes by less than ``tol`` (relative); the ELBO, traced after
    every sweep, never decreases.
    """
    m, v, a, b, trace = normal_gamma_cavi(x.double().numpy(), mu0, kappa0, a0, b0, max_iter, tol)
    f64: dict[str, Any] = dict(dtype=torch.float64)
    return zoo.Factors(
        {
            "mu": dist.Normal(torch.tensor(m, **f64), torch.tensor(v, **f64).sqrt()),
            "tau": dist.Gamma(torch.tensor(a, **f64), torch.tensor(b, **f64)),
        },
        traces={"elbo": trace},
        log_evidence=trace[-1],
        evidence_kind="lower_bound",
        extras={"q_mu": (m, v), "q_tau": (a, b)},
    )


@normal_gamma.reference("gibbs")
def _(
    x: torch.Tensor,
    mu0: float,
    kappa0: float,
    a0: float,
    b0: float,
    *,
    num_samples: int = 2000,
    warmup: int = 200,
    num_chains: int = 2,
) -> zoo.Draws:
    """Two-block Gibbs sampler on the exact conditionals, chains started from the prior.

    mu | tau, x ~ N((kappa0 mu0 + N xbar) / kappa_N, 1 / (kappa_N tau))          (eq 85)
    tau | mu, x ~ Gamma(a0 + (N+1)/2, b0 + 1/2 [sum_i (x_i - mu)^2 + kappa0 (mu - mu0)^2])
    (eq 88 corrected: the prior p(mu | tau) adds 1/2 to the shape and kappa0 (mu - mu0)^2 sits
    inside the 1/2 bracket).
    """
    mus, taus = normal_gamma_gibbs(
        x.double().numpy(), mu0, kappa0, a0, b0, num_samples, warmup, num_chains
    )
    return zoo.Draws({"mu": mus, "tau": taus}, chains=True)


@normal_gamma.synthetic
def _(seed: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """15 points from N(1, 1/4) (mu = 1, tau = 4), the default prior kept."""
    mu, tau = 1.0, 4.0
    x = mu + torch.randn(15) / tau**0.5
    truth = {"mu": torch.tensor(mu), "tau": torch.tensor(tau)}
    return {"x": x, "mu0": 0.0, "kappa0": 1.0, "a0": 2.0, "b0": 1.0}, truth


# ------------------------------------------------------------------------ dirichlet_bigram

CORPUS = "The cat sat on the mat. The dog sat on the mat."  # seed 002 §24.2 (L4793-4797)


def tokenize(text: str) -> list[list[str]]:
    """Lower-cased sentences of words: split at . ! ?, words are runs of letters (and ')."""
    sentences = (re.findall(r"[a-z']+", s) for s in re.split(r"[.!?]", text.lower()))
    return [s for s in sentences if s]


def vocabulary(sentences: Sequence[Sequence[str]]) -> list[str]:
    """The distinct words in order of first appearance."""
    return list(dict.fromkeys(w for s in sentences for w in s))


def bigrams(
    sentences: Sequence[Sequence[str]], vocab: Sequence[str]
) -> tuple[torch.Tensor, torch.Tensor]:
    """(previous word, word) index pairs within sentences, as long tensors. As in the seed's
    count matrix (002 §24.2), sentence boundaries are not crossed and no boundary tokens are
    added: the first word of a sentence is conditioned on, not predicted."""
    index = {w: i for i, w in enumerate(vocab)}
    pairs = [(index[s[i - 1]], index[s[i]]) for s in sentences for i in range(1, len(s))]
    prev, word = zip(*pairs, strict=True) if pairs else ((), ())
    return torch.tensor(prev, dtype=torch.long), torch.tensor(word, dtype=torch.long)


_SENTENCES = tokenize(CORPUS)
_VOCAB = vocabulary(_SENTENCES)
_PREV, _WORD = bigrams(_SENTENCES, _VOCAB)


@zoo.register(
    data={"prev": _PREV, "word": _WORD, "num_words": len(_VOCAB), "alpha": 1.0},
    seed_ref="002 §23.1, §24.2, §15.2",
    math=[
        r"\theta_v \sim \mathrm{Dirichlet}(\alpha \mathbf{1}_V), \quad v = 1, \ldots, V",
        r"w_t \mid w_{t-1} \sim \mathrm{Categorical}(\theta_{w_{t-1}}), \quad t = 1, \ldots, T",
    ],
)
def dirichlet_bigram(
    prev: torch.Tensor, word: torch.Tensor, num_words: int = 6, alpha: float = 1.0
) -> None:
    r"""Bigram language model: a Markov chain over words with Dirichlet rows.

    Generative story (seed 002 §23.1: P(W) = P(w_1) prod_t P(w_t | w_{t-1}); §15.2 transition
    matrices; §24.2 corpus)::

        theta_i ~ Dirichlet(alpha 1_V),  i = 1..V     row i: P(next word | previous word i)
        w_t | w_{t-1} ~ Categorical(theta_{w_{t-1}})   for each bigram t = 1..T

          alpha
            |
         (theta_i) i = 1..V --indexed by [prev_t]--> [word_t]   t = 1..T

    The first word of each sentence is conditioned on (not modelled). Posterior: row i is
    Dirichlet(alpha + C[i, :]) with C the bigram counts, independently over rows (the
    ``transition`` site: a batch of V Dirichlets, batch shape (V,), event (V,)); evidence the
    Dirichlet–categorical product over rows of
    G(V alpha) / G(V alpha + C[i, .]) prod_j G(alpha + C[i, j]) / G(alpha).
    Default data: "The cat sat on the mat. The dog sat on the mat." (002 §24.2): V = 6 words
    (the, cat, sat, on, mat, dog in order of appearance), 10 bigrams, MLE P(mat|the) = 0.5,
    P(cat|the) = P(dog|the) = 0.25; "mat" is never followed, so its posterior row is the prior.
    """
    # alpha = 1: every row uniform on the simplex (add-one smoothing at the posterior mean).
    with pyro.plate("rows", num_words):
        transition = pyro.sample(
            "transition", dist.Dirichlet(torch.full((num_words,), float(alpha)))
        )
    with pyro.plate("bigrams", len(prev)):
        # the row of each previous word (the ellipsis keeps any batch dims of sampled matrices)
        pyro.sample("word", dist.Categorical(transition[..., prev, :]), obs=word)


@dirichlet_bigram.set_guide
def _(num_words: int, alpha: float) -> None:
    """q(theta_i) = Dirichlet(c_i) per row: the conjugate family, so the optimum is exact."""
    conc = pyro.param(
        "q_concentration",
        torch.full((num_words, num_words), float(alpha)),
        constraint=constraints.positive,
    )
    with pyro.plate("rows", num_words):
        pyro.sample("transition", dist.Dirichlet(conc))


@dirichlet_bigram.posterior
def _(prev: torch.Tensor, word: torch.Tensor, num_words: int, alpha: float) -> tuple[dict, float]:
    """Rows Dirichlet(alpha + C[i, :]) and the Dirichlet–categorical log evidence."""
    counts = bigram_counts(prev, word, num_words)
    post = alpha + counts
    log_z = (
        gammaln(num_words * alpha)
        - gammaln(post.sum(-1).numpy())
        + (gammaln(post.numpy()) - gammaln(alpha)).sum(-1)
    ).sum()
    return {"transition": dist.Dirichlet(post)}, float(log_z)


@dirichlet_bigram.synthetic
def _(seed: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """A 301-word chain over V = 6 words from a transition matrix drawn from the Dirichlet(1)
    prior, started from a uniform word: 300 bigrams with a known matrix."""
    v, steps = 6, 300
    transition = dist.Dirichlet(torch.ones(v)).sample((v,))
    chain = [int(torch.randint(v, ()))]
    for _ in range(steps):
        chain.append(int(dist.Categorical(transition[chain[-1]]).sample()))
    seq = torch.tensor(chain, dtype=torch.long)
    data = {"prev": seq[:-1], "word": seq[1:], "num_words": v, "alpha": 1.0}
    return data, {"transition": transition}
