"""What a model's reference algorithm returns: plain data, turned into a :class:`Run` by the
runner (:mod:`inference.reference`). A model module builds one of these and nothing else.

- :class:`Estimate`: a point estimate (EM, MAP, ridge), with its objective traces;
- :class:`Draws`: posterior draws (Gibbs), per chain or as one chain;
- :class:`Factors`: per-site distributions (a closed-form posterior, CAVI's factors).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .results import EvidenceKind


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
