"""The metric (inverse mass matrix) of the HMC family: Stan's regularised variance and covariance
estimates from warmup draws, nutpie's low-rank-plus-diagonal estimate from draws and their
gradients, each chain's own metric, the first metric, and the map that turns standard normals
into momenta under it. A metric is diagonal, shaped like the state (chains, D), or dense, one
dimension more: (chains, D, D), or (1, D, D) shared by the chains; a low-rank one is held
dense."""

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

METRICS = ("diag", "dense", "low_rank")  # the kinds of metric NUTS and ChEES adapt
# nuts-rs's LowRankSettings defaults (those nutpie runs): the eigenvalues of the rescaled
# covariance kept (outside [1/cutoff, cutoff]) and the regularisation of the estimate
LOW_RANK_CUTOFF = 2.0
LOW_RANK_GAMMA = 1e-5


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


def _sym_power(a: torch.Tensor, power: float) -> torch.Tensor:
    """``a ** power`` of symmetric positive definite matrices, by their eigendecomposition."""
    vals, vecs = torch.linalg.eigh(a)
    return (vecs * vals.pow(power).unsqueeze(-2)) @ vecs.mT


def spd_mean(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """The geometric mean of ``a`` and ``b^-1`` (symmetric positive definite, batched): the
    ``X`` with ``X b X = a``, ``b^-1/2 (b^1/2 a b^1/2)^1/2 b^-1/2`` (nuts-rs's ``spd_mean``)."""
    b_half, b_inv_half = _sym_power(b, 0.5), _sym_power(b, -0.5)
    return b_inv_half @ _sym_power(b_half @ a @ b_half, 0.5) @ b_inv_half


def low_rank_metric(
    draws: torch.Tensor,
    grads: torch.Tensor,
    cutoff: float = LOW_RANK_CUTOFF,
    gamma: float = LOW_RANK_GAMMA,
) -> torch.Tensor:
    """nutpie's low-rank-plus-diagonal inverse mass matrix from each chain's window of draws
    (chains, n, D) and their log density's gradients, held dense (chains, D, D).

    As nuts-rs 0.18 (the sampler nutpie runs) builds it: github.com/pymc-devs/nuts-rs,
    ``src/transform/adapt/low_rank.rs`` (``rescale_points``, ``estimate_mass_matrix``,
    ``spd_mean``) and ``src/transform/low_rank.rs``, its defaults ``LowRankSettings``'s; the
    method is Seyboldt, Carlson & Carpenter, "Preconditioning Hamiltonian Monte Carlo by
    minimizing Fisher divergence" (arXiv:2603.18845, 2026).

    The diagonal ``sigma^2 = sqrt(var(x) / var(grad))`` (for a Gaussian both ``var(x)`` and
    ``1 / var(grad)`` estimate the variance); in the rescaled space (``x / sigma``, ``grad *
    sigma``) the subspace the draws and the gradients span; there the geometric mean of the
    draws' scatter and the inverse of the gradients' (each ``/ gamma + I``), which for a
    Gaussian is its covariance (exactly, up to ``gamma``, from more draws than dimensions);
    its eigenvalues outside ``[1/cutoff, cutoff]`` kept with their eigenvectors ``U``, the rest
    of the space left at 1: ``M^-1 = sigma (I + U (Lambda - I) U^T) sigma``. A chain whose
    window never moved gets NaN here (:func:`per_chain_metric` falls back to Stan's variances
    there)."""
    xc = draws - draws.mean(1, keepdim=True)
    gc = grads - grads.mean(1, keepdim=True)
    sigma = (xc.square().mean(1) / gc.square().mean(1)).pow(0.25)  # (chains, D)
    bad = ~(torch.isfinite(sigma) & (sigma > 0)).all(-1)  # a dimension that never moved
    sigma = torch.where(bad[:, None], 1.0, sigma)  # NaN would stop the batch's SVD
    xs, gs = (xc / sigma[:, None]).mT, (gc * sigma[:, None]).mT  # (chains, D, n)
    span = torch.cat([torch.linalg.svd(m, full_matrices=False)[0] for m in (xs, gs)], -1)
    basis = torch.linalg.qr(span).Q  # (chains, D, r), r = min(D, 2 min(D, n))
    xp, gp = basis.mT @ xs, basis.mT @ gs
    eye = torch.eye(basis.shape[-1], dtype=draws.dtype)
    mean = spd_mean(xp @ xp.mT / gamma + eye, gp @ gp.mT / gamma + eye)
    vals, vecs = torch.linalg.eigh(mean)
    shift = torch.where((vals > cutoff) | (vals < 1.0 / cutoff), vals - 1.0, 0.0)
    u = basis @ vecs  # (chains, D, r)
    inner = torch.eye(draws.shape[-1], dtype=draws.dtype) + (u * shift.unsqueeze(-2)) @ u.mT
    inv_mass = sigma[:, :, None] * inner * sigma[:, None, :]
    return torch.where(bad[:, None, None], torch.nan, inv_mass)


def per_chain_metric(
    window: torch.Tensor, kind: str, grads: torch.Tensor | None = None
) -> torch.Tensor:
    """Each chain's inverse mass matrix from its own warmup window (chains, n, D): Stan's
    regularised variances (chains, D) for ``"diag"``; for ``"dense"`` its regularised
    covariance (chains, D, D), diagonal while the window is shorter than
    ``DENSE_DRAWS_PER_DIM`` draws a dimension; for ``"low_rank"`` :func:`low_rank_metric` from
    the window and its ``grads``, Stan's variances (held dense) for a chain where that is not
    finite."""
    if kind not in METRICS:
        raise ValueError(f"kind must be one of {list(METRICS)}, got {kind!r}")
    if kind == "diag":
        return regularised_variance(window, 1)
    if kind == "low_rank":
        if grads is None:
            raise ValueError("a low-rank metric needs the gradients of the window's draws")
        fallback = torch.diag_embed(regularised_variance(window, 1))
        if window.shape[1] < 3:  # nuts-rs adapts from three draws on
            return fallback
        est = low_rank_metric(window, grads)
        ok = torch.isfinite(est).all(-1).all(-1)
        return torch.where(ok[:, None, None], est, fallback)
    if window.shape[1] < DENSE_DRAWS_PER_DIM * window.shape[2]:
        return torch.diag_embed(regularised_variance(window, 1))
    return regularised_covariance(window)


def check_metric(metric: str | None, dense_mass: bool | None, dense_default: bool | None) -> None:
    """Refuses a ``metric`` not in :data:`METRICS`, and one that ``dense_mass``, given True or
    False other than its default ``dense_default``, contradicts: True asks for a full matrix
    (``"dense"``, or ``"low_rank"``, which is held as one), False for ``"diag"``."""
    if metric is None:
        return
    if metric not in METRICS:
        raise ValueError(f"metric must be one of {list(METRICS)} or None, got {metric!r}")
    if dense_mass is None or dense_mass == dense_default:
        return
    if bool(dense_mass) != (metric != "diag"):
        raise ValueError(
            f"dense_mass={dense_mass!r} contradicts metric={metric!r} (a model may register "
            "dense_mass for its engine): give metric alone, or dense_mass="
            f"{metric != 'diag'} with it"
        )


def metric_kind(
    D: int, metric: str | None, dense_mass: bool | None, dense_default: bool | None
) -> str:
    """The metric a sampler adapts: ``metric`` (checked by :func:`check_metric`), or where it
    is None, ``"dense"`` or ``"diag"`` as ``dense_mass`` says (:func:`is_dense`): so by default
    the metric, and the draws, are those of ``dense_mass`` alone."""
    check_metric(metric, dense_mass, dense_default)
    if metric is not None:
        return metric
    return "dense" if is_dense(D, dense_mass) else "diag"


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
    (:func:`~zoo_inference.samplers.integrator.draw_momenta`): the diagonal's square roots (``p = z
    / s``), or for a dense ``M^-1 = L L^T`` the matrix ``L^-T`` (``p = L^-T z``, whose
    covariance is ``(L L^T)^-1``)."""
    if inv_mass.dim() == 3:
        chol = torch.linalg.cholesky(inv_mass)
        eye = torch.eye(inv_mass.shape[-1], dtype=inv_mass.dtype).expand_as(chol)
        return torch.linalg.solve_triangular(chol.mT, eye, upper=True)
    return inv_mass.sqrt()
