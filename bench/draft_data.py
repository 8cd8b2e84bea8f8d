"""Shared pieces of the draft trainers: the hidden-state data set, the frozen lm_head, a chunked cross entropy.

The target's lm_head (49152 x 576, tied to the embeddings) dominates training cost on a CPU. ``ChunkedCE``
never keeps the full ``[batch, vocab]`` logits: per chunk of rows it computes the logits with a bf16 GEMM
(AVX512-BF16 runs it at about twice the float32 rate here), the softmax in place in bf16 with float32 sums, and
directly the gradient
with respect to the input hidden state (``(softmax - onehot) @ W``, one more GEMM). The lm_head is frozen, so
no weight gradient is needed. Evaluation uses float32 GEMMs, as vLLM serves the float32 target.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from bench.common import DATA, DRAFT_VOCAB

IGNORE = -100


def expected_accepted(res: dict, k: int) -> float:
    """Expected accepted draft tokens per step with ``k`` drafts, from conditional top-1 accuracies
    ``res["step{i}_top1"]`` (position i is accepted only if positions < i were): sum of their running products."""
    acc, run = 0.0, 1.0
    for s in range(k):
        run *= res[f"step{s + 1}_top1"]
        acc += run
    return round(acc, 3)


def set_lr(opt, base_lr: float, step: int, warmup: int, total_steps: int | None) -> float:
    """The trainers' schedule: linear warm-up over ``warmup`` steps, then cosine from ``base_lr`` down to 10 % of it
    at ``total_steps`` (``None``: not planned yet, full rate). Sets every param group's lr; returns it."""
    import math

    scale = min(1.0, (step + 1) / warmup) * (
        0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(step / (total_steps or 10**9), 1.0))))
    for gp in opt.param_groups:
        gp["lr"] = base_lr * scale
    return base_lr * scale


def load_target_weights(model_dir: Path, names: tuple[str, ...]) -> dict[str, torch.Tensor]:
    """Named float32 tensors of the converted target, without building the model."""
    from safetensors import safe_open

    out = {}
    with safe_open(str(model_dir / "model.safetensors"), framework="pt") as f:
        for n in names:
            out[n] = f.get_tensor(n).to(torch.float32)
    return out


def load_lm_head(model_dir: Path) -> torch.Tensor:
    """The target's lm_head ``[vocab, hidden]``: SmolLM2 ties it to ``model.embed_tokens.weight``."""
    from safetensors import safe_open

    with safe_open(str(model_dir / "model.safetensors"), framework="pt") as f:
        key = "lm_head.weight" if "lm_head.weight" in f.keys() else "model.embed_tokens.weight"
        return f.get_tensor(key).to(torch.float32)


@dataclass
class HiddenData:
    hidden: np.ndarray          # [N, H] float16 memmap, sequences back to back
    tokens: torch.Tensor        # [N] int64
    targets: torch.Tensor       # [N] int64: the target's greedy next token after each position (what drafts learn)
    offsets: torch.Tensor       # [S+1]
    prompt_lens: torch.Tensor   # [S]
    train_seqs: list[int]
    val_seqs: list[int]

    @property
    def num_seqs(self) -> int:
        return len(self.prompt_lens)

    def seq(self, s: int) -> tuple[int, int, int]:
        """``(start row, length, prompt length)`` of sequence ``s``."""
        a, b = int(self.offsets[s]), int(self.offsets[s + 1])
        return a, b - a, int(self.prompt_lens[s])


def load_hidden_data(data_dir: Path = DATA, val_fraction: float = 0.05, seed: int = 0) -> HiddenData:
    """The hidden-state data set with a seeded split of whole sequences (``val_fraction`` held out).

    ``targets[t]`` is the index's ``greedy[t]`` (``bench.hidden``: ``argmax(lm_head(h_t))``). An index written
    before ``greedy`` existed held only the target's own greedy answers, where that is token ``t + 1``: the tokens
    shifted by one (the last position of a sequence then holds the next sequence's first token, which no trainer
    reads: every label needs position ``t + 1`` inside the sequence).
    """
    index = torch.load(data_dir / "hidden_index.pt")
    hidden = np.load(data_dir / "hidden_f16.npy", mmap_mode="r")
    tokens = index["tokens"].to(torch.int64)
    targets = index["greedy"].to(torch.int64) if "greedy" in index else torch.roll(tokens, -1)
    n = len(index["prompt_lens"])
    perm = torch.randperm(n, generator=torch.Generator().manual_seed(seed)).tolist()
    n_val = max(1, round(n * val_fraction))
    return HiddenData(hidden=hidden, tokens=tokens, targets=targets, offsets=index["offsets"],
                      prompt_lens=index["prompt_lens"], train_seqs=sorted(perm[n_val:]),
                      val_seqs=sorted(perm[:n_val]))


@torch.no_grad()
def chunked_ce_grad(z: torch.Tensor, w_bf16: torch.Tensor, labels: torch.Tensor, chunk: int = 1024
                    ) -> tuple[torch.Tensor, float, int, int]:
    """Sum of cross entropies of ``z @ w.T`` against ``labels`` and its gradient w.r.t. ``z``.

    Args:
        z: ``[B, H]`` float32 (no grad needed).
        w_bf16: ``[V, H]`` bfloat16, frozen.
        labels: ``[B]`` int64, ``IGNORE`` rows contribute nothing.
    Returns:
        ``(grad [B, H] float32 of the SUM loss, loss sum, correct top-1, valid rows)``.
    """
    grad = torch.zeros_like(z)
    loss_sum, correct, valid = 0.0, 0, 0
    for a in range(0, z.shape[0], chunk):
        y = labels[a: a + chunk]
        keep = y != IGNORE
        if not bool(keep.any()):
            continue
        zc = z[a: a + chunk][keep]
        yc = y[keep]
        logits = zc.to(torch.bfloat16) @ w_bf16.T                   # [b, V] bf16
        picked = logits.gather(1, yc[:, None]).squeeze(1).float()
        m, pred = logits.max(-1)
        logits.sub_(m[:, None]).exp_()                               # in place: exp(l - max)
        denom = logits.sum(-1, dtype=torch.float32)
        loss_sum += float((m.float() + denom.log() - picked).sum())
        correct += int((pred == yc).sum())
        valid += int(yc.numel())
        logits.mul_((1.0 / denom)[:, None].to(torch.bfloat16))       # softmax
        logits[torch.arange(len(yc)), yc] -= 1.0
        g = (logits @ w_bf16).float()                                # [b, H]
        rows = torch.nonzero(keep).squeeze(1) + a
        grad[rows] = g
    return grad, loss_sum, correct, valid


@torch.no_grad()
def top1(z: torch.Tensor, w: torch.Tensor, labels: torch.Tensor, chunk: int = 2048) -> tuple[int, int]:
    """``(correct, valid)`` of ``argmax(z @ w.T)`` against ``labels`` (float32 GEMM, as served)."""
    correct = valid = 0
    for a in range(0, z.shape[0], chunk):
        y = labels[a: a + chunk]
        keep = y != IGNORE
        if not bool(keep.any()):
            continue
        pred = (z[a: a + chunk][keep] @ w.T).argmax(-1)
        correct += int((pred == y[keep]).sum())
        valid += int(keep.sum())
    return correct, valid


def draft_vocab_of(draft: Path) -> dict[str, torch.Tensor]:
    """``d2t`` and ``t2d`` of a saved draft (``DRAFT/model.safetensors``), or a clear refusal."""
    from safetensors.torch import load_file

    f = draft / "model.safetensors"
    if not f.is_file():
        raise SystemExit(f"--draft-vocab-from {draft}: no {f}")
    tensors = load_file(str(f))
    if not all(k in tensors for k in DRAFT_VOCAB):
        raise SystemExit(f"--draft-vocab-from {draft}: {f} has no draft vocabulary (tensors d2t and t2d); give a draft "
                         f"that has one, such as bench/drafts/smollm2-eagle3")
    return {k: tensors[k] for k in DRAFT_VOCAB}


def vocab_ids(vocab: dict[str, torch.Tensor] | None) -> torch.Tensor | None:
    """The target ids of the draft vocabulary in ``vocab`` (its ``d2t``: draft id ``d`` is target id ``d + d2t[d]``),
    or None."""
    return None if vocab is None else torch.arange(vocab["d2t"].numel()) + vocab["d2t"]
