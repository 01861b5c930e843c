"""A sampler of your own in the zoo: the Metropolis-adjusted Langevin algorithm (MALA).

From the shell: ``zoo run normal_normal --engine mala --models examples/mala.py``.
"""

import torch

import zoo


def mala(density, theta0, *, num_samples, warmup, gen, progress=False, target_accept=0.574):
    """Metropolis-adjusted Langevin: a gradient step plus noise, then a Metropolis-Hastings test.

    ``density(theta) -> (log_density, gradient)`` on a (chains, D) batch; every chain adapts
    its own step size in warmup (Robbins-Monro on the log step, towards ``target_accept``)."""
    x = theta0.clone()
    logp, grad = density(x)
    chains, dim = x.shape
    eps = torch.full((chains, 1), 0.1, dtype=x.dtype)
    draws = torch.empty(chains, num_samples, dim, dtype=x.dtype)
    accepts = torch.empty(chains, num_samples, dtype=x.dtype)

    def log_q(to, frm, grad_frm):  # log density (up to a constant) of proposing `to` from `frm`
        return -((to - frm - eps * grad_frm) ** 2).sum(-1) / (4 * eps[:, 0])

    for i in range(warmup + num_samples):
        noise = torch.randn(x.shape, generator=gen, dtype=x.dtype)
        y = x + eps * grad + (2 * eps).sqrt() * noise
        logp_y, grad_y = density(y)
        log_ratio = logp_y - logp + log_q(x, y, grad_y) - log_q(y, x, grad)
        prob = log_ratio.clamp(max=0).exp().nan_to_num(0.0)  # a NaN proposal is refused
        accept = torch.rand(chains, generator=gen, dtype=x.dtype) < prob
        x = torch.where(accept[:, None], y, x)
        logp = torch.where(accept, logp_y, logp)
        grad = torch.where(accept[:, None], grad_y, grad)
        if i < warmup:
            eps = eps * torch.exp((prob - target_accept)[:, None] / (i + 1) ** 0.6)
        else:
            draws[:, i - warmup], accepts[:, i - warmup] = x, prob
    evals = (1 + warmup + num_samples) * chains
    return zoo.Samples(draws, {"accept": accepts}, gradient_evals=evals)


zoo.register_sampler("mala", mala, description="Metropolis-adjusted Langevin algorithm")
