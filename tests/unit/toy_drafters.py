"""Drafter classes for the unit tests of ``check`` / ``doctor`` (named as ``tests.unit.toy_drafters:X``)."""

import torch.nn as nn
from transformers import PretrainedConfig


class ToyConfig(PretrainedConfig):
    model_type = "vsp_toy"

    def __init__(self, hidden_size=None, vocab_size=None, num_heads=2, **kwargs):
        self.hidden_size, self.vocab_size, self.num_heads = hidden_size, vocab_size, num_heads
        super().__init__(**kwargs)


class GoodDrafter(nn.Module):
    def __init__(self, *, vllm_config, prefix=""):
        super().__init__()

    def update_state(self, acc, sampled):
        return {"acc": acc}

    def forward(self, hidden_states, acc, next_token_ids):
        return next_token_ids[:, None].long()

    def load_weights(self, weights):
        return set()


class NeedsUnknown(GoodDrafter):
    def forward(self, hidden_states, mystery_input):
        return hidden_states


class HookNeedsUnknown(GoodDrafter):
    def update_state(self, acc, what_is_this):
        return {"acc": acc}
