"""vae, cvae and vade on the digits: the closed-form Gaussian KL against the catalogue's oracle
(recomputed by torch and by Monte Carlo), training that raises the held-out log-likelihood,
importance sampling at or above the ELBO, the same numbers from the same seed, the per-datapoint
importance weights and the importance-weighted ELBO under subsampling against exact answers,
the clustering accuracy and its peers, the engines that do not apply saying why, and the page.

The runs here are short (a few hundred steps); the ``slow`` ones take the quick profile's
budget (zoo/models/deep.py's docstring says what the report's budgets reach)."""

from __future__ import annotations

import math

import numpy as np
import pyro
import pyro.distributions as dist
import pyro.poutine as poutine
import pytest
import torch
from pyro.infer import RenyiELBO
from scipy.stats import norm

import zoo
from tests.seeding import shifted
from zoo.api import comparison
from zoo.cli import main
from zoo.models import deep
from zoo_inference.algorithms.evaluation import cluster_accuracy, gaussian_kl
from zoo_inference.amortised import SubsampledRenyiELBO, fixed_subsample
from zoo_reports.render import fmt_num, render_model_page

VAE = zoo.get_model("vae")
SHORT = {"num_steps": 300, "num_samples": 50}  # a short fit: seconds, enough to learn a lot


@pytest.fixture(scope="module")
def untrained():
    """One step from the initial networks (estimator B, the KL in closed form): the held-out
    scores of an untrained model."""
    with pytest.MonkeyPatch.context() as mp:
        few_held_out_draws(mp)
        return zoo.run(VAE, "svi_meanfield", num_steps=1, num_samples=20, seed=0)


def few_held_out_draws(mp: pytest.MonkeyPatch) -> None:
    """Held-out scores from 100 + 20 draws per image instead of 1000 + 100 (tests that do not
    judge the estimate itself; a tenth of the time)."""
    mp.setattr(deep, "HELD_OUT_PARTICLES", 100)
    mp.setattr(deep, "HELD_OUT_ELBO_PARTICLES", 20)


@pytest.fixture
def quick_scores(monkeypatch):
    few_held_out_draws(monkeypatch)


@pytest.fixture(scope="module")
def trained():
    return zoo.run(VAE, "svi", seed=0, **SHORT)


# ------------------------------------------------------------------------- the KL oracle


def test_gaussian_kl_matches_the_catalogue_oracle():
    """KL(N(0, I_2) || N((1, 0), 2 I)) = ln 2 - 0.25 (CATALOG §5; 002 L6978–6992)."""
    kl = gaussian_kl([0.0, 0.0], [1.0, 1.0], [1.0, 0.0], [2.0, 2.0])
    assert float(kl) == pytest.approx(math.log(2) - 0.25, abs=1e-12)
    # torch's closed form for full covariances, independently
    f64 = dict(dtype=torch.float64)
    p = torch.distributions.MultivariateNormal(torch.zeros(2, **f64), torch.eye(2, **f64))
    q = torch.distributions.MultivariateNormal(
        torch.tensor([1.0, 0.0], **f64), 2 * torch.eye(2, **f64)
    )
    assert float(torch.distributions.kl_divergence(p, q)) == pytest.approx(float(kl), abs=1e-12)
    # Monte Carlo: the mean of log p(x) - log q(x), x ~ p, within 4 standard errors
    x = p.sample((200_000,))
    terms = (p.log_prob(x) - q.log_prob(x)).numpy()
    se = terms.std() / math.sqrt(len(terms))
    assert abs(terms.mean() - float(kl)) < 4 * se


def test_the_vae_kl_term_is_pyros_analytic_kl():
    """With m2 = 0, S2 = I the closed form is the KL term TraceMeanField_ELBO takes from Pyro's
    kl_divergence (the seed's eq 168: 1/2 sum (m^2 + s^2 - 1 - log s^2))."""
    m, s = torch.tensor([0.3, -1.2, 2.0]), torch.tensor([0.5, 1.5, 0.1])
    ours = gaussian_kl(m, s**2, torch.zeros(3), torch.ones(3))
    pyros = torch.distributions.kl_divergence(
        dist.Normal(m, s).to_event(1), dist.Normal(torch.zeros(3), torch.ones(3)).to_event(1)
    )
    eq168 = 0.5 * (m**2 + s**2 - 1 - torch.log(s**2)).sum()
    assert float(ours) == pytest.approx(float(pyros), rel=1e-6)
    assert float(ours) == pytest.approx(float(eq168), rel=1e-6)


def test_networks_are_built_afresh_for_each_run():
    """zoo.network: one module within a run (Pyro's param store holds its weights), a new one
    drawn from torch's generator once the store is cleared (as each run starts): the same seed,
    the same initial weights."""

    def build():
        return torch.nn.Linear(2, 3)

    pyro.clear_param_store()
    torch.manual_seed(0)
    a = zoo.network("test_net", build)
    assert zoo.network("test_net", build) is a
    assert "test_net$$$weight" in pyro.get_param_store()
    first = a.weight.detach().clone()
    pyro.clear_param_store()
    torch.manual_seed(0)
    b = zoo.network("test_net", build)
    assert b is not a and torch.equal(b.weight, first)
    pyro.clear_param_store()


# ------------------------------------------------------------- per-datapoint weights, IWAE


def conjugate(x, batch=None, scale=None, shift=0.0):
    """z_i ~ N(0, 1), x_i | z_i ~ N(z_i, 1) (so p(x_i) = N(0, 2)), and a guide q(z_i | x_i) =
    N(x_i / 2 + shift, scale): the exact posterior when shift = 0 and scale = sqrt(1/2)."""
    n = len(x)
    sub = None if batch is None else min(batch, n)

    def model():
        with pyro.plate("data", n, subsample_size=sub) as idx:
            z = pyro.sample("z", dist.Normal(0.0, 1.0))
            pyro.sample("x", dist.Normal(z, 1.0), obs=x[idx])

    def guide():
        with pyro.plate("data", n, subsample_size=sub) as idx:
            pyro.sample("z", dist.Normal(x[idx] / 2 + shift, scale or math.sqrt(0.5)))

    return model, guide


@pytest.mark.parametrize("batch", [None, 3])
def test_pointwise_weights_of_the_exact_posterior_are_the_evidence(batch):
    """With the exact posterior as the guide every weight p(x, z)/q(z | x) is p(x) = N(x | 0, 2):
    each data point's K weights equal scipy's log density, with or without subsampling (7 points
    in minibatches of 3: the last one overlaps)."""
    x = torch.linspace(-2.0, 3.0, 7)
    model, guide = conjugate(x, batch)
    lw = zoo.pointwise_log_weights(model, guide, {}, 5, max_plate_nesting=1)
    assert lw.shape == (5, 7)
    expected = norm(0, math.sqrt(2)).logpdf(x.numpy())
    np.testing.assert_allclose(lw, np.broadcast_to(expected, lw.shape), atol=1e-5)


def test_pointwise_weights_sum_out_enumerated_clusters():
    """A mixture prior, c_i enumerated in the model: with a point-mass guide at z = x / 2
    (log q = 0), log w = log sum_c pi_c N(z | m_c, 1) + log N(x | z, 1), computed by scipy."""
    x = torch.tensor([-1.0, 0.5, 2.0])
    pi, m = torch.tensor([0.3, 0.7]), torch.tensor([-2.0, 1.0])

    def model():
        with pyro.plate("data", 3):
            c = pyro.sample("c", dist.Categorical(pi), infer={"enumerate": "parallel"})
            z = pyro.sample("z", dist.Normal(m[c], 1.0))
            pyro.sample("x", dist.Normal(z, 1.0), obs=x)

    def guide():
        with pyro.plate("data", 3):
            pyro.sample("z", dist.Delta(x / 2))

    lw = zoo.pointwise_log_weights(model, guide, {}, 4, max_plate_nesting=1)
    z = x.numpy() / 2
    prior = np.log((pi.numpy()[:, None] * norm(m.numpy()[:, None], 1).pdf(z)).sum(0))
    expected = prior + norm(z, 1).logpdf(x.numpy())
    np.testing.assert_allclose(lw, np.broadcast_to(expected, lw.shape), atol=1e-5)


@pytest.mark.filterwarnings("ignore:Found plate statements")  # the minibatch fixed by hand
def test_iwae_bound_on_a_minibatch_is_the_scaled_sum_of_per_point_bounds():
    """On a minibatch U of 4 of N = 12 points the importance-weighted bound is (N/|U|) sum_{i in
    U} log (1/K) sum_k w_ik, the particles sharing the minibatch: an unbiased estimate of the
    full-data bound sum_i log (1/K) sum_k w_ik, checked on the same draws by hand. Pyro's
    RenyiELBO weighs each point's particles by w^(N/|U|) instead, a tempered objective above
    the bound; without subsampling the two agree number for number."""
    x = torch.linspace(-2.0, 2.0, 12)
    n, batch, K = 12, 4, 4
    model, guide = conjugate(x, batch, scale=1.0, shift=0.7)
    idx = torch.tensor([1, 5, 6, 10])
    fixed = [fixed_subsample(fn, {"data": idx}) for fn in (model, guide)]
    kw = dict(alpha=0.0, num_particles=K, max_plate_nesting=1, vectorize_particles=True)
    pyro.set_rng_seed(shifted(0))
    ours = -SubsampledRenyiELBO(**kw).loss(*fixed)
    pyro.set_rng_seed(shifted(0))
    tempered = -RenyiELBO(**kw).loss(*fixed)
    pyro.set_rng_seed(shifted(0))  # the same draws: z (K, |U|) from the guide under a plate
    with pyro.plate("particles", K, dim=-2):
        z = poutine.trace(fixed[1]).get_trace().nodes["z"]["value"]
    xb = x[idx]
    lw = (
        dist.Normal(0.0, 1.0).log_prob(z)
        + dist.Normal(z, 1.0).log_prob(xb)
        - dist.Normal(xb / 2 + 0.7, 1.0).log_prob(z)
    ).double()
    assert ours == pytest.approx(n / batch * float((lw.logsumexp(0) - math.log(K)).sum()))
    tempered_by_hand = ((n / batch * lw).logsumexp(0) - math.log(K)).sum()
    assert tempered == pytest.approx(float(tempered_by_hand), rel=1e-5)
    assert tempered > ours + 1.0
    full = conjugate(x, None, scale=1.0, shift=0.7)
    kw.pop("vectorize_particles")
    pyro.set_rng_seed(1)
    mine = SubsampledRenyiELBO(**kw).loss(*full)
    pyro.set_rng_seed(1)
    assert mine == RenyiELBO(**kw).loss(*full)


# ---------------------------------------------------------------------- training and scores


def test_training_raises_the_held_out_log_likelihood(untrained, trained):
    """300 steps (20 passes over the data) raise the held-out log-likelihood per image by
    far more than its Monte-Carlo error (measured: about -90 untrained, about +30 after), and
    the training ELBO with it."""
    before, after = untrained.diagnostics, trained.diagnostics
    assert (before["elbo_kind"], after["elbo_kind"]) == ("meanfield", "trace")
    assert after["heldout_particles"] >= 500 and after["heldout_images"] == 297
    gain = after["heldout_log_lik"] - before["heldout_log_lik"]
    se = math.hypot(after["heldout_log_lik_se"], before["heldout_log_lik_se"])
    assert gain > 50 and gain > 10 * se, (gain, se)
    assert trained.log_evidence > untrained.log_evidence + 50 * 1500


def test_importance_sampling_is_at_or_above_the_elbo(trained):
    """On the same held-out images, the importance estimate of log p(x) (K = 1000) is at least
    the ELBO (independent draws) up to Monte-Carlo error: the bound's gap is a KL >= 0. The
    run's evidence is the training ELBO (a lower bound), below its importance estimate."""
    d = trained.diagnostics
    se = math.hypot(d["heldout_log_lik_se"], d["heldout_elbo_se"])
    assert d["heldout_log_lik"] >= d["heldout_elbo"] - 3 * se
    assert trained.evidence.kind == "lower_bound"
    assert d["is_log_evidence"] >= trained.log_evidence


def test_the_run_holds_one_minibatch_of_draws(trained):
    """The posterior group holds the first minibatch's latents (100 images), not all 1500."""
    assert trained.idata.posterior["z"].shape == (1, 50, 100, 8)
    assert trained.diagnostics["importance_draws_per_point"] == 50
    grids = trained.extras["images"]
    recon = grids["held-out images and their reconstructions"]
    assert recon["pixels"].shape == (2, 10, 8, 8) and recon["rows"][1] == "reconstructed"


def test_same_seed_same_numbers(quick_scores):
    a = zoo.run(VAE, "svi_iwae", num_steps=20, num_samples=20, seed=3)
    b = zoo.run(VAE, "svi_iwae", num_steps=20, num_samples=20, seed=3)
    c = zoo.run(VAE, "svi_iwae", num_steps=20, num_samples=20, seed=4)
    assert a.traces["elbo"] == b.traces["elbo"] and a.traces["elbo"] != c.traces["elbo"]
    for key in ("heldout_log_lik", "heldout_elbo", "is_log_evidence"):
        assert a.diagnostics[key] == b.diagnostics[key] != c.diagnostics[key], key
    np.testing.assert_array_equal(a.idata.posterior["z"].values, b.idata.posterior["z"].values)


def test_cvae_draws_samples_of_each_digit(quick_scores):
    run = zoo.run("cvae", "svi", num_steps=30, num_samples=20, seed=0)
    assert run.ok and np.isfinite(run.diagnostics["heldout_log_lik"])
    samples = run.extras["images"]["samples of each digit y"]
    assert samples["pixels"].shape == (10, 10, 8, 8)
    assert samples["rows"] == [f"y = {k}" for k in range(10)]


# --------------------------------------------------------------------------------- vade


def test_cluster_accuracy_matches_clusters_to_labels():
    labels = np.array([0, 0, 1, 1, 2, 2, 2])
    clusters = np.array([2, 2, 0, 0, 1, 1, 0])  # a relabelling, one point wrong
    acc, label_of = cluster_accuracy(clusters, labels)
    assert acc == pytest.approx(6 / 7)
    assert list(label_of) == [1, 2, 0]


@pytest.mark.parametrize("engine", ["sklearn", "sklearn_pca"])
def test_gaussian_mixture_peers_cluster_the_digits(engine):
    """scikit-learn's GaussianMixture on the pixels and on 8 PCA features (measured: 0.79 both
    at seed 0 with 3 starts)."""
    run = zoo.run("vade", engine, seed=0)
    assert run.ok and run.extras["cluster_accuracy"] > 0.55
    assert run.extras["heldout_cluster_accuracy"] > 0.5
    assert run.idata.posterior["c"].shape == (1, 1, 100)


def test_vade_sums_the_cluster_out_and_scores_its_clusters(quick_scores):
    run = zoo.run("vade", "svi", num_steps=30, num_samples=20, seed=0)
    d = run.diagnostics
    assert d["elbo_kind"] == "enum"
    assert 0 < d["cluster_accuracy"] <= 1 and 0 < d["heldout_cluster_accuracy"] <= 1
    assert run.idata.posterior["c"].shape == (1, 20, 100)
    assert run.extras["images"]["samples of each cluster"]["pixels"].shape == (10, 10, 8, 8)


@pytest.mark.slow
def test_vade_clusters_far_better_than_chance_at_the_quick_budget():
    """The quick profile's 1000 steps: measured 0.51-0.71 over seeds 0-3 (held-out 0.55-0.73);
    chance, clusters matched to digits, is about 0.12."""
    run = zoo.run("vade", "svi", num_steps=1000, num_samples=100, seed=0)
    assert run.diagnostics["cluster_accuracy"] > 0.35


@pytest.mark.slow
def test_iwae_and_the_meanfield_elbo_train_as_well_at_the_quick_budget():
    """Estimators A, B and the IWAE bound each reach a held-out log-likelihood within a few
    nats per image of one another at 1000 steps (measured in the report notes)."""
    engines = ("svi", "svi_meanfield", "svi_iwae")  # the Bayesian decoder: test_bayes_decoder
    runs = {e: zoo.run(VAE, e, num_steps=1000, num_samples=100, seed=0) for e in engines}
    lls = {e: r.diagnostics["heldout_log_lik"] for e, r in runs.items()}
    assert max(lls.values()) - min(lls.values()) < 10, lls
    assert all(ll > 30 for ll in lls.values()), lls


# ------------------------------------------------------------------- engines, CLI, report


def test_engines_that_do_not_apply_say_why(capsys):
    assert VAE.engines == ("svi", "svi_meanfield", "svi_iwae", "svi_bayes_decoder")
    for engine in ("nuts", "hmc", "chees", "mams", "mh", "importance", "laplace", "pathfinder"):
        assert "amortised" in VAE.why_not(engine), engine
    assert "no discrete" in VAE.why_not("enum")  # the structure's own reason comes first
    assert "amortised" in zoo.get_model("vade").why_not("enum")
    with pytest.raises(zoo.ZooError, match="amortised"):
        zoo.run(VAE, "nuts")
    assert main(["info", "vae"]) == 0
    out = capsys.readouterr().out
    assert "generic engines that do not apply" in out and "amortised" in out


def test_a_model_states_why_it_leaves_engines_out(registry):
    """``register(..., not_applicable=...)``: one sentence for every engine left out, or one
    per engine with ``"*"`` for the rest; refused for an engine the model keeps."""

    def coin(y):
        p = pyro.sample("p", dist.Beta(1.0, 1.0))
        with pyro.plate("n", len(y)):
            pyro.sample("y", dist.Bernoulli(p), obs=y)

    data = {"y": torch.tensor([1.0, 0.0])}
    e = zoo.register(
        "coin_left_out",
        model=coin,
        data=data,
        engines=("svi", "nuts"),
        not_applicable={"mh": "random walks are slow here", "*": "not taught"},
    )
    assert e.why_not("mh") == "random walks are slow here"
    assert e.why_not("hmc") == "not taught" and e.why_not("nuts") is None
    with pytest.raises(zoo.ZooError, match="random walks are slow"):
        zoo.run(e, "mh")
    plain = zoo.register("coin_plain", model=coin, data=data, engines=("svi",))
    assert plain.why_not("nuts") == "it is not among the engines the model registered"
    with pytest.raises(ValueError, match="not generic engines the model leaves out"):
        zoo.register("bad", model=coin, data=data, engines=("svi",), not_applicable={"svi": "x"})
    with pytest.raises(ValueError, match="needs engines"):
        zoo.register("bad2", model=coin, data=data, not_applicable="x")


def test_cli_runs_the_vae_and_prints_its_held_out_scores(capsys, quick_scores):
    argv = ["run", "vae", "--engine", "svi", "-q", "-o", "num_steps=5", "-o", "num_samples=10"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert '"heldout_log_lik"' in out and '"heldout_elbo"' in out


def test_the_page_shows_held_out_scores_and_image_grids(untrained, trained):
    runs = {"svi": trained, "svi_early": untrained}
    cmp = comparison(VAE, runs, VAE.load_data(), seed=0)
    files = render_model_page(cmp)
    html, md = files["vae.html"], files["vae.md"]
    assert "Scores of each fit" in html and "held-out log-likelihood" in html
    assert fmt_num(trained.diagnostics["heldout_log_lik"], 5) in md
    assert "Images: reconstructions and samples" in html
    assert "svi has the highest held-out log-likelihood" in html
