"""The Medusa draft model (worker processes; imports vLLM)."""

from __future__ import annotations

import re
from collections.abc import Iterable

import torch
import torch.nn as nn
from vllm.model_executor.layers.logits_processor import LogitsProcessor
from vllm.model_executor.layers.vocab_parallel_embedding import ParallelLMHead

from vllm_spec_plugins import TargetHeadRows, target_lm_head
from vllm_spec_plugins.vocab import vocab_problem

_OLD_KEY = re.compile(r"^(\d+)\.(\d+)\.(.+)$")
_PREFIXES = ("medusa_heads.", "medusa_head.")


def canonical_key(name: str) -> str:
    """Map every FasterDecoding key layout to ``blocks.{h}.layers.{l}.*`` / ``lm_heads.{h}.*``.

    * new layout: ``blocks.{h}.layers.{l}.{weight,bias}``, ``lm_heads.{h}.weight``, ``lm_head.weight``
    * optional ``medusa_heads.`` / ``medusa_head.`` prefix
    * old layout: ``{h}.{l}.linear.{weight,bias}`` (residual block ``l`` of head ``h``) and
      ``{h}.{N}.weight`` (the head's output Linear, index ``N`` = number of layers)
    """
    for p in _PREFIXES:
        if name.startswith(p):
            name = name[len(p):]
    m = _OLD_KEY.match(name)
    if m:
        head, layer, rest = m.groups()
        if rest.startswith("linear."):
            return f"blocks.{head}.layers.{layer}.{rest[len('linear.'):]}"
        return f"lm_heads.{head}.{rest}"
    return name


def check_token_map(token_map: torch.Tensor, vocab_size: int, draft_vocab: int, checkpoint: str) -> None:
    """Refuse a token_map that is not ``truncated_vocab_size`` (``draft_vocab``) distinct ids of the target's
    vocabulary: it would index the lm_head's rows out of range at load or at the first draft, or draft tokens the
    heads never meant."""
    problem = vocab_problem(token_map, vocab_size, entry="draft id")
    if problem is None and token_map.numel() != draft_vocab:
        problem = f"has {token_map.numel()} entries, but truncated_vocab_size is {draft_vocab}"
    if problem:
        raise ValueError(f"vllm-spec-medusa: checkpoint '{checkpoint}': token_map {problem}. token_map[d] is the "
                         f"target id of draft id d: truncated_vocab_size distinct ids of the target's vocabulary "
                         f"[0, {vocab_size}).")


class ResidualBlock(nn.Module):
    """``x = x + SiLU(Linear(x))`` per layer, as FasterDecoding's ResBlock."""

    def __init__(self, hidden_size: int, num_layers: int) -> None:
        super().__init__()
        # Biases are created on load only if the checkpoint has them: a zero bias would
        # change the kernel (addmm vs mm) and so the last bits of the result.
        self.layers = nn.ModuleList([nn.Linear(hidden_size, hidden_size, bias=False) for _ in range(num_layers)])
        self.act = nn.SiLU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = x + self.act(layer(x))
        return x


class MedusaDraftModel(nn.Module):
    """Medusa-1 heads over the target's final hidden state at the last accepted token.

    ``forward(hidden_states [num_reqs, hidden], num_drafts) -> draft token ids [num_reqs, num_drafts]``:
    head ``i`` proposes the token ``i + 1`` places after the next token. Only the first
    ``num_speculative_tokens`` heads are built, and only the first ``num_drafts`` (the step's k, API 3)
    run.

    A draft vocabulary (``truncated_vocab_size`` and a ``token_map`` of that many target ids) narrows every head's
    logits to those tokens. With its own lm_head the checkpoint stores those rows (or the full head, sliced at load);
    with ``original_lm_head`` and no lm_head in the checkpoint, each head's logits take the target lm_head's rows of
    the ``token_map`` alone (:class:`vllm_spec_plugins.TargetHeadRows`): on SmolLM2-135M with the shipped draft's
    12,288 tokens, a quarter of the full head's product in every head that runs.
    """

    def __init__(self, *, vllm_config, prefix: str = "") -> None:
        super().__init__()
        spec = vllm_config.speculative_config
        config = spec.draft_model_config.hf_config
        self.config = config
        self.checkpoint = spec.draft_model_config.model
        self.num_heads = min(config.num_heads, spec.num_speculative_tokens or config.num_heads)
        hidden, vocab = config.hidden_size, config.vocab_size
        self.draft_vocab = config.truncated_vocab_size or vocab
        self.blocks = nn.ModuleList([ResidualBlock(hidden, config.num_hidden_layers) for _ in range(self.num_heads)])
        self.shared_lm_head = bool(getattr(config, "original_lm_head", False))
        if self.shared_lm_head:
            self.lm_head = ParallelLMHead(self.draft_vocab, hidden, prefix=f"{prefix}.lm_head" if prefix else "lm_head")
            self.lm_heads = [self.lm_head] * self.num_heads
        else:
            self.lm_heads = nn.ModuleList([
                ParallelLMHead(self.draft_vocab, hidden, prefix=f"{prefix}.lm_heads.{i}" if prefix else f"lm_heads.{i}")
                for i in range(self.num_heads)
            ])
        self.logit_scale = getattr(config, "logit_scale", 1.0)
        self.logits_processor = LogitsProcessor(vocab, self.draft_vocab, self.logit_scale)
        self.token_map: torch.Tensor | None = None
        self._lm_head_from_target = False
        self.head_rows: TargetHeadRows | None = None  # token_map over the target's lm_head: its rows alone

    def forward(self, hidden_states: torch.Tensor, num_drafts: int | None = None) -> torch.Tensor:
        n = self.num_heads if num_drafts is None else min(num_drafts, self.num_heads)
        drafts = []
        for i in range(n):
            block, lm_head = self.blocks[i], self.lm_heads[i]
            if self.head_rows is not None:
                logits = self.head_rows(lm_head, block(hidden_states))
                if self.logit_scale != 1.0:
                    logits = logits * self.logit_scale
            else:
                logits = self.logits_processor(lm_head, block(hidden_states))
            drafts.append(logits.argmax(dim=-1))
        out = torch.stack(drafts, dim=1)
        if self.token_map is not None:
            out = self.token_map[out]
        return out

    def bind_target(self, target_model: nn.Module) -> None:
        """Share the target's lm_head when the checkpoint has none (``original_lm_head``)."""
        if self._lm_head_from_target:
            self.lm_head = target_lm_head(target_model)  # (a multimodal target's may be its language model's)
            self.lm_heads = [self.lm_head] * self.num_heads

    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> set[str]:
        params = dict(self.named_parameters())
        loaded: set[str] = set()
        seen: list[str] = []
        pending_lm: dict[str, torch.Tensor] = {}
        for raw, w in weights:
            name = canonical_key(raw)
            seen.append(raw)
            if name == "token_map":
                if self.draft_vocab < self.config.vocab_size:
                    # on the heads' device: forward maps the argmax through it there (no host sync)
                    self.token_map = w.to(device=next(self.parameters()).device, dtype=torch.int64)
                continue
            if self.shared_lm_head and name in ("lm_heads.0.weight", "lm_head.weight"):
                pending_lm["lm_head.weight"] = w
                continue
            m = re.match(r"^(blocks|lm_heads)\.(\d+)\.", name)
            if m and int(m.group(2)) >= self.num_heads:
                continue  # heads beyond num_speculative_tokens are not used
            if name.startswith("lm_heads."):
                pending_lm[name] = w
                continue
            if name.endswith(".bias") and name not in params:
                layer = self.get_submodule(name[: -len(".bias")])
                if isinstance(layer, nn.Linear):
                    layer.bias = nn.Parameter(torch.empty(layer.out_features, dtype=layer.weight.dtype,
                                                          device=layer.weight.device), requires_grad=False)
                    params[name] = layer.bias
            if name not in params:
                raise ValueError(
                    f"vllm-spec-medusa: checkpoint '{self.checkpoint}' has key {raw!r} (read as {name!r}), which "
                    f"is not a Medusa weight. Expected blocks.{{h}}.layers.{{l}}.weight/bias, lm_heads.{{h}}.weight, "
                    f"lm_head.weight or token_map (optionally prefixed medusa_heads.), or the old "
                    f"{{h}}.{{l}}.linear.weight/bias, {{h}}.{{N}}.weight layout.")
            self._copy(params[name], w, raw)
            loaded.add(name)
        if self.token_map is None and self.draft_vocab < self.config.vocab_size:
            raise ValueError(f"vllm-spec-medusa: checkpoint '{self.checkpoint}' sets truncated_vocab_size="
                             f"{self.draft_vocab} < vocab_size={self.config.vocab_size} but has no token_map tensor")
        if self.token_map is not None:
            check_token_map(self.token_map, self.config.vocab_size, self.draft_vocab, self.checkpoint)
        for name, w in pending_lm.items():
            if self.token_map is not None and w.shape[0] > self.draft_vocab:
                w = w[self.token_map]
            param = params[name]
            param.weight_loader(param, w)
            loaded.add(name)
        if self.shared_lm_head and "lm_head.weight" not in pending_lm:
            self._lm_head_from_target = True
            loaded.add("lm_head.weight")
            if self.token_map is not None:
                self.head_rows = TargetHeadRows(self.token_map, f"vllm-spec-medusa: draft '{self.checkpoint}' "
                                                                f"(token_map, original_lm_head without lm_head.weight)")
        missing = sorted(set(params) - loaded)
        if missing:
            raise ValueError(
                f"vllm-spec-medusa: checkpoint '{self.checkpoint}' lacks {missing} for {self.num_heads} heads of "
                f"{self.config.num_hidden_layers} layer(s); it has {sorted(seen)[:20]}")
        return loaded

    def _copy(self, param: torch.Tensor, w: torch.Tensor, raw: str) -> None:
        if tuple(param.shape) != tuple(w.shape):
            raise ValueError(f"vllm-spec-medusa: checkpoint '{self.checkpoint}' key {raw!r} has shape "
                             f"{list(w.shape)}, expected {list(param.shape)} (hidden_size={self.config.hidden_size})")
        with torch.no_grad():
            param.copy_(w.to(param.dtype))
