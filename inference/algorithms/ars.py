"""Adaptive rejection sampling (Gilks & Wild 1992, tangent form; seed 003 L62–66).

For a log-concave density p on an interval, h = log p lies below each of its tangents, so the
minimum of the tangents at abscissae x_1 < ... < x_k is an upper hull u(x) >= h(x) and exp(u)
is a piecewise-exponential envelope (the pieces meet where neighbouring tangents cross); the
chords between the abscissae are a lower hull (squeeze) l(x) <= h(x). A candidate x* drawn from
the envelope (a piece by its mass, then a point by inverting that piece's CDF) is accepted when
a uniform w has log w <= l(x*) - u(x*) (no evaluation of h), else when log w <= h(x*) - u(x*);
every evaluated x* joins the abscissae, so the envelope tightens as it is used. Accepted draws
are exact draws from p.

A log density that is not concave shows itself: a tangent lying below the function (h(x*) >
u(x*)), a chord above it, or derivatives that do not decrease; each raises
:class:`NotLogConcave` rather than return wrong draws.

Everything works on a batch of independent one-dimensional densities at once (one row each):
``logpdf(x) -> (h, dh)`` elementwise on an array shaped like the batch. :func:`ars_step` draws
one value for each element (a Gibbs step), :func:`ars_sample` ``n`` values of one density.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from zoo_inference.algorithms.univariate import exp_segment_draw, exp_segment_log_mass

LogDensity = Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]]
"""``x -> (log p(x), d log p / dx)``, elementwise, up to an additive constant per element."""
CAPACITY = 40  # abscissae kept per density: the envelope stops adapting when full (still exact)
CANDIDATES = 4  # proposals per density and round in ars_step
MAX_ROUNDS = 10_000  # proposal rounds before giving up (a density the hull cannot bound)
RTOL = 1e-7  # rounding allowed when comparing h with its tangents and chords


class NotLogConcave(ValueError):
    """The density handed to ARS is not log-concave (seen at the points it evaluated)."""


def autograd_log_density(fn: Callable[[torch.Tensor], torch.Tensor]) -> LogDensity:
    """An elementwise torch log density as a :data:`LogDensity`, its derivative by autograd."""

    def value_and_derivative(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        t = torch.as_tensor(np.asarray(x, dtype=float), dtype=torch.float64).requires_grad_(True)
        with torch.enable_grad():
            h = fn(t)
            (dh,) = torch.autograd.grad(h.sum(), t)
        return h.detach().numpy(), dh.numpy()

    return value_and_derivative


class Hull:
    """Tangents of ``rows`` log densities at up to :data:`CAPACITY` abscissae each (sorted; the
    unused slots at +inf), on the support (low, high); ``logpdf`` takes (rows, m) arrays."""

    def __init__(
        self, logpdf: LogDensity, x: np.ndarray, low: np.ndarray, high: np.ndarray
    ) -> None:
        self.logpdf, self.low, self.high = logpdf, low, high
        rows, m = x.shape
        self.x = np.full((rows, CAPACITY), np.inf)
        self.h = np.full((rows, CAPACITY), -np.inf)
        self.dh = np.zeros((rows, CAPACITY))
        self.n = np.zeros(rows, dtype=int)
        self.evaluations = 0
        self.add(x, *self._eval(x, x.size), np.ones(x.shape, dtype=bool))

    def _eval(self, x: np.ndarray, count: int) -> tuple[np.ndarray, np.ndarray]:
        """h and dh at ``x`` (rows, m); ``count`` of them are evaluations the caller needs."""
        self.evaluations += count
        h, dh = (np.asarray(a, dtype=float) for a in self.logpdf(x))
        bad = ~(np.isfinite(h) & np.isfinite(dh))
        if bad.any():
            i = np.argwhere(bad)[0]
            raise ValueError(
                f"ARS: log density or derivative not finite at x = {x[tuple(i)]:.6g} (inside "
                "the support given); pass the density's support as bounds"
            )
        return h, dh

    def add(self, x: np.ndarray, h: np.ndarray, dh: np.ndarray, keep: np.ndarray) -> None:
        """Add the points ``keep`` marks (rows, m), as many as each row has room for."""
        keep = keep & (np.cumsum(keep, 1) <= (CAPACITY - self.n)[:, None])
        keep &= ~(x[..., None] == self.x[:, None, :]).any(-1)  # a point already there
        xs = np.concatenate([self.x, np.where(keep, x, np.inf)], 1)
        hs = np.concatenate([self.h, np.where(keep, h, -np.inf)], 1)
        ds = np.concatenate([self.dh, np.where(keep, dh, 0.0)], 1)
        order = np.argsort(xs, 1, kind="stable")[:, :CAPACITY]
        self.x, self.h, self.dh = (np.take_along_axis(a, order, 1) for a in (xs, hs, ds))
        self.n = self.n + keep.sum(1)
        self._check_concave()
        self._pieces()

    def _check_concave(self) -> None:
        """Derivatives must not increase from one abscissa to the next, and each h must lie
        under its neighbours' tangents."""
        valid = np.arange(CAPACITY - 1)[None] < (self.n - 1)[:, None]
        d0, d1 = self.dh[:, :-1], self.dh[:, 1:]
        tol = RTOL * (1 + np.abs(d0) + np.abs(d1))
        with np.errstate(invalid="ignore"):
            rising = valid & (d1 > d0 + tol)
            gap = self.x[:, 1:] - self.x[:, :-1]
            # h(x_{j+1}) <= h(x_j) + dh_j gap and h(x_j) <= h(x_{j+1}) - dh_{j+1} gap
            above = valid & (
                (self.h[:, 1:] > self.h[:, :-1] + d0 * gap + RTOL * (1 + np.abs(self.h[:, 1:])))
                | (self.h[:, :-1] > self.h[:, 1:] - d1 * gap + RTOL * (1 + np.abs(self.h[:, :-1])))
            )
        if (rising | above).any():
            r, j = np.argwhere(rising | above)[0]
            raise NotLogConcave(
                f"ARS needs a log-concave density: between x = {self.x[r, j]:.6g} and "
                f"{self.x[r, j + 1]:.6g} a tangent of log p lies below log p (derivatives "
                f"{self.dh[r, j]:.6g}, {self.dh[r, j + 1]:.6g})"
            )

    def _pieces(self) -> None:
        """The envelope's pieces: piece j follows the tangent at x_j on (z_{j-1}, z_j); its log
        mass, and a check that the outer pieces fall away where the support is unbounded."""
        x, h, dh, n = self.x, self.h, self.dh, self.n
        rows = np.arange(len(n))
        with np.errstate(invalid="ignore", divide="ignore"):
            denom = dh[:, :-1] - dh[:, 1:]
            cross = (h[:, 1:] - h[:, :-1] - x[:, 1:] * dh[:, 1:] + x[:, :-1] * dh[:, :-1]) / denom
            mid = (x[:, :-1] + x[:, 1:]) / 2
            flat = ~(denom > 1e-12 * (1 + np.abs(dh[:, :-1]) + np.abs(dh[:, 1:])))
            z = np.clip(np.where(flat, mid, cross), x[:, :-1], x[:, 1:])
        z = np.concatenate([self.low[:, None], z, np.full((len(n), 1), np.inf)], 1)
        z[rows, n] = self.high
        left, right = z[:, :-1], z[:, 1:]
        valid = np.arange(CAPACITY)[None] < n[:, None]
        right = np.where(valid, right, left)
        with np.errstate(invalid="ignore"):
            high_end = np.where(dh > 0, right, left)  # where the tangent is highest on the piece
            log_high = np.where(valid, h + dh * (high_end - x), -np.inf)
        with np.errstate(invalid="ignore"):
            width = np.where(valid, right - left, 0.0)
        log_mass = np.where(valid, exp_segment_log_mass(log_high, np.abs(dh), width), -np.inf)
        if not np.isfinite(log_mass.max(1)).all() or (log_mass == np.inf).any():
            r = int(np.argwhere(~np.isfinite(log_mass).all(1) | (log_mass == np.inf).any(1))[0])
            raise ValueError(
                f"ARS: the envelope of row {r} is not integrable (support "
                f"({self.low[r]:.6g}, {self.high[r]:.6g})); give starting points on both sides "
                "of the mode where the support is unbounded"
            )
        self.left, self.right, self.log_high, self.log_mass = left, right, log_high, log_mass

    def propose(self, m: int, rng: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``m`` candidates per row from the envelope, with the upper and lower hulls there."""
        rows = np.arange(len(self.n))[:, None]
        w = np.exp(self.log_mass - self.log_mass.max(1, keepdims=True))
        cum = np.cumsum(w, 1)
        pick = rng.uniform(size=(len(self.n), m)) * cum[:, -1:]
        j = np.minimum((cum[:, None, :] <= pick[..., None]).sum(-1), self.n[:, None] - 1)
        dh = self.dh[rows, j]
        s = exp_segment_draw(
            np.abs(dh), self.right[rows, j] - self.left[rows, j], rng.uniform(size=j.shape)
        )
        x = np.where(dh > 0, self.right[rows, j] - s, self.left[rows, j] + s)
        upper = self.h[rows, j] + dh * (x - self.x[rows, j])
        # the squeeze: the chord between the abscissae around x, -inf outside them
        k = (self.x[:, None, :] <= x[..., None]).sum(-1) - 1
        inside = (k >= 0) & (k < self.n[:, None] - 1)
        k0, k1 = np.clip(k, 0, CAPACITY - 1), np.clip(k + 1, 0, CAPACITY - 1)
        x0, x1 = self.x[rows, k0], self.x[rows, k1]
        with np.errstate(invalid="ignore"):
            chord = ((x1 - x) * self.h[rows, k0] + (x - x0) * self.h[rows, k1]) / (x1 - x0)
        lower = np.where(inside, chord, -np.inf)
        return x, upper, lower

    def step(self, m: int, rng: Any) -> tuple[np.ndarray, np.ndarray]:
        """One round: ``m`` candidates per row; returns them and which were accepted."""
        x, upper, lower = self.propose(m, rng)
        log_w = np.log(rng.uniform(size=x.shape))
        accept = log_w <= lower - upper
        todo = ~accept
        if todo.any():
            h, dh = self._eval(np.where(todo, x, self.x[:, :1]), int(todo.sum()))
            tol = RTOL * (1 + np.abs(h) + np.abs(upper))
            if (todo & ((h > upper + tol) | (h < lower - tol))).any():
                r, j = np.argwhere(todo & ((h > upper + tol) | (h < lower - tol)))[0]
                above = h[r, j] > upper[r, j]
                side, bound = ("above a tangent", upper) if above else ("below a chord", lower)
                raise NotLogConcave(
                    f"ARS needs a log-concave density: log p at x = {x[r, j]:.6g} is {side} "
                    f"({h[r, j]:.6g} against {bound[r, j]:.6g})"
                )
            accept |= todo & (log_w <= h - upper)
            self.add(x, h, dh, todo)
        return x, accept


def _bounds(shape: tuple[int, ...], bounds: tuple[float, float]) -> tuple[np.ndarray, np.ndarray]:
    low, high = (float(b) for b in bounds)
    if not low < high:
        raise ValueError(f"ARS: bounds must be (low, high) with low < high, got {bounds}")
    return np.full(shape, low), np.full(shape, high)


def _start(
    logpdf: LogDensity, x0: np.ndarray, low: np.ndarray, high: np.ndarray, scale: float
) -> np.ndarray:
    """Abscissae around ``x0`` (rows,): x0 and x0 -/+ scale (kept inside the support), moved
    outwards where the support is unbounded until the derivative there points back in."""
    span = np.minimum(scale, np.minimum(x0 - low, high - x0) / 2)
    left, right = x0 - span, x0 + span
    step = np.full(x0.shape, scale)
    for _ in range(60):
        _, d_left = logpdf(left)
        _, d_right = logpdf(right)
        go_left = np.isinf(low) & ~(d_left > 0)
        go_right = np.isinf(high) & ~(d_right < 0)
        if not (go_left.any() or go_right.any()):
            return np.stack([left, x0, right], 1)
        left = np.where(go_left, left - step, left)
        right = np.where(go_right, right + step, right)
        step = step * 2
    raise ValueError(
        "ARS: the log density does not turn down within 2^60 of the start on an unbounded "
        "side (not a proper log-concave density)"
    )


def ars_step(
    logpdf: LogDensity,
    x0: np.ndarray,
    *,
    bounds: tuple[float, float] = (-np.inf, np.inf),
    scale: float = 1.0,
    rng: Any = np.random,
) -> tuple[np.ndarray, int]:
    """One exact draw from each of a batch of log-concave densities (every element of ``x0``
    has its own, ``logpdf`` elementwise on arrays shaped like ``x0``), the envelope started
    at x0 and x0 -/+ ``scale``. ``rng``: a ``numpy.random.Generator`` or numpy's global
    stream. Returns the draws and the number of log-density evaluations."""
    x0 = np.asarray(x0, dtype=float)
    shape = x0.shape
    flat = x0.reshape(-1)

    def rows_logpdf(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(rows,) or (rows, m): the elementwise density called on one x0-shaped slice at a time."""
        if x.ndim == 1:
            h, dh = logpdf(x.reshape(shape))
            return np.reshape(h, -1), np.reshape(dh, -1)
        hs, ds = zip(*(rows_logpdf(x[:, j]) for j in range(x.shape[1])), strict=True)
        return np.stack(hs, 1), np.stack(ds, 1)

    low, high = _bounds(flat.shape, bounds)
    hull = Hull(rows_logpdf, _start(rows_logpdf, flat, low, high, scale), low, high)
    out, done = np.empty(flat.shape), np.zeros(flat.shape, dtype=bool)
    rows = np.arange(flat.size)
    for _ in range(MAX_ROUNDS):
        # a few candidates a row each round, the first accepted kept: fewer rounds, each one a
        # handful of array operations whatever the number of candidates
        x, accept = hull.step(CANDIDATES, rng)
        new = accept.any(1) & ~done
        out[new], done = x[rows, accept.argmax(1)][new], done | new
        if done.all():
            return out.reshape(shape), hull.evaluations
    raise RuntimeError(f"ARS: no acceptance after {MAX_ROUNDS} rounds")


def ars_sample(
    logpdf: LogDensity,
    n: int,
    *,
    start: float = 0.0,
    bounds: tuple[float, float] = (-np.inf, np.inf),
    scale: float = 1.0,
    rng: Any = np.random,
) -> tuple[np.ndarray, dict[str, float]]:
    """``n`` exact draws of one log-concave density (``logpdf`` elementwise), its envelope
    adapting as the draws are made (started at ``start`` and ``start`` -/+ ``scale``). Returns
    the draws and ``{"evaluations", "proposals", "acceptance"}``."""
    if n < 1:
        raise ValueError(f"ARS: n must be a positive number of draws, got {n}")
    low, high = _bounds((1,), bounds)
    if not low[0] < start < high[0]:
        raise ValueError(f"ARS: start {start} must lie inside the support {bounds}")

    def row_logpdf(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        h, dh = logpdf(np.asarray(x, dtype=float))
        return np.asarray(h, dtype=float), np.asarray(dh, dtype=float)

    hull = Hull(row_logpdf, _start(row_logpdf, np.array([start]), low, high, scale), low, high)
    draws: list[np.ndarray] = []
    got = proposals = 0
    block = 8  # small while the envelope is loose, doubling while it accepts
    for _ in range(MAX_ROUNDS):
        x, accept = hull.step(block, rng)
        draws.append(x[0][accept[0]])
        got += int(accept.sum())
        proposals += block
        if got >= n:
            out = np.concatenate(draws)[:n]
            info = {"evaluations": hull.evaluations, "proposals": proposals}
            return out, {**info, "acceptance": got / proposals}
        block = min(2 * block, max(n - got, 8), 4096)
    raise RuntimeError(f"ARS: fewer than {n} draws after {MAX_ROUNDS} rounds")
