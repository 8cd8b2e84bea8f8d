import torch
import torch.nn as nn

P = 1000003
M = 2**31 - 1


def fold(h: int, tokens) -> int:
    """Reference of the rolling hash (used by the test)."""
    for t in tokens:
        h = (h * P + int(t) + 1) % M
    return h


class StateTestDrafter(nn.Module):
    def __init__(self, *, vllm_config, prefix=""):
        super().__init__()
        spec = vllm_config.speculative_config
        self.k = spec.num_speculative_tokens
        self.one = nn.Parameter(torch.ones(1), requires_grad=False)

    def update_state(self, acc, sampled, num_new):
        """The state-carry hook: fold the tokens this step produced into the state."""
        count, h, last = acc[:, 0], acc[:, 1], acc[:, 2]
        for j in range(sampled.shape[1]):
            take = num_new > j
            tok = sampled[:, j].to(torch.int64)
            h = torch.where(take, (h * P + tok + 1) % M, h)
            last = torch.where(take, tok, last)
        return {"acc": torch.stack([count + num_new.to(torch.int64), h, last], dim=1)}

    def forward(self, acc, next_token_ids):
        return acc[:, 2:3].expand(-1, self.k).clone()

    def load_weights(self, weights):
        for name, w in weights:
            if name == "one":
                self.one.data.copy_(w)
        return {"one"}
