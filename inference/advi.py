"""ADVI on the batched log density: the ``svi`` engine's compiled path for Gaussian guides.

Automatic differentiation variational inference (Kucukelbir et al. 2017) fits a Gaussian
q(theta) = N(mu, L L') on the unconstrained space of the continuous sites (discrete sites summed
out of the density, as ``nuts`` does), maximising

    ELBO = E_q[log p(y, theta)] + H(q),    theta = mu + L eps,  eps ~ N(0, I),

with the expectation estimated by ``num_particles`` reparameterised draws, which are the batch of
one :class:`~zoo_inference.density.BatchedDensity` call, and the entropy H(q) = sum_i log L_ii +
D/2 (1 + log 2 pi) in closed form. This is the objective Pyro's ``Trace_ELBO`` (or
``TraceEnum_ELBO`` with the discrete sites enumerated) fits with ``AutoNormal`` (``L`` diagonal)
or ``AutoMultivariateNormal`` (``L = diag(sigma) U``, ``U`` unit lower triangular), in the same
parameterisation (``sigma = softplus(rho)``), from the same start (the prior median, scale 0.1)
and with the same optimiser (Pyro's ``ClippedAdam``: gradients clipped to 10, learning rate
decayed tenfold over the run). One step (draws, density, gradient by the chain rule, Adam) has no
Python branch on values, so it is fused into one compiled graph where the density is compiled.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pyro
import pyro.poutine as poutine
import torch
from pyro.infer.autoguide.initialization import InitMessenger
from tqdm.auto import tqdm

from .context import EngineContext
from .density import BatchedDensity
from .results import NumericalFailure
from .samplers.driver import DrivenLoop
from .structure import fit_init

FAMILIES = {"normal": "meanfield", "mvn": "fullrank"}
INIT_SCALE = 0.1  # Pyro's autoguides' init_scale
CLIP, BETA1, BETA2, EPS = 10.0, 0.9, 0.999, 1e-8  # Pyro's ClippedAdam defaults
LOG_2PI = math.log(2 * math.pi)


@dataclass
class GaussianQ:
    """A fitted Gaussian on the unconstrained space: theta = loc + eps @ tril.T."""

    loc: torch.Tensor  # (D,)
    tril: torch.Tensor  # (D, D), lower triangular, positive diagonal

    def sample(self, n: int, gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        """``n`` draws ``(n, D)`` and their log densities ``(n,)``."""
        eps = torch.randn(n, len(self.loc), generator=gen, dtype=self.loc.dtype)
        theta = self.loc + eps @ self.tril.T
        log_q = (
            -0.5 * (eps**2).sum(-1)
            - self.tril.diagonal().log().sum()
            - 0.5 * len(self.loc) * LOG_2PI
        )
        return theta, log_q


def _softplus_inverse(x: torch.Tensor) -> torch.Tensor:
    return x + torch.log(-torch.expm1(-x))


def _adam(
    params: torch.Tensor,
    grad: torch.Tensor,
    m: torch.Tensor,
    v: torch.Tensor,
    step_size: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """One ClippedAdam step on the loss gradient ``grad``; ``step_size`` carries the decayed
    learning rate and both bias corrections."""
    grad = grad.clamp(-CLIP, CLIP)
    m = BETA1 * m + (1 - BETA1) * grad
    v = BETA2 * v + (1 - BETA2) * grad * grad
    return params - step_size * m / (v.sqrt() + EPS), m, v


def meanfield_gradient(density, params, eps):  # noqa: ANN001, ANN201 - traced
    """ELBO estimate and its gradient for q = N(mu, diag(sigma^2)), ``params = [mu, rho]``,
    sigma = softplus(rho), at the draws theta = mu + sigma eps (``eps``: particles x D):
    d/d mu = E[g], d/d sigma = E[g eps] + 1/sigma, with g = grad log p(theta)."""
    dim = eps.shape[-1]
    loc, rho = params[:dim], params[dim:]
    scale = torch.nn.functional.softplus(rho)
    log_p, g = density(loc + eps * scale)
    elbo = log_p.mean() + scale.log().sum() + 0.5 * dim * (1 + LOG_2PI)
    d_scale = (g * eps).mean(0) + 1 / scale
    return elbo, torch.cat([g.mean(0), d_scale * torch.sigmoid(rho)])


def fullrank_gradient(density, params, eps):  # noqa: ANN001, ANN201 - traced
    """The same for q = N(mu, L L'), L = diag(sigma) U with U unit lower triangular, ``params =
    [mu, rho, U below the diagonal (row by row)]``, theta = mu + L eps:
    d/d L = E[g eps'] + diag(1/L_ii), its lower part."""
    dim = eps.shape[-1]
    loc, rho, off = params[:dim], params[dim : 2 * dim], params[2 * dim :]
    rows, cols = torch.tril_indices(dim, dim, -1)
    unit = torch.eye(dim, dtype=params.dtype).index_put((rows, cols), off)
    scale = torch.nn.functional.softplus(rho)
    log_p, g = density(loc + eps @ (scale[:, None] * unit).T)
    elbo = log_p.mean() + scale.log().sum() + 0.5 * dim * (1 + LOG_2PI)
    d_tril = (g[:, :, None] * eps[:, None, :]).mean(0)
    d_scale = (d_tril * unit).sum(1) + 1 / scale
    d_off = (d_tril * scale[:, None])[rows, cols]
    return elbo, torch.cat([g.mean(0), d_scale * torch.sigmoid(rho), d_off])


def meanfield_step(density, params, m, v, eps, step_size):  # noqa: ANN001, ANN201 - fused
    """One ClippedAdam step on -ELBO of the mean-field family; returns params, m, v, ELBO."""
    elbo, grad = meanfield_gradient(density, params, eps)
    return (*_adam(params, -grad, m, v, step_size), elbo)


def fullrank_step(density, params, m, v, eps, step_size):  # noqa: ANN001, ANN201 - fused
    """One ClippedAdam step on -ELBO of the full-rank family; returns params, m, v, ELBO."""
    elbo, grad = fullrank_gradient(density, params, eps)
    return (*_adam(params, -grad, m, v, step_size), elbo)


STEPS = {"meanfield": meanfield_step, "fullrank": fullrank_step}
GRADIENTS = {"meanfield": meanfield_gradient, "fullrank": fullrank_gradient}


def start_point(ctx: EngineContext, density: BatchedDensity) -> torch.Tensor:
    """Where the autoguides start: the prior median of each continuous site (``fit_init``),
    mapped to the unconstrained space."""
    with pyro.validation_enabled(False), torch.no_grad(), poutine.block():
        trace = poutine.trace(InitMessenger(fit_init)(ctx.model)).get_trace(**ctx.data)
    values = {
        b.name: density.transforms[b.name](trace.nodes[b.name]["value"]) for b in density.blocks
    }
    return density.flatten(values)


def _unpack(params: torch.Tensor, family: str, dim: int) -> GaussianQ:
    loc, scale = params[:dim], torch.nn.functional.softplus(params[dim : 2 * dim])
    unit = torch.eye(dim, dtype=params.dtype)
    if family == "fullrank":
        rows, cols = torch.tril_indices(dim, dim, -1)
        unit = unit.index_put((rows, cols), params[2 * dim :])
    return GaussianQ(loc.clone(), scale[:, None] * unit)


def advi(
    ctx: EngineContext,
    density: BatchedDensity,
    *,
    family: str,
    num_steps: int,
    lr: float,
    gen: torch.Generator,
    desc: str,
) -> tuple[GaussianQ, list[float]]:
    """Fit q by ``num_steps`` ClippedAdam steps on the reparameterised ELBO, each with
    ``density.chains`` particles; returns q and the ELBO estimate of every step."""
    dim = density.dim
    loc = start_point(ctx, density)
    rho = _softplus_inverse(torch.full((dim,), INIT_SCALE, dtype=density.dtype))
    params = torch.cat([loc, rho])
    if family == "fullrank":
        params = torch.cat([params, torch.zeros(dim * (dim - 1) // 2, dtype=density.dtype)])
    m, v = torch.zeros_like(params), torch.zeros_like(params)
    loop = DrivenLoop(density, num_steps)  # the step fused, the compile paced by the driver
    step = loop.step(STEPS[family])
    decay = 0.1 ** (1.0 / num_steps)
    elbos: list[torch.Tensor] = []
    bar = tqdm(range(num_steps), desc=desc, disable=not ctx.progress, leave=False)
    for t in bar:
        lr_t = lr * decay ** (t + 1)  # ClippedAdam decays the rate before each step
        size = lr_t * math.sqrt(1 - BETA2 ** (t + 1)) / (1 - BETA1 ** (t + 1))
        eps = torch.randn(density.chains, dim, generator=gen, dtype=density.dtype)
        params, m, v, elbo = step(params, m, v, eps, torch.tensor(size, dtype=density.dtype))
        elbos.append(elbo)
        loop.done(t + 1)
        if (t + 1) % 100 == 0 or t + 1 == num_steps:
            recent = torch.stack(elbos[-100:])
            if not bool(torch.isfinite(params).all()) or not bool(torch.isfinite(recent).any()):
                bad = int(np.argmin(np.isfinite(recent.numpy()))) + len(elbos) - len(recent)
                raise NumericalFailure(f"ELBO is {float(recent.min())} at step {bad}")
            if ctx.progress:
                bar.set_postfix(elbo=f"{float(recent.mean()):.3f}")
    return _unpack(params, family, dim), torch.stack(elbos).tolist()
