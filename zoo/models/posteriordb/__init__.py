"""posteriordb's reference posteriors (stan-dev/posteriordb, BSD-3-Clause; Magnusson, Bürkner &
Vehtari 2022, "posteriordb: a set of posteriors for Bayesian inference and probabilistic
programming"), each a Pyro translation of its Stan program, with posteriordb's reference
draws as its truth.

Each zoo model reads like its Stan program and keeps Stan's parameter names (Stan's ``beta``
vector is the site ``beta``, its ``beta[1]`` the summary row ``beta[0]``); posteriors that share
a program's form share a model function, and each is registered as ``pdb_<posterior>`` (``-``
as ``_``) on its own data, with the design its program's ``transformed data`` block builds. A
parameter without a prior statement gets Stan's implicit flat prior on its support
(``ImproperUniform``). The data are float64, as Stan's: a translation's log joint minus Stan's
log density is then constant to round-off at the reference draws
(tests/zoo/models/test_posteriordb.py reads Stan's values from tests/data/stan_log_densities/,
written by benchmarks/stan_log_densities.py). Where round-off is out of reach (an ODE
solver's error, an ill-conditioned Cholesky factor) the registration declares a ``Tolerance``
with its measured reason; where the zoo's NUTS fails the slow check against the reference,
``nuts_fails`` says why (:func:`zoo.models.posteriordb.base.posterior`).

The truth is the reference posterior, on the posterior's own data only: each parameter's mean
and sd, and the mean's Monte-Carlo standard error (ESS-based); its E[x^2], Var[x^2] and 5/50/95%
quantiles with their standard errors are in ``zoo_datasets.posteriordb.posteriordb_reference``.

Every posterior here is ``opt_in``: a whole-zoo report leaves them out; ``zoo report
pdb_kidiq_kidscore_momiq ...`` runs one.

One module per kind of model: ``arm`` (the ARM book's regressions), ``regressions`` (the
other linear regressions), ``hierarchical`` (hierarchical models), ``time_series`` (AR and
ARMA regressions), ``mixtures`` (finite mixtures), ``hmm`` (hidden Markov models, the states
summed out; their exact marginals given each reference draw join the truth),
``gaussian_processes`` (Stan's benchmark GPs), ``ode`` (ODE models). Adding a
posterior: run ``benchmarks/posteriordb_vendor.py PATH POSTERIOR`` (its data, program and
reference land in datasets/posteriordb/), write or reuse the model function in its kind's module
and register it with :func:`zoo.models.posteriordb.base.posterior`, then run
``benchmarks/stan_log_densities.py POSTERIOR`` for Stan's log densities at its reference draws
(tests/data/stan_log_densities/POSTERIOR.json).
"""

from . import (  # noqa: F401
    arm,
    gaussian_processes,
    hierarchical,
    hmm,
    mixtures,
    ode,
    regressions,
    time_series,
)
