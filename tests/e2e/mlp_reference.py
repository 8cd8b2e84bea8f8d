"""A plain-torch reference of IBM's MLP speculator, written from fms-extras' source.

``MLPSpeculator.generate_suffixes`` (``fms_extras/models/speculator.py``) with
``topk = [1] * n`` and ``n = 1`` is the greedy chain vLLM's verifier can check: the
candidate tree collapses to one sequence. The norm is fms'
``LayerNormParameterized`` (``fms/modules/layernorm.py``) as the speculator builds it:
``elementwise_shift=True, elementwise_scale=True`` per head, neither for ``ln0``;
``use_mean=False``; ``eps=1e-06``. Weights are read from the checkpoint's state dict by
name, following fms-extras' weight tying (``emb``, ``head``, ``ln`` shared with index 0;
``proj`` 2.. shared with ``proj.1``), never through the plugin's model code.
"""

from __future__ import annotations

import math
from pathlib import Path

import torch
import torch.nn.functional as F


def load_checkpoint(path: Path) -> tuple[dict, dict]:
    import json

    cfg = json.loads((path / "config.json").read_text())
    files = sorted(path.glob("*.safetensors"))
    if files:
        from safetensors.torch import load_file

        sd = load_file(str(files[0]))
    else:
        sd = torch.load(next(iter(path.glob("*.bin"))), weights_only=True)
    return sd, cfg


def _layernorm_parameterized(x, weight=None, bias=None, eps=1e-06):
    xf = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
    x = xf.type_as(x)
    if weight is not None:
        x = weight * x
    if bias is not None:
        x = x + bias
    return x


class MLPSpeculatorReference:
    def __init__(self, sd: dict, cfg: dict, prefix: str = "") -> None:
        self.cfg = cfg
        self.n_predict = cfg["n_predict"]
        self.inner_dim = cfg.get("inner_dim") or cfg["emb_dim"]
        self.scale_input = cfg.get("scale_input", False)
        tie = cfg.get("tie_weights", False)

        def get(kind, i, part="weight"):
            if tie:  # fms-extras: emb/head/ln of every stage are stage 0's; proj 2.. is proj 1
                i = min(i, 1) if kind == "proj" else 0
            return sd[f"{prefix}{kind}.{i}.{part}"]

        self.emb = [get("emb", i) for i in range(self.n_predict)]
        self.proj = [get("proj", i) for i in range(self.n_predict)]
        self.head = [get("head", i) for i in range(self.n_predict)]
        self.ln = [(get("ln", i), get("ln", i, "bias")) for i in range(self.n_predict)]
        self.state_weight = 0.5 ** (0.5 / self.n_predict)
        self.emb_weight = math.sqrt((1 - self.state_weight**2) * (self.inner_dim / 2))

    def drafts(self, state: torch.Tensor, ind: torch.Tensor, k: int, scale_input: bool | None = None) -> torch.Tensor:
        """``state`` [b, emb_dim] (target final hidden state), ``ind`` [b] (last token) -> [b, k] drafts."""
        scale = self.scale_input if scale_input is None else scale_input
        state = state[:, None, :]  # b 1 d, as generate_suffixes takes it
        ind = ind.to(torch.int64)[:, None]  # b 1
        if scale:
            state = _layernorm_parameterized(state) / (2**0.5)
        out = []
        for i in range(k):
            z = F.embedding(ind, self.emb[i])
            state = F.linear(state, self.proj[i])
            state = torch.add(state, z, alpha=self.emb_weight / self.state_weight)
            state = F.gelu(_layernorm_parameterized(state, *self.ln[i]))
            probs = F.log_softmax(F.linear(state, self.head[i]), dim=2)
            _, preds = probs.topk(1, dim=2)  # top-1: the tree is one chain
            ind = preds.view(state.shape[0], -1)
            out.append(ind[:, 0])
        return torch.stack(out, dim=1)
