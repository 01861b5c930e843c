"""Extending the zoo: a foreign model registered in the test (class decorator and function form)
runs through svi, nuts and enum with results matching its closed form; entry-point discovery."""

import sys
import textwrap

import numpy as np
import pyro
import pyro.distributions as dist
import pytest
import torch
from scipy.special import expit
from scipy.stats import norm

import zoo

X = torch.tensor([0.3, 1.1, 0.8, 1.6, 0.4, 1.2])
W = torch.tensor([-0.4, 2.3, 0.1, 1.8, 2.9, -1.0, 0.6])
PRIOR_Z = 0.3


# the generic engines that apply to a model of one continuous site, in the registry's order
ONE_CONTINUOUS_SITE = (
    "svi",
    "nuts",
    "chees",
    "hmc",
    "mams",
    "mh",
    "importance",
    "laplace",
    "pathfinder",
    "rejection",
    "inverse_cdf",
)


def closed_form(x, w):
    """mu | x is Normal (conjugate, prior N(0,1), unit noise); each z_j | w_j is Bernoulli with
    odds 0.3 N(w_j | 2, 1) / (0.7 N(w_j | 0, 1)); the two halves are independent."""
    x, w = np.asarray(x, float), np.asarray(w, float)
    prec = 1 + x.size
    mean, sd = x.sum() / prec, np.sqrt(1 / prec)
    logit = np.log(PRIOR_Z / (1 - PRIOR_Z)) + norm.logpdf(w, 2, 1) - norm.logpdf(w, 0, 1)
    pz = expit(logit)
    cov = np.eye(x.size) + 1.0
    log_px = -0.5 * (x @ np.linalg.solve(cov, x) + np.linalg.slogdet(2 * np.pi * cov)[1])
    log_pw = np.log(PRIOR_Z * norm.pdf(w, 2, 1) + (1 - PRIOR_Z) * norm.pdf(w, 0, 1)).sum()
    return mean, sd, pz, log_px, log_pw


@pytest.fixture(scope="module")
def foreign():
    """A model registered as a user would in a script: the decorator form on a function."""
    with zoo.isolated():

        @zoo.register("foreign_spikes", data={"x": X, "w": W}, seed_ref="test")
        def spikes(x, w):
            """Foreign test model: a level mu seen in x, and spikes z_j that shift w_j by 2."""
            mu = pyro.sample("mu", dist.Normal(0.0, 1.0))
            with pyro.plate("xs", len(x)):
                pyro.sample("x", dist.Normal(mu, 1.0), obs=x)
            with pyro.plate("ws", len(w)):
                z = pyro.sample("z", dist.Bernoulli(PRIOR_Z))
                pyro.sample("w", dist.Normal(2.0 * z, 1.0), obs=w)

        @spikes.truth
        def _(x, w):
            mean, sd, pz, log_px, log_pw = closed_form(x, w)
            return zoo.GroundTruth(
                {"mu": mean, "z": pz}, {"mu": sd, "z": np.sqrt(pz * (1 - pz))}, log_px + log_pw
            )

        yield zoo.get_model("foreign_spikes")


def test_registered_and_listed(foreign):
    assert "foreign_spikes" in zoo.list_models()
    assert foreign.engines == (
        "svi",
        "nuts",
        "chees",
        "hmc",
        "mams",
        "mh",
        "importance",
        "pathfinder",
        "rejection",
        "inverse_cdf",
        "enum",
    )
    assert foreign.description.startswith("Foreign test model")


def test_svi_autoguide_matches_closed_form(foreign):
    mean, sd, pz, *_ = closed_form(X, W)
    run = zoo.run(foreign, "svi", num_steps=1500, num_samples=1000, seed=0)
    assert run.diagnostics["guide"] == "normal" and run.diagnostics["elbo_kind"] == "enum"
    # the autoguide family holds mu's Normal posterior; the fit's last iterate jitters around
    # it by a tenth to a third of a posterior sd (0.2 sd at seed 2024, against a bound of 0.18
    # sd built from 1000 draws' Monte-Carlo error plus 0.02), as in test_conjugate
    assert run.summary.loc["mu", "mean"] == pytest.approx(mean, abs=0.5 * sd)
    assert run.summary.loc["mu", "sd"] == pytest.approx(sd, rel=0.25)
    # z does not depend on mu, so its recovered draws are exact: binomial error only
    for j, p in enumerate(pz):
        se = np.sqrt(p * (1 - p) / 1000)
        assert run.summary.loc[f"z[{j}]", "mean"] == pytest.approx(p, abs=4 * se + 1e-9)


def test_nuts_matches_closed_form(foreign):
    mean, sd, pz, *_ = closed_form(X, W)
    run = zoo.run(foreign, "nuts", num_samples=300, warmup=200, seed=1)
    r = run.summary.loc["mu"]
    assert r["mean"] == pytest.approx(mean, abs=4 * sd / np.sqrt(r["ess_bulk"]))
    assert r["sd"] == pytest.approx(sd, rel=0.2)
    for j, p in enumerate(pz):
        se = np.sqrt(p * (1 - p) / 600)
        assert run.summary.loc[f"z[{j}]", "mean"] == pytest.approx(p, abs=4 * se + 1e-9)


def test_enum_matches_closed_form(foreign):
    mean, sd, pz, log_px, log_pw = closed_form(X, W)
    mu0 = 0.25
    run = zoo.run(foreign, "enum", params={"mu": mu0}, num_samples=500)
    # exact conditional evidence log p(x, w | mu0) = sum log N(x | mu0, 1) + log p(w)
    expected = norm.logpdf(X.numpy(), mu0, 1).sum() + log_pw
    assert run.log_evidence == pytest.approx(expected, abs=1e-4)
    np.testing.assert_allclose(run.extras["marginals"]["z"][1][1], pz, atol=1e-6)
    np.testing.assert_array_equal(run.extras["map"]["z"], (pz > 0.5).astype(float))


def test_compare_table_uses_the_truth(foreign):
    cmp = zoo.compare(
        foreign,
        ["enum", "svi"],
        enum={"params": {"mu": 0.0}, "num_samples": 100},
        svi={"num_steps": 300, "num_samples": 200},
    )
    t = cmp.table_wide
    assert t.loc["mu", ("truth", "mean")] == pytest.approx(closed_form(X, W)[0])
    assert t.loc["mu", ("enum", "mean")] == 0.0
    assert t.loc["mu", ("enum", "error_in_sds")] == pytest.approx(
        abs(0.0 - closed_form(X, W)[0]) / closed_form(X, W)[1]
    )
    assert set(t.columns.get_level_values(0)) == {"truth", "enum", "svi"}


def test_function_form_and_duplicates(registry):
    def tiny(y):
        m = pyro.sample("m", dist.Normal(0.0, 1.0))
        with pyro.plate("n", y.shape[0]):
            pyro.sample("y", dist.Normal(m, 1.0), obs=y)

    entry = zoo.register("foreign_tiny", model=tiny, data={"y": torch.zeros(3)})
    assert zoo.get_model("foreign_tiny") is entry
    assert entry.engines == ONE_CONTINUOUS_SITE
    with pytest.raises(ValueError, match="already registered.*replace=True"):
        zoo.register("foreign_tiny", model=tiny, data={"y": torch.zeros(3)})
    again = zoo.register("foreign_tiny", model=tiny, data={"y": torch.zeros(4)}, replace=True)
    assert zoo.get_model("foreign_tiny") is again and again.load_data()["y"].shape == (4,)
    run = zoo.run("foreign_tiny", "svi", guide="mvn", num_steps=800, num_samples=1000)
    # N(0,1) prior, four zeros: posterior N(0, 1/5). The fit's last iterate jitters around the
    # optimum by a tenth to a third of a posterior sd (test_conjugate, test_engines), beyond the
    # 0.03 sd of Monte-Carlo error in 1000 draws (0.058 = 0.13 sd at seed 12 against a 0.05 bound)
    sd = np.sqrt(0.2)
    assert run.summary.loc["m", "mean"] == pytest.approx(0.0, abs=0.5 * sd)
    assert run.summary.loc["m", "sd"] == pytest.approx(sd, rel=0.25)


def test_posterior_gives_truth_and_exact_engine(registry):
    """A closed-form posterior written once: ground truth, the `exact` engine, its evidence."""

    @zoo.register(data={"y": torch.tensor([2.0, 3.0, 1.0, 2.0])})
    def normal_mean(y, sigma=1.0):
        mu = pyro.sample("mu", dist.Normal(0.0, 1.0))
        with pyro.plate("n", len(y)):
            pyro.sample("y", dist.Normal(mu, sigma), obs=y)

    @normal_mean.posterior
    def _(y, sigma=1.0):
        prec = 1 + len(y) / sigma**2
        cov = sigma**2 * np.eye(len(y)) + 1.0
        yy = y.double().numpy()
        log_z = -0.5 * (yy @ np.linalg.solve(cov, yy) + np.linalg.slogdet(2 * np.pi * cov)[1])
        return {"mu": dist.Normal(float(y.sum()) / sigma**2 / prec, prec**-0.5)}, log_z

    assert normal_mean.engines == (*ONE_CONTINUOUS_SITE, "exact")
    truth = normal_mean.ground_truth()
    assert float(truth.mean["mu"]) == pytest.approx(8 / 5) and float(
        truth.sd["mu"]
    ) == pytest.approx(np.sqrt(1 / 5))
    assert truth.density["mu"](np.array([1.6]))[0] == pytest.approx(norm.pdf(0, 0, np.sqrt(0.2)))
    run = zoo.run("normal_mean", "exact", num_samples=2000)
    assert run.evidence.kind == "exact" and run.log_evidence == pytest.approx(truth.log_evidence)
    assert run.summary.loc["mu", "mean"] == pytest.approx(1.6, abs=1e-6)  # exact moments
    draws = run.idata.posterior["mu"].values.ravel()
    assert abs(draws.mean() - 1.6) < 4 * np.sqrt(0.2 / 2000)


def test_reference_engine_returns_plain_data(registry):
    """A reference algorithm returns an Estimate; the runner builds, times and seeds the Run."""

    @zoo.register(data={"y": torch.tensor([0.5, 1.5])})
    def level(y):
        mu = pyro.sample("mu", dist.Normal(0.0, 10.0))
        with pyro.plate("n", len(y)):
            pyro.sample("y", dist.Normal(mu, 1.0), obs=y)

    @level.reference("mle")
    def _(y, *, shift: float = 0.0):
        """Sample mean."""
        mu = float(y.mean()) + shift
        return zoo.Estimate({"mu": mu}, traces={"log_likelihood": [-3.0, -2.0]}, log_evidence=-2.0)

    assert level.engines[-1] == "mle"
    run = zoo.run("level", "mle", shift=0.25)
    assert run.kind == "point" and run.conditional_on == ("mu",)
    assert run.evidence.kind == "conditional" and run.log_evidence == -2.0
    assert run.summary.loc["mu", "mean"] == 1.25 and run.summary.loc["mu", "sd"] == 0
    assert run.traces["log_likelihood"] == [-3.0, -2.0] and run.diagnostics["wall_time_s"] > 0
    with pytest.raises(ValueError, match="unknown option 'shfit'.*'shift'"):
        zoo.run("level", "mle", shfit=1)


# ------------------------------------------------------- companions name only what they use
LEVEL_Y = torch.tensor([0.5, 1.5, 1.0])


def level_model(y, prior_sd=2.0, noise=1.0):
    """mu ~ N(0, prior_sd^2), y_i ~ N(mu, noise^2): the data hold y only."""
    mu = pyro.sample("mu", dist.Normal(0.0, prior_sd))
    with pyro.plate("n", len(y)):
        pyro.sample("y", dist.Normal(mu, noise), obs=y)


def level_posterior(y, prior_sd, noise):
    """The exact N(mean, 1 / prec) of mu."""
    prec = prior_sd**-2 + len(y) / noise**2
    return float(y.sum()) / noise**2 / prec, prec**-0.5


def level_guide():
    loc = pyro.param("q_loc", torch.tensor(0.0))
    scale = pyro.param("q_scale", torch.tensor(1.0), constraint=dist.constraints.positive)
    pyro.sample("mu", dist.Normal(loc, scale))


def test_companions_take_only_the_parameters_they_name(registry):
    """Each companion names a subset of the model's parameters, in any order; Pyro's SVI (which
    passes the full data) runs the guide, and a reference's keyword-only parameters stay options."""
    entry = zoo.register("level_subset", model=level_model, data={"y": LEVEL_Y})
    calls = []

    @entry.set_guide
    def _(y):
        calls.append(len(y))
        level_guide()

    @entry.posterior
    def _(noise, y, prior_sd):
        mean, sd = level_posterior(y, prior_sd, noise)
        return {"mu": dist.Normal(mean, sd)}, None

    @entry.reference("sample_mean")
    def _(y, *, shift: float = 0.0):
        return zoo.Estimate({"mu": float(y.mean()) + shift})

    assert entry.engine_spec("sample_mean").defaults == {"shift": 0.0}
    assert zoo.run(entry, "sample_mean", shift=0.5).summary.loc["mu", "mean"] == 1.5
    mean, sd = level_posterior(LEVEL_Y, 2.0, 1.0)
    assert float(entry.ground_truth().mean["mu"]) == pytest.approx(mean)
    run = zoo.run(entry, "svi", num_steps=20, num_samples=10)
    assert run.status == "ok" and run.diagnostics["guide"] == "model" and set(calls) == {3}
    # the stored parts take the model's arguments, by name or in the model's order
    by_name = entry.posterior_fn(y=LEVEL_Y, noise=0.5)[0]["mu"]
    in_order = entry.posterior_fn(LEVEL_Y, 2.0, 0.5)[0]["mu"]
    assert float(by_name.mean) == float(in_order.mean)
    assert float(by_name.mean) == pytest.approx(level_posterior(LEVEL_Y, 2.0, 0.5)[0])


def test_a_model_default_reaches_a_companion_when_the_data_omit_it(registry):
    """The data hold y only: prior_sd and noise come from the model's signature, written once."""
    seen = {}

    def truth(prior_sd, noise):
        seen.update(prior_sd=prior_sd, noise=noise)
        return None

    entry = zoo.register("level_defaults", model=level_model, data={"y": LEVEL_Y})
    entry.truth(truth)
    assert entry.ground_truth() is None and seen == {"prior_sd": 2.0, "noise": 1.0}
    entry.truth(lambda **data: seen.update(everything=sorted(data)))  # **kwargs: all of them
    entry.ground_truth()
    assert seen["everything"] == ["noise", "prior_sd", "y"]


def test_a_companion_naming_an_unknown_parameter_is_refused_at_registration(registry):
    def posterior(y, sigma):  # the model calls it `noise`
        return {"mu": dist.Normal(0.0, sigma)}, None

    expected = (
        r"the posterior of model 'level_bad' \(posterior at .*test_extend.py:\d+\) names "
        r"\['sigma'\], which the model does not take; the model's parameters are "
        r"\['y', 'prior_sd', 'noise'\]"
    )
    with pytest.raises(ValueError, match=expected):
        zoo.register("level_bad", model=level_model, data={"y": LEVEL_Y}, posterior=posterior)
    assert "level_bad" not in zoo.list_models()
    entry = zoo.register("level_bad", model=level_model, data={"y": LEVEL_Y})
    with pytest.raises(ValueError, match="the guide of model 'level_bad'.*names \\['sigma'\\]"):
        entry.set_guide(lambda y, sigma: level_guide())
    assert entry.guide is None
    with pytest.raises(ValueError, match="keyword-only parameters are engine options.*'noise'"):
        entry.reference("fixed")(lambda y, *, noise=1.0: zoo.Estimate({"mu": 0.0}))
    assert "fixed" not in entry.engines


def test_full_signature_companions_still_work(registry):
    """Companions written as before: the model's whole signature, with or without defaults."""

    def guide(y, prior_sd, noise):
        level_guide()

    def posterior(y, prior_sd=2.0, noise=1.0):
        mean, sd = level_posterior(y, prior_sd, noise)
        return {"mu": dist.Normal(mean, sd)}, None

    def closest(y, prior_sd=2.0, noise=1.0, *, num_samples: int = 10):
        mean, sd = level_posterior(y, prior_sd, noise)
        return zoo.Draws({"mu": mean + sd * np.random.standard_normal(num_samples)})

    entry = zoo.register(
        "level_full",
        model=level_model,
        data={"y": LEVEL_Y},
        guide=guide,
        posterior=posterior,
        references={"draws": closest},
    )
    mean, sd = level_posterior(LEVEL_Y, 2.0, 1.0)
    assert zoo.run(entry, "exact").summary.loc["mu", "mean"] == pytest.approx(mean)
    assert entry.engine_spec("draws").defaults == {"num_samples": 10}
    assert zoo.run(entry, "draws", num_samples=7).idata.posterior["mu"].shape == (1, 7)
    assert zoo.run(entry, "svi", num_steps=20, num_samples=10).status == "ok"
    # the stored parts bind again to another model (a copy registered under a new name)
    again = zoo.register(
        "level_full_again",
        model=level_model,
        data={"y": LEVEL_Y[:2]},
        guide=entry.guide,
        posterior=entry.posterior_fn,
        references=entry.references,
    )
    assert again.posterior_fn.fn is posterior
    two = float(again.ground_truth().mean["mu"])
    assert two == pytest.approx(level_posterior(LEVEL_Y[:2], 2.0, 1.0)[0])


def install_plugin(tmp_path, monkeypatch, dist_name, entry_point, group="pyro_zoo.models"):
    """A fake installed distribution declaring ``entry_point`` in the entry-point ``group``."""
    info = tmp_path / f"{dist_name}-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist_name}\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[{group}]\n{entry_point}\n")
    monkeypatch.syspath_prepend(str(tmp_path))


def test_entry_point_discovery(tmp_path, monkeypatch, registry):
    """A package declaring the entry-point group `pyro_zoo.models` has its models found."""
    pkg = tmp_path / "zoo_plugin_demo.py"
    pkg.write_text(
        textwrap.dedent("""
        import pyro, pyro.distributions as dist, torch
        import zoo

        def plugin_model(y):
            m = pyro.sample("m", dist.Normal(0.0, 1.0))
            with pyro.plate("n", y.shape[0]):
                pyro.sample("y", dist.Normal(m, 1.0), obs=y)

        zoo.register("plugin_demo", model=plugin_model, data={"y": torch.ones(2)})
    """)
    )
    install_plugin(tmp_path, monkeypatch, "zoo_plugin_demo", "demo = zoo_plugin_demo")
    monkeypatch.delitem(sys.modules, "zoo_plugin_demo", raising=False)
    zoo.registry.rediscover()
    assert "plugin_demo" in zoo.list_models()
    assert zoo.get_model("plugin_demo").engines == ONE_CONTINUOUS_SITE


def test_a_broken_plugin_warns_and_the_zoo_still_loads(tmp_path, monkeypatch, registry):
    install_plugin(tmp_path, monkeypatch, "zoo_broken_demo", "broken = no_such_module_xyz")
    with pytest.warns(RuntimeWarning, match="could not load pyro_zoo.models entry point 'broken'"):
        zoo.registry.rediscover()
    names = zoo.list_models()
    assert "three_coin" in names
