"""Stage 3c: train an EAGLE-3 draft for the target with training-time test and a truncated draft vocabulary.

The draft is exactly what the EAGLE plugin's EAGLE-3 model (``vllm_spec_eagle.eagle3``, numerically vLLM's
``Eagle3LlamaForCausalLM``) runs, written here in plain torch:

    g = fc(cat(a_2, a_15, a_27))                           # the target's residual stream entering layers 2, 15, 27
    x = cat(input_layernorm(embed(next token)), hidden_norm(g))          # [2H] -> q, k, v (RoPE)
    r = o_proj(attn(x)) + g;  prenorm = mlp(post_attention_layernorm(r)) + r
    logits = norm(prenorm) @ W_d.T     # W_d: the target's lm_head rows of the draft vocabulary (frozen, not saved)
    next draft step: g = prenorm, the drafted token, the next position

Training-time test (EAGLE-3): every optimizer step unrolls ``--ttt-steps`` draft steps as vLLM runs them. Step 1 at
index ``p`` reads ``g`` from the target layers at ``p`` and token ``p + 1`` (RoPE position ``p``, causal attention
over the other step-1 keys); step ``s`` reads the previous step's ``prenorm`` and the true token ``p + s`` at RoPE
position ``p + s - 1``, attending the step-1 keys of positions ``<= p`` and its own chain's keys (vLLM's draft KV
cache during one proposal). Step ``s`` predicts the target's greedy token ``p + s + 1`` (cross entropy over the
draft vocabulary, weight ``0.8 ** (s - 1)``; answer tokens only). Gradients flow through the chain.

Draft vocabulary: the most frequent greedy answer tokens of the train split, as many as ``--vocab-coverage``
needs (rounded up to 256). ``d2t[d]`` = target id - draft id. The lm_head rows are the target's own (frozen), so
the checkpoint stores no lm_head: the EAGLE plugin takes those rows from the target's lm_head when ``d2t`` is present
and ``lm_head.weight`` is not (vLLM's built-in EAGLE-3 cannot serve such a checkpoint).

Reported offline: ``stepK_top1`` = draft position K right given positions < K were (chained; a label outside the
draft vocabulary counts as wrong) on the validation sequences and on the held-out prompts (``--heldout-dir``, other
topics and other kinds of request), plus the draft vocabulary's coverage of both.

Output ``--out`` (default ``.cache/bench/smollm2-eagle3/``; the shipped draft is ``bench/drafts/smollm2-eagle3/``, written by
``make drafts``): ``config.json`` (architectures ``LlamaForCausalLMEagle3``, one layer,
``draft_vocab_size``, ``eagle_aux_hidden_state_layer_ids``, ``"vllm_spec_plugin": "eagle"``), ``model.safetensors``
(float16 ``fc``, ``layers.0.*``, ``norm``; int64 ``d2t``; bool ``t2d``) and ``train_report.json``.

    python -m bench.train_eagle3 [--budget-min 27] [--data-dir .cache/bench/data3] [--heldout-dir .cache/bench/heldout3]
        [--bf16]   # forward and backward under bfloat16 autocast: 1.4-1.6x the steps a minute on AMX (bench/README.md)
    python -m bench.train_eagle3 --evaluate bench/drafts/smollm2-eagle3 --heldout-dir .cache/bench/chat
        # offline accuracy of a saved draft on other answers (bench.make_data + bench.hidden --aux-layers first)
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
import torch.nn.functional as F

from bench.common import (
    CACHE,
    Budget,
    add_evaluation_options,
    command_line,
    evaluate_only,
    seed_everything,
    write_json,
)
from bench.draft_data import IGNORE, HiddenData, expected_accepted, load_hidden_data, load_lm_head
from bench.train_eagle import make_batches
from bench.trainloop import train_loop

STEP_DECAY = 0.8


class RMSNorm(nn.Module):
    def __init__(self, n: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(n))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


class Eagle3Draft(nn.Module):
    def __init__(self, cfg: dict, n_aux: int) -> None:
        super().__init__()
        from transformers import LlamaConfig
        from transformers.models.llama.modeling_llama import LlamaMLP, LlamaRotaryEmbedding

        lc = LlamaConfig(**{k: v for k, v in cfg.items() if k not in ("architectures", "model_type")})
        H, eps = cfg["hidden_size"], cfg["rms_norm_eps"]
        self.nh, self.nkv, self.hd = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"]
        self.fc = nn.Linear(n_aux * H, H, bias=False)
        self.input_layernorm = RMSNorm(H, eps)
        self.hidden_norm = RMSNorm(H, eps)
        self.q_proj = nn.Linear(2 * H, self.nh * self.hd, bias=False)
        self.k_proj = nn.Linear(2 * H, self.nkv * self.hd, bias=False)
        self.v_proj = nn.Linear(2 * H, self.nkv * self.hd, bias=False)
        self.o_proj = nn.Linear(self.nh * self.hd, H, bias=False)
        self.post_attention_layernorm = RMSNorm(H, eps)
        self.mlp = LlamaMLP(lc)
        self.norm = RMSNorm(H, eps)
        self.rotary = LlamaRotaryEmbedding(lc)
        self.scale = self.hd ** -0.5

    def _qkv(self, emb, g, pos):
        from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

        x = torch.cat((self.input_layernorm(emb), self.hidden_norm(g)), -1)
        B, L, _ = x.shape
        q = self.q_proj(x).view(B, L, self.nh, self.hd).transpose(1, 2)
        k = self.k_proj(x).view(B, L, self.nkv, self.hd).transpose(1, 2)
        v = self.v_proj(x).view(B, L, self.nkv, self.hd).transpose(1, 2)
        cos, sin = self.rotary(x, pos)
        q, k = apply_rotary_pos_emb(q, k, cos, sin)
        rep = self.nh // self.nkv
        return q, k.repeat_interleave(rep, 1), v.repeat_interleave(rep, 1)

    def _finish(self, attn, g):
        B, h, L, hd = attn.shape
        r = self.o_proj(attn.transpose(1, 2).reshape(B, L, h * hd)) + g
        prenorm = self.mlp(self.post_attention_layernorm(r)) + r
        return self.norm(prenorm), prenorm

    def forward(self, aux: torch.Tensor, embs: list[torch.Tensor], pos: torch.Tensor) -> list[torch.Tensor]:
        """Normed outputs of draft steps ``1..len(embs)`` at every index (``[B, L, H]`` each)."""
        g = self.fc(aux)
        q1, k1, v1 = self._qkv(embs[0], g, pos)
        L = aux.shape[1]
        causal = torch.ones(L, L, dtype=torch.bool, device=aux.device).tril()
        out, prenorm = self._finish(F.scaled_dot_product_attention(q1, k1, v1, attn_mask=causal,
                                                                   scale=self.scale), g)
        outs = [out]
        chain_k, chain_v = [], []
        for s in range(1, len(embs)):
            qs, ks, vs = self._qkv(embs[s], prenorm, pos + s)
            chain_k.append(ks)
            chain_v.append(vs)
            sc_first = (qs @ k1.transpose(-1, -2)) * self.scale
            sc_first = sc_first.masked_fill(~causal, float("-inf"))
            sc_chain = torch.stack([(qs * kc).sum(-1) * self.scale for kc in chain_k], -1)
            p_all = torch.softmax(torch.cat((sc_first, sc_chain), -1), -1)
            o = p_all[..., :L] @ v1 + sum(p_all[..., L + i: L + i + 1] * vc for i, vc in enumerate(chain_v))
            out, prenorm = self._finish(o, prenorm)
            outs.append(out)
        return outs

    def state_dict_for_vllm(self) -> dict[str, torch.Tensor]:
        sd = {"fc.weight": self.fc.weight, "norm.weight": self.norm.weight}
        p = "layers.0."
        for n in ("q_proj", "k_proj", "v_proj", "o_proj"):
            sd[p + f"self_attn.{n}.weight"] = getattr(self, n).weight
        for n in ("input_layernorm", "hidden_norm", "post_attention_layernorm"):
            sd[p + f"{n}.weight"] = getattr(self, n).weight
        for n in ("gate_proj", "up_proj", "down_proj"):
            sd[p + f"mlp.{n}.weight"] = getattr(self.mlp, n).weight
        return sd

    def load_vllm_state(self, tensors: dict[str, torch.Tensor]) -> None:
        own = self.state_dict_for_vllm()
        with torch.no_grad():
            for k, p in own.items():
                p.copy_(tensors[k].float())


def draft_config(target_cfg: dict, dv: int, aux_layers: list[int], intermediate: int) -> dict:
    keep = ("hidden_size", "num_attention_heads", "num_key_value_heads", "head_dim", "rms_norm_eps", "vocab_size",
            "max_position_embeddings", "rope_theta", "rope_parameters", "rope_scaling", "hidden_act",
            "bos_token_id", "eos_token_id", "pad_token_id")
    cfg = {k: target_cfg[k] for k in keep if k in target_cfg}
    cfg.update(architectures=["LlamaForCausalLMEagle3"], model_type="llama", num_hidden_layers=1,
               intermediate_size=intermediate, draft_vocab_size=dv, target_hidden_size=target_cfg["hidden_size"],
               eagle_aux_hidden_state_layer_ids=list(aux_layers), tie_word_embeddings=False, attention_bias=False,
               mlp_bias=False, torch_dtype="float16")
    cfg["vllm_spec_plugin"] = "eagle"  # plain --spec-model selects the EAGLE plugin (it alone serves d2t sans lm_head)
    return cfg


def choose_vocab(data: HiddenData, seqs: list[int], vocab: int, coverage: float, cap: int
                 ) -> tuple[torch.Tensor, float]:
    counts = torch.zeros(vocab, dtype=torch.int64)
    for s in seqs:
        a, n, p = data.seq(s)
        counts += torch.bincount(data.targets[a + p - 1: a + n - 1], minlength=vocab)
    order = torch.argsort(counts, descending=True)
    cum = counts[order].cumsum(0).double() / counts.sum()
    need = int((cum < coverage).sum()) + 1
    dv = min(cap, int(math.ceil(need / 256) * 256))
    sel = torch.sort(order[:dv]).values
    return sel, float(cum[dv - 1])


def coverage_of(data: HiddenData, seqs: list[int], t2d: torch.Tensor) -> float:
    hit = tot = 0
    for s in seqs:
        a, n, p = data.seq(s)
        t = data.targets[a + p - 1: a + n - 1]
        hit += int(t2d[t].sum())
        tot += int(t.numel())
    return hit / max(tot, 1)


def load_batch(data: HiddenData, aux: np.ndarray, seqs: list[int], embed: torch.Tensor, t2d_id: torch.Tensor,
               steps: int):
    """``aux [B, L, nH]``, ``embs`` (step s: embed(token p+s)), ``labels [B, L, steps]`` (draft id of token p+s+1:
    IGNORE outside the answer, past the end, or -2 when outside the draft vocabulary), ``pos [B, L]``."""
    lens = [data.seq(s)[1] for s in seqs]
    L = max(lens) - 1
    B = len(seqs)
    A = torch.zeros(B, L, aux.shape[1])
    tok = torch.zeros(B, L + steps + 1, dtype=torch.int64)
    nxt = torch.zeros(B, L + steps + 1, dtype=torch.int64)  # nxt[t]: the target's greedy token t + 1
    valid = torch.zeros(B, L + steps + 1, dtype=torch.bool)
    prompt = torch.zeros(B, dtype=torch.int64)
    for i, s in enumerate(seqs):
        a, n, p = data.seq(s)
        A[i, : n - 1] = torch.from_numpy(np.asarray(aux[a: a + n - 1], dtype=np.float32))
        tok[i, :n] = data.tokens[a: a + n]
        nxt[i, 1: n] = data.targets[a: a + n - 1]
        valid[i, :n] = True
        prompt[i] = p
    idx = torch.arange(L)
    embs = [embed[tok[:, s: s + L]] for s in range(1, steps + 1)]
    labels = []
    for s in range(1, steps + 1):
        t = nxt[:, s + 1: s + 1 + L]
        lab = t2d_id[t].clone()
        ok = valid[:, s + 1: s + 1 + L] & (idx[None, :] + s + 1 >= prompt[:, None])
        lab[~ok] = IGNORE
        labels.append(lab)
    return A, embs, torch.stack(labels, -1), idx[None, :].expand(B, L)


def train_loss(model: Eagle3Draft, A: torch.Tensor, embs: list[torch.Tensor], labels: torch.Tensor, pos: torch.Tensor,
               w_d: torch.Tensor, weights: list[float], sums: dict, bf16: bool = False) -> torch.Tensor:
    """Training-time test's loss for one batch (:func:`load_batch`): every unrolled step's cross entropy over the
    draft vocabulary, weighted by ``weights[s]``; adds step 1's summed CE, count and right answers to ``sums``
    (``loss``, ``n``, ``c1``). ``bf16``: the draft's forward and its logits under bfloat16 autocast (float32 weights,
    loss and gradients; on a CPU with AMX or AVX512-BF16 its matrix products run several times faster)."""
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
        outs = model(A, embs, pos)
    loss = torch.zeros(())
    for s, o in enumerate(outs):
        lab = labels[..., s]
        keep = lab >= 0  # inside the answer and the draft vocabulary
        if not bool(keep.any()):
            continue
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            logits = o[keep] @ w_d.T
        ce = F.cross_entropy(logits.float(), lab[keep])
        loss = loss + weights[s] * ce
        if s == 0:
            n1 = int(keep.sum())
            sums["loss"] += float(ce.detach()) * n1
            sums["n"] += n1
            sums["c1"] += int((logits.argmax(-1) == lab[keep]).sum())
    return loss


@torch.no_grad()
def evaluate(model: Eagle3Draft, data: HiddenData, aux: np.ndarray, seqs: list[int], embed, w_d, t2d_id,
             steps: int = 4, batch_tokens: int = 4096) -> dict:
    correct, n = [0] * steps, [0] * steps
    for b in make_batches(data, seqs, batch_tokens, None):
        A, embs, labels, pos = load_batch(data, aux, b, embed, t2d_id, steps)
        outs = model(A, embs, pos)
        for s, o in enumerate(outs):
            lab = labels[..., s]
            keep = lab != IGNORE
            pred = (o[keep] @ w_d.T).argmax(-1)
            correct[s] += int((pred == lab[keep]).sum())  # -2 (outside the draft vocabulary) never matches
            n[s] += int(keep.sum())
    res = {f"step{s + 1}_top1": round(c / max(v, 1), 4) for s, (c, v) in enumerate(zip(correct, n))}
    for k in (3, steps):
        res[f"expected_accepted_of_{k}"] = expected_accepted(res, k)
    return res


def evaluate_saved(draft: Path, data_dir: Path, steps: int = 4) -> dict:
    """Offline accuracy of a saved draft (``model.safetensors``, ``config.json``) on the answers in ``data_dir``."""
    from safetensors.torch import load_file

    from bench.smollm2 import ensure_smollm2

    W = load_lm_head(ensure_smollm2())
    cfg = json.loads((draft / "config.json").read_text())
    tensors = load_file(str(draft / "model.safetensors"))
    dv = int(tensors["d2t"].numel())
    sel = torch.arange(dv) + tensors["d2t"]
    t2d = torch.zeros(W.shape[0], dtype=torch.bool)
    t2d[sel] = True
    t2d_id = torch.full((W.shape[0],), -2, dtype=torch.int64)
    t2d_id[sel] = torch.arange(dv)
    model = Eagle3Draft(cfg, len(cfg["eagle_aux_hidden_state_layer_ids"]))
    model.load_vllm_state(tensors)
    data = load_hidden_data(data_dir, val_fraction=0.0)
    aux = np.load(data_dir / "aux_f16.npy", mmap_mode="r")
    seqs = list(range(data.num_seqs))
    return {"draft": str(draft), "data": str(data_dir), "sequences": len(seqs),
            "answer_tokens": int(data.offsets[-1] - data.prompt_lens.sum()),
            "draft_vocab_coverage": round(coverage_of(data, seqs, t2d), 4),
            **evaluate(model, data, aux, seqs, W, W[sel].contiguous(), t2d_id, steps)}


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--budget-min", type=float, default=27.0)
    ap.add_argument("--data-dir", type=Path, default=CACHE / "data3")
    ap.add_argument("--heldout-dir", type=Path, default=CACHE / "heldout3")
    ap.add_argument("--out", type=Path, default=CACHE / "smollm2-eagle3",
                    help="where to save the draft (default %(default)s; the shipped draft: bench/drafts/smollm2-eagle3)")
    ap.add_argument("--ttt-steps", type=int, default=3, help="draft steps unrolled per training example")
    ap.add_argument("--eval-steps", type=int, default=4)
    ap.add_argument("--vocab-coverage", type=float, default=1.0,
                    help="share of the train split's greedy answer tokens the draft vocabulary must cover (default: all "
                         "of them; 96 %% of them left only 90 %% of unseen answers covered)")
    ap.add_argument("--max-draft-vocab", type=int, default=8192)
    ap.add_argument("--intermediate-size", type=int, default=1024, help="draft MLP width (the target's: 1536)")
    ap.add_argument("--batch-tokens", type=int, default=4096)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--warmup", type=int, default=30)
    ap.add_argument("--clip", type=float, default=0.5)
    ap.add_argument("--max-epochs", type=int, default=40)
    ap.add_argument("--val-fraction", type=float, default=0.03)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--bf16", action="store_true",
                    help="forward and backward under bfloat16 autocast (float32 weights, optimizer and loss)")
    ap.add_argument("--init", type=Path, default=None,
                    help="continue training this saved draft (its weights, draft vocabulary and MLP width) instead of "
                         "starting from scratch")
    add_evaluation_options(ap, "bench.hidden --aux-layers")
    return ap


def main(argv: list[str] | None = None) -> None:
    args = parser().parse_args(argv)
    if evaluate_only(args, evaluate_saved):
        return
    budget = Budget(args.budget_min)
    seed_everything(args.seed)

    from bench.smollm2 import ensure_smollm2

    model_dir = ensure_smollm2()
    target_cfg = json.loads((model_dir / "config.json").read_text())
    W = load_lm_head(model_dir)  # [V, H], tied: also the embedding table
    V = W.shape[0]
    data = load_hidden_data(args.data_dir, args.val_fraction, args.seed)
    index = torch.load(args.data_dir / "hidden_index.pt")
    aux_layers = list(index["aux_layers"])
    if not aux_layers:
        raise SystemExit(f"{args.data_dir}: no aux hidden states; run bench.hidden with --aux-layers 2,15,27")
    aux = np.load(args.data_dir / "aux_f16.npy", mmap_mode="r")
    held = held_aux = None
    if (args.heldout_dir / "aux_f16.npy").is_file():
        held = load_hidden_data(args.heldout_dir, val_fraction=0.0)
        held_aux = np.load(args.heldout_dir / "aux_f16.npy", mmap_mode="r")
    held_seqs = list(range(held.num_seqs)) if held else []

    init = None
    if args.init is not None:  # continue from a saved draft: its weights and its draft vocabulary
        from safetensors.torch import load_file

        init = load_file(str(args.init / "model.safetensors"))
        init_cfg = json.loads((args.init / "config.json").read_text())
        if list(init_cfg["eagle_aux_hidden_state_layer_ids"]) != aux_layers:
            raise SystemExit(f"--init {args.init}: aux layers {init_cfg['eagle_aux_hidden_state_layer_ids']}, "
                             f"the data's are {aux_layers}")
        sel = torch.arange(init["d2t"].numel()) + init["d2t"]
        args.intermediate_size = int(init_cfg["intermediate_size"])
    else:
        sel, _ = choose_vocab(data, data.train_seqs, V, args.vocab_coverage, args.max_draft_vocab)
    dv = int(sel.numel())
    t2d = torch.zeros(V, dtype=torch.bool)
    t2d[sel] = True
    t2d_id = torch.full((V,), -2, dtype=torch.int64)
    t2d_id[sel] = torch.arange(dv)
    w_d = W[sel].contiguous()
    cov = coverage_of(data, data.train_seqs, t2d)
    cov_val = coverage_of(data, data.val_seqs, t2d)
    cov_held = coverage_of(held, held_seqs, t2d) if held else None
    print(f"draft vocabulary {dv} of {V}: covers {cov:.4f} of train answer tokens, {cov_val:.4f} val, "
          f"{cov_held} held-out | train {len(data.train_seqs)} seqs, val {len(data.val_seqs)}, held-out "
          f"{len(held_seqs)} | aux layers {aux_layers}")

    cfg = draft_config(target_cfg, dv, aux_layers, args.intermediate_size)
    model = Eagle3Draft(cfg, len(aux_layers))
    if init is not None:
        model.load_vllm_state(init)
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=args.lr, betas=(0.9, 0.95), weight_decay=0.0)
    gen = torch.Generator().manual_seed(args.seed)
    t0 = time.monotonic()
    history = [{"epoch": 0, **evaluate(model, data, aux, data.val_seqs, W, w_d, t2d_id, args.eval_steps)}]
    eval_s = time.monotonic() - t0
    steps_per_epoch = len(make_batches(data, data.train_seqs, args.batch_tokens, None))
    weights = [STEP_DECAY ** s for s in range(args.ttt_steps)]

    def step(b: list[int], sums: dict) -> None:
        loss = train_loss(model, *load_batch(data, aux, b, W, t2d_id, args.ttt_steps), w_d, weights, sums,
                          bf16=args.bf16)
        loss.backward()

    def plan(step_s: float) -> int:
        return int((budget.left() - 3 * eval_s - 30) / (step_s + eval_s / steps_per_epoch))

    loop = train_loop(
        desc="eagle3", opt=opt, budget=budget, lr=args.lr, warmup=args.warmup, steps_per_epoch=steps_per_epoch,
        max_epochs=args.max_epochs, batches=lambda epoch: make_batches(data, data.train_seqs, args.batch_tokens, gen),
        step=step, plan=plan, reserve=eval_s * 3 + 30, params=params, clip=args.clip, history=history,
        new_sums=lambda: {"loss": 0.0, "n": 0, "c1": 0},
        postfix=lambda m: {"ce1": f"{m['loss'] / max(m['n'], 1):.3f}", "acc1": f"{m['c1'] / max(m['n'], 1):.3f}"},
        record=lambda epoch, m: {"train_ce1": round(m["loss"] / max(m["n"], 1), 4),
                                 "train_step1_top1_in_vocab": round(m["c1"] / max(m["n"], 1), 4),
                                 **evaluate(model, data, aux, data.val_seqs, W, w_d, t2d_id, args.eval_steps)})
    step, stopped, total_steps, train_s = loop.steps, loop.stopped, loop.total_steps, loop.train_s

    from safetensors.torch import save_file

    tensors = {k: v.detach().to(torch.float16).contiguous() for k, v in model.state_dict_for_vllm().items()}
    tensors["d2t"] = (sel - torch.arange(dv)).to(torch.int64).contiguous()
    tensors["t2d"] = t2d
    args.out.mkdir(parents=True, exist_ok=True)
    save_file(tensors, args.out / "model.safetensors", metadata={"format": "pt"})
    write_json(args.out / "config.json", cfg)
    saved = Eagle3Draft(cfg, len(aux_layers))  # the saved float16 weights, as vLLM loads them (float32 model)
    saved.load_vllm_state(tensors)
    final_val = evaluate(saved, data, aux, data.val_seqs, W, w_d, t2d_id, args.eval_steps)
    final_train = evaluate(saved, data, aux, data.train_seqs[: len(data.val_seqs)], W, w_d, t2d_id, args.eval_steps)
    held_res = evaluate(saved, held, held_aux, held_seqs, W, w_d, t2d_id, args.eval_steps) if held else None
    evaluations = {name: evaluate_saved(args.out, path, args.eval_steps) for name, path in args.also_evaluate}
    n_tok = int(data.offsets[-1])
    report = {
        "command": command_line(),
        "target": "SmolLM2-135M-Instruct (GGUF Q4_1 dequantized to float32)",
        "data": {"dir": str(args.data_dir.relative_to(args.data_dir.parents[2])) if len(args.data_dir.parents) > 2
                 else str(args.data_dir), "sequences": data.num_seqs, "train_sequences": len(data.train_seqs),
                 "val_sequences": len(data.val_seqs), "tokens": n_tok,
                 "answer_tokens": int(n_tok - data.prompt_lens.sum()), "heldout_sequences": len(held_seqs)},
        "aux_layers": aux_layers,
        "draft_vocab": {"size": dv, "of": V, "coverage_train": round(cov, 4), "coverage_val": round(cov_val, 4),
                        "coverage_heldout": round(cov_held, 4) if cov_held is not None else None},
        "hyperparameters": {"ttt_steps": args.ttt_steps, "step_loss_weights": weights, "batch_tokens": args.batch_tokens,
                            "lr": args.lr, "betas": [0.9, 0.95], "warmup": args.warmup, "clip": args.clip,
                            "schedule": "linear warm-up, cosine to 10 %", "scheduled_steps": total_steps,
                            "intermediate_size": args.intermediate_size, "seed": args.seed, "bf16": args.bf16,
                            "init": str(args.init) if args.init else None},
        "epochs": history, "steps": step, "epochs_run": round(step / max(steps_per_epoch, 1), 2),
        "stopped_by_budget": stopped, "train_subset_saved_fp16": final_train, "val_saved_fp16": final_val,
        "heldout_prompts": held_res, "evaluations": evaluations,
        "train_wall_s": round(train_s, 1), "wall_s": round(budget.elapsed(), 1),
        "budget_min": args.budget_min,
        "files_bytes": {p.name: p.stat().st_size for p in sorted(args.out.glob("*.safetensors"))},
    }
    write_json(args.out / "train_report.json", report)
    print(json.dumps({"draft_vocab": report["draft_vocab"], "train_subset": final_train, "val": final_val,
                      "heldout_prompts": held_res, "evaluations": evaluations,
                      "epochs_run": report["epochs_run"], "wall_s": report["wall_s"]},
                     indent=1))


if __name__ == "__main__":
    main()
