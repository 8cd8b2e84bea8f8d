"""The MLP speculator draft model (worker processes; imports vLLM).

The math is fms-extras' ``MLPSpeculator`` (``fms_extras/models/speculator.py``),
drafting the greedy chain of ``generate_suffixes``: with ``s_0`` the target's final
hidden state at the last accepted token (normalised and divided by sqrt(2) when
``scale_input``) and ``t_0`` the token the target just produced, head ``i`` computes

    s_{i+1} = GELU(LN_i(proj_i(s_i) + (emb_weight / state_weight) * emb_i(t_i)))
    t_{i+1} = argmax head_i(s_{i+1})

with ``state_weight = 0.5 ** (0.5 / n_predict)``, ``emb_weight = sqrt((1 - state_weight**2)
* inner_dim / 2)``, and ``LN`` fms' ``LayerNormParameterized`` as the speculator builds it:
no mean subtraction, ``x * rsqrt(mean(x**2) + 1e-6)``, then a learned scale and shift
(the input norm of ``scale_input`` has neither). ``t_1..t_k`` are the drafts.
"""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Iterable

import torch
import torch.nn as nn
from vllm.model_executor.layers.logits_processor import LogitsProcessor
from vllm.model_executor.layers.vocab_parallel_embedding import ParallelLMHead, VocabParallelEmbedding

#: ``[prefix.]{emb,proj,head,ln}.{i}.{weight,bias}``; the prefix is whatever wraps the speculator
#: (``speculator.`` when saved from fms-extras' ``MLPSpeculatorPreTrainedModel``).
_KEY = re.compile(r"^(?P<prefix>.*?)(?P<kind>emb|proj|head|ln)\.(?P<idx>\d+)\.(?P<part>weight|bias)$")
_EPS = 1e-6

logger = logging.getLogger("vllm.spec_plugins.mlp_speculator")


def parse_key(name: str) -> tuple[str, int, str] | None:
    """``(kind, index, part)`` of a speculator checkpoint key, or ``None`` if it is not one.

    Only ``ln.{i}`` has a bias; ``emb``, ``proj`` and ``head`` are bias-free in fms-extras.
    """
    m = _KEY.match(name)
    if m is None or (m["part"] == "bias" and m["kind"] != "ln"):
        return None
    return m["kind"], int(m["idx"]), m["part"]


def tied_index(kind: str, idx: int) -> int:
    """The index whose weights head ``idx`` uses under ``tie_weights``.

    One embedding, head and norm for all heads (index 0); head 0's projection reads the
    target's ``emb_dim`` and stays separate, heads ``1..`` share projection 1.
    """
    if kind == "proj":
        return min(idx, 1)
    return 0


class SpeculatorNorm(nn.Module):
    """fms' ``LayerNormParameterized`` as the speculator uses it: RMS scaling, no recentring.

    ``affine``: learned scale ``weight`` and shift ``bias`` (the per-head norms); without
    it (the ``scale_input`` norm) there are no parameters.
    """

    def __init__(self, dim: int, affine: bool) -> None:
        super().__init__()
        self.affine = affine
        if affine:
            self.weight = nn.Parameter(torch.ones(dim), requires_grad=False)
            self.bias = nn.Parameter(torch.zeros(dim), requires_grad=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = (x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + _EPS)).type_as(x)
        if self.affine:
            y = self.weight * y
            y = y + self.bias
        return y


class MLPSpeculatorDraftModel(nn.Module):
    """IBM's MLP speculator: ``forward(hidden_states [num_reqs, emb_dim], next_token_ids [num_reqs], num_drafts)
    -> draft token ids [num_reqs, num_drafts]``.

    Only the first ``k = num_speculative_tokens`` heads are built, and only the first ``num_drafts`` (the
    step's k, API 3) run: each head feeds the next, so the first ``num_drafts`` drafts are the same either way. Built from vLLM's
    parallel layers (vocab-parallel embeddings and heads, replicated projections and norms), so
    it runs under tensor parallelism with the target's TP group.
    """

    def __init__(self, *, vllm_config, prefix: str = "") -> None:
        super().__init__()
        spec = vllm_config.speculative_config
        config = spec.draft_model_config.hf_config
        self.config = config
        self.checkpoint = spec.draft_model_config.model
        self.n_predict = int(config.n_predict)
        self.k = min(self.n_predict, spec.num_speculative_tokens or self.n_predict)
        self.tie_weights = bool(config.tie_weights)
        self.scale_input = bool(config.scale_input)
        self.emb_dim = int(config.emb_dim)
        self.inner_dim = int(config.inner_dim or config.emb_dim)
        self.vocab_size = int(config.vocab_size)
        if self.tie_weights and self.n_predict < 2:
            raise ValueError(f"vllm-spec-mlp: checkpoint '{self.checkpoint}' sets tie_weights with n_predict="
                             f"{self.n_predict}; weights can only be tied between two or more heads (as in "
                             f"fms-extras). Set tie_weights to false in its config.json.")
        # Same constants as fms-extras: state_0 keeps half the state's magnitude by the last head.
        self.state_weight = 0.5 ** (0.5 / self.n_predict)
        self.emb_weight = math.sqrt((1 - self.state_weight ** 2) * (self.inner_dim / 2))
        self.alpha = self.emb_weight / self.state_weight
        top_k = getattr(config, "top_k_tokens_per_head", None)
        if top_k and any(t > 1 for t in top_k):
            logger.info("vllm-spec-mlp: '%s' drafts the greedy chain (top-1 per head); its candidate tree "
                        "top_k_tokens_per_head=%s is not used: vLLM verifies one chain of drafts per request",
                        self.checkpoint, list(top_k))

        def pre(name: str) -> str:
            return f"{prefix}.{name}" if prefix else name

        def emb() -> VocabParallelEmbedding:
            return VocabParallelEmbedding(self.vocab_size, self.inner_dim)

        def head(i: int) -> ParallelLMHead:
            return ParallelLMHead(self.vocab_size, self.inner_dim, bias=False, prefix=pre(f"head.{i}"))

        def proj(i: int) -> nn.Linear:
            layer = nn.Linear(self.emb_dim if i == 0 else self.inner_dim, self.inner_dim, bias=False)
            layer.weight.requires_grad_(False)
            return layer

        k = self.k
        if self.tie_weights:
            shared_emb, shared_head, shared_ln = emb(), head(0), SpeculatorNorm(self.inner_dim, affine=True)
            projs = [proj(0)] + ([proj(1)] if k > 1 else [])
            self.emb = nn.ModuleList([shared_emb] * k)
            self.head = nn.ModuleList([shared_head] * k)
            self.ln = nn.ModuleList([shared_ln] * k)
            self.proj = nn.ModuleList([projs[min(i, 1)] for i in range(k)])
        else:
            self.emb = nn.ModuleList([emb() for _ in range(k)])
            self.head = nn.ModuleList([head(i) for i in range(k)])
            self.ln = nn.ModuleList([SpeculatorNorm(self.inner_dim, affine=True) for _ in range(k)])
            self.proj = nn.ModuleList([proj(i) for i in range(k)])
        self.ln0 = SpeculatorNorm(self.emb_dim, affine=False) if self.scale_input else None
        self.act = nn.GELU()
        self.logits_processor = LogitsProcessor(self.vocab_size)

    def forward(self, hidden_states: torch.Tensor, next_token_ids: torch.Tensor,
                num_drafts: int | None = None) -> torch.Tensor:
        state = hidden_states
        if self.ln0 is not None:
            state = self.ln0(state) / math.sqrt(2)
        tokens = next_token_ids
        drafts = []
        for i in range(self.k if num_drafts is None else min(num_drafts, self.k)):
            z = self.emb[i](tokens)
            state = torch.add(self.proj[i](state), z, alpha=self.alpha)
            state = self.act(self.ln[i](state))
            tokens = self.logits_processor(self.head[i], state).argmax(dim=-1)
            drafts.append(tokens)
        return torch.stack(drafts, dim=1)

    # -- weights --------------------------------------------------------------

    def expected_shape(self, kind: str, idx: int) -> tuple[int, ...]:
        if kind in ("emb", "head"):
            return (self.vocab_size, self.inner_dim)
        if kind == "proj":
            return (self.inner_dim, self.emb_dim if idx == 0 else self.inner_dim)
        return (self.inner_dim,)

    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> set[str]:
        params = dict(self.named_parameters())
        loaded: set[str] = set()
        seen: list[str] = []
        first: dict[str, tuple[str, tuple]] = {}  # tied parameter -> (first key, fingerprint)
        for raw, w in weights:
            seen.append(raw)
            parsed = parse_key(raw)
            if parsed is None:
                raise ValueError(
                    f"vllm-spec-mlp: checkpoint '{self.checkpoint}' has key {raw!r}, which is not an MLP speculator "
                    f"weight. Expected emb.{{i}}.weight, proj.{{i}}.weight, head.{{i}}.weight, ln.{{i}}.weight and "
                    f"ln.{{i}}.bias (IBM's fms-extras layout), optionally prefixed (e.g. 'speculator.').")
            kind, idx, part = parsed
            if idx >= self.n_predict:
                raise ValueError(
                    f"vllm-spec-mlp: checkpoint '{self.checkpoint}' has key {raw!r} for head {idx}, but its config "
                    f"says n_predict={self.n_predict}. Fix n_predict in its config.json.")
            want = self.expected_shape(kind, idx)
            if tuple(w.shape) != want:
                raise ValueError(
                    f"vllm-spec-mlp: checkpoint '{self.checkpoint}' key {raw!r} has shape {list(w.shape)}, expected "
                    f"{list(want)} (vocab_size={self.vocab_size}, emb_dim={self.emb_dim}, inner_dim="
                    f"{self.config.inner_dim}{' -> ' + str(self.inner_dim) if not self.config.inner_dim else ''}).")
            slot = tied_index(kind, idx) if self.tie_weights else idx
            if slot >= self.k:
                continue  # heads beyond num_speculative_tokens are not used
            name = f"{kind}.{slot}.{part}"
            if self.tie_weights:
                fp = _fingerprint(w)
                if name in first and first[name][1] != fp:
                    raise ValueError(
                        f"vllm-spec-mlp: checkpoint '{self.checkpoint}' sets tie_weights, but {raw!r} differs from "
                        f"{first[name][0]!r}, which it should share. The checkpoint is not tied: set tie_weights to "
                        f"false in its config.json.")
                first.setdefault(name, (raw, fp))
            param = params[name]
            loader = getattr(param, "weight_loader", None)
            if loader is not None:
                loader(param, w)
            else:
                with torch.no_grad():
                    param.copy_(w.to(param.dtype))
            loaded.add(name)
        missing = sorted(set(params) - loaded)
        if missing:
            hint = ("" if self.tie_weights else
                    " Its config has tie_weights=false; a checkpoint that stores the shared embedding, head, norm "
                    "and projection once needs \"tie_weights\": true.")
            raise ValueError(
                f"vllm-spec-mlp: checkpoint '{self.checkpoint}' lacks {missing} for {self.k} head(s) "
                f"(n_predict={self.n_predict}, tie_weights={self.tie_weights}); it has {sorted(seen)[:24]}.{hint}")
        return loaded


def _fingerprint(w: torch.Tensor) -> tuple:
    """Cheap identity check for tensors that should be copies of one another."""
    flat = w.detach().reshape(-1)
    return (tuple(w.shape), float(flat.double().sum()), tuple(flat[:16].double().tolist()))
