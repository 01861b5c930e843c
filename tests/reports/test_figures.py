"""The model page's forest plot, posterior predictive check, LOO/WAIC table and rendered math
(reports/figures.py, forest.py, predictive.py, loo.py, extras.py), on smoke-size runs built
once per module."""

from __future__ import annotations

import base64
import dataclasses
import io
import json
import warnings

import numpy as np
import pyro
import pyro.distributions as dist
import pytest
import torch
from matplotlib import image as mpimg
from scipy import stats

import zoo
import zoo_reports as reports
from tests.seeding import shifted
from zoo.api import execute, prepare
from zoo.registry import isolated
from zoo_inference import predictive
from zoo_inference.arviz_io import arviz
from zoo_reports import extras, forest
from zoo_reports import figures as F
from zoo_reports import loo as loo_table
from zoo_reports import predictive as ppc


@pytest.fixture(scope="module")
def cmp() -> zoo.Comparison:
    """Bayesian linear regression (two weights, a closed-form truth): the exact posterior,
    short SVI and Laplace; the last two carry a pointwise log-likelihood."""
    return zoo.compare(
        "bayesian_linear_regression", ["exact", "svi", "laplace"], num_steps=100, progress=False
    )


@pytest.fixture(scope="module")
def page(cmp: zoo.Comparison) -> dict[str, str]:
    return reports.render_model_page(cmp)


def decode(png: str) -> np.ndarray:
    return mpimg.imread(io.BytesIO(base64.b64decode(png)), format="png")


# --------------------------------------------------------------------------- forest plot
def test_forest_has_one_line_per_parameter_and_engine_and_marks_the_truth(
    cmp: zoo.Comparison,
) -> None:
    colors = F.engine_colors(cmp.runs)
    fig, shown, left = forest.forest_plot(cmp, colors)
    assert shown == ["beta[0]", "beta[1]"] and left == []
    gids = [line.get_gid() for ax in fig.axes for line in ax.get_lines() if line.get_gid()]
    expected = {f"{e}|{row}" for e in cmp.runs for row in shown}
    assert sorted(g for g in gids if not g.startswith("truth|")) == sorted(expected)
    assert sorted(g for g in gids if g.startswith("truth|")) == [f"truth|{r}" for r in shown]
    table = cmp.table_wide
    for ax in fig.axes:
        for line in ax.get_lines():
            gid = line.get_gid()
            if not gid:
                continue
            source, row = gid.split("|")
            mean, sd = table.loc[row, (source, "mean")], table.loc[row, (source, "sd")]
            if source == "truth":  # the truth's mean: a vertical mark
                assert np.allclose(line.get_xdata(), mean)
            else:  # an engine: mean +- 2 sd, in its page colour
                assert np.allclose(line.get_xdata(), [mean - 2 * sd, mean + 2 * sd])
                assert line.get_color() == colors[source]
    image = forest.forest_figure(cmp, colors)
    assert image.kind == "forest" and decode(image.png).shape[1] > 0


def test_forest_caps_its_rows_and_names_the_rest(cmp: zoo.Comparison) -> None:
    fig, shown, left = forest.forest_plot(cmp, F.engine_colors(cmp.runs), limit=1)
    assert (shown, left) == (["beta[0]"], ["beta[1]"])
    assert forest._compact_rows([f"z[{i}]" for i in range(40, 120)] + ["s"]) == (
        "z[40..119] (80 rows), s"
    )


# --------------------------------------------------------------------------- predictive check
def test_ppc_reads_the_exact_posteriors_predictive_draws(cmp: zoo.Comparison) -> None:
    assert ppc.ppc_engine(cmp) == "exact"
    run = cmp.runs["exact"]
    assert "posterior_predictive" in run.idata.groups()  # drawn when the run was made
    (rep,) = ppc.replicates_of(run)
    y = cmp.data["y"].numpy()
    assert rep.site == "y" and not rep.discrete
    assert np.allclose(rep.observed, y)
    assert rep.replicated.shape == (predictive.MAX_DRAWS, len(y))
    # every replicate is y_rep = X beta + N(0, sigma^2) noise at one posterior draw: residuals
    # from the exact posterior mean have sd sigma * sqrt(1 + ~p/N) = 1.02 sigma (p = 2 weights,
    # N = 50); the sd of 2500 residuals is within 0.25 of that by > 10 Monte-Carlo sds (0.02)
    X, sigma = cmp.data["X"].numpy(), cmp.data["sigma"]
    resid = rep.replicated - X @ cmp.truth.mean["beta"]
    assert abs(resid.std() / sigma - 1) < 0.25
    p = ppc.ppc_p_values(rep)
    assert set(p) == {"mean", "sd"} and all(0 <= v <= 1 for v in p.values())
    figure = ppc.ppc_figure(cmp, F.engine_colors(cmp.runs))
    assert figure.kind == "ppc" and decode(figure.png).shape[0] > 0


def test_predictive_draws_are_their_own_stream(cmp: zoo.Comparison) -> None:
    """The draws come after the engine, from a stream of their own: the posterior is the same
    with or without them, and they are the same for the same seed."""
    bare = execute(prepare("bayesian_linear_regression", "exact", progress=False), predictive=False)
    assert "posterior_predictive" not in bare.idata.groups()
    run = cmp.runs["exact"]
    assert np.array_equal(bare.idata.posterior["beta"].values, run.idata.posterior["beta"].values)
    entry = zoo.get_model("bayesian_linear_regression")
    again = predictive.with_predictive(bare, entry.model, bare.data, seed=0)
    assert np.array_equal(
        again.idata.posterior_predictive["y"].values, run.idata.posterior_predictive["y"].values
    )


def test_ppc_prefers_a_reliable_run(cmp: zoo.Comparison) -> None:
    def marked(*unreliable: str) -> zoo.Comparison:
        # every run's status set here (short SVI's own verdict is unreliable: its ELBO rises)
        runs = {
            e: dataclasses.replace(r, status="unreliable", reasons=("test",), caveat="test")
            if e in unreliable
            else dataclasses.replace(r, status="ok", reasons=(), caveat=None)
            for e, r in cmp.runs.items()
        }
        return dataclasses.replace(cmp, runs=runs)

    assert ppc.ppc_engine(marked("exact")) == "svi"
    assert ppc.ppc_engine(marked("exact", "svi", "laplace")) == "exact"
    figure = ppc.ppc_figure(marked("exact", "svi", "laplace"), F.engine_colors(cmp.runs))
    assert "exact's is unreliable (test)" in figure.caption


def test_ppc_p_values_count_replicates_at_or_above_the_data() -> None:
    rep = ppc.Replicates(
        "y", np.array([0.0, 2.0]), np.array([[0.0, 0.0], [1.0, 1.0], [0.0, 4.0]]), False
    )
    # means 0, 1, 2 against the data's 1; sds 0, 0, 2 against the data's 1
    assert ppc.ppc_p_values(rep) == {"mean": pytest.approx(2 / 3), "sd": pytest.approx(1 / 3)}


def test_ppc_left_out_where_the_model_cannot_be_replayed(cmp: zoo.Comparison) -> None:
    entry = zoo.get_model("bayesian_linear_regression")
    replicate = predictive.replicate
    assert replicate(entry.model, cmp.data, {"other": np.zeros((1, 5))}) is None  # no beta

    def model(y: torch.Tensor, batch: int | None = None) -> None:
        mu = pyro.sample("mu", dist.Normal(0.0, 1.0))
        with pyro.plate("data", len(y), subsample_size=batch) as idx:
            pyro.sample("y", dist.Normal(mu, 1.0), obs=y[idx])

    mu = {"mu": np.linspace(-1, 1, 10)[None]}
    y = torch.arange(20.0)
    assert replicate(model, {"y": y}, mu).replicated["y"].shape == (10, 20)
    assert replicate(model, {"y": y, "batch": 4}, mu) is None  # minibatches
    assert replicate(model, {"y": y}, {"mu": np.zeros((1, 1))}) is None  # one draw
    run = cmp.runs["exact"]
    draws = dataclasses.replace(
        run, idata=arviz().from_dict(posterior={"mu": np.linspace(-1, 1, 10)[None]})
    )
    minibatched = predictive.with_predictive(draws, model, {"y": y, "batch": 4}, seed=0)
    assert "posterior_predictive" not in minibatched.idata.groups()
    small = dataclasses.replace(cmp, runs={"exact": minibatched})
    assert ppc.ppc_engine(small) == "exact"
    assert ppc.ppc_figure(small, F.engine_colors(small.runs)) is None
    # a model the registry does not know still gets its check: the page needs only the runs
    unregistered = dataclasses.replace(cmp, model=dataclasses.replace(cmp.model, name="nowhere"))
    assert ppc.ppc_figure(unregistered, F.engine_colors(cmp.runs)) is not None


@pytest.mark.parametrize(
    "draw, lower, upper",
    [
        (lambda rng: rng.normal(size=16000), None, None),
        (lambda rng: rng.gamma(1.5, size=2400), 0.0, None),
        (lambda rng: rng.beta(0.7, 3.0, size=4000), 0.0, 1.0),
        (lambda rng: rng.standard_cauchy(3000), None, None),  # a mesh at its cap: coarser
    ],
    ids=["normal", "gamma-reflected", "beta-reflected-twice", "cauchy"],
)
def test_kde_is_scipys_gaussian_kde_to_the_binning_bound(draw, lower, upper) -> None:
    """The figures' kernel density bins the draws linearly onto a mesh before smoothing: moving
    a draw's unit mass onto the two mesh points around it changes each Gaussian kernel by at
    most step^2 / 8 * max|K''| = step^2 / (8 h^3 sqrt(2 pi)), so the density, a mean of
    kernels (three with both reflections), by at most three times that, for any draws."""
    x = draw(np.random.default_rng(shifted(3)))
    grid = np.linspace(np.quantile(x, 0.002) - 0.5, np.quantile(x, 0.998) + 0.5, 256)
    grid = grid[(grid >= (lower if lower is not None else -np.inf)) & (grid <= (upper or np.inf))]
    k = stats.gaussian_kde(x)
    theirs = k(grid)
    for end in (lower, upper):
        if end is not None:
            theirs += k(2 * end - grid)
    h = x.std(ddof=1) * x.size**-0.2
    m = min(F.KDE_MESH, max(2, int(np.ceil(8 * np.ptp(x) / h)) + 1))
    step = np.ptp(x) / (m - 1)
    bound = 3 * step**2 / (8 * h**3 * np.sqrt(2 * np.pi))
    assert np.max(np.abs(F.kde(x, grid, lower, upper) - theirs)) <= bound * (1 + 1e-6) + 1e-12
    with pytest.raises(ValueError, match="vary"):
        F.kde(np.full(10, 2.0), grid)


def test_binned_kde_matches_scipy() -> None:
    x = np.random.default_rng(shifted(0)).normal(size=400)
    grid = np.linspace(-4, 4, 256)
    width = ppc._scott(x)
    ours = ppc.binned_kde(x, grid, width)
    theirs = stats.gaussian_kde(x, bw_method=width / x.std(ddof=1))(grid)
    # binning moves each draw by at most half a grid step: the density by < step * max |f'|
    step = grid[1] - grid[0]
    bound = step * 0.5 * np.max(np.abs(np.gradient(theirs, grid))) + 1e-3
    assert np.max(np.abs(ours - theirs)) < bound
    assert np.trapezoid(ours, grid) == pytest.approx(1.0, abs=1e-3)


# --------------------------------------------------------------------------- LOO / WAIC
def test_loo_table_equals_arviz_loo_on_the_same_idata(cmp: zoo.Comparison) -> None:
    loo = loo_table.loo_comparison(cmp)
    rows = {r["engine"]: r for r in loo["rows"]}
    assert set(rows) == {"svi", "laplace"}  # exact carries no pointwise log-likelihood
    az = arviz()
    for engine, row in rows.items():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ref = az.loo(cmp.runs[engine].idata, pointwise=True)
            waic = az.waic(cmp.runs[engine].idata)
        assert row["elpd_loo"] == pytest.approx(float(ref.elpd_loo))
        assert row["p_loo"] == pytest.approx(float(ref.p_loo))
        assert row["se"] == pytest.approx(float(ref.se))
        assert row["elpd_waic"] == pytest.approx(float(waic.elpd_waic))
        assert row["n_obs"] == len(cmp.data["y"])
        assert row["k_bad"] == int(np.sum(np.asarray(ref.pareto_k) > row["good_k"]))
    assert sum(r["weight"] for r in rows.values()) == pytest.approx(1.0)
    assert [r["rank"] for r in loo["rows"]] == [0, 1]
    best, other = loo["rows"]
    assert best["elpd_loo"] >= other["elpd_loo"]
    assert other["elpd_diff"] == pytest.approx(best["elpd_loo"] - other["elpd_loo"])
    assert loo["observed"] == ["y"]


def test_loo_thins_a_run_of_many_draws_evenly(cmp: zoo.Comparison, monkeypatch) -> None:
    """A run of more than MAX_LOO_DRAWS draws gets LOO and WAIC on one draw in k of each chain
    (PSIS costs in proportion to the draws), and the page says so: the same numbers as ArviZ's
    on that thinned InferenceData."""
    run = cmp.runs["svi"]
    draws = run.idata.log_likelihood.sizes["chain"] * run.idata.log_likelihood.sizes["draw"]
    monkeypatch.setattr(loo_table, "MAX_LOO_DRAWS", draws // 3)
    loo = loo_table.loo_comparison(cmp)
    row = next(r for r in loo["rows"] if r["engine"] == "svi")
    every = -(-draws // (draws // 3))
    assert row["every"] == every >= 3 and row["draws"] == draws
    assert f"svi: one draw in {every} of its {draws}" in loo["thinned"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ref = arviz().loo(run.idata.isel(draw=slice(None, None, every)), pointwise=True)
    assert row["elpd_loo"] == pytest.approx(float(ref.elpd_loo))
    assert row["se"] == pytest.approx(float(ref.se))


def test_loo_warns_in_words_about_pareto_k(cmp: zoo.Comparison) -> None:
    run = cmp.runs["svi"]
    ll = run.idata.log_likelihood["y"].values.copy()
    ll[..., 3] += np.random.default_rng(shifted(1)).standard_cauchy(ll.shape[:2]) * 50  # heavy tail
    idata = arviz().from_dict(
        posterior={"beta": run.idata.posterior["beta"].values}, log_likelihood={"y": ll}
    )
    bad = dataclasses.replace(cmp, runs={"svi": dataclasses.replace(run, idata=idata)})
    loo = loo_table.loo_comparison(bad)
    (row,) = loo["rows"]
    assert row["k_bad"] >= 1
    assert loo["warnings"][0].startswith("k\u0302 > ")
    assert f"at {row['k_bad']} of {len(cmp.data['y'])} observations" in loo["warnings"][0]
    assert loo["warnings"][0].endswith("LOO unreliable for svi")


# --------------------------------------------------------------------------- math and page
def test_every_registered_models_math_renders() -> None:
    with_math = [n for n in zoo.list_models() if zoo.get_model(n).math]
    assert {"beta_bernoulli", "logistic_regression", "eight_schools", "gaussian_mixture"} <= set(
        with_math
    )
    for name in with_math:
        for line in zoo.get_model(name).math:
            m = extras.render_math(line)
            pixels = decode(m["png"])
            assert pixels.shape[1] == pytest.approx(2 * m["width"], abs=2) and m["height"] > 0
            assert pixels[..., 3].max() > 0  # something is drawn


def test_unparseable_math_falls_back_to_the_docstring() -> None:
    assert extras.math_images([r"\frac{1}{"]) == []
    with isolated(), pytest.raises(ValueError, match="math must be LaTeX lines"):
        zoo.register("bad_math", model=lambda: None, data={}, math=[1, 2])


def test_data_provenance_is_the_docstrings_default_data_paragraph() -> None:
    doc = "Title.\n\nStory.\nDefault data: ten tosses,\nseven heads.\n\nMore."
    assert extras.data_provenance(doc) == "Default data: ten tosses, seven heads."
    assert extras.data_provenance("No data said.") is None


def test_model_page_shows_math_forest_ppc_and_loo(cmp: zoo.Comparison, page: dict) -> None:
    html, md = page["bayesian_linear_regression.html"], page["bayesian_linear_regression.md"]
    data = json.loads(page["bayesian_linear_regression.json"])
    first = zoo.get_model("bayesian_linear_regression").math[0]
    assert 'alt="\\beta \\sim \\mathcal{N}(0,\\, \\tau^2 I)"' in html
    assert "Forest plot" in html and "Posterior predictive check" in html
    assert 'id="loo"' in html and "elpd_loo" in html
    assert f"$$ {first} $$" in md and "## Predictive accuracy: LOO and WAIC" in md
    assert data["math"] == list(zoo.get_model("bayesian_linear_regression").math)
    assert [r["engine"] for r in data["loo"]["rows"]] == [
        r["engine"] for r in loo_table.loo_comparison(cmp)["rows"]
    ]
    assert data["provenance"].startswith("Default data:")


def test_loo_without_compare_ranks_by_elpd(cmp: zoo.Comparison, monkeypatch) -> None:
    full = {r["engine"]: r for r in loo_table.loo_comparison(cmp)["rows"]}
    one = dataclasses.replace(cmp, runs={"svi": cmp.runs["svi"]})
    (row,) = loo_table.loo_comparison(one)["rows"]
    assert (row["rank"], row["weight"], row["elpd_diff"]) == (0, 1.0, 0.0)
    assert row["elpd_loo"] == pytest.approx(full["svi"]["elpd_loo"])

    def refuse(*args, **kwargs):
        raise ValueError("no compare")

    monkeypatch.setattr(arviz(), "compare", refuse)
    rows = loo_table.loo_comparison(cmp)["rows"]
    assert [r["elpd_loo"] for r in rows] == sorted((r["elpd_loo"] for r in rows), reverse=True)
    assert all(np.isnan(r["weight"]) for r in rows)
    assert rows[1]["elpd_diff"] == pytest.approx(rows[0]["elpd_loo"] - rows[1]["elpd_loo"])


def test_trace_figure_of_many_chains_draws_the_least_mixed_ones() -> None:
    """Of 32 chains, one stuck 3 sds apart, the trace figure draws 8 and the stuck one among
    them (its mean rank is about 20 sds of its noise from the middle; a mixed chain's rarely 4);
    of 8 or fewer, every chain."""
    draws = np.random.default_rng(shifted(0)).normal(size=(32, 200))
    draws[21] += 3.0
    ranks = [stats.rankdata(draws.ravel()).reshape(draws.shape)]
    shown = F.shown_chains(ranks)
    assert len(shown) == F.MAX_TRACE_CHAINS and 21 in shown
    assert list(shown) == sorted(shown)
    few = draws[:6]
    assert list(F.shown_chains([stats.rankdata(few.ravel()).reshape(few.shape)])) == list(range(6))


def test_trace_figure_says_which_chains_it_draws() -> None:
    cmp = zoo.compare(
        "beta_bernoulli", ["nuts"], num_chains=12, num_samples=40, warmup=40, progress=False
    )
    fig = F.mcmc_figure(cmp, "nuts", ["p"], F.engine_colors(["nuts"]))
    assert fig is not None and "the 8 of 12 chains" in fig.caption
    assert mpimg.imread(io.BytesIO(base64.b64decode(fig.png))).shape[1] > 0


def test_model_page_shows_the_seconds_spent_compiling(cmp: zoo.Comparison) -> None:
    """A run's diagnostics["compile_s"] shows under its wall time (HTML and Markdown) where it
    is a visible share, and not at all below 0.05 s."""
    svi = cmp.runs["svi"]
    for spent, shown in ((2.5, True), (0.01, False)):
        run = dataclasses.replace(svi, diagnostics={**svi.diagnostics, "compile_s": spent})
        page = reports.render_model_page(dataclasses.replace(cmp, runs={**cmp.runs, "svi": run}))
        html = next(v for k, v in page.items() if k.endswith(".html"))
        md = next(v for k, v in page.items() if k.endswith(".md"))
        assert ("2.50 compiling" in html and "(2.50 compiling)" in md) is shown
        assert ("compiling</span>" in html) is shown


def test_uncropped_figures_lay_themselves_out_inside_their_canvas(monkeypatch) -> None:
    """The trace, density and forest figures are saved uncropped (one draw, not two): every
    label, tick and legend of theirs lies inside the canvas, none cut off at its edge. Eight
    engines give the density figure's legend three rows."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    engines = ["exact", "svi", "laplace", "nuts", "mh", "importance", "chees", "hmc"]
    cmp = zoo.compare(
        "bayesian_linear_regression",
        engines,
        num_steps=100,
        num_samples=50,
        warmup=50,
        progress=False,
    )
    uncropped: list = []
    save = F.to_base64_png

    def keep(fig, *, crop=True):  # noqa: ANN001, ANN202
        if not crop:
            uncropped.append(fig)
        return save(fig, crop=crop)

    monkeypatch.setattr(F, "to_base64_png", keep)
    monkeypatch.setattr(forest, "to_base64_png", keep)
    colors = F.engine_colors(cmp.runs)
    F.mcmc_figure(cmp, "nuts", ["beta[0]", "beta[1]", "sigma"], colors)
    F.density_figure(cmp, "beta[0]", colors)
    forest.forest_figure(cmp, colors)
    assert len(uncropped) == 3
    for fig in uncropped:
        canvas = FigureCanvasAgg(fig)
        canvas.draw()
        box = fig.get_tightbbox(canvas.get_renderer())
        width, height = fig.get_size_inches()
        assert box.x0 >= 0 and box.y0 >= 0, box
        assert box.x1 <= width + 0.005 and box.y1 <= height + 0.005, (box, width, height)


def test_forest_lines_and_bands_stop_at_the_support() -> None:
    """eight_schools' tau > 0: its truth's mean - 2 sd is below zero, and the band stops at 0."""
    from zoo_reports.forest import forest_intervals

    cmp = zoo.compare("eight_schools", ["svi"], progress=False, num_steps=50, num_samples=100)
    assert cmp.model.bounds["tau"] == (0.0, float("inf"))
    assert cmp.model.bounds["mu"] == (-float("inf"), float("inf"))
    mean, sd = cmp.truth.rows()["tau"]
    assert mean - 2 * sd < 0
    (truth,) = [iv for iv in forest_intervals(cmp)["tau"] if iv.source == "truth"]
    assert truth.lo == 0.0 and truth.hi == pytest.approx(mean + 2 * sd)


def test_elbo_panel_is_not_flattened_by_one_engines_fall() -> None:
    """An ELBO that falls far below the others' (pathfinder along a path into a funnel) is
    clipped, and the caption says so, instead of setting the axis for every trace."""
    from matplotlib.figure import Figure

    from zoo_reports.figures import ELBO_SPANS, elbo_axis

    ax = Figure().add_subplot()
    ranges = {"svi": (-35.0, -30.0), "svi_flow": (-40.0, -31.0), "pathfinder": (-2e5, -31.0)}
    assert elbo_axis(ax, ranges, exact=-30.5) == ["pathfinder"]
    # from ELBO_SPANS of svi's span (5) below the best (-30), with a 10% / 15% margin
    window = ELBO_SPANS * 5.0
    assert ax.get_ylim() == pytest.approx((-30.0 - 1.1 * window, -30.0 + 0.15 * window))


@pytest.mark.parametrize("n", [14, 20, 27])
def test_every_engine_of_a_page_has_its_own_colour(n: int) -> None:
    from zoo_reports.figures import engine_colors

    colors = engine_colors([f"e{i}" for i in range(n)])
    assert len(set(colors.values())) == n
