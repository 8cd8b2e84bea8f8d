import torch
import torch.nn as nn


def replay(h0, tokens) -> list[int]:
    """Reference: the state after folding ``tokens`` (a request's sequence so far) into ``h0``."""
    count, acc = int(h0[0]), int(h0[1])
    for t in tokens:
        count += 1
        acc += (int(t) + 1) * count
    return [count, acc]


class RecurrentTestDrafter(nn.Module):
    def __init__(self, *, vllm_config, prefix=""):
        super().__init__()
        self.k = vllm_config.speculative_config.num_speculative_tokens
        self.h0 = nn.Parameter(torch.zeros(2, dtype=torch.int64), requires_grad=False)  # learned initial state

    def update_state(self, h, tokens, num_sched, num_rej):
        """Fold the tokens of each request that stay in its sequence (no host sync: output_size given)."""
        B, T = h.shape[0], tokens.shape[0]
        n = num_sched.to(torch.int64)
        req = torch.repeat_interleave(torch.arange(B, device=h.device), n, output_size=T)
        start = torch.cumsum(n, 0) - n
        i = torch.arange(T, device=h.device) - start[req]
        kept = n - num_rej.to(torch.int64)
        count = h[:, 0]
        contrib = torch.where(i < kept[req], (tokens.to(torch.int64) + 1) * (count[req] + i + 1), 0)
        acc = h[:, 1] + torch.zeros(B, dtype=torch.int64, device=h.device).index_add_(0, req, contrib)
        return {"h": torch.stack([count + kept, acc], dim=1)}

    def forward(self, next_token_ids, h):
        return next_token_ids.to(torch.int64)[:, None].expand(-1, self.k).clone()

    def load_weights(self, weights):
        for name, w in weights:
            if name == "h0":
                self.h0.data.copy_(w)
        return {"h0"}
