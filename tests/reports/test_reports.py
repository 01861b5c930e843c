"""Reports: files, numbers, HTML validity, findings, validation and atomic writing.

One real report (beta_bernoulli, profile "smoke") is written once per module; the other tests
build comparisons by hand or stub ``zoo.compare`` so they cost no engine time.
"""

from __future__ import annotations

import json
import shlex
from html.parser import HTMLParser
from pathlib import Path

import arviz as az
import numpy as np
import pandas as pd
import pytest

import zoo
import zoo_reports as reports
from tests.paths import ROOT
from tests.seeding import shifted
from tests.zoo.test_extend import ONE_CONTINUOUS_SITE
from zoo import sweep
from zoo.api import comparison
from zoo.sweep import largest_first, plan_report
from zoo_inference import Comparison, Evidence, Run
from zoo_inference.arviz_io import make_run
from zoo_inference.verdict import judged
from zoo_reports.findings import accuracy_level

# ----------------------------------------------------------------------------- helpers

VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "wbr"}


class _Checker(HTMLParser):
    """Tag balance, links and images of an HTML page."""

    def __init__(self) -> None:
        super().__init__()
        self.stack: list[str] = []
        self.errors: list[str] = []
        self.urls: list[str] = []
        self.images: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        for key in ("href", "src"):
            if a.get(key):
                self.urls.append(a[key])
        if tag == "img":
            self.images.append(a.get("src") or "")
            if not a.get("alt"):
                self.errors.append("img without alt")
        if tag not in VOID:
            self.stack.append(tag)

    def handle_endtag(self, tag: str) -> None:
        if tag in VOID:
            return
        if not self.stack or self.stack[-1] != tag:
            self.errors.append(f"unexpected </{tag}> (open: {self.stack[-3:]})")
            return
        self.stack.pop()


def check_html(text: str) -> _Checker:
    assert text.startswith("<!DOCTYPE html>")
    assert '<html lang="en">' in text
    assert '<meta charset="utf-8">' in text
    assert "<title>" in text and "</title>" in text
    c = _Checker()
    c.feed(text)
    c.close()
    assert not c.errors, c.errors
    assert not c.stack, f"unclosed tags {c.stack}"
    external = [u for u in c.urls if u.startswith(("http:", "https:", "//"))]
    assert not external, external  # self-contained
    return c


def hand_comparison(failed_svi: bool = False) -> Comparison:
    """beta_bernoulli with the exact engine and a hand-made svi run (no inference)."""
    entry = zoo.get_model("beta_bernoulli")
    data = entry.load_data()
    truth = entry.ground_truth(data)
    exact = zoo.run(entry, "exact", num_samples=500, progress=False)
    if failed_svi:
        svi = Run(engine="svi", status="failed", error="NumericalFailure: ELBO is NaN at step 3")
        svi.diagnostics["wall_time_s"] = 0.5
    else:
        rng = np.random.default_rng(shifted(0))
        draws = rng.normal(0.6, 0.05, size=(1, 400))
        svi = make_run(
            "svi",
            {"p": draws},
            diagnostics={"final_elbo": -7.5},
            traces={"elbo": list(np.linspace(-30, -7.5, 50))},
            evidence=Evidence(-7.5, "lower_bound"),
        )
        svi.diagnostics.update(wall_time_s=1.0, pareto_k=0.9, is_log_evidence=-7.3)
    assert truth is not None
    return comparison(entry, {"svi": judged(svi), "exact": exact}, data)


def hand_table(engine_sd: float, engine_mean: float = 1.0) -> pd.DataFrame:
    cols = pd.MultiIndex.from_tuples(
        [
            ("truth", "mean"),
            ("truth", "sd"),
            ("svi", "mean"),
            ("svi", "sd"),
            ("svi", "error_in_sds"),
        ],
        names=["source", "stat"],
    )
    err = abs(engine_mean - 1.0) / 0.2
    return pd.DataFrame(
        [[1.0, 0.2, engine_mean, engine_sd, err]],
        index=pd.Index(["tau"], name="parameter"),
        columns=cols,
    )


# ----------------------------------------------------------------------------- one real report


@pytest.fixture(scope="module")
def report_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("reports") / "r"
    index = zoo.report(["beta_bernoulli"], out=out, profile="smoke", progress=False)
    assert index == out / "index.html"
    return out


def test_report_writes_every_file(report_dir: Path) -> None:
    names = {p.name for p in report_dir.iterdir() if not p.name.startswith(".")}
    expected = {"index.html", "index.md", "results.json", "results.csv"}
    expected |= {f"beta_bernoulli.{ext}" for ext in ("html", "md", "json", "csv")}
    expected |= {"cells"}  # the finished cells, for a report run again (zoo/store.py)
    assert names == expected
    # nothing left beside the report, and nothing hidden inside it but the lock file
    assert [p.name for p in report_dir.parent.iterdir()] == ["r"]
    hidden = {p.name for p in report_dir.iterdir() if p.name.startswith(".")}
    assert hidden <= {".zoo.lock"}


def test_model_json_numbers(report_dir: Path) -> None:
    page = json.loads((report_dir / "beta_bernoulli.json").read_text())
    assert page["model"] == "beta_bernoulli"
    assert page["runs"]["exact"]["summary"]["p"]["mean"] == pytest.approx(0.666667, abs=1e-6)
    assert page["truth"]["sd"]["p"] == pytest.approx(0.130744, abs=1e-6)
    assert set(page["runs"]) == {*ONE_CONTINUOUS_SITE, "exact"}
    # honest statuses: a smoke run may be unreliable (the reasons say why), none failed
    for r in page["runs"].values():
        assert r["status"] in ("ok", "unreliable")
        assert (r["status"] == "unreliable") == bool(r["reasons"]), r
    assert page["runs"]["exact"]["status"] == "ok"
    assert isinstance(page["runs"]["svi"]["traces"]["elbo"], list)
    (row,) = page["table"]
    assert row["parameter"] == "p" and row["exact_error_in_sds"] == pytest.approx(0.0, abs=1e-9)
    assert page["findings"] and all(
        f["level"] in ("good", "info", "warn", "bad") for f in page["findings"]
    )


def test_csv_and_results(report_dir: Path) -> None:
    table = pd.read_csv(report_dir / "beta_bernoulli.csv")
    assert list(table["parameter"]) == ["p"]
    assert table.loc[0, "truth_sd"] == pytest.approx(0.130744, abs=1e-6)
    results = json.loads((report_dir / "results.json").read_text())
    cells = results["models"]["beta_bernoulli"]["engines"]
    assert set(cells) == {*ONE_CONTINUOUS_SITE, "exact"}
    assert cells["exact"]["worst_error"] == pytest.approx(0.0, abs=1e-9)
    flat = pd.read_csv(report_dir / "results.csv")
    assert len(flat) == len(cells) and set(flat["status"]) <= {"ok", "unreliable"}
    assert flat.set_index("engine").loc["exact", "status"] == "ok"


def test_html_pages(report_dir: Path) -> None:
    page = (report_dir / "beta_bernoulli.html").read_text()
    c = check_html(page)
    assert sum(s.startswith("data:image/png;base64,") for s in c.images) >= 3  # density, ELBO, MCMC
    assert "<table" in page and "err (sds)" in page
    assert "0.6667" in page  # posterior table, rounded
    assert "Beta(a, b)" in page  # the generative story
    index = (report_dir / "index.html").read_text()
    check_html(index)
    assert 'href="beta_bernoulli.html' in index
    md = (report_dir / "beta_bernoulli.md").read_text()
    assert md.startswith("# `beta_bernoulli`") and "| `p` | 0.6667 | 0.1307 |" in md


# ----------------------------------------------------------------------------- findings


def test_findings_under_estimated_sd() -> None:
    found = reports.findings(hand_table(engine_sd=0.1))
    texts = [f.text for f in found if f.topic == "accuracy"]
    sd = [t for t in texts if "sd(tau)" in t]
    assert len(sd) == 1 and "under-estimates" in sd[0] and "50%" in sd[0], texts
    assert any(f.level == "good" and "means" in f.text for f in found)  # mean is exact


def test_findings_over_and_within() -> None:
    over = reports.findings(hand_table(engine_sd=0.3))
    assert any("over-estimates sd(tau) by 50%" in f.text for f in over)
    fine = reports.findings(hand_table(engine_sd=0.205, engine_mean=1.01))
    assert [f.level for f in fine] == ["good"]
    assert "agrees" in fine[0].text and "within 0.05 posterior sd" in fine[0].text
    off = reports.findings(hand_table(engine_sd=0.2, engine_mean=1.3))
    assert any("1.50 posterior sd" in f.text and f.level == "bad" for f in off)


def test_findings_point_estimate_and_noise() -> None:
    found = reports.findings(hand_table(engine_sd=0.0, engine_mean=1.1))
    assert [f.topic for f in found] == ["point"]
    assert "point estimates" in found[0].text and "0.50 posterior sd" in found[0].text
    # with few effective draws, a 20% sd error is within Monte-Carlo noise: not reported
    run = Run(
        engine="svi",
        summary=pd.DataFrame({"mean": [1.0], "sd": [0.16], "ess_bulk": [20.0]}, index=["tau"]),
    )
    noisy = reports.findings(hand_table(engine_sd=0.16), runs={"svi": run})
    assert not any("under-estimates" in f.text for f in noisy)
    # ... nor is it called agreement: too few draws to judge, a warning (index cell not green)
    acc = [f for f in noisy if f.topic == "accuracy"]
    assert len(acc) == 1 and acc[0].level == "warn", acc
    assert "too few effective draws to judge" in acc[0].text and "min ESS 20" in acc[0].text
    assert accuracy_level(noisy, "svi") == "warn"


def test_findings_from_runs() -> None:
    cmp = hand_comparison()
    found = reports.findings(cmp.table_wide, runs=cmp.runs, truth=cmp.truth)
    text = " ".join(f.text for f in found)
    assert "svi under-estimates sd(p)" in text
    assert "Pareto k\u0302 0.90" in text
    assert "nats below the exact log evidence" in text
    assert "exact's log evidence \u22127.1854 matches the exact value" in text


# ----------------------------------------------------------------------------- rendering


def test_failed_engine_is_a_failed_cell() -> None:
    cmp = hand_comparison(failed_svi=True)
    files = reports.render_model_page(cmp)
    html = files["beta_bernoulli.html"]
    check_html(html)
    assert "NumericalFailure: ELBO is NaN at step 3" in html
    assert 'class="status failed"' in html
    summary = json.loads(files["summary"])
    index = reports.render_index([summary], profile="smoke")
    check_html(index["index.html"])
    assert "failed" in index["index.html"]
    json.loads(index["results.json"])


def test_json_is_strict() -> None:
    from zoo_inference.serialize import dumps

    text = dumps({"a": float("nan"), "b": np.float32(1.5), "c": np.arange(3), "d": (np.inf,)})
    assert json.loads(text) == {"a": None, "b": 1.5, "c": [0, 1, 2], "d": [None]}


def test_html_is_escaped() -> None:
    model = {
        "name": "<x>",
        "description": "<script>",
        "family": "<b>",
        "seed_ref": "",
        "page": "x.html",
        "truth": None,
        "engines": {"svi": {"status": "failed", "error": "<img src=x>", "wall_time_s": 1.0}},
        "profile": "quick",
        "seed": 0,
        "generated": "",
    }
    html = reports.render_index([model], profile="quick")["index.html"]
    assert "<script>" not in html.replace("<script>\n(function", "")
    assert "&lt;script&gt;" in html and "&lt;b&gt;" in html and "<img src=x>" not in html


# ----------------------------------------------------------------------------- validation


def test_unknown_profile(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="quick"):
        zoo.report(["beta_bernoulli"], out=tmp_path / "r", profile="huge")
    assert list(tmp_path.iterdir()) == []


def test_unknown_model_leaves_nothing(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="beta_bernoulli"):
        zoo.report(["beta_bernouli"], out=tmp_path / "r", profile="smoke")
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(ValueError, match="unknown option"):
        zoo.report("beta_bernoulli", out=tmp_path / "r", options={"svi": {"steps": 3}})
    assert list(tmp_path.iterdir()) == []


def test_cells_go_to_workers_largest_engine_first() -> None:
    """A variant is costed by its base engine (nuts_states as nuts); equal costs keep the
    plan's order; the closed forms go last."""
    cells = plan_report(["linear_gaussian_ssm", "beta_bernoulli"], profile="smoke")
    order = [(c.model, c.engine) for c in largest_first(cells)]
    assert order[:3] == [
        ("linear_gaussian_ssm", "nuts"),
        ("linear_gaussian_ssm", "nuts_states"),
        ("beta_bernoulli", "nuts"),
    ]
    assert order[-1] == ("beta_bernoulli", "exact")
    assert sorted(order) == sorted((c.model, c.engine) for c in cells)


def test_profiles_plan() -> None:
    def by_model(cells):
        out = {}
        for c in cells:
            out.setdefault(c.model, {})[c.engine] = dict(c.options)
        return out

    plan = by_model(plan_report(["beta_bernoulli", "gaussian_mixture"], profile="quick"))
    assert plan["beta_bernoulli"]["svi"] == {"num_steps": 1000, "num_samples": 500}
    assert plan["beta_bernoulli"]["exact"] == {}
    # counts: the larger of the profile's and the model's wins, either way round
    full = by_model(plan_report(["gaussian_mixture"], profile="full"))
    assert full["gaussian_mixture"]["hmc"]["num_samples"] == 1000  # full's 1000 over 300
    smoke = by_model(plan_report(["gaussian_mixture"], profile="smoke"))
    assert smoke["gaussian_mixture"]["hmc"]["num_samples"] == 300  # the model's over 50
    only = by_model(plan_report(profile="smoke", engines=["exact", "em"]))
    assert only["beta_bernoulli"].keys() == {"exact"} and only["three_coin"].keys() == {"em"}
    for name in zoo.list_models():  # a whole-zoo report leaves out models neither applies to
        wanted = set(zoo.get_model(name).engines) & {"exact", "em"}
        assert set(only.get(name, {})) == wanted, name
    with pytest.raises(ValueError, match="engines that apply"):
        plan_report(["beta_bernoulli", "three_coin"], engines=["exact"])
    with pytest.raises(ValueError, match="unknown engine"):
        plan_report("three_coin", engines=["nutz"])
    full = by_model(plan_report("beta_bernoulli", profile="full", options={"svi": {"lr": 0.01}}))
    assert full["beta_bernoulli"]["svi"]["lr"] == 0.01
    assert full["beta_bernoulli"]["nuts"]["num_samples"] == 1000
    # a variant is sized like its base engine, with the model's options for that engine
    logistic = by_model(plan_report("logistic_regression", profile="quick"))["logistic_regression"]
    assert logistic["svi_meanfield"] == {"num_steps": 1000, "num_samples": 500}
    robust = by_model(plan_report("robust_regression", profile="quick"))["robust_regression"]
    assert robust["nuts_gaussian"] == robust["nuts"]


def test_atomic_and_merging(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cmp = hand_comparison()

    def fake_cells(cells, seed, **kwargs):
        return {(c.model, c.engine): cmp.runs.get(c.engine, cmp.runs["exact"]) for c in cells}

    monkeypatch.setattr(sweep, "run_cells", fake_cells)
    out = tmp_path / "r"
    zoo.report(["beta_bernoulli"], out=out, profile="smoke")
    before = {p.name: p.read_bytes() for p in out.iterdir()}

    def broken(*args, **kwargs):
        raise RuntimeError("disk full")

    monkeypatch.setattr(reports, "render_index", broken)
    with pytest.raises(RuntimeError, match="disk full"):
        zoo.report(["three_coin"], out=out, profile="smoke", engines=["em"])
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before  # untouched
    assert [p.name for p in tmp_path.iterdir()] == ["r"]  # no temporary directory left
    monkeypatch.undo()
    monkeypatch.setattr(sweep, "run_cells", fake_cells)
    zoo.report(["three_coin"], out=out, profile="smoke", engines=["em"])
    results = json.loads((out / "results.json").read_text())
    assert sorted(results["models"]) == ["beta_bernoulli", "three_coin"]  # earlier page kept
    assert (out / "beta_bernoulli.html").read_bytes() == before["beta_bernoulli.html"]


def test_findings_without_truth_use_converged_mcmc() -> None:
    cols = pd.MultiIndex.from_tuples(
        [("truth", "mean"), ("truth", "sd")]
        + [(e, s) for e in ("svi", "nuts") for s in ("mean", "sd", "error_in_sds")],
        names=["source", "stat"],
    )
    nan = float("nan")
    table = pd.DataFrame(
        [[nan, nan, 1.0, 0.1, nan, 1.0, 0.2, nan]],
        index=pd.Index(["tau"], name="parameter"),
        columns=cols,
    )
    nuts = Run(
        engine="nuts",
        summary=pd.DataFrame({"mean": [1.0], "sd": [0.2], "ess_bulk": [4000.0]}, index=["tau"]),
        diagnostics={"max_r_hat": 1.001, "min_ess_bulk": 4000.0, "divergences": 0},
    )
    svi = Run(engine="svi", status="failed", error="boom")
    found = reports.findings(table, runs={"svi": Run(engine="svi"), "nuts": nuts})
    assert found[0].topic == "reference" and "nuts" in found[0].text
    assert any(
        "under-estimates sd(tau) by 50%" in f.text and "nuts's draws" in f.text for f in found
    )
    failed = reports.findings(table, runs={"svi": svi, "nuts": nuts})
    assert any(
        f.level == "bad" and f.text.startswith("svi failed.") and f.text.endswith("error: boom")
        for f in failed
    )


def test_index_cell_is_green_only_when_means_and_sds_are_right() -> None:
    cmp = hand_comparison()  # svi: mean near the truth's, sd far too small
    files = reports.render_model_page(cmp)
    summary = json.loads(files["summary"])
    assert summary["engines"]["exact"]["accuracy"] == "good"
    assert summary["engines"]["svi"]["accuracy"] in ("warn", "bad")
    index = reports.render_index([summary], profile="smoke")["index.html"]
    assert 'class="entry good" href="beta_bernoulli.html#engine-exact"' in index
    svi = summary["engines"]["svi"]["accuracy"]
    assert f'class="entry {svi}" href="beta_bernoulli.html#engine-svi"' in index
    # an ok run that is badly off: its badge says so, not "ok" on a red cell
    summary["engines"]["svi"].update(status="ok", accuracy="bad")
    index = reports.render_index([summary], profile="smoke")["index.html"]
    cell = index.split('class="entry bad" href="beta_bernoulli.html#engine-svi"')[1]
    cell = cell.split("</a>")[0]
    assert '<span class="status off"' in cell and 'class="status ok"' not in cell


def test_a_model_without_docstring_has_no_empty_model_box(registry) -> None:
    import pyro
    import pyro.distributions as dist
    import torch

    def bare(y):
        p = pyro.sample("p", dist.Beta(1.0, 1.0))
        pyro.sample("y", dist.Bernoulli(p), obs=y)

    entry = zoo.register("bare_model", model=bare, data={"y": torch.tensor(1.0)})
    cmp = zoo.compare(entry, ["svi"], num_steps=10, num_samples=10)
    html = reports.render_model_page(cmp)["bare_model.html"]
    check_html(html)
    assert '<pre class="story">' not in html


def test_failed_cell_is_explained_in_plain_words() -> None:
    cmp = hand_comparison(failed_svi=True)
    html = reports.render_model_page(cmp)["beta_bernoulli.html"]
    assert "The optimisation diverged" in html
    assert html.index("The optimisation diverged") < html.index("NumericalFailure: ELBO is NaN")


def test_variants_and_the_figures_a_model_asks_for(registry) -> None:
    """Engine variants (one comparison, several guides) and the pair and fit figures."""
    import pyro
    import pyro.distributions as dist
    import torch

    x = torch.linspace(-1, 1, 12)
    y = 0.5 + 2.0 * x + 0.1 * torch.randn(12, generator=torch.Generator().manual_seed(shifted(0)))

    @zoo.register(
        data={"x": x, "y": y},
        variants={"svi_fullrank": ("svi", {"guide": "mvn"})},
        figures={"pairs": [("a", "sigma")], "fit": {"x": "x", "y": "y", "mean": "mu"}},
    )
    def line(x, y):
        a = pyro.sample("a", dist.Normal(0.0, 5.0))
        b = pyro.sample("b", dist.Normal(0.0, 5.0))
        sigma = pyro.sample("sigma", dist.HalfNormal(1.0))
        mu = pyro.deterministic("mu", a + b * x)
        with pyro.plate("n", len(y)):
            pyro.sample("y", dist.Normal(mu, sigma), obs=y)

    assert "svi_fullrank" in line.engines
    with pytest.raises(ValueError, match="unknown option 'guide'"):
        zoo.run(line, "svi_fullrank", guide="normal")  # fixed by the variant
    cmp = zoo.compare(
        line,
        ["svi", "svi_fullrank", "nuts"],
        svi={"num_steps": 200, "num_samples": 100},
        svi_fullrank={"num_steps": 200, "num_samples": 100},
        nuts={"num_samples": 50, "warmup": 50, "num_chains": 1},
    )
    assert cmp.runs["svi_fullrank"].diagnostics["guide"] == "mvn"
    assert cmp.runs["svi"].diagnostics["guide"] == "normal"
    kinds = [f.kind for f in reports.model_context(cmp)["figures"]]
    assert "pairs" in kinds and "fit" in kinds
    check_html(reports.render_model_page(cmp)["line.html"])


def test_a_variant_can_fix_model_arguments(registry) -> None:
    """``(engine, options, model arguments)``: the variant runs the model under another flag
    (robust_regression's Gaussian likelihood); the report never takes it as the reference and
    says its differences are the model's. Arguments the model does not take are refused."""
    import pyro
    import pyro.distributions as dist
    import torch

    from zoo_reports.findings import findings

    y = torch.tensor([0.1, -0.3, 0.2, 0.0, 12.0])  # one gross outlier

    @zoo.register(
        data={"y": y},
        variants={"nuts_normal": ("nuts", {}, {"noise": "normal"})},
    )
    def location(y, noise="student"):
        m = pyro.sample("m", dist.Normal(0.0, 10.0))
        with pyro.plate("n", len(y)):
            lik = dist.StudentT(2.0, m, 0.3) if noise == "student" else dist.Normal(m, 0.3)
            pyro.sample("y", lik, obs=y)

    assert "nuts_normal" in location.engines
    opts = {"num_samples": 300, "warmup": 200, "num_chains": 2}
    cmp = zoo.compare(location, ["nuts", "nuts_normal"], **opts)
    normal, student = cmp.runs["nuts_normal"], cmp.runs["nuts"]
    assert normal.model_data == {"noise": "normal"}
    assert student.model_data == {}
    # the Normal likelihood's mean is the data mean (2.4) shrunk a hair; Student-t ignores 12
    assert normal.summary.loc["m", "mean"] == pytest.approx(2.4, abs=0.1)
    assert abs(student.summary.loc["m", "mean"]) < 0.3
    found = findings(cmp.table_wide, runs=cmp.runs)
    ref = [f for f in found if f.topic == "reference"]
    assert ref and "accuracy is measured against nuts " in ref[0].text
    assert any(f.engine == "nuts_normal" and f.topic == "variant" for f in found)
    assert accuracy_level(found, "nuts_normal") is None
    with pytest.raises(ValueError, match="does not take"):
        zoo.register(
            "bad",
            model=location.model,
            data={"y": y},
            variants={"v": ("nuts", {}, {"nosie": "normal"})},
        )
    with pytest.raises(ValueError, match="must be"):
        zoo.register("bad2", model=location.model, data={"y": y}, variants={"v": ("nuts",)})


def test_a_closed_form_approximations_bias_is_stated() -> None:
    """CAVI's moments are exact for its factorised posterior (no Monte-Carlo noise), so its
    6.5% narrower sd(mu) on normal_gamma (1 - sqrt(7/8), test_conjugate) is stated, not hidden
    under the tolerance meant for noisy samplers; the closed form itself agrees."""
    cmp = zoo.compare("normal_gamma", ["exact", "cavi"], progress=False)
    found = reports.findings(cmp.table_wide, runs=cmp.runs)
    cavi = [f for f in found if f.engine == "cavi" and f.topic == "accuracy"]
    assert any("under-estimates sd(mu) by 6.5%" in f.text and f.level == "warn" for f in cavi)
    assert accuracy_level(found, "cavi") == "warn"
    assert accuracy_level(found, "exact") == "good"


def test_decoded_paths_figure_shows_each_engines_states() -> None:
    """hmm's page draws the hidden states per engine: a point estimate's share of draws in each
    state is its decoded path (forward_backward's and hmmlearn's Viterbi paths, each equal to
    the Viterbi path recomputed here), and the figure is on the page."""
    from zoo.models.sequential import _symbols
    from zoo_inference.algorithms.hmm import viterbi
    from zoo_reports.model_figures import state_shares

    cmp = zoo.compare("hmm", ["forward_backward", "hmmlearn"], progress=False)
    x = zoo.get_model("hmm").load_data()["x"]
    for engine in ("forward_backward", "hmmlearn"):
        run = cmp.runs[engine]
        post = run.idata.posterior
        pi, A, B = (post[k].values.reshape(post[k].shape[2:]) for k in ("pi", "A", "B"))
        log_b = np.log(B)[:, _symbols(x, B.shape[1])].T
        path, _ = viterbi(pi, A, log_b)
        shares = state_shares(run, "z_", len(x))
        np.testing.assert_array_equal(shares.argmax(0), path)
        assert set(np.unique(shares)) <= {0.0, 1.0}
    kinds = [f.kind for f in reports.model_context(cmp)["figures"]]
    assert "states" in kinds


def test_cluster_and_topic_figures_on_the_family_pages() -> None:
    """gaussian_mixture's page colours the data by assignment, EM's from its responsibilities:
    EM and scikit-learn's EM reach the same maximum, so their most responsible components agree
    point by point; lda's page lists each topic's words."""
    cmp = zoo.compare("gaussian_mixture", ["em", "sklearn"], progress=False)
    em, sk = (np.argmax(cmp.runs[e].extras["responsibilities"], 1) for e in ("em", "sklearn"))
    assert (em == sk).mean() > 0.99
    assert "clusters" in [f.kind for f in reports.model_context(cmp)["figures"]]
    lda = zoo.compare("lda", ["cavi", "sklearn"], progress=False)
    assert "topics" in [f.kind for f in reports.model_context(lda)["figures"]]


# ----------------------------------------------------------------------------- honest statuses


def diag_run(engine: str = "nuts", **diagnostics) -> Run:
    traces = {"elbo": diagnostics.pop("elbo")} if "elbo" in diagnostics else {}
    return Run(engine=engine, diagnostics=diagnostics, traces=traces)


def test_a_status_is_ok_only_where_the_runs_diagnostics_pass() -> None:
    """The thresholds of reports.findings, on each side: R-hat, ESS, divergences, Pareto k-hat
    (not of a point estimate), an engine's own caveat first (its k-hat not said twice)."""
    from zoo_inference.verdict import MAX_PARETO_K, MAX_R_HAT, MIN_ESS, assess

    assert assess(diag_run(max_r_hat=MAX_R_HAT, min_ess_bulk=MIN_ESS, divergences=0)).status == "ok"
    mh = assess(diag_run("mh", max_r_hat=1.87, min_ess_bulk=3.0, divergences=0))
    assert mh.status == "unreliable" and mh.flags == ("r_hat", "ess")
    assert "R\u0302 1.87 > 1.01" in mh.caveat and "min bulk ESS 3 < 100" in mh.caveat
    near = assess(diag_run(max_r_hat=1.0106, min_ess_bulk=900.0, divergences=0))
    assert "R\u0302 1.011 > 1.01" in near.caveat  # not "1.01 > 1.01"
    div = assess(diag_run(max_r_hat=1.0, min_ess_bulk=900.0, divergences=1))
    assert div.flags == ("divergences",) and "1 divergent transition:" in div.caveat
    svi = assess(diag_run("svi_meanfield", pareto_k=1.63))
    assert svi.flags == ("pareto_k",) and "Pareto k\u0302 1.63 > 0.7" in svi.caveat
    assert assess(diag_run("svi", pareto_k=MAX_PARETO_K)).status == "ok"
    point = Run(engine="svi", kind="point", diagnostics={"pareto_k": 3.0})
    assert assess(point).status == "ok"  # a MAP point: its k-hat says nothing
    own = Run(
        engine="importance",
        status="unreliable",
        caveat="importance weights have Pareto k\u0302 1.44 > 0.7",
        diagnostics={"pareto_k": 1.44},
    )
    verdict = assess(own)
    assert verdict.status == "unreliable" and verdict.flags == ("caveat",)
    assert verdict.caveat.count("1.44") == 1
    failed = assess(Run(engine="svi", status="failed", error="boom"))
    assert failed.status == "failed" and failed.reasons == ("boom",)
    assert assess(Run(engine="exact")).status == "ok"  # nothing to check


def test_an_elbo_still_rising_is_not_converged() -> None:
    """The last 10% of steps against the 10% before: a rise beyond 3 standard errors and beyond
    1% of the run's whole rise is unconverged; a flat noisy tail, a creeping one and a trace too
    short to judge are not flagged (deterministic traces: no seed to be lucky with)."""
    from zoo_inference.verdict import assess, elbo_rise

    steps = np.arange(400)
    wiggle = np.where(steps % 2 == 0, 1.0, -1.0)  # sd 1 noise, mean 0
    rising = list(-200 + 0.5 * steps + wiggle)
    verdict = assess(diag_run("svi", elbo=rising))
    assert verdict.flags == ("elbo",) and "ELBO still rose by 20" in verdict.caveat
    flat = list(-100 * np.exp(-steps / 20) - 10 + wiggle)
    assert assess(diag_run("svi", elbo=flat)).status == "ok"
    creeping = list(-100 * np.exp(-steps / 20) - 10 + 1e-4 * steps)  # 0.004 < 1% of 100
    up, total, _ = elbo_rise(creeping)
    assert 0 < up < 0.01 * total and assess(diag_run("svi", elbo=creeping)).status == "ok"
    assert elbo_rise(rising[:40]) is None  # 4 steps a window: not judged


def test_unreliable_runs_are_marked_so_on_the_page_and_in_the_index() -> None:
    """The issue's example: importance (k-hat 1.44), mh (R-hat 1.87, min ESS 3) and
    svi_meanfield (k-hat 1.63) were green `ok`; each is `unreliable` with its reason."""
    held = hand_comparison()  # svi with Pareto k-hat 0.9
    mh = make_run(
        "mh", {"p": np.full((2, 50), 0.6)}, diagnostics={"max_r_hat": 1.87, "min_ess_bulk": 3.0}
    )
    mh.diagnostics.update(wall_time_s=0.4, divergences=0)
    entry = zoo.get_model("beta_bernoulli")
    cmp = comparison(entry, {**held.runs, "mh": judged(mh)}, held.data)
    files = reports.render_model_page(cmp)
    html = files["beta_bernoulli.html"]
    check_html(html)
    row = html.split('<tr id="engine-mh">')[1].split("</tr>")[0]
    assert 'class="status unreliable"' in row and "R\u0302 1.87 &gt; 1.01" in row
    summary = json.loads(files["summary"])
    assert summary["engines"]["svi"]["status"] == "unreliable"
    assert summary["engines"]["svi"]["flags"][0] == "pareto_k"
    assert summary["engines"]["mh"]["flags"] == ["r_hat", "ess"]
    assert summary["engines"]["exact"]["status"] == "ok"
    index = reports.render_index([summary], profile="smoke")["index.html"]
    assert "R\u0302 1.87 \u00b7 ESS 3" in index and "k\u0302 0.90" in index
    assert index.count('<span class="status unreliable">unreliable</span>') == 3  # + legend
    page = json.loads(files["beta_bernoulli.json"])
    assert page["runs"]["mh"]["status"] == "unreliable" and page["runs"]["mh"]["reasons"]
    assert page["runs"]["mh"]["caveat"] == "; ".join(page["runs"]["mh"]["reasons"])


# ----------------------------------------------------------------------------- ranked findings


def test_findings_are_ranked_by_distance_from_the_truth() -> None:
    from zoo_reports.findings import Finding, rank_findings

    found = [
        Finding(None, "reference", "info", "against nuts"),
        Finding("nuts", "accuracy", "good", "nuts agrees", measure="agree"),
        Finding("nuts", "mcmc", "good", "nuts: R-hat 1.001"),
        Finding("cavi", "accuracy", "warn", "cavi sd 6.5%", 0.065, "sd_under"),
        Finding("mh", "accuracy", "bad", "mh mean 1.5 sd", 1.5, "mean_off"),
        Finding("mh", "unreliable", "bad", "mh unreliable"),
        Finding("svi", "accuracy", "bad", "svi sd 40%", 0.4, "sd_under"),
        Finding("svi", "evidence", "info", "svi ELBO"),
    ]
    top, rest = rank_findings(found)
    assert [f.text for f in top] == [
        "mh mean 1.5 sd",
        "svi sd 40%",
        "cavi sd 6.5%",
        "against nuts",
        "mh unreliable",
    ]
    assert [(g["engine"], g["level"], len(g["findings"])) for g in rest] == [
        ("nuts", "good", 2),
        ("svi", "info", 1),
    ]
    # at least three first, even when all is well: then agreement
    calm, _ = rank_findings([found[1], found[2], found[7], found[0]])
    assert [f.text for f in calm] == ["against nuts", "nuts agrees", "nuts: R-hat 1.001"]
    assert sum(len(g["findings"]) for g in rest) + len(top) == len(found)


def test_the_page_shows_the_top_findings_then_the_rest_per_engine() -> None:
    cmp = hand_comparison()
    ctx = reports.model_context(cmp, figures=False)
    assert 3 <= len(ctx["top_findings"]) <= 5
    assert ctx["top_findings"][0]["measure"] in ("mean_off", "sd_under", "sd_over")
    html = reports.render_model_page(cmp)["beta_bernoulli.html"]
    first = html.split('<ul class="findings top">')[1].split("</ul>")[0]
    assert "svi under-estimates sd(p)" in first
    assert html.count('<details class="group">') == len(ctx["finding_groups"]) >= 1


# ----------------------------------------------------------------------------- reproduce this


def test_reproduce_gives_the_exact_calls() -> None:
    """The Python call of an engine run again gives the same numbers; its command line's options
    parse back to the options it ran with."""
    import shlex

    from zoo.cli import _parse_options

    cmp = hand_comparison()
    repro = reports.model_context(cmp, figures=False)["reproduce"]
    exact = next(e for e in repro["engines"] if e["engine"] == "exact")
    assert exact["python"] == "run = zoo.run('beta_bernoulli', 'exact', seed=0, num_samples=500)"
    scope = {"zoo": zoo}
    exec(exact["python"], scope)  # noqa: S102 - our own generated line
    pd.testing.assert_frame_equal(scope["run"].summary, cmp.runs["exact"].summary)
    for e in repro["engines"]:
        words = shlex.split(e["cli"])
        assert words[:6] == ["zoo", "run", "beta_bernoulli", "--engine", e["engine"], "--seed"]
        options = [w for i, w in enumerate(words) if i and words[i - 1] == "-o"]
        ran = {k: v for k, v in cmp.runs[e["engine"]].options.items() if v is not None}
        assert _parse_options(options) == ran, e["cli"]
    assert _parse_options(shlex.split(reports.render._cli_option("backend", "zoo"))[1:]) == {
        "backend": "zoo"
    }
    compile(repro["python"], "reproduce", "exec")  # the comparison's call is Python
    assert "    exact={'num_samples': 500}," in repro["python"]
    assert {"python", "torch", "pyro-ppl"} <= set(repro["versions"])
    assert int(repro["machine"]["cores"]) >= 1
    html = reports.render_model_page(cmp)["beta_bernoulli.html"]
    assert 'id="reproduce"' in html and "zoo run beta_bernoulli --engine exact" in html


# ----------------------------------------------------------------------------- the zoo index


def cell(status="ok", accuracy="good", wall=1.0, **more):
    return {"status": status, "accuracy": accuracy, "wall_time_s": wall, **more}


def synthetic_models():
    """Four models' index lines, as reports.model_summary writes them."""
    return [
        {
            "name": "a",
            "family": "conjugate",
            "truth": "closed form",
            "parameters": 1,
            "page": "a.html",
            "applicable": ["svi", "nuts", "mh", "exact"],
            "engines": {
                "svi": cell(accuracy="warn", wall=0.5, sd_under=0.07),
                "nuts": cell(wall=2.0, ess_per_s=500.0),
                "mh": cell(
                    "unreliable", "bad", 0.3, flags=["r_hat", "ess"], ess_per_s=1.0, mean_off=1.2
                ),
                "exact": cell(wall=0.01),
            },
        },
        {
            "name": "b",
            "family": "conjugate",
            "truth": "closed form",
            "parameters": 2,
            "page": "b.html",
            "applicable": ["svi", "nuts", "mh", "cavi"],
            "engines": {
                "svi": cell(accuracy="bad", sd_under=0.65),
                "nuts": cell(wall=3.0, ess_per_s=100.0),
                "mh": cell(accuracy="warn", ess_per_s=200.0),
                "cavi": cell(accuracy="warn", sd_under=0.065),
            },
        },
        {
            "name": "c",
            "family": "regression",
            "parameters": 31,
            "page": "c.html",
            "applicable": ["svi", "nuts", "laplace", "svi_meanfield"],
            "engines": {
                "svi": cell(wall=0.2),
                "svi_meanfield": cell("unreliable", "warn", flags=["pareto_k"], sd_under=0.3),
                "nuts": cell("unreliable", "good", 5.0, flags=["divergences"], ess_per_s=50.0),
                "laplace": cell("failed", None, error="no mode found"),
            },
        },
    ]


def test_zoo_summary_says_where_each_engine_wins_and_fails() -> None:
    from zoo_reports.zoo_findings import zoo_findings

    found = zoo_findings(synthetic_models(), ["svi", "nuts", "mh", "laplace"])
    text = {f.engine: f.text for f in found}
    assert text["svi"] == (
        "svi: agrees with the truth on 0 of 2 models; agrees with the reference run on 1 of 1 "
        "model; under-estimates some posterior sds on 2 of 3 models (each one's worst by "
        "7.0\u201365%)."
    )
    assert text["nuts"] == (
        "nuts: agrees with the truth on 2 of 2 models; agrees with the reference run on 1 of 1 "
        "model; unreliable on 1 of 3 models "
        "(divergences on 1); 1 of the 1 model with more than 10 parameters, 0 of the 2 with "
        "at most 10."
    )
    assert text["mh"].startswith("mh: agrees with the truth on 0 of 2 models;")
    assert "means off by more than noise on 1 of 2 models (up to 1.20 posterior sd)" in text["mh"]
    assert "unreliable on 1 of 2 models (R\u0302 > 1.01 on 1, ESS < 100 on 1)" in text["mh"]
    assert text["laplace"] == "laplace: failed on 1 of 1 model (c)."
    assert [f.engine for f in found][:4] == ["svi", "nuts", "mh", "laplace"]  # generic first
    assert {f.engine: f.level for f in found}["mh"] == "bad"
    wins = [f.text for f in found if f.engine is None]
    assert wins[0] == (
        "Fastest engine that is ok and agrees with the truth: nuts on 2 models (a and b); "
        "svi on 1 model (c)."
    )
    # b: nuts 100/s and mh 200/s, both ok; a: mh is unreliable; c: nuts is unreliable
    assert wins[1] == (
        "Most effective draws per second among the samplers that are ok, on the 1 model "
        "where two or more are: mh on 1."
    )
    assert len(wins) == 2


def test_index_summary_folds_the_models_own_algorithms_below_the_generic_engines() -> None:
    """The summary above the matrix leads with the generic engines (the matrix's columns) and
    the zoo-wide lines; the reference algorithms and variants, a model or two each, are folded
    (the whole zoo has 24 of them: unfolded they pushed the matrix 1700 px down)."""
    html = reports.render_index(synthetic_models(), profile="smoke")["index.html"]
    shown, folded = html.split('<details class="group" id="more-engines">')
    folded = folded.split("</details>")[0]
    shown = shown.split('<h2 id="summary">')[1]
    for engine in ("svi", "nuts", "mh", "laplace"):
        assert f"<b>{engine}</b>:" in shown and f"<b>{engine}</b>:" not in folded
    assert "Fastest engine that is ok" in shown
    assert "3 more engines: the models' own algorithms and the engine variants" in folded
    for engine in ("cavi", "exact", "svi_meanfield"):
        assert f"<b>{engine}</b>:" in folded and f"<b>{engine}</b>:" not in shown


def test_index_columns_fit_generic_engines_and_one_reference_column() -> None:
    from zoo_reports.render import index_column, index_columns

    models = synthetic_models()
    assert index_columns(models) == ["svi", "nuts", "mh", "laplace", "reference"]
    assert [index_column(e) for e in ("svi_meanfield", "nuts_states", "em", "sklearn_pca")] == [
        "svi",
        "nuts",
        "reference",
        "reference",
    ]
    files = reports.render_index(models, profile="quick")
    html = files["index.html"]
    check_html(html)
    assert html.index('id="legend"') < html.index('<table class="matrix"')
    assert '<option value="conjugate">conjugate (2)</option>' in html
    assert html.count('<tr data-family="conjugate">') == 2
    head = html.split("<thead>")[1].split("</thead>")[0]
    assert head.count("<th") == 6  # the model and five columns
    row_c = html.split('<tr data-family="regression">')[1].split("</tr>")[0]
    assert '<span class="name">svi_meanfield</span>' in row_c and "k\u0302" not in row_c
    assert "no mode found" in row_c or "error" in row_c
    md = files["index.md"]
    assert "| Model | family | svi | nuts | mh | laplace | reference |" in md
    assert json.loads(files["results.json"])["summary"]


def test_cells_keep_the_loo_not_the_log_likelihood(tmp_path: Path) -> None:
    """A report's cell stores its run's pointwise LOO, not the log-likelihood (draws x
    observations, which made the quick report 728 MB): the page's LOO row is the one the full
    run gives, and the cells are as readable as the pages."""
    from zoo_reports.loo import loo_comparison

    out = tmp_path / "r"
    model, engine = "unnormalised_gaussian", "nuts"
    zoo.report([model], engines=[engine], out=out, profile="smoke", progress=False)
    page = json.loads((out / f"{model}.json").read_text())
    (row,) = page["loo"]["rows"]
    # the same run held whole (same seed and options): LOO from its log-likelihood
    cmp = zoo.compare(model, [engine], seed=0, progress=False, **page["runs"][engine]["options"])
    assert "log_likelihood" in cmp.runs[engine].idata.groups()
    held = loo_comparison(cmp)
    assert held is not None and held["kept"] == []
    (want,) = held["rows"]
    for key in ("elpd_loo", "se", "p_loo", "elpd_waic", "k_max", "n_obs", "draws"):
        assert row[key] == pytest.approx(want[key], rel=1e-12), key
    assert page["loo"]["kept"] == [engine]
    files = [p for p in (out / "cells").rglob("*") if p.is_file()]
    (nc,) = [p for p in files if p.suffix == ".nc"]
    assert "log_likelihood" not in az.from_netcdf(nc).groups()
    # below what a float64 log-likelihood alone would take: draws x 1000 observations x 8 bytes
    assert sum(p.stat().st_size for p in files) < row["draws"] * row["n_obs"] * 8 / 2
    mode = (out / f"{model}.html").stat().st_mode & 0o777
    assert {p.stat().st_mode & 0o777 for p in files} == {mode}


def test_reproduce_commands_load_a_users_models_and_run_as_printed(tmp_path: Path) -> None:
    """A report of a user's model (a file in the working folder) under a user's sampler (a file
    elsewhere) prints commands that load both; each runs as printed, from the shell and in
    Python, and gives the page's numbers."""
    import os
    import shutil
    import subprocess
    import sys

    (tmp_path / "my_models.py").write_text(
        "import pyro, pyro.distributions as dist, torch\n"
        "import zoo\n\n"
        "@zoo.register(data={'y': torch.tensor([0.5, 1.5, -0.2])})\n"
        "def my_level(y):\n"
        "    mu = pyro.sample('mu', dist.Normal(0.0, 1.0))\n"
        "    with pyro.plate('n', len(y)):\n"
        "        pyro.sample('y', dist.Normal(mu, 1.0), obs=y)\n"
    )
    mala = ROOT / "examples" / "mala.py"
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    env["OMP_NUM_THREADS"] = "1"

    def shell(command: str) -> None:
        done = subprocess.run(
            command, shell=True, cwd=tmp_path, env=env, capture_output=True, text=True
        )
        assert done.returncode == 0, f"{command}\n{done.stderr[-2000:]}"

    shell(
        f"zoo report my_level --models my_models.py --models {shlex.quote(str(mala))} "
        "--engines mala --profile smoke --out out -q"
    )
    page = json.loads((tmp_path / "out" / "my_level.json").read_text())
    repro = page["reproduce"]
    assert repro["sources"] == ["my_models.py", str(mala)]
    (mala_cell,) = repro["engines"]
    assert "--models my_models.py" in mala_cell["cli"]
    shell(mala_cell["cli"] + " --out again -q")
    again = pd.read_csv(tmp_path / "again" / "summary.csv", index_col=0)
    assert again.loc["mu", "mean"] == pytest.approx(page["runs"]["mala"]["summary"]["mu"]["mean"])
    script = repro["python"].replace("out='report'", "out='from_python'")
    assert f"zoo.load_models('my_models.py', {str(mala)!r})" in script
    (tmp_path / "again.py").write_text(script)
    shell(f"{shlex.quote(sys.executable)} again.py")
    python = json.loads((tmp_path / "from_python" / "my_level.json").read_text())
    assert python["runs"]["mala"]["summary"] == page["runs"]["mala"]["summary"]
    shutil.rmtree(tmp_path / "out")
    shell(repro["report"] + " --out out -q")  # the whole page's command, as printed
    whole = json.loads((tmp_path / "out" / "my_level.json").read_text())
    assert whole["runs"]["mala"]["summary"] == page["runs"]["mala"]["summary"]


def test_a_scripts_modules_imported_by_name_load_in_the_printed_command(tmp_path: Path) -> None:
    """A script that imports its models and sampler by name (the README's ``import mala``, the
    files beside it) gets commands that name the modules; ``zoo`` from the shell in that folder
    finds them there, as the script did, and gives the page's numbers."""
    import os
    import shutil
    import subprocess
    import sys

    (tmp_path / "walk_models.py").write_text(
        "import pyro, pyro.distributions as dist, torch\n"
        "import zoo\n\n"
        "@zoo.register(data={'y': torch.tensor([0.5, 1.5, -0.2])})\n"
        "def walk_level(y):\n"
        "    mu = pyro.sample('mu', dist.Normal(0.0, 1.0))\n"
        "    with pyro.plate('n', len(y)):\n"
        "        pyro.sample('y', dist.Normal(mu, 1.0), obs=y)\n"
    )
    shutil.copy(ROOT / "examples" / "mala.py", tmp_path / "mala.py")
    (tmp_path / "script.py").write_text(
        "import zoo\nimport walk_models, mala\n"
        "zoo.report(['walk_level'], engines=['mala'], profile='smoke', out='out', progress=False)\n"
    )
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    env["OMP_NUM_THREADS"] = "1"
    env.pop("PYTHONPATH", None)

    def shell(command: str) -> None:
        done = subprocess.run(
            command, shell=True, cwd=tmp_path, env=env, capture_output=True, text=True
        )
        assert done.returncode == 0, f"{command}\n{done.stderr[-2000:]}"

    shell(f"{shlex.quote(sys.executable)} script.py")
    page = json.loads((tmp_path / "out" / "walk_level.json").read_text())
    (cell,) = page["reproduce"]["engines"]
    assert "--models walk_models --models mala" in cell["cli"]
    shell(cell["cli"] + " --out again -q")
    again = pd.read_csv(tmp_path / "again" / "summary.csv", index_col=0)
    assert again.loc["mu", "mean"] == pytest.approx(page["runs"]["mala"]["summary"]["mu"]["mean"])


def test_a_long_runs_draws_are_kept_thinned_for_the_figures(monkeypatch) -> None:
    """A report keeps at most MAX_STORED_DRAWS draws of a run (and MAX_STORED_BYTES of them),
    every chain thinned evenly; its summary, from every draw, and the findings' count of
    independent draws stay the run's."""
    from zoo import store
    from zoo_reports.findings import STORED_KEY, n_eff

    run = zoo.run("beta_bernoulli", "svi", seed=0, num_samples=10_000, num_steps=50)
    kept = store.stored_form(run)
    assert store.MAX_STORED_DRAWS == 2000
    assert kept.idata.posterior.sizes["draw"] == 2000  # every 5th: ceil(10000 / 2000)
    np.testing.assert_array_equal(kept.idata.posterior.p.values, run.idata.posterior.p[:, ::5])
    assert kept.extras[STORED_KEY] == {"draws": 10_000, "every": 5}
    assert "log_likelihood" not in kept.idata.groups() and kept.extras["loo"]["n_obs"] > 0
    pd.testing.assert_frame_equal(kept.summary, run.summary)
    assert n_eff(kept, "p") == n_eff(run, "p") == 10_000
    monkeypatch.setattr(store, "MAX_STORED_BYTES", 4 * 1000)  # p: 4 bytes a draw (float32)
    assert store.stored_form(run).idata.posterior.sizes["draw"] == 1000
    short = zoo.run("beta_bernoulli", "exact", seed=0, num_samples=100)
    assert store.stored_form(short) is short  # nothing to thin, no log-likelihood: as it is


def test_a_page_json_holds_the_compared_rows_of_a_huge_summary() -> None:
    from zoo_reports.render import MAX_JSON_SUMMARY_ROWS, json_summary

    rows = [f"z[{i}]" for i in range(MAX_JSON_SUMMARY_ROWS + 1)] + ["w[0]", "w[1]", "s"]
    summary = pd.DataFrame({"mean": np.arange(len(rows), dtype=float)}, index=rows)
    assert list(json_summary(summary, ["w", "s"]).index) == ["w[0]", "w[1]", "s"]
    assert len(json_summary(summary.iloc[:10], ["w"])) == 10  # small: whole
