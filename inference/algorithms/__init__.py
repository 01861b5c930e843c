"""Generic reference algorithms, written on plain arrays and parameters (no model knowledge).

One module per family: ``hmm`` (forward–backward, Viterbi, Baum–Welch), ``kalman`` (the
local-level filter, RTS smoother and marginal). Models bind them as reference engines.
"""
