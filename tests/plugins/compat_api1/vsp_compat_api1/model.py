import torch
import torch.nn as nn
import torch.nn.functional as F


class CompatGruDrafter(nn.Module):
    def __init__(self, *, vllm_config, prefix=""):
        super().__init__()
        cfg = vllm_config.speculative_config.draft_model_config.hf_config
        self.num_heads = cfg.num_heads
        self.embed = nn.Parameter(torch.zeros(cfg.vocab_size, cfg.embed_size), requires_grad=False)
        self.gru = nn.GRUCell(cfg.embed_size, cfg.hidden_size)
        self.lm_head = nn.Parameter(torch.zeros(cfg.vocab_size, cfg.hidden_size), requires_grad=False)

    def forward(self, hidden_states, next_token_ids):
        h = hidden_states.float()
        token = next_token_ids.long()
        drafts = []
        for _ in range(self.num_heads):
            h = self.gru(self.embed[token], h)
            token = F.linear(h, self.lm_head).argmax(-1)
            drafts.append(token)
        return torch.stack(drafts, dim=1)

    def load_weights(self, weights):
        params = dict(self.named_parameters())
        loaded = set()
        for name, w in weights:
            params[name].data.copy_(w)
            loaded.add(name)
        return loaded
