"""The Kalman filter and Rauch–Tung–Striebel smoother of the local-level model (seed 002 ch.
31–32), its maximum-likelihood variances, and its marginal with the states integrated out (a
torch distribution, diagonal plus rank one in the random walk's sine basis)."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyro.distributions as dist
import torch
from pyro.distributions import constraints
from scipy import optimize


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
    arrays (a grid of parameter values): every step is elementwise over them. A NaN in ``y`` is
    a missing observation: its update is skipped (filtered = predicted, no likelihood term).
    """
    y = np.asarray(y, dtype=float)
    q, r = np.asarray(q, dtype=float), np.asarray(r, dtype=float)
    shape = (len(y),) + np.broadcast(q, r).shape
    mp, Pp, mf, Pf = (np.empty(shape) for _ in range(4))
    m, P = np.full(shape[1:], float(m0)), np.full(shape[1:], float(P0))
    ll = np.zeros(shape[1:])
    for t in range(len(y)):
        mp[t], Pp[t] = m, P + q
        m, P = mp[t], Pp[t]
        if not np.isnan(y[t]):
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

    def rsample(self, sample_shape: torch.Size | list[int] | tuple[int, ...] = ()) -> torch.Tensor:
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
