import torch
import torch.nn as nn


class CompatRecurrentDrafter(nn.Module):
    def __init__(self, *, vllm_config, prefix=""):
        super().__init__()
        cfg = vllm_config.speculative_config.draft_model_config.hf_config
        self.num_heads = cfg.num_heads
        self.vocab_size = cfg.vocab_size
        self.h0 = nn.Parameter(torch.zeros(2, dtype=torch.int64), requires_grad=False)  # learned initial state

    def update_state(self, h, tokens, num_sched, num_rej):
        """Fold each request's scheduled tokens that stay in its sequence (not its rejected drafts)."""
        B, T = h.shape[0], tokens.shape[0]
        n = num_sched.to(torch.int64)
        req = torch.repeat_interleave(torch.arange(B, device=h.device), n, output_size=T)
        i = torch.arange(T, device=h.device) - (torch.cumsum(n, 0) - n)[req]
        kept = n - num_rej.to(torch.int64)
        count = h[:, 0]
        contrib = torch.where(i < kept[req], (tokens.to(torch.int64) + 1) * (count[req] + i + 1), 0)
        acc = h[:, 1] + torch.zeros(B, dtype=torch.int64, device=h.device).index_add_(0, req, contrib)
        return {"h": torch.stack([count + kept, acc], dim=1)}

    def forward(self, next_token_ids, h):
        last = next_token_ids.to(torch.int64)
        first = torch.where(h[:, 1] % 5 == 0, (last + 1) % self.vocab_size, last)
        return first[:, None].expand(-1, self.num_heads).clone()

    def load_weights(self, weights):
        for name, w in weights:
            if name == "h0":
                self.h0.data.copy_(w)
        return {"h0"}
