"""Sequential models: hidden Markov models and the linear-Gaussian state-space model.

The exact algorithms of seed 002 ch. 19 (forward, backward, Viterbi, Baum–Welch) are written
once, on a matrix of emission log-likelihoods ``log_b[t, k] = log p(x_t | z_t = k)``, so the
categorical and the Gaussian HMM share them; the Kalman filter and RTS smoother (002 ch. 32) are
written once for the local-level model. Everything here is vectorised over states (one small
matrix operation per time step) or over time (the evaluation problem as a product of matrices,
reduced pairwise in log2 T steps).
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyro
import pyro.distributions as dist
import torch
from pyro.distributions import constraints
from pyro.ops.indexing import Vindex
from scipy import optimize
from scipy.special import logsumexp
from scipy.stats import norm

import zoo
from zoo_datasets import load_nile

from .mixtures import SortedNormal

# ============================================================================ HMM algorithms


def hmm_log_likelihood(pi: np.ndarray, A: np.ndarray, log_b: np.ndarray) -> np.ndarray:
    """The evaluation problem, log p(x_1..x_T) (002 §19.4), as a product of matrices::

        p(x) = pi' D_1 A D_2 A ... A D_T 1,     D_t = diag(b_{., x_t})

    which is the forward recursion alpha_t = (alpha_{t-1} A) D_t unrolled. The T - 1 matrices
    M_t = A D_t are multiplied pairwise (a tree of log2 T batched matrix products), each level
    rescaled by its largest entry so that nothing underflows; the scales add up in log space.
    ``log_b`` is (..., T, K): leading dimensions are independent sequences.
    """
    log_b = np.asarray(log_b, dtype=float)
    shift = log_b.max(-1, keepdims=True)  # per-step scale of the emissions
    b = np.exp(log_b - shift)
    log_scale = shift[..., 0].sum(-1)
    v = pi * b[..., 0, :]  # alpha_1 up to scale
    M = A * b[..., 1:, None, :]  # M_t[i, j] = a_ij b_j(x_t), t = 2..T
    while M.shape[-3] > 1:
        if M.shape[-3] % 2:  # odd count: the last matrix waits a level
            last, M = M[..., -1:, :, :], M[..., :-1, :, :]
        else:
            last = None
        M = M[..., 0::2, :, :] @ M[..., 1::2, :, :]
        s = M.max(axis=(-2, -1), keepdims=True)
        M = M / s
        log_scale = log_scale + np.log(s[..., 0, 0]).sum(-1)
        if last is not None:
            M = np.concatenate([M, last], axis=-3)
    if M.shape[-3] == 1:
        v = (v[..., None, :] @ M[..., 0, :, :])[..., 0, :]
    return log_scale + np.log(v.sum(-1))


@dataclass
class Posterior:
    """What forward–backward gives: the scaled forward and backward variables, log p(x), the
    one-slice posteriors gamma_t(k) = p(z_t = k | x) and the summed two-slice posteriors
    sum_t xi_t(i, j) = sum_t p(z_{t-1} = i, z_t = j | x)."""

    alpha: np.ndarray  # (T, K) p(z_t | x_1..x_t): the normalised forward variables
    beta: np.ndarray  # (T, K) beta_t / prod_{s > t} c_s
    log_likelihood: float
    gamma: np.ndarray  # (T, K)
    xi_sum: np.ndarray  # (K, K)


def forward_backward(pi: np.ndarray, A: np.ndarray, log_b: np.ndarray) -> Posterior:
    """Forward–backward with per-step normalisation (002 §19.4.3–19.4.4)::

        alpha_1 = pi * b_1,   alpha_t = (alpha_{t-1} A) * b_t          c_t = sum_k alpha_t(k)
        beta_T = 1,           beta_t = A (b_{t+1} * beta_{t+1}) / c_{t+1}
        gamma_t = alpha_t * beta_t,   xi_t(i, j) = alpha_{t-1}(i) a_ij b_t(j) beta_t(j) / c_t

    with every alpha_t divided by its sum c_t as it is made, so that log p(x) = sum_t log c_t
    (plus the emission shifts) and nothing underflows. The backward step uses
    b_{t+1} (the document's line 3544 prints b_{x_t}: a typo).
    """
    log_b = np.asarray(log_b, dtype=float)
    T, K = log_b.shape
    shift = log_b.max(1, keepdims=True)
    b = np.exp(log_b - shift)
    alpha, beta, c = np.empty((T, K)), np.empty((T, K)), np.empty(T)
    a = pi * b[0]
    for t in range(T):
        if t:
            a = (alpha[t - 1] @ A) * b[t]
        c[t] = a.sum()
        alpha[t] = a / c[t]
    beta[T - 1] = 1.0
    for t in range(T - 2, -1, -1):
        beta[t] = A @ (b[t + 1] * beta[t + 1]) / c[t + 1]
    gamma = alpha * beta
    # sum over t of xi_t = A * sum_t alpha_{t-1}^T (b_t beta_t / c_t), one matrix product
    xi_sum = A * (alpha[:-1].T @ (b[1:] * beta[1:] / c[1:, None]))
    return Posterior(alpha, beta, float(np.log(c).sum() + shift.sum()), gamma, xi_sum)


def viterbi(pi: np.ndarray, A: np.ndarray, log_b: np.ndarray) -> tuple[np.ndarray, float]:
    """The decoding problem, argmax_z p(z, x) (002 §19.5, Algorithm 5), in log space::

        V_1(k) = log pi_k + log b_k(x_1)
        V_t(k) = log b_k(x_t) + max_i [V_{t-1}(i) + log a_ik],   psi_t(k) = argmax_i [...]

    then backtracking from argmax_k V_T(k). (The document's recursion prints V_t for V_{t-1} and
    returns the pointer, not the path: typos.) Returns (path, log p(path, x))."""
    with np.errstate(divide="ignore"):
        log_pi, log_A = np.log(pi), np.log(A)
    log_b = np.asarray(log_b, dtype=float)
    T, K = log_b.shape
    psi = np.zeros((T, K), dtype=int)
    V = log_pi + log_b[0]
    for t in range(1, T):
        scores = V[:, None] + log_A  # (previous i, next k)
        psi[t] = scores.argmax(0)
        V = scores.max(0) + log_b[t]
    path = np.empty(T, dtype=int)
    path[-1] = int(V.argmax())
    for t in range(T - 1, 0, -1):
        path[t - 1] = psi[t, path[t]]
    return path, float(V.max())


def baum_welch(
    pi: np.ndarray,
    A: np.ndarray,
    emission: Any,
    log_emission: Callable[[Any], np.ndarray],
    m_step_emission: Callable[[np.ndarray], Any],
    max_iter: int,
    tol: float,
) -> tuple[np.ndarray, np.ndarray, Any, list[float], Posterior]:
    """Baum–Welch, EM for an HMM (002 §19.6, M-step at L3667–3671)::

        E: gamma_t, xi_t by forward_backward at theta_old
        M: pi_i = gamma_1(i);   a_ij = sum_{t>=2} xi_t(i, j) / sum_{t>=2} gamma_{t-1}(i)
           emissions from gamma (``m_step_emission``: b_ij = sum_t gamma_t(i) I(x_t = j) /
           sum_t gamma_t(i) for symbols; weighted means and variances for Gaussians)

    Returns the parameters, the log-likelihood trace (one value per E-step, at the parameters
    before that step's M-step) and the last E-step's posterior."""
    trace: list[float] = []
    while True:
        post = forward_backward(pi, A, log_emission(emission))
        trace.append(post.log_likelihood)
        done = len(trace) > max_iter or (len(trace) > 1 and abs(trace[-1] - trace[-2]) < tol)
        if done:
            return pi, A, emission, trace, post
        pi = post.gamma[0]
        A = post.xi_sum / post.xi_sum.sum(1, keepdims=True)
        emission = m_step_emission(post.gamma)


def posterior_decoding(gamma: np.ndarray) -> np.ndarray:
    """The most probable state at each step on its own, argmax_k p(z_t = k | x) (002 L3552): it
    can differ from the Viterbi path, and need not even be a possible path."""
    return gamma.argmax(1)


# ==================================================================================== hmm

# The seed's two-state example (catalogue §4; seed notes 002b §2.7): states H(ot), C(old);
# symbols 1, 2, 3 (ice creams eaten), coded 0, 1, 2.
SEED_PI = np.array([0.8, 0.2])
SEED_A = np.array([[0.7, 0.3], [0.4, 0.6]])
SEED_B = np.array([[0.2, 0.4, 0.4], [0.5, 0.4, 0.1]])


def _as_probs(name: str, value: Any, shape: tuple[int, ...]) -> np.ndarray:
    """``value`` as an array of probability vectors (last axis sums to 1) of ``shape``."""
    try:
        arr = np.asarray(value.detach() if isinstance(value, torch.Tensor) else value, dtype=float)
    except (TypeError, ValueError):
        raise zoo.ZooError(f"{name} must be numbers, got {value!r}") from None
    if arr.shape != shape:
        raise zoo.ZooError(f"{name} has shape {arr.shape}, expected {shape}")
    if not np.all(np.isfinite(arr)) or np.any(arr < 0) or not np.allclose(arr.sum(-1), 1, 1e-6):
        raise zoo.ZooError(f"{name} must hold probability vectors (non-negative, summing to 1)")
    return arr


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


def sample_hmm(
    rng: np.random.Generator, pi: np.ndarray, A: np.ndarray, B: np.ndarray, T: int
) -> tuple[np.ndarray, np.ndarray]:
    """Ancestral sampling of a categorical HMM: (symbols, states)."""
    z = np.empty(T, dtype=int)
    x = np.empty(T, dtype=int)
    for t in range(T):
        z[t] = rng.choice(len(pi), p=pi if t == 0 else A[z[t - 1]])
        x[t] = rng.choice(B.shape[1], p=B[z[t]])
    return x, z


@zoo.register(
    data=_seed_sequence,
    figures={"states": {"data": "x", "prefix": "z_"}},  # decoded paths over the series
    params=("pi", "A", "B"),
    engines=("svi", "nuts", "enum"),
    engine_options={
        "nuts": {"num_samples": 200, "warmup": 200, "num_chains": 4},
        "svi": {"jit": True},  # Pyro's JIT: 2-2.5x the steps a second
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
        _as_probs("params['pi']", params["pi"], (K,)),
        _as_probs("params['A']", params["A"], (K, K)),
        _as_probs("params['B']", params["B"], (K, M)),
    )


def _decoded(pi: np.ndarray, A: np.ndarray, log_b: np.ndarray) -> dict[str, Any]:
    """The three problems at given parameters: log p(x), marginals, both decodings."""
    post = forward_backward(pi, A, log_b)
    path, log_joint = viterbi(pi, A, log_b)
    return {
        "log_likelihood": post.log_likelihood,
        "marginals": post.gamma,
        "filtered": post.alpha,
        "viterbi": path,
        "viterbi_log_joint": log_joint,
        "posterior_decoding": posterior_decoding(post.gamma),
    }


def _sticky_start(K: int) -> np.ndarray:
    """Baum–Welch's starting transition matrix: stay with probability 0.7, the rest spread
    evenly over the other states."""
    A = np.full((K, K), 0.3 / max(K - 1, 1)) + np.eye(K) * (0.7 - 0.3 / max(K - 1, 1))
    return A / A.sum(1, keepdims=True)


def _em_start(x: np.ndarray, K: int, M: int) -> dict[str, np.ndarray]:
    """A deterministic asymmetric start: uniform pi, sticky A, B tilted towards a different
    symbol per state (EM cannot leave a start where every state is the same)."""
    tilt = np.exp(-0.5 * (np.arange(M)[None, :] - np.linspace(0, M - 1, K)[:, None]) ** 2)
    counts = np.bincount(x, minlength=M) + 1.0
    B = counts * (0.5 + tilt)
    return {"pi": np.full(K, 1.0 / K), "A": _sticky_start(K), "B": B / B.sum(1)[:, None]}


def _categorical_baum_welch(
    xs: np.ndarray, K: int, M: int, init: Mapping[str, Any] | None, max_iter: int, tol: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[float]]:
    """:func:`baum_welch` with categorical emissions: log b_i(x_t) = log B[i, x_t]; M-step
    b_ij = sum_t gamma_t(i) I(x_t = j) / sum_t gamma_t(i). From ``init`` or :func:`_em_start`.
    Returns (pi, A, B, log-likelihood trace)."""
    pi, A, B = _categorical_params(_em_start(xs, K, M) if init is None else init, K, M)
    onehot = np.eye(M)[xs]  # (T, M)

    def m_step(gamma: np.ndarray) -> np.ndarray:
        return (gamma.T @ onehot) / gamma.sum(0)[:, None]

    with np.errstate(divide="ignore"):
        pi, A, B, trace, _ = baum_welch(
            pi, A, B, lambda b: np.log(b[:, xs].T), m_step, max_iter, tol
        )
    return pi, A, B, trace


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
    """Baum–Welch (002 §19.6): maximum likelihood of (pi, A, B), monotone in log p(x)."""
    xs = _symbols(x, M)
    pi, A, B, trace = _categorical_baum_welch(xs, K, M, init, max_iter, tol)
    with np.errstate(divide="ignore"):
        decoded = _decoded(pi, A, np.log(B[:, xs].T))
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
        pi, A, B, _ = _categorical_baum_welch(xs, K, M, None, 200, 1e-8)
    else:
        pi, A, B = _categorical_params(params, K, M)
    with np.errstate(divide="ignore"):
        log_b = np.log(B[:, xs].T)
    decoded = _decoded(pi, A, log_b)
    decoded["log_likelihood_matrix_form"] = float(hmm_log_likelihood(pi, A, log_b))
    values = {"pi": pi, "A": A, "B": B} | {f"z_{t}": z for t, z in enumerate(decoded["viterbi"])}
    return zoo.Estimate(values, log_evidence=decoded["log_likelihood"], extras=decoded)


def _hmmlearn() -> Any:
    """hmmlearn's ``hmm`` module, imported when a peer engine runs (listing models stays cheap).
    It is an optional package (the zoo's ``dev`` extra): its absence is one clear error."""
    try:
        return importlib.import_module("hmmlearn.hmm")
    except ImportError:
        raise zoo.ZooError(
            "engine 'hmmlearn' needs the hmmlearn package (the HMM peer, in the zoo's dev "
            "extra): pip install hmmlearn"
        ) from None


def _run_hmmlearn(peer: Any, X: np.ndarray, fit: bool) -> tuple[list[float], dict[str, Any]]:
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

    The start is ``init`` or em's deterministic one (:func:`_em_start`), so the two climb the same
    hill; ``max_iter`` and ``tol`` are hmmlearn's ``n_iter`` and ``tol`` (it stops once an
    iteration gains less than ``tol``). Its flat Dirichlet priors (concentration 1) make the fit
    maximum likelihood, as em's. With ``params``: no fit, hmmlearn's answers at those parameters.
    Evidence: hmmlearn's ``score``, log p(x | its estimate); ``extras``: its Viterbi path
    (``decode``), the marginals and posterior decoding (``predict_proba``); the states' values in
    the estimate are the Viterbi path. Needs hmmlearn (``pip install hmmlearn``)."""
    hl = _hmmlearn()
    xs = _symbols(x, M)
    if init is not None and params is not None:
        raise zoo.ZooError("give init (a start for the fit) or params (no fit), not both")
    if params is not None:
        start = params
    else:
        start = _em_start(xs, K, M) if init is None else init
    pi, A, B = _categorical_params(start, K, M)
    fit = params is None
    peer = hl.CategoricalHMM(
        n_components=K,
        n_features=M,
        init_params="",
        params="ste" if fit else "",
        n_iter=max_iter,
        tol=tol,
    )
    peer.startprob_, peer.transmat_, peer.emissionprob_ = pi, A, B
    trace, extras = _run_hmmlearn(peer, xs[:, None], fit)
    values = {"pi": peer.startprob_, "A": peer.transmat_, "B": peer.emissionprob_}
    values = {k: np.array(v, dtype=float) for k, v in values.items()}
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


def sample_gaussian_hmm(
    rng: np.random.Generator,
    pi: np.ndarray,
    A: np.ndarray,
    mu: np.ndarray,
    sigma: np.ndarray,
    T: int,
) -> tuple[np.ndarray, np.ndarray]:
    """Ancestral sampling of an HMM with Gaussian emissions: (observations, states)."""
    z = np.empty(T, dtype=int)
    for t in range(T):
        z[t] = rng.choice(len(pi), p=pi if t == 0 else A[z[t - 1]])
    return mu[z] + sigma[z] * rng.standard_normal(T), z


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
        "svi": {"jit": True},  # Pyro's JIT: 2-2.5x the steps a second
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


def _series(x: Any, at_least: int = 1) -> np.ndarray:
    """``x`` as one finite real sequence of at least ``at_least`` observations."""
    xs = np.asarray(x.detach() if isinstance(x, torch.Tensor) else x, dtype=float)
    if xs.ndim != 1 or xs.size < at_least:
        raise zoo.ZooError(
            f"x must be one sequence of at least {at_least} number(s), got shape {xs.shape}"
        )
    if not np.all(np.isfinite(xs)):
        raise zoo.ZooError("x must be finite (it holds NaN or inf)")
    return xs


def _as_reals(name: str, value: Any, shape: tuple[int, ...]) -> np.ndarray:
    """``value`` as a finite real array of ``shape``."""
    try:
        arr = np.asarray(value.detach() if isinstance(value, torch.Tensor) else value, dtype=float)
    except (TypeError, ValueError):
        raise zoo.ZooError(f"{name} must be numbers, got {value!r}") from None
    if arr.shape != shape:
        raise zoo.ZooError(f"{name} has shape {arr.shape}, expected {shape}")
    if not np.all(np.isfinite(arr)):
        raise zoo.ZooError(f"{name} must be finite, got {arr}")
    return arr


def _gaussian_params(
    params: Mapping[str, Any], K: int, what: str = "params", ordered: bool = True
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(pi, A, mu, sigma) checked: probability vectors, finite means (increasing when
    ``ordered``: the model's labelling of the states), positive spreads."""
    if K < 2:
        raise zoo.ZooError(f"K must be at least 2 (the number of regimes), got {K}")
    if not isinstance(params, Mapping) or set(params) != {"pi", "A", "mu", "sigma"}:
        raise zoo.ZooError(f"{what} must be a dict with exactly 'pi', 'A', 'mu' and 'sigma'")
    pi = _as_probs(f"{what}['pi']", params["pi"], (K,))
    A = _as_probs(f"{what}['A']", params["A"], (K, K))
    mu = _as_reals(f"{what}['mu']", params["mu"], (K,))
    sigma = _as_reals(f"{what}['sigma']", params["sigma"], (K,))
    if np.any(sigma <= 0):
        raise zoo.ZooError(f"{what}['sigma'] must be positive (standard deviations), got {sigma}")
    if ordered and np.any(np.diff(mu) <= 0):
        raise zoo.ZooError(
            f"{what}['mu'] must be increasing (mu_1 < ... < mu_K labels the states), got {mu}"
        )
    return pi, A, mu, sigma


def gaussian_log_b(x: np.ndarray, mu: np.ndarray, sigma: np.ndarray) -> np.ndarray:
    """The emission log-likelihoods log b_k(x_t) = log N(x_t | mu_k, sigma_k), shape (T, K)."""
    return norm.logpdf(x[:, None], mu, sigma)


def _gaussian_start(xs: np.ndarray, K: int) -> dict[str, np.ndarray]:
    """Baum–Welch's deterministic start with Gaussian emissions: uniform pi, sticky A, means at
    the data's quantiles, spreads at its sd."""
    return {
        "pi": np.full(K, 1.0 / K),
        "A": _sticky_start(K),
        "mu": np.quantile(xs, (np.arange(K) + 0.5) / K),
        "sigma": np.full(K, max(float(xs.std()), 1e-3)),
    }


def _gaussian_baum_welch(
    xs: np.ndarray, K: int, init: Mapping[str, Any] | None, max_iter: int, tol: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, list[float]]:
    """:func:`baum_welch` with Gaussian emissions, M-step from the one-slice posteriors::

        N_k = sum_t gamma_t(k),   mu_k = sum_t gamma_t(k) x_t / N_k,
        sigma_k^2 = sum_t gamma_t(k) (x_t - mu_k)^2 / N_k      (with the new mu_k)

    sigma_k^2 floored at 1e-6 Var(x) (a state on a single point would make the likelihood
    unbounded; the floor is the constrained maximum, so the trace stays monotone). From
    ``init`` or a deterministic start (uniform pi, sticky A, means at the data's quantiles,
    spreads at its sd). The states are relabelled by increasing mean, the model's convention.
    Returns (pi, A, mu, sigma, log-likelihood trace)."""
    init = _gaussian_start(xs, K) if init is None else init
    pi, A, mu, sigma = _gaussian_params(init, K, what="init", ordered=False)
    floor = 1e-6 * max(float(xs.var()), 1e-12)

    def m_step(gamma: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        nk = np.maximum(gamma.sum(0), 1e-300)
        mean = gamma.T @ xs / nk
        var = (gamma * (xs[:, None] - mean) ** 2).sum(0) / nk
        return mean, np.sqrt(np.maximum(var, floor))

    pi, A, (mu, sigma), trace, _ = baum_welch(
        pi, A, (mu, sigma), lambda e: gaussian_log_b(xs, *e), m_step, max_iter, tol
    )
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
    decoded = _decoded(pi, A, log_b)
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
    xs = _series(x, at_least=2)
    *theta, trace = _gaussian_baum_welch(xs, K, init, max_iter, tol)
    return _gaussian_estimate(xs, tuple(theta), trace)


@gaussian_hmm.reference("forward_backward")
def _(x: torch.Tensor, K: int, *, params: Mapping[str, Any] | None = None) -> zoo.Estimate:
    """Forward–backward and Viterbi at given parameters (default: the Baum–Welch estimate).

    Evidence log p(x | params) by the forward algorithm; ``extras``: the marginals p(z_t | x),
    the filtered p(z_t | x_1..x_t), the Viterbi path and its log p(z, x), the posterior
    decoding, and log p(x) once more by the matrix-product form. ``params['mu']`` must be
    increasing (the model's labelling of the states)."""
    if params is None:
        xs = _series(x, at_least=2)
        *theta, _ = _gaussian_baum_welch(xs, K, None, 200, 1e-8)
    else:
        xs = _series(x)
        theta = _gaussian_params(params, K)
    return _gaussian_estimate(xs, tuple(theta))


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
    hl = _hmmlearn()
    xs = _series(x, at_least=2)
    if init is not None and params is not None:
        raise zoo.ZooError("give init (a start for the fit) or params (no fit), not both")
    if params is not None:
        pi, A, mu, sigma = _gaussian_params(params, K)
    else:
        start = _gaussian_start(xs, K) if init is None else init
        pi, A, mu, sigma = _gaussian_params(start, K, what="init", ordered=False)
    fit = params is None
    peer = hl.GaussianHMM(
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
    trace, extras = _run_hmmlearn(peer, xs[:, None], fit)
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


# ===================================================================== linear_gaussian_ssm


@dataclass
class KalmanResult:
    """Filter and RTS smoother of the local-level model (arrays over t = 1..T, batched over any
    leading dimensions of q and r)."""

    predicted_mean: np.ndarray  # E[x_t | y_1..y_{t-1}]
    predicted_var: np.ndarray
    filtered_mean: np.ndarray  # E[x_t | y_1..y_t]
    filtered_var: np.ndarray
    smoothed_mean: np.ndarray  # E[x_t | y_1..y_T]
    smoothed_var: np.ndarray
    smoothed_x0: tuple[np.ndarray, np.ndarray]  # (mean, var) of x_0 given every y
    lag_one_cov: np.ndarray  # Cov(x_t, x_{t-1} | y_1..y_T), t = 1..T (x_0 for t = 1)
    log_likelihood: np.ndarray  # log p(y_1..y_T)


def kalman_local_level(y: np.ndarray, q: Any, r: Any, m0: float, P0: float) -> KalmanResult:
    """Kalman filter and Rauch–Tung–Striebel smoother of x_t = x_{t-1} + w_t, y_t = x_t + v_t
    (002 §32.2 with F = 1, G = 0, X_k = 1; the document's ``KalmanFilter`` class)::

        predict:  m_t^- = m_{t-1},  P_t^- = P_{t-1} + q
        update:   S_t = P_t^- + r,  K_t = P_t^- / S_t,  m_t = m_t^- + K_t (y_t - m_t^-),
                  P_t = (1 - K_t) P_t^-,   log p(y) += log N(y_t | m_t^-, S_t)
        smooth:   J_t = P_t / P_{t+1}^-,  m_t^s = m_t + J_t (m_{t+1}^s - m_{t+1}^-),
                  P_t^s = P_t + J_t^2 (P_{t+1}^s - P_{t+1}^-),  Cov(x_{t+1}, x_t) = J_t P_{t+1}^s

    starting from x_0 ~ N(m0, P0), the state before the first observation. q and r may be
    arrays (a grid of parameter values): every step is elementwise over them.
    """
    y = np.asarray(y, dtype=float)
    q, r = np.asarray(q, dtype=float), np.asarray(r, dtype=float)
    shape = (len(y),) + np.broadcast(q, r).shape
    mp, Pp, mf, Pf = (np.empty(shape) for _ in range(4))
    m, P = np.full(shape[1:], float(m0)), np.full(shape[1:], float(P0))
    ll = np.zeros(shape[1:])
    for t in range(len(y)):
        mp[t], Pp[t] = m, P + q
        S = Pp[t] + r
        gain = Pp[t] / S
        e = y[t] - mp[t]
        ll = ll - 0.5 * (np.log(2 * np.pi * S) + e**2 / S)
        m, P = mp[t] + gain * e, (1 - gain) * Pp[t]
        mf[t], Pf[t] = m, P
    ms, Ps, lag = mf.copy(), Pf.copy(), np.empty(shape)
    for t in range(len(y) - 2, -1, -1):
        J = Pf[t] / Pp[t + 1]
        ms[t] = mf[t] + J * (ms[t + 1] - mp[t + 1])
        Ps[t] = Pf[t] + J**2 * (Ps[t + 1] - Pp[t + 1])
        lag[t + 1] = J * Ps[t + 1]
    J0 = P0 / Pp[0]
    x0 = (m0 + J0 * (ms[0] - mp[0]), P0 + J0**2 * (Ps[0] - Pp[0]))
    lag[0] = J0 * Ps[0]
    return KalmanResult(mp, Pp, mf, Pf, ms, Ps, x0, lag, ll)


@functools.lru_cache(maxsize=8)
def sine_basis(T: int) -> tuple[np.ndarray, np.ndarray]:
    """The eigenvectors (columns of V) and eigenvalues of M = min(s, t), s, t = 1..T::

        V[t, k] = 2 sin((2k - 1) pi t / (2T + 1)) / sqrt(2T + 1)
        lam[k]  = 1 / (4 sin^2((2k - 1) pi / (2 (2T + 1))))

    M is the random walk's covariance (x_t a sum of t unit steps); its inverse is the second-
    difference matrix with a free end, whose eigenvectors are these sines."""
    t = np.arange(1, T + 1)[:, None]
    odd = 2 * np.arange(1, T + 1)[None, :] - 1
    V = 2 * np.sin(odd * np.pi * t / (2 * T + 1)) / np.sqrt(2 * T + 1)
    lam = 1 / (4 * np.sin(odd[0] * np.pi / (2 * (2 * T + 1))) ** 2)
    V.flags.writeable = lam.flags.writeable = False  # cached: shared by every caller
    return V, lam


class LocalLevelMarginal(dist.TorchDistribution):
    r"""y_1..T of the local-level model with the states integrated out::

        y ~ N(m0 1, S),   S = P0 11' + q M + r I,   M = min(s, t)

    Rotated by the sine basis that diagonalises M (:func:`sine_basis`), z = V'(y - m0 1) has
    covariance diag(q lam + r) + a a', a = sqrt(P0) V'1: a diagonal plus rank one. Its log
    density, draws and the smoother take O(T) after the rotation (O(T^2)), not a T x T
    Cholesky (O(T^3)); the same numbers as the Kalman filter's prediction-error decomposition
    and the RTS smoother."""

    arg_constraints = {"q": constraints.positive, "r": constraints.positive}
    support = constraints.real_vector
    has_rsample = True

    def __init__(
        self, q: torch.Tensor, r: torch.Tensor, m0: float, P0: float, T: int, validate_args=None
    ) -> None:
        self.q, self.r = torch.broadcast_tensors(torch.as_tensor(q), torch.as_tensor(r))
        self.m0, self.P0 = float(m0), float(P0)
        V, lam = sine_basis(T)
        self.V = torch.tensor(V, dtype=self.q.dtype)
        self.a = np.sqrt(self.P0) * self.V.sum(0)  # sqrt(P0) V'1
        self.D = self.q[..., None] * torch.tensor(lam, dtype=self.q.dtype) + self.r[..., None]
        super().__init__(self.q.shape, torch.Size([T]), validate_args=validate_args)

    def _inverse(self, z: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(D + aa')^-1 z by Sherman-Morrison, with D^-1 a and 1 + a'D^-1 a."""
        u = self.a / self.D
        cap = 1 + (self.a * u).sum(-1, keepdim=True)
        return z / self.D - u * (u * z).sum(-1, keepdim=True) / cap, u, cap

    def log_prob(self, value: torch.Tensor) -> torch.Tensor:
        if self._validate_args:
            self._validate_sample(value)
        z = (value - self.m0) @ self.V
        solved, _, cap = self._inverse(z)
        logdet = self.D.log().sum(-1) + cap[..., 0].log()
        T = z.shape[-1]
        return -0.5 * (T * np.log(2 * np.pi) + logdet + (z * solved).sum(-1))

    def rsample(self, sample_shape: torch.Size | tuple = ()) -> torch.Tensor:
        shape = self._extended_shape(sample_shape)
        eps = torch.randn(shape, dtype=self.D.dtype)
        level0 = np.sqrt(self.P0) * torch.randn(shape[:-1] + (1,), dtype=self.D.dtype)
        return self.m0 + level0 + (self.D.sqrt() * eps) @ self.V.T

    def smoothed(self, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """E[x_t | y] and Var[x_t | y], the RTS smoother's. y = x + v with Cov(x, y) = S - rI,
        so E[x | y] = y - r S^-1 (y - m0 1) and Var[x_t | y] = r - r^2 (S^-1)_tt."""
        solved, u, cap = self._inverse((y - self.m0) @ self.V)
        r = self.r[..., None]
        diag = (1 / self.D) @ (self.V**2).T - (u @ self.V.T) ** 2 / cap  # (S^-1)_tt
        return y - r * (solved @ self.V.T), r - r**2 * diag


def _nile(seed: int = 0) -> dict[str, Any]:
    """The Nile's annual flow 1871-1970 (10^8 m^3); the seed is unused (real data)."""
    years, flow = load_nile()
    return {
        "y": torch.tensor(flow, dtype=torch.float),
        "t": torch.tensor(years, dtype=torch.float),
        "m0": 1000.0,
        "P0": 250000.0,
        "scale": 100.0,
    }


@zoo.register(
    data=_nile,
    params=("q", "r"),
    engines=("svi", "nuts"),
    figures={"fit": {"x": "t", "y": "y", "mean": "level", "sd": "level_sd"}},
    engine_options={"svi": {"num_steps": 1500, "lr": 0.05}},
    # the states drawn instead of integrated out: NUTS over (q, r, x), and a full-rank Gaussian
    # guide over them (exact for the states given (q, r), which are jointly Gaussian)
    variants={
        "nuts_states": ("nuts", {}, {"states": "sampled"}),
        "svi_states": ("svi", {"guide": "mvn"}, {"states": "sampled"}),
    },
    seed_ref="002 ch. 31–32 (§32.2); 000 §1.4",
    math=[
        r"q \sim \mathrm{LogNormal}(\log (s/3)^2,\, 2),"
        r" \quad r \sim \mathrm{LogNormal}(\log s^2,\, 2)",
        r"x_0 \sim \mathcal{N}(m_0,\, P_0), \quad x_t = x_{t-1} + w_t,"
        r" \quad w_t \sim \mathcal{N}(0,\, q)",
        r"y_t = x_t + v_t, \quad v_t \sim \mathcal{N}(0,\, r), \quad t = 1, \ldots, T",
    ],
)
def linear_gaussian_ssm(
    y: torch.Tensor,
    t: torch.Tensor,
    m0: float = 0.0,
    P0: float = 1.0,
    scale: float = 1.0,
    states: str = "marginal",
) -> None:
    r"""Local-level model (a random walk seen through noise): the Kalman filter's model.

    Generative story (seed 002 §32.2, L6096–6108, with F = 1, G = 0, X_k = 1)::

        q   ~ LogNormal(log (scale/3)^2, 2)     variance of the level's yearly step
        r   ~ LogNormal(log scale^2, 2)         variance of the measurement noise
        x_0 ~ N(m0, P0)                         level before the first observation
        x_t = x_{t-1} + w_t,   w_t ~ N(0, q)    t = 1..T
        y_t = x_t + v_t,       v_t ~ N(0, r)

          (x_0) ---> (x_1) ---> (x_2) ---> ... ---> (x_T)        q, r
                       |          |                   |
                      [y_1]      [y_2]               [y_T]

    The states are integrated out: y ~ N(m0 1, P0 11' + q min(s, t) + r I), the same number the
    Kalman filter's prediction-error decomposition gives (the ``kalman`` engine runs the
    filter and RTS smoother). The deterministic sites ``level`` and ``level_sd`` are the
    smoothed mean and sd of x_t given each draw of (q, r), the fit the report draws over the
    data. ``t`` is the time axis (years), used only by that figure. The priors are wide on the
    log scale (95% within a factor 50 of their medians) around ``scale``, the size of the
    measurement error in the data's units: 100 (10^8 m^3) for the Nile, whose flow is about 900
    with year-to-year swings of a few hundred, the level moving about a third as much as the
    noise. Ground truth: the posterior of (q, r) by 2-D quadrature, the smoother at each node.

    ``states="sampled"`` (the variants ``nuts_states`` and ``svi_states``) draws the states
    instead, non-centred (the steps on a unit scale, which both NUTS and the Gaussian guide
    need; drawn as x itself, the path's scale of hundreds and its coupling with q defeat both):
    x_0 = m0 + sqrt(P0) e_0, x_t = x_{t-1} + sqrt(q) e_t, e ~ N(0, 1) (sites ``x0_noise``,
    ``step_noise``; ``x`` the path) and y_t ~ N(x_t, r). The posterior of (q, r) is the same;
    ``level`` and ``level_sd`` are still the smoother given (q, r). A full-rank Gaussian guide
    over (log q, log r, e) cannot follow how the steps' posterior scales with q: it
    under-estimates q (about 220-380 against the exact 1743 on the Nile), a bias the report
    shows beside the exact answer.
    """
    if states not in ("marginal", "sampled"):
        raise zoo.ZooError(f"states must be 'marginal' or 'sampled', got {states!r}")
    q = pyro.sample("q", dist.LogNormal(2 * np.log(scale / 3), 2.0))
    r = pyro.sample("r", dist.LogNormal(2 * np.log(scale), 2.0))
    # y ~ N(m0 1, P0 11' + q min(s, t) + r I), in the basis where min(s, t) is diagonal
    marginal = LocalLevelMarginal(q, r, m0, P0, len(y))
    level, level_var = marginal.smoothed(y)  # the RTS smoother given (q, r)
    pyro.deterministic("level", level)
    pyro.deterministic("level_sd", level_var.clamp(min=0.0).sqrt())
    if states == "marginal":
        pyro.sample("y", marginal, obs=y)
        return
    e0 = pyro.sample("x0_noise", dist.Normal(0.0, 1.0))
    steps = pyro.sample("step_noise", dist.Normal(0.0, 1.0).expand([len(y)]).to_event(1))
    walk = q.sqrt()[..., None] * steps.cumsum(-1)
    x = pyro.deterministic("x", m0 + np.sqrt(P0) * e0[..., None] + walk)
    pyro.sample("y", dist.Normal(x, r.sqrt()[..., None]).to_event(1), obs=y)


@linear_gaussian_ssm.set_guide
def _(y: torch.Tensor, scale: float) -> None:
    """Mean-field LogNormal factors for the two variances, started at the data's own scales:
    r at the variance of y's first differences / 2, q at a tenth of that."""
    d = float(torch.diff(y).var()) if len(y) > 2 else float(scale) ** 2
    start = {"q": np.log(max(d / 20, 1e-6)), "r": np.log(max(d / 2, 1e-6))}
    for name in ("q", "r"):
        loc = pyro.param(f"q_{name}_loc", torch.tensor(start[name], dtype=torch.float))
        sd = pyro.param(f"q_{name}_scale", torch.tensor(0.3), constraint=constraints.positive)
        pyro.sample(name, dist.LogNormal(loc, sd))


def _check_variance(name: str, value: Any) -> float:
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise zoo.ZooError(f"{name} must be a positive number, got {value!r}") from None
    if not np.isfinite(v) or v <= 0:
        raise zoo.ZooError(f"{name} must be a positive, finite variance, got {value!r}")
    return v


def local_level_mle(y: np.ndarray, m0: float, P0: float) -> tuple[float, float]:
    """Maximum-likelihood (q, r) of the Kalman log-likelihood, by L-BFGS on the log variances
    from the moment start Var(diff y) / 2 for r, a tenth of it for q."""
    d = max(float(np.var(np.diff(y))) if len(y) > 2 else 1.0, 1e-8)

    def nll(u: np.ndarray) -> float:
        return -float(kalman_local_level(y, np.exp(u[0]), np.exp(u[1]), m0, P0).log_likelihood)

    best = min(
        (
            optimize.minimize(nll, np.log([d * f, d / 2]), method="L-BFGS-B")
            for f in (0.01, 0.1, 1.0)
        ),
        key=lambda res: res.fun,
    )
    return float(np.exp(best.x[0])), float(np.exp(best.x[1]))


@linear_gaussian_ssm.reference("kalman")
def _(
    y: torch.Tensor,
    m0: float,
    P0: float,
    *,
    q: float | None = None,
    r: float | None = None,
) -> zoo.Estimate:
    """Kalman filter and RTS smoother (002 §32.2), exact given the variances (default: their
    maximum-likelihood values, found on the filter's log-likelihood)."""
    ys = np.asarray(y, dtype=float)
    if (q is None) != (r is None):
        raise zoo.ZooError("give both q and r (the two noise variances), or neither (MLE)")
    if q is None:
        q, r = local_level_mle(ys, m0, P0)
    q, r = _check_variance("q", q), _check_variance("r", r)
    k = kalman_local_level(ys, q, r, m0, P0)
    return zoo.Estimate(
        {"q": q, "r": r},
        log_evidence=float(k.log_likelihood),
        extras={
            "filtered_mean": k.filtered_mean,
            "filtered_var": k.filtered_var,
            "predicted_mean": k.predicted_mean,
            "predicted_var": k.predicted_var,
            "smoothed_mean": k.smoothed_mean,
            "smoothed_var": k.smoothed_var,
        },
    )


@linear_gaussian_ssm.reference("statsmodels")
def _(
    y: torch.Tensor,
    m0: float,
    P0: float,
    *,
    q: float | None = None,
    r: float | None = None,
    max_iter: int = 1000,
) -> zoo.Estimate:
    """statsmodels' UnobservedComponents local level, the peer of ``kalman``.

    (q, r) by its own maximum likelihood (L-BFGS, tight tolerances; ``max_iter`` iterations at
    most), or its filter and smoother at given ``q`` and ``r``. Same model, same likelihood:
    statsmodels' first state is the level at its first observation, while this model's prior N(m0,
    P0) is on x_0, one step earlier (the first state's variance would be P0 + q, which moves with q
    during the fit). So the series is given to statsmodels behind one missing observation, its first
    state is x_0 with the known initialisation N(m0, P0), and no term is burnt: its ``llf`` is then
    log p(y_1..y_T | q, r) of the model, the ``kalman`` engine's evidence. ``extras``: its filtered,
    predicted and smoothed level (t = 1..T) and whether its optimiser converged."""
    structural = importlib.import_module("statsmodels.tsa.statespace.structural")
    ys = np.asarray(y, dtype=float)
    if (q is None) != (r is None):
        raise zoo.ZooError("give both q and r (the two noise variances), or neither (MLE)")
    mod = structural.UnobservedComponents(np.r_[np.nan, ys], level="local level")
    # after construction: the constructor's own initialisation (approximate diffuse) wins over
    # an `initialization=` argument
    mod.ssm.initialize_known(np.array([float(m0)]), np.array([[float(P0)]]))
    mod.loglikelihood_burn = 0  # set for a diffuse start; the missing y_0 adds nothing anyway
    converged = None
    if q is None:
        res = mod.fit(method="lbfgs", maxiter=max_iter, pgtol=1e-10, factr=10.0, disp=False)
        r_hat, q_hat = (float(v) for v in res.params)  # ordered (irregular, level)
        converged = bool(res.mle_retvals["converged"])
    else:
        q_hat, r_hat = _check_variance("q", q), _check_variance("r", r)
        res = mod.smooth([r_hat, q_hat])
    return zoo.Estimate(
        {"q": q_hat, "r": r_hat},
        log_evidence=float(res.llf),
        extras={
            "filtered_mean": res.filtered_state[0, 1:],
            "filtered_var": res.filtered_state_cov[0, 0, 1:],
            "predicted_mean": res.predicted_state[0, 1:-1],
            "predicted_var": res.predicted_state_cov[0, 0, 1:-1],
            "smoothed_mean": res.smoothed_state[0, 1:],
            "smoothed_var": res.smoothed_state_cov[0, 0, 1:],
            "converged": converged,
        },
    )


@linear_gaussian_ssm.truth
def _(y: torch.Tensor, m0: float, P0: float, scale: float) -> zoo.GroundTruth:
    """The posterior of (q, r) by Gauss–Legendre quadrature on the log variances (a box of
    +-5 around the maximum-likelihood point, 64^2 nodes), the Kalman filter at every node; the
    moments of ``level`` and ``level_sd`` (functions of q and r) over the same grid."""
    ys = np.asarray(y, dtype=float)
    q_hat, r_hat = local_level_mle(ys, m0, P0)
    uq, wq = zoo.gauss_legendre(64, np.log(q_hat) - 5, np.log(q_hat) + 5)
    ur, wr = zoo.gauss_legendre(64, np.log(r_hat) - 5, np.log(r_hat) + 5)
    U, V = np.meshgrid(uq, ur, indexing="ij")
    k = kalman_local_level(ys, np.exp(U), np.exp(V), m0, P0)
    # density of (log q, log r): the LogNormal priors are Normal on the log scale
    log_prior = norm.logpdf(U, 2 * np.log(scale / 3), 2.0) + norm.logpdf(V, 2 * np.log(scale), 2)
    log_post = np.log(wq)[:, None] + np.log(wr)[None, :] + log_prior + k.log_likelihood
    log_z = logsumexp(log_post)
    w = np.exp(log_post - log_z)
    mean, sd = {}, {}
    for name, value in (("q", np.exp(U)), ("r", np.exp(V))):
        mean[name] = float((w * value).sum())
        sd[name] = float(np.sqrt(max((w * value**2).sum() - mean[name] ** 2, 0.0)))
    # the sites level and level_sd are functions of (q, r): their moments over the grid
    for name, value in (("level", k.smoothed_mean), ("level_sd", np.sqrt(k.smoothed_var))):
        mean[name] = (w * value).sum((1, 2))
        sd[name] = np.sqrt(np.clip((w * value**2).sum((1, 2)) - mean[name] ** 2, 0.0, None))
    return zoo.GroundTruth(
        mean=mean,
        sd=sd,
        log_evidence=float(log_z),
        source="exact: Kalman filter on a 64^2 Gauss–Legendre grid over (log q, log r)",
    )


@linear_gaussian_ssm.synthetic
def _(seed: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """100 steps of a local level with q = 0.1, r = 1 from x_0 ~ N(0, 1) (torch's generator,
    seeded by the runner)."""
    T, q, r = 100, 0.1, 1.0
    x = torch.randn(()) + (q**0.5 * torch.randn(T)).cumsum(0)
    y = x + r**0.5 * torch.randn(T)
    data = {"y": y, "t": torch.arange(1.0, T + 1), "m0": 0.0, "P0": 1.0, "scale": 1.0}
    return data, {"q": torch.tensor(q), "r": torch.tensor(r), "level": x}
