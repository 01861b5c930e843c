"""Distributions and constraints the models share: normal draws listed in increasing order
(scalars, or points by their first coordinate), priors that remove a mixture's label-switching
modes without changing the model otherwise; a categorical with the moments of its index."""

from __future__ import annotations

from typing import Any

import pyro.distributions as dist
import torch
from pyro.distributions import constraints
from torch.distributions import biject_to, transform_to


class IndexCategorical(dist.Categorical):
    """A Categorical whose mean and variance are those of its value 0..K-1 (torch's are
    undefined): the moments a table reports for a label or a topic posterior."""

    @property
    def mean(self) -> torch.Tensor:
        k = torch.arange(self.probs.shape[-1], dtype=self.probs.dtype)
        return (self.probs * k).sum(-1)

    @property
    def variance(self) -> torch.Tensor:
        k = torch.arange(self.probs.shape[-1], dtype=self.probs.dtype)
        return (self.probs * k**2).sum(-1) - self.mean**2


class SortedNormal(dist.TorchDistribution):
    """K iid Normal(loc, scale) draws, sorted: the law of their order statistics.

    Density K! prod_k N(x_k | loc, scale) on x_1 < ... < x_K. Used as the prior of mixture
    locations, it removes the K! label-switching modes without changing the model otherwise.
    """

    arg_constraints = {"loc": constraints.real, "scale": constraints.positive}
    support = constraints.ordered_vector

    def __init__(self, loc: torch.Tensor, scale: torch.Tensor, size: int, validate_args=None):
        self.loc, self.scale, self.size = torch.as_tensor(loc), torch.as_tensor(scale), size
        super().__init__(torch.Size(), torch.Size([size]), validate_args=validate_args)

    def sample(self, sample_shape: torch.Size | list[int] | tuple[int, ...] = ()) -> torch.Tensor:
        with torch.no_grad():
            shape = torch.Size(sample_shape) + (self.size,)
            base = dist.Normal(self.loc, self.scale).sample(shape)
            return base.sort(-1).values

    def log_prob(self, value: torch.Tensor) -> torch.Tensor:
        lp = dist.Normal(self.loc, self.scale).log_prob(value).sum(-1)
        return lp + torch.lgamma(torch.tensor(self.size + 1.0))


class _FirstColumnIncreasing(constraints.Constraint):
    """(C, D) matrices whose first column increases down the rows: C points of R^D listed in
    increasing order of their first coordinate."""

    event_dim = 2

    def check(self, value: torch.Tensor) -> torch.Tensor:
        first = value[..., 0]
        return (first[..., 1:] > first[..., :-1]).all(-1)


first_column_increasing = _FirstColumnIncreasing()


class FirstColumnIncreasingTransform(dist.transforms.Transform):
    """R^(C x D) -> :data:`first_column_increasing`: Pyro's ordered transform (y_1 = x_1, y_c =
    y_(c-1) + exp(x_c)) on the first column, the identity on the others."""

    domain = constraints.independent(constraints.real, 2)
    codomain = first_column_increasing
    bijective = True
    _ordered = dist.transforms.OrderedTransform()

    def __eq__(self, other: object) -> bool:
        return isinstance(other, FirstColumnIncreasingTransform)

    def __hash__(self) -> int:
        return hash(type(self))

    def _call(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cat([self._ordered(x[..., 0]).unsqueeze(-1), x[..., 1:]], -1)

    def _inverse(self, y: torch.Tensor) -> torch.Tensor:
        return torch.cat([self._ordered.inv(y[..., 0]).unsqueeze(-1), y[..., 1:]], -1)

    def log_abs_det_jacobian(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return x[..., 1:, 0].sum(-1)


# NUTS, autoguides and pyro.param map the constraint to the unconstrained space through these
biject_to.register(_FirstColumnIncreasing)(lambda _: FirstColumnIncreasingTransform())
transform_to.register(_FirstColumnIncreasing)(lambda _: FirstColumnIncreasingTransform())


class SortedPointsNormal(dist.TorchDistribution):
    """C iid points of R^D with N(loc, scale^2) coordinates, listed by increasing first
    coordinate: density C! prod_(c, j) N(x_cj | loc, scale) on x_11 < ... < x_C1.

    As the prior of the mixture's means it removes the C! label-switching modes without changing
    the model otherwise (the multivariate counterpart of :class:`SortedNormal`)."""

    arg_constraints = {"loc": constraints.real, "scale": constraints.positive}
    support = first_column_increasing

    def __init__(self, loc: Any, scale: Any, C: int, D: int, validate_args: Any = None) -> None:
        self.loc, self.scale, self.C, self.D = torch.as_tensor(loc), torch.as_tensor(scale), C, D
        super().__init__(torch.Size(), torch.Size([C, D]), validate_args=validate_args)

    def sample(self, sample_shape: torch.Size | list[int] | tuple[int, ...] = ()) -> torch.Tensor:
        with torch.no_grad():
            shape = torch.Size(sample_shape) + (self.C, self.D)
            x = dist.Normal(self.loc, self.scale).sample(shape)
            order = x[..., 0].argsort(-1)
            return torch.gather(x, -2, order.unsqueeze(-1).expand(x.shape))

    def log_prob(self, value: torch.Tensor) -> torch.Tensor:
        lp = dist.Normal(self.loc, self.scale).log_prob(value).sum((-1, -2))
        return lp + torch.lgamma(torch.tensor(self.C + 1.0))
