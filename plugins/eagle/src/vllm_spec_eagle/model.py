"""The EAGLE-1 draft model (worker processes; built from vLLM's layers)."""

from __future__ import annotations

from collections.abc import Iterable

import torch
import torch.nn as nn
from vllm.compilation.decorators import support_torch_compile
from vllm.model_executor.layers.linear import ReplicatedLinear
from vllm.model_executor.layers.logits_processor import LogitsProcessor
from vllm.model_executor.layers.vocab_parallel_embedding import ParallelLMHead, VocabParallelEmbedding
from vllm.model_executor.model_loader.weight_utils import default_weight_loader
from vllm.model_executor.models.llama import LlamaDecoderLayer

from .vocab import DraftVocabulary, check_d2t

#: q/k/v and gate/up are stacked in vLLM's Llama layers.
_STACKED = ((".qkv_proj", ".q_proj", "q"), (".qkv_proj", ".k_proj", "k"), (".qkv_proj", ".v_proj", "v"),
            (".gate_up_proj", ".gate_proj", 0), (".gate_up_proj", ".up_proj", 1))


def add_bias(linear: nn.Module, params: dict, name: str) -> None:
    """Give a vLLM linear layer built without a bias the one the checkpoint has (created on load:
    a zero bias would change the GEMM kernel and so the last bits of bias-free checkpoints)."""
    linear.bias = nn.Parameter(torch.empty(linear.output_size, dtype=linear.weight.dtype,
                                           device=linear.weight.device), requires_grad=False)
    params[name] = linear.bias


def load_param(params: dict, name: str, w: torch.Tensor, loaded: set, check) -> None:
    """Load checkpoint tensor ``w`` into ``params[name]``, stacking q/k/v and gate/up as vLLM's layers do.

    ``check(ok)`` raises the caller's error for a key that is not one of the model's weights.
    """
    for stacked, part, shard in _STACKED:
        if part in name:
            target = name.replace(part, stacked)
            check(target in params)
            params[target].weight_loader(params[target], w, shard)
            loaded.add(target)
            return
    check(name in params)
    getattr(params[name], "weight_loader", default_weight_loader)(params[name], w)
    loaded.add(name)


@support_torch_compile(dynamic_arg_dims={"input_ids": 0, "positions": -1, "hidden_states": 0})
class EagleDecoder(nn.Module):
    """``h = fc(cat(embed(ids), hidden))`` then the draft decoder layers (layer 0 without input norm)."""

    def __init__(self, *, vllm_config, prefix: str = "", start_layer_id: int = 0) -> None:
        super().__init__()
        config = vllm_config.speculative_config.draft_model_config.hf_config
        self.config = config
        self.embed_tokens = VocabParallelEmbedding(config.vocab_size, config.hidden_size,
                                                   prefix=f"{prefix}.embed_tokens")
        self.layers = nn.ModuleList()
        for i in range(config.num_hidden_layers):
            layer = LlamaDecoderLayer(vllm_config, prefix=f"{prefix}.layers.{i + start_layer_id}", config=config)
            if i == 0:  # as the reference EAGLE-1: no input_layernorm on the first draft layer
                del layer.input_layernorm
                layer.input_layernorm = nn.Identity()
            self.layers.append(layer)
        # The bias is created on load when the checkpoint has one (the reference EAGLE-1 fc has it);
        # a zero bias would change the GEMM kernel and so the last bits of bias-free checkpoints.
        self.fc = ReplicatedLinear(2 * config.hidden_size, config.hidden_size, bias=False,
                                   params_dtype=vllm_config.model_config.dtype, prefix=f"{prefix}.fc",
                                   return_bias=False)

    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor,
                hidden_states: torch.Tensor) -> torch.Tensor:
        h = self.fc(torch.cat((self.embed_tokens(input_ids), hidden_states), dim=-1))
        residual = None
        for layer in self.layers:
            h, residual = layer(positions, h, residual)
        return h + residual

    def write_kv(self, input_ids: torch.Tensor, positions: torch.Tensor, hidden_states: torch.Tensor) -> None:
        """Only the draft KV cache :meth:`forward` writes: the same operations up to the last layer's attention
        (which writes that layer's KV), without that layer's MLP. Not compiled (``support_torch_compile`` wraps
        ``forward``): vLLM's forward context and attention metadata are used as they are."""
        h = self.fc(torch.cat((self.embed_tokens(input_ids), hidden_states), dim=-1))
        residual = None
        *front, last = self.layers
        for layer in front:
            h, residual = layer(positions, h, residual)
        # LlamaDecoderLayer.forward up to its attention
        x = last.input_layernorm(h) if residual is None else last.input_layernorm(h, residual)[0]
        last.self_attn(positions=positions, hidden_states=x)


class EagleDraftModel(DraftVocabulary, nn.Module):
    """EAGLE-1 draft for a Llama-family target.

    ``forward(input_ids, positions, hidden_states) -> (hidden for logits, hidden for the next step)``;
    the shim's attention-drafter adapter calls it inside vLLM's EAGLE loop. With ``kv_only=True`` (API 4: a pass
    whose outputs are discarded) it writes the draft KV cache alone (:meth:`EagleDecoder.write_kv`).

    A checkpoint with ``d2t`` (and no ``lm_head.weight``) drafts from a draft vocabulary: its logits are the
    target lm_head's rows of those tokens alone (:class:`~vllm_spec_eagle.vocab.DraftVocabulary`), a fraction of
    the full head's cost in every draft pass. vLLM's built-in EAGLE-1 has no draft vocabulary.
    """

    # vLLM's EAGLE machinery shares the target's embeddings / lm_head unless these become True.
    supports_eagle = True
    has_own_embed_tokens = False
    has_own_lm_head = False

    def __init__(self, *, vllm_config, prefix: str = "") -> None:
        super().__init__()
        spec = vllm_config.speculative_config
        self.config = spec.draft_model_config.hf_config
        self.checkpoint = spec.draft_model_config.model
        self.vllm_config = vllm_config
        target_layers = vllm_config.model_config.get_num_layers(vllm_config.parallel_config)
        self.model = EagleDecoder(vllm_config=vllm_config, prefix=f"{prefix}.model" if prefix else "model",
                                  start_layer_id=target_layers)
        self.logits_processor = LogitsProcessor(self.config.vocab_size, scale=getattr(self.config, "logit_scale", 1.0))
        self.draft_id_to_target_id: nn.Parameter | None = None  # set by load_weights from d2t
        self.rows_from_target = False  # d2t: the target lm_head's rows of the draft vocabulary

    def embed_input_ids(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.model.embed_tokens(input_ids)

    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor, hidden_states: torch.Tensor,
                kv_only: bool = False) -> tuple[torch.Tensor, torch.Tensor] | None:
        if kv_only:  # API 4: a pass whose outputs are discarded; only the draft KV it writes counts
            self.model.write_kv(input_ids, positions, hidden_states)
            return None
        h = self.model(input_ids, positions, hidden_states)
        return h, h

    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> set[str]:
        params = dict(self.named_parameters())
        loaded: set[str] = set()
        for raw, w in weights:
            name = raw[len("model."):] if raw.startswith("model.") else raw
            if name == "t2d":
                continue  # target -> draft membership mask; d2t says it all
            if name == "d2t":
                self.draft_id_to_target_id = nn.Parameter(torch.zeros(w.shape, dtype=torch.long,
                                                                      device=self.model.fc.weight.device),
                                                          requires_grad=False)
                self.draft_id_to_target_id.data.copy_(w)
                loaded.add("draft_id_to_target_id")
                continue
            if name == "lm_head.weight":
                if not hasattr(self, "lm_head") or not isinstance(self.lm_head, ParallelLMHead):
                    self.lm_head = ParallelLMHead(self.config.vocab_size, self.config.hidden_size,
                                                  params_dtype=self.vllm_config.model_config.dtype,
                                                  prefix="lm_head").to(self.model.fc.weight.device)
                    params["lm_head.weight"] = self.lm_head.weight
                self.has_own_lm_head = True
                self.lm_head.weight.weight_loader(self.lm_head.weight, w)
                loaded.add("lm_head.weight")
                continue
            if name in ("norm.weight", "layers.0.input_layernorm.weight"):
                raise ValueError(
                    f"vllm-spec-eagle: checkpoint '{self.checkpoint}' has {raw!r}, which EAGLE-1 does not have "
                    f"(no final norm, no input norm on the first draft layer). Is this an EAGLE-3 or a plain "
                    f"Llama checkpoint?")
            name = "model." + name
            if name == "model.embed_tokens.weight":
                self.has_own_embed_tokens = True
            if name == "model.fc.bias" and name not in params:
                add_bias(self.model.fc, params, name)
            load_param(params, name, w, loaded, lambda ok, raw=raw: self._check(ok, raw))
        if not self.has_own_embed_tokens:
            loaded.add("model.embed_tokens.weight")  # shared from the target by vLLM's EAGLE loader
        missing = sorted(set(params) - loaded - {"draft_id_to_target_id"})
        if missing:
            raise ValueError(f"vllm-spec-eagle: checkpoint '{self.checkpoint}' lacks {missing}")
        if self.draft_id_to_target_id is not None:
            if self.has_own_lm_head:
                raise ValueError(
                    f"vllm-spec-eagle: EAGLE-1 checkpoint '{self.checkpoint}' has both d2t and lm_head.weight. An "
                    f"EAGLE-1 draft vocabulary (d2t) takes the target lm_head's rows of its tokens; drop "
                    f"lm_head.weight, or drop d2t to draft from the full vocabulary with its own head.")
            check_d2t(self.draft_id_to_target_id, self.config.vocab_size, self.checkpoint)
            self.rows_from_target = True
        return loaded

    def _check(self, ok: bool, raw: str) -> None:
        if not ok:
            raise ValueError(
                f"vllm-spec-eagle: checkpoint '{self.checkpoint}' has key {raw!r}, which is not an EAGLE-1 weight. "
                f"Expected fc.weight/fc.bias, layers.{{i}}.self_attn.{{q,k,v,o}}_proj.weight, "
                f"layers.{{i}}.mlp.{{gate,up,down}}_proj.weight, layers.{{i}}.post_attention_layernorm.weight, "
                f"layers.{{i>0}}.input_layernorm.weight, optional embed_tokens.weight, lm_head.weight, d2t (draft "
                f"vocabulary) and t2d.")
