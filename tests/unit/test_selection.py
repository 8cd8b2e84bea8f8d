"""Draft selection without shadowing vLLM, the config stamp, checkpoint stamps, sizes, and the messages of bad requests."""

from __future__ import annotations

import json
import logging
import struct
import types

import pytest

from vllm_spec_plugins import Drafter, PluginContractError, PluginLoadError
from vllm_spec_plugins.checkpoint import PLUGIN_ATTR, strip_stamps
from vllm_spec_plugins.owners import find_shadows, private_arch
from vllm_spec_plugins.patch.config import make_create_speculative_config
from vllm_spec_plugins.routing import fill_from_target

from .fakes import FakeEntryPoint, attach, heads, host_with, plugin_registering


def _host(allow=None):
    return host_with(
        FakeEntryPoint("shadow", plugin_registering(heads("LlamaForCausalLM"), heads("ShadowOwn", model_type="llama")),
                       dist="shadow-dist", version="0.3"),
        FakeEntryPoint("medlike", plugin_registering(heads("MedusaModel", model_type="medusa")), dist="ml-dist"),
        FakeEntryPoint("eaglelike", plugin_registering(
            heads("EagleLlamaForCausalLM", kind="attention", position_free=False)), dist="eaglelike-dist"),
        FakeEntryPoint("echo", plugin_registering(heads("EchoDrafter", model_type="echo_drafter")), dist="echo-dist"),
        allow=allow,
    )


def test_shadows_of_vllm_and_transformers_names():
    host = _host()
    shadows = {(s.what, s.key): s for s in find_shadows(host.drafters)}
    llama = shadows[("architecture", "LlamaForCausalLM")]
    assert llama.owner == "vLLM" and not llama.selectable  # a target class: never selected by the name
    assert "select the plugin with \"method\": \"shadow\"" in llama.describe()
    assert not shadows[("model_type", "llama")].selectable and shadows[("model_type", "llama")].owner == "Transformers"
    medusa = shadows[("architecture", "MedusaModel")]
    assert medusa.owner == "vLLM" and medusa.selectable  # one of vLLM's own draft classes
    assert shadows[("architecture", "EagleLlamaForCausalLM")].selectable
    assert ("architecture", "EchoDrafter") not in shadows and ("architecture", "ShadowOwn") not in shadows


def test_reserved_names_select_only_through_the_plugin_name():
    host = _host()
    host.reserved = {s.ckey for s in find_shadows(host.drafters) if not s.selectable}
    assert host.select(["LlamaForCausalLM"], "llama") is None  # a plain Llama draft stays vLLM's
    assert host.select(["LlamaForCausalLM"], "llama", alias="shadow").name == "shadow"
    assert host.select(["MedusaModel"], "medusa").name == "medlike"
    assert host.select(["EchoDrafter"]).name == "echo"
    assert host.find("shadow", "LlamaForCausalLM").architectures == ("LlamaForCausalLM",)


def test_private_architecture_names():
    assert private_arch("MedusaModel", "medusa") == "MedusaModel__vsp_medusa"


def test_register_never_registers_over_vllm(monkeypatch):
    """shim._register_with_vllm on the real ModelRegistry: vLLM's Llama class stays vLLM's."""
    from vllm import ModelRegistry

    from vllm_spec_plugins import shim

    host = _host()
    before = ModelRegistry.models["LlamaForCausalLM"]
    added = []
    monkeypatch.setattr(ModelRegistry, "register_model", lambda arch, cls: added.append(arch))
    shim._register_with_vllm(host)
    assert ModelRegistry.models["LlamaForCausalLM"] is before
    assert "LlamaForCausalLM" not in added and "MedusaModel" not in added
    assert {"LlamaForCausalLM__vsp_shadow", "MedusaModel__vsp_medlike", "EchoDrafter", "EchoDrafter__vsp_echo"} \
        <= set(added)
    assert "architecture:LlamaForCausalLM" in host.reserved and "architecture:MedusaModel" not in host.reserved


def test_strip_stamps_from_checkpoint_configs():
    hf = types.SimpleNamespace(vsp_plugin="medusa", vsp_dist="x", vsp_architecture="MedusaModel", hidden_size=8,
                               model=types.SimpleNamespace(vsp_plugin="y", vocab_size=3))
    assert sorted(strip_stamps(hf)) == ["vsp_architecture", "vsp_dist", "vsp_plugin", "vsp_plugin"]
    assert not hasattr(hf, PLUGIN_ATTR) and not hasattr(hf.model, PLUGIN_ATTR) and hf.hidden_size == 8


class EchoConfig:
    def __init__(self, **kw):
        self.__dict__.update(kw)

    @classmethod
    def from_pretrained(cls, path, revision=None):
        return cls(architectures=["EchoDrafter"], model_type="echo_drafter", hidden_size=None, num_heads=4)


def test_sizes_left_unset_come_from_the_target():
    host = host_with(FakeEntryPoint("echo", plugin_registering(
        heads("EchoDrafter", model_type="echo_drafter", config_class=f"{__name__}:EchoConfig")), dist="echo-dist"))
    tmc = types.SimpleNamespace(get_hidden_size=lambda: 128, get_vocab_size=lambda: 259)
    # vLLM loaded it with another class (as 0.32 does for model_type medusa): reloaded with the plugin's, filled
    other = types.SimpleNamespace(architectures=["EchoDrafter"], model_type="echo_drafter", hidden_size=4096,
                                  vocab_size=32001, vsp_plugin="stale")
    hf = fill_from_target(host, other, None, tmc, "/ckpt/echo", None)
    assert isinstance(hf, EchoConfig) and (hf.hidden_size, hf.vocab_size) == (128, 259)
    # a draft no plugin claims is left alone (its stamps are still removed)
    plain = types.SimpleNamespace(architectures=["LlamaForCausalLM"], model_type="llama", hidden_size=None,
                                  vsp_plugin="echo")
    assert fill_from_target(host, plain, None, tmc, "/ckpt/plain", None) is plain
    assert plain.hidden_size is None and not hasattr(plain, "vsp_plugin")


def _ckpt(tmp_path, name, weights=(), **cfg):
    d = tmp_path / name
    d.mkdir()
    (d / "config.json").write_text(json.dumps(cfg))
    if weights:
        header = json.dumps({w: {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]} for w in weights}).encode()
        (d / "model.safetensors").write_bytes(struct.pack("<Q", len(header)) + header + b"\0" * 4)
    return str(d)


class _Stop(BaseException):
    pass


def _pre_hook(host, spec=None, spec_model=None):
    seen = {}

    def original(self, target_model_config, target_parallel_config):
        seen.update(self.speculative_config or {})
        raise _Stop

    args = types.SimpleNamespace(speculative_config=spec, spec_model=spec_model, spec_method=None)
    wrapped = make_create_speculative_config(host, True)(original)
    with pytest.raises(_Stop):
        wrapped(args, None, None)
    return seen


def test_config_stamp_selects_the_plugin_with_plain_spec_model(tmp_path):
    draft = _ckpt(tmp_path, "smollm2-eagle", weights=["fc.weight"], architectures=["LlamaForCausalLM"],
                  vllm_spec_plugin="eaglelike")
    assert _pre_hook(_host(), spec_model=draft)["method"] == "eagle"  # the plugin's route, no "method" given


def test_unmarked_eagle_layout_says_what_to_add(tmp_path):
    draft = _ckpt(tmp_path, "smollm2-draft", weights=["fc.weight", "layers.0.mlp.up_proj.weight"],
                  architectures=["LlamaForCausalLM"])
    with pytest.raises(PluginContractError) as ei:
        _pre_hook(_host(), spec_model=draft)
    msg = str(ei.value)
    assert "has the EAGLE layout (fc.weight)" in msg
    assert f"add \"vllm_spec_plugin\": \"eaglelike\" to '{draft}/config.json'" in msg
    assert "\"method\": \"eaglelike\"" in msg
    # vLLM's own folder-name rule applies, or a plain draft LM: untouched
    assert "method" not in _pre_hook(_host(), spec_model=_ckpt(tmp_path, "x-eagle-1", weights=["fc.weight"],
                                                                architectures=["LlamaForCausalLM"]))
    plain = _ckpt(tmp_path, "plain-lm", weights=["model.embed_tokens.weight"], architectures=["LlamaForCausalLM"])
    assert "method" not in _pre_hook(_host(), spec_model=plain)


def test_speculators_checkpoint_runs_its_own_algorithm_with_plain_spec_model(tmp_path):
    """speculators 0.9's EAGLE-3 output (architectures Eagle3DraftModel, fc.weight): vLLM 0.32 alone resolves a
    plain --spec-model folder to "draft_model"; its speculators_model_type says eagle3."""
    draft = _ckpt(tmp_path, "smol-draft", weights=["fc.weight", "d2t"], architectures=["Eagle3DraftModel"],
                  speculators_model_type="eagle3", speculators_config={"algorithm": "eagle3"})
    assert _pre_hook(_host(), spec_model=draft)["method"] == "eagle3"
    given = {"model": draft, "method": "eagle", "num_speculative_tokens": 3}
    assert _pre_hook(_host(), spec=given)["method"] == "eagle"  # a method the user gives wins


def test_unknown_method_says_no_such_plugin_is_installed(tmp_path):
    with pytest.raises(PluginLoadError) as ei:
        _pre_hook(_host(), spec={"method": "medusa2", "model": "/nowhere", "num_speculative_tokens": 3})
    msg = str(ei.value)
    assert "names 'medusa2', which is neither an installed spec-decode plugin nor one of vLLM's speculative" in msg
    assert "installed plugins: " in msg and "medlike (ml-dist 1.0)" in msg and "eagle3" in msg


def test_method_naming_an_excluded_plugin(tmp_path):
    host = _host(allow={"medlike"})
    with pytest.raises(PluginLoadError, match="installed but excluded by VLLM_SPEC_PLUGINS"):
        _pre_hook(host, spec={"method": "echo", "model": "/nowhere", "num_speculative_tokens": 3})


def test_stamp_naming_no_installed_plugin(tmp_path):
    draft = _ckpt(tmp_path, "d", architectures=["LlamaForCausalLM"], vllm_spec_plugin="nosuch")
    with pytest.raises(PluginLoadError, match=r"config\.json' key 'vllm_spec_plugin' names 'nosuch'"):
        _pre_hook(_host(), spec_model=draft)


def test_allow_list_typo_warns_with_installed_plugins(caplog):
    with attach(caplog.handler, "vllm.spec_plugins"):
        _host(allow={"medlik"})
    msgs = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any("VLLM_SPEC_PLUGINS names 'medlik', but no installed plugin has that name (installed: eaglelike, "
               "echo, medlike, shadow)" in m for m in msgs)


def test_drafter_dataclass_untouched():
    # Drafter keeps its public shape (a regression guard for the fakes above)
    assert Drafter(architectures=("A",), model_class="m:C").kind == "heads"


def test_missing_model_module_is_named_before_vllms_error(tmp_path):
    host = host_with(FakeEntryPoint("echo", plugin_registering(
        heads("EchoDrafter", model_type="echo_drafter", model_class="vsp_no_such_module.model:Echo")),
        dist="echo-dist", version="0.2"))
    draft = _ckpt(tmp_path, "echo", architectures=["EchoDrafter"], model_type="echo_drafter")

    def original(self, target_model_config, target_parallel_config):
        raise ValueError("Model architectures ['EchoDrafter'] failed to be inspected. " + "x" * 5000)

    args = types.SimpleNamespace(speculative_config={"model": draft, "num_speculative_tokens": 3}, spec_model=None,
                                 spec_method=None)
    with pytest.raises(RuntimeError) as ei:
        make_create_speculative_config(host, True)(original)(args, None, None)
    msg = str(ei.value)
    assert msg.startswith(f"vllm_spec_plugins: draft '{draft}' is served by plugin 'echo' (echo-dist 0.2), whose "
                          f"model class 'vsp_no_such_module.model:Echo' cannot be imported: module "
                          f"'vsp_no_such_module.model' failed with ModuleNotFoundError")
    assert "\n\nvLLM's error: ValueError: Model architectures ['EchoDrafter'] failed to be inspected" in msg


def test_excluded_plugin_serving_the_draft_is_named(monkeypatch):
    """VLLM_SPEC_PLUGINS=eagle and a Medusa checkpoint: say that the installed medusa plugin is excluded."""
    from vllm_spec_plugins.explain import excluded_claim
    from vllm_spec_plugins.manager import PluginHost

    monkeypatch.setenv("VLLM_SPEC_PLUGINS", "eagle")
    host = PluginHost().load()
    assert "medusa" in host.skipped
    msg = excluded_claim(host, ["MedusaModel"], "medusa")
    assert msg.startswith("vllm_spec_plugins: this draft (model_type 'medusa') is served by plugin 'medusa' "
                          "(vllm-spec-medusa 0.1.0), which VLLM_SPEC_PLUGINS='eagle' excludes.")
    assert excluded_claim(host, ["Qwen2ForCausalLM"], "qwen2") == ""


def test_config_naming_nothing_says_what_to_add(tmp_path):
    draft = _ckpt(tmp_path, "medusa-vicuna", medusa_num_heads=5, medusa_num_layers=1)

    def original(self, target_model_config, target_parallel_config):
        raise ValueError("Unrecognized model in x. Should have a `model_type` key in its config.json.")

    args = types.SimpleNamespace(speculative_config=None, spec_model=draft, spec_method=None)
    with pytest.raises(RuntimeError) as ei:
        make_create_speculative_config(_host(), True)(original)(args, None, None)
    msg = str(ei.value)
    assert msg.startswith(f"vllm_spec_plugins: '{draft}/config.json' names neither an architecture nor a model_type")
    assert "\"model_type\": \"medusa\" (plugin 'medlike', ml-dist 1.0)" in msg and "vllm_spec_plugin" in msg


def test_stamp_naming_one_of_vllms_methods_says_it_is_not_a_plugin(tmp_path):
    draft = _ckpt(tmp_path, "d", architectures=["LlamaForCausalLM"], vllm_spec_plugin="ngram")
    with pytest.raises(PluginContractError) as ei:
        _pre_hook(_host(), spec_model=draft)
    msg = str(ei.value)
    assert f"'{draft}/config.json' key 'vllm_spec_plugin' names 'ngram', which is one of vLLM's own speculative " \
           f"methods, not a plugin" in msg
    assert "Remove the key, and pass --speculative-config '{\"method\": \"ngram\", ...}'" in msg
    assert "neither" not in msg


def test_speculators_type_on_a_heads_checkpoint_names_both_keys(tmp_path):
    draft = _ckpt(tmp_path, "med", weights=["0.0.linear.weight"], architectures=["MedusaModel"], model_type="medusa",
                  speculators_model_type="eagle3")
    with pytest.raises(PluginContractError) as ei:
        _pre_hook(_host(), spec_model=draft)
    msg = str(ei.value)
    assert f"'{draft}/config.json' says speculators_model_type 'eagle3'" in msg
    assert "architectures ['MedusaModel'] / model_type 'medusa' are a heads drafter of plugin 'medlike' (ml-dist 1.0)" \
        in msg and "Remove the speculators_model_type key" in msg


def test_corrupt_safetensors_header_is_named_not_a_memory_error(tmp_path):
    draft = _ckpt(tmp_path, "corrupt", architectures=["LlamaForCausalLM"])
    (tmp_path / "corrupt" / "model.safetensors").write_bytes(struct.pack("<Q", 2**62) + b"{}")
    with pytest.raises(ValueError) as ei:
        _pre_hook(_host(), spec_model=draft)
    assert f"vllm_spec_plugins: draft file '{draft}/model.safetensors' is not a valid safetensors file (ValueError: " \
           f"its header says {2**62} bytes, the file has 10). Re-download or re-save the checkpoint." == str(ei.value)


def test_vllm_names_read_from_source_equal_the_live_registry():
    """`vllm-spec-plugins list` reads vLLM's registry from its source (no vLLM import); same names as the registry."""
    from vllm.model_executor.models import registry as reg

    from vllm_spec_plugins.owners import SEP, vllm_archs_from_source

    known, drafts = vllm_archs_from_source()
    live = {a for a in reg.ModelRegistry.models if SEP not in a}
    assert known == live - {a for a in live if a not in reg._VLLM_MODELS}  # plugins' own names aside
    assert drafts == set(reg._SPECULATIVE_DECODING_MODELS) and "MedusaModel" in drafts and "LlamaForCausalLM" in known


def test_list_imports_no_vllm():
    import subprocess
    import sys

    code = ("import sys; from vllm_spec_plugins.cli import main; main(['list', '--json']); "
            "print('VLLM' if 'vllm' in sys.modules else 'NOVLLM', file=sys.stderr)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stderr.strip().splitlines()[-1] == "NOVLLM"
    assert "Triton" not in out.stderr  # vLLM's "Triton is installed, but doesn't include CPU backend" warning


def test_policy_stats_path_that_cannot_be_written_is_refused_at_start(tmp_path, monkeypatch):
    from vllm_spec_plugins.routing import check_policy_env

    d = heads("X")
    for bad, why in ((tmp_path / "no" / "such" / "stats.json", "does not exist or is not writable"),
                     (tmp_path, "is a folder")):
        monkeypatch.setenv("VLLM_SPEC_PLUGINS_POLICY_STATS", str(bad))
        with pytest.raises(PluginContractError, match=f"VLLM_SPEC_PLUGINS_POLICY_STATS='{bad}' names where the "
                                                      f"adaptive policy writes its statistics, but .*{why}"):
            check_policy_env(d, 3)
    monkeypatch.setenv("VLLM_SPEC_PLUGINS_POLICY_STATS", str(tmp_path / "stats.json"))
    check_policy_env(d, 3)


def test_policy_warns_once_when_its_stats_file_cannot_be_written(tmp_path):
    from vllm_spec_plugins.policy import AdaptivePolicy

    said = []
    p = AdaptivePolicy(3, log=said.append, stats_path=str(tmp_path / "gone" / "stats.json"))
    p.write_stats()
    p.write_stats()
    assert len(said) == 1 and "cannot write the policy statistics to VLLM_SPEC_PLUGINS_POLICY_STATS=" in said[0]


def test_stamp_naming_another_plugin_is_said_about_the_key(tmp_path):
    """A Medusa checkpoint stamped for the EAGLE-like plugin: the message is about the stamp (the user passed
    no "method" to drop)."""
    draft = _ckpt(tmp_path, "m", architectures=["MedusaModel"], model_type="medusa", vllm_spec_plugin="eaglelike")
    with pytest.raises(PluginContractError) as ei:
        _pre_hook(_host(), spec_model=draft)
    msg = str(ei.value)
    assert (f"'{draft}/config.json' key 'vllm_spec_plugin' names plugin 'eaglelike' (eaglelike-dist 1.0), which "
            f"serves ['EagleLlamaForCausalLM'], but the checkpoint has architectures ['MedusaModel'] and model_type "
            f"'medusa'. Fix that key") in msg
    assert "drop" not in msg
