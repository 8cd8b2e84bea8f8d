"""Fast unit tests of the EAGLE plugin: its two drafters, how "method": "eagle" routes, EAGLE-3 keys."""

from __future__ import annotations

import json
import types

import pytest

from vllm_spec_plugins.manager import PluginHost
from vllm_spec_plugins.routing import alias_route, attention_method


@pytest.fixture(scope="module")
def host():
    return PluginHost().load(allow={"eagle"})


def test_installed_plugin_registers_eagle1_and_eagle3(host):
    info = host.plugins["eagle"]
    assert info.error is None and info.dist_label == "vllm-spec-eagle 0.1.0"
    e1, e3 = info.drafters
    assert e1.architectures == ("EagleLlamaForCausalLM",) and e1.model_class == "vllm_spec_eagle.model:EagleDraftModel"
    assert e3.architectures == ("LlamaForCausalLMEagle3", "Eagle3LlamaForCausalLM")
    assert e3.model_class == "vllm_spec_eagle.eagle3:Eagle3DraftModel"
    assert (e1.kind, e3.kind) == ("attention", "attention")
    assert (e1.position_free, e3.position_free) == (False, False)
    assert e3.aux_layer_ids == "eagle_aux_hidden_state_layer_ids"
    assert (attention_method(e1), attention_method(e3)) == ("eagle", "eagle3")
    assert host.select(["LlamaForCausalLMEagle3"]) is e3 and host.select(["Eagle3LlamaForCausalLM"]) is e3
    assert host.select(["EagleLlamaForCausalLM"]) is e1


def _ckpt(tmp_path, name, cfg):
    d = tmp_path / name
    d.mkdir()
    (d / "config.json").write_text(json.dumps(cfg))
    return str(d)


LLAMA = {"architectures": ["LlamaForCausalLM"], "model_type": "llama"}


@pytest.mark.parametrize("name,cfg,route", [
    ("eagle3-safeailab", {"architectures": ["LlamaForCausalLMEagle3"], "model_type": "llama"}, "eagle3"),
    ("plain-with-aux-ids", {**LLAMA, "eagle_aux_hidden_state_layer_ids": [1, 20, 38]}, "eagle3"),
    ("tiny-eagle3", LLAMA, "eagle3"),          # vLLM's path heuristic
    ("tiny-eagle-1", LLAMA, "eagle"),
    ("plain", LLAMA, "eagle"),                 # EAGLE-1: registered first
])
def test_method_eagle_routes_by_local_config(host, tmp_path, name, cfg, route):
    assert alias_route(host, "eagle", _ckpt(tmp_path, name, cfg)) == route


def test_method_eagle_with_hub_ids(host):
    assert alias_route(host, "eagle", "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B") == "eagle3"
    assert alias_route(host, "eagle", "yuhuili/EAGLE-LLaMA3-Instruct-8B") == "eagle"
    assert alias_route(host, "eagle", "org/draft") == "eagle"  # pass "method": "eagle3" for such an EAGLE-3


@pytest.fixture(scope="module")
def eagle3():
    from vllm_spec_eagle import eagle3  # imports vLLM layers (a few seconds)

    return eagle3


@pytest.mark.parametrize("raw,key", [
    ("midlayer.self_attn.q_proj.weight", "layers.0.self_attn.q_proj.weight"),
    ("midlayer.hidden_norm.weight", "layers.0.hidden_norm.weight"),
    ("layers.0.mlp.down_proj.weight", "layers.0.mlp.down_proj.weight"),
    ("model.layers.1.input_layernorm.weight", "layers.1.input_layernorm.weight"),
    ("fc.weight", "fc.weight"),
    ("norm.weight", "norm.weight"),
    ("lm_head.weight", "lm_head.weight"),
    ("d2t", "d2t"),
    ("t2d", "t2d"),
    ("embed_tokens.weight", "embed_tokens.weight"),
])
def test_eagle3_checkpoint_keys(eagle3, raw, key):
    assert eagle3.canonical_key(raw) == key


@pytest.mark.parametrize("cfg,n", [
    ({}, 3),
    ({"eagle_aux_hidden_state_layer_ids": [0, 1]}, 2),
    ({"eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 2, 3, 4]}}, 4),
    ({"num_aux_hidden_states": 5, "eagle_aux_hidden_state_layer_ids": [0, 1]}, 5),
])
def test_eagle3_number_of_target_layers(eagle3, cfg, n):
    assert eagle3.num_target_layers(types.SimpleNamespace(**cfg)) == n


def test_eagle3_logits_from_target_rows_go_through_vllms_gemm(eagle3, monkeypatch):
    """A draft with d2t but no lm_head.weight takes the target head's rows of its vocabulary. Its logits go through
    the GEMM vLLM's platform uses for its own linear layers (on the CPU build oneDNN with the rows prepacked: 0.48
    ms in an engine where torch's ``x @ rows.T`` took 1.2 ms), and equal the plain product; where this vLLM has no
    such dispatch, the plain product."""
    import torch
    from vllm.model_executor.layers import utils

    calls = []
    dispatch = utils.dispatch_unquantized_gemm

    def spy(*a, **k):
        gemm = dispatch(*a, **k)

        def run(layer, x, weight, bias=None):
            calls.append(tuple(x.shape))
            return gemm(layer, x, weight, bias)
        return run

    monkeypatch.setattr(utils, "dispatch_unquantized_gemm", spy)
    torch.manual_seed(0)
    rows = torch.randn(300, 64)
    logits = eagle3.rows_gemm(rows)
    for m in (1, 3, 40):
        x = torch.randn(m, 64)
        torch.testing.assert_close(logits(x), x @ rows.T, rtol=1e-4, atol=1e-4)
    assert calls == [(1, 64), (3, 64), (40, 64)]

    monkeypatch.delattr(utils, "dispatch_unquantized_gemm")
    x = torch.randn(2, 64)
    torch.testing.assert_close(eagle3.rows_gemm(rows)(x), x @ rows.T, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("d2t,problem", [
    ([0, 0, 0], None),                       # the first three target ids
    ([5, 7, 1], None),                       # target ids 5, 8, 3: any order
    ([0, 0, 8], "maps draft id 2 to target id 10, outside the target's vocabulary [0, 10)"),
    ([0, -2, 0], "maps draft id 1 to target id -1, outside"),
    ([1, 0, 0], "maps draft id 0 and draft id 1 to the same target id 1"),  # 1, 1, 2
    ([0] * 11, "has shape [11], expected [n] with n <= 10"),
])
def test_d2t_is_checked_against_the_target_vocabulary(d2t, problem):
    """A draft vocabulary that names a token outside the target's vocabulary or names one twice is refused with the
    checkpoint and the offending draft id; a valid one in any order passes."""
    import torch
    from vllm_spec_eagle.vocab import check_d2t

    if problem is None:
        check_d2t(torch.tensor(d2t), 10, "/ckpt")
        return
    with pytest.raises(ValueError) as ei:
        check_d2t(torch.tensor(d2t), 10, "/ckpt")
    assert str(ei.value).startswith("vllm-spec-eagle: checkpoint '/ckpt': d2t ") and problem in str(ei.value)
