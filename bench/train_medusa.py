"""Stage 3a: train Medusa-1 heads for the target by self-distillation on its own hidden states.

Each head ``h`` (0-based) is one residual block ``z = x + SiLU(W_h x + b_h)`` (zero-initialised, so it starts
as the identity) followed by the target's frozen lm_head, shared and not saved. Head ``h`` reads the final
normed hidden state at position ``t`` and is trained on the token at ``t + h + 2``: in vLLM the heads get the
hidden state of the last accepted token ``t``, whose next token ``t + 1`` the target has already sampled.
Positions: from the last prompt token on (``t >= prompt_len - 1``), as drafting never starts inside a prompt.
The label is the target's own greedy token (``bench.hidden``'s ``greedy``); on a prefill of text the target did not
write (``--data-dir .cache/bench/sg``: real ShareGPT replies), a head's label counts only where the text up to it
follows the target's greedy chain (``positions_and_labels``).

Before training, an alignment check runs the identity head on the stored float16 hidden states: against
``t + 1`` it must reproduce the greedy tokens (~100 %), against ``t + 2`` (head 0's label) it must not.

Output (FasterDecoding "new" layout, for ``vllm-spec-medusa``), ``--out`` (default ``.cache/bench/smollm2-medusa/``; the
shipped heads are ``bench/drafts/smollm2-medusa/``, written by ``make drafts``):
``config.json``, ``medusa_lm_head.safetensors`` (float16 ``blocks.{h}.layers.0.{weight,bias}``, no lm_head:
``original_lm_head`` shares the target's) and ``train_report.json``.

    python -m bench.train_medusa [--budget-min 12] [--heads 4] [--heldout-dir .cache/bench/heldout]
    python -m bench.train_medusa --data-dir .cache/bench/sg --heldout-dir .cache/bench/chat
        --out .cache/bench/smollm2-medusa-sharegpt   # on prefills of ShareGPT replies (make drafts-sharegpt's data)
    python -m bench.train_medusa --evaluate bench/drafts/smollm2-medusa --heldout-dir .cache/bench/chat
        # offline accuracy of saved heads on other answers (bench.make_data + bench.hidden first)
    python -m bench.train_medusa --add-draft-vocab bench/drafts/smollm2-medusa --draft-vocab-from bench/drafts/smollm2-eagle3

Draft vocabulary (``--draft-vocab-from DRAFT``, an EAGLE draft with ``d2t``): the saved heads also hold ``token_map``
(those target ids) and ``truncated_vocab_size``, and ``vllm-spec-medusa`` computes each head's logits over the target
lm_head's rows of those tokens alone; training is unchanged (full vocabulary), and the offline figures after training
are the vocabulary's, as served. ``--add-draft-vocab DRAFT`` gives saved heads that vocabulary without training.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn as nn

from bench.common import CACHE, DATA, Budget, command_line, seed_everything, write_json
from bench.draft_data import (
    IGNORE,
    HiddenData,
    chunked_ce_grad,
    draft_vocab_of,
    load_hidden_data,
    load_lm_head,
    top1,
    vocab_ids,
)
from bench.trainloop import train_loop

HEADS_FILE = "medusa_lm_head.safetensors"


def positions_and_labels(data: HiddenData, seqs: list[int], num_heads: int, first: int = 2
                         ) -> tuple[torch.Tensor, torch.Tensor]:
    """Hidden-state rows ``t`` and labels ``[P, num_heads]``: head ``h`` gets the token at ``t + h + first``.

    ``first = 2`` is Medusa's training target; ``first = 1`` (the token the target itself predicts from ``t``)
    is only used by the alignment check. Rows run from the last prompt token to the last one with a label for
    head 0; labels past the end of a sequence are ``IGNORE``.

    A head sees only the hidden state at ``t``; in vLLM the tokens between ``t`` and its label are the target's own
    greedy tokens. So a label counts only where the sequence follows the target's greedy chain from ``t`` up to it:
    every token ``t + 1 ... t + h + first - 1`` is the target's greedy next token after the one before. On the target's
    own greedy answers that holds everywhere; on a prefill of other text (``bench.prefill_data``: real replies) only
    where the reply happens to say what the target would, and elsewhere the label would be the target's next token
    after words it did not write. Rows left without any label are dropped.
    """
    rows, labels = [], []
    for s in seqs:
        a, n, p = data.seq(s)
        t = torch.arange(max(p - 1, 0), n - first)
        if len(t) == 0:
            continue
        lab = torch.full((len(t), num_heads), IGNORE, dtype=torch.int64)
        nxt = data.targets[a: a + n]  # nxt[i]: the target's greedy token i + 1
        greedy_next = torch.zeros(n, dtype=torch.bool)  # greedy_next[j]: token j + 1 is the greedy token after j
        greedy_next[: n - 1] = data.tokens[a + 1: a + n] == nxt[: n - 1]
        on_chain = torch.ones(len(t), dtype=torch.bool)
        for h in range(num_heads):
            idx = t + h + first
            ok = idx < n
            if h + first >= 2:  # token t + h + first - 1 lies between t and the label: on the greedy chain?
                on_chain &= greedy_next[(idx - 2).clamp(max=n - 1)]
            ok &= on_chain
            lab[ok, h] = nxt[idx[ok] - 1]
        keep = (lab != IGNORE).any(1)
        rows.append(t[keep] + a)
        labels.append(lab[keep])
    return torch.cat(rows), torch.cat(labels)


def gather_hidden(data: HiddenData, rows: torch.Tensor) -> torch.Tensor:
    return torch.from_numpy(np.ascontiguousarray(data.hidden[rows.numpy()]))  # float16


class MedusaHeads(nn.Module):
    def __init__(self, hidden: int, num_heads: int) -> None:
        super().__init__()
        self.blocks = nn.ModuleList([nn.Linear(hidden, hidden, bias=True) for _ in range(num_heads)])
        for blk in self.blocks:
            nn.init.zeros_(blk.weight)
            nn.init.zeros_(blk.bias)

    def head(self, h: int, x: torch.Tensor) -> torch.Tensor:
        return x + nn.functional.silu(self.blocks[h](x))


def evaluate(heads: MedusaHeads, x16: torch.Tensor, labels: torch.Tensor, w: torch.Tensor,
             vocab: torch.Tensor | None = None) -> list[float]:
    """Per-head top-1 (float32 lm_head, as served; over the draft vocabulary ``vocab``'s rows if given)."""
    return accuracy(heads, x16, labels, w, vocab=vocab)[0]


@torch.no_grad()
def accuracy(heads: MedusaHeads, x16: torch.Tensor, labels: torch.Tensor, w: torch.Tensor,
             batch: int = 2048, vocab: torch.Tensor | None = None) -> tuple[list[float], list[float]]:
    """Per head ``h``, among the positions with a label for it (float32 lm_head, as served): top-1, and chained top-1,
    the share where heads ``0 ... h`` are all right (what verification accepts of a chain of drafts). ``vocab``: the
    target ids of a draft vocabulary (``token_map``): the argmax over the lm_head's rows of those ids alone, mapped
    back to target ids, as ``vllm-spec-medusa`` serves it."""
    k = labels.shape[1]
    if vocab is not None:
        w = w[vocab].contiguous()
    right, chained, valid = [0] * k, [0] * k, [0] * k
    for a in range(0, x16.shape[0], batch):
        x, y = x16[a: a + batch].float(), labels[a: a + batch]
        chain = torch.ones(len(x), dtype=torch.bool)
        for h in range(k):
            pred = (heads.head(h, x) @ w.T).argmax(-1)
            ok = (pred if vocab is None else vocab[pred]) == y[:, h]
            chain &= ok
            has = y[:, h] != IGNORE
            right[h] += int((ok & has).sum())
            chained[h] += int((chain & has).sum())
            valid[h] += int(has.sum())
    return ([round(c / max(v, 1), 4) for c, v in zip(right, valid)],
            [round(c / max(v, 1), 4) for c, v in zip(chained, valid)])


def load_heads(draft: Path, tensors: dict[str, torch.Tensor] | None = None) -> MedusaHeads:
    """Heads saved by this stage (``medusa_lm_head.safetensors``, FasterDecoding's new layout), as float32;
    ``tensors``: that file's contents, when the caller has read them already."""
    from safetensors.torch import load_file

    cfg = json.loads((draft / "config.json").read_text())
    if tensors is None:
        tensors = load_file(str(draft / HEADS_FILE))
    heads = MedusaHeads(cfg["hidden_size"], cfg["num_heads"])
    with torch.no_grad():
        for h, blk in enumerate(heads.blocks):
            blk.weight.copy_(tensors[f"blocks.{h}.layers.0.weight"].float())
            blk.bias.copy_(tensors[f"blocks.{h}.layers.0.bias"].float())
    return heads


def evaluate_saved(draft: Path, data_dir: Path) -> dict:
    """Offline accuracy of saved heads on the answers in ``data_dir`` (``bench.make_data`` + ``bench.hidden``)."""
    from safetensors.torch import load_file

    from bench.smollm2 import ensure_smollm2

    w = load_lm_head(ensure_smollm2())
    tensors = load_file(str(draft / HEADS_FILE))
    heads = load_heads(draft, tensors)
    vocab = tensors.get("token_map")
    data = load_hidden_data(data_dir, val_fraction=0.0)
    rows, labels = positions_and_labels(data, list(range(data.num_seqs)), len(heads.blocks))
    x = gather_hidden(data, rows)
    per_head, chained = accuracy(heads, x, labels, w, vocab=vocab)
    res = {"draft": str(draft), "data": str(data_dir), "sequences": data.num_seqs, "positions": len(rows),
           "draft_vocab": None if vocab is None else int(vocab.numel()),
           "top1_per_head": per_head, "chained_top1_per_head": chained}
    if vocab is not None:  # the share of head 0's labels the draft vocabulary holds (the most it can get right)
        in_vocab = torch.zeros(w.shape[0], dtype=torch.bool)
        in_vocab[vocab] = True
        has = labels[:, 0] != IGNORE
        res["draft_vocab_coverage"] = round(int(in_vocab[labels[has, 0]].sum()) / max(int(has.sum()), 1), 4)
    return res


def vocab_entries(vocab: torch.Tensor) -> tuple[dict[str, torch.Tensor], dict]:
    """The tensors and config keys that give saved heads the draft vocabulary ``vocab`` (target ids)."""
    return {"token_map": vocab.to(torch.int64).contiguous()}, {"truncated_vocab_size": int(vocab.numel())}


def add_draft_vocab(draft: Path, source: Path) -> dict:
    """Give the saved heads ``draft`` the draft vocabulary of ``source`` (an EAGLE draft's ``d2t``) as ``token_map``
    and ``truncated_vocab_size``, weights unchanged; the report's ``draft_vocab`` says where it came from. Returns
    that entry."""
    from safetensors.torch import load_file, save_file

    vocab = draft_vocab_of(source)
    cfg = json.loads((draft / "config.json").read_text())
    f = draft / HEADS_FILE
    heads = load_file(str(f))
    load_heads(draft, heads)  # refuses what is not a draft as this stage writes it
    if vocab["t2d"].numel() != cfg["vocab_size"]:
        raise SystemExit(f"--draft-vocab-from {source}: its t2d covers {vocab['t2d'].numel()} tokens, but {draft} drafts "
                         f"for a target of vocab_size {cfg['vocab_size']}: a draft vocabulary of another target")
    tensors, keys = vocab_entries(vocab_ids(vocab))
    save_file({**{k: v for k, v in heads.items() if k != "token_map"}, **tensors}, str(f), metadata={"format": "pt"})
    write_json(draft / "config.json", {**cfg, **keys})
    entry = {"from": str(source), "size": keys["truncated_vocab_size"]}
    report = draft / "train_report.json"
    if report.is_file():
        write_json(report, {**json.loads(report.read_text()), "draft_vocab": entry,
                            "files_bytes": {p.name: p.stat().st_size for p in sorted(draft.glob("*.safetensors"))}})
    return entry


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--budget-min", type=float, default=12.0)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--batch", type=int, default=1024, help="positions per optimizer step")
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--weight-decay", type=float, default=0.01)
    ap.add_argument("--warmup", type=int, default=30)
    ap.add_argument("--max-epochs", type=int, default=20)
    ap.add_argument("--val-fraction", type=float, default=0.05)
    ap.add_argument("--data-dir", type=Path, default=DATA)
    ap.add_argument("--heldout-dir", type=Path, default=CACHE / "heldout",
                    help="hidden states of the held-out prompts (evaluated if present)")
    ap.add_argument("--out", type=Path, default=CACHE / "smollm2-medusa",
                    help="where to save the heads (default %(default)s; the shipped heads: bench/drafts/smollm2-medusa)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--evaluate", type=Path, default=None, metavar="DRAFT",
                    help="no training: the offline accuracy of the saved heads in DRAFT on --heldout-dir's answers")
    ap.add_argument("--draft-vocab-from", type=Path, default=None, metavar="DRAFT",
                    help="save the heads with the draft vocabulary of DRAFT, an EAGLE draft of the same target with d2t "
                         "(the EAGLE-3 draft's), as token_map; the offline figures after training are then the "
                         "vocabulary's")
    ap.add_argument("--add-draft-vocab", type=Path, default=None, metavar="DRAFT",
                    help="no training: give the saved heads DRAFT the draft vocabulary of --draft-vocab-from")
    return ap


def main(argv: list[str] | None = None) -> None:
    ap = parser()
    args = ap.parse_args(argv)
    if args.evaluate is not None:
        print(json.dumps(evaluate_saved(args.evaluate, args.heldout_dir), indent=1))
        return
    if args.add_draft_vocab is not None:
        if args.draft_vocab_from is None:
            ap.error("--add-draft-vocab needs --draft-vocab-from DRAFT")
        print(json.dumps(add_draft_vocab(args.add_draft_vocab, args.draft_vocab_from)))
        return
    vocab = vocab_ids(draft_vocab_of(args.draft_vocab_from)) if args.draft_vocab_from is not None else None
    budget = Budget(args.budget_min)
    seed_everything(args.seed)
    torch.use_deterministic_algorithms(True, warn_only=True)

    from bench.smollm2 import ensure_smollm2

    model_dir = ensure_smollm2()
    cfg = json.loads((model_dir / "config.json").read_text())
    w = load_lm_head(model_dir)                      # [V, H] float32, frozen
    w16 = w.to(torch.bfloat16)
    data = load_hidden_data(args.data_dir, args.val_fraction, args.seed)
    k = args.heads
    tr_rows, tr_lab = positions_and_labels(data, data.train_seqs, k)
    va_rows, va_lab = positions_and_labels(data, data.val_seqs, k)
    tr_x, va_x = gather_hidden(data, tr_rows), gather_hidden(data, va_rows)
    print(f"train: {len(data.train_seqs)} seqs, {len(tr_rows)} positions | val: {len(data.val_seqs)} seqs, "
          f"{len(va_rows)} positions")

    heads = MedusaHeads(cfg["hidden_size"], k)
    # Alignment check: the identity head must reproduce the target's own next token t+1, not t+2.
    next_rows, va_lab_next = positions_and_labels(data, data.val_seqs, 1, first=1)
    c1, v1 = top1(gather_hidden(data, next_rows).float(), w, va_lab_next[:, 0])
    c2, v2 = top1(va_x.float(), w, va_lab[:, 0])
    alignment = {"identity_head_vs_token_t+1": round(c1 / v1, 4), "identity_head_vs_token_t+2": round(c2 / v2, 4)}
    print("alignment check (zero-initialised head 0):", alignment)
    if alignment["identity_head_vs_token_t+1"] < 0.98:
        raise SystemExit("alignment check failed: hidden states do not reproduce the greedy tokens")
    heldout = None
    if (args.heldout_dir / "hidden_index.pt").is_file():
        hd = load_hidden_data(args.heldout_dir, val_fraction=0.0)
        seqs = list(range(hd.num_seqs))
        h_rows, h_lab = positions_and_labels(hd, seqs, k)
        heldout = (gather_hidden(hd, h_rows), h_lab, hd.num_seqs)

    opt = torch.optim.AdamW(heads.parameters(), lr=args.lr, weight_decay=args.weight_decay)
    steps_per_epoch = math.ceil(len(tr_rows) / args.batch)
    gen = torch.Generator().manual_seed(args.seed)
    history = []
    t_eval = time.monotonic()
    history.append({"epoch": 0, "val_top1": evaluate(heads, va_x, va_lab, w)})
    eval_s = time.monotonic() - t_eval
    print("epoch 0 (identity heads) val top-1:", history[-1]["val_top1"])
    perm = torch.empty(0, dtype=torch.int64)

    def batches(epoch: int) -> range:
        nonlocal perm
        perm = torch.randperm(len(tr_rows), generator=gen)
        return range(steps_per_epoch)

    def step(bi: int, sums: dict) -> None:  # one cross-entropy per head, on the frozen lm_head (bf16 GEMM)
        idx = perm[bi * args.batch: (bi + 1) * args.batch]
        x = tr_x[idx].float()
        for h in range(k):
            z = heads.head(h, x)
            g, ls, c, v = chunked_ce_grad(z.detach(), w16, tr_lab[idx, h])
            z.backward(g / max(v, 1))
            sums["loss"][h] += ls
            sums["correct"][h] += c
            sums["n"][h] += v

    def plan(step_s: float) -> int:
        return int(budget.left() / (steps_per_epoch * step_s + eval_s) * steps_per_epoch)

    loop = train_loop(
        desc="medusa", opt=opt, budget=budget, lr=args.lr, warmup=args.warmup, steps_per_epoch=steps_per_epoch,
        max_epochs=args.max_epochs, batches=batches, step=step, plan=plan, reserve=eval_s + 5, history=history,
        new_sums=lambda: {"loss": [0.0] * k, "correct": [0] * k, "n": [0] * k},
        postfix=lambda m: {"loss": f"{sum(m['loss']) / max(sum(m['n']), 1):.3f}",
                           "acc": "/".join(f"{c / max(v, 1):.2f}" for c, v in zip(m["correct"], m["n"]))},
        record=lambda epoch, m: {"train_loss": [round(s / max(v, 1), 4) for s, v in zip(m["loss"], m["n"])],
                                 "train_top1": [round(c / max(v, 1), 4) for c, v in zip(m["correct"], m["n"])],
                                 "val_top1": evaluate(heads, va_x, va_lab, w)})
    step, stopped, total_steps, train_s = loop.steps, loop.stopped, loop.total_steps, loop.train_s
    final_val = history[-1]["val_top1"]
    heldout_top1, heldout_chained = accuracy(heads, heldout[0], heldout[1], w, vocab=vocab) if heldout else (None, None)
    if heldout_top1:
        print("held-out prompts top-1:", heldout_top1)

    # ---- save (FasterDecoding new layout; lm_head shared with the target) ----
    from safetensors.torch import save_file

    args.out.mkdir(parents=True, exist_ok=True)
    tensors = {}
    for h, blk in enumerate(heads.blocks):
        tensors[f"blocks.{h}.layers.0.weight"] = blk.weight.detach().to(torch.float16).contiguous()
        tensors[f"blocks.{h}.layers.0.bias"] = blk.bias.detach().to(torch.float16).contiguous()
    vocab_tensors, vocab_keys = vocab_entries(vocab) if vocab is not None else ({}, {})
    save_file({**tensors, **vocab_tensors}, args.out / HEADS_FILE, metadata={"format": "pt"})
    write_json(args.out / "config.json", {
        "model_type": "medusa", "architectures": ["MedusaModel"], "hidden_size": cfg["hidden_size"],
        "vocab_size": cfg["vocab_size"], "num_heads": k, "num_hidden_layers": 1, "original_lm_head": True,
        **vocab_keys})
    # accuracy of the saved float16 weights (what vLLM loads), over the draft vocabulary if it has one
    saved = load_heads(args.out)
    final_val_f16 = evaluate(saved, va_x, va_lab, w, vocab=vocab)
    n_tok = int(data.offsets[-1])
    report = {
        "command": command_line(),
        "target": "SmolLM2-135M-Instruct (GGUF Q4_1 dequantized to float32)",
        "data": {"sequences": data.num_seqs, "train_sequences": len(data.train_seqs),
                 "val_sequences": len(data.val_seqs), "tokens": n_tok,
                 "answer_tokens": int(n_tok - data.prompt_lens.sum()), "train_positions": len(tr_rows),
                 "val_positions": len(va_rows)},
        "heads": k, "label": "head h at position t is trained on the target's greedy token at t + h + 2, where the "
                             "tokens t + 1 ... t + h + 1 are its greedy chain",
        "alignment_check": alignment,
        "hyperparameters": {"batch": args.batch, "lr": args.lr, "weight_decay": args.weight_decay,
                            "warmup": args.warmup, "schedule": "linear warm-up, cosine to 10 %",
                            "scheduled_steps": total_steps, "lm_head_training_precision": "bf16 GEMM, fp32 softmax",
                            "seed": args.seed},
        "epochs": history, "steps": step, "epochs_run": round(step / steps_per_epoch, 2),
        "stopped_by_budget": stopped,
        "val_top1_per_head": final_val, "val_top1_per_head_saved_fp16": final_val_f16,
        "heldout_prompts_top1_per_head": heldout_top1, "heldout_prompts_chained_top1_per_head": heldout_chained,
        "heldout_prompts_sequences": heldout[2] if heldout else None,
        "train_wall_s": round(train_s, 1), "wall_s": round(budget.elapsed(), 1), "budget_min": args.budget_min,
        "files_bytes": {p.name: p.stat().st_size for p in sorted(args.out.glob("*.safetensors"))},
        "draft_vocab": None if vocab is None else {"from": str(args.draft_vocab_from), "size": int(vocab.numel())},
    }
    write_json(args.out / "train_report.json", report)
    print(json.dumps({k_: report[k_] for k_ in ("val_top1_per_head", "val_top1_per_head_saved_fp16",
                                                 "heldout_prompts_top1_per_head", "epochs_run", "wall_s")}))


if __name__ == "__main__":
    main()
