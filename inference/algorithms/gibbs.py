"""Gibbs samplers on plain arrays: one sweep of each (the kernel) and the sampler that runs its
chains, drawing from numpy's global stream (which the runner seeds)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from tqdm.auto import tqdm

from zoo_inference.algorithms.ars import ars_step
from zoo_inference.algorithms.conjugate import normal_mean_update, tau_conditional
from zoo_inference.algorithms.univariate import slice_sample, truncated_normal


def gaussian_mixture_gibbs_sweep(
    y: np.ndarray,
    w: np.ndarray,
    mu: np.ndarray,
    s: np.ndarray,
    prior: tuple[float, float, float, float],
    spread_step: str = "slice",
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """One Gibbs sweep for a Bayesian 1-D Gaussian mixture (flat Dirichlet weights, means
    ordered under iid N(m0, s0^2), LogNormal spreads), every chain at once (arrays (chains, K);
    ``y`` (N,)). ``prior`` = (m0, s0, log-scale mean, log-scale sd).

    z_n | .      ~ Categorical(w_k N(y_n | mu_k, s_k^2))        (002 §18.2 responsibilities)
    w | z        ~ Dirichlet(1 + N_k)                           (Dirichlet-categorical)
    mu_k | .     ~ N(m_k, v_k) on (mu_{k-1}, mu_{k+1})          (the prior's ordering)
                   v_k = 1 / (1/s0^2 + N_k/s_k^2), m_k = v_k (m0/s0^2 + sum_{z_n=k} y_n / s_k^2)
    log s_k | .  ∝ N(log s_k | l0, ls^2) s_k^(-N_k) exp(-S_k / (2 s_k^2)),
                   S_k = sum_{z_n=k} (y_n - mu_k)^2  (LogNormal prior: not conjugate but
                   log-concave in t = log s_k, its second derivative -1/ls^2 - 2 S_k e^(-2t) < 0:
                   ``spread_step`` "slice", one slice-sampling step that leaves it invariant, or
                   "ars", an exact draw by adaptive rejection sampling)
    """
    m0, s0, l0, ls = prior
    chains, K = mu.shape
    log_r = np.log(w / s)[:, None] - 0.5 * ((y[None, :, None] - mu[:, None]) / s[:, None]) ** 2
    r = np.exp(log_r - log_r.max(-1, keepdims=True))
    r /= r.sum(-1, keepdims=True)
    z = (r.cumsum(-1) > np.random.uniform(size=r.shape[:2])[..., None]).argmax(-1)
    onehot = z[..., None] == np.arange(K)  # (chains, N, K)
    nk = onehot.sum(1)
    w = np.stack([np.random.dirichlet(1.0 + n) for n in nk])
    sum_y = (onehot * y[None, :, None]).sum(1)
    for k in range(K):  # one coordinate at a time: each mean is bounded by its neighbours
        prec = 1 / s0**2 + nk[:, k] / s[:, k] ** 2
        loc = (m0 / s0**2 + sum_y[:, k] / s[:, k] ** 2) / prec
        low = mu[:, k - 1] if k > 0 else np.full(chains, -np.inf)
        high = mu[:, k + 1] if k < K - 1 else np.full(chains, np.inf)
        mu[:, k] = truncated_normal(loc, 1 / np.sqrt(prec), low, high)
    sq = (onehot * (y[None, :, None] - mu[:, None]) ** 2).sum(1)

    def log_cond(t: np.ndarray) -> np.ndarray:
        return -0.5 * ((t - l0) / ls) ** 2 - nk * t - 0.5 * sq * np.exp(-2 * t)

    def log_cond_and_slope(t: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return log_cond(t), -(t - l0) / ls**2 - nk + sq * np.exp(-2 * t)

    if spread_step == "ars":
        s = np.exp(ars_step(log_cond_and_slope, np.log(s), scale=0.5)[0])
    elif spread_step == "slice":
        s = np.exp(slice_sample(log_cond, np.log(s)))
    else:
        raise ValueError(f"spread_step must be 'slice' or 'ars', got {spread_step!r}")
    return z, w, mu, s


def crp_gibbs_sweep(
    y: np.ndarray,
    labels: np.ndarray,
    atoms: list[float],
    alpha: float,
    sigma: float,
    mu0: float,
    tau0: float,
) -> tuple[np.ndarray, list[float]]:
    """One sweep of Neal's (2000) algorithm 2, the seed's DPMM Gibbs sampler (000 §2.3.4).

    Step 1 (L636, conditioning on S_{-i}: the print's "S_{i-1}" is a typo), for each i:
        P(S_i = c | S_{-i}, theta*) ∝ n_c^{(-i)} N(y_i | theta*_c, sigma^2)      existing c
        P(S_i = new | S_{-i})       ∝ alpha N(y_i | mu0, sigma^2 + tau0^2)      (∫ K dP0)
      a new cluster draws its atom from theta | y_i; an emptied cluster is dropped.
    Step 2 (L640): theta*_c | y ~ N(m_c, v_c), v_c = 1 / (1/tau0^2 + n_c/sigma^2),
        m_c = v_c (mu0/tau0^2 + sum_{S_i = c} y_i / sigma^2).
    """
    atoms_arr = list(atoms)
    counts = list(np.bincount(labels, minlength=len(atoms_arr)))
    s2, t2 = sigma**2, tau0**2
    log_new = np.log(alpha) - 0.5 * np.log(2 * np.pi * (s2 + t2))
    for i, yi in enumerate(y):
        c = labels[i]
        counts[c] -= 1
        if counts[c] == 0:  # the singleton's cluster goes; later labels shift down
            del counts[c], atoms_arr[c]
            labels[labels > c] -= 1
        th = np.asarray(atoms_arr)
        logw = np.log(np.asarray(counts, dtype=float)) - 0.5 * (yi - th) ** 2 / s2
        logw = np.append(
            logw - 0.5 * np.log(2 * np.pi * s2), log_new - 0.5 * (yi - mu0) ** 2 / (s2 + t2)
        )
        p = np.exp(logw - logw.max())
        c = int(np.searchsorted(np.cumsum(p), np.random.uniform() * p.sum()))
        if c == len(counts):
            v = 1 / (1 / t2 + 1 / s2)
            atoms_arr.append(
                float(v * (mu0 / t2 + yi / s2) + np.sqrt(v) * np.random.standard_normal())
            )
            counts.append(0)
        counts[c] += 1
        labels[i] = c
    n = np.asarray(counts, dtype=float)
    sums = np.bincount(labels, weights=y, minlength=len(counts))
    vs = 1 / (1 / t2 + n / s2)
    atoms_arr = list(vs * (mu0 / t2 + sums / s2) + np.sqrt(vs) * np.random.standard_normal(len(n)))
    return labels, atoms_arr


def crp_to_sticks(
    labels: np.ndarray, atoms: list[float], alpha: float, T: int, mu0: float, tau0: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A CRP state in the truncated model's coordinates: clusters relabelled by decreasing size,
    v_k ~ Beta(1 + n_k, alpha + sum_{j>k} n_j) (the sticks' conditional given the labels),
    atoms of empty components drawn from P0. A state with more than T clusters (rare when
    E[pi_T] is small) has its smallest ones folded into component T, at their size-weighted
    mean atom."""
    counts = np.bincount(labels)
    rank = np.argsort(-counts, kind="stable")
    relabel = np.empty_like(rank)
    relabel[rank] = np.minimum(np.arange(rank.size), T - 1)
    atoms_sorted = np.asarray(atoms)[rank]
    if rank.size > T:
        tail = counts[rank][T - 1 :]
        atoms_sorted[T - 1] = (tail * atoms_sorted[T - 1 :]).sum() / tail.sum()
        atoms_sorted = atoms_sorted[:T]
    n = np.bincount(relabel[labels], minlength=T).astype(float)
    after = n[::-1].cumsum()[::-1]  # sum_{j >= k} n_j
    v = np.random.beta(1 + n[:-1], alpha + after[1:])
    locs = mu0 + tau0 * np.random.standard_normal(T)
    locs[: atoms_sorted.size] = atoms_sorted
    return v, locs, relabel[labels]


def collapsed_gibbs_sweep(
    words: np.ndarray,
    z: np.ndarray,
    n_dk: np.ndarray,
    n_kw: np.ndarray,
    n_k: np.ndarray,
    alpha: float,
    eta: float,
) -> None:
    """One sweep of collapsed Gibbs for LDA, in place (Griffiths & Steyvers 2004): theta and phi
    integrated out (Dirichlet-multinomial conjugacy, 002 L3007), each token's topic drawn from

        P(z_dn = k | z_-dn, w) ∝ (n_dk^-dn + alpha) (n_{k,w_dn}^-dn + eta) / (n_k^-dn + V eta)

    with the counts n_dk (document-topic), n_kw (topic-word), n_k (topic) leaving token dn out."""
    D, N = words.shape
    V = n_kw.shape[1]
    u = np.random.uniform(size=(D, N))
    for d in range(D):
        for n in range(N):
            w, k = words[d, n], z[d, n]
            n_dk[d, k] -= 1
            n_kw[k, w] -= 1
            n_k[k] -= 1
            p = (n_dk[d] + alpha) * (n_kw[:, w] + eta) / (n_k + V * eta)
            c = np.cumsum(p)
            k = min(int(np.searchsorted(c, u[d, n] * c[-1])), len(c) - 1)
            z[d, n] = k
            n_dk[d, k] += 1
            n_kw[k, w] += 1
            n_k[k] += 1


def normal_gamma_gibbs(
    xs: np.ndarray,
    mu0: float,
    kappa0: float,
    a0: float,
    b0: float,
    num_samples: int,
    warmup: int,
    num_chains: int,
) -> tuple[np.ndarray, np.ndarray]:
    """Two-block Gibbs for the Normal–Gamma model, chains started from the prior of tau:
    mu | tau ~ N((kappa0 mu0 + N xbar) / kappa_N, 1 / (kappa_N tau)) and tau | mu by
    :func:`tau_conditional`. Returns draws of mu and tau, (chains, samples) each."""
    tau = np.random.gamma(a0, 1.0 / b0, size=num_chains)  # over-dispersed starts: the prior
    mus = np.empty((num_chains, num_samples))
    taus = np.empty((num_chains, num_samples))
    for t in range(warmup + num_samples):
        loc, prec = normal_mean_update(mu0, kappa0 * tau, float(xs.sum()), xs.size, tau)
        mu = loc + np.random.standard_normal(num_chains) / np.sqrt(prec)
        shape, rate = tau_conditional(xs, mu, mu0, kappa0, a0, b0)
        tau = np.random.gamma(shape, 1.0 / rate)
        if t >= warmup:
            mus[:, t - warmup], taus[:, t - warmup] = mu, tau
    return mus, taus


def gaussian_mixture_gibbs(
    y: np.ndarray,
    K: int,
    prior: tuple[float, float, float, float],
    num_samples: int,
    warmup: int,
    num_chains: int,
    progress: bool = False,
    spread_step: str = "slice",
) -> dict[str, np.ndarray]:
    """The Gibbs sampler of :func:`gaussian_mixture_gibbs_sweep` (``spread_step``: how the
    spreads are drawn), chains started from random data points (sorted), spreads at the data's
    sd and equal weights. Returns draws of
    ``weights``, ``locs``, ``scales`` (chains, samples, K) and ``z`` (chains, samples, N)."""
    mu = np.sort(np.random.choice(y, size=(num_chains, K)), axis=1)
    mu += 1e-6 * np.arange(K)  # ties between two starting points would break the ordering
    s = np.full((num_chains, K), y.std())
    w = np.full((num_chains, K), 1.0 / K)
    out = {
        "weights": np.empty((num_chains, num_samples, K)),
        "locs": np.empty((num_chains, num_samples, K)),
        "scales": np.empty((num_chains, num_samples, K)),
        "z": np.empty((num_chains, num_samples, y.size), dtype=np.int64),
    }
    for t in tqdm(range(warmup + num_samples), desc="gibbs", disable=not progress, leave=False):
        z, w, mu, s = gaussian_mixture_gibbs_sweep(y, w, mu, s, prior, spread_step)
        if t >= warmup:
            i = t - warmup
            out["weights"][:, i], out["locs"][:, i], out["scales"][:, i] = w, mu, s
            out["z"][:, i] = z
    return out


def crp_gibbs(
    ys: np.ndarray,
    alpha: float,
    T: int,
    sigma: float,
    mu0: float,
    tau0: float,
    num_samples: int,
    warmup: int,
    num_chains: int,
    progress: bool = False,
) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """Chinese-restaurant Gibbs (:func:`crp_gibbs_sweep`) on the untruncated DP mixture, chains
    started with every point at one table, each draw in the truncated model's coordinates
    (:func:`crp_to_sticks`). Returns draws of ``v`` (chains, samples, T - 1), ``locs``
    (chains, samples, T) and ``z`` (chains, samples, N), and the number of clusters of each."""
    n = ys.size
    out: dict[str, np.ndarray] = {
        "v": np.empty((num_chains, num_samples, T - 1)),
        "locs": np.empty((num_chains, num_samples, T)),
        "z": np.empty((num_chains, num_samples, n), dtype=np.int64),
    }
    clusters = np.empty((num_chains, num_samples), dtype=np.int64)
    steps = range(num_chains * (warmup + num_samples))
    bar = tqdm(steps, desc="gibbs", disable=not progress, leave=False)
    for chain in range(num_chains):
        labels, atoms = np.zeros(n, dtype=np.int64), [float(ys.mean())]
        for t in range(warmup + num_samples):
            labels, atoms = crp_gibbs_sweep(ys, labels, atoms, alpha, sigma, mu0, tau0)
            bar.update()
            if t >= warmup:
                i = t - warmup
                v, locs, z = crp_to_sticks(labels, atoms, alpha, T, mu0, tau0)
                out["v"][chain, i], out["locs"][chain, i], out["z"][chain, i] = v, locs, z
                clusters[chain, i] = len(atoms)
    bar.close()
    return out, clusters


def lda_collapsed_gibbs(
    w: np.ndarray,
    K: int,
    V: int,
    alpha: float,
    eta: float,
    num_samples: int,
    warmup: int,
    num_chains: int,
    order_topics: Callable[[np.ndarray], np.ndarray],
    progress: bool = False,
) -> dict[str, np.ndarray]:
    """Collapsed Gibbs for LDA (:func:`collapsed_gibbs_sweep`) on the words ``w`` (D, N), chains
    started from uniform random topics; after warmup, each state's theta and phi drawn from
    their Dirichlet conditionals and its topics permuted by ``order_topics(phi)``. Returns draws
    of ``phi`` (chains, samples, K, V), ``theta`` (chains, samples, D, K) and ``z`` (chains,
    samples, N, D)."""
    D, N = w.shape
    out = {
        "phi": np.empty((num_chains, num_samples, K, V)),
        "theta": np.empty((num_chains, num_samples, D, K)),
        "z": np.empty((num_chains, num_samples, N, D), dtype=np.int64),
    }
    bar = tqdm(total=num_chains * (warmup + num_samples), desc="gibbs", disable=not progress)
    for chain in range(num_chains):
        z = np.random.randint(K, size=(D, N))
        n_dk = np.stack([np.bincount(row, minlength=K) for row in z])
        n_kw = np.zeros((K, V), dtype=np.int64)
        np.add.at(n_kw, (z.ravel(), w.ravel()), 1)
        n_k = n_kw.sum(1)
        for t in range(warmup + num_samples):
            collapsed_gibbs_sweep(w, z, n_dk, n_kw, n_k, alpha, eta)
            bar.update()
            if t < warmup:
                continue
            phi = np.stack([np.random.dirichlet(eta + row) for row in n_kw])
            theta = np.stack([np.random.dirichlet(alpha + row) for row in n_dk])
            order = order_topics(phi)
            rank = np.argsort(order)
            i = t - warmup
            out["phi"][chain, i], out["theta"][chain, i] = phi[order], theta[:, order]
            out["z"][chain, i] = rank[z].T
    bar.close()
    return out
