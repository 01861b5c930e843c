"""What a model's reference algorithm returns: plain data, turned into a :class:`Run` by the
runner (:mod:`zoo_inference.reference`). A model module builds one of these and nothing else.

- :class:`Estimate`: a point estimate (EM, MAP, ridge), with its objective traces;
- :class:`Draws`: posterior draws (Gibbs), per chain or as one chain;
- :class:`Factors`: per-site distributions (a closed-form posterior, CAVI's factors).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .results import EvidenceKind, ZooError
from .structure import ModelStructure


@dataclass
class Estimate:
    """A point estimate of some latent sites.

    ``values``: site -> array of the site's shape. ``traces``: objective per iteration, by name
    (``{"log_likelihood": [...]}``). ``log_evidence``: log p(y | estimate) (evidence kind
    ``conditional`` on the estimated sites) unless ``evidence_kind`` says otherwise.
    ``diagnostics``: numbers that join the run's diagnostics (what the algorithm estimates
    beside the sites, e.g. NCE's log-normaliser and its standard error).
    """

    values: Mapping[str, Any]
    traces: Mapping[str, Sequence[float]] = field(default_factory=dict)
    log_evidence: float | None = None
    evidence_kind: EvidenceKind = "conditional"
    extras: Mapping[str, Any] = field(default_factory=dict)
    diagnostics: Mapping[str, Any] = field(default_factory=dict)


@dataclass
class Draws:
    """Posterior draws: site -> array shaped ``(chain, draw, *site_shape)``, or
    ``(draw, *site_shape)`` with ``chains=False`` (one chain). With several chains the run gets
    R-hat and ESS."""

    values: Mapping[str, Any]
    chains: bool = False
    traces: Mapping[str, Sequence[float]] = field(default_factory=dict)
    log_evidence: float | None = None
    evidence_kind: EvidenceKind = "estimate"
    extras: Mapping[str, Any] = field(default_factory=dict)


@dataclass
class Factors:
    """Per-site distributions (``pyro.distributions`` objects whose ``event_shape`` +
    ``batch_shape`` is the site's shape): their exact means and sds are the run's summary, and
    ``num_samples`` draws from each (independently across sites) its posterior group.

    A closed-form posterior gives the exact marginals (``evidence_kind="exact"``); CAVI gives
    its variational factors (``"lower_bound"``, the ELBO)."""

    dists: Mapping[str, Any]
    traces: Mapping[str, Sequence[float]] = field(default_factory=dict)
    log_evidence: float | None = None
    evidence_kind: EvidenceKind = "exact"
    extras: Mapping[str, Any] = field(default_factory=dict)


Output = Estimate | Draws | Factors


def check_values(
    engine: str,
    kind: str,
    values: Mapping[str, Any],
    structure: ModelStructure,
    lead: tuple[str, ...],
) -> None:
    """Raises :class:`~zoo_inference.results.ZooError` where what ``engine`` returned (``kind``:
    ``"Draws"``, ``"Estimate"``, ``"Factors"``, ``"Run"``) does not fit the model's sites:
    a name the model has no latent or deterministic site of, an array whose shape is not the
    leading dimensions ``lead`` (``("chain", "draw")``) followed by the site's shape, a
    non-numeric dtype, or a value that is not finite. One error, naming the engine, the site,
    the shape expected and the shape received. ``values``: site -> array, or for ``Factors``
    site -> (a distribution's shape, None)."""
    known = {*structure.latent, *structure.deterministic}
    for site, value in values.items():
        if site not in known:
            raise ZooError(
                f"engine {engine!r} returned {kind} of site {site!r}, which the model does not "
                f"have (its latent and deterministic sites: {', '.join(sorted(known)) or 'none'})"
            )
        if structure.subsampled:  # a site's shape there is one subsample's
            continue
        want = tuple(structure.shapes.get(site, ()))
        shape = tuple(np.shape(value)) if not isinstance(value, tuple) else value
        if len(shape) != len(lead) + len(want) or shape[len(lead) :] != want:
            dims = ", ".join([*lead, *map(str, want)])
            raise ZooError(
                f"engine {engine!r} returned {kind} of site {site!r} shaped {shape}; the model's "
                f"site is shaped {want}, so {kind} must be shaped ({dims})"
            )
        if isinstance(value, tuple):
            continue
        array = np.asarray(value)
        if not (np.issubdtype(array.dtype, np.number) or array.dtype == np.bool_):
            raise ZooError(
                f"engine {engine!r} returned {kind} of site {site!r} with dtype {array.dtype}; "
                "it must be numeric"
            )
        if np.issubdtype(array.dtype, np.floating) and not np.isfinite(array).all():
            bad = int((~np.isfinite(array)).sum())
            raise ZooError(
                f"engine {engine!r} returned {kind} of site {site!r} with {bad} values that are "
                "not finite (NaN or inf)"
            )
