"""The EAGLE-3 draft model (worker processes; built from vLLM's layers).

Numerically the same as vLLM's built-in ``Eagle3LlamaForCausalLM``
(``vllm/model_executor/models/llama_eagle3.py``) on the same checkpoint: the same layer
classes (so the same kernels) in the same order. The draft consumes chosen target layers:
vLLM's loop runs with the target's aux hidden-state outputs on, and the shim reduces their
concatenation with :meth:`Eagle3DraftModel.combine_hidden_states` before the first pass.

Per draft layer ``i`` (layer 0 shown; later layers are plain Llama layers)::

    x = cat(input_layernorm(embed(ids)), hidden_norm(h))      # [N, 2H] -> q/k/v
    residual = h                                              # (hidden_norm(h) with norm_before_residual)
    h, residual = post_attention_layernorm(attn(x), residual); h = mlp(h)
    out, prenorm = norm(h, residual)                          # logits from out, next step from prenorm

Logits come from the draft's own ``lm_head`` over a truncated draft vocabulary; draft id
``d`` is target id ``d + d2t[d]`` and every target id outside the draft vocabulary gets
``-inf``. A checkpoint with ``d2t`` but no ``lm_head.weight`` uses the target's lm_head rows
of the draft vocabulary (gathered once, on the first logits; vLLM's built-in EAGLE-3 would
slice the target's head to its first ``draft_vocab_size`` rows instead): a draft trained
with the target's head frozen need not store it.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

import torch
import torch.nn as nn
from vllm.compilation.decorators import support_torch_compile
from vllm.model_executor.layers.layernorm import RMSNorm
from vllm.model_executor.layers.linear import QKVParallelLinear, ReplicatedLinear
from vllm.model_executor.layers.logits_processor import LogitsProcessor
from vllm.model_executor.layers.vocab_parallel_embedding import ParallelLMHead, VocabParallelEmbedding
from vllm.model_executor.models.llama import LlamaDecoderLayer
from vllm.model_executor.models.utils import get_draft_quant_config, maybe_prefix

from .model import add_bias, load_param
from .vocab import DraftVocabulary, check_d2t, rows_gemm  # noqa: F401 (rows_gemm: its former home)

logger = logging.getLogger("vllm.spec_plugins.eagle")


def _eagle_config(config) -> dict:
    return getattr(config, "eagle_config", None) or {}


def canonical_key(raw: str) -> str:
    """A checkpoint key as this model names it, without the ``model.`` of inner weights.

    SafeAILab's ``midlayer.*`` is draft layer 0 (``layers.0.*``, the speculators layout);
    a leading ``model.`` is dropped; ``d2t``/``t2d``/``lm_head.*`` and the rest stay as they are.
    """
    name = raw[len("model."):] if raw.startswith("model.") else raw
    return name.replace("midlayer.", "layers.0.")


def num_target_layers(config) -> int:
    """How many target layers the draft's ``fc`` takes (``fc`` is ``[H, n * H_target]``)."""
    n = getattr(config, "num_aux_hidden_states", None)
    if n is None:
        ids = _eagle_config(config).get("eagle_aux_hidden_state_layer_ids") or getattr(
            config, "eagle_aux_hidden_state_layer_ids", None)
        n = len(ids) if ids else 3
    return n


class Eagle3DecoderLayer(LlamaDecoderLayer):
    """vLLM's Llama decoder layer; layer 0 takes ``cat(normed embeddings, normed hidden)`` ``[N, 2H]``."""

    def __init__(self, vllm_config, *, prefix: str, config, layer_idx: int) -> None:
        super().__init__(vllm_config, prefix=prefix, config=config)
        self.self_attn.qkv_proj = QKVParallelLinear(
            2 * self.hidden_size if layer_idx == 0 else self.hidden_size,
            self.self_attn.head_dim,
            self.self_attn.total_num_heads,
            self.self_attn.total_num_kv_heads,
            bias=getattr(config, "attention_bias", False),
            quant_config=self.get_quant_config(vllm_config),
            prefix=maybe_prefix(prefix, "self_attn.qkv_proj"),
        )
        self.hidden_norm = RMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.layer_idx = layer_idx
        self.norm_before_residual = bool(getattr(config, "norm_before_residual", False))

    def get_quant_config(self, vllm_config):
        return get_draft_quant_config(vllm_config)  # the draft's own, not the target's

    def forward(self, positions: torch.Tensor, embeds: torch.Tensor, hidden_states: torch.Tensor,
                residual: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
        hidden_states, residual = self.attention_input(embeds, hidden_states, residual)
        hidden_states = self.self_attn(positions=positions, hidden_states=hidden_states)
        hidden_states, residual = self.post_attention_layernorm(hidden_states, residual)
        return self.mlp(hidden_states), residual

    def attention_input(self, embeds: torch.Tensor, hidden_states: torch.Tensor, residual: torch.Tensor | None
                        ) -> tuple[torch.Tensor, torch.Tensor]:
        """What the layer's attention takes (its q/k/v come from it), and the residual."""
        if self.layer_idx == 0:
            embeds = self.input_layernorm(embeds)
            if self.norm_before_residual:
                hidden_states = self.hidden_norm(hidden_states)
                residual = hidden_states
            else:
                residual = hidden_states
                hidden_states = self.hidden_norm(hidden_states)
            hidden_states = torch.cat([embeds, hidden_states], dim=-1)
        else:
            hidden_states, residual = self.input_layernorm(hidden_states, residual)
        return hidden_states, residual


@support_torch_compile(dynamic_arg_dims={"input_ids": 0, "positions": -1, "hidden_states": 0, "input_embeds": 0})
class Eagle3Decoder(nn.Module):
    """Embeddings, ``fc`` over the target layers (used by ``combine_hidden_states``), draft layers, final norm."""

    def __init__(self, *, vllm_config, prefix: str = "", start_layer_id: int = 0) -> None:
        super().__init__()
        config = vllm_config.speculative_config.draft_model_config.hf_config
        self.config = config
        eagle_config = _eagle_config(config)
        self.use_aux_hidden_state = bool(eagle_config.get("use_aux_hidden_state", True))
        self.norm_before_fc = bool(eagle_config.get("norm_before_fc", getattr(config, "norm_before_fc", False)))
        self.embed_tokens = VocabParallelEmbedding(config.vocab_size, config.hidden_size,
                                                   prefix=maybe_prefix(prefix, "embed_tokens"))
        self.layers = nn.ModuleList([
            Eagle3DecoderLayer(vllm_config, prefix=maybe_prefix(prefix, f"layers.{i + start_layer_id}"),
                               config=config, layer_idx=i)
            for i in range(config.num_hidden_layers)])
        self.input_norm = None
        self.fc_norm = None
        if self.use_aux_hidden_state:
            self.num_aux_hidden_states = num_target_layers(config)
            target_hidden = getattr(config, "target_hidden_size", None) or config.hidden_size
            self.fc_input_size = target_hidden * self.num_aux_hidden_states
            if self.norm_before_fc:  # one norm over the concatenation
                self.input_norm = RMSNorm(self.fc_input_size, eps=config.rms_norm_eps)
            if getattr(config, "fc_norm", False):  # one norm per target layer
                self.fc_norm = nn.ModuleList([RMSNorm(target_hidden, eps=config.rms_norm_eps)
                                              for _ in range(self.num_aux_hidden_states)])
            self.fc = ReplicatedLinear(self.fc_input_size, config.hidden_size, bias=False,
                                       params_dtype=vllm_config.model_config.dtype,
                                       quant_config=get_draft_quant_config(vllm_config),
                                       prefix=maybe_prefix(prefix, "fc"), return_bias=False)
        self.norm_output = bool(getattr(config, "norm_output", False))
        self.norm = RMSNorm(config.hidden_size, eps=config.rms_norm_eps)

    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor, hidden_states: torch.Tensor,
                input_embeds: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        if input_embeds is None:
            input_embeds = self.embed_tokens(input_ids)
        residual = None
        for layer in self.layers:
            hidden_states, residual = layer(positions, input_embeds, hidden_states, residual)
        hidden_states, prenorm = self.norm(hidden_states, residual)
        return hidden_states, (hidden_states if self.norm_output else prenorm)

    def write_kv(self, input_ids: torch.Tensor, positions: torch.Tensor, hidden_states: torch.Tensor,
                 input_embeds: torch.Tensor | None = None) -> None:
        """Only the draft KV cache :meth:`forward` writes: the same operations up to the last layer's attention
        (which writes that layer's KV), without that layer's MLP and the final norm. Not compiled
        (``support_torch_compile`` wraps ``forward``)."""
        if input_embeds is None:
            input_embeds = self.embed_tokens(input_ids)
        residual = None
        *front, last = self.layers
        for layer in front:
            hidden_states, residual = layer(positions, input_embeds, hidden_states, residual)
        x, _ = last.attention_input(input_embeds, hidden_states, residual)
        last.self_attn(positions=positions, hidden_states=x)


class Eagle3DraftModel(DraftVocabulary, nn.Module):
    """EAGLE-3 draft for a Llama-family target (SafeAILab layout, also speculators' ``layers.0.*``).

    ``combine_hidden_states(h [N, n_layers * H_target]) -> [N, H]`` (the shim calls it before
    vLLM's loop); ``forward(input_ids, positions, hidden_states) -> (hidden for logits,
    hidden for the next step)``; ``compute_logits`` maps the draft vocabulary to the target's.
    """

    # vLLM's EAGLE machinery shares the target's embeddings / lm_head unless these become True.
    supports_eagle = True
    has_own_embed_tokens = False
    has_own_lm_head = False

    def __init__(self, *, vllm_config, prefix: str = "") -> None:
        super().__init__()
        spec = vllm_config.speculative_config
        self.config = config = spec.draft_model_config.hf_config
        self.checkpoint = spec.draft_model_config.model
        self.vllm_config = vllm_config
        if getattr(spec, "parallel_drafting", False):
            raise ValueError(f"vllm-spec-eagle: draft '{self.checkpoint}': parallel drafting (P-EAGLE) is not "
                             f"supported by this plugin; run it with vLLM's built-in EAGLE-3 "
                             f"(VLLM_SPEC_PLUGINS without 'eagle')")
        if getattr(config, "draft_vocab_size", None) is None:
            config.draft_vocab_size = config.vocab_size
        target_layers = vllm_config.model_config.get_total_num_hidden_layers()
        config.target_layer_count = target_layers
        self.model = Eagle3Decoder(vllm_config=vllm_config, prefix=maybe_prefix(prefix, "model"),
                                   start_layer_id=target_layers)
        self.lm_head = ParallelLMHead(config.draft_vocab_size, config.hidden_size,
                                      quant_config=get_draft_quant_config(vllm_config),
                                      prefix=maybe_prefix(prefix, "lm_head"))
        self.logits_processor = LogitsProcessor(config.draft_vocab_size, scale=getattr(config, "logit_scale", 1.0))
        if config.draft_vocab_size != vllm_config.model_config.get_vocab_size():
            self.draft_id_to_target_id = nn.Parameter(torch.zeros(config.draft_vocab_size, dtype=torch.long),
                                                      requires_grad=False)
        else:
            self.draft_id_to_target_id = None
        self.rows_from_target = False  # set by load_weights: d2t without lm_head.weight

    def embed_input_ids(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.model.embed_tokens(input_ids)

    def combine_hidden_states(self, hidden_states: torch.Tensor) -> torch.Tensor:
        """The chosen target layers, concatenated ``[N, n * H_target]`` -> the first pass's hidden ``[N, H]``."""
        m = self.model
        if not m.use_aux_hidden_state:
            return hidden_states
        if m.input_norm is not None:
            hidden_states = m.input_norm(hidden_states)
        if m.fc_norm is not None:
            chunks = hidden_states.chunk(m.num_aux_hidden_states, dim=-1)
            hidden_states = torch.cat([norm(c) for norm, c in zip(m.fc_norm, chunks)], dim=-1)
        return m.fc(hidden_states)

    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor, hidden_states: torch.Tensor,
                inputs_embeds: torch.Tensor | None = None, kv_only: bool = False
                ) -> tuple[torch.Tensor, torch.Tensor] | None:
        if kv_only:  # API 4: a pass whose outputs are discarded; only the draft KV it writes counts
            self.model.write_kv(input_ids, positions, hidden_states, inputs_embeds)
            return None
        return self.model(input_ids, positions, hidden_states, inputs_embeds)

    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> set[str]:
        params = dict(self.named_parameters())
        loaded: set[str] = set()
        device = self.lm_head.weight.device
        for raw, w in weights:
            name = canonical_key(raw)
            if name == "t2d":
                continue  # target -> draft membership mask; d2t says it all
            if "mask_hidden" in name:
                logger.warning("vllm-spec-eagle: '%s' has %r (parallel drafting); ignored", self.checkpoint, raw)
                continue
            if name == "d2t":
                if self.draft_id_to_target_id is None:  # same vocabulary size, but a permutation given
                    self.draft_id_to_target_id = nn.Parameter(torch.zeros(w.shape[0], dtype=torch.long,
                                                                          device=device), requires_grad=False)
                    params["draft_id_to_target_id"] = self.draft_id_to_target_id
                name = "draft_id_to_target_id"
            elif name.startswith("lm_head."):
                self.has_own_lm_head = True
            else:
                if name.startswith("fc.") and not self.model.use_aux_hidden_state:
                    continue  # as vLLM: such drafts take the target's last layer as is
                if name.startswith("input_norm.") and self.model.input_norm is None:
                    continue  # as vLLM: only used with norm_before_fc
                name = "model." + name
                if name == "model.embed_tokens.weight":
                    self.has_own_embed_tokens = True
                if name == "model.fc.bias" and name not in params:
                    # vLLM's built-in EAGLE-3 drops an fc bias; as the EAGLE-1 drafter of this plugin, use it.
                    add_bias(self.model.fc, params, name)
            load_param(params, name, w, loaded, lambda ok, raw=raw: self._check(ok, raw))
        # Shared from the target by vLLM's EAGLE loader when absent; d2t defaults to no offsets (as vLLM).
        optional = {"draft_id_to_target_id"}
        if not self.has_own_embed_tokens:
            optional.add("model.embed_tokens.weight")
        if not self.has_own_lm_head:
            optional.add("lm_head.weight")
        loaded |= optional & set(params)
        # A draft vocabulary without its own head: the target's rows (no d2t: its first rows, as vLLM slices).
        self.rows_from_target = not self.has_own_lm_head and self.draft_id_to_target_id is not None
        if self.draft_id_to_target_id is not None:
            check_d2t(self.draft_id_to_target_id, self.config.vocab_size, self.checkpoint)
        missing = sorted(set(params) - loaded)
        if missing:
            raise ValueError(f"vllm-spec-eagle: EAGLE-3 checkpoint '{self.checkpoint}' lacks {missing}")
        return loaded

    def _check(self, ok: bool, raw: str) -> None:
        if not ok:
            raise ValueError(
                f"vllm-spec-eagle: checkpoint '{self.checkpoint}' has key {raw!r}, which is not an EAGLE-3 weight "
                f"of this config. Expected fc.weight [H, n*H_target], midlayer.* or layers.{{i}}.* "
                f"(hidden_norm, input_layernorm, post_attention_layernorm, self_attn.{{q,k,v,o}}_proj, "
                f"mlp.{{gate,up,down}}_proj), norm.weight, lm_head.weight, d2t, t2d, optional embed_tokens.weight. "
                f"Is this an EAGLE-1 checkpoint?")
