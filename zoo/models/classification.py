"""Classification: naive Bayes with conjugate priors, the class of a new point enumerated."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

import numpy as np
import pyro
import pyro.distributions as dist
import torch
from pyro.distributions import constraints
from pyro.ops.indexing import Vindex
from scipy.special import logsumexp

import zoo
from zoo_datasets import load_iris
from zoo_inference.algorithms.conjugate import beta_update, dirichlet_log_ml, normal_gamma_update
from zoo_inference.distributions import IndexCategorical

# Iris flowers 83, a versicolor (6.0, 2.7, 5.1, 1.6 cm), and 133, a virginica (6.3, 2.8, 5.1,
# 1.5 cm): both near the border of the two species, held out as the new flowers to classify.
# (Two, not one: Pyro's TraceEnum_ELBO.compute_marginals, which the enum engine uses, fails with
# KeyError on an enumerated site in a plate of size 1.)
HOLD_OUT = [83, 133]
MAX_ASSIGNMENTS = 4096  # the closed form sums over C ** len(X_new) labellings of the new points


def _iris_split(binary: bool) -> dict[str, Any]:
    """Iris with the ``HOLD_OUT`` flowers held out as the new points whose species is predicted;
    ``binary``: each measurement replaced by 1 if above that measurement's median (all 150)."""
    X, y, _ = load_iris()
    if binary:
        X = (X > np.median(X, axis=0)).astype(float)
    keep = ~np.isin(np.arange(len(y)), HOLD_OUT)
    return {
        "X": torch.tensor(X[keep], dtype=torch.float32),
        "y": torch.tensor(y[keep], dtype=torch.long),
        "X_new": torch.tensor(X[HOLD_OUT], dtype=torch.float32),
        "C": 3,
    }


def _iris(seed: int = 0) -> dict[str, Any]:
    """Iris measurements (cm), flowers 83 and 133 held out (real data: the seed is unused)."""
    return _iris_split(binary=False)


def _binary_iris(seed: int = 0) -> dict[str, Any]:
    """Iris binarised at each measurement's median, flowers 83 and 133 held out."""
    return _iris_split(binary=True)


def _classes(
    pi: torch.Tensor,
    features: Callable[[torch.Tensor], dist.TorchDistribution],
    X: torch.Tensor,
    y: torch.Tensor,
    X_new: torch.Tensor,
) -> None:
    """Labels and features of the training flowers (observed) and of the new ones (label latent).

    ``features(c)``: the distribution of the D features of a flower of class ``c`` (batch dims:
    those of ``c``, then D); the features are independent given the class (seed 002 L312)."""
    with pyro.plate("flowers", len(y)):
        c = pyro.sample("y", dist.Categorical(pi), obs=y)
        pyro.sample("X", features(c).to_event(1), obs=X)
    with pyro.plate("new_flowers", len(X_new)):
        c_new = pyro.sample("label_new", dist.Categorical(pi))
        pyro.sample("X_new", features(c_new).to_event(1), obs=X_new)


# ------------------------------------------------------- exact posterior over labellings


def _labelled_posterior(
    X: torch.Tensor,
    y: torch.Tensor,
    X_new: torch.Tensor,
    C: int,
    alpha: float,
    update: Callable[[np.ndarray, np.ndarray], tuple[dict[str, np.ndarray], float]],
) -> tuple[np.ndarray, dict[str, np.ndarray], np.ndarray, np.ndarray]:
    """The exact posterior with new points of unknown class: a mixture, over every labelling a of
    the new points, of the conjugate posterior given the training data plus (X_new, a), weighted
    by p(y, a, X, X_new). Returns the normalised log weights (A,), each labelling's posterior
    parameters (stacked: (A, C, D)), the labellings (A, n_new) and log p(y, X, X_new) (0-d)."""
    Xn, yn, Xs = X.double().numpy(), y.numpy().astype(int), X_new.double().numpy()
    n_new = Xs.shape[0]
    if C**n_new > MAX_ASSIGNMENTS:
        raise zoo.ZooError(
            f"the exact posterior sums over C ** len(X_new) = {C}**{n_new} labellings of the new "
            f"points; keep it under {MAX_ASSIGNMENTS} (or classify points one at a time)"
        )
    labellings = np.array(list(itertools.product(range(C), repeat=n_new)), dtype=int)
    labellings = labellings.reshape(len(labellings), n_new)
    X_all = np.vstack([Xn, Xs])
    log_ws, params = [], []
    for a in labellings:
        labels = np.concatenate([yn, a])
        p, log_ml = update(X_all, labels)
        log_ws.append(dirichlet_log_ml(labels, C, alpha) + log_ml)
        params.append(p)
    log_w = np.array(log_ws)
    log_z = logsumexp(log_w)
    stacked = {k: np.stack([p[k] for p in params]) for k in params[0]}
    return log_w - log_z, stacked, labellings, np.asarray(log_z)


def _mixture(
    log_w: np.ndarray, family: Callable[..., dist.TorchDistribution], event_dims: int, **params: Any
) -> dist.TorchDistribution:
    """Per-element marginal of a site whose posterior mixes, over the labellings (weights
    ``exp(log_w)``), ``family(**params)`` with ``params`` stacked over labellings (A, ...)."""
    if len(log_w) == 1:
        return family(**{k: torch.as_tensor(v[0]) for k, v in params.items()})
    if event_dims:  # one weight per labelling for the whole vector (a Dirichlet)
        comp = family(**{k: torch.as_tensor(v) for k, v in params.items()})
        return dist.MixtureSameFamily(dist.Categorical(logits=torch.as_tensor(log_w)), comp)
    comp = family(**{k: torch.as_tensor(np.moveaxis(v, 0, -1)) for k, v in params.items()})
    logits = torch.as_tensor(log_w).expand(comp.batch_shape)
    return dist.MixtureSameFamily(dist.Categorical(logits=logits), comp)


def _label_marginals(log_w: np.ndarray, labellings: np.ndarray, C: int) -> IndexCategorical:
    """P(label_new_i = c | data) = sum of the weights of the labellings with a_i = c."""
    w = np.exp(log_w)
    probs = np.stack([(w[:, None] * (labellings == c)).sum(0) for c in range(C)], axis=-1)
    return IndexCategorical(probs=torch.as_tensor(probs))


# ------------------------------------------------------------------------ naive_bayes
@zoo.register(
    data=_iris,
    params=("pi", "mu", "tau"),
    # random-walk MH runs and its report says it fails: from a prior draw (kappa0 = 0.01 puts mu
    # tens of cm away) it does not reach posterior sds of 0.015 cm in 27 dimensions (R-hat 2.7,
    # 3% acceptance after 5000 + 5000 steps)
    engine_options={
        "svi": {"num_steps": 2000, "lr": 0.05, "jit": True},  # Pyro's JIT: more steps a second
        "nuts": {"num_samples": 500, "warmup": 500},
    },
    seed_ref="002 §1.1 (L293–339)",
    math=[
        r"\pi \sim \mathrm{Dirichlet}(\alpha \mathbf{1}_C)",
        r"\tau_{cj} \sim \mathrm{Gamma}(a_0,\, b_0),"
        r" \quad \mu_{cj} \mid \tau_{cj} \sim \mathcal{N}(m_0,\, (\kappa_0 \tau_{cj})^{-1})",
        r"y_i \sim \mathrm{Categorical}(\pi),"
        r" \quad x_{ij} \mid y_i \sim \mathcal{N}(\mu_{y_i j},\, \tau_{y_i j}^{-1})",
    ],
    known={
        "hmc": zoo.Known(
            "slow", "enumerated classes at every gradient; test_naive_bayes checks the samplers"
        ),
        "nuts": zoo.Known(
            "slow",
            "enumerated classes at every gradient; test_naive_bayes runs it against the truth",
        ),
        "mams": zoo.Known(
            "slow",
            "enumerated classes at every gradient; test_mams checks mams against closed "
            "forms and by SBC",
        ),
        "importance": zoo.Known(
            "slow",
            "many proposals through the enumerated classes; test_importance checks the engine",
        ),
        "pathfinder": zoo.Known("slow", "enumerated classes at every gradient of every path"),
        "mh": zoo.Known(
            "not_mixing",
            "random-walk MH from a prior draw in 27 dimensions with posterior sds 1/200 "
            "of the prior's",
        ),
    },
)
def naive_bayes(
    X: torch.Tensor,
    y: torch.Tensor,
    X_new: torch.Tensor,
    C: int = 3,
    alpha: float = 1.0,
    m0: float = 3.0,
    kappa0: float = 0.01,
    a0: float = 1.0,
    b0: float = 0.09,
) -> None:
    r"""Gaussian naive Bayes with conjugate Normal–Gamma features and a Dirichlet class prior.

    Generative story (seed 002 §1.1, L301–333; Gaussian features L323, read N(x | mu, sigma^2))::

        pi             ~ Dirichlet(alpha 1_C)                         class proportions
        tau_cj         ~ Gamma(a0, b0)           c = 1..C, j = 1..D   precision of feature j
        mu_cj | tau_cj ~ Normal(m0, 1 / sqrt(kappa0 tau_cj))          mean of feature j
        y_i            ~ Categorical(pi)                              species of flower i
        x_ij | y_i     ~ Normal(mu_{y_i j}, 1 / sqrt(tau_{y_i j}))    features independent
        label_new_k    ~ Categorical(pi),  x_new_kj ~ Normal(mu_{label j}, ...)  new flowers

            pi ---> [y_i] ------------> [x_ij]       i = 1..N  (training flowers)
             |                             ^
             |                      (mu_cj, tau_cj)     c = 1..C, j = 1..D
             |                             v
             +----> (label_new_k) ---> [x_new_kj]     k = 1..K  (new flowers)

    Closed form: given the labels each (mu_cj, tau_cj) is Normal–Gamma (per-site marginals:
    Student-t mu, Gamma tau) and pi is Dirichlet. The new flowers' labels are unknown, so the
    exact posterior is a mixture over their C^K labellings (9 components for the default two
    flowers); each site's marginal is given as that mixture of Student-t / Gamma / Dirichlet
    (per element). P(label_new = c | data) for one new flower is the posterior predictive
    (alpha + N_c) / (C alpha + N) prod_j t_{2 a_n}(x_j | m_n, b_n (kappa_n + 1) / (a_n kappa_n));
    with several, each also learns a little from the others (the mixture accounts for it).
    The ``enum`` engine gives the class posterior at fixed (or MAP) parameters:
    pi_c prod_j N(x_j | mu_cj, tau_cj^-1/2), normalised. Default data: iris, flowers 83 and 133
    held out.
    """
    # Iris measurements are 0.1 to 7.9 cm. Within a species a measurement has a sd of a few
    # millimetres: a0 = 1, b0 = 0.09 cm^2 is a prior guess sd of 0.3 cm worth two flowers
    # (95% of the prior sd between 0.16 and 1.9 cm). The mean is centred at m0 = 3 cm with
    # kappa0 = 0.01 (a hundredth of a flower): its marginal prior is Student-t, 2 df, scale 3 cm,
    # so any size from 0 to 10 cm is plausible. Dirichlet(1, 1, 1): any mix of species.
    D = X.shape[1]
    pi = pyro.sample("pi", dist.Dirichlet(torch.full((C,), float(alpha))))
    tau = pyro.sample("tau", dist.Gamma(a0, b0).expand([C, D]).to_event(2))
    mu = pyro.sample("mu", dist.Normal(m0, (kappa0 * tau) ** -0.5).to_event(2))

    def features(c: torch.Tensor) -> dist.TorchDistribution:
        # Vindex picks class c's row under any batch dims (draws, enumeration of label_new)
        return dist.Normal(Vindex(mu)[..., c, :], Vindex(tau)[..., c, :] ** -0.5)

    _classes(pi, features, X, y, X_new)


@naive_bayes.set_guide
def _(X: torch.Tensor, y: torch.Tensor, C: int, alpha: float) -> None:
    """Mean-field factors in the conjugate families: q(pi) Dirichlet, q(tau_cj) Gamma,
    q(mu_cj) Normal (the exact Normal–Gamma couples mu and tau; this factorisation makes mu's sd
    too small by a factor about sqrt((a_n - 1) / a_n)). label_new is enumerated in the model.
    Started at the per-class sample means and a 0.5 cm sd."""
    D = X.shape[1]
    counts = torch.bincount(y, minlength=C).float()
    means = torch.stack([X[y == c].mean(0) if counts[c] > 0 else X.mean(0) for c in range(C)])
    conc = pyro.param("q_pi_conc", counts + alpha, constraint=constraints.positive)
    pyro.sample("pi", dist.Dirichlet(conc))
    shape = pyro.param("q_tau_shape", torch.full((C, D), 10.0), constraint=constraints.positive)
    rate = pyro.param("q_tau_rate", torch.full((C, D), 2.5), constraint=constraints.positive)
    pyro.sample("tau", dist.Gamma(shape, rate).to_event(2))
    loc = pyro.param("q_mu_loc", means)
    scale = pyro.param("q_mu_scale", torch.full((C, D), 0.1), constraint=constraints.positive)
    pyro.sample("mu", dist.Normal(loc, scale).to_event(2))


@naive_bayes.posterior
def _(
    X: torch.Tensor,
    y: torch.Tensor,
    X_new: torch.Tensor,
    C: int,
    alpha: float,
    m0: float,
    kappa0: float,
    a0: float,
    b0: float,
) -> tuple[dict, float]:
    """Exact per-site marginals (mixtures over the new flowers' labellings of the conjugate
    Student-t mu, Gamma tau, Dirichlet pi) and log p(y, X, X_new)."""

    def update(Xa: np.ndarray, labels: np.ndarray) -> tuple[dict[str, np.ndarray], float]:
        return normal_gamma_update(Xa, labels, C, m0, kappa0, a0, b0)

    log_w, p, labellings, log_z = _labelled_posterior(X, y, X_new, C, alpha, update)

    def student_t(m: torch.Tensor, kappa: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> Any:
        return dist.StudentT(2 * a, m, (b / (a * kappa)).sqrt())  # mu's Normal–Gamma marginal

    counts = _class_counts(y, labellings, C) + alpha
    return {
        "pi": _mixture(log_w, dist.Dirichlet, 1, concentration=counts),
        "mu": _mixture(log_w, student_t, 0, **p),
        "tau": _mixture(log_w, dist.Gamma, 0, concentration=p["a"], rate=p["b"]),
        "label_new": _label_marginals(log_w, labellings, C),
    }, float(log_z)


def _class_counts(y: torch.Tensor, labellings: np.ndarray, C: int) -> np.ndarray:
    """N_c of the training labels plus each labelling of the new points: (A, C)."""
    base = np.bincount(y.numpy().astype(int), minlength=C).astype(float)
    return base + np.stack([np.bincount(a, minlength=C) for a in labellings]).astype(float)


@naive_bayes.synthetic
def _(seed: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """150 flowers and one new flower from known parameters near iris's (cm): class proportions
    (0.3, 0.3, 0.4), the species' mean measurements, within-species sds 0.1 to 0.6 cm."""
    pi = torch.tensor([0.3, 0.3, 0.4])
    mu = torch.tensor(
        [[5.0, 3.4, 1.5, 0.25], [5.9, 2.8, 4.3, 1.3], [6.6, 3.0, 5.5, 2.0]], dtype=torch.float32
    )
    sd = torch.tensor([[0.35, 0.38, 0.17, 0.1], [0.5, 0.3, 0.47, 0.2], [0.6, 0.3, 0.55, 0.27]])
    y = dist.Categorical(pi).sample((150,))
    X = dist.Normal(mu[y], sd[y]).sample()
    label_new = dist.Categorical(pi).sample((1,))
    X_new = dist.Normal(mu[label_new], sd[label_new]).sample()
    truth = {"pi": pi, "mu": mu, "tau": sd**-2, "label_new": label_new}
    return {"X": X, "y": y, "X_new": X_new, "C": 3}, truth


# --------------------------------------------------------------- naive_bayes_bernoulli
@zoo.register(
    data=_binary_iris,
    params=("pi", "theta"),
    engine_options={
        "svi": {"num_steps": 2000, "lr": 0.05, "jit": True},  # Pyro's JIT: more steps a second
        "nuts": {"num_samples": 500, "warmup": 500},
    },
    seed_ref="002 §1.1 (L323–339, Algorithm 1)",
    math=[
        r"\pi \sim \mathrm{Dirichlet}(\alpha \mathbf{1}_C),"
        r" \quad \theta_{cj} \sim \mathrm{Beta}(a,\, b)",
        r"y_i \sim \mathrm{Categorical}(\pi),"
        r" \quad x_{ij} \mid y_i \sim \mathrm{Bernoulli}(\theta_{y_i j})",
    ],
    known={
        "importance": zoo.Known(
            "slow",
            "many proposals through the enumerated classes; test_importance checks the engine",
        ),
        "nuts": zoo.Known("slow", "test_naive_bayes runs it against the closed form"),
    },
)
def naive_bayes_bernoulli(
    X: torch.Tensor,
    y: torch.Tensor,
    X_new: torch.Tensor,
    C: int = 3,
    alpha: float = 1.0,
    a: float = 1.0,
    b: float = 1.0,
) -> None:
    r"""Bernoulli naive Bayes ("multivariate Bernoulli NB") with Beta and Dirichlet priors.

    Generative story (seed 002 §1.1, L323–333; Algorithm 1 is its maximum-likelihood fit)::

        pi            ~ Dirichlet(alpha 1_C)
        theta_cj      ~ Beta(a, b),  c = 1..C, j = 1..D    P(feature j = 1 | class c)
        y_i           ~ Categorical(pi)
        x_ij | y_i    ~ Bernoulli(theta_{y_i j})
        label_new_k   ~ Categorical(pi),  x_new_kj ~ Bernoulli(theta_{label_new_k j})

            pi ---> [y_i] ------------> [x_ij]       i = 1..N
             |                             ^
             |                         (theta_cj)       c = 1..C, j = 1..D
             |                             v
             +----> (label_new_k) ---> [x_new_kj]     k = 1..K

    Closed form: theta_cj | data ~ Beta(a + N_jc, b + N_c - N_jc) and pi ~ Dirichlet(alpha +
    N_c), mixed over the new flowers' labellings. Under Beta(1, 1) the MAP is Algorithm 1's
    count estimate N_jc / N_c, and the posterior mean is scikit-learn's BernoulliNB with Laplace
    smoothing alpha = 1. Default data: iris, each measurement binarised at its median ("longer
    than the typical flower"), flowers 83 and 133 held out.
    """
    # Beta(1, 1): every P(long | species) equally likely; Dirichlet(1, 1, 1): any species mix.
    D = X.shape[1]
    pi = pyro.sample("pi", dist.Dirichlet(torch.full((C,), float(alpha))))
    theta = pyro.sample("theta", dist.Beta(a, b).expand([C, D]).to_event(2))
    _classes(pi, lambda c: dist.Bernoulli(Vindex(theta)[..., c, :]), X, y, X_new)


@naive_bayes_bernoulli.set_guide
def _(X: torch.Tensor, C: int) -> None:
    """q(pi) Dirichlet, q(theta_cj) Beta: the conjugate families (exact up to the small mixture
    over the new flower's class). label_new is enumerated in the model."""
    D = X.shape[1]
    conc = pyro.param("q_pi_conc", torch.full((C,), 10.0), constraint=constraints.positive)
    pyro.sample("pi", dist.Dirichlet(conc))
    c1 = pyro.param("q_theta_c1", torch.full((C, D), 5.0), constraint=constraints.positive)
    c0 = pyro.param("q_theta_c0", torch.full((C, D), 5.0), constraint=constraints.positive)
    pyro.sample("theta", dist.Beta(c1, c0).to_event(2))


@naive_bayes_bernoulli.posterior
def _(
    X: torch.Tensor, y: torch.Tensor, X_new: torch.Tensor, C: int, alpha: float, a: float, b: float
) -> tuple[dict, float]:
    """Exact per-site marginals (mixtures over labellings of Beta theta, Dirichlet pi)."""
    log_w, p, labellings, log_z = _labelled_posterior(
        X, y, X_new, C, alpha, lambda Xa, labels: beta_update(Xa, labels, C, a, b)
    )
    counts = _class_counts(y, labellings, C) + alpha
    return {
        "pi": _mixture(log_w, dist.Dirichlet, 1, concentration=counts),
        "theta": _mixture(log_w, dist.Beta, 0, concentration1=p["a"], concentration0=p["b"]),
        "label_new": _label_marginals(log_w, labellings, C),
    }, float(log_z)


@naive_bayes_bernoulli.synthetic
def _(seed: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """150 flowers and one new flower from known (pi, theta): the binarised-iris pattern, where
    species 0 is short everywhere and species 2 long."""
    pi = torch.tensor([0.3, 0.3, 0.4])
    theta = torch.tensor([[0.05, 0.8, 0.02, 0.02], [0.5, 0.2, 0.5, 0.5], [0.9, 0.5, 0.98, 0.98]])
    y = dist.Categorical(pi).sample((150,))
    X = dist.Bernoulli(theta[y]).sample()
    label_new = dist.Categorical(pi).sample((1,))
    X_new = dist.Bernoulli(theta[label_new]).sample()
    truth = {"pi": pi, "theta": theta, "label_new": label_new}
    return {"X": X, "y": y, "X_new": X_new, "C": 3}, truth
