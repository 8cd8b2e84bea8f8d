"""``vllm-spec-plugins check`` (without a target) and ``doctor`` on fake plugin hosts.

The checks with a target (engine config, weights loaded on CPU) are in test_harness.py.
"""

from __future__ import annotations

import json

import pytest

import vllm_spec_plugins.manager as manager
from tests.unit.fakes import FakeEntryPoint, heads, host_with, plugin_registering
from vllm_spec_plugins import ExtraInput, Source, StateSpec, diagnose
from vllm_spec_plugins.cli import main
from vllm_spec_plugins.patch.targets import Target

TOY = dict(model_type="vsp_toy", config_class="tests.unit.toy_drafters:ToyConfig",
           max_speculative_tokens="num_heads")
STATEFUL = dict(extra_inputs=(ExtraInput(name="sampled", source=Source.SAMPLED_TOKEN_IDS, dtype="int32"),),
                state=(StateSpec(name="acc", shape=("num_heads",), dtype="int64"),))


def _ckpt(tmp_path, name="toy", **cfg):
    d = tmp_path / name
    d.mkdir()
    cfg.setdefault("architectures", ["ToyHeads"])
    cfg.setdefault("model_type", "vsp_toy")
    (d / "config.json").write_text(json.dumps(cfg))
    return str(d)


@pytest.fixture
def use_host(monkeypatch):
    def use(*eps):
        host = host_with(*eps)
        monkeypatch.setattr(manager, "_HOST", host)
        return host
    return use


def _by_check(rep):
    return {i.check: i for i in rep.items}


def test_check_good_plugin(tmp_path, use_host):
    use_host(FakeEntryPoint("toy", plugin_registering(
        heads(model_class="tests.unit.toy_drafters:GoodDrafter", **TOY, **STATEFUL)), dist="vsp-toy", version="0.3"))
    rep = diagnose.check_checkpoint(_ckpt(tmp_path, hidden_size=16, vocab_size=50))
    items = _by_check(rep)
    assert rep.ok, rep.format()
    assert items["select"].detail == "served by plugin 'toy' (vsp-toy 0.3): it claims architecture 'ToyHeads'"
    assert "tests.unit.toy_drafters:ToyConfig" in items["config"].detail
    assert items["forward"].detail == ("forward(hidden_states, acc, next_token_ids): hidden_states <- "
                                       "target_hidden_last [16] model; acc <- state 'acc' [2] int64; "
                                       "next_token_ids <- next_token_ids [] int32")
    assert items["update_state"].detail.startswith("update_state(acc, sampled): ")
    assert "sampled <- sampled_token_ids [3] int32" in items["update_state"].detail  # k = num_heads = 2
    assert items["shapes"].detail == "acc [2] int64"
    assert items["weights"].status == "skip"
    assert rep.facts["served_by"]["plugin"] == "toy"
    assert rep.format().splitlines()[-1] == "result: PASS"


def test_check_by_model_type_and_without_sizes(tmp_path, use_host):
    use_host(FakeEntryPoint("toy", plugin_registering(
        heads(model_class="tests.unit.toy_drafters:GoodDrafter", **TOY, **STATEFUL))))
    rep = diagnose.check_checkpoint(_ckpt(tmp_path, architectures=["Other"]))
    items = _by_check(rep)
    assert rep.ok, rep.format()
    assert "it claims model_type 'vsp_toy'" in items["select"].detail
    assert "hidden_states <- target_hidden_last, acc <- state 'acc'" not in items["forward"].detail
    assert "(source shapes not compared" in items["shapes"].detail


def test_check_forward_param_nothing_provides(tmp_path, use_host):
    use_host(FakeEntryPoint("toy", plugin_registering(
        heads(model_class="tests.unit.toy_drafters:NeedsUnknown", **TOY)), dist="vsp-toy", version="0.3"))
    rep = diagnose.check_checkpoint(_ckpt(tmp_path, hidden_size=16))
    fw = _by_check(rep)["forward"]
    assert not rep.ok and fw.status == "fail"
    assert "takes parameter 'mystery_input', which nothing provides" in fw.detail
    assert "plugin 'toy' (vsp-toy 0.3)" in fw.detail
    assert "result: FAIL (1 failed)" in rep.format()


def test_check_hook_param_nothing_provides(tmp_path, use_host):
    use_host(FakeEntryPoint("toy", plugin_registering(
        heads(model_class="tests.unit.toy_drafters:HookNeedsUnknown", **TOY, **STATEFUL))))
    rep = diagnose.check_checkpoint(_ckpt(tmp_path, hidden_size=16))
    items = _by_check(rep)
    assert items["forward"].status == "ok"
    assert items["update_state"].status == "fail"
    assert "HookNeedsUnknown.update_state takes parameter 'what_is_this', which nothing provides" in \
        items["update_state"].detail


def test_check_unresolved_state_shape(tmp_path, use_host):
    d = heads(model_class="tests.unit.toy_drafters:GoodDrafter", model_type="vsp_toy",
              config_class="tests.unit.toy_drafters:ToyConfig",
              extra_inputs=STATEFUL["extra_inputs"], state=(StateSpec(name="acc", shape=("no_such_key",)),))
    use_host(FakeEntryPoint("toy", plugin_registering(d)))
    rep = diagnose.check_checkpoint(_ckpt(tmp_path, hidden_size=16))
    sh = _by_check(rep)["shapes"]
    assert sh.status == "fail"
    assert "declares state 'acc' with dimension 'no_such_key', but the draft config has no_such_key=None" in sh.detail


def test_check_model_class_does_not_import(tmp_path, use_host):
    use_host(FakeEntryPoint("toy", plugin_registering(heads(model_class="tests.unit.no_such_module:X", **TOY))))
    rep = diagnose.check_checkpoint(_ckpt(tmp_path))
    mc = _by_check(rep)["model class"]
    assert mc.status == "fail" and "tests.unit.no_such_module:X" in mc.detail and "ModuleNotFoundError" in mc.detail


def test_check_too_many_tokens(tmp_path, use_host):
    use_host(FakeEntryPoint("toy", plugin_registering(
        heads(model_class="tests.unit.toy_drafters:GoodDrafter", **TOY, **STATEFUL))))
    rep = diagnose.check_checkpoint(_ckpt(tmp_path, hidden_size=16), num_speculative_tokens=5)
    sh = _by_check(rep)["shapes"]
    assert sh.status == "fail" and "at most 2 speculative tokens (num_heads=2); 5 asked" in sh.detail


def test_check_config_does_not_load(tmp_path, use_host):
    use_host(FakeEntryPoint("toy", plugin_registering(heads(model_class="tests.unit.toy_drafters:GoodDrafter",
                                                            **TOY))))
    ck = _ckpt(tmp_path)
    (tmp_path / "toy" / "config.json").write_text('{"architectures": ["ToyHeads"], "model_type": "vsp_toy", '
                                                   '"num_heads": 2, "bad": ')
    rep = diagnose.check_checkpoint(ck)
    assert _by_check(rep)["config.json"].status == "fail"


def test_check_conflict_and_unknown(tmp_path, use_host):
    use_host(FakeEntryPoint("a", plugin_registering(heads("Twin"))),
             FakeEntryPoint("b", plugin_registering(heads("Twin"))))
    rep = diagnose.check_checkpoint(_ckpt(tmp_path, architectures=["Twin"], model_type="x"))
    sel = _by_check(rep)["select"]
    assert sel.status == "fail" and "claimed by plugin 'a'" in sel.detail and "plugin 'b'" in sel.detail
    rep = diagnose.check_checkpoint(_ckpt(tmp_path, "unknown", architectures=["NobodyKnowsMe"], model_type="x"))
    sel = _by_check(rep)["select"]
    assert sel.status == "fail" and "vLLM does not know ['NobodyKnowsMe']" in sel.detail


def test_check_vllm_serves_it(tmp_path, use_host):
    use_host()
    rep = diagnose.check_checkpoint(_ckpt(tmp_path, architectures=["LlamaForCausalLM"], model_type="llama"))
    assert rep.ok and _by_check(rep)["select"].status == "info"
    assert "vLLM itself serves it" in _by_check(rep)["select"].detail
    assert rep.facts["served_by"] == {"plugin": None, "vllm": True}


def test_check_missing_folder(tmp_path, use_host):
    use_host()
    rep = diagnose.check_checkpoint(str(tmp_path / "nope"))
    assert not rep.ok and "not a local checkpoint folder with a config.json" in rep.items[0].detail


def test_check_cli_exit_code_and_json(tmp_path, use_host, capsys, monkeypatch):
    monkeypatch.setenv("VLLM_LOGGING_STREAM", "ext://sys.stderr")
    use_host(FakeEntryPoint("toy", plugin_registering(heads(model_class="tests.unit.toy_drafters:NeedsUnknown",
                                                            **TOY))))
    ck = _ckpt(tmp_path, hidden_size=16)
    assert main(["check", ck, "--json"]) == 1
    data = json.loads(capsys.readouterr().out)
    assert data["ok"] is False and data["served_by"]["plugin"] == "toy"
    assert [i["status"] for i in data["items"] if i["check"] == "forward"] == ["fail"]


# -- doctor -----------------------------------------------------------------------------------


def test_check_symbol_runtime():
    ok = diagnose.check_symbol(Target("vllm.engine.arg_utils", "EngineArgs.create_speculative_config",
                                      params=("self", "target_model_config", "target_parallel_config")))
    assert ok.status == "ok", ok.detail
    bad = diagnose.check_symbol(Target("vllm.engine.arg_utils", "EngineArgs.create_speculative_config",
                                       params=("self", "renamed")))
    assert bad.status == "fail" and "expected leading parameters (self, renamed)" in bad.detail
    gone = diagnose.check_symbol(Target("vllm.engine.arg_utils", "EngineArgs.no_such_method"))
    assert gone.status == "fail" and gone.detail == "EngineArgs.no_such_method not found"
    nomod = diagnose.check_symbol(Target("vllm.no_such_module", "X", kind="class"))
    assert nomod.status == "fail" and "module does not import" in nomod.detail
    attr = diagnose.check_symbol(Target("vllm.v1.worker.gpu_model_runner",
                                        "GPUModelRunner.use_aux_hidden_state_outputs", kind="attribute"))
    assert attr.status == "ok" and attr.detail == "assigned in __init__"
    notcls = diagnose.check_symbol(Target("vllm.engine.arg_utils", "EngineArgs.create_speculative_config",
                                          kind="class"))
    assert notcls.status == "fail"


def test_manifest_holds_on_installed_vllm():
    rows = diagnose.check_manifest()
    assert len(rows) > 20
    assert [f"{r.qualname}: {r.detail}" for r in rows if r.status != "ok"] == []


def test_doctor(use_host, monkeypatch):
    use_host(FakeEntryPoint("good", plugin_registering(heads(model_class="tests.unit.toy_drafters:GoodDrafter",
                                                             **TOY, **STATEFUL)), dist="vsp-good", version="1"),
             FakeEntryPoint("bad", plugin_registering(heads("BadHeads",
                                                            model_class="tests.unit.toy_drafters:NeedsUnknown")),
                            dist="vsp-bad", version="2"),
             FakeEntryPoint("broken", error=ImportError("no module named x"), dist="vsp-broken", version="3"),
             FakeEntryPoint("m1", plugin_registering(heads("MedusaModel"))),
             FakeEntryPoint("m2", plugin_registering(heads("MedusaModel"))))
    rep = diagnose.doctor(manifest=False)
    items = {i.check: i for i in rep.items}
    assert items["vllm"].status == "ok" and "vLLM 0.32" in items["vllm"].detail
    assert items["shim"].status == "ok"
    assert items["plugin good"].status == "ok"
    bad = items["plugin bad"]
    assert bad.status == "fail" and "'mystery_input', which nothing provides" in bad.detail
    assert items["plugin broken"].status == "fail" and "vsp-broken 3" in items["plugin broken"].detail
    assert items["plugin m1"].status == "fail" and "toy_pkg.model:ToyHeads fails to import" in items["plugin m1"].detail
    assert items["conflict"].status == "fail" and "'MedusaModel' is claimed by plugin 'm1'" in items["conflict"].detail
    assert not rep.ok
    assert rep.to_dict()["vllm"]["device"] == "cpu"


def test_doctor_cli_on_real_installation(monkeypatch, capsys):
    monkeypatch.setenv("VLLM_LOGGING_STREAM", "ext://sys.stderr")
    monkeypatch.setattr(manager, "_HOST", None)
    monkeypatch.setenv("VLLM_SPEC_PLUGINS", "medusa,statetest")
    assert main(["doctor"]) == 0, capsys.readouterr().out
    out = capsys.readouterr().out
    assert "OK    plugin medusa: vllm-spec-medusa 0.1.0" in out and "OK    vllm symbols: all" in out
    assert "INFO  overlap: plugin 'medusa' claims ['MedusaModel'], which vLLM also serves itself" in out
    assert out.rstrip().endswith("result: PASS")
    monkeypatch.setattr(manager, "_HOST", None)


# -- check agrees with the engine's own first step (routing.route_request) ------------------------------


def test_check_follows_the_checkpoint_stamp_like_the_engine():
    """The shipped EAGLE-1 draft: a plain LlamaForCausalLM config with "vllm_spec_plugin": "eagle". check used
    to say "vLLM itself serves it"; the engine serves it with the eagle plugin."""
    from pathlib import Path

    from vllm_spec_plugins import diagnose

    draft = Path(__file__).resolve().parents[2] / "bench" / "drafts" / "smollm2-eagle"
    rep = diagnose.check_checkpoint(str(draft))
    assert rep.facts["served_by"]["plugin"] == "eagle", rep.format()
    assert rep.facts["served_by"]["route"] == "eagle"


def test_check_refuses_what_the_engine_refuses_before_vllm_reads_the_config(tmp_path):
    import json
    import shutil
    from pathlib import Path

    from vllm_spec_plugins import diagnose

    src = Path(__file__).resolve().parents[2] / "bench" / "drafts" / "smollm2-eagle"
    unstamped = tmp_path / "smollm2-draft"
    shutil.copytree(src, unstamped)
    cfg = json.loads((unstamped / "config.json").read_text())
    del cfg["vllm_spec_plugin"]
    (unstamped / "config.json").write_text(json.dumps(cfg))
    rep = diagnose.check_checkpoint(str(unstamped))
    assert not rep.ok and "has the EAGLE layout (fc.weight) but its config.json" in rep.format()
    rep = diagnose.check_checkpoint(str(src), method="medusa2")
    assert not rep.ok and "names 'medusa2', which is neither an installed spec-decode plugin" in rep.format()
    rep = diagnose.check_checkpoint(str(src), num_speculative_tokens=0)
    assert not rep.ok
    assert "num_speculative_tokens=0 (--spec-tokens 0): a speculative config needs num_speculative_tokens >= 1" in rep.format()


def test_check_refuses_an_attention_class_claiming_multimodal_embeddings_it_cannot_take():
    import dataclasses

    from vllm_spec_plugins import Drafter
    from vllm_spec_plugins.runtime.inputs import TargetInputs

    d = dataclasses.replace(Drafter(architectures=("A",), model_class="pkg.m:A", kind="attention"), plugin="toy",
                            dist_label="toy-dist 1.0")
    vlm, text = TargetInputs(multimodal=True, embeds_size=8), TargetInputs(multimodal=False)

    class Claims:
        supports_multimodal_embeddings = True

        def embed_input_ids(self, input_ids):
            ...

    class Takes(Claims):
        def embed_input_ids(self, input_ids, multimodal_embeddings=None, is_multimodal=None):
            ...

    class Plain:
        def embed_input_ids(self, input_ids):
            ...

    def rows(cls, target):
        rep = diagnose.Report("t")
        diagnose._check_multimodal_embeddings(rep, d, cls, target)
        return [(i.status, i.detail) for i in rep.items]

    (status, detail), = rows(Claims, vlm)
    assert status == diagnose.FAIL and "plugin 'toy'" in detail and "embed_input_ids(self, input_ids)" in detail
    assert rows(Claims, text)[0][0] == diagnose.FAIL  # wrong whatever the target
    assert rows(Takes, vlm)[0][0] == diagnose.OK
    assert rows(Plain, vlm)[0][0] == diagnose.INFO and rows(Plain, text) == []


# -- vLLM 0.34 (Model Runner V2 only; its manifest symbols are properties, classmethods, declared attributes) ---------


def _fake_vllm_module(monkeypatch):
    import sys
    import types
    from typing import ClassVar

    mod = types.ModuleType("vsp_fake_vllm034")

    class Proto:
        config_class: ClassVar[type]  # declared, never assigned (a protocol's)

    class Config:
        @property
        def lookahead(self) -> int:
            return 0

        @classmethod
        def matches(cls, spec):
            return False

    mod.Proto, mod.Config = Proto, Config
    monkeypatch.setitem(sys.modules, mod.__name__, mod)
    return mod.__name__


def test_check_symbol_properties_classmethods_and_declared_attributes(monkeypatch):
    m = _fake_vllm_module(monkeypatch)
    prop = diagnose.check_symbol(Target(m, "Config.lookahead", params=("self",)))
    assert prop.status == "ok", prop.detail
    bad_prop = diagnose.check_symbol(Target(m, "Config.lookahead", params=("self", "n")))
    assert bad_prop.status == "fail" and "expected leading parameters (self, n), found (self)" in bad_prop.detail
    cm = diagnose.check_symbol(Target(m, "Config.matches", params=("cls", "spec")))
    assert cm.status == "ok", cm.detail
    bad_cm = diagnose.check_symbol(Target(m, "Config.matches", params=("cls", "config")))
    assert bad_cm.status == "fail" and "found (cls, spec)" in bad_cm.detail
    declared = diagnose.check_symbol(Target(m, "Proto.config_class", kind="attribute"))
    assert declared.status == "ok" and declared.detail == "declared in the class body"
    missing = diagnose.check_symbol(Target(m, "Proto.other_class", kind="attribute"))
    assert missing.status == "fail" and missing.detail == "Proto.other_class not found"
    assert diagnose.check_symbol(Target(m, "Proto.config_class")).status == "fail"  # a function: declared is not one


def test_manifest_on_034_leaves_out_the_v1_symbols():
    from vllm_spec_plugins.patch.targets import TARGETS

    v1 = [t for t in TARGETS if t.module.startswith(("vllm.v1.worker.gpu_model_runner", "vllm.v1.spec_decode"))]
    assert v1 and all("0.34" not in t.versions for t in v1)
    checked = {(t.module, t.qualname) for t in TARGETS if "0.34" in t.versions}
    assert not checked & {(t.module, t.qualname) for t in v1}


def _as_034(monkeypatch):
    from vllm_spec_plugins import _compat

    monkeypatch.setattr(_compat, "vllm_version", lambda: ("0.34.0", (0, 34)))


def test_runner_outlook_on_034_is_mrv2_only(monkeypatch):
    monkeypatch.delenv("VLLM_SPEC_PLUGINS_RUNNER", raising=False)
    assert diagnose.runner_outlook()[0] in ("v1", "v2")  # 0.32: either
    _as_034(monkeypatch)
    runner, why = diagnose.runner_outlook()
    assert runner == "v2" and "removed the V1 model runner" in why and "PluginHeadsSpeculator" in why
    monkeypatch.setenv("VLLM_SPEC_PLUGINS_RUNNER", "v1")
    runner, why = diagnose.runner_outlook()
    assert runner == "v2" and "VLLM_SPEC_PLUGINS_RUNNER=v1 has no effect" in why


def test_doctor_on_034_says_supported_and_mrv2_only(use_host, monkeypatch):
    use_host(FakeEntryPoint("good", plugin_registering(heads(model_class="tests.unit.toy_drafters:GoodDrafter",
                                                             **TOY, **STATEFUL)), dist="vsp-good", version="1"))
    _as_034(monkeypatch)
    rep = diagnose.doctor(manifest=False)
    items = {i.check: i for i in rep.items}
    assert items["vllm"].status == "ok", items["vllm"].detail
    assert "vLLM 0.34.0" in items["vllm"].detail and "supports 0.32, 0.33 and 0.34" in items["vllm"].detail
    assert "Model Runner V2 only" in items["vllm"].detail
    assert "removed the V1 model runner" in items["model runner"].detail
    assert rep.facts["model_runner"]["runner"] == "v2" and rep.to_dict()["vllm"]["minor"] == "0.34"
    monkeypatch.setattr(diagnose, "_vllm_build", lambda: {**_build34(), "supported": False})
    bad = {i.check: i for i in diagnose.doctor(manifest=False).items}["vllm"]
    assert bad.status == "fail" and "plugin drafters are refused" in bad.detail


def _build34():
    return {"version": "0.34.0", "distributions": [], "device": "cpu", "torch": None, "supported": True,
            "supported_versions": "0.32, 0.33 and 0.34", "registry": True, "minor": "0.34"}


def test_check_trial_failure_names_it(monkeypatch):
    from vllm_spec_plugins import inprocess

    def boom(*a, **k):
        raise ModuleNotFoundError("No module named 'vllm.v1.spec_decode.draft_model'")

    monkeypatch.setattr(inprocess, "start_heads_proposer", boom)
    rep = diagnose.Report("t")
    diagnose._check_trial(rep, heads(), "target", "draft", 3, None)
    (item,) = rep.items
    assert item.check == "trial forward" and item.status == "fail"
    assert item.detail == ("the drafter failed to build as an engine start builds it: ModuleNotFoundError: "
                           "No module named 'vllm.v1.spec_decode.draft_model'")
