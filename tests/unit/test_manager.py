"""PluginHost discovery with fake entry points: isolation of broken plugins, allow-list, conflicts, select."""

from __future__ import annotations

import logging
import types

import pytest

from vllm_spec_plugins import (
    API_VERSION,
    Drafter,
    DuplicateArchitectureError,
    PluginContractError,
    PluginLoadError,
    hookimpl,
)
from vllm_spec_plugins.manager import DrafterRegistry, PluginHost, allowed_names, get_plugin_manager

from .fakes import FakeEntryPoint, heads, host_with, plugin_registering

MANAGER_LOGGER = "vllm.spec_plugins"


@pytest.fixture(autouse=True)
def _no_env_allow(monkeypatch):
    monkeypatch.delenv("VLLM_SPEC_PLUGINS", raising=False)


def good_ep(name="good", arch="GoodArch", **kw):
    return FakeEntryPoint(name, plugin_registering(heads(arch, model_type=kw.pop("model_type", None))), **kw)


# -- loading a good plugin -----------------------------------------------------------


def test_good_plugin_loads_and_is_indexed():
    ep = FakeEntryPoint("toy", plugin_registering(heads("ToyArch", model_type="toy")), value="toy_pkg.plugin",
                        dist="toy-dist", version="2.3")
    host = host_with(ep)
    info = host.plugins["toy"]
    assert info.error is None
    assert (info.name, info.value, info.dist, info.version) == ("toy", "toy_pkg.plugin", "toy-dist", "2.3")
    assert info.dist_label == "toy-dist 2.3"
    assert info.hooks == ("vllm_spec_register_drafters",)
    (d,) = info.drafters
    # the host stamps plugin name and "dist version" on every drafter
    assert (d.plugin, d.dist) == ("toy", "toy-dist 2.3")
    assert host.by_arch == {"ToyArch": d}
    assert host.by_model_type == {"toy": d}
    assert host.drafters == [d]
    assert host.broken == []
    assert ep.loads == 1


def test_plugin_class_instance_and_multiple_drafters():
    class Plugin:
        @hookimpl
        def vllm_spec_register_drafters(self, register):
            register(heads("A1"))
            register(heads("A2", model_type="a2"))

    host = host_with(FakeEntryPoint("multi", Plugin()))
    assert sorted(host.by_arch) == ["A1", "A2"]
    assert list(host.by_model_type) == ["a2"]
    assert [d.architectures for d in host.plugins["multi"].drafters] == [("A1",), ("A2",)]


def test_plugin_without_distribution():
    host = host_with(FakeEntryPoint("nodist", plugin_registering(heads("N")), dist=""))
    info = host.plugins["nodist"]
    assert (info.dist, info.version, info.dist_label) == (None, None, "no distribution")
    assert host.by_arch["N"].dist == "no distribution"


def test_plugin_with_no_hooks_registers_nothing():
    host = host_with(FakeEntryPoint("empty", types.SimpleNamespace()))
    info = host.plugins["empty"]
    assert info.error is None and info.drafters == () and info.hooks == ()


def test_registry_rejects_non_drafter_directly():
    reg = DrafterRegistry("p", "p-dist 1.0")
    with pytest.raises(PluginContractError, match=r"plugin 'p' \(p-dist 1.0\) called register\(\) with dict") as ei:
        reg({"architectures": ["X"]})
    assert (ei.value.plugin_name, ei.value.dist) == ("p", "p-dist 1.0")
    assert reg.drafters == []


def test_get_plugin_manager_has_our_hookspec():
    pm = get_plugin_manager()
    assert pm.project_name == "vllm_spec_plugins"
    assert pm.hook.vllm_spec_register_drafters.has_spec()
    assert pm.get_plugins() == set()


# -- allow-list ----------------------------------------------------------------------


@pytest.mark.parametrize("raw,expected", [
    (None, None), ("", set()), ("a,b", {"a", "b"}), (" a , ,b ,", {"a", "b"}), (",", set()),
])
def test_allowed_names(raw, expected):
    env = {} if raw is None else {"VLLM_SPEC_PLUGINS": raw}
    assert allowed_names(env) == expected


def _three():
    return [good_ep("a", "ArchA"), good_ep("b", "ArchB"), good_ep("c", "ArchC")]


@pytest.mark.parametrize("allow,loaded,skipped", [
    (None, ["a", "b", "c"], []),
    (set(), [], ["a", "b", "c"]),
    ({"a", "b"}, ["a", "b"], ["c"]),
])
def test_allow_explicit(allow, loaded, skipped):
    eps = _three()
    host = PluginHost().load(eps, allow=allow)
    assert sorted(host.plugins) == loaded
    assert host.skipped == skipped
    assert sorted(host.by_arch) == [f"Arch{n.upper()}" for n in loaded]
    # skipped plugins are never imported
    assert [ep.loads for ep in eps] == [1 if ep.name in loaded else 0 for ep in eps]


@pytest.mark.parametrize("env,loaded", [(None, ["a", "b", "c"]), ("", []), ("a,b", ["a", "b"]), ("c", ["c"])])
def test_allow_from_env(monkeypatch, env, loaded):
    if env is not None:
        monkeypatch.setenv("VLLM_SPEC_PLUGINS", env)
    host = PluginHost().load(_three())  # allow="env" is the default
    assert sorted(host.plugins) == loaded
    host2 = PluginHost().load(_three(), allow="env")
    assert sorted(host2.plugins) == loaded


def test_allow_names_missing_plugin_warns(caplog):
    with caplog.at_level(logging.WARNING, logger=MANAGER_LOGGER):
        host = PluginHost().load(_three(), allow={"a", "zzz"})
    assert sorted(host.plugins) == ["a"]
    msgs = [r.getMessage() for r in caplog.records]
    assert any("'zzz'" in m and "no installed plugin has that name" in m and "installed: a, b, c" in m for m in msgs)


# -- broken plugins --------------------------------------------------------------


def test_import_error_is_isolated(caplog):
    bad = FakeEntryPoint("bad", error=ImportError("No module named 'torch_nightly_thing'"), value="bad_pkg.plugin",
                         dist="bad-dist", version="0.9")
    with caplog.at_level(logging.WARNING, logger=MANAGER_LOGGER):
        host = host_with(good_ep("a", "ArchA"), bad, good_ep("z", "ArchZ"))
    info = host.plugins["bad"]
    assert info.error == "ImportError: No module named 'torch_nightly_thing'"
    assert (info.value, info.dist, info.version) == ("bad_pkg.plugin", "bad-dist", "0.9")
    assert info.drafters == ()
    assert host.broken == [info]
    # the others still load
    assert sorted(host.by_arch) == ["ArchA", "ArchZ"]
    assert host.plugins["a"].error is None and host.plugins["z"].error is None
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any("skipping plugin 'bad'" in m and "entry point bad = bad_pkg.plugin" in m and "bad-dist 0.9" in m
               and "torch_nightly_thing" in m for m in warnings), warnings


def test_check_alias_on_broken_plugin_explains():
    bad = FakeEntryPoint("bad", error=ImportError("No module named 'torch_nightly_thing'"), value="bad_pkg.plugin",
                         dist="bad-dist", version="0.9")
    host = host_with(bad, good_ep("a", "ArchA"))
    assert host.check_alias("a") is True
    assert host.check_alias("not-a-plugin") is False
    with pytest.raises(PluginLoadError) as ei:
        host.check_alias("bad")
    msg = str(ei.value)
    assert "entry point bad = bad_pkg.plugin" in msg
    assert "bad-dist 0.9" in msg
    assert "ImportError: No module named 'torch_nightly_thing'" in msg
    assert "pip uninstall bad-dist" in msg
    assert "VLLM_SPEC_PLUGINS" in msg
    assert (ei.value.plugin_name, ei.value.dist) == ("bad", "bad-dist 0.9")


def test_check_alias_hint_uses_env_allow_list(monkeypatch):
    monkeypatch.setenv("VLLM_SPEC_PLUGINS", "bad,a")
    host = PluginHost().load([FakeEntryPoint("bad", error=ImportError("boom")), good_ep("a", "ArchA")])
    with pytest.raises(PluginLoadError, match=r"set VLLM_SPEC_PLUGINS='a' to skip it"):
        host.check_alias("bad")


def test_describe_broken():
    host = host_with(FakeEntryPoint("bad", error=ImportError("boom"), value="bad_pkg", dist="bad-dist", version="1"))
    text = host.describe_broken()
    assert text.startswith("Broken spec-decode plugins")
    assert "plugin 'bad' (bad-dist 1, entry point bad = bad_pkg) failed to load: ImportError: boom" in text
    assert host_with(good_ep()).describe_broken() == ""


def test_misspelled_hook_is_broken():
    @hookimpl
    def vllm_spec_regster_drafters(register):  # typo
        register(heads("Typo"))

    plugin = types.SimpleNamespace(vllm_spec_regster_drafters=vllm_spec_regster_drafters)
    host = host_with(FakeEntryPoint("typo", plugin), good_ep("a", "ArchA"))
    err = host.plugins["typo"].error
    assert err.startswith("PluginValidationError: ")
    assert "vllm_spec_regster_drafters" in err
    assert "Typo" not in host.by_arch
    # unregistered, so it does not poison the plugins loaded after it
    assert host.pm.get_plugin("typo") is None
    assert host.plugins["a"].error is None and "ArchA" in host.by_arch


def test_wrong_argument_name_is_broken():
    @hookimpl
    def vllm_spec_register_drafters(registry):  # should be `register`
        registry(heads("Wrong"))

    plugin = types.SimpleNamespace(vllm_spec_register_drafters=vllm_spec_register_drafters)
    host = host_with(FakeEntryPoint("wrongarg", plugin), good_ep("z", "ArchZ"))
    err = host.plugins["wrongarg"].error
    assert err.startswith("PluginValidationError: ")
    assert "registry" in err
    assert "Wrong" not in host.by_arch
    assert host.pm.get_plugin("wrongarg") is None
    assert "ArchZ" in host.by_arch


def test_register_non_drafter_is_broken():
    host = host_with(FakeEntryPoint("nd", plugin_registering({"architectures": ["X"]}), dist="nd-dist", version="3"),
                     good_ep("z", "ArchZ"))
    err = host.plugins["nd"].error
    assert err.startswith("PluginContractError: ")
    assert "plugin 'nd' (nd-dist 3) called register() with dict" in err
    assert host.pm.get_plugin("nd") is None
    assert "ArchZ" in host.by_arch


def test_hook_raising_is_broken_and_keeps_nothing():
    @hookimpl
    def vllm_spec_register_drafters(register):
        register(heads("Half"))
        raise RuntimeError("second drafter failed")

    host = host_with(FakeEntryPoint("half", types.SimpleNamespace(vllm_spec_register_drafters=vllm_spec_register_drafters)))
    assert host.plugins["half"].error == "RuntimeError: second drafter failed"
    assert host.by_arch == {} and host.drafters == []


def test_api_version_too_new_is_broken():
    plugin = plugin_registering(heads("Future"), VLLM_SPEC_API=API_VERSION + 1)
    host = host_with(FakeEntryPoint("future", plugin))
    err = host.plugins["future"].error
    assert err.startswith("PluginContractError: ")
    assert f"VLLM_SPEC_API = {API_VERSION + 1}" in err and "upgrade vllm-spec-plugins" in err
    assert "Future" not in host.by_arch


@pytest.mark.parametrize("api", ["1", 1.0, None])
def test_api_version_not_int_is_broken(api):
    host = host_with(FakeEntryPoint("odd", plugin_registering(heads("Odd"), VLLM_SPEC_API=api)))
    assert "VLLM_SPEC_API" in host.plugins["odd"].error


def test_api_version_current_is_fine():
    host = host_with(FakeEntryPoint("now", plugin_registering(heads("Now"), VLLM_SPEC_API=API_VERSION)))
    assert host.plugins["now"].error is None and "Now" in host.by_arch


def test_duplicate_entry_point_names_keep_first(caplog):
    first = FakeEntryPoint("dup", plugin_registering(heads("First")), dist="one", version="1")
    second = FakeEntryPoint("dup", plugin_registering(heads("Second")), dist="two", version="2")
    with caplog.at_level(logging.WARNING, logger=MANAGER_LOGGER):
        host = host_with(first, second)
    assert host.plugins["dup"].dist == "one"
    assert list(host.by_arch) == ["First"]
    assert (first.loads, second.loads) == (1, 0)
    assert any("'dup' is installed twice" in r.getMessage() and "two 2" in r.getMessage() for r in caplog.records)


# -- conflicts ---------------------------------------------------------------------


def test_two_plugins_same_architecture(caplog):
    p1 = FakeEntryPoint("alpha", plugin_registering(heads("SharedArch")), dist="alpha-dist", version="1.0")
    p2 = FakeEntryPoint("beta", plugin_registering(heads("SharedArch")), dist="beta-dist", version="2.0")
    with caplog.at_level(logging.WARNING, logger=MANAGER_LOGGER):
        host = host_with(p1, p2)
    assert "SharedArch" not in host.by_arch
    with pytest.raises(DuplicateArchitectureError) as ei:
        host.select(["SharedArch"])
    msg = str(ei.value)
    assert "architecture 'SharedArch'" in msg
    assert "plugin 'alpha' (alpha-dist 1.0)" in msg and "plugin 'beta' (beta-dist 2.0)" in msg
    assert "VLLM_SPEC_PLUGINS" in msg and "alpha,beta" in msg
    assert isinstance(ei.value, PluginContractError)
    assert any("SharedArch" in r.getMessage() for r in caplog.records)


def test_three_plugins_same_architecture_all_named():
    eps = [FakeEntryPoint(n, plugin_registering(heads("X")), dist=f"{n}-dist") for n in ("p1", "p2", "p3")]
    host = host_with(*eps)
    with pytest.raises(DuplicateArchitectureError) as ei:
        host.select(["X"])
    for n in ("p1", "p2", "p3"):
        assert f"plugin '{n}' ({n}-dist 1.0)" in str(ei.value)


def test_two_plugins_same_model_type():
    p1 = FakeEntryPoint("alpha", plugin_registering(heads("ArchA", model_type="shared")), dist="alpha-dist")
    p2 = FakeEntryPoint("beta", plugin_registering(heads("ArchB", model_type="shared")), dist="beta-dist")
    host = host_with(p1, p2)
    # architectures are unique, so those still resolve
    assert host.select(["ArchA"]).name == "alpha"
    assert host.select(["ArchB"], model_type="shared").name == "beta"
    with pytest.raises(DuplicateArchitectureError) as ei:
        host.select([], model_type="shared")
    msg = str(ei.value)
    assert "model_type 'shared'" in msg
    assert "plugin 'alpha' (alpha-dist 1.0)" in msg and "plugin 'beta' (beta-dist 1.0)" in msg


def test_same_plugin_twice_same_arch_is_not_a_conflict():
    host = host_with(FakeEntryPoint("self", plugin_registering(heads("Same"), heads("Same"))))
    assert host.conflicts == {}
    assert host.select(["Same"]).name == "self"


# -- select --------------------------------------------------------------------------


@pytest.fixture
def host():
    return host_with(
        FakeEntryPoint("medusa_like", plugin_registering(heads("MedusaLike", model_type="medlike")), dist="ml"),
        FakeEntryPoint("two", plugin_registering(heads("TwoA"), heads("TwoB")), dist="two-dist"),
    )


def test_select_by_architecture(host):
    d = host.select(["Unrelated", "MedusaLike"])
    assert isinstance(d, Drafter) and d.plugin == "medusa_like" and d.architectures == ("MedusaLike",)
    assert host.select(["TwoB"]).architectures == ("TwoB",)


def test_select_by_model_type(host):
    assert host.select(["Unrelated"], model_type="medlike").name == "medusa_like"
    assert host.select([], model_type="medlike").name == "medusa_like"


def test_select_nothing(host):
    assert host.select(["Unrelated"], model_type="llama") is None
    assert host.select() is None
    # an alias that is not a plugin name is not ours to judge
    assert host.select(["Unrelated"], alias="eagle") is None


def test_select_alias_matching(host):
    assert host.select(["MedusaLike"], alias="medusa_like").name == "medusa_like"
    # a one-drafter plugin named by alias with no config info at all: that drafter
    assert host.select([], None, alias="medusa_like").architectures == ("MedusaLike",)


def test_select_alias_mismatch(host):
    with pytest.raises(PluginContractError) as ei:
        host.select(["TwoA"], alias="medusa_like")
    msg = str(ei.value)
    assert "method 'medusa_like' names plugin 'medusa_like' (ml 1.0)" in msg
    assert "['TwoA']" in msg and "['MedusaLike']" in msg
    assert ei.value.plugin_name == "medusa_like"
    with pytest.raises(PluginContractError, match="that plugin serves \\['MedusaLike'\\]"):
        host.select(["Unknown"], alias="medusa_like")


def test_select_alias_ambiguous_plugin_without_config(host):
    with pytest.raises(PluginContractError, match=r"that plugin serves \['TwoA', 'TwoB'\]"):
        host.select([], None, alias="two")


def test_select_alias_of_broken_plugin_raises_load_error():
    host = host_with(FakeEntryPoint("bad", error=ImportError("nope"), dist="bad-dist"))
    with pytest.raises(PluginLoadError, match="pip uninstall bad-dist"):
        host.select(["Whatever"], alias="bad")
