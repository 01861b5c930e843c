"""Generic reference algorithms, written on plain arrays and parameters: no module here knows a
zoo model. Models bind them as reference engines and ground truths.

By model structure: ``hmm`` (forward–backward, Viterbi, Baum–Welch, sampling), ``kalman``
(local-level filter, RTS smoother, marginal), ``ppca`` (PPCA and mixture-of-PPCA closed form and
EM), ``gp`` (RBF Gaussian-process regression), ``linear`` (Bayesian linear regression, RLS,
ridge), ``markov`` (bigram chains). By method: ``em`` (mixture EM), ``gibbs`` (Gibbs kernels and
samplers), ``cavi`` (coordinate-ascent VI), ``conjugate`` (conjugate updates), ``univariate``
(slice sampling, truncated normal draws, piecewise-exponential pieces), ``ars`` (adaptive
rejection sampling of log-concave densities), ``gradients`` (gradient-estimator studies),
``evaluation`` (held-out scores, clustering accuracy).
"""
