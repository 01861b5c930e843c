"""Ordinary differential equations in posteriordb: the Lotka-Volterra predator-prey model on the
Hudson's Bay lynx and hare pelts, and a one-compartment pharmacokinetic model with first-order
absorption and Michaelis-Menten elimination.

Stan's ``integrate_ode_rk45`` (Dormand-Prince 5(4)) and ``integrate_ode_bdf`` (CVODES' BDF)
become torchdiffeq's Dormand-Prince 5(4) (neither torch ODE library has a BDF), gradients by
backprop through the solver's steps (benchmarks/ode_solvers.py measured it against torchode:
accuracy against Stan and time per log density and gradient). The log density then agrees
with Stan's to the two solvers' error, not to round-off: each registration declares its
measured tolerance.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pyro
import pyro.distributions as dist
import torch
from pyro.distributions import constraints
from torchdiffeq import odeint

from zoo.models.posteriordb.base import Tolerance, posterior
from zoo_datasets.posteriordb import posteriordb_data

Rhs = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, Any], torch.Tensor]

# torchdiffeq's error control (an RMS norm over the states) is looser than Stan's (a max norm
# over the states and their sensitivities): at a program's tolerances its log density is 100
# times further from the exact one than Stan's; at a hundredth of them, no further
# (benchmarks/results/ode_solvers.md)
TOLERANCE_FACTOR = 1e-2


def integrate_ode(
    rhs: Rhs,
    y0: torch.Tensor,
    t0: float,
    ts: torch.Tensor,
    theta: torch.Tensor,
    x_r: Any = None,
    *,
    rel_tol: float,
    abs_tol: float,
    max_num_steps: int,
) -> torch.Tensor:
    """Stan's ``integrate_ode_*(rhs, y0, t0, ts, theta, x_r, x_i, rel_tol, abs_tol,
    max_num_steps)``: the solution at ``ts`` (not at ``t0``), shaped ``(len(ts), *y0.shape)``,
    by Dormand-Prince 5(4) at the program's tolerances times :data:`TOLERANCE_FACTOR`, and at
    most ``max_num_steps`` steps between output times, as Stan counts them. In float64 in a
    float32 run too: the tolerances are below float32's resolution."""
    t = torch.cat([torch.tensor([t0], dtype=torch.float64), ts.double()])
    theta64 = theta.double()
    z = odeint(
        lambda s, y: rhs(s, y, theta64, x_r),
        y0.double(),
        t,
        rtol=rel_tol * TOLERANCE_FACTOR,
        atol=abs_tol * TOLERANCE_FACTOR,
        method="dopri5",
        options={"max_num_steps": max_num_steps * len(ts)},
    )
    return z[1:].to(y0.dtype)


# the solver's steps follow the error it measures, a branch on values that no trace can hold
ADAPTIVE_STEPS = "the adaptive Dormand-Prince solver picks its steps by the error it measures"


class PositiveNormal(dist.Normal):
    """Stan's ``x ~ normal(mu, sigma)`` on a ``real<lower=0> x``: the normal density on x > 0,
    not renormalised (Stan drops the truncation's constant, which depends on no parameter)."""

    support = constraints.positive  # type: ignore[assignment]  # torch annotates it Normal's real

    def sample(self, sample_shape: torch.Size | list[int] | tuple[int, ...] = ()) -> torch.Tensor:
        """By inverse CDF above the bound: a prior draw inside the support."""
        with torch.no_grad():
            shape = self._extended_shape(sample_shape)
            low = self.cdf(torch.zeros_like(self.loc)).expand(shape)
            u = low + (1 - low) * torch.rand(shape, dtype=self.loc.dtype)
            return self.icdf(u).clamp(min=torch.finfo(self.loc.dtype).tiny)


# ------------------------------------------------------------------------------ Lotka-Volterra


def dz_dt(t: torch.Tensor, z: torch.Tensor, theta: torch.Tensor, x_r: Any) -> torch.Tensor:
    """Lotka-Volterra: prey u grows at alpha and is eaten at beta v; predators v die at gamma and
    grow at delta u."""
    u, v = z[..., 0], z[..., 1]
    alpha, beta, gamma, delta = theta.unbind(-1)
    du_dt = (alpha - beta * v) * u
    dv_dt = (-gamma + delta * u) * v
    return torch.stack([du_dt, dv_dt], dim=-1)


def lotka_volterra(ts: torch.Tensor, y_init: torch.Tensor, y: torch.Tensor) -> None:
    """Stan's lotka_volterra (Carpenter's case study): predator-prey dynamics with
    multiplicative measurement error::

        theta = (alpha, beta, gamma, delta) > 0
        alpha, gamma ~ Normal(1, 0.5);  beta, delta ~ Normal(0.05, 0.05)
        z_init_k ~ LogNormal(log 10, 1),  sigma_k ~ LogNormal(-1, 1)     k = prey, predator
        z(t)   = the ODE's solution from z(0) = z_init at t = ts (rk45, rtol 1e-5, atol 1e-3)
        y_init_k ~ LogNormal(log z_init_k, sigma_k)
        y_nk     ~ LogNormal(log z_nk(ts_n), sigma_k)

            theta, z_init --ODE--> z --> [y_n]   n = 1..N
                  z_init ----------------> [y_init]     (sigma in both)
    """
    theta = pyro.sample(
        "theta",
        PositiveNormal(
            torch.tensor([1.0, 0.05, 1.0, 0.05]), torch.tensor([0.5, 0.05, 0.5, 0.05])
        ).to_event(1),
    )
    z_init = pyro.sample(
        "z_init", dist.LogNormal(torch.tensor(10.0).log(), 1.0).expand([2]).to_event(1)
    )
    sigma = pyro.sample("sigma", dist.LogNormal(torch.tensor(-1.0), 1.0).expand([2]).to_event(1))
    z = integrate_ode(dz_dt, z_init, 0.0, ts, theta, rel_tol=1e-5, abs_tol=1e-3, max_num_steps=500)
    pyro.sample("y_init", dist.LogNormal(z_init.log(), sigma).to_event(1), obs=y_init)
    pyro.sample("y", dist.LogNormal(z.log(), sigma).to_event(2), obs=y)


def _lynx_hare() -> dict[str, Any]:
    raw = posteriordb_data("hudson_lynx_hare")
    dtype = torch.get_default_dtype()
    return {k: torch.tensor(raw[k], dtype=torch.float64).to(dtype) for k in ("ts", "y_init", "y")}


posterior(
    "hudson_lynx_hare-lotka_volterra",
    lotka_volterra,
    _lynx_hare,
    params=("theta", "z_init", "sigma"),
    math=[
        r"\frac{du}{dt} = (\alpha - \beta v)\, u, \quad \frac{dv}{dt} = (-\gamma + \delta u)\, v",
        r"\alpha, \gamma \sim \mathcal{N}^+(1, 0.5^2), \quad"
        r" \beta, \delta \sim \mathcal{N}^+(0.05, 0.05^2)",
        r"z^{\mathrm{init}}_k \sim \mathrm{LogNormal}(\log 10, 1), \quad"
        r" \sigma_k \sim \mathrm{LogNormal}(-1, 1)",
        r"y^{\mathrm{init}}_k \sim \mathrm{LogNormal}(\log z^{\mathrm{init}}_k, \sigma_k), \quad"
        r" y_{nk} \sim \mathrm{LogNormal}(\log z_k(t_n), \sigma_k)",
    ],
    story=(
        "Hare and lynx pelts traded to the Hudson's Bay Company, 1900-1920 (thousands a year, "
        "Hewitt 1921), as Lotka-Volterra predator-prey dynamics with lognormal measurement "
        "error: Carpenter's Stan case study."
    ),
    tolerance=Tolerance(
        log_density_sd=2e-4,
        gradient=5e-3,
        reason=(
            "Stan's rk45 at the program's tolerances is off the exact solution: its log density "
            "by 4.8e-5 (sd over the draws, against a solve at a ten-thousandth of them), its "
            "gradient by 8.3e-4 relative to 1 + |grad|; this model's solve differs from Stan's "
            "by 5.2e-5 and 1.5e-3"
        ),
    ),
    per_chain=ADAPTIVE_STEPS,
    nuts_fails=(
        "too slow for a CPU run at the defaults: every log density and gradient solves the "
        "ODE, one chain at a time (the adaptive solver branches on values)"
    ),
)


# ------------------------------------------------------------------ one compartment, MM elimination


def one_comp_mm_elim_abs_rhs(
    t: torch.Tensor, y: torch.Tensor, theta: torch.Tensor, x_r: tuple[Any, Any]
) -> torch.Tensor:
    """dC/dt: the dose absorbed at first order from t > 0, eliminated by Michaelis-Menten."""
    k_a, K_m, V_m = theta.unbind(-1)
    D, V = x_r
    elim = (V_m / V) * y[..., 0] / (K_m + y[..., 0])
    dose = torch.where(t > 0, torch.exp(-k_a * t) * D * k_a / V, torch.zeros_like(elim))
    return (dose - elim)[..., None]


def one_comp_mm_elim_abs(
    t0: float, D: float, V: float, times: torch.Tensor, C_hat: torch.Tensor
) -> None:
    """Stan's one_comp_mm_elim_abs: a drug's concentration in one compartment, absorbed at rate
    k_a from a dose D into volume V and eliminated by Michaelis-Menten kinetics::

        k_a, K_m, V_m, sigma ~ Cauchy(0, 1),  each > 0
        dC/dt = [t > 0] exp(-k_a t) D k_a / V - (V_m / V) C / (K_m + C),   C(t0) = 0
        C_hat_n ~ LogNormal(log C(times_n), sigma)                        (bdf, rtol = atol = 1e-6)

            (k_a, K_m, V_m) --ODE--> C --> [C_hat_n] <-- sigma     n = 1..N_t
    """
    k_a = pyro.sample("k_a", dist.HalfCauchy(torch.tensor(1.0)))
    K_m = pyro.sample("K_m", dist.HalfCauchy(torch.tensor(1.0)))
    V_m = pyro.sample("V_m", dist.HalfCauchy(torch.tensor(1.0)))
    sigma = pyro.sample("sigma", dist.HalfCauchy(torch.tensor(1.0)))
    C0 = torch.zeros(1)  # the program's transformed data: the original C0 data hard-coded
    theta = torch.stack([k_a, K_m, V_m], dim=-1)
    # integrate_ode_bdf's defaults: relative and absolute tolerance 1e-6, 1e6 steps
    C = integrate_ode(
        one_comp_mm_elim_abs_rhs,
        C0,
        t0,
        times,
        theta,
        (D, V),
        rel_tol=1e-6,
        abs_tol=1e-6,
        max_num_steps=10**6,
    )
    with pyro.plate("n", times.shape[-1]):
        pyro.sample("C_hat", dist.LogNormal(C[..., 0].log(), sigma), obs=C_hat)


def _one_comp() -> dict[str, Any]:
    raw = posteriordb_data("one_comp_mm_elim_abs")
    dtype = torch.get_default_dtype()
    out: dict[str, Any] = {k: float(raw[k]) for k in ("t0", "D", "V")}
    return out | {
        k: torch.tensor(raw[k], dtype=torch.float64).to(dtype) for k in ("times", "C_hat")
    }


posterior(
    "one_comp_mm_elim_abs-one_comp_mm_elim_abs",
    one_comp_mm_elim_abs,
    _one_comp,
    params=("k_a", "K_m", "V_m", "sigma"),
    math=[
        r"k_a, K_m, V_m, \sigma \sim \mathrm{HalfCauchy}(1)",
        r"\frac{dC}{dt} = \mathbb{1}[t > 0]\, e^{-k_a t} \frac{D k_a}{V}"
        r" - \frac{V_m}{V} \frac{C}{K_m + C}, \quad C(t_0) = 0",
        r"\hat C_n \sim \mathrm{LogNormal}(\log C(t_n), \sigma)",
    ],
    story=(
        "Synthetic concentrations of a drug in one compartment (20 times over 10 days after a "
        "dose of 30 mg into 2 L) from Stan's performance benchmarks (stat_comp_benchmarks, "
        "pkpd), absorbed at first order and eliminated by Michaelis-Menten kinetics."
    ),
    tolerance=Tolerance(
        log_density_sd=1e-5,
        gradient=1e-4,
        reason=(
            "Dormand-Prince at a hundredth of bdf's tolerances against CVODES' BDF: the log "
            "density differs from Stan's by 2.8e-6 (sd over the draws), the gradient by 2.5e-5 "
            "relative to 1 + |grad|; Stan's own is within 2.3e-8 of a solve at 1e-10"
        ),
    ),
    per_chain=ADAPTIVE_STEPS,
    nuts_fails=(
        "too slow and too large for a CPU run: the explicit solver's many steps on this stiff "
        "system are each kept for the gradient (Stan's program uses BDF)"
    ),
)
