"""The ``vllm-spec-plugins list`` command."""

from __future__ import annotations

import dataclasses
import json

import pytest

import vllm_spec_plugins.manager as manager
from vllm_spec_plugins import Drafter, ExtraInput, PluginInfo, Source, StateSpec
from vllm_spec_plugins.cli import format_table, main, plugin_dict

MEDUSA = dataclasses.replace(
    Drafter(architectures=("MedusaModel",), model_type="medusa", config_class="vllm_spec_medusa.config:MedusaConfig",
            model_class="vllm_spec_medusa.model:MedusaDraftModel", max_speculative_tokens="num_heads"),
    plugin="medusa", dist_label="vllm-spec-medusa 0.1.0")
STATEFUL = Drafter(
    architectures=("StateTestDrafter",), model_class="vsp_state_drafter.model:StateTestDrafter",
    extra_inputs=(ExtraInput(name="sampled", source=Source.SAMPLED_TOKEN_IDS, dtype="int32", shape=("k1",)),
                  ExtraInput(name="mem", source=Source.STATE, state="acc")),
    state=(StateSpec(name="acc", shape=(3,), dtype="int64", on_preempt="reset"),),
)

PLUGINS = [
    PluginInfo("medusa", "vllm_spec_medusa", "vllm-spec-medusa", "0.1.0", (MEDUSA,),
               hooks=("vllm_spec_register_drafters",)),
    PluginInfo("statetest", "vsp_state_drafter", "vsp-test-state-drafter", "0.0.1", (STATEFUL,)),
    PluginInfo("broken", "vsp_broken_plugin", "vsp-test-broken-plugin", "0.0.2",
               error="ImportError: No module named 'does_not_exist'"),
    PluginInfo("empty", "empty_pkg", None, None),
]


def test_format_table():
    out = format_table(PLUGINS)
    lines = out.splitlines()
    assert lines[0].split() == ["PLUGIN", "DISTRIBUTION", "VERSION", "ARCHITECTURES", "EXTRA", "INPUTS", "STATE"]
    # columns are aligned: every header column starts where its values start
    col = lines[0].index("DISTRIBUTION")
    assert lines[1][col:].startswith("vllm-spec-medusa")
    medusa = next(line for line in lines if line.startswith("medusa "))
    assert "MedusaModel (model_type medusa) [heads]" in medusa
    state = next(line for line in lines if line.startswith("statetest "))
    assert "sampled<-sampled_token_ids[k1], mem<-acc" in state
    assert "acc[3] int64 reset" in state
    broken = next(line for line in lines if line.startswith("broken "))
    assert "vsp-test-broken-plugin" in broken and "0.0.2" in broken and "BROKEN (see below)" in broken
    empty = next(line for line in lines if line.startswith("empty "))
    assert "(none registered)" in empty and empty.split()[1:3] == ["-", "-"]
    assert "Broken plugins (vLLM still starts; they are skipped unless their draft is requested):" in out
    assert lines[-1] == "  broken (vsp_broken_plugin): ImportError: No module named 'does_not_exist'"


def test_format_table_without_broken_has_no_notes():
    out = format_table(PLUGINS[:2])
    assert "Broken plugins" not in out and "BROKEN" not in out
    assert len(out.splitlines()) == 3


def test_format_table_empty():
    assert format_table([]) == ("No vllm-spec-plugins drafter plugins installed "
                                "(entry-point group 'vllm_spec_plugins').")


def test_plugin_dict():
    d = plugin_dict(PLUGINS[0])
    assert d == {
        "name": "medusa",
        "entry_point": "vllm_spec_medusa",
        "distribution": "vllm-spec-medusa",
        "version": "0.1.0",
        "hooks": ["vllm_spec_register_drafters"],
        "drafters": [{
            "architectures": ["MedusaModel"],
            "model_type": "medusa",
            "kind": "heads",
            "model_class": "vllm_spec_medusa.model:MedusaDraftModel",
            "config_class": "vllm_spec_medusa.config:MedusaConfig",
            "extra_inputs": [],
            "state": [],
            "max_speculative_tokens": "num_heads",
        }],
        "error": None,
    }


def test_plugin_dict_extras_state_and_broken():
    (dr,) = plugin_dict(PLUGINS[1])["drafters"]
    assert dr["extra_inputs"] == [
        {"name": "sampled", "source": "sampled_token_ids", "shape": ["k1"], "dtype": "int32"},
        {"name": "mem", "source": "state", "shape": None, "dtype": "model", "state": "acc"},
    ]
    assert dr["state"] == [{"name": "acc", "shape": [3], "dtype": "int64", "init": 0.0, "on_preempt": "reset"}]
    b = plugin_dict(PLUGINS[2])
    assert b["error"] == "ImportError: No module named 'does_not_exist'"
    assert b["drafters"] == [] and b["hooks"] == []
    json.dumps([plugin_dict(p) for p in PLUGINS])  # all of it is JSON-serialisable


def test_main_list_json(monkeypatch, capsys):
    monkeypatch.setattr(manager, "list_plugins", lambda: PLUGINS)
    assert main(["list", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert [p["name"] for p in data] == ["medusa", "statetest", "broken", "empty"]
    assert data[0]["drafters"][0]["architectures"] == ["MedusaModel"]
    assert data[2]["error"].startswith("ImportError")
    assert data[3]["distribution"] is None


def test_main_list_table(monkeypatch, capsys):
    monkeypatch.setattr(manager, "list_plugins", lambda: PLUGINS)
    assert main(["list"]) == 0
    from vllm_spec_plugins.owners import find_shadows

    shadows = find_shadows([d for p in PLUGINS for d in p.drafters])
    assert capsys.readouterr().out == format_table(PLUGINS, shadows) + "\n"


def test_list_shows_names_vllm_already_serves(monkeypatch, capsys):
    from vllm_spec_plugins import Drafter
    from vllm_spec_plugins.api import PluginInfo

    shadow = PluginInfo("shadow", "shadow_pkg", "shadow-dist", "0.3", (Drafter(
        architectures=("LlamaForCausalLM",), model_class="m:C", plugin="shadow", dist_label="shadow-dist 0.3"),))
    monkeypatch.setattr(manager, "list_plugins", lambda: [shadow])
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    assert "Names vLLM or Transformers already serve (never registered over theirs):" in out
    assert ("architecture 'LlamaForCausalLM' (plugin 'shadow', shadow-dist 0.3) is a model vLLM already serves: not "
            "registered over it, and not selected by that name") in out
    assert main(["list", "--json"]) == 0
    row = json.loads(capsys.readouterr().out)[0]
    assert row["shadows"] == [{"what": "architecture", "name": "LlamaForCausalLM", "plugin": "shadow",
                               "owner": "vLLM", "selected_by_name": False}]


def test_main_needs_a_command(capsys):
    with pytest.raises(SystemExit) as ei:
        main([])
    assert ei.value.code == 2


def test_shape_display_none_vs_scalar():
    d = Drafter(architectures=("X",), model_class="m:X", extra_inputs=(
        ExtraInput(name="a", source=Source.NUM_ACCEPTED),             # shape None: not checked
        ExtraInput(name="b", source=Source.NUM_NEW_TOKENS, shape=()),  # one scalar per row, checked
    ))
    out = format_table([PluginInfo("x", "x_pkg", "x-dist", "1", (d,))])
    assert "a<-num_accepted[*], b<-num_new_tokens[]" in out
    extras = plugin_dict(PluginInfo("x", "x_pkg", "x-dist", "1", (d,)))["drafters"][0]["extra_inputs"]
    shapes = [e["shape"] for e in extras]
    assert shapes == [None, []]
