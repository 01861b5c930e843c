"""Continuous latent factors: probabilistic PCA (seed 000 §3.3.1, first half)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pyro
import pyro.distributions as dist
import torch
from pyro.distributions import constraints
from tqdm.auto import tqdm

import zoo
from datasets import load_digits

# ------------------------------------------------------------------------------- shared


def ppca_mean(W: torch.Tensor, z: torch.Tensor, mu: torch.Tensor) -> torch.Tensor:
    """x_i's mean W z_i + mu. ``W`` (..., D, d) and ``z`` (..., N, d): the leading batch dims
    (draws, enumeration) line up with z's plate dim, as Pyro's plates broadcast them."""
    return torch.einsum("...jk,...k->...j", W, z) + mu


def canonical_loadings(W: np.ndarray) -> np.ndarray:
    """W rotated to principal axes: W = U S V^T  ->  U S, columns by decreasing norm, each
    column's largest entry positive (the PPCA likelihood is invariant under W -> W R, R
    orthogonal: this picks one representative so estimates can be compared entry by entry)."""
    u, s, _ = np.linalg.svd(W, full_matrices=False)
    out = u * s
    signs = np.sign(out[np.abs(out).argmax(0), np.arange(out.shape[1])])
    return out * np.where(signs == 0, 1.0, signs)


def ppca_log_likelihood(X: np.ndarray, W: np.ndarray, mu: np.ndarray, sigma2: float) -> float:
    """log p(X | W, mu, sigma^2) = -N/2 [D ln 2 pi + ln|C| + tr(C^-1 S_mu)], C = W W^T + s^2 I,
    S_mu = (1/N) sum_i (x_i - mu)(x_i - mu)^T: x_i ~ N(mu, C) with z_i integrated out."""
    n, D = X.shape
    C = W @ W.T + sigma2 * np.eye(D)
    R = X - mu
    _, logdet = np.linalg.slogdet(C)
    return float(
        -0.5 * (n * D * np.log(2 * np.pi) + n * logdet + np.trace(np.linalg.solve(C, R.T @ R)))
    )


def check_rank(X: torch.Tensor, d: int) -> None:
    if X.ndim != 2:
        raise zoo.ZooError(f"X must be a matrix (N, D), got shape {tuple(X.shape)}")
    if not (isinstance(d, int) and 1 <= d < X.shape[1]):
        raise zoo.ZooError(f"d must be an integer with 1 <= d < D = {X.shape[1]}, got {d!r}")


# ---------------------------------------------------------------------- probabilistic_pca


def _low_rank(seed: int = 0) -> dict[str, Any]:
    """100 points in R^6 near a 2-D subspace: the default data (see the synthetic generator)."""
    return ppca_synthetic(seed)[0]


def ppca_synthetic(seed: int, n: int = 100, D: int = 6, d: int = 2) -> tuple[dict, dict]:
    """x_i = W z_i + mu + sigma eps_i with known W (entries N(0, 1.5^2)), mu ~ N(0, 1), sigma =
    0.5, z_i, eps_i ~ N(0, I); numpy's generator seeded by ``seed`` (same seed, same data)."""
    rng = np.random.default_rng(seed)
    W = 1.5 * rng.standard_normal((D, d))
    mu = rng.standard_normal(D)
    z = rng.standard_normal((n, d))
    X = z @ W.T + mu + 0.5 * rng.standard_normal((n, D))
    f32 = dict(dtype=torch.float32)
    truth = {
        "W": torch.tensor(W, **f32),
        "mu": torch.tensor(mu, **f32),
        "sigma": torch.tensor(0.5),
        "z": torch.tensor(z, **f32),
    }
    return {"X": torch.tensor(X, **f32), "d": d}, truth


def ppca_digits(n: int | None = None) -> dict[str, Any]:
    """scikit-learn's digits (1797 x 64 grey levels 0..16) as data for the model, the first
    ``n`` images (all by default), d = 2."""
    X, _ = load_digits()
    X = X if n is None else X[:n]
    return {"X": torch.tensor(X, dtype=torch.float32), "d": 2}


@zoo.register(
    data=_low_rank,
    engines=("svi", "nuts"),
    params=("mu", "sigma"),
    engine_options={"svi": {"num_steps": 1000, "lr": 0.05}},
    seed_ref="000 §3.3.1 (L766–790)",
)
def probabilistic_pca(X: torch.Tensor, d: int = 2) -> None:
    r"""Probabilistic PCA: each D-dim observation is a linear image of a d-dim Gaussian factor
    plus isotropic noise (Tipping & Bishop 1999).

    Generative story (seed 000 §3.3.1, L780–784)::

        W_jk  ~ N(0, 10^2)          loadings, j = 1..D, k = 1..d
        mu_j  ~ N(0, 10^2)          mean
        sigma ~ LogNormal(0, 2)     noise sd (isotropic: the seed's "sigma in R^D" is a typo)
        z_i   ~ N(0, I_d)                                   i = 1..N
        x_i | z_i ~ N(W z_i + mu, sigma^2 I_D)
        =>  x_i ~ N(mu, C),  C = W W^T + sigma^2 I          (z_i integrated out)

             W, mu, sigma
                  |
           (z_i) ---> [x_i]      i = 1..N

    The seed estimates (W, mu, sigma) by maximum likelihood with EM; the priors are weak enough
    (sd 10 against data of order one; a noise sd anywhere in (0.02, 50)) that the posterior mode
    sits on the ML solution, which has a closed form (engine ``ml``): mu = mean of x, sigma^2 =
    the mean of the D - d smallest eigenvalues of the sample covariance, W = U_d (L_d -
    sigma^2 I)^(1/2) R for any rotation R. W is identified only up to that rotation (and so are
    the z_i): tables compare mu and sigma; the ``em`` and ``ml`` engines report W on its
    principal axes (:func:`canonical_loadings`); compare W W^T or the subspace across engines.
    """
    check_rank(X, d)
    N, D = X.shape
    W = pyro.sample("W", dist.Normal(0.0, 10.0).expand([D, d]).to_event(2))
    mu = pyro.sample("mu", dist.Normal(0.0, 10.0).expand([D]).to_event(1))
    sigma = pyro.sample("sigma", dist.LogNormal(0.0, 2.0))
    with pyro.plate("data", N):
        z = pyro.sample("z", dist.Normal(0.0, 1.0).expand([d]).to_event(1))
        # sigma's batch dims (draws) line up with the plate's, its last dim with x_i's D entries
        pyro.sample("X", dist.Normal(ppca_mean(W, z, mu), sigma.unsqueeze(-1)).to_event(1), obs=X)


@probabilistic_pca.set_guide
def _(X: torch.Tensor, d: int) -> None:
    """Variational EM, the guide of the seed's derivation: point masses on (W, mu, sigma) (the
    M-step's parameters) and each z_i's exact conditional posterior given them (the E-step):

        z_i | x_i ~ N(M^-1 W^T (x_i - mu), sigma^2 M^-1),  M = W^T W + sigma^2 I_d.

    With the E-step exact the ELBO is log p(X | theta) + log p(theta): SVI climbs to the MAP,
    which the weak priors put on the ML solution."""
    N, D = X.shape
    W = pyro.param("q_W", lambda: 0.1 * torch.randn(D, d))
    mu = pyro.param("q_mu", lambda: torch.zeros(D))
    sigma = pyro.param("q_sigma", lambda: X.std(), constraint=constraints.positive)
    pyro.sample("W", dist.Delta(W, event_dim=2))
    pyro.sample("mu", dist.Delta(mu, event_dim=1))
    pyro.sample("sigma", dist.Delta(sigma))
    M = W.T @ W + sigma**2 * torch.eye(d)
    M_inv = torch.linalg.inv(M)
    with pyro.plate("data", N):
        mean = (X - mu) @ W @ M_inv.T
        pyro.sample("z", dist.MultivariateNormal(mean, sigma**2 * M_inv))


def ppca_ml(X: np.ndarray, d: int) -> tuple[np.ndarray, np.ndarray, float]:
    """Tipping & Bishop's closed-form maximum likelihood: (W on principal axes, mu, sigma^2).

    mu = x_bar; S = (1/N) sum (x_i - x_bar)(x_i - x_bar)^T = U L U^T (eigenvalues descending);
    sigma^2 = (1 / (D - d)) sum_{j > d} L_j;  W = U_d (L_d - sigma^2 I)^(1/2).
    """
    mu = X.mean(0)
    R = X - mu
    lam, U = np.linalg.eigh(R.T @ R / X.shape[0])
    lam, U = lam[::-1], U[:, ::-1]
    sigma2 = float(lam[d:].mean())
    W = U[:, :d] * np.sqrt(np.maximum(lam[:d] - sigma2, 0.0))
    return canonical_loadings(W), mu, sigma2


def ppca_em_steps(
    X: np.ndarray,
    W: np.ndarray,
    sigma2: float,
    max_iter: int,
    tol: float,
    progress: bool = False,
) -> tuple[np.ndarray, np.ndarray, float, list[float]]:
    """EM for PPCA (seed 000 §3.3.1 L784, §3.2; Tipping & Bishop 1999, eqs 25-26, 29-30).

    mu = x_bar once (its M-step does not depend on the z_i). Then, with M = W^T W + s^2 I:
    E-step: <z_i> = M^-1 W^T (x_i - mu),  <z_i z_i^T> = s^2 M^-1 + <z_i><z_i>^T.
    M-step: W = [sum (x_i - mu) <z_i>^T] [sum <z_i z_i^T>]^-1,
            s^2 = 1/(N D) sum [ |x_i - mu|^2 - 2 <z_i>^T W^T (x_i - mu) + tr(<z_i z_i^T> W^T W) ]
    (with the new W). Cost O(N D d) per iteration against O(N D^2) for the covariance (L786).
    """
    n, D = X.shape
    d = W.shape[1]
    mu = X.mean(0)
    R = X - mu
    trace = [ppca_log_likelihood(X, W, mu, sigma2)]
    for _ in tqdm(range(max_iter), desc="em", disable=not progress, leave=False):
        M_inv = np.linalg.inv(W.T @ W + sigma2 * np.eye(d))
        Ez = R @ W @ M_inv  # (N, d); M_inv is symmetric
        sum_Ezz = n * sigma2 * M_inv + Ez.T @ Ez
        W = (R.T @ Ez) @ np.linalg.inv(sum_Ezz)
        sigma2 = float(
            ((R**2).sum() - 2 * np.sum(Ez * (R @ W)) + np.trace(sum_Ezz @ W.T @ W)) / (n * D)
        )
        trace.append(ppca_log_likelihood(X, W, mu, sigma2))
        if abs(trace[-1] - trace[-2]) < tol * abs(trace[-1]):
            break
    return W, mu, sigma2, trace


@probabilistic_pca.reference("ml")
def _(X: torch.Tensor, d: int) -> zoo.Estimate:
    """Closed-form maximum likelihood (Tipping & Bishop 1999): eigen-decomposition of S."""
    check_rank(X, d)
    x = X.double().numpy()
    W, mu, sigma2 = ppca_ml(x, d)
    return zoo.Estimate(
        {"W": W, "mu": mu, "sigma": np.sqrt(sigma2)},
        log_evidence=ppca_log_likelihood(x, W, mu, sigma2),
        extras={"sigma2": sigma2},
    )


@probabilistic_pca.reference("em")
def _(
    X: torch.Tensor,
    d: int,
    *,
    max_iter: int = 2000,
    tol: float = 1e-12,
    progress: bool = False,
) -> zoo.Estimate:
    """EM for (W, mu, sigma^2) from random loadings (seed 000 §3.3.1; Tipping & Bishop 1999)."""
    check_rank(X, d)
    x = X.double().numpy()
    W0 = np.random.standard_normal((x.shape[1], d)) * x.std()
    W, mu, sigma2, trace = ppca_em_steps(x, W0, float(x.var()), max_iter, tol, progress)
    W = canonical_loadings(W)
    return zoo.Estimate(
        {"W": W, "mu": mu, "sigma": np.sqrt(sigma2)},
        traces={"log_likelihood": trace},
        log_evidence=trace[-1],
        extras={"sigma2": sigma2},
    )


@probabilistic_pca.synthetic
def _(seed: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """100 points in R^6 from known W (2 factors), mu and sigma = 0.5 (see ppca_synthetic)."""
    return ppca_synthetic(seed)
