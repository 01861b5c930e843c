"""Report profiles: how much work each engine does in a report.

A profile maps an engine name to its options. Options an engine does not take are dropped, so a
profile can name ``num_samples`` for every engine without knowing which reference engines take it.
A model's own ``engine_options`` (a learning rate that suits its scale, more draws for a hard
posterior) win over the profile, except counts (steps, draws, warmup), where the larger wins: a
profile sets a budget, a model can only ask for more.

``quick``  the default: minutes for the whole zoo, enough to see who is right and who is not.
``full``   publication numbers: longer SVI, 1000 + 1000 NUTS draws on 32 chains (HMC on 8,
           ChEES on 64); several times the quick profile's time.
``smoke``  tiny runs for tests and CI: checks that every page renders; the numbers mean little.

``quick`` and ``full`` run each sampler's chains as one batch (``chain_groups=1``). A report's
cells already keep every core busy, so a cell's chain groups would run one after another, and one
batch takes the fewest steps: a step moves every chain of the batch, which ends with its slowest
chain. The layout is an option of the run, so the page's "reproduce" call gives the same numbers
on any machine.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from zoo_inference import ZooError
from zoo_inference.engines import GENERIC_ENGINES, REFERENCE_BUDGETS, budget

PROFILE_NAMES = ("quick", "full", "smoke")


def profiles() -> dict[str, dict[str, dict[str, Any]]]:
    """Every engine's budget at each report profile, read from its declaration
    (inference/engines.py), so engines a user registered are sized too."""
    return {
        profile: {
            engine: budget(engine, profile)
            for engine in [*GENERIC_ENGINES, *REFERENCE_BUDGETS]
            if budget(engine, profile)
        }
        for profile in PROFILE_NAMES
    }


# Options where a model's own default beats the profile only when it asks for more.
COUNT_OPTIONS = frozenset(
    {"num_steps", "num_samples", "warmup", "num_chains", "map_steps", "fit_steps"}
)


def check_profile(profile: Any) -> dict[str, dict[str, Any]]:
    """The profile's engine options; an unknown profile is a :class:`ZooError` naming the valid
    ones."""
    if not isinstance(profile, str) or profile not in PROFILE_NAMES:
        names = ", ".join(PROFILE_NAMES)
        raise ZooError(f"unknown report profile {profile!r}; valid profiles: {names}")
    return profiles()[profile]


def engine_options(
    profile: str,
    engine: str,
    accepted: Mapping[str, Any],
    model_defaults: Mapping[str, Any] | None = None,
    override: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Options for one engine of one model under ``profile``.

    ``accepted`` are the options the engine takes (its defaults); profile options outside it are
    dropped. ``model_defaults`` are the model's ``engine_options[engine]``; ``override`` (the
    caller's) wins over everything and is not filtered, so a typo there is an error downstream.
    """
    opts = {k: v for k, v in check_profile(profile).get(engine, {}).items() if k in accepted}
    for key, value in (model_defaults or {}).items():
        if key in opts and key in COUNT_OPTIONS and _is_int(value) and _is_int(opts[key]):
            opts[key] = max(opts[key], value)
        elif key in opts:
            opts[key] = value
    opts.update(override or {})
    return opts


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)
