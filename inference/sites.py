"""The distribution and the value of a traced sample site, typed.

Pyro types every message alike: its ``fn`` as any callable and its ``value`` as optional (a
message on its way through the handlers may not have one yet). At a sample site of a finished
trace ``fn`` is the site's distribution and ``value`` its value; every sample message has its
``infer`` dict (``pyro.sample`` makes one where none is given).
"""

from __future__ import annotations

from typing import cast

import torch
from pyro.distributions import TorchDistribution, constraints
from pyro.poutine.runtime import InferDict, Message


def site_dist(site: Message) -> TorchDistribution:
    """The distribution of a sample site."""
    return cast(TorchDistribution, site["fn"])


def site_support(site: Message) -> constraints.Constraint:
    """The support of a sample site's distribution (torch types it optional: the base class's
    is not defined)."""
    support = site_dist(site).support
    assert support is not None, f"sample site {site.get('name')!r} without a support"
    return support


def site_value(site: Message) -> torch.Tensor:
    """The value of a sample site of a trace (drawn, given or observed)."""
    value = site["value"]
    assert value is not None, f"site {site.get('name')!r} of a trace without a value"
    return value


def site_infer(site: Message) -> InferDict:
    """The ``infer`` dict of a sample site."""
    infer = site["infer"]
    assert infer is not None, f"sample site {site.get('name')!r} without an infer dict"
    return infer
