"""The metric (inverse mass matrix) of the HMC family: Stan's regularised variance and covariance
estimates from warmup draws, each chain's own metric, the first metric, and the map that turns
standard normals into momenta under it. A metric is diagonal, shaped like the state (chains,
D), or dense, one dimension more: (chains, D, D), or (1, D, D) shared by the chains."""

from __future__ import annotations

import math

import torch

# ChEES's metric is dense up to this many dimensions by default (NUTS's with dense_mass=None):
# a D x D product per leapfrog step costs less than the density there, and ChEES's first window
# pools 32 chains x 25 draws (eight per dimension at 100). On logistic regression (31 correlated
# coefficients) ChEES's gradients per effective draw fall from 64 to 8; on eight schools and the
# mixtures they stay within noise.
DENSE_MAX_DIM = 100

# NUTS estimates each chain's dense metric from its own window only where the window
# holds at least this many draws per dimension (else its variances, as a diagonal): a covariance
# from fewer draws than dimensions is singular, and the directions it misses would get almost no
# velocity, so the next window could not see them either.
DENSE_DRAWS_PER_DIM = 2


def regularised_variance(x: torch.Tensor, dim: int | tuple[int, ...]) -> torch.Tensor:
    """Stan's shrunk variance estimate ``n/(n+5) var + 1e-3 * 5/(n+5)`` over ``dim``."""
    n = x.shape[dim] if isinstance(dim, int) else math.prod(x.shape[d] for d in dim)
    var = x.var(dim=dim, unbiased=True) if n > 1 else torch.ones_like(x.select(0, 0))
    return (n / (n + 5.0)) * var + 1e-3 * (5.0 / (n + 5.0))


def regularised_covariance(x: torch.Tensor) -> torch.Tensor:
    """Each chain's covariance of its draws ``x`` (chains, n, D), as (chains, D, D), shrunk
    towards ``1e-3 I`` as Stan shrinks its dense metric: ``n/(n+5) S + 1e-3 * 5/(n+5) I``."""
    B, n, D = x.shape
    xc = x - x.mean(1, keepdim=True)
    cov = torch.einsum("bnd,bne->bde", xc, xc) / max(n - 1, 1)
    eye = torch.eye(D, dtype=x.dtype)
    return (n / (n + 5.0)) * cov + 1e-3 * (5.0 / (n + 5.0)) * eye


def per_chain_metric(window: torch.Tensor, dense: bool) -> torch.Tensor:
    """Each chain's inverse mass matrix from its own warmup window (chains, n, D): Stan's
    regularised variances (chains, D), or with ``dense`` its regularised covariance (chains, D,
    D), diagonal while the window is shorter than ``DENSE_DRAWS_PER_DIM`` draws a dimension."""
    if not dense:
        return regularised_variance(window, 1)
    if window.shape[1] < DENSE_DRAWS_PER_DIM * window.shape[2]:
        return torch.diag_embed(regularised_variance(window, 1))
    return regularised_covariance(window)


def is_dense(D: int, dense_mass: bool | None) -> bool:
    """Whether a sampler's metric is dense: as asked, or (None) up to :data:`DENSE_MAX_DIM`."""
    return D <= DENSE_MAX_DIM if dense_mass is None else bool(dense_mass)


def initial_metric(B: int, D: int, dense_mass: bool | None, dtype: torch.dtype) -> torch.Tensor:
    """Every chain's first inverse mass matrix, the identity: (chains, D) ones, or dense
    (chains, D, D) from the start (a compiled step is traced for one shape of the metric)."""
    if is_dense(D, dense_mass):
        return torch.eye(D, dtype=dtype).expand(B, D, D).clone()
    return torch.ones(B, D, dtype=dtype)


def momentum_map(inv_mass: torch.Tensor) -> torch.Tensor:
    """What turns standard normals ``z`` into momenta ``p ~ N(0, M)``
    (:func:`~inference.samplers.integrator.draw_momenta`): the diagonal's square roots (``p = z
    / s``), or for a dense ``M^-1 = L L^T`` the matrix ``L^-T`` (``p = L^-T z``, whose
    covariance is ``(L L^T)^-1``)."""
    if inv_mass.dim() == 3:
        chol = torch.linalg.cholesky(inv_mass)
        eye = torch.eye(inv_mass.shape[-1], dtype=inv_mass.dtype).expand_as(chol)
        return torch.linalg.solve_triangular(chol.mT, eye, upper=True)
    return inv_mass.sqrt()
