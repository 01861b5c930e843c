"""Other libraries' implementations: hmmlearn, statsmodels and scikit-learn on plain arrays (the
peers the zoo's reference engines are checked against), and nutpie's sampler on the zoo's log
density (the ``nutpie`` engine). Each imports its library when called, with one clear error when
it is missing."""
