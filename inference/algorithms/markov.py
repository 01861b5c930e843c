"""First-order Markov chains over a vocabulary (seed 002 §15.2, §23.1): bigram counts, the
maximum-likelihood transition matrix, cross-entropy and perplexity, the stationary distribution."""

from __future__ import annotations

import numpy as np
import torch


def bigram_counts(prev: torch.Tensor, word: torch.Tensor, num_words: int) -> torch.Tensor:
    """C[i, j] = Count(w_{t-1} = i, w_t = j) (rows: previous word)."""
    flat = torch.bincount(prev * num_words + word, minlength=num_words * num_words)
    return flat.reshape(num_words, num_words).to(torch.get_default_dtype())


def bigram_mle(counts: torch.Tensor) -> torch.Tensor:
    """P(w_t = j | w_{t-1} = i) = C[i, j] / C[i, .] (seed 002 §23.1, L4691). A word never
    followed by another (a row of zeros) has no MLE: its row is NaN."""
    totals = counts.sum(-1, keepdim=True)
    return torch.where(totals > 0, counts / totals.clamp(min=1), torch.nan)


def cross_entropy(transition: torch.Tensor, prev: torch.Tensor, word: torch.Tensor) -> float:
    """-(1/T) sum_t log P(w_t | w_{t-1}) over the T bigrams (seed 002 eq 23.2), in nats."""
    return float(-torch.log(transition[prev, word]).mean())


def perplexity(transition: torch.Tensor, prev: torch.Tensor, word: torch.Tensor) -> float:
    """PPL = exp(cross-entropy) = P(w_2..w_T | w_1)^(-1/T) (seed 002 §23.1.2, L4735)."""
    return float(np.exp(cross_entropy(transition, prev, word)))


def stationary_distribution(transition: torch.Tensor) -> torch.Tensor:
    """pi with pi^T P = pi^T, sum pi = 1: the eigenvector of P^T for eigenvalue 1
    (seed 002 §15.2, L2741-2747)."""
    vals, vecs = torch.linalg.eig(transition.T.to(torch.float64))
    v = vecs[:, torch.argmin((vals - 1).abs())].real
    return v / v.sum()
