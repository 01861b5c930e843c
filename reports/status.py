"""A failed run's error explained in words. The status a report shows is the run's own
(``run.status``, ``run.reasons``: the one verdict of :mod:`zoo_inference.verdict`)."""

from __future__ import annotations

FAILURES = (
    (
        "ELBO is",
        "The optimisation diverged: the ELBO became NaN or infinite (try a smaller "
        "learning rate or a better-scaled model).",
    ),
    (
        "every transition diverged",
        "Every MCMC transition diverged: the sampler could not move "
        "through this posterior (reparameterise, or raise target_accept).",
    ),
    (
        "valid initial",
        "No starting point with a finite log density was found: the model's log "
        "density is NaN or -inf wherever the sampler looked.",
    ),
    (
        "Expected parameter",
        "A distribution received a parameter outside its support during the "
        "run, usually after a numerical overflow.",
    ),
    (
        "importance weight",
        "Every importance weight was zero or NaN: the proposal never hit the posterior.",
    ),
    ("log evidence is", "The exact log evidence came out NaN or infinite."),
)


def explain_failure(error: str | None) -> str:
    """A failed run's reason in plain words, to show before the raw error."""
    text = str(error or "")
    for needle, plain in FAILURES:
        if needle in text:
            return plain
    return "The engine stopped with an error while it ran."
