import torch
import torch.nn as nn

from vllm_spec_plugins import target_lm_head


class MMProbeDrafter(nn.Module):
    def __init__(self, *, vllm_config, prefix=""):
        super().__init__()
        cfg = vllm_config.speculative_config.draft_model_config.hf_config
        self.image_weight = float(cfg.image_weight)
        self.vocab = int(cfg.vocab_size)
        self.lm_head = None  # the target's, from bind_target

    def bind_target(self, target_model):
        self.lm_head = target_lm_head(target_model)

    def update_state(self, image, embeds, is_mm, counts):
        """Each request's state becomes the merged embedding of its last image token in this step, if any."""
        rows = counts.shape[0]
        request = torch.repeat_interleave(torch.arange(rows, device=counts.device), counts.to(torch.int64),
                                          output_size=embeds.shape[0])
        token = torch.arange(embeds.shape[0], device=embeds.device)
        last = torch.full((rows,), -1, dtype=torch.int64, device=embeds.device)
        last.scatter_reduce_(0, request, torch.where(is_mm, token, -1), reduce="amax")
        seen = (last >= 0).unsqueeze(1)
        return {"image": torch.where(seen, embeds[last.clamp(min=0)], image)}

    def forward(self, hidden_states, positions, image, embeds, is_mm, pos, next_pos, tokens, counts, num_drafts):
        x = hidden_states + self.image_weight * image
        top = (x @ self.lm_head.weight[: self.vocab].t()).argmax(dim=-1)  # (vLLM pads the lm_head's rows)
        return top.unsqueeze(1).expand(-1, num_drafts)

    def load_weights(self, weights):
        for _ in weights:
            pass
        return set()
