import sys

import torch
import torch.nn as nn


class FaultyDrafter(nn.Module):
    """Proposes the last token again; fails as its config says. Uses the target hidden states
    through a zero-initialised [hidden_size, hidden_size] map, so a draft whose hidden_size
    differs from the target's cannot run."""

    def __init__(self, *, vllm_config, prefix=""):
        super().__init__()
        cfg = vllm_config.speculative_config.draft_model_config.hf_config
        self.k = vllm_config.speculative_config.num_speculative_tokens
        self.vocab = cfg.vocab_size
        self.fault = getattr(cfg, "fault", "none")
        self.fault_at = int(getattr(cfg, "fault_at", 1))
        self.proj = nn.Linear(cfg.hidden_size, cfg.hidden_size, bias=False)
        nn.init.zeros_(self.proj.weight)
        self.calls = 0
        self.state_calls = 0

    def forward(self, hidden_states, next_token_ids):
        self.calls += 1
        bump = self.proj(hidden_states).sum(dim=-1).to(torch.int64)  # zero, but needs the right width
        drafts = (next_token_ids.to(torch.int64) + bump)[:, None].expand(-1, self.k).clone()
        if self.calls >= self.fault_at and self.calls > 1:  # call 1 is the shim's trial forward at load
            if self.fault == "raise":
                raise RuntimeError(f"faulty drafter: planned failure at forward call {self.calls}")
            if self.fault == "exit":
                sys.exit(f"faulty drafter: planned sys.exit at forward call {self.calls}")
            if self.fault == "oov":
                drafts[:, -1] = self.vocab + 5
        if self.fault == "bool":
            return drafts > 0
        if self.fault == "shape":
            return drafts[:, :1]
        if self.fault in ("wide", "nan"):
            if self.fault == "nan":
                return torch.full((drafts.shape[0], self.k, self.vocab), float("nan"))
            return torch.zeros(drafts.shape[0], self.k, self.vocab + 5)
        return drafts

    def load_weights(self, weights):
        for name, w in weights:
            if name == "proj.weight":
                self.proj.weight.data.copy_(w)
        return {"proj.weight"}


class FaultyNoWeightsDrafter(nn.Module):
    """A model class without load_weights(): not a HeadsDraftModel."""

    def __init__(self, *, vllm_config, prefix=""):
        super().__init__()

    def forward(self, next_token_ids):
        return next_token_ids[:, None]


class FaultyStateDrafter(FaultyDrafter):
    def update_state(self, seen, next_token_ids):
        self.state_calls += 1
        if self.fault == "state" and self.state_calls >= self.fault_at and self.state_calls > 1:
            raise ValueError(f"faulty drafter: planned state-carry failure at call {self.state_calls}")
        return {"seen": seen + 1}

    def forward(self, hidden_states, next_token_ids, seen):
        return super().forward(hidden_states, next_token_ids)

    def initial_seen(self):
        if self.fault == "init_raise":
            raise RuntimeError("faulty drafter: planned failure in the state init hook")
        if self.fault == "init_shape":
            return torch.zeros(5, dtype=torch.int64)
        return torch.zeros(1, dtype=torch.int64)
