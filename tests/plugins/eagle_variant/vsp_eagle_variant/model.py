import os

import torch
from vllm_spec_eagle.model import EagleDraftModel


class VariantModel(EagleDraftModel):
    def __init__(self, *, vllm_config, prefix=""):
        super().__init__(vllm_config=vllm_config, prefix=prefix)
        self._log = os.environ.get("VSP_VARIANT_LOG")
        self._n = 0

    def update_state(self, count, num_new):
        return {"count": count + num_new.to(torch.int64)}

    def forward(self, input_ids, positions, hidden_states, count):
        if self._log:  # test instrumentation only (syncs)
            os.makedirs(self._log, exist_ok=True)
            torch.save({"rows": int(input_ids.shape[0]), "count": count.cpu().clone(),
                        "positions": positions.cpu().clone()},
                       os.path.join(self._log, f"p{os.getpid()}-{self._n:06d}.pt"))
            self._n += 1
        return super().forward(input_ids, positions, hidden_states)
