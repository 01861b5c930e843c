"""Sequential models: hidden Markov models with discrete and Gaussian emissions.

Their exact algorithms live in :mod:`zoo_inference.algorithms.hmm` (forward–backward, Viterbi,
Baum–Welch, on a matrix of emission log-likelihoods); their peer in :mod:`zoo_inference.peers`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import pyro
import pyro.distributions as dist
import torch
from pyro.distributions import constraints
from pyro.ops.indexing import Vindex

import zoo
from zoo_inference.algorithms.hmm import (
    categorical_baum_welch,
    categorical_start,
    decode,
    gaussian_baum_welch,
    gaussian_log_b,
    gaussian_start,
    hmm_log_likelihood,
    sample_gaussian_hmm,
    sample_hmm,
)
from zoo_inference.arguments import probability_array, real_array, real_series
from zoo_inference.distributions import SortedNormal
from zoo_inference.peers.hmmlearn import categorical_hmmlearn, gaussian_hmmlearn, hmmlearn_hmm

# ==================================================================================== hmm

# The seed's two-state example (catalogue §4; seed notes 002b §2.7): states H(ot), C(old);
# symbols 1, 2, 3 (ice creams eaten), coded 0, 1, 2.
SEED_PI = np.array([0.8, 0.2])
SEED_A = np.array([[0.7, 0.3], [0.4, 0.6]])
SEED_B = np.array([[0.2, 0.4, 0.4], [0.5, 0.4, 0.1]])


def _symbols(x: torch.Tensor, M: int) -> np.ndarray:
    xs = np.asarray(x, dtype=int)
    if xs.ndim != 1 or xs.size == 0:
        raise zoo.ZooError(f"x must be one non-empty sequence of symbols, got shape {xs.shape}")
    if xs.min() < 0 or xs.max() >= M:
        raise zoo.ZooError(f"x holds symbols 0..{M - 1} (M={M}); got {xs.min()}..{xs.max()}")
    return xs


def _seed_sequence(seed: int = 0) -> dict[str, Any]:
    """12 days of the seed's example drawn from its own (pi, A, B), a fixed stream (the
    default data does not change with the run's seed). Short: NUTS and SVI sum the states out
    by Pyro's enumeration at every gradient, a cost that grows with T."""
    x, _ = sample_hmm(np.random.default_rng(19), SEED_PI, SEED_A, SEED_B, 12)
    return {"x": torch.tensor(x), "K": 2, "M": 3}


@zoo.register(
    data=_seed_sequence,
    figures={"states": {"data": "x", "prefix": "z_"}},  # decoded paths over the series
    params=("pi", "A", "B"),
    engines=("svi", "nuts", "enum"),
    engine_options={
        "nuts": {"num_samples": 200, "warmup": 200, "num_chains": 4},
        "svi": {"jit": True},  # Pyro's JIT: more steps a second
    },
    seed_ref="002 ch. 19 (§19.3–19.6)",
    math=[
        r"\pi \sim \mathrm{Dirichlet}(1, \ldots, 1),"
        r" \quad A_{i\cdot} \sim \mathrm{Dirichlet}(1, \ldots, 1),"
        r" \quad B_{i\cdot} \sim \mathrm{Dirichlet}(1, \ldots, 1)",
        r"z_1 \sim \mathrm{Categorical}(\pi),"
        r" \quad z_t \mid z_{t-1} \sim \mathrm{Categorical}(A_{z_{t-1}\cdot}),"
        r" \quad t = 2, \ldots, T",
        r"x_t \mid z_t \sim \mathrm{Categorical}(B_{z_t\cdot}), \quad t = 1, \ldots, T",
    ],
    known={
        "nuts": zoo.Known(
            "slow", "the hidden chain enumerated at every gradient; its svi cell stays"
        ),
    },
)
def hmm(x: torch.Tensor, K: int = 2, M: int = 3) -> None:
    r"""Hidden Markov model with categorical emissions; the states are summed out exactly.

    Generative story (seed 002 §19.3, L3340–3351; joint (19.1)–(19.2))::

        pi      ~ Dirichlet(1, ..., 1)      initial state distribution (K)
        A[i, :] ~ Dirichlet(1, ..., 1)      transition row i: a_ij = p(z_t = j | z_{t-1} = i)
        B[i, :] ~ Dirichlet(1, ..., 1)      emission row i:  b_ij = p(x_t = j | z_t = i)
        z_1 ~ Categorical(pi),  z_t | z_{t-1} ~ Categorical(A[z_{t-1}]),  t = 2..T
        x_t | z_t ~ Categorical(B[z_t]),  t = 1..T

          pi,A ---> (z_1) ---> (z_2) ---> ... ---> (z_T)
                      |          |                   |
          B  ------> [x_1]      [x_2]               [x_T]

    The document treats pi, A, B as parameters (learned by Baum–Welch); the flat Dirichlet
    priors make the posterior mode the maximum-likelihood point, so MAP, EM and the posterior
    over parameters all read the same likelihood. Its three problems: evaluation p(x) (``enum``
    at given parameters, the ``forward_backward`` engine), decoding (Viterbi = the MAP joint
    assignment of ``enum``, ``extras["viterbi"]``; posterior decoding, the argmax of each
    marginal, ``extras["posterior_decoding"]``) and learning (``em`` = Baum–Welch; ``nuts`` on
    the Dirichlet parameters with the states enumerated; ``svi``). Labels are exchangeable: the
    posterior over parameters has K! symmetric modes, which a long enough chain visits.
    """
    # Each parameter is one site (rows as the event), so the time steps need no plate and any
    # batch of parameter draws broadcasts through the chain.
    pi = pyro.sample("pi", dist.Dirichlet(torch.ones(K)))
    A = pyro.sample("A", dist.Dirichlet(torch.ones(K, K)).to_event(1))
    B = pyro.sample("B", dist.Dirichlet(torch.ones(K, M)).to_event(1))
    z = None
    for t in pyro.markov(range(len(x))):
        z = pyro.sample(f"z_{t}", dist.Categorical(pi if t == 0 else Vindex(A)[..., z, :]))
        pyro.sample(f"x_{t}", dist.Categorical(Vindex(B)[..., z, :]), obs=x[t])


@hmm.set_guide
def _(K: int, M: int) -> None:
    """Mean-field Dirichlet factors for pi and for each row of A and B; the states are
    enumerated in the model. Rows start near uniform with the concentration of a few counts."""
    for name, shape in (("pi", (K,)), ("A", (K, K)), ("B", (K, M))):
        start = torch.full(shape, 2.0) + 0.5 * torch.rand(shape)  # break the label symmetry
        conc = pyro.param(f"q_{name}_conc", start, constraint=constraints.positive)
        d = dist.Dirichlet(conc)
        pyro.sample(name, d if len(shape) == 1 else d.to_event(1))


def _categorical_params(
    params: Mapping[str, Any], K: int, M: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    if not isinstance(params, Mapping) or set(params) != {"pi", "A", "B"}:
        raise zoo.ZooError("params must be a dict with exactly 'pi', 'A' and 'B'")
    return (
        probability_array("params['pi']", params["pi"], (K,)),
        probability_array("params['A']", params["A"], (K, K)),
        probability_array("params['B']", params["B"], (K, M)),
    )


@hmm.reference("em")
def _(
    x: torch.Tensor,
    K: int,
    M: int,
    *,
    init: Mapping[str, Any] | None = None,
    max_iter: int = 200,
    tol: float = 1e-8,
) -> zoo.Estimate:
    """Baum–Welch (002 §19.6): maximum likelihood of (pi, A, B), monotone in log p(x).

    From ``init`` or a deterministic start (:func:`categorical_start`)."""
    xs = _symbols(x, M)
    start = _categorical_params(categorical_start(xs, K, M) if init is None else init, K, M)
    pi, A, B, trace = categorical_baum_welch(xs, *start, max_iter, tol)
    with np.errstate(divide="ignore"):
        decoded = decode(pi, A, np.log(B[:, xs].T))
    values = {"pi": pi, "A": A, "B": B} | {f"z_{t}": z for t, z in enumerate(decoded["viterbi"])}
    return zoo.Estimate(
        values, traces={"log_likelihood": trace}, log_evidence=trace[-1], extras=decoded
    )


@hmm.reference("forward_backward")
def _(x: torch.Tensor, K: int, M: int, *, params: Mapping[str, Any] | None = None) -> zoo.Estimate:
    """Forward–backward and Viterbi at given parameters (default: the Baum–Welch estimate).

    Evidence log p(x | params) by the forward algorithm; ``extras``: the marginals p(z_t | x),
    the Viterbi path and its log p(z, x), the posterior decoding, and log p(x) once more by the
    matrix-product form. The states' values in the estimate are the Viterbi path."""
    xs = _symbols(x, M)
    if params is None:
        start = _categorical_params(categorical_start(xs, K, M), K, M)
        pi, A, B, _ = categorical_baum_welch(xs, *start, 200, 1e-8)
    else:
        pi, A, B = _categorical_params(params, K, M)
    with np.errstate(divide="ignore"):
        log_b = np.log(B[:, xs].T)
    decoded = decode(pi, A, log_b)
    decoded["log_likelihood_matrix_form"] = float(hmm_log_likelihood(pi, A, log_b))
    values = {"pi": pi, "A": A, "B": B} | {f"z_{t}": z for t, z in enumerate(decoded["viterbi"])}
    return zoo.Estimate(values, log_evidence=decoded["log_likelihood"], extras=decoded)


@hmm.reference("hmmlearn")
def _(
    x: torch.Tensor,
    K: int,
    M: int,
    *,
    init: Mapping[str, Any] | None = None,
    params: Mapping[str, Any] | None = None,
    max_iter: int = 200,
    tol: float = 1e-8,
) -> zoo.Estimate:
    """hmmlearn's CategoricalHMM, the peer of ``em``: its Baum–Welch from em's start.

    The start is ``init`` or em's deterministic one (:func:`categorical_start`), so the two
    climb the same hill; ``max_iter`` and ``tol`` are hmmlearn's ``n_iter`` and ``tol`` (it
    stops once an iteration gains less than ``tol``). Its flat Dirichlet priors (concentration
    1) make the fit maximum likelihood, as em's. With ``params``: no fit, hmmlearn's answers at
    those parameters.
    Evidence: hmmlearn's ``score``, log p(x | its estimate); ``extras``: its Viterbi path
    (``decode``), the marginals and posterior decoding (``predict_proba``); the states' values in
    the estimate are the Viterbi path. Needs hmmlearn (``pip install hmmlearn``)."""
    hmmlearn_hmm()
    xs = _symbols(x, M)
    if init is not None and params is not None:
        raise zoo.ZooError("give init (a start for the fit) or params (no fit), not both")
    if params is not None:
        start = params
    else:
        start = categorical_start(xs, K, M) if init is None else init
    fit = params is None
    values, trace, extras = categorical_hmmlearn(
        xs, *_categorical_params(start, K, M), fit=fit, max_iter=max_iter, tol=tol
    )
    values |= {f"z_{t}": z for t, z in enumerate(extras["viterbi"])}
    return zoo.Estimate(
        values,
        traces={"log_likelihood": trace} if trace else {},
        log_evidence=extras["log_likelihood"],
        extras=extras,
    )


@hmm.synthetic
def _(seed: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """200 days from the seed's (pi, A, B): known parameters and states."""
    x, z = sample_hmm(np.random.default_rng(seed), SEED_PI, SEED_A, SEED_B, 200)
    truth = {"pi": SEED_PI, "A": SEED_A, "B": SEED_B} | {f"z_{t}": v for t, v in enumerate(z)}
    return {"x": torch.tensor(x), "K": 2, "M": 3}, {k: torch.as_tensor(v) for k, v in truth.items()}


# =========================================================================== gaussian_hmm

# The synthetic two-regime series (catalogue §4): a calm regime around -1 and a turbulent one
# around 1.5, each persisting for about ten steps (expected dwell 1 / (1 - a_kk): 10 and 6.7).
REGIME_PI = np.array([0.5, 0.5])
REGIME_A = np.array([[0.9, 0.1], [0.15, 0.85]])
REGIME_MU = np.array([-1.0, 1.5])
REGIME_SIGMA = np.array([0.5, 0.8])
# gaussian_hmm's priors, read by the model and by the tests' independent log-prior: regime means
# within a few units of 0 (data on a unit scale: standardise a series first), spreads from about
# a tenth to ten times the unit (log-normal, sd 1 in log), and extra self-transition mass.
MU_PRIOR = (0.0, 3.0)
SIGMA_PRIOR = (0.0, 1.0)
STICKY = 3.0  # pseudo-counts added to a_kk: prior mean of a_kk is (1 + STICKY) / (K + STICKY)
REGIME_T = 12  # the default series's length: see _regime_series


def sticky_concentration(K: int) -> torch.Tensor:
    """The Dirichlet concentration of the transition rows: 1 everywhere, 1 + STICKY on the
    diagonal (row i favours staying in state i)."""
    return torch.ones(K, K) + STICKY * torch.eye(K)


def _regime_series(seed: int = 0) -> dict[str, Any]:
    """REGIME_T steps of the two-regime process, a fixed stream (the default data does not
    change with the run's seed; this stream visits both regimes: 3 steps turbulent, 7 calm,
    2 turbulent). Short on purpose: NUTS and SVI sum the states out by Pyro's enumeration through
    a traced graph of T steps at every gradient, a cost that grows with T."""
    x, _ = sample_gaussian_hmm(
        np.random.default_rng(4), REGIME_PI, REGIME_A, REGIME_MU, REGIME_SIGMA, REGIME_T
    )
    return {"x": torch.tensor(x, dtype=torch.float), "K": 2}


@zoo.register(
    data=_regime_series,
    figures={"states": {"data": "x", "prefix": "z_"}},  # decoded paths over the series
    params=("pi", "A", "mu", "sigma"),
    engines=("svi", "nuts", "enum"),
    engine_options={
        "nuts": {"num_samples": 200, "warmup": 200, "num_chains": 4},
        "svi": {"jit": True},  # Pyro's JIT: more steps a second
    },
    seed_ref="002 §19.3.1 (L3404–3406); ch. 19",
    math=[
        r"\pi \sim \mathrm{Dirichlet}(1, \ldots, 1),"
        r" \quad A_{i\cdot} \sim \mathrm{Dirichlet}(1 + 3 e_i)",
        r"\mu \sim \mathrm{SortedNormal}(0,\, 3;\ K),"
        r" \quad \sigma_k \sim \mathrm{LogNormal}(0,\, 1)",
        r"z_1 \sim \mathrm{Categorical}(\pi),"
        r" \quad z_t \mid z_{t-1} \sim \mathrm{Categorical}(A_{z_{t-1}\cdot}),"
        r" \quad t = 2, \ldots, T",
        r"x_t \mid z_t \sim \mathcal{N}(\mu_{z_t},\, \sigma_{z_t}^2), \quad t = 1, \ldots, T",
    ],
    known={
        "nuts": zoo.Known("slow", "12 enumerated states, four chains"),
    },
)
def gaussian_hmm(x: torch.Tensor, K: int = 2) -> None:
    r"""Hidden Markov model with Gaussian emissions (a regime-switching series); the states are
    summed out exactly.

    Generative story (seed 002 §19.3.1, L3404–3406: the emission "~ f(x_t | theta_i)", here a
    normal; the chain as in §19.3, L3340–3345)::

        pi      ~ Dirichlet(1, ..., 1)                  initial state distribution (K)
        A[i, :] ~ Dirichlet(1, .., 1 + 3, .., 1)        transition row i, 3 extra on a_ii (sticky)
        mu      ~ SortedNormal(0, 3; K)                 regime means, mu_1 < ... < mu_K
        sigma_k ~ LogNormal(0, 1),  k = 1..K            regime standard deviations
        z_1 ~ Categorical(pi),  z_t | z_{t-1} ~ Categorical(A[z_{t-1}]),  t = 2..T
        x_t | z_t ~ Normal(mu_{z_t}, sigma_{z_t}),  t = 1..T

          pi,A ---> (z_1) ---> (z_2) ---> ... ---> (z_T)
                      |          |                   |
          mu,sigma -> [x_1]     [x_2]               [x_T]

    The document gives the model for symbols and admits any emission density; it treats pi, A
    and the emission parameters as parameters (Baum–Welch, ``em``). The priors are [S]: the
    sticky rows (prior mean of a_ii is 0.8 for K = 2, an expected stay of five steps) say that
    a regime persists, which is what makes a series of regimes differ from a mixture of
    independent draws and keeps short series from being explained by a state that flips every
    step; the means' prior is sized for data on a unit scale. Ordering the means (the
    SortedNormal prior of ``gaussian_mixture``) removes label switching, the K! symmetric modes,
    so that summaries of mu, sigma, A and the states mean the same thing for every engine (the
    reference engines relabel their estimate by increasing mean). Evaluation, decoding
    (Viterbi, posterior decoding) and learning run as for ``hmm``, on the same algorithms fed
    log b_k(x_t) = log N(x_t | mu_k, sigma_k).
    """
    if K < 2:
        raise zoo.ZooError(f"K must be at least 2 (the number of regimes), got {K}")
    # Each parameter is one site (rows as the event), so the time steps need no plate and any
    # batch of parameter draws broadcasts through the chain.
    pi = pyro.sample("pi", dist.Dirichlet(torch.ones(K)))
    # sticky rows: regimes persist, so a short series is not explained by a state per step
    A = pyro.sample("A", dist.Dirichlet(sticky_concentration(K)).to_event(1))
    loc, scale = torch.tensor(MU_PRIOR[0]), torch.tensor(MU_PRIOR[1])
    mu = pyro.sample("mu", SortedNormal(loc, scale, K))
    sigma = pyro.sample("sigma", dist.LogNormal(*SIGMA_PRIOR).expand([K]).to_event(1))
    z = None
    for t in pyro.markov(range(len(x))):
        z = pyro.sample(f"z_{t}", dist.Categorical(pi if t == 0 else Vindex(A)[..., z, :]))
        pyro.sample(f"x_{t}", dist.Normal(Vindex(mu)[..., z], Vindex(sigma)[..., z]), obs=x[t])


@gaussian_hmm.set_guide
def _(x: torch.Tensor, K: int) -> None:
    """Mean-field guide: Dirichlet factors for pi and each row of A (started at the prior plus a
    few counts, rows sticky), the ordered means as a Normal on their unconstrained coordinates
    (first mean, log gaps) pushed through the ordering transform, started at the data's
    quantiles, and LogNormal spreads started at the data's sd over K. The states are enumerated
    in the model."""
    pi_conc = pyro.param("q_pi_conc", torch.full((K,), 2.0), constraint=constraints.positive)
    pyro.sample("pi", dist.Dirichlet(pi_conc))
    A_start = sticky_concentration(K) + 1.0
    A_conc = pyro.param("q_A_conc", A_start, constraint=constraints.positive)
    pyro.sample("A", dist.Dirichlet(A_conc).to_event(1))
    ordered = dist.transforms.OrderedTransform()
    start = torch.quantile(x.float(), (torch.arange(K) + 0.5) / K).to(x.dtype)
    start = start + 1e-3 * torch.arange(K, dtype=x.dtype)  # strictly increasing, even on ties
    mu_loc = pyro.param("q_mu_loc", lambda: ordered.inv(start))
    mu_scale = pyro.param("q_mu_scale", torch.full((K,), 0.1), constraint=constraints.positive)
    pyro.sample(
        "mu", dist.TransformedDistribution(dist.Normal(mu_loc, mu_scale).to_event(1), [ordered])
    )
    spread = float(x.std()) / K if len(x) > 1 else 1.0
    s_loc = pyro.param("q_sigma_loc", torch.full((K,), np.log(max(spread, 1e-3))))
    s_scale = pyro.param("q_sigma_scale", torch.full((K,), 0.1), constraint=constraints.positive)
    pyro.sample("sigma", dist.LogNormal(s_loc, s_scale).to_event(1))


def _gaussian_params(
    params: Mapping[str, Any], K: int, what: str = "params", ordered: bool = True
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(pi, A, mu, sigma) checked: probability vectors, finite means (increasing when
    ``ordered``: the model's labelling of the states), positive spreads."""
    if K < 2:
        raise zoo.ZooError(f"K must be at least 2 (the number of regimes), got {K}")
    if not isinstance(params, Mapping) or set(params) != {"pi", "A", "mu", "sigma"}:
        raise zoo.ZooError(f"{what} must be a dict with exactly 'pi', 'A', 'mu' and 'sigma'")
    pi = probability_array(f"{what}['pi']", params["pi"], (K,))
    A = probability_array(f"{what}['A']", params["A"], (K, K))
    mu = real_array(f"{what}['mu']", params["mu"], (K,))
    sigma = real_array(f"{what}['sigma']", params["sigma"], (K,))
    if np.any(sigma <= 0):
        raise zoo.ZooError(f"{what}['sigma'] must be positive (standard deviations), got {sigma}")
    if ordered and np.any(np.diff(mu) <= 0):
        raise zoo.ZooError(
            f"{what}['mu'] must be increasing (mu_1 < ... < mu_K labels the states), got {mu}"
        )
    return pi, A, mu, sigma


def _gaussian_baum_welch(
    xs: np.ndarray, K: int, init: Mapping[str, Any] | None, max_iter: int, tol: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, list[float]]:
    """:func:`gaussian_baum_welch` from ``init`` or :func:`gaussian_start`, the states relabelled
    by increasing mean (the model's convention). Returns (pi, A, mu, sigma, trace)."""
    init = gaussian_start(xs, K) if init is None else init
    start = _gaussian_params(init, K, what="init", ordered=False)
    pi, A, mu, sigma, trace = gaussian_baum_welch(xs, *start, max_iter, tol)
    order = np.argsort(mu, kind="stable")
    return pi[order], A[np.ix_(order, order)], mu[order], sigma[order], trace


def _gaussian_estimate(
    xs: np.ndarray,
    theta: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray],
    trace: list[float] | None = None,
) -> zoo.Estimate:
    """The three problems at (pi, A, mu, sigma); the states' values are the Viterbi path."""
    pi, A, mu, sigma = theta
    log_b = gaussian_log_b(xs, mu, sigma)
    decoded = decode(pi, A, log_b)
    decoded["log_likelihood_matrix_form"] = float(hmm_log_likelihood(pi, A, log_b))
    values = {"pi": pi, "A": A, "mu": mu, "sigma": sigma}
    values |= {f"z_{t}": z for t, z in enumerate(decoded["viterbi"])}
    return zoo.Estimate(
        values,
        traces={} if trace is None else {"log_likelihood": trace},
        log_evidence=decoded["log_likelihood"],
        extras=decoded,
    )


@gaussian_hmm.reference("em")
def _(
    x: torch.Tensor,
    K: int,
    *,
    init: Mapping[str, Any] | None = None,
    max_iter: int = 200,
    tol: float = 1e-8,
) -> zoo.Estimate:
    """Baum–Welch with Gaussian emissions (002 §19.6 with f(x | theta_i) normal): maximum
    likelihood of (pi, A, mu, sigma), monotone in log p(x); states relabelled by their means."""
    xs = real_series(x, at_least=2)
    pi, A, mu, sigma, trace = _gaussian_baum_welch(xs, K, init, max_iter, tol)
    return _gaussian_estimate(xs, (pi, A, mu, sigma), trace)


@gaussian_hmm.reference("forward_backward")
def _(x: torch.Tensor, K: int, *, params: Mapping[str, Any] | None = None) -> zoo.Estimate:
    """Forward–backward and Viterbi at given parameters (default: the Baum–Welch estimate).

    Evidence log p(x | params) by the forward algorithm; ``extras``: the marginals p(z_t | x),
    the filtered p(z_t | x_1..x_t), the Viterbi path and its log p(z, x), the posterior
    decoding, and log p(x) once more by the matrix-product form. ``params['mu']`` must be
    increasing (the model's labelling of the states)."""
    if params is None:
        xs = real_series(x, at_least=2)
        pi, A, mu, sigma, _ = _gaussian_baum_welch(xs, K, None, 200, 1e-8)
        theta = (pi, A, mu, sigma)
    else:
        xs = real_series(x)
        theta = _gaussian_params(params, K)
    return _gaussian_estimate(xs, theta)


@gaussian_hmm.reference("hmmlearn")
def _(
    x: torch.Tensor,
    K: int,
    *,
    init: Mapping[str, Any] | None = None,
    params: Mapping[str, Any] | None = None,
    max_iter: int = 200,
    tol: float = 1e-8,
) -> zoo.Estimate:
    """hmmlearn's GaussianHMM, the peer of ``em``: its Baum–Welch from em's start.

    Diagonal covariances (in 1-D, one variance per state, the model's sigma squared). The start is
    ``init`` or em's deterministic one (uniform pi, sticky A, means at the data's quantiles, spreads
    at its sd), so the two climb the same hill; ``max_iter`` and ``tol`` are hmmlearn's ``n_iter``
    and ``tol``. ``covars_prior=0`` makes its M-step maximum likelihood, as em's (em also floors
    each variance at 1e-6 Var(x); hmmlearn has no floor). With ``params`` (means increasing): no
    fit, hmmlearn's answers at those parameters. The states are relabelled by increasing mean, the
    model's order (the Viterbi path and the marginals with them). Evidence: hmmlearn's ``score``;
    ``extras``: its Viterbi path (``decode``), the marginals and posterior decoding
    (``predict_proba``). Needs hmmlearn (``pip install hmmlearn``)."""
    hmmlearn_hmm()
    xs = real_series(x, at_least=2)
    if init is not None and params is not None:
        raise zoo.ZooError("give init (a start for the fit) or params (no fit), not both")
    if params is not None:
        theta = _gaussian_params(params, K)
    else:
        start = gaussian_start(xs, K) if init is None else init
        theta = _gaussian_params(start, K, what="init", ordered=False)
    fit = params is None
    values, trace, extras = gaussian_hmmlearn(xs, *theta, fit=fit, max_iter=max_iter, tol=tol)
    values |= {f"z_{t}": z for t, z in enumerate(extras["viterbi"])}
    return zoo.Estimate(
        values,
        traces={"log_likelihood": trace} if trace else {},
        log_evidence=extras["log_likelihood"],
        extras=extras,
    )


@gaussian_hmm.synthetic
def _(seed: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """200 steps of the two-regime process (REGIME_*): known parameters and states."""
    rng = np.random.default_rng(seed)
    x, z = sample_gaussian_hmm(rng, REGIME_PI, REGIME_A, REGIME_MU, REGIME_SIGMA, 200)
    truth = {"pi": REGIME_PI, "A": REGIME_A, "mu": REGIME_MU, "sigma": REGIME_SIGMA}
    truth |= {f"z_{t}": v for t, v in enumerate(z)}
    data = {"x": torch.tensor(x, dtype=torch.float), "K": 2}
    return data, {k: torch.as_tensor(v) for k, v in truth.items()}
