"""Noise-contrastive estimation (Gutmann & Hyvärinen 2010; seed 000 Ch. 7, L1291–1367) of an
unnormalised exponential family, log p_m(u) = eta . T(u) + c, with the log-normaliser c a free
parameter.

Data x_1..x_T are classified against nu T noise draws y_j ~ p_n (a known density) by logistic
regression on G(u) = log p_m(u) - log(nu p_n(u)) (the seed's h(u) = p_m / (p_m + p_n), L1347,
for nu = 1; nu noise points a data point in general). The objective

    J(beta) = 1/((1 + nu) T) [sum_t log sigma(G(x_t)) + sum_j log(1 - sigma(G(y_j)))]

(the seed's averaged form, L1361) is concave in beta = (eta, c), because G is linear in beta:
Newton's method finds its maximum. Its maximiser is consistent for the data's eta and for c =
-log Z(eta), the log-normaliser that nothing in the fit imposes. Its covariance is estimated by
the sandwich H^-1 V H^-1 (H the Hessian of the summed objective, V the covariance of its
gradient's summands, data and noise terms apart), which agrees with the paper's asymptotic
covariance when the family holds the data."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from ..results import ZooError


@dataclass
class NCEFit:
    """``beta``: the natural parameters then c; ``cov``: their sandwich covariance;
    ``objective``: J after each Newton step (from the start); ``accuracy``: the fraction of
    the data and noise points the fitted classifier labels right."""

    beta: torch.Tensor
    cov: torch.Tensor
    objective: list[float] = field(default_factory=list)
    converged: bool = False
    accuracy: float = float("nan")


def log_sigmoid_pair(g: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(log sigma(g), log(1 - sigma(g))), stable for any g."""
    return torch.nn.functional.logsigmoid(g), torch.nn.functional.logsigmoid(-g)


def nce_exponential_family(
    stats: Callable[[torch.Tensor], torch.Tensor],
    data: torch.Tensor,
    noise: torch.Tensor,
    log_noise: Callable[[torch.Tensor], torch.Tensor],
    *,
    max_iter: int = 100,
    tol: float = 1e-10,
) -> NCEFit:
    """NCE of log p_m(u) = eta . stats(u) + c from ``data`` (T points) against ``noise`` (nu T
    draws of the density whose log is ``log_noise``); ``stats`` maps points to their sufficient
    statistics (n, p). Damped Newton from beta = 0 (step halved until J rises), stopped when
    the step's largest coordinate is under ``tol``. Everything in float64."""
    data, noise = data.double(), noise.double()
    T, M = len(data), len(noise)
    if T < 2 or M < 1:
        raise ZooError(f"NCE needs at least 2 data points and 1 noise point, got {T} and {M}")
    nu = M / T
    one = torch.ones
    psi_x = torch.cat([stats(data).double(), one(T, 1, dtype=torch.float64)], 1)
    psi_y = torch.cat([stats(noise).double(), one(M, 1, dtype=torch.float64)], 1)
    off_x = -(log_noise(data).double() + torch.log(torch.tensor(nu)))
    off_y = -(log_noise(noise).double() + torch.log(torch.tensor(nu)))
    if not (torch.isfinite(psi_x).all() and torch.isfinite(off_x).all()):
        raise ZooError("NCE: the data's statistics or noise densities are not finite")

    def objective(beta: torch.Tensor) -> float:
        lx, _ = log_sigmoid_pair(psi_x @ beta + off_x)
        _, ly = log_sigmoid_pair(psi_y @ beta + off_y)
        return float((lx.sum() + ly.sum()) / (T + M))

    beta = torch.zeros(psi_x.shape[1], dtype=torch.float64)
    trace, converged = [objective(beta)], False
    for _ in range(max_iter):
        sx, sy = torch.sigmoid(psi_x @ beta + off_x), torch.sigmoid(psi_y @ beta + off_y)
        grad = psi_x.T @ (1 - sx) - psi_y.T @ sy
        hess = -(psi_x.T * (sx * (1 - sx))) @ psi_x - (psi_y.T * (sy * (1 - sy))) @ psi_y
        step = torch.linalg.solve(hess, -grad)
        t = 1.0
        while objective(beta + t * step) < trace[-1] - 1e-15 and t > 1e-10:
            t /= 2
        beta = beta + t * step
        trace.append(objective(beta))
        if float((t * step).abs().max()) < tol:
            converged = True
            break
    sx, sy = torch.sigmoid(psi_x @ beta + off_x), torch.sigmoid(psi_y @ beta + off_y)
    hess = -(psi_x.T * (sx * (1 - sx))) @ psi_x - (psi_y.T * (sy * (1 - sy))) @ psi_y
    a, b = psi_x * (1 - sx)[:, None], -psi_y * sy[:, None]
    V = T * torch.cov(a.T).reshape(len(beta), -1) + M * torch.cov(b.T).reshape(len(beta), -1)
    H_inv = torch.linalg.inv(hess)
    accuracy = float(((sx > 0.5).sum() + (sy <= 0.5).sum()) / (T + M))
    return NCEFit(beta, H_inv @ V @ H_inv, trace, converged, accuracy)


def delta_method(
    beta: torch.Tensor, cov: torch.Tensor, fn: Callable[[torch.Tensor], torch.Tensor]
) -> tuple[torch.Tensor, torch.Tensor]:
    """fn(beta) and its covariance J cov J^T (J the Jacobian of ``fn`` at ``beta``; a scalar
    ``fn`` gets a 1x1 covariance)."""
    jac = torch.autograd.functional.jacobian(fn, beta).reshape(-1, len(beta))
    return fn(beta).detach(), jac @ cov @ jac.T
