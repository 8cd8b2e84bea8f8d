import os

import torch
from vllm_spec_eagle.model import EagleDraftModel


class EagleMMProbe(EagleDraftModel):
    def __init__(self, *, vllm_config, prefix=""):
        super().__init__(vllm_config=vllm_config, prefix=prefix)
        self._log = os.environ.get("VSP_MM_PROBE_LOG")
        self._n = 0

    def forward(self, input_ids, positions, hidden_states, embeds, is_mm, pos, tokens, counts):
        if self._log:  # test instrumentation only (syncs)
            os.makedirs(self._log, exist_ok=True)
            got = {"rows": int(input_ids.shape[0]), "input_ids": input_ids, "positions": positions,
                   "embeds": embeds, "is_mm": is_mm, "pos": pos, "tokens": tokens,
                   "counts": counts}
            torch.save({k: v.cpu().clone() if isinstance(v, torch.Tensor) else v for k, v in got.items()},
                       os.path.join(self._log, f"p{os.getpid()}-{self._n:06d}.pt"))
            self._n += 1
        return super().forward(input_ids, positions, hidden_states)
