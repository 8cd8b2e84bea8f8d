"""A plain-torch reference of EAGLE-1 drafting, replayed from the shim's trace.

For every drafting step the trace holds what vLLM fed the draft's first pass (the
scheduled tokens, their positions and target hidden states, the next token of each
request, where each request's last accepted token is) and the drafts it returned.
The draft's KV cache at a position is whatever the latest first pass wrote there,
so we keep, per request, position -> (input token, target hidden state) and run
the EAGLE-1 draft as a plain causal transformer over it: draft 1 from the last
accepted position, then drafts 2..K autoregressively (token, position + 1, previous
output as hidden state), exactly as SafeAILab's EAGLE-1 and vLLM's loop do.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F


def _rms(x, w, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def _rope(x, pos, theta, head_dim):
    inv = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim))
    ang = pos.to(torch.float64)[:, None] * inv[None, :]
    cos, sin = ang.cos().to(x.dtype), ang.sin().to(x.dtype)
    x1, x2 = x[..., : head_dim // 2], x[..., head_dim // 2:]
    cos, sin = cos[:, None, :], sin[:, None, :]
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)


class EagleReference:
    def __init__(self, sd: dict, cfg: dict, target_lm_head: torch.Tensor, target_embed: torch.Tensor,
                 use_bias: bool = True, use_vocab: bool = True) -> None:
        self.sd, self.cfg = sd, cfg
        self.H = cfg["hidden_size"]
        self.nh = cfg["num_attention_heads"]
        self.hd = cfg.get("head_dim", self.H // self.nh)
        self.theta = cfg.get("rope_theta", 10000.0)
        self.eps = cfg["rms_norm_eps"]
        self.embed = sd.get("embed_tokens.weight", target_embed)
        self.lm = sd.get("lm_head.weight", target_lm_head)
        self.fc_bias = sd.get("fc.bias") if use_bias else None
        # a draft vocabulary: target id = draft id + d2t[draft id]; the others are never drafted
        self.vocab = torch.arange(sd["d2t"].numel()) + sd["d2t"] if "d2t" in sd and use_vocab else None

    def layer_input(self, tokens: torch.Tensor, hidden: torch.Tensor) -> torch.Tensor:
        return F.linear(torch.cat([self.embed[tokens], hidden], dim=-1), self.sd["fc.weight"], self.fc_bias)

    def run(self, h: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        """Causal pass over a full sequence of layer inputs ``h`` [n, H] at positions ``pos``."""
        sd, n = self.sd, h.shape[0]
        residual = None
        for i in range(self.cfg["num_hidden_layers"]):
            p = f"layers.{i}."
            if residual is None:
                residual, x = h, h
            else:
                residual = h + residual
                x = _rms(residual, sd[p + "input_layernorm.weight"], self.eps)
            q = F.linear(x, sd[p + "self_attn.q_proj.weight"]).view(n, self.nh, self.hd)
            k = F.linear(x, sd[p + "self_attn.k_proj.weight"]).view(n, -1, self.hd)
            v = F.linear(x, sd[p + "self_attn.v_proj.weight"]).view(n, -1, self.hd)
            q, k = _rope(q, pos, self.theta, self.hd), _rope(k, pos, self.theta, self.hd)
            att = torch.einsum("qhd,khd->hqk", q, k) / math.sqrt(self.hd)
            att = att.masked_fill(torch.ones(n, n, dtype=torch.bool).triu(1), float("-inf")).softmax(-1)
            o = F.linear(torch.einsum("hqk,khd->qhd", att, v).reshape(n, -1), sd[p + "self_attn.o_proj.weight"])
            residual = o + residual
            x = _rms(residual, sd[p + "post_attention_layernorm.weight"], self.eps)
            h = F.linear(F.silu(F.linear(x, sd[p + "mlp.gate_proj.weight"])) * F.linear(x, sd[p + "mlp.up_proj.weight"]),
                         sd[p + "mlp.down_proj.weight"])
        return h + residual

    def logits(self, out: torch.Tensor) -> torch.Tensor:
        if self.vocab is None:
            return F.linear(out, self.lm)
        full = torch.full(out.shape[:-1] + (self.lm.shape[0],), float("-inf"), dtype=out.dtype)
        full[..., self.vocab] = F.linear(out, self.lm[self.vocab])
        return full


def replay(records: list[dict], ref: EagleReference, margin: float = 1e-3) -> dict[str, int]:
    """Compare traced drafts with the reference. Returns counts of compared / equal / ambiguous drafts.

    A draft whose reference top-1 beats top-2 by less than ``margin`` is ambiguous
    (float rounding between kernels may flip it): it and the rest of its row are skipped.
    """
    kv: dict[str, dict[int, tuple[int, torch.Tensor]]] = {}
    stats = {"compared": 0, "equal": 0, "ambiguous": 0, "rows": 0}
    for rec in records:
        ids, pos, hid = rec["target_token_ids"].long(), rec["target_positions"], rec["target_hidden_states"]
        if pos.dim() == 2:
            pos = pos[0]
        qsl, nxt = rec["query_start_loc"].long(), rec["next_token_ids"].long()
        sample = rec["token_indices_to_sample"]
        sample = (qsl[1:] - 1) if sample is None else sample.long()
        shifted = torch.empty_like(ids)
        shifted[:-1] = ids[1:]
        shifted[-1] = ids[-1]
        shifted[sample] = nxt
        for i, rid in enumerate(rec["req_ids"]):
            cache = kv.setdefault(rid, {})
            for t in range(int(qsl[i]), int(qsl[i + 1])):
                cache[int(pos[t])] = (int(shifted[t]), hid[t])
            if int(rec["valid_count"][i]) == 0 or rec["drafts"].shape[1] == 0:
                continue
            L = int(pos[sample[i]])
            if any(p not in cache for p in range(L + 1)):
                continue
            toks = torch.tensor([cache[p][0] for p in range(L + 1)])
            hs = torch.stack([cache[p][1] for p in range(L + 1)])
            h_in = ref.layer_input(toks, hs)
            positions = torch.arange(L + 1)
            stats["rows"] += 1
            for j in range(rec["drafts"].shape[1]):
                out = ref.run(h_in, positions)[-1]
                top = ref.logits(out).topk(2)
                if float(top.values[0] - top.values[1]) < margin:
                    stats["ambiguous"] += 1
                    break
                draft = int(top.indices[0])
                stats["compared"] += 1
                stats["equal"] += int(draft == int(rec["drafts"][i, j]))
                if draft != int(rec["drafts"][i, j]):
                    break
                h_in = torch.cat([h_in, ref.layer_input(torch.tensor([draft]), out[None])])
                positions = torch.cat([positions, torch.tensor([L + 1 + j])])
    return stats
