"""Fast unit tests of the MLP speculator plugin: config, key layout, weight tying and loading errors.

The drafts themselves are checked against a plain-torch reference on real engines
(tests/e2e/test_mlp_engine.py).
"""

from __future__ import annotations

import json
import pickle
import types

import pytest
import torch
from vllm_spec_mlp.config import MLPSpeculatorConfig

# A config.json with every field fms-extras' MLPSpeculatorPreTrainedModel writes (a Llama-3-8B-sized speculator).
IBM_CONFIG = {
    "architectures": ["MLPSpeculatorPreTrainedModel"], "emb_dim": 4096, "inner_dim": 0,
    "model_type": "mlp_speculator", "n_candidates": 5, "n_predict": 4, "scale_input": True,
    "tie_weights": True, "top_k_tokens_per_head": [4, 3, 2, 2], "torch_dtype": "float16",
    "vocab_size": 128256,
}


# -- config -------------------------------------------------------------------------------


def test_defaults():
    c = MLPSpeculatorConfig()
    assert c.model_type == "mlp_speculator"
    assert c.architectures == ["MLPSpeculatorPreTrainedModel"]
    assert c.vocab_size is None and c.emb_dim is None and c.hidden_size is None  # filled from the target
    assert (c.inner_dim, c.n_predict, c.tie_weights, c.scale_input) == (0, 3, False, False)


def test_hidden_size_is_emb_dim():
    c = MLPSpeculatorConfig(emb_dim=64)
    assert c.hidden_size == 64
    c.hidden_size = 128  # what the shim does when the config omits it
    assert c.emb_dim == 128
    assert c.inner_size == 128
    assert MLPSpeculatorConfig(emb_dim=64, inner_dim=32).inner_size == 32


def test_no_num_lookahead_tokens():
    """vLLM 0.32 overwrites num_lookahead_tokens with --spec-tokens; ours has none, n_predict stays."""
    c = MLPSpeculatorConfig(n_predict=4)
    assert not hasattr(c, "num_lookahead_tokens")
    assert "num_lookahead_tokens" not in c.to_dict()


def test_from_pretrained_ibm_config(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(IBM_CONFIG))
    c = MLPSpeculatorConfig.from_pretrained(str(tmp_path))
    assert isinstance(c, MLPSpeculatorConfig)
    assert (c.emb_dim, c.hidden_size, c.inner_size, c.vocab_size, c.n_predict) == (4096, 4096, 4096, 128256, 4)
    assert c.tie_weights is True and c.scale_input is True
    assert c.top_k_tokens_per_head == [4, 3, 2, 2] and c.n_candidates == 5


def test_top_k_of_another_length_is_kept_not_checked():
    """The candidate tree is not used (greedy chain), so a mismatched list does not stop loading."""
    c = MLPSpeculatorConfig(n_predict=2, top_k_tokens_per_head=[5, 4, 3])
    assert c.top_k_tokens_per_head == [5, 4, 3]


def test_pickle_round_trip():
    c = MLPSpeculatorConfig(vocab_size=259, emb_dim=128, n_predict=4, tie_weights=True)
    c.vsp_plugin = "mlp_speculator"
    c2 = pickle.loads(pickle.dumps(c))
    assert type(c2) is MLPSpeculatorConfig
    assert c2.to_dict() == c.to_dict() and c2.vsp_plugin == "mlp_speculator"


# -- installed plugin ------------------------------------------------------------------------


def test_plugin_is_installed():
    from vllm_spec_plugins.manager import PluginHost

    host = PluginHost().load(allow=None)
    info = host.plugins["mlp_speculator"]
    assert info.error is None
    assert info.dist == "vllm-spec-mlp" and info.value == "vllm_spec_mlp"
    (d,) = info.drafters
    assert d.architectures == ("MLPSpeculatorPreTrainedModel",)
    assert d.model_type == "mlp_speculator" and d.kind == "heads"
    assert d.config_class == "vllm_spec_mlp.config:MLPSpeculatorConfig"
    assert d.model_class == "vllm_spec_mlp.model:MLPSpeculatorDraftModel"
    assert d.max_speculative_tokens == "n_predict"
    assert host.select(["MLPSpeculatorPreTrainedModel"]) == d
    assert host.select([], model_type="mlp_speculator") == d


# -- checkpoint keys ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def model_mod():
    from vllm_spec_mlp import model  # imports vLLM layers (a few seconds)

    return model


@pytest.mark.parametrize("raw,parsed", [
    ("emb.0.weight", ("emb", 0, "weight")),
    ("proj.3.weight", ("proj", 3, "weight")),
    ("head.12.weight", ("head", 12, "weight")),
    ("ln.1.weight", ("ln", 1, "weight")),
    ("ln.1.bias", ("ln", 1, "bias")),
    ("speculator.emb.2.weight", ("emb", 2, "weight")),
    ("speculator.ln.0.bias", ("ln", 0, "bias")),
    ("model.speculator.head.1.weight", ("head", 1, "weight")),
])
def test_parse_key(model_mod, raw, parsed):
    assert model_mod.parse_key(raw) == parsed


@pytest.mark.parametrize("raw", ["emb.0.bias", "proj.1.bias", "head.0.bias", "ln0.weight", "lm_head.weight",
                                 "emb.weight", "speculator.proj.x.weight"])
def test_parse_key_rejects(model_mod, raw):
    assert model_mod.parse_key(raw) is None


@pytest.mark.parametrize("kind,idx,want", [("emb", 3, 0), ("head", 2, 0), ("ln", 1, 0), ("proj", 0, 0),
                                          ("proj", 1, 1), ("proj", 5, 1)])
def test_tied_index_follows_fms_extras(model_mod, kind, idx, want):
    assert model_mod.tied_index(kind, idx) == want


# -- the model on a one-process tensor-parallel group ----------------------------------------------


@pytest.fixture(scope="module")
def dist(model_mod):
    """One tensor-parallel rank in this process (the test kit's, set up once per process and shared
    with the harness tests), and a current vLLM config while the model is built."""
    from vllm.config import VllmConfig, set_current_vllm_config

    from vllm_spec_plugins.testing.harness import init_cpu_runtime

    cfg = VllmConfig()
    init_cpu_runtime(cfg)
    with set_current_vllm_config(cfg):
        yield


def _model(model_mod, k=3, **cfg):
    config = MLPSpeculatorConfig(**{"vocab_size": 259, "emb_dim": 16, "n_predict": 3, **cfg})
    spec = types.SimpleNamespace(num_speculative_tokens=k,
                                 draft_model_config=types.SimpleNamespace(hf_config=config, model="/ckpt/acc"))
    return model_mod.MLPSpeculatorDraftModel(vllm_config=types.SimpleNamespace(speculative_config=spec))


def _sd(n_predict=3, inner=16, emb=16, vocab=259, prefix="", tied=False, once=True):
    sd = {}
    for i in range(n_predict):
        j = 0 if tied else i
        if tied and once and i > 1:
            continue
        if not (tied and once and i == 1):
            sd[f"{prefix}emb.{i}.weight"] = torch.randn(vocab, inner, generator=torch.Generator().manual_seed(j))
            sd[f"{prefix}head.{i}.weight"] = torch.randn(vocab, inner, generator=torch.Generator().manual_seed(10 + j))
            sd[f"{prefix}ln.{i}.weight"] = torch.randn(inner, generator=torch.Generator().manual_seed(20 + j))
            sd[f"{prefix}ln.{i}.bias"] = torch.randn(inner, generator=torch.Generator().manual_seed(30 + j))
        pj = min(i, 1) if tied else i
        sd[f"{prefix}proj.{i}.weight"] = torch.randn(inner, emb if i == 0 else inner,
                                                     generator=torch.Generator().manual_seed(40 + pj))
    return sd


def test_untied_parameters_and_load(model_mod, dist):
    m = _model(model_mod)
    names = {n for n, _ in m.named_parameters()}
    assert names == {f"{k}.{i}.weight" for k in ("emb", "proj", "head", "ln") for i in range(3)} | {
        f"ln.{i}.bias" for i in range(3)}
    sd = _sd()
    assert m.load_weights(sd.items()) == names
    assert torch.equal(m.proj[2].weight, sd["proj.2.weight"])
    assert torch.equal(m.emb[1].weight[:259], sd["emb.1.weight"])
    assert m.ln0 is None


def test_tied_parameters_stored_once_with_prefix(model_mod, dist):
    m = _model(model_mod, n_predict=4, tie_weights=True, scale_input=True)
    names = {n for n, _ in m.named_parameters()}
    assert names == {"emb.0.weight", "head.0.weight", "ln.0.weight", "ln.0.bias", "proj.0.weight", "proj.1.weight"}
    assert m.emb[2] is m.emb[0] and m.head[2] is m.head[0] and m.ln[1] is m.ln[0]
    assert m.proj[2] is m.proj[1] and m.proj[1] is not m.proj[0]
    sd = _sd(n_predict=4, prefix="speculator.", tied=True, once=True)
    assert set(sd) == {"speculator.emb.0.weight", "speculator.head.0.weight", "speculator.ln.0.weight",
                       "speculator.ln.0.bias", "speculator.proj.0.weight", "speculator.proj.1.weight"}
    assert m.load_weights(sd.items()) == names
    assert m.ln0 is not None and not list(m.ln0.parameters())  # scale_input's norm has no parameters


def test_tied_stored_at_every_index(model_mod, dist):
    m = _model(model_mod, tie_weights=True)
    sd = _sd(tied=True, once=False)
    assert "emb.2.weight" in sd and "proj.2.weight" in sd
    assert m.load_weights(sd.items()) == {n for n, _ in m.named_parameters()}


def test_tied_checkpoint_that_is_not_tied(model_mod, dist):
    m = _model(model_mod, tie_weights=True)
    with pytest.raises(ValueError, match=r"sets tie_weights, but 'emb.1.weight' differs from 'emb.0.weight'"):
        m.load_weights(_sd().items())


def test_tied_flag_missing_on_a_tied_checkpoint(model_mod, dist):
    m = _model(model_mod)
    with pytest.raises(ValueError, match=r"lacks \['emb.1.weight'.*tie_weights=false.*\"tie_weights\": true"):
        m.load_weights(_sd(tied=True, once=True).items())


def test_fewer_tokens_than_heads_builds_and_loads_only_those(model_mod, dist):
    m = _model(model_mod, k=2)
    assert len(m.emb) == 2 and m.k == 2 and m.n_predict == 3
    assert m.load_weights(_sd().items()) == {n for n, _ in m.named_parameters()}
    # the constants follow n_predict, not k (fms-extras)
    assert m.state_weight == 0.5 ** (0.5 / 3)


def test_unknown_key(model_mod, dist):
    m = _model(model_mod)
    sd = _sd()
    sd["lm_head.weight"] = torch.zeros(259, 16)
    with pytest.raises(ValueError, match=r"/ckpt/acc.*key 'lm_head.weight'.*not an MLP speculator weight"):
        m.load_weights(sd.items())


def test_wrong_shape(model_mod, dist):
    m = _model(model_mod)
    sd = _sd()
    sd["proj.0.weight"] = torch.zeros(16, 32)
    with pytest.raises(ValueError, match=r"key 'proj.0.weight' has shape \[16, 32\], expected \[16, 16\]"):
        m.load_weights(sd.items())


def test_head_beyond_n_predict(model_mod, dist):
    m = _model(model_mod, n_predict=2)
    with pytest.raises(ValueError, match=r"head 2, but its config says n_predict=2"):
        m.load_weights(_sd(n_predict=3).items())


def test_tie_weights_needs_two_heads(model_mod, dist):
    with pytest.raises(ValueError, match="tie_weights with n_predict=1"):
        _model(model_mod, k=1, n_predict=1, tie_weights=True)
