"""True/false environment variables: 1/0, true/false, yes/no, on/off (any case); anything else is refused."""

from __future__ import annotations

import pytest

from vllm_spec_plugins._env import env_flag


@pytest.mark.parametrize("value", ["1", "true", "TRUE", "yes", "On", " on "])
def test_true_values(value):
    assert env_flag("X", {"X": value}) is True


@pytest.mark.parametrize("value", ["0", "false", "False", "no", "OFF", ""])
def test_false_values(value):
    assert env_flag("X", {"X": value}) is False
    assert env_flag("X", {}) is False


@pytest.mark.parametrize("value", ["2", "y", "enable", "strict"])
def test_other_values_are_refused_naming_the_variable(value):
    with pytest.raises(ValueError, match=rf"VLLM_SPEC_PLUGINS_STRICT={value!r} is not a true/false value"):
        env_flag("VLLM_SPEC_PLUGINS_STRICT", {"VLLM_SPEC_PLUGINS_STRICT": value})


def test_strict_false_is_not_strict(monkeypatch):
    """The old reading took anything but "" and "0" as true: STRICT=false meant strict."""
    from vllm_spec_plugins.runtime.guard import strict

    monkeypatch.setenv("VLLM_SPEC_PLUGINS_STRICT", "false")
    assert strict() is False
    monkeypatch.setenv("VLLM_SPEC_PLUGINS_STRICT", "nope")
    with pytest.raises(ValueError, match="VLLM_SPEC_PLUGINS_STRICT"):
        strict()
