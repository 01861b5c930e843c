"""``zoo.register`` names the argument that is not a function and says what it should be."""

from __future__ import annotations

import pytest

import zoo


def model(y):
    pass


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"model": "not a function"}, "model must be the Pyro model, a function of the data"),
        ({"model": model, "guide": 3}, "guide must be a Pyro guide"),
        ({"model": model, "posterior": "x"}, r"posterior must be a function \(\*\*data\) -> \("),
        ({"model": model, "ground_truth": 1}, r"ground_truth must be a function .*GroundTruth"),
        ({"model": model, "references": {"em": 1.5}}, "reference engine 'em' must be a function"),
    ],
)
def test_a_non_callable_argument_is_named(kwargs, message, registry):
    with pytest.raises(ValueError, match=message) as err:
        zoo.register("m", data={"y": 1.0}, **kwargs)
    given = [v for v in kwargs.values() if not callable(v)]
    bad = given[0]["em"] if isinstance(given[0], dict) else given[0]
    assert f"got {type(bad).__name__} {bad!r}" in str(err.value)
    assert "m" not in zoo.list_models()


def test_the_decorator_form_checks_the_model_too(registry):
    with pytest.raises(ValueError, match="model must be the Pyro model"):
        zoo.register(name="m", data={"y": 1.0})("not a function")
