"""NumPyro's NUTS (pyro-ppl/numpyro, Apache-2.0), the peer sampler that runs on any target: its
tree building and its Stan-style windowed adaptation on the zoo's own log density, which NumPyro
calls through ``jax.pure_callback`` (the value and its gradient, a custom VJP).

No port is needed and none can drift: the figures that count gradients compare the algorithms
on exactly the zoo's target. The chains run vectorised (NumPyro's ``chain_method="vectorized"``):
each callback evaluates the whole chain group's batch at once, in lockstep, so a group waits for
its longest tree as NumPyro's vectorised chains do; ``gradient_evals`` counts what the batches
evaluated (callbacks x chains), the per-draw ``n_steps`` what each chain's tree used. Its wall
time is that of NumPyro's compiled loop plus a host callback a step, not of a NumPyro model.
"""

from __future__ import annotations

import importlib
from typing import Any

import numpy as np
import torch

from zoo_inference.parallel import in_child
from zoo_inference.results import ZooError
from zoo_inference.samplers.base import Density, Samples


def jax_modules() -> tuple[Any, Any]:
    """JAX and NumPyro's ``infer``, imported when the engine runs, or a clear error."""
    try:
        return importlib.import_module("jax"), importlib.import_module("numpyro.infer")
    except ImportError:
        raise ZooError(
            "the numpyro engine needs NumPyro and JAX: pip install 'numpyro>=0.15' "
            "'jax[cpu]>=0.4.30' (the peers extra)"
        ) from None


def potential_of(jax: Any, density: Density, dtype: torch.dtype) -> tuple[Any, list[int]]:
    """``-log p`` of the zoo's batched density as a JAX function of one point (NumPyro's
    ``potential_fn``) that vmaps to one host call per batch, and the count of those calls."""
    calls = [0]

    def host(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        calls[0] += 1
        x = np.asarray(x)
        value, grad = density(torch.tensor(x.reshape(-1, x.shape[-1]), dtype=dtype))
        return (
            (-value).numpy().reshape(x.shape[:-1]).astype(x.dtype),
            (-grad).numpy().reshape(x.shape).astype(x.dtype),
        )

    def both(x: Any) -> Any:
        shapes = (
            jax.ShapeDtypeStruct(x.shape[:-1], x.dtype),
            jax.ShapeDtypeStruct(x.shape, x.dtype),
        )
        return jax.pure_callback(host, shapes, x, vmap_method="broadcast_all")

    @jax.custom_vjp
    def potential(x: Any) -> Any:
        return both(x)[0]

    def backward(grad: Any, cotangent: Any) -> tuple[Any]:
        return (cotangent[..., None] * grad,)

    potential.defvjp(lambda x: both(x), backward)
    return potential, calls


def numpyro_sampler(
    density: Density,
    theta0: torch.Tensor,
    *,
    num_samples: int,
    warmup: int,
    gen: torch.Generator,
    progress: bool = False,
    target_accept: float = 0.8,
    max_tree_depth: int = 10,
    dense_mass: bool = False,
) -> Samples:
    """NumPyro's NUTS from the rows of ``theta0``, all chains of the group vectorised: its
    warmup (step size by dual averaging, a diagonal or ``dense_mass`` metric in Stan's windows),
    then ``num_samples`` draws. The PRNG key is drawn from ``gen``. A point where the density is
    -inf is a divergence to NumPyro.

    JAX runs in a process forked for the call where one may fork
    (:func:`~zoo_inference.parallel.in_child`): a process where JAX has started may fork no
    more (its thread pool does not survive a fork), and the caller's chain groups and
    leaderboard cells fork."""
    jax_modules()  # a missing library is said here, before anything forks
    key = int(torch.randint(0, 2**31 - 1, (1,), generator=gen))
    options = (target_accept, max_tree_depth, dense_mass)
    return in_child(_sample, density, theta0, num_samples, warmup, key, progress, options)


def _sample(
    density: Density,
    theta0: torch.Tensor,
    num_samples: int,
    warmup: int,
    key: int,
    progress: bool,
    options: tuple[float, int, bool],
) -> Samples:
    jax, infer = jax_modules()
    target_accept, max_tree_depth, dense_mass = options
    chains = theta0.shape[0]
    dtype = theta0.dtype
    # JAX's precision follows the density's; set for the process (not the thread: NumPyro's
    # host callbacks run on JAX's own threads) and put back after
    previous = jax.config.read("jax_enable_x64")
    jax.config.update("jax_enable_x64", dtype == torch.float64)
    try:
        potential, calls = potential_of(jax, density, dtype)
        kernel = infer.NUTS(
            potential_fn=potential,
            target_accept_prob=target_accept,
            max_tree_depth=max_tree_depth,
            dense_mass=dense_mass,
        )
        mcmc = infer.MCMC(
            kernel,
            num_warmup=warmup,
            num_samples=num_samples,
            num_chains=chains,
            chain_method="vectorized",
            progress_bar=progress,  # NumPyro's own bar
        )
        init = jax.numpy.asarray(theta0.numpy())
        if chains == 1:  # one chain is not vectorised: NumPyro takes its point unbatched
            init = init[0]
        warm_steps = 0
        if warmup:
            mcmc.warmup(
                jax.random.PRNGKey(key),
                init_params=init,
                extra_fields=("num_steps",),
                collect_warmup=True,
            )
            warm_steps = int(np.asarray(mcmc.get_extra_fields()["num_steps"]).sum())
            rng: Any = mcmc.post_warmup_state.rng_key
        else:
            rng = jax.random.PRNGKey(key)
        fields = ("num_steps", "diverging", "accept_prob", "adapt_state.step_size")
        mcmc.run(rng, init_params=None if warmup else init, extra_fields=fields)
        draws = np.array(mcmc.get_samples(group_by_chain=True))  # writable, for torch
        extra = {k: np.array(v) for k, v in mcmc.get_extra_fields(group_by_chain=True).items()}
    finally:
        jax.config.update("jax_enable_x64", previous)
    stats = {
        "n_steps": torch.as_tensor(extra["num_steps"]).long(),
        "diverging": torch.as_tensor(extra["diverging"]).bool(),
        "accept": torch.as_tensor(extra["accept_prob"]).to(dtype),
        "step_size": torch.as_tensor(extra["adapt_state.step_size"]).to(dtype),
    }
    info = {
        "metric": "dense" if dense_mass else "diagonal",
        "numpyro": importlib.import_module("numpyro").__version__,
        "tree_steps": warm_steps + int(stats["n_steps"].sum()),  # what the trees used
    }
    theta = torch.as_tensor(draws).to(dtype).reshape(chains, num_samples, -1)
    return Samples(theta, stats, gradient_evals=calls[0] * chains, info=info)
