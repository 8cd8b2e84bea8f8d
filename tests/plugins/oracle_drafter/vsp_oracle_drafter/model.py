import torch
import torch.nn as nn


class OracleTestDrafter(nn.Module):
    def __init__(self, *, vllm_config, prefix=""):
        super().__init__()
        cfg = vllm_config.speculative_config.draft_model_config.hf_config
        self.table = nn.Parameter(torch.zeros(cfg.max_positions, cfg.vocab_size, cfg.num_heads, dtype=torch.int64),
                                  requires_grad=False)
        self.burn = int(cfg.burn)
        self.work = nn.Parameter(torch.eye(256), requires_grad=False)

    def forward(self, positions, next_token_ids):
        pos = positions.clamp(0, self.table.shape[0] - 1)
        drafts = self.table[pos, next_token_ids.to(torch.int64)]
        x = self.work
        for _ in range(self.burn):  # a drafter that costs something
            x = x @ self.work
        return drafts + (x[0, 0] - 1).to(torch.int64)  # x[0, 0] == 1: keeps the work, changes nothing

    def load_weights(self, weights):
        for name, w in weights:
            if name == "table":
                self.table.data.copy_(w)
        return {"table", "work"}
