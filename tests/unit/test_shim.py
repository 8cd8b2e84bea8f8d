"""The vllm.general_plugins entry point (shim.register) and the config-phase finalize_spec."""

from __future__ import annotations

import logging
import types

import pytest

from vllm_spec_plugins import Drafter, PluginContractError, UnsupportedVllmError, _compat, shim
from vllm_spec_plugins.checkpoint import ARCH_ATTR, DIST_ATTR, PLUGIN_ATTR
from vllm_spec_plugins.patch import _util
from vllm_spec_plugins.routing import finalize_spec, plugin_of

from .fakes import FakeEntryPoint, attach, heads, host_with, plugin_registering

# -- register() ------------------------------------------------------------------


@pytest.fixture
def fresh_shim(monkeypatch):
    """register() as if never called in this process; restores the module state afterwards."""
    monkeypatch.setattr(shim, "_APPLIED", False)
    monkeypatch.setattr(shim, "STATUS", {"applied": False, "supported": None, "vllm": None, "error": None})
    return shim


def test_register_never_raises(fresh_shim, monkeypatch, caplog):
    def boom():
        raise RuntimeError("patch target moved")

    monkeypatch.setattr(shim, "_register", boom)
    with attach(caplog.handler, "vllm.spec_plugins"):
        assert shim.register() is None
    assert shim.STATUS["error"] == "RuntimeError: patch target moved"
    assert shim.STATUS["applied"] is False
    assert shim._APPLIED is True
    assert any("failed to install the runner shim" in r.getMessage() and r.levelno == logging.ERROR
               for r in caplog.records)


def test_register_runs_once(fresh_shim, monkeypatch):
    calls = []
    monkeypatch.setattr(shim, "_register", lambda: calls.append(1))
    shim.register()
    shim.register()
    shim.register()
    assert calls == [1]
    assert shim.STATUS["applied"] is True and shim.STATUS["error"] is None


def test_register_once_even_after_failure(fresh_shim, monkeypatch):
    calls = []

    def boom():
        calls.append(1)
        raise ValueError("x")

    monkeypatch.setattr(shim, "_register", boom)
    shim.register()
    shim.register()
    assert calls == [1]


@pytest.mark.parametrize("minor,ok", [((0, 32), True), ((0, 33), True), ((0, 34), True), ((0, 31), False), ((0, 35), False),
                                      ((1, 32), False), (None, False)])
def test_version_supported(monkeypatch, minor, ok):
    monkeypatch.delenv("VLLM_SPEC_PLUGINS_SKIP_VERSION_CHECK", raising=False)
    assert shim.version_supported(minor) is ok


@pytest.mark.parametrize("minor", [(0, 31), None, (0, 32)])
def test_version_check_skipped(monkeypatch, minor):
    monkeypatch.setenv("VLLM_SPEC_PLUGINS_SKIP_VERSION_CHECK", "1")
    assert shim.version_supported(minor) is True


@pytest.mark.parametrize("value,skips", [("1", True), ("yes", True), ("ON", True), ("0", False), ("off", False),
                                         ("", False)])
def test_version_check_skip_is_a_true_false_variable(monkeypatch, value, skips):
    monkeypatch.setenv("VLLM_SPEC_PLUGINS_SKIP_VERSION_CHECK", value)
    assert shim.version_supported((0, 31)) is skips


def test_version_check_skip_refuses_other_values_naming_the_variable(monkeypatch):
    monkeypatch.setenv("VLLM_SPEC_PLUGINS_SKIP_VERSION_CHECK", "maybe")
    with pytest.raises(ValueError, match="VLLM_SPEC_PLUGINS_SKIP_VERSION_CHECK='maybe' is not a true/false value"):
        shim.version_supported((0, 31))


def test_supported_text():
    assert shim.supported_text() == "0.32, 0.33 and 0.34"


def test_empty_allow_list_does_nothing(fresh_shim, monkeypatch):
    import vllm_spec_plugins.manager as manager

    def must_not_run(*a, **k):
        raise AssertionError("must not be called")

    monkeypatch.setenv("VLLM_SPEC_PLUGINS", "")
    monkeypatch.setattr(manager, "get_host", must_not_run)
    monkeypatch.setattr(shim, "vllm_version", must_not_run)
    hooks_before = {k: list(v) for k, v in _util._after_import.items()}
    assert shim._register() is None
    assert _util._after_import == hooks_before
    assert shim.STATUS["supported"] is None and shim.STATUS["vllm"] is None
    # and through the public entry point
    shim.register()
    assert shim.STATUS["applied"] is True and shim.STATUS["error"] is None
    assert _util._after_import == hooks_before


# -- finalize_spec ----------------------------------------------------------------


class TinyConfig:
    """A config class with from_pretrained, standing in for a plugin's PretrainedConfig."""

    loaded: list = []

    def __init__(self, **kw):
        self.__dict__.update(kw)

    @classmethod
    def from_pretrained(cls, path, revision=None):
        cls.loaded.append((path, revision))
        return cls(architectures=["TinyArch"], model_type="tiny", num_heads=2, hidden_size=None, vocab_size=None)


def spec_for(archs=("MedusaLike",), model_type="medlike", method="medusa", k=3, draft_len=2048, target_len=8192,
             **hf_kw):
    hf = types.SimpleNamespace(architectures=list(archs), model_type=model_type, **hf_kw)
    dmc = types.SimpleNamespace(hf_config=hf, hf_text_config=hf, model="/ckpt/medusa-tiny", revision="rev1",
                                max_model_len=draft_len)
    target_hf = types.SimpleNamespace(hidden_size=4096, vocab_size=32000)
    target = types.SimpleNamespace(hf_config=target_hf, max_model_len=target_len,
                                   get_hidden_size=lambda: target_hf.hidden_size,
                                   get_vocab_size=lambda: target_hf.vocab_size)
    return types.SimpleNamespace(draft_model_config=dmc, target_model_config=target, method=method,
                                 num_speculative_tokens=k)


@pytest.fixture
def host():
    return host_with(
        FakeEntryPoint("medlike", plugin_registering(
            heads("MedusaLike", model_type="medlike", max_speculative_tokens="num_heads")),
            dist="vllm-spec-medlike", version="0.4"),
        FakeEntryPoint("fixedk", plugin_registering(heads("FixedK", max_speculative_tokens=2, position_free=False)),
                       dist="fixedk-dist", version="1.0"),
        FakeEntryPoint("attn", plugin_registering(heads("AttnDrafter", kind="attention")), dist="attn-dist"),
        FakeEntryPoint("tiny", plugin_registering(
            heads("TinyArch", model_type="tiny", config_class=f"{__name__}:TinyConfig")), dist="tiny-dist"),
        FakeEntryPoint("auxp", plugin_registering(heads("AuxArch", aux_layer_ids="layer_ids")), dist="aux-dist"),
    )


def test_finalize_routes_heads_drafter(host):
    spec = spec_for(num_heads=4)
    out = finalize_spec(host, spec, alias=None, supported=True)
    assert out is spec
    assert spec.method == "draft_model"
    hf = spec.draft_model_config.hf_config
    assert getattr(hf, PLUGIN_ATTR) == "medlike"
    assert getattr(hf, DIST_ATTR) == "vllm-spec-medlike 0.4"
    assert getattr(hf, ARCH_ATTR) == "MedusaLike"
    assert plugin_of(spec) == "medlike"
    # missing sizes filled from the target, max_model_len raised to the target's
    assert (hf.hidden_size, hf.vocab_size) == (4096, 32000)
    assert spec.draft_model_config.max_model_len == 8192


def test_finalize_keeps_draft_sizes(host):
    spec = spec_for(num_heads=4, hidden_size=128, vocab_size=259)
    finalize_spec(host, spec, None, True)
    hf = spec.draft_model_config.hf_config
    assert (hf.hidden_size, hf.vocab_size) == (128, 259)


def test_finalize_by_model_type_fills_arch(host):
    spec = spec_for(archs=(), model_type="medlike", num_heads=4)
    finalize_spec(host, spec, None, True)
    hf = spec.draft_model_config.hf_config
    # vLLM loads the plugin's class through its private registration (never under a name vLLM serves)
    assert hf.architectures == ["MedusaLike__vsp_medlike"]
    assert getattr(hf, ARCH_ATTR) == "MedusaLike"


def test_finalize_with_alias(host):
    spec = spec_for(num_heads=4, method="draft_model")
    finalize_spec(host, spec, "medlike", True)
    assert getattr(spec.draft_model_config.hf_config, PLUGIN_ATTR) == "medlike"


def test_finalize_alias_mismatch(host):
    spec = spec_for(num_heads=4)
    with pytest.raises(PluginContractError, match="names plugin 'fixedk'"):
        finalize_spec(host, spec, "fixedk", True)


def test_finalize_k_above_max_from_config(host):
    spec = spec_for(num_heads=3, k=5)
    with pytest.raises(PluginContractError) as ei:
        finalize_spec(host, spec, None, True)
    msg = str(ei.value)
    assert "num_speculative_tokens=5" in msg
    assert "can propose at most 3 tokens per step" in msg
    assert "(num_heads=3)" in msg and "plugin 'medlike'" in msg and "vllm-spec-medlike 0.4" in msg
    assert "--spec-tokens 3 or fewer" in msg


def test_finalize_k_equal_to_max_is_fine(host):
    spec = spec_for(num_heads=3, k=3)
    assert finalize_spec(host, spec, None, True).method == "draft_model"


def test_finalize_k_above_int_max_and_not_position_free(host):
    spec = spec_for(archs=("FixedK",), model_type=None, k=3, draft_len=100)
    with pytest.raises(PluginContractError, match="at most 2 tokens"):
        finalize_spec(host, spec, None, True)
    spec = spec_for(archs=("FixedK",), model_type=None, k=2, draft_len=100)
    finalize_spec(host, spec, None, True)
    assert spec.draft_model_config.max_model_len == 100  # position_free=False: left alone


def test_finalize_max_tokens_attr_not_int(host):
    spec = spec_for(k=3)  # no num_heads in the draft config
    with pytest.raises(PluginContractError, match=r"max_speculative_tokens = 'num_heads'.*num_heads=None"):
        finalize_spec(host, spec, None, True)


@pytest.mark.parametrize("method", ["eagle", "eagle3", "dflash", "dspark"])
def test_finalize_path_heuristic_method_for_heads(host, method):
    spec = spec_for(num_heads=4, method=method)
    with pytest.raises(PluginContractError) as ei:
        finalize_spec(host, spec, None, True)
    msg = str(ei.value)
    assert "'/ckpt/medusa-tiny' belongs to plugin 'medlike'" in msg
    assert f"vLLM picked method {method!r} from the checkpoint path" in msg
    assert "Rename the checkpoint folder" in msg


def test_finalize_attention_drafter(host):
    # Attention drafters stay on vLLM's EAGLE route (draft KV cache, multi-step loop).
    spec = spec_for(archs=("AttnDrafter",), model_type=None, method="eagle")
    finalize_spec(host, spec, None, True)
    assert spec.method == "eagle"
    assert plugin_of(spec) == "attn"
    for method in ("medusa", "draft_model"):
        spec = spec_for(archs=("AttnDrafter",), model_type=None, method=method)
        with pytest.raises(PluginContractError, match=r"attention-drafter plugin 'attn'.*\"method\": \"attn\""):
            finalize_spec(host, spec, None, True)


def test_finalize_unknown_arch_unchanged(host):
    spec = spec_for(archs=("LlamaForCausalLM",), model_type="llama", method="eagle", draft_len=1024)
    before = dict(vars(spec.draft_model_config.hf_config))
    assert finalize_spec(host, spec, None, True) is spec
    assert spec.method == "eagle"
    assert vars(spec.draft_model_config.hf_config) == before
    assert spec.draft_model_config.max_model_len == 1024
    assert plugin_of(spec) is None


def test_finalize_no_draft_model(host):
    spec = types.SimpleNamespace(draft_model_config=None, method="ngram")
    assert finalize_spec(host, spec, None, True) is spec
    with pytest.raises(PluginContractError, match="method 'medlike' needs a draft model"):
        finalize_spec(host, spec, "medlike", True)


def test_finalize_unsupported_vllm(host, monkeypatch):
    monkeypatch.setattr(_compat, "vllm_version", lambda: ("0.31.2", (0, 31)))
    spec = spec_for(num_heads=4)
    with pytest.raises(UnsupportedVllmError) as ei:
        finalize_spec(host, spec, None, supported=False)
    msg = str(ei.value)
    assert "supports vLLM 0.32, 0.33 and 0.34; found 0.31.2" in msg
    assert "plugin 'medlike'" in msg and "'/ckpt/medusa-tiny'" in msg
    assert spec.method == "medusa"  # untouched


def test_finalize_unsupported_vllm_unclaimed_draft_is_fine(host, monkeypatch):
    monkeypatch.setattr(_compat, "vllm_version", lambda: ("0.31.2", (0, 31)))
    spec = spec_for(archs=("LlamaForCausalLM",), model_type="llama", method="eagle")
    assert finalize_spec(host, spec, None, supported=False).method == "eagle"


def test_finalize_reloads_with_plugin_config_class(host):
    TinyConfig.loaded.clear()
    spec = spec_for(archs=("TinyArch",), model_type="tiny")
    finalize_spec(host, spec, None, True)
    assert TinyConfig.loaded == [("/ckpt/medusa-tiny", "rev1")]
    hf = spec.draft_model_config.hf_config
    assert isinstance(hf, TinyConfig)
    assert spec.draft_model_config.hf_text_config is hf
    assert (hf.hidden_size, hf.vocab_size) == (4096, 32000)
    assert getattr(hf, PLUGIN_ATTR) == "tiny" and getattr(hf, ARCH_ATTR) == "TinyArch"
    # already the plugin's class: not reloaded
    TinyConfig.loaded.clear()
    spec2 = spec_for(archs=("TinyArch",), model_type="tiny")
    spec2.draft_model_config.hf_config = TinyConfig(architectures=["TinyArch"], model_type="tiny", hidden_size=8,
                                                     vocab_size=9)
    finalize_spec(host, spec2, None, True)
    assert TinyConfig.loaded == []
    assert spec2.draft_model_config.hf_config.hidden_size == 8


def test_finalize_aux_layer_ids(host):
    spec = spec_for(archs=("AuxArch",), model_type=None, layer_ids=(1, 5))
    finalize_spec(host, spec, None, True)
    assert spec.draft_model_config.hf_config.eagle_aux_hidden_state_layer_ids == [1, 5]
    spec = spec_for(archs=("AuxArch",), model_type=None)
    with pytest.raises(PluginContractError, match=r"draft config key 'layer_ids'"):
        finalize_spec(host, spec, None, True)


# -- attention drafters that consume chosen target layers (vLLM's eagle3 route) ------------


@pytest.fixture
def eagle_host():
    """A plugin with a plain attention drafter and one consuming target layers, as the EAGLE plugin."""
    return host_with(
        FakeEntryPoint("eaglelike", plugin_registering(
            heads("EagleLlamaForCausalLM", kind="attention", position_free=False),
            Drafter(architectures=("LlamaForCausalLMEagle3", "Eagle3LlamaForCausalLM"), kind="attention",
                    model_class="toy_pkg.model:Eagle3", position_free=False,
                    aux_layer_ids="eagle_aux_hidden_state_layer_ids")), dist="eaglelike-dist"),
        FakeEntryPoint("attn", plugin_registering(heads("AttnDrafter", kind="attention")), dist="attn-dist"),
        FakeEntryPoint("auxattn", plugin_registering(heads("Eagle3Aux", kind="attention", aux_layer_ids="ids")),
                       dist="auxattn-dist"),
        FakeEntryPoint("medlike", plugin_registering(heads("MedusaLike", model_type="medlike")), dist="ml-dist"),
    )


def test_attention_routes():
    from vllm_spec_plugins.routing import ATTENTION_METHODS, attention_method, route_of

    assert ATTENTION_METHODS == ("eagle", "eagle3")
    assert attention_method(heads("A", kind="attention")) == "eagle"
    assert attention_method(heads("A", kind="attention", aux_layer_ids="k")) == "eagle3"
    assert route_of(heads("A", aux_layer_ids="k")) == "draft_model"


def test_finalize_aux_attention_drafter_on_eagle3(eagle_host):
    spec = spec_for(archs=("LlamaForCausalLMEagle3",), model_type="llama", method="eagle3",
                    eagle_aux_hidden_state_layer_ids=[0, 1, 2], draft_len=512)
    finalize_spec(eagle_host, spec, None, True)
    hf = spec.draft_model_config.hf_config
    assert spec.method == "eagle3"
    assert plugin_of(spec) == "eaglelike" and getattr(hf, ARCH_ATTR) == "LlamaForCausalLMEagle3"
    assert hf.eagle_aux_hidden_state_layer_ids == [0, 1, 2]
    assert spec.draft_model_config.max_model_len == 512  # position_free=False
    # the same drafter named by alias
    spec = spec_for(archs=("LlamaForCausalLMEagle3",), model_type="llama", method="eagle3")
    assert finalize_spec(eagle_host, spec, "eaglelike", True).method == "eagle3"


def test_finalize_aux_attention_drafter_other_key_and_vllm_default(eagle_host):
    spec = spec_for(archs=("Eagle3Aux",), model_type=None, method="eagle3", ids=(3, 5))
    finalize_spec(eagle_host, spec, None, True)
    assert spec.draft_model_config.hf_config.eagle_aux_hidden_state_layer_ids == [3, 5]
    # key absent: no error, vLLM's runner falls back to its own default layers
    spec = spec_for(archs=("Eagle3Aux",), model_type=None, method="eagle3")
    finalize_spec(eagle_host, spec, None, True)
    assert not hasattr(spec.draft_model_config.hf_config, "eagle_aux_hidden_state_layer_ids")
    assert plugin_of(spec) == "auxattn"


@pytest.mark.parametrize("arch,method,want", [
    ("Eagle3Aux", "eagle", "eagle3"),                 # consumes target layers: needs the eagle3 loop
    ("Eagle3Aux", "draft_model", "eagle3"),
    ("AttnDrafter", "eagle3", "eagle"),               # plain: the eagle loop
    ("EagleLlamaForCausalLM", "eagle3", "eagle"),
])
def test_finalize_attention_drafter_wrong_loop(eagle_host, arch, method, want):
    spec = spec_for(archs=(arch,), model_type=None, method=method)
    with pytest.raises(PluginContractError) as ei:
        finalize_spec(eagle_host, spec, None, True)
    msg = str(ei.value)
    assert f"runs in vLLM's {want!r} drafting loop, but vLLM resolved method {method!r}" in msg
    assert f'"method": "{want}"' in msg and "not a local folder" in msg


@pytest.mark.parametrize("method,archs,expected", [
    ("eagle", ["LlamaForCausalLM"], ["EagleLlamaForCausalLM"]),
    ("eagle", ["EagleFoo"], ["EagleFoo"]),
    ("eagle", ["LlamaForCausalLMEagle3"], ["EagleLlamaForCausalLMEagle3"]),
    ("eagle3", ["LlamaForCausalLM"], ["Eagle3LlamaForCausalLM"]),
    ("eagle3", ["LlamaForCausalLMEagle3"], ["LlamaForCausalLMEagle3"]),
    ("eagle3", ["Eagle3Foo"], ["Eagle3Foo"]),
    ("eagle3", ["EagleFoo"], ["Eagle3EagleFoo"]),
])
def test_vllm_architectures_match_vllm_eagle_config(method, archs, expected):
    from transformers import LlamaConfig
    from vllm.transformers_utils.configs.eagle import EAGLEConfig

    from vllm_spec_plugins.routing import vllm_architectures

    assert vllm_architectures(method, archs) == expected
    wrapped = EAGLEConfig(LlamaConfig(architectures=archs, vocab_size=32), method=method, model_type="eagle")
    assert list(wrapped.architectures) == expected
    assert vllm_architectures("draft_model", archs) == archs


def _ckpt(tmp_path, name, **cfg):
    import json

    d = tmp_path / name
    d.mkdir()
    (d / "config.json").write_text(json.dumps(cfg))
    return str(d)


def test_alias_route_from_local_config(eagle_host, tmp_path):
    from vllm_spec_plugins.routing import alias_route

    eagle3 = _ckpt(tmp_path, "draft-a", architectures=["LlamaForCausalLMEagle3"], model_type="llama")
    assert alias_route(eagle_host, "eaglelike", eagle3) == "eagle3"
    # a plain Llama config fits both drafters: the aux key decides...
    keyed = _ckpt(tmp_path, "draft-b", architectures=["LlamaForCausalLM"], eagle_aux_hidden_state_layer_ids=[1, 2])
    assert alias_route(eagle_host, "eaglelike", keyed) == "eagle3"
    # ...then vLLM's path heuristic...
    assert alias_route(eagle_host, "eaglelike", _ckpt(tmp_path, "my-eagle3", architectures=["LlamaForCausalLM"])) \
        == "eagle3"
    assert alias_route(eagle_host, "eaglelike", _ckpt(tmp_path, "my-eagle-1", architectures=["LlamaForCausalLM"])) \
        == "eagle"
    # ...then the first registered drafter
    assert alias_route(eagle_host, "eaglelike", _ckpt(tmp_path, "plain", architectures=["LlamaForCausalLM"])) \
        == "eagle"
    # the config decides over the path
    e3_in_eagle1_folder = _ckpt(tmp_path, "x-eagle-1", architectures=["LlamaForCausalLMEagle3"])
    assert alias_route(eagle_host, "eaglelike", e3_in_eagle1_folder) == "eagle3"
    # nothing matches: the path heuristic, then the first drafter (finalize_spec then reports the mismatch)
    assert alias_route(eagle_host, "eaglelike", _ckpt(tmp_path, "other", architectures=["Qwen2ForCausalLM"])) \
        == "eagle"


def test_alias_route_hub_ids_and_single_route_plugins(eagle_host):
    from vllm_spec_plugins.routing import alias_route

    assert alias_route(eagle_host, "eaglelike", "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B") == "eagle3"
    assert alias_route(eagle_host, "eaglelike", "yuhuili/EAGLE-LLaMA3-Instruct-8B") == "eagle"
    assert alias_route(eagle_host, "eaglelike", "org/some-draft") == "eagle"
    assert alias_route(eagle_host, "eaglelike", None) == "eagle"
    assert alias_route(eagle_host, "attn", "org/whatever-eagle3") == "eagle"
    assert alias_route(eagle_host, "auxattn", "org/whatever") == "eagle3"
    assert alias_route(eagle_host, "medlike", "org/whatever") == "draft_model"


class _Stop(BaseException):  # not an Exception: the pre-hook adds no diagnosis to it
    pass


@pytest.mark.parametrize("name,cfg,method,want", [
    ("d3", {"architectures": ["LlamaForCausalLMEagle3"]}, "eaglelike", "eagle3"),
    ("d1-eagle-1", {"architectures": ["LlamaForCausalLM"]}, "eaglelike", "eagle"),
    ("dx", {"architectures": ["Eagle3Aux"]}, "auxattn", "eagle3"),
    ("dy", {"architectures": ["AttnDrafter"]}, "attn", "eagle"),
    ("dz", {"architectures": ["LlamaForCausalLMEagle3"]}, "eagle3", "eagle3"),  # vLLM's own name: untouched
])
def test_pre_hook_rewrites_alias_to_route(eagle_host, tmp_path, name, cfg, method, want):
    from vllm_spec_plugins.patch.config import make_create_speculative_config

    seen = {}

    def original(self, target_model_config, target_parallel_config):
        seen.update(self.speculative_config)
        raise _Stop

    wrapped = make_create_speculative_config(eagle_host, True)(original)
    args = types.SimpleNamespace(speculative_config={"model": _ckpt(tmp_path, name, **cfg), "method": method,
                                                     "num_speculative_tokens": 3})
    with pytest.raises(_Stop):
        wrapped(args, None, None)
    assert seen["method"] == want


@pytest.mark.parametrize("cfg,method,refused", [
    ({"architectures": ["LlamaForCausalLMEagle3"]}, None, False),  # vLLM's own EAGLE-3 serves it
    ({"architectures": ["LlamaForCausalLMEagle3"]}, "eaglelike", True),  # our plugin named: refused
    ({"architectures": ["MedusaLike"]}, None, True),  # only a plugin knows it
])
def test_unsupported_vllm_refuses_only_plugin_drafts(eagle_host, tmp_path, monkeypatch, cfg, method, refused):
    from vllm_spec_plugins.patch.config import make_create_speculative_config

    monkeypatch.setattr(_compat, "vllm_version", lambda: ("0.31.2", (0, 31)))
    calls = []
    wrapped = make_create_speculative_config(eagle_host, False)(lambda self, t, p: calls.append(1) or "spec")
    spec = {"model": _ckpt(tmp_path, "draft", **cfg), "num_speculative_tokens": 3}
    if method:
        spec["method"] = method
    args = types.SimpleNamespace(speculative_config=spec)
    if refused:
        with pytest.raises(UnsupportedVllmError, match="cannot be served"):
            wrapped(args, None, None)
        assert calls == []
    else:
        assert wrapped(args, None, None) == "spec" and calls == [1]


@pytest.mark.parametrize("value, match", [
    ("sometimes", "VLLM_SPEC_PLUGINS_POLICY='sometimes': expected 'adaptive', 'off' or a number"),
    ("5", "VLLM_SPEC_PLUGINS_POLICY=5 pins more draft tokens per step than num_speculative_tokens=3"),
])
def test_finalize_refuses_a_bad_policy_setting(host, monkeypatch, value, match):
    monkeypatch.setenv("VLLM_SPEC_PLUGINS_POLICY", value)
    with pytest.raises(PluginContractError, match=match):
        finalize_spec(host, spec_for(num_heads=4), None, True)


@pytest.mark.parametrize("value", ["off", "adaptive", "2"])
def test_finalize_accepts_policy_settings(host, monkeypatch, value):
    monkeypatch.setenv("VLLM_SPEC_PLUGINS_POLICY", value)
    assert finalize_spec(host, spec_for(num_heads=4), None, True).method == "draft_model"


# -- a plugin config class replacing vLLM's, draft TP of heads drafters, K checked before vLLM ----


class VllmOwnConfig:
    """Stands in for vLLM 0.32's own class for a model_type a plugin also claims."""

    def __init__(self, **kw):
        self.__dict__.update(kw)


def test_finalize_logs_when_plugin_config_class_replaces_vllms(host, caplog):
    spec = spec_for(archs=("TinyArch",), model_type="tiny")
    spec.draft_model_config.hf_config = VllmOwnConfig(architectures=["TinyArch"], model_type="tiny")
    with attach(caplog.handler, "vllm.spec_plugins"), caplog.at_level(logging.INFO, "vllm.spec_plugins"):
        finalize_spec(host, spec, None, True)
    assert isinstance(spec.draft_model_config.hf_config, TinyConfig)
    msgs = [r.getMessage() for r in caplog.records]
    assert (f"vllm_spec_plugins: draft '/ckpt/medusa-tiny' (model_type 'tiny'): config loaded with plugin 'tiny' "
            f"class {__name__}:TinyConfig instead of {__name__}.VllmOwnConfig") in msgs


class _Spec(types.SimpleNamespace):
    made: list = []

    @staticmethod
    def create_draft_parallel_config(target_parallel_config, speculative_draft_tensor_parallel_size,
                                     draft_model_config=None):
        _Spec.made.append(speculative_draft_tensor_parallel_size)
        return types.SimpleNamespace(tensor_parallel_size=speculative_draft_tensor_parallel_size)


def _tp_spec(target_tp, draft_tp, **kw):
    spec = _Spec(**vars(spec_for(num_heads=3, **kw)))
    spec.target_parallel_config = types.SimpleNamespace(tensor_parallel_size=target_tp)
    spec.draft_parallel_config = types.SimpleNamespace(tensor_parallel_size=draft_tp)
    spec.draft_tensor_parallel_size = draft_tp
    return spec


def test_finalize_heads_drafter_takes_target_tp(host, caplog):
    """vLLM 0.32 sets draft TP 1 for mlp_speculator; a heads drafter runs on the target's TP group."""
    _Spec.made.clear()
    spec = _tp_spec(2, 1)
    with attach(caplog.handler, "vllm.spec_plugins"), caplog.at_level(logging.INFO, "vllm.spec_plugins"):
        finalize_spec(host, spec, None, True)
    assert spec.draft_tensor_parallel_size == 2 and spec.draft_parallel_config.tensor_parallel_size == 2
    assert _Spec.made == [2]
    assert any("draft tensor parallel size 1 -> 2" in r.getMessage() for r in caplog.records)
    # equal already: untouched
    _Spec.made.clear()
    same = _tp_spec(2, 2)
    finalize_spec(host, same, None, True)
    assert _Spec.made == []


def test_finalize_heads_drafter_user_draft_tp_mismatch(host):
    spec = _tp_spec(2, 1)
    with pytest.raises(PluginContractError, match=r"draft_tensor_parallel_size=1, but draft '/ckpt/medusa-tiny' "
                                                  r"\(plugin 'medlike'.*target's tensor parallelism \(2\)"):
        finalize_spec(host, spec, None, True, user_draft_tp=1)
    ok = _tp_spec(2, 2)
    finalize_spec(host, ok, None, True, user_draft_tp=2)


def test_precheck_max_tokens_before_vllm(host, tmp_path):
    """K is checked against a local plugin checkpoint before vLLM's own rules on its config fields."""
    from vllm_spec_plugins.routing import precheck_max_tokens

    (tmp_path / "config.json").write_text('{"architectures": ["FixedK"]}')
    with pytest.raises(PluginContractError, match=r"num_speculative_tokens=3, but draft .*at most 2 tokens"):
        precheck_max_tokens(host, str(tmp_path), None, 3)
    precheck_max_tokens(host, str(tmp_path), None, 2)
    precheck_max_tokens(host, str(tmp_path), None, None)  # K from the config: vLLM decides
    precheck_max_tokens(host, str(tmp_path / "missing"), None, 9)  # not a local folder: checked after vLLM
    # a config attribute: read with the plugin's config class
    (tmp_path / "config.json").write_text('{"architectures": ["TinyArch"], "model_type": "tiny"}')
    precheck_max_tokens(host, str(tmp_path), None, 3)  # this drafter declares no maximum
    capped = host_with(FakeEntryPoint("tiny", plugin_registering(
        heads("TinyArch", model_type="tiny", config_class=f"{__name__}:TinyConfig", max_speculative_tokens="num_heads")),
        dist="tiny-dist"))
    with pytest.raises(PluginContractError, match=r"at most 2 tokens per step \(num_heads=2\)"):
        precheck_max_tokens(capped, str(tmp_path), None, 3)
    # unclaimed checkpoints are vLLM's business
    (tmp_path / "config.json").write_text('{"architectures": ["LlamaForCausalLM"]}')
    precheck_max_tokens(host, str(tmp_path), None, 99)


def test_our_environment_variables_are_known_to_vllm(monkeypatch):
    """vLLM warns about VLLM_* variables it does not know (and can refuse them); ours are declared."""
    import re
    from pathlib import Path

    from vllm import envs

    shim.declare_env_names()
    for name in shim.ENV_NAMES:
        assert name in envs.environment_variables
    monkeypatch.setenv("VLLM_SPEC_PLUGINS_STRICT", "1")
    from vllm.platforms import current_platform

    current_platform.validate_environ(hard_fail=True)  # raises "Unknown vLLM environment variable" otherwise
    # every variable the package reads is in the list
    src = "\n".join(p.read_text() for p in Path(shim.__file__).parent.rglob("*.py"))
    read = set(re.findall(r'"(VLLM_SPEC_PLUGINS[A-Z_]*)"', src))
    assert read <= set(shim.ENV_NAMES), read - set(shim.ENV_NAMES)
