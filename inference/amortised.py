"""What amortised models (a neural guide q(z_i | x_i), minibatches through a subsampled plate)
need from the shared engines: networks built afresh for each run, the importance-weighted ELBO
with data subsampling done right, and per-datapoint importance weights for evaluation.

The per-datapoint quantities need one thing of a model: every sample site (latent or observed,
in the model and in the guide) sits inside one plate over the data points, so that datapoint i's
latents z_i are independent of every other's given the networks (a VAE, a CVAE, a VaDE). Discrete
latents of the model that the guide does not sample are summed out exactly, per datapoint.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Mapping
from typing import Any, TypeVar, cast

import numpy as np
import pyro
import pyro.poutine as poutine
import torch
from pyro.distributions.util import is_identically_zero
from pyro.infer import RenyiELBO
from pyro.infer.util import get_dependent_plate_dims, torch_sum
from pyro.params.param_store import param_with_module_name
from pyro.poutine.util import site_is_subsample
from pyro.util import warn_if_nan
from torch import nn

from .discrete import enumerated
from .sites import site_dist, site_value

# --------------------------------------------------------------------------- networks
_NETWORKS: dict[tuple[str, Hashable], nn.Module] = {}
ModuleT = TypeVar("ModuleT", bound=nn.Module)


def network(name: str, build: Callable[[], ModuleT], key: Hashable = None) -> ModuleT:
    """The network ``name`` of the current run, registered with Pyro (``pyro.module``) so that
    SVI trains it.

    The first call of a run builds it with ``build()``, which draws its initial weights from
    torch's generator: the runner seeds that generator from the run's seed, so the same seed
    gives the same network and the same numbers. A run starts with an empty parameter store
    (``pyro.clear_param_store``); a network whose parameters the store no longer holds is built
    again, so no run starts from another run's weights. Within a run every call returns the same
    module, holding the store's current values (``update_module_params``: parameters loaded into
    the store win). ``key`` tells apart networks of one name with different shapes."""
    store = pyro.get_param_store()
    net = _NETWORKS.get((name, key))
    if net is None or any(
        param_with_module_name(name, p) not in store for p, _ in net.named_parameters()
    ):
        net = build()
        _NETWORKS[(name, key)] = net
    # the module build() made for (name, key): pyro.module returns the module it is given
    return cast(ModuleT, pyro.module(name, net, update_module_params=True))


def fixed_subsample(fn: Callable[..., Any], indices: Mapping[str, torch.Tensor]) -> Callable:
    """``fn`` with each named plate's subsample fixed to the given indices (of the plate's own
    subsample size) instead of a random draw: the same data points for a model and its guide."""
    return poutine.condition(fn, data=dict(indices))


def first_subsample(fn: Callable[..., Any], plates: Mapping[str, tuple[int, int]]) -> Callable:
    """``fn`` with each plate of ``plates`` (name -> (size, subsample size)) fixed to its first
    ``subsample size`` data points."""
    return fixed_subsample(fn, {k: torch.arange(sub) for k, (_, sub) in plates.items()})


# --------------------------------------------------------------------------- IWAE
class SubsampledRenyiELBO(RenyiELBO):
    """Pyro's :class:`~pyro.infer.RenyiELBO` (alpha = 0: the importance-weighted bound of Burda
    et al.), right under data subsampling.

    Pyro's version weighs the particles of a data point by its log weight scaled by N/B (the
    subsample's scale), so a minibatch optimises a tempered bound, log mean_k w_ik^(N/B), which
    is no lower bound; and without ``vectorize_particles`` each particle draws its own minibatch,
    so the particles it averages belong to different data points. Here, when every sample site
    carries one scale s, the log weights are unscaled before the average over particles and the
    bound is scaled after: s * sum_i log mean_k w_ik, an unbiased estimate of the full-data bound
    sum_i log mean_k w_ik; and the engine vectorises the particles of a subsampled model, so they
    share the minibatch. With s = 1 (no subsampling) it is Pyro's RenyiELBO, number for number.
    """

    def _particles(self, model: Any, guide: Any, args: Any, kwargs: Any, grads: bool) -> Any:
        """(log weight, surrogate) per particle, stacked, and the common scale of the sites."""
        elbo_particles: list[torch.Tensor] = []
        surrogate_particles: list[Any] = []  # None each without grads
        scale: float | None = 1.0
        holder: torch.Tensor | None = None
        for model_trace, guide_trace in self._get_traces(model, guide, args, kwargs):
            sum_dims = get_dependent_plate_dims(model_trace.nodes.values())
            scale = _common_scale(model_trace, guide_trace)
            unscale = 1.0 if scale is None else 1.0 / scale
            elbo_p: Any = 0.0
            surrogate_p: Any = 0.0
            for site in model_trace.nodes.values():
                if site["type"] == "sample":
                    lp = torch_sum(site["log_prob"], sum_dims) * unscale
                    elbo_p = elbo_p + lp.detach()
                    surrogate_p = surrogate_p + lp
            for site in guide_trace.nodes.values():
                if site["type"] != "sample":
                    continue
                _, score_function_term, entropy_term = site["score_parts"]
                lp = torch_sum(site["log_prob"], sum_dims) * unscale
                elbo_p = elbo_p - lp.detach()
                if not is_identically_zero(entropy_term):
                    surrogate_p = surrogate_p - lp
                    if not is_identically_zero(score_function_term):
                        raise NotImplementedError("RenyiELBO: pyro-ppl issue 1222")
                if not is_identically_zero(score_function_term):
                    surrogate_p = surrogate_p + (self.alpha / (1.0 - self.alpha)) * lp
            if is_identically_zero(elbo_p):
                if holder is not None:
                    elbo_p, surrogate_p = torch.zeros_like(holder), torch.zeros_like(holder)
            elif holder is None:
                holder = torch.zeros_like(elbo_p)
                elbo_particles = [torch.zeros_like(holder) for _ in elbo_particles]
                surrogate_particles = [torch.zeros_like(holder) for _ in surrogate_particles]
            elbo_particles.append(elbo_p)
            surrogate_particles.append(surrogate_p if grads else None)
        if holder is None:
            return None, None, 1.0
        if self.vectorize_particles and self.num_particles > 1:
            return elbo_particles[0], surrogate_particles[0], scale or 1.0
        surrogates = torch.stack(surrogate_particles) if grads else None
        return torch.stack(elbo_particles), surrogates, scale or 1.0

    @torch.no_grad()
    def loss(self, model: Any, guide: Any, *args: Any, **kwargs: Any) -> float:
        elbo_particles, _, scale = self._particles(model, guide, args, kwargs, grads=False)
        if elbo_particles is None:
            return 0.0
        log_weights = (1.0 - self.alpha) * elbo_particles
        log_mean = torch.logsumexp(log_weights, dim=0) - math.log(self.num_particles)
        loss = -scale * log_mean.sum().item() / (1.0 - self.alpha)
        warn_if_nan(loss, "loss")
        return loss

    def loss_and_grads(self, model: Any, guide: Any, *args: Any, **kwargs: Any) -> float:
        elbo_particles, surrogates, scale = self._particles(model, guide, args, kwargs, grads=True)
        if elbo_particles is None:
            return 0.0
        log_weights = (1.0 - self.alpha) * elbo_particles
        log_mean = torch.logsumexp(log_weights, dim=0, keepdim=True) - math.log(self.num_particles)
        elbo = scale * log_mean.sum().item() / (1.0 - self.alpha)
        if getattr(surrogates, "requires_grad", False):
            weights = (log_weights - log_mean).exp()  # K x the self-normalised weights
            surrogate = scale * (weights * surrogates).sum() / self.num_particles
            (-surrogate).backward()
        loss = -elbo
        warn_if_nan(loss, "loss")
        return loss


def _common_scale(*traces: poutine.Trace) -> float | None:
    """The scale every sample site of the traces carries (N/B under one subsampled plate), or
    None when they differ (a global site beside subsampled local ones: left scaled, as Pyro
    does)."""
    scales = set()
    for trace in traces:
        for site in trace.nodes.values():
            if site["type"] == "sample" and not site_is_subsample(site):
                s = site["scale"]
                if isinstance(s, torch.Tensor):
                    if s.numel() != 1:
                        return None
                    s = float(s)
                scales.add(float(s))
    return scales.pop() if len(scales) == 1 else None


# --------------------------------------------------------------------------- evaluation
def pointwise_log_weights(
    model: Callable[..., Any],
    guide: Callable[..., Any],
    data: Mapping[str, Any],
    num_particles: int,
    *,
    max_plate_nesting: int,
    max_rows: int = 50_000,
) -> np.ndarray:
    """log w_ik = log p(x_i, z_ik) - log q(z_ik | x_i) for every data point i and ``K =
    num_particles`` independent draws z_ik ~ q(z | x_i): an array (K, N).

    Each data point's weights give an importance-sampling estimate of its marginal likelihood,
    log p(x_i) ~ log (1/K) sum_k w_ik (biased low, consistent as K grows), and their mean is its
    ELBO. Discrete latents of the model that the guide does not sample are summed out exactly
    (enumerated in parallel). Every sample site must sit in one plate over the data points; a
    subsampled plate is walked through in consecutive subsamples of its own size (the last one
    overlapping the one before), so N is the plate's full size. Particles go in groups of at most
    ``max_rows`` // subsample size draws at a time (memory)."""
    nesting = int(max_plate_nesting)
    with torch.no_grad(), pyro.validation_enabled(False):
        first = poutine.trace(guide).get_trace(**data)
        plate, size, batch = _data_plate(model, guide, first, data)
        per_group = max(1, min(num_particles, max_rows // max(batch, 1)))
        out = np.empty((num_particles, size))
        for start in range(0, size, batch):
            stop = min(start + batch, size)
            lo = min(start, size - batch)  # the last subsample overlaps the one before
            idx = torch.arange(lo, lo + batch)
            keep = slice(start - lo, stop - lo)
            for k0 in range(0, num_particles, per_group):
                k1 = min(k0 + per_group, num_particles)
                lw = _log_weights(model, guide, data, plate, idx, k1 - k0, nesting, batch)
                out[k0:k1, start:stop] = lw[:, keep].double().numpy()
    return out


def _data_plate(
    model: Callable[..., Any], guide: Callable[..., Any], guide_trace: poutine.Trace, data: Any
) -> tuple[Any, int, int]:
    """The plate over the data points: the one plate every sample site of the model and the guide
    sits in; (its frame, full size, subsample size)."""
    model_trace = poutine.trace(poutine.replay(enumerated(model), trace=guide_trace)).get_trace(
        **data
    )
    stacks = [
        {f.name: f for f in site["cond_indep_stack"] if f.vectorized}
        for trace in (model_trace, guide_trace)
        for site in trace.nodes.values()
        if site["type"] == "sample" and not site_is_subsample(site)
    ]
    common = set.intersection(*(set(s) for s in stacks)) if stacks else set()
    if len(common) != 1:
        raise ValueError(
            "per-datapoint importance weights need every sample site of the model and the guide "
            f"inside one plate over the data points; common plates: {sorted(common) or 'none'}"
        )
    frame = stacks[0][common.pop()]
    full = frame.full_size if frame.full_size is not None else frame.size
    return frame, int(full), int(frame.size)


def _log_weights(
    model: Callable[..., Any],
    guide: Callable[..., Any],
    data: Mapping[str, Any],
    plate: Any,
    idx: torch.Tensor,
    k: int,
    nesting: int,
    batch: int,
) -> torch.Tensor:
    """(k, batch) log weights of the data points ``idx`` (the plate's subsample fixed to them)."""
    fixed = {plate.name: idx} if plate.full_size is not None and plate.full_size > batch else {}

    def particles(fn: Callable[..., Any]) -> Callable[..., Any]:
        def run(**kw: Any) -> Any:
            with pyro.plate("_particles", k, dim=-1 - nesting):
                return fn(**kw)

        return run

    g = particles(fixed_subsample(guide, fixed))
    m = particles(fixed_subsample(enumerated(model), fixed))
    guide_trace = poutine.trace(g).get_trace(**data)
    model_trace = poutine.trace(
        poutine.enum(poutine.replay(m, trace=guide_trace), first_available_dim=-2 - nesting)
    ).get_trace(**data)
    dims = (-1 - nesting, plate.dim)

    def total(trace: poutine.Trace) -> torch.Tensor:
        out = torch.zeros((), dtype=torch.float64)
        for site in trace.nodes.values():
            if site["type"] != "sample" or site_is_subsample(site):
                continue
            lp = site_dist(site).log_prob(site_value(site)).double()
            mask = site["mask"]
            if mask is not None:  # masked out: no term (as in Pyro's scale_and_mask)
                lp = torch.where(torch.as_tensor(mask), lp, torch.zeros((), dtype=lp.dtype))
            # sum the site's other plates (nested inside the data plate), keeping dims aligned
            other = [
                f.dim for f in site["cond_indep_stack"] if f.dim is not None and f.dim not in dims
            ]  # the vectorized
            other = [d for d in other if -d <= lp.dim()]
            if other:
                lp = lp.sum(other, keepdim=True)
            out = out + lp
        return out

    log_q = total(guide_trace)
    log_p = total(model_trace)
    # enumerated discrete sites occupy the dims left of the particles: sum them out
    enum_dims = list(range(log_p.dim() - 1 - nesting))
    if enum_dims:
        log_p = torch.logsumexp(log_p, dim=enum_dims)
    lw = log_p - log_q
    # left: the particles' dim and the data plate's (every other dim is 1): as (k, batch)
    lw = lw.reshape((1,) * (1 + nesting - lw.dim()) + tuple(lw.shape))
    full = [k] + [1] * nesting
    full[plate.dim] = batch
    return lw.expand(full).reshape(k, batch)
