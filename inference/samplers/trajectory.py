"""ChEES's adaptation of what all its chains share (Hoffman, Radul & Sountsov 2021): the
trajectory length T by Adam on the ChEES criterion (:class:`TrajectoryLength`), its Halton
jitter (:func:`halton`), and the chains stuck far below the others, restarted at a warmup
window's end (:func:`stuck_chains`)."""

from __future__ import annotations

import math

import torch

from .integrator import velocity

CHEES_LOG_CLIP = 0.35  # the largest move of log T per warmup iteration (TFP's log(2) / 2)

# ChEES restarts a chain at a warmup window's end when its mean log density over the window is
# this many nats (plus 4 sds of a typical set's log density, 4 sqrt(D / 2)) below the best
# chain's: gaussian_mixture's chains in the one-wide-component basin sat 145-155 nats below.
STUCK_NATS = 20.0


def halton(i: int, base: int = 2) -> float:
    """The ``i``-th element (from 1) of the van der Corput sequence in ``base``: low-discrepancy
    jitter in (0, 1)."""
    f, r = 1.0, 0.0
    while i > 0:
        f /= base
        r += f * (i % base)
        i //= base
    return r


class Adam:
    """Adam on a scalar (Kingma & Ba 2015), maximising."""

    def __init__(self, lr: float, beta1: float = 0.0, beta2: float = 0.95) -> None:
        self.lr, self.b1, self.b2 = lr, beta1, beta2
        self.m = self.v = 0.0
        self.t = 0

    def step(self, x: float, grad: float) -> float:
        self.t += 1
        self.m = self.b1 * self.m + (1 - self.b1) * grad
        self.v = self.b2 * self.v + (1 - self.b2) * grad * grad
        m_hat = self.m / (1 - self.b1**self.t)
        v_hat = self.v / (1 - self.b2**self.t)
        return x + self.lr * m_hat / (math.sqrt(v_hat) + 1e-8)


CRITERIA = ("chees", "chees_per_grad")  # what :class:`TrajectoryLength` maximises


class TrajectoryLength:
    """ChEES's trajectory length T, adapted in warmup: Adam on log T along the gradient of the
    ``criterion``, each chain's term weighted by its acceptance probability, T starting at one
    step size, each move of log T clipped to :data:`CHEES_LOG_CLIP` and the T used the running
    average of log T with weights ``t**-0.5`` (as TFP and BlackJAX do: Adam's raw iterate is a
    random walk on the noisy gradient, which drifted to 60-200 leapfrog steps a draw on eight
    schools). ``"chees"``: the ChEES criterion E[(|q' - E q'|^2 - |q - E q|^2)^2] / 4;
    ``"chees_per_grad"``: ChEES per gradient, E[ChEES / (2 u T + h / 2)] (fun_mc's
    ``chees_per_grad_criterion``, tensorflow/probability spinoffs/fun_mc/fun_mc/sga_hmc.py, with
    power 1): ``2 u T / h + 1 / 2`` is a draw's mean number of leapfrog steps of size ``h``, so
    it weighs ChEES against the gradients spent on it, and discounts the long trajectories
    where ChEES, periodic in T, has spurious maxima (:func:`criterion_gradient`)."""

    def __init__(
        self, step: float, learning_rate: float, max_steps: int, criterion: str = "chees"
    ) -> None:
        if criterion not in CRITERIA:
            raise ValueError(f"criterion must be one of {list(CRITERIA)}, got {criterion!r}")
        self.log_T = math.log(step)  # one leapfrog step; Adam grows it from there
        self.log_T_avg, self.updates = self.log_T, 0
        self.adam, self.max_steps, self.criterion = Adam(learning_rate), max_steps, criterion

    @property
    def T(self) -> float:
        return math.exp(self.log_T)

    def update(
        self,
        u: float,
        q: torch.Tensor,
        proposal: torch.Tensor,
        p_end: torch.Tensor,
        accept: torch.Tensor,
        ok: torch.Tensor,
        inv_mass: torch.Tensor,
        step: float,
        leap_step: float | None = None,
    ) -> None:
        """One warmup iteration's move, from the chains ``ok`` (not diverged, finite) that
        integrated for ``2 u T`` in leapfrog steps of ``leap_step`` (None: ``step``) from ``q``
        to ``proposal`` (momentum ``p_end``) and accept it with probability ``accept``; T is
        kept between one and ``max_steps`` steps of ``step``."""
        if ok.sum() <= 1:
            return
        grad_log_T = criterion_gradient(
            self.criterion, u, self.T, q[ok], proposal[ok], p_end[ok], accept[ok],
            inv_mass if inv_mass.dim() == 3 else inv_mass[ok],
            step if leap_step is None else leap_step,
        )  # fmt: skip
        if math.isfinite(grad_log_T):
            log_T = self.log_T
            moved = self.adam.step(log_T, grad_log_T) - log_T
            self.updates += 1
            weight = self.updates**-0.5
            self.log_T_avg = (1 - weight) * self.log_T_avg + weight * (
                log_T + max(-CHEES_LOG_CLIP, min(CHEES_LOG_CLIP, moved))
            )
            self.log_T = min(max(self.log_T_avg, math.log(step)), math.log(self.max_steps * step))


def criterion_gradient(
    criterion: str,
    u: float,
    T: float,
    q: torch.Tensor,
    proposal: torch.Tensor,
    p_end: torch.Tensor,
    accept: torch.Tensor,
    inv_mass: torch.Tensor,
    step: float,
) -> float:
    """The chains' estimate of d criterion / d log T (:class:`TrajectoryLength`) from one
    iteration whose chains all integrated for tau = 2 u T in leapfrog steps of ``step``, from
    ``q`` to ``proposal`` (momentum ``p_end``), weighted by their acceptance probabilities
    ``accept``. With c = (|q' - E q'|^2 - |q - E q|^2)^2 / 4 and dq'/dT = 2 u dq'/dtau, a chain's
    dc/dT is 2 u (|q' - E q'|^2 - |q - E q|^2) (q' - E q') . v (v = M^-1 p', the velocity at the
    end). ChEES per gradient is c / (tau + h / 2), tau / h + 1 / 2 the mean number of leapfrog
    steps ceil(tau / h) makes, and as d tau / d log T = tau, its derivative is
    T dc/dT / (tau + h / 2) - c tau / (tau + h / 2)^2: unbiased over the Halton jitter u for
    the criterion's expectation over u (the ratio inside the expectation, as fun_mc's)."""
    qc = proposal - proposal.mean(0)
    q0 = q - q.mean(0)
    diff = (qc * qc).sum(-1) - (q0 * q0).sum(-1)
    v = velocity(p_end, inv_mass)
    g = 2 * u * diff * (qc * v).sum(-1)  # d/dT of the criterion, per chain
    w = accept
    w_sum = w.sum().clamp(min=1e-10)
    grad_log_T = float((w * g).sum() / w_sum) * T
    if criterion == "chees":
        return grad_log_T
    tau, cost = 2 * u * T, 2 * u * T + step / 2
    c = float((w * diff * diff).sum() / w_sum) / 4
    return grad_log_T / cost - c * tau / cost**2


def stuck_chains(window_lp: torch.Tensor, dim: int) -> torch.Tensor:
    """Chains (rows of ``window_lp``, their log densities over a warmup window) whose mean is
    more than ``STUCK_NATS + 4 sqrt(dim / 2)`` below the best chain's. Where a chain sits that
    far down, the posterior has exp(-20) times the mass per volume of where the best one is:
    a basin the chain fell into from its start, not a part of the posterior to keep sampling;
    and it drags the step size and trajectory length that every chain shares. A chain whose
    log density is not finite is stuck too, unless every chain's is."""
    mean = window_lp.mean(1)
    finite = torch.isfinite(mean)
    if not finite.any():
        return torch.zeros_like(finite)
    best = mean[finite].max()
    return ~finite | (mean < best - (STUCK_NATS + 4 * math.sqrt(dim / 2)))
