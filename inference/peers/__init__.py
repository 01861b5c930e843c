"""Other libraries' implementations (hmmlearn, statsmodels, scikit-learn) run on plain arrays:
the peers the zoo's reference engines are checked against. Each imports its library when called,
with one clear error when it is missing."""
