"""Fast unit tests of the Medusa plugin: key layouts, config aliases, and that the plugin is installed."""

from __future__ import annotations

import json
import pickle

import pytest
from vllm_spec_medusa.config import ALIASES, MedusaConfig


@pytest.fixture(scope="module")
def canonical_key():
    from vllm_spec_medusa.model import canonical_key  # imports vLLM layers (a few seconds)

    return canonical_key


# -- checkpoint key layouts ------------------------------------------------------------


@pytest.mark.parametrize("raw,canonical", [
    # new layout: unchanged
    ("blocks.0.layers.0.weight", "blocks.0.layers.0.weight"),
    ("blocks.3.layers.1.bias", "blocks.3.layers.1.bias"),
    ("lm_heads.2.weight", "lm_heads.2.weight"),
    ("lm_head.weight", "lm_head.weight"),
    ("token_map", "token_map"),
    # prefixed new layout
    ("medusa_heads.blocks.1.layers.0.weight", "blocks.1.layers.0.weight"),
    ("medusa_heads.lm_heads.4.weight", "lm_heads.4.weight"),
    ("medusa_head.blocks.0.layers.0.bias", "blocks.0.layers.0.bias"),
    ("medusa_head.lm_head.weight", "lm_head.weight"),
    ("medusa_heads.token_map", "token_map"),
    # old FasterDecoding layout: residual blocks ...
    ("0.0.linear.weight", "blocks.0.layers.0.weight"),
    ("0.0.linear.bias", "blocks.0.layers.0.bias"),
    ("4.2.linear.weight", "blocks.4.layers.2.weight"),
    ("12.10.linear.bias", "blocks.12.layers.10.bias"),
    # ... and each head's output Linear at index N = number of layers
    ("0.1.weight", "lm_heads.0.weight"),
    ("3.2.weight", "lm_heads.3.weight"),
    # old layout with a prefix
    ("medusa_head.2.0.linear.weight", "blocks.2.layers.0.weight"),
    ("medusa_head.2.1.weight", "lm_heads.2.weight"),
    ("medusa_heads.1.0.linear.bias", "blocks.1.layers.0.bias"),
    ("medusa_heads.1.1.weight", "lm_heads.1.weight"),
])
def test_canonical_key(canonical_key, raw, canonical):
    assert canonical_key(raw) == canonical


@pytest.mark.parametrize("raw", ["model.embed_tokens.weight", "foo.0.linear.weight", "0.weight"])
def test_canonical_key_leaves_foreign_keys(canonical_key, raw):
    assert canonical_key(raw) == raw


# -- config -------------------------------------------------------------------------


def test_defaults():
    c = MedusaConfig()
    assert c.hidden_size is None and c.vocab_size is None
    assert (c.num_heads, c.num_hidden_layers) == (5, 1)
    assert c.truncated_vocab_size is None and c.original_lm_head is False and c.logit_scale == 1.0
    assert c.model_type == "medusa"
    assert c.architectures == ["MedusaModel"]
    assert c.draft_vocab_size is None


def test_draft_vocab_size():
    assert MedusaConfig(vocab_size=100).draft_vocab_size == 100
    assert MedusaConfig(vocab_size=100, truncated_vocab_size=40).draft_vocab_size == 40


@pytest.mark.parametrize("old,new,value", [
    ("medusa_num_heads", "num_heads", 3),
    ("num_medusa_heads", "num_heads", 7),
    ("medusa_num_layers", "num_hidden_layers", 2),
    ("num_medusa_layers", "num_hidden_layers", 4),
])
def test_aliases(old, new, value):
    c = MedusaConfig(**{old: value})
    assert getattr(c, new) == value
    assert not hasattr(c, old)
    assert ALIASES[old] == new


def test_no_num_lookahead_tokens():
    c = MedusaConfig(num_heads=4)
    assert not hasattr(c, "num_lookahead_tokens")
    assert "num_lookahead_tokens" not in c.to_dict()


def test_from_pretrained_old_fasterdecoding_config(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({
        "base_model_name_or_path": "lmsys/vicuna-7b-v1.3",
        "medusa_num_heads": 3,
        "medusa_num_layers": 2,
    }))
    c = MedusaConfig.from_pretrained(str(tmp_path))
    assert isinstance(c, MedusaConfig)
    assert (c.num_heads, c.num_hidden_layers) == (3, 2)
    assert c.hidden_size is None and c.vocab_size is None
    assert c.architectures == ["MedusaModel"]
    assert c.model_type == "medusa"
    assert not hasattr(c, "num_lookahead_tokens")
    assert not hasattr(c, "medusa_num_heads")


def test_from_pretrained_new_config(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({
        "model_type": "medusa", "architectures": ["MedusaModel"], "hidden_size": 128, "vocab_size": 259,
        "num_heads": 2, "num_hidden_layers": 1, "truncated_vocab_size": 64, "original_lm_head": True,
    }))
    c = MedusaConfig.from_pretrained(str(tmp_path))
    assert (c.hidden_size, c.vocab_size, c.num_heads, c.draft_vocab_size, c.original_lm_head) == (
        128, 259, 2, 64, True)


def test_pickle_round_trip():
    c = MedusaConfig(hidden_size=128, vocab_size=259, medusa_num_heads=3, truncated_vocab_size=64)
    c.vsp_plugin = "medusa"  # the shim stamps attributes that must survive the trip to workers
    c2 = pickle.loads(pickle.dumps(c))
    assert type(c2) is MedusaConfig
    assert (c2.hidden_size, c2.vocab_size, c2.num_heads, c2.num_hidden_layers, c2.draft_vocab_size) == (
        128, 259, 3, 1, 64)
    assert c2.vsp_plugin == "medusa"
    assert c2.to_dict() == c.to_dict()


@pytest.mark.parametrize("token_map,problem", [
    ([3, 1, 4], None),
    ([3, 1, 10], "token_map maps draft id 2 to target id 10, outside the target's vocabulary [0, 10)"),
    ([3, 1, 3], "token_map maps draft id 0 and draft id 2 to the same target id 3"),
    ([3, 1], "token_map has 2 entries, but truncated_vocab_size is 3"),
    ([[3, 1, 4]], "token_map has shape [1, 3], expected [n] with n <= 10 (the target's vocabulary size)"),
])
def test_token_map_is_checked_against_the_target_vocabulary(token_map, problem):
    """A token_map naming a token outside the target's vocabulary, one token twice, or not truncated_vocab_size
    tokens is refused with the checkpoint and the offending entry; a valid one in any order passes."""
    import torch
    from vllm_spec_medusa.model import check_token_map

    if problem is None:
        check_token_map(torch.tensor(token_map), 10, 3, "/ckpt")
        return
    with pytest.raises(ValueError) as ei:
        check_token_map(torch.tensor(token_map), 10, 3, "/ckpt")
    assert str(ei.value).startswith(f"vllm-spec-medusa: checkpoint '/ckpt': {problem}. token_map[d] is the target id")


# -- installed plugin ---------------------------------------------------------------


def test_plugin_is_installed():
    from vllm_spec_plugins.manager import PluginHost

    host = PluginHost().load(allow=None)
    info = host.plugins["medusa"]
    assert info.error is None
    assert info.dist == "vllm-spec-medusa"
    assert info.value == "vllm_spec_medusa"
    assert info.hooks == ("vllm_spec_register_drafters",)
    (d,) = info.drafters
    assert d.architectures == ("MedusaModel",)
    assert d.model_type == "medusa"
    assert d.kind == "heads"
    assert d.config_class == "vllm_spec_medusa.config:MedusaConfig"
    assert d.model_class == "vllm_spec_medusa.model:MedusaDraftModel"
    assert d.max_speculative_tokens == "num_heads"
    assert d.plugin == "medusa" and d.dist == f"vllm-spec-medusa {info.version}"
    assert host.select(["MedusaModel"]) == d
    assert host.select([], model_type="medusa") == d
