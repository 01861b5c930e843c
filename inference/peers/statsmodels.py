"""statsmodels, the peer of the Kalman engine: UnobservedComponents' local level on plain arrays."""

from __future__ import annotations

import importlib
from typing import Any

import numpy as np


def statsmodels_local_level(
    ys: np.ndarray, m0: float, P0: float, q: float | None, r: float | None, max_iter: int
) -> tuple[float, float, float, dict[str, Any]]:
    """statsmodels' UnobservedComponents local level on ``ys`` with x_0 ~ N(m0, P0): (q, r) by
    its own maximum likelihood (L-BFGS, tight tolerances; ``max_iter`` iterations at most) when
    ``q`` is None, else its filter and smoother at the given variances.

    statsmodels' first state is the level at its first observation, while the prior N(m0, P0)
    is on x_0, one step earlier (the first state's variance would be P0 + q, which moves with q
    during the fit). So the series is given behind one missing observation, its first state is
    x_0 with the known initialisation N(m0, P0), and no term is burnt: its ``llf`` is then
    log p(y_1..y_T | q, r). Returns (q, r, llf, extras): its filtered, predicted and smoothed
    level (t = 1..T) and whether its optimiser converged."""
    structural = importlib.import_module("statsmodels.tsa.statespace.structural")
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
        if r is None:
            raise ValueError("statsmodels_local_level: q is given, so r must be too")
        q_hat, r_hat = q, r
        res = mod.smooth([r_hat, q_hat])
    extras = {
        "filtered_mean": res.filtered_state[0, 1:],
        "filtered_var": res.filtered_state_cov[0, 0, 1:],
        "predicted_mean": res.predicted_state[0, 1:-1],
        "predicted_var": res.predicted_state_cov[0, 0, 1:-1],
        "smoothed_mean": res.smoothed_state[0, 1:],
        "smoothed_var": res.smoothed_state_cov[0, 0, 1:],
        "converged": converged,
    }
    return q_hat, r_hat, float(res.llf), extras
