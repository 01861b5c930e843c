"""The models' measured tags: the committed file's models are registered, the labels are
the thresholds' reading of its figures, what needs no sampler re-measures the same here, and
the API and CLI filter by them."""

from __future__ import annotations

import warnings

import pytest
import torch

import zoo
from zoo.tags import TAGS, measured
from zoo_inference import tags as measures
from zoo_inference.density import batched_density


def test_the_measured_models_are_registered_and_read_alike() -> None:
    meta = measured()
    assert set(meta["models"]) <= set(zoo.list_models()) and len(meta["models"]) >= 30
    assert meta["seed"] == 0 and {"torch", "pyro-ppl"} <= set(meta["versions"])
    for name, figures in meta["models"].items():
        assert "error" not in figures, (name, figures.get("error"))
        assert figures["nuts"]["status"], name
        got = zoo.model_tags(name)
        assert got is not None and set(got.labels) <= set(TAGS)
        nuts = figures["nuts"]
        if figures["dimension"] is None:  # nuts does not apply: nothing drawn to measure
            assert nuts["status"] == "does not apply" and nuts["reason"], name
            continue
        assert figures["dimension"] >= 1 and nuts["divergences"] >= 0, name
        if figures["scale_ratio"] is not None:
            assert figures["scale_ratio"] >= 1 and figures["excess_kurtosis"] >= -2, name
            assert nuts["max_r_hat"] >= 0.99 and nuts["min_ess_bulk"] > 0, name
            assert figures["modes"] is None or figures["modes"] >= 1, name


@pytest.mark.parametrize(
    "name",
    [
        "eight_schools",
        "gaussian_mixture",
        "hmm",
        "pdb_hudson_lynx_hare_lotka_volterra",
        "beta_bernoulli",
    ],
)
def test_static_figures_measure_the_same_here(name: str) -> None:
    """Dimension, discrete sites and the ODE profile need no sampler: measured again, as the
    file has them."""
    figures = measured()["models"][name]
    entry = zoo.get_model(name)
    assert figures["discrete"] == len(entry.structure.discrete)
    if figures["dimension"] is None:
        return
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        density = batched_density(
            entry.model, entry.load_data(), entry.structure, 1, dtype=torch.float64
        )
    assert figures["dimension"] == density.dim
    probe = density.random_points(density.generator(0), scale=0.5)[0]
    assert figures["ode"] == measures.calls_ode_solver(lambda: density.log_density(probe))


def test_the_known_geometries_are_found() -> None:
    """What the literature says of these posteriors, found by the measures: the centred eight
    schools diverges under nuts, the ODEs call a solver, the HMMs have discrete states."""
    assert "divergences" in zoo.model_tags("eight_schools").labels
    assert "pdb_hudson_lynx_hare_lotka_volterra" in zoo.list_models(tag="ode")
    assert not {"eight_schools", "hmm"} & set(zoo.list_models(tag="ode"))
    assert {"hmm", "gaussian_mixture"} <= set(zoo.list_models(tag="discrete"))


def test_list_by_tag_and_its_errors(capsys) -> None:
    from zoo.cli import main

    funnel = zoo.list_models(tag="funnel")
    assert all("funnel" in zoo.model_tags(n).labels for n in funnel)
    assert zoo.list_models(suite="posteriordb", tag="discrete") == [
        n for n in zoo.list_models(suite="posteriordb") if n in zoo.list_models(tag="discrete")
    ]
    with pytest.raises(zoo.ZooError, match="unknown tag 'funnels'; the tags are discrete, ode"):
        zoo.list_models(tag="funnels")
    assert main(["list", "--tag", "discrete"]) == 0
    listed = [line.split()[0] for line in capsys.readouterr().out.splitlines() if line[0] != " "]
    assert listed == zoo.list_models(tag="discrete")
    assert main(["info", "eight_schools"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "measured tags: " + str(zoo.model_tags("eight_schools")) in out


def test_a_users_model_is_measured_on_request() -> None:
    import pyro
    import pyro.distributions as dist

    def normal(y):
        mu = pyro.sample("mu", dist.Normal(0.0, 10.0))
        with pyro.plate("n", len(y)):
            pyro.sample("y", dist.Normal(mu, 1.0), obs=y)

    with zoo.isolated():
        zoo.register("users_normal", model=normal, data=lambda seed=0: {"y": torch.zeros(5)})
        assert zoo.model_tags("users_normal") is None
        got = zoo.model_tags("users_normal", measure=True)
        assert got.figures["dimension"] == 1 and got.figures["modes"] == 1
        assert got.labels == ()  # a Gaussian posterior
        assert zoo.model_tags("users_normal") is got
