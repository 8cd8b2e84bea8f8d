import torch
import torch.nn as nn
import torch.nn.functional as F


class CompatHeadsDrafter(nn.Module):
    def __init__(self, *, vllm_config, prefix=""):
        super().__init__()
        cfg = vllm_config.speculative_config.draft_model_config.hf_config
        self.num_heads = cfg.num_heads
        self.heads = nn.Parameter(torch.zeros(cfg.num_heads, cfg.hidden_size, cfg.hidden_size), requires_grad=False)
        self.lm_head = nn.Parameter(torch.zeros(cfg.vocab_size, cfg.hidden_size), requires_grad=False)

    def forward(self, hidden_states, num_drafts: int | None = None):
        n = self.num_heads if num_drafts is None else min(num_drafts, self.num_heads)
        h = hidden_states.float()
        return torch.stack([F.linear(h + F.silu(F.linear(h, self.heads[i])), self.lm_head).argmax(-1)
                            for i in range(n)], dim=1)

    def load_weights(self, weights):
        params = dict(self.named_parameters())
        loaded = set()
        for name, w in weights:
            params[name].data.copy_(w)
            loaded.add(name)
        return loaded
