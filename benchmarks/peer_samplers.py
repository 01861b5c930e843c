"""The matched peer runs of ``compare_peers.py``: NumPyro's NUTS with its chains vectorised,
BlackJAX's NUTS (Stan's window adaptation per chain) and ChEES (its ensemble adaptation, a
diagonal metric), and nutpie with its low-rank mass matrix, each at a chain count and sizes the
caller gives (the zoo engine's, for a matched run). Imported as a file by ``compare_peers.py``;
each runner returns ``(draws, gradient evaluations after warmup, those of warmup, notes)``, the
draws constrained, site -> (chain, draw, ...)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

Result = tuple[dict[str, np.ndarray], float, float, list[str]]


def jax_density(model: Callable[[], None], seed: int, chains: int) -> tuple[Any, Any, Any]:
    """The NumPyro model's log density on the unconstrained space (``-potential``) of one flat
    vector (BlackJAX's ChEES broadcasts its weights against every leaf of a structured
    position, which fails for a leaf with more dimensions than one), each chain's start
    (uniform in (-2, 2) there, NumPyro's and Stan's default) as a (chains, D) array, and the
    map from one flat draw to the model's constrained sites."""
    import jax
    from jax.flatten_util import ravel_pytree
    from numpyro.infer.util import initialize_model

    keys = jax.random.split(jax.random.PRNGKey(seed), chains)
    info = initialize_model(keys, model)
    starts = info.param_info.z
    _, unravel = ravel_pytree(jax.tree.map(lambda x: x[0], starts))
    flat_starts = jax.vmap(lambda z: ravel_pytree(z)[0])(starts)
    potential, postprocess = info.potential_fn, info.postprocess_fn

    def logdensity(x: Any) -> Any:
        return -potential(unravel(x))

    def constrain(x: Any) -> Any:
        return postprocess(unravel(x))

    return logdensity, flat_starts, constrain


def constrained(constrain: Any, positions: Any, sites: tuple[str, ...]) -> dict[str, np.ndarray]:
    """Flat draws on the unconstrained space, (chains, draws, D), mapped to the model's
    constrained sites."""
    import jax

    values = jax.vmap(jax.vmap(constrain))(positions)
    return {s: np.asarray(values[s]) for s in sites}


def numpyro_vectorized(
    model: Callable[[], None],
    sites: tuple[str, ...],
    seed: int,
    chains: int,
    warmup: int,
    draws: int,
    dense: bool = False,
) -> Result:
    """NumPyro's NUTS at its defaults (Stan's windows per chain; a diagonal metric, or a dense
    one with ``dense``), the chains vectorised (``chain_method="vectorized"``: one batched
    program, as the zoo runs them)."""
    import jax
    from numpyro.infer import MCMC, NUTS

    mcmc = MCMC(
        NUTS(model, dense_mass=dense),
        num_warmup=warmup,
        num_samples=draws,
        num_chains=chains,
        chain_method="vectorized",
        progress_bar=False,
    )
    mcmc.warmup(jax.random.PRNGKey(seed), extra_fields=("num_steps",), collect_warmup=True)
    warm = float(np.sum(mcmc.get_extra_fields(group_by_chain=True)["num_steps"]))
    mcmc.run(mcmc.post_warmup_state.rng_key, extra_fields=("num_steps",))
    after = float(np.sum(mcmc.get_extra_fields(group_by_chain=True)["num_steps"]))
    samples = mcmc.get_samples(group_by_chain=True)
    return {s: np.asarray(samples[s]) for s in sites}, after, warm, []


def blackjax_nuts(
    model: Callable[[], None],
    sites: tuple[str, ...],
    seed: int,
    chains: int,
    warmup: int,
    draws: int,
    dense: bool = False,
) -> Result:
    """BlackJAX's NUTS after its window adaptation (Stan's windows, a diagonal metric or with
    ``dense`` a dense one, target acceptance 0.8), each chain adapted on its own, the chains
    vmapped into one program."""
    import blackjax
    import jax

    logdensity, starts, constrain = jax_density(model, seed, chains)
    warm_keys = jax.random.split(jax.random.PRNGKey(seed + 1), chains)
    draw_keys = jax.random.split(jax.random.PRNGKey(seed + 2), chains)
    adaptation = blackjax.window_adaptation(
        blackjax.nuts, logdensity, is_mass_matrix_diagonal=not dense
    )

    @jax.jit
    def run(warm_keys: Any, draw_keys: Any, starts: Any) -> Any:
        def one(warm_key: Any, draw_key: Any, start: Any) -> Any:
            (state, params), info = adaptation.run(warm_key, start, warmup)
            step = blackjax.nuts(logdensity, **params).step

            def body(state: Any, key: Any) -> Any:
                state, i = step(key, state)
                return state, (state.position, i.num_integration_steps)

            _, (positions, steps) = jax.lax.scan(body, state, jax.random.split(draw_key, draws))
            return positions, steps.sum(), info.info.num_integration_steps.sum()

        return jax.vmap(one)(warm_keys, draw_keys, starts)

    positions, steps, warm = run(warm_keys, draw_keys, starts)
    draws_ = constrained(constrain, positions, sites)
    return draws_, float(steps.sum()), float(warm.sum()), []


def blackjax_chees(
    model: Callable[[], None],
    sites: tuple[str, ...],
    seed: int,
    chains: int,
    warmup: int,
    draws: int,
    dense: bool = False,
) -> Result:
    """BlackJAX's ChEES: the ensemble adaptation of one step size and one trajectory length
    (Adam at learning rate 0.05, the zoo's; target acceptance 0.651) with its diagonal metric
    (``mass_matrix_estimation="diagonal"``), then jittered HMC with those for every chain.
    ``dense`` is refused: BlackJAX's ChEES estimates a diagonal metric only."""
    if dense:
        raise ValueError("BlackJAX's ChEES has no dense metric")
    import blackjax
    import jax
    import optax

    logdensity, starts, constrain = jax_density(model, seed, chains)
    adaptation = blackjax.chees_adaptation(logdensity, chains, mass_matrix_estimation="diagonal")

    @jax.jit
    def run(key: Any, starts: Any) -> Any:
        warm_key, draw_key = jax.random.split(key)
        (states, params), info = adaptation.run(
            warm_key, starts, step_size=0.1, optim=optax.adam(0.05), num_steps=warmup
        )
        step = blackjax.dynamic_hmc(logdensity, **params).step

        def body(states: Any, key: Any) -> Any:
            states, i = jax.vmap(step)(jax.random.split(key, chains), states)
            return states, (states.position, i.num_integration_steps)

        _, (positions, steps) = jax.lax.scan(body, states, jax.random.split(draw_key, draws))
        return positions, steps.sum(), info.info.num_integration_steps.sum()

    positions, steps, warm = run(jax.random.PRNGKey(seed), starts)
    # scan stacks draws first: (draws, chains, ...) -> (chains, draws, ...)
    positions = np.swapaxes(np.asarray(positions), 0, 1)
    return constrained(constrain, positions, sites), float(steps), float(warm), []


def nutpie_low_rank(
    pymc_model: Any,
    sites: tuple[str, ...],
    seed: int,
    chains: int,
    warmup: int,
    draws: int,
    dense: bool = False,
) -> Result:
    """nutpie on the PyMC model with its low-rank-plus-diagonal mass matrix
    (``low_rank_modified_mass_matrix=True``), chains in threads on every core. ``dense`` is
    ignored: the low-rank metric is nutpie's answer to a correlated posterior."""
    import nutpie

    compiled = nutpie.compile_pymc_model(pymc_model)
    idata = nutpie.sample(
        compiled,
        draws=draws,
        tune=warmup,
        chains=chains,
        seed=seed,
        progress_bar=False,
        low_rank_modified_mass_matrix=True,
        save_warmup=True,
    )
    warm = float(idata.warmup_sample_stats["n_steps"].sum())
    after = float(idata.sample_stats["n_steps"].sum())
    post = idata.posterior
    return {s: post[s].values for s in sites}, after, warm, []
