"""Stage 3b: train an EAGLE-1 draft for the target by self-distillation (the SafeAILab recipe).

Draft: ``fc: Linear(2H -> H, bias)`` on ``cat(embed(token_{t+1}), hidden_t)``, then one Llama decoder layer with
the target's dimensions WITHOUT input_layernorm and WITHOUT a final norm; its output goes straight to the
target's frozen, shared lm_head (embeddings shared too; neither is saved). This is exactly what vLLM runs:
``hidden_t`` is the target's FINAL NORMED hidden state, the draft's ``h + residual`` feeds the lm_head, and
the next draft step feeds the draft's own output back as the hidden state (position ``t + 1``).

Training on whole sequences with causal attention (transformers' ``LlamaDecoderLayer`` and
``LlamaRotaryEmbedding``, so RoPE matches vLLM's Llama layer), draft position ``p`` reads ``hidden_p`` and the
token ``p + 1`` at RoPE position ``p``. Loss on positions whose targets lie in the answer:
``smooth_l1(pred_p, hidden_{p+1}) + w_cls * CE(lm_head(pred_p), token_{p+2})``, with uniform noise added to the
input hidden states (EAGLE's robustness trick for feeding its own outputs back).

Reported offline (held-out 5 % of the train sequences, float32 lm_head as served):

* ``step1_top1``: ``argmax lm_head(pred_p) == token_{p+2}``, the first draft token;
* ``step2_top1`` / ``step3_top1``: the next draft steps as vLLM runs them (inputs: the previous step's output
  and the true next token, attention over the first-pass keys plus the earlier steps' own keys), i.e. the
  acceptance of draft position k given that positions < k were accepted.

Output (EAGLE authors' layout, for ``vllm-spec-eagle``), ``--out`` (default ``.cache/bench/smollm2-eagle/``; the shipped
draft is ``bench/drafts/smollm2-eagle/``, written by ``make drafts``): ``config.json``
(the target's Llama config with one layer, float16, and ``"vllm_spec_plugin": "eagle"`` so that plain
``--spec-model`` selects the EAGLE plugin) and ``model.safetensors`` (float16 ``fc.*``,
``layers.0.self_attn.{q,k,v,o}_proj.weight``, ``layers.0.mlp.{gate,up,down}_proj.weight``,
``layers.0.post_attention_layernorm.weight``), and ``train_report.json``.

Draft vocabulary (``--draft-vocab-from DRAFT``): the saved draft also holds ``d2t``/``t2d``, the draft vocabulary of
another draft of the same target (the EAGLE-3 draft's: the most frequent greedy answer tokens of its training split).
The EAGLE plugin then drafts from the target lm_head's rows of those tokens alone, a quarter of the full head's cost
in every draft pass; training is unchanged, and the offline figures after training are the vocabulary's, as served.
``--add-draft-vocab DRAFT`` gives a saved draft that vocabulary without training.

    python -m bench.train_eagle [--budget-min 15] [--heldout-dir .cache/bench/heldout]
    python -m bench.train_eagle --evaluate bench/drafts/smollm2-eagle --heldout-dir .cache/bench/chat
    python -m bench.train_eagle --add-draft-vocab DRAFT --draft-vocab-from bench/drafts/smollm2-eagle3
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from bench.common import (
    CACHE,
    DATA,
    DRAFT_VOCAB,
    Budget,
    add_evaluation_options,
    command_line,
    evaluate_only,
    seed_everything,
    write_json,
)
from bench.draft_data import (
    IGNORE,
    HiddenData,
    chunked_ce_grad,
    draft_vocab_of,
    expected_accepted,
    load_hidden_data,
    load_lm_head,
    vocab_ids,
)
from bench.trainloop import train_loop


def draft_config(target_cfg: dict):

    cfg = dict(target_cfg)
    for k in ("quantization_config", "_name_or_path", "_model_name_or_path", "transformers_version",
              "id2label", "label2id"):
        cfg.pop(k, None)
    cfg.update(num_hidden_layers=1, architectures=["LlamaForCausalLM"], model_type="llama", torch_dtype="float16",
               use_cache=True)
    # A plain Llama config cannot say it is an EAGLE draft: the stamp names the plugin that serves it,
    # so `--spec-model bench/drafts/smollm2-eagle` works without "method" (vllm_spec_plugins.checkpoint.CONFIG_STAMP).
    cfg["vllm_spec_plugin"] = "eagle"
    return cfg


class EagleDraft(nn.Module):
    def __init__(self, cfg_dict: dict) -> None:
        super().__init__()
        from transformers import LlamaConfig
        from transformers.models.llama.modeling_llama import LlamaDecoderLayer, LlamaRotaryEmbedding

        cfg = LlamaConfig(**{k: v for k, v in cfg_dict.items() if k not in ("architectures", "model_type")})
        cfg._attn_implementation = "sdpa"
        self.cfg = cfg
        h = cfg.hidden_size
        self.fc = nn.Linear(2 * h, h, bias=True)
        self.layer = LlamaDecoderLayer(cfg, layer_idx=0)
        self.layer.input_layernorm = nn.Identity()  # EAGLE-1: no input norm on the first draft layer
        self.rotary = LlamaRotaryEmbedding(cfg)

    def forward(self, emb: torch.Tensor, hid: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        """``[B, L, H]`` embeddings of token p+1 and hidden states at p -> predicted hidden at p+1 (causal)."""
        x = self.fc(torch.cat((emb, hid), dim=-1))
        pe = self.rotary(x, pos)
        return self.layer(x, attention_mask=None, position_ids=pos, position_embeddings=pe)

    # -- later draft steps, as vLLM runs them (evaluation only) ----------------------------------------------
    def _qkv(self, x: torch.Tensor, pe):
        from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

        att = self.layer.self_attn
        b, L, _ = x.shape
        hd = att.head_dim
        q = att.q_proj(x).view(b, L, -1, hd).transpose(1, 2)
        k = att.k_proj(x).view(b, L, -1, hd).transpose(1, 2)
        v = att.v_proj(x).view(b, L, -1, hd).transpose(1, 2)
        q, k = apply_rotary_pos_emb(q, k, *pe)
        rep = q.shape[1] // k.shape[1]
        return q, k.repeat_interleave(rep, 1), v.repeat_interleave(rep, 1)

    @torch.no_grad()
    def multi_step(self, emb_next: list[torch.Tensor], hid: torch.Tensor, pos: torch.Tensor, steps: int
                   ) -> list[torch.Tensor]:
        """Outputs of draft steps 1..steps for every start position.

        ``emb_next[s]`` is ``embed(token_{p+1+s})`` at index p (the token fed at step s+1, teacher-forced: the
        earlier drafts were accepted). Step ``k`` (1-based) at index ``p`` is the draft position ``p + k - 1``;
        it attends the first-pass keys of positions ``<= p`` and its own chain's keys of steps 2..k.
        """
        att = self.layer.self_attn
        pe = self.rotary(hid, pos)
        x1 = self.fc(torch.cat((emb_next[0], hid), dim=-1))
        q1, k1, v1 = self._qkv(x1, pe)
        L = hid.shape[1]
        causal = torch.ones(L, L, dtype=torch.bool).tril()
        outs = [self._finish(x1, F.scaled_dot_product_attention(q1, k1, v1, attn_mask=causal, scale=att.scaling))]
        chain_k, chain_v = [], []
        prev = outs[0]
        for s in range(1, steps):
            # step s+1 at index p sits at position p + s: shift the chain's RoPE positions by s
            pe_s = self.rotary(hid, pos + s)
            xs = self.fc(torch.cat((emb_next[s], prev), dim=-1))
            qs, ks, vs = self._qkv(xs, pe_s)
            chain_k.append(ks)
            chain_v.append(vs)
            scale = att.scaling
            sc_first = (qs @ k1.transpose(-1, -2)) * scale                    # [B, h, L, L] first-pass keys <= p
            sc_first = sc_first.masked_fill(~causal, float("-inf"))
            sc_chain = torch.stack([(qs * kc).sum(-1) * scale for kc in chain_k], dim=-1)  # [B, h, L, s]
            p_all = torch.softmax(torch.cat((sc_first, sc_chain), dim=-1), dim=-1)
            o = p_all[..., :L] @ v1 + sum(p_all[..., L + i: L + i + 1] * vc for i, vc in enumerate(chain_v))
            prev = self._finish(xs, o)
            outs.append(prev)
        return outs

    def _finish(self, x: torch.Tensor, attn: torch.Tensor) -> torch.Tensor:
        att = self.layer.self_attn
        b, h, L, hd = attn.shape
        h1 = x + att.o_proj(attn.transpose(1, 2).reshape(b, L, h * hd))
        return h1 + self.layer.mlp(self.layer.post_attention_layernorm(h1))


def make_batches(data: HiddenData, seqs: list[int], batch_tokens: int, gen: torch.Generator | None
                 ) -> list[list[int]]:
    """Groups of sequences of about ``batch_tokens`` padded tokens (similar lengths together)."""
    order = list(seqs)
    if gen is not None:
        order = [order[i] for i in torch.randperm(len(order), generator=gen).tolist()]
    batches = []
    for g0 in range(0, len(order), 256):  # sort by length within shuffled groups
        grp = sorted(order[g0: g0 + 256], key=lambda s: -data.seq(s)[1])
        cur: list[int] = []
        for s in grp:
            if cur and data.seq(cur[0])[1] * (len(cur) + 1) > batch_tokens:
                batches.append(cur)
                cur = []
            cur.append(s)
        if cur:
            batches.append(cur)
    if gen is not None:
        batches = [batches[i] for i in torch.randperm(len(batches), generator=gen).tolist()]
    return batches


def load_batch(data: HiddenData, seqs: list[int], embed: torch.Tensor, extra_steps: int = 0):
    """Tensors for sequences ``seqs`` (right-padded to the longest minus one draft position).

    Returns ``emb_next`` (list over steps of ``[B, L, H]``: embedding of token p+1+s), ``hid`` ``[B, L, H]``
    (hidden at p), ``target_hid`` ``[B, L, H]`` (hidden at p+1), ``labels`` ``[B, L, 1 + extra_steps]``
    (token p+2+s; IGNORE outside the answer or past the end), ``pos`` ``[B, L]``, ``mask`` ``[B, L]`` (loss
    positions: target hidden p+1 exists and token p+2 is an answer token).
    """
    lens = [data.seq(s)[1] for s in seqs]
    L = max(lens) - 1
    B = len(seqs)
    H = embed.shape[1]
    hid = torch.zeros(B, L + 1, H)
    tok = torch.zeros(B, L + 2 + extra_steps, dtype=torch.int64)
    nxt = torch.zeros(B, L + 2 + extra_steps, dtype=torch.int64)  # nxt[t]: the target's greedy token t + 1
    valid_tok = torch.zeros(B, L + 2 + extra_steps, dtype=torch.bool)
    prompt = torch.zeros(B, dtype=torch.int64)
    for i, s in enumerate(seqs):
        a, n, p = data.seq(s)
        hid[i, :n] = torch.from_numpy(np.asarray(data.hidden[a: a + n], dtype=np.float32))
        tok[i, :n] = data.tokens[a: a + n]
        nxt[i, 1: n] = data.targets[a: a + n - 1]
        valid_tok[i, :n] = True
        prompt[i] = p
    idx = torch.arange(L)
    emb_next = [embed[tok[:, 1 + s: 1 + s + L]] for s in range(1 + extra_steps)]
    labels = []
    for s in range(1 + extra_steps):
        lab = nxt[:, 2 + s: 2 + s + L].clone()
        ok = valid_tok[:, 2 + s: 2 + s + L] & (idx[None, :] + 2 + s >= prompt[:, None])
        lab[~ok] = IGNORE
        labels.append(lab)
    mask = valid_tok[:, 1: 1 + L] & (idx[None, :] + 2 >= prompt[:, None])  # hidden p+1 exists, p+2 in answer
    pos = idx[None, :].expand(B, L)
    return emb_next, hid[:, :L], hid[:, 1: L + 1], torch.stack(labels, -1), pos, mask


@torch.no_grad()
def evaluate(model: EagleDraft, data: HiddenData, seqs: list[int], embed: torch.Tensor, w: torch.Tensor,
             steps: int = 3, batch_tokens: int = 4096, vocab: torch.Tensor | None = None) -> dict:
    """Top-1 per draft step on the answer tokens of ``seqs``. ``vocab``: the target ids of a draft vocabulary (as
    ``d2t`` serves it: the argmax over ``w``'s rows of those ids alone; a token outside it is never drafted)."""
    if vocab is not None:
        w = w[vocab].contiguous()
        in_vocab = torch.zeros(embed.shape[0], dtype=torch.bool)
        in_vocab[vocab] = True
    covered = 0
    correct = [0] * steps
    valid = [0] * steps
    vloss_sum, n_mask = 0.0, 0
    for b in make_batches(data, seqs, batch_tokens, None):
        emb_next, hid, tgt, labels, pos, mask = load_batch(data, b, embed, extra_steps=steps - 1)
        outs = model.multi_step(emb_next, hid, pos, steps)
        vloss_sum += float(F.smooth_l1_loss(outs[0][mask], tgt[mask], reduction="none").mean(-1).sum())
        n_mask += int(mask.sum())
        for s, o in enumerate(outs):
            lab = labels[..., s]
            keep = lab != IGNORE
            pred = (o[keep] @ w.T).argmax(-1)
            if vocab is not None:
                pred = vocab[pred]
                covered += int(in_vocab[lab[keep]].sum()) if s == 0 else 0
            correct[s] += int((pred == lab[keep]).sum())
            valid[s] += int(keep.sum())
    res = {f"step{s + 1}_top1": round(c / max(v, 1), 4) for s, (c, v) in enumerate(zip(correct, valid))}
    if vocab is not None:  # the share of step-1 labels the draft vocabulary holds (the most step 1 can get right)
        res["draft_vocab_coverage"] = round(covered / max(valid[0], 1), 4)
    res["vloss"] = round(vloss_sum / max(n_mask, 1), 4)
    # expected accepted draft tokens per step with `steps` drafts (chain of conditional acceptances)
    res[f"expected_accepted_of_{steps}"] = expected_accepted(res, steps)
    return res


def saved_tensors(model: EagleDraft, vocab: dict[str, torch.Tensor] | None = None) -> dict[str, torch.Tensor]:
    """The draft's weights in EAGLE authors' layout, float16 (embed_tokens and lm_head are the target's: not saved),
    and a draft vocabulary's ``d2t``/``t2d`` as they are."""
    sd = {"fc.weight": model.fc.weight, "fc.bias": model.fc.bias}
    lay = model.layer
    for n in ("q_proj", "k_proj", "v_proj", "o_proj"):
        sd[f"layers.0.self_attn.{n}.weight"] = getattr(lay.self_attn, n).weight
    for n in ("gate_proj", "up_proj", "down_proj"):
        sd[f"layers.0.mlp.{n}.weight"] = getattr(lay.mlp, n).weight
    sd["layers.0.post_attention_layernorm.weight"] = lay.post_attention_layernorm.weight
    return {**{k: v.detach().to(torch.float16).contiguous() for k, v in sd.items()}, **(vocab or {})}


def load_saved(cfg: dict, tensors: dict[str, torch.Tensor]) -> EagleDraft:
    """An :class:`EagleDraft` holding saved weights (EAGLE authors' layout), in float32 as vLLM loads them (a draft
    vocabulary's tensors are not weights: :func:`vocab_ids` reads them)."""
    model = EagleDraft(cfg)
    own = dict(model.named_parameters())
    names = {k: "layer." + k[len("layers.0."):] if k.startswith("layers.0.") else k for k in tensors
             if k not in DRAFT_VOCAB}
    unknown, missing = sorted(k for k, n in names.items() if n not in own), sorted(set(own) - set(names.values()))
    if unknown or missing:
        raise SystemExit(f"not an EAGLE-1 draft as bench.train_eagle writes it: unexpected tensors {unknown}, "
                         f"missing {missing}")
    with torch.no_grad():
        for k, n in names.items():
            own[n].copy_(tensors[k].float())
    return model


def evaluate_saved(draft: Path, data_dir: Path, steps: int = 3) -> dict:
    """Offline accuracy of a saved draft (``model.safetensors``, ``config.json``) on the answers in ``data_dir``."""
    from safetensors.torch import load_file

    from bench.smollm2 import ensure_smollm2

    w = load_lm_head(ensure_smollm2())
    tensors = load_file(str(draft / "model.safetensors"))
    model = load_saved(json.loads((draft / "config.json").read_text()), tensors)
    vocab = vocab_ids(tensors) if "d2t" in tensors else None
    data = load_hidden_data(data_dir, val_fraction=0.0)
    seqs = list(range(data.num_seqs))
    return {"draft": str(draft), "data": str(data_dir), "sequences": len(seqs),
            "answer_tokens": int(data.offsets[-1] - data.prompt_lens.sum()),
            "draft_vocab": None if vocab is None else int(vocab.numel()),
            **evaluate(model, data, seqs, w, w, steps, vocab=vocab)}


def add_draft_vocab(draft: Path, source: Path) -> dict:
    """Give the saved draft ``draft`` the draft vocabulary of ``source`` (its ``d2t``/``t2d``), weights unchanged; the
    report's ``draft_vocab`` says where it came from. Returns that entry."""
    from safetensors.torch import load_file, save_file

    vocab = draft_vocab_of(source)
    f = draft / "model.safetensors"
    tensors = {k: v for k, v in load_file(str(f)).items() if k not in DRAFT_VOCAB}
    cfg = json.loads((draft / "config.json").read_text())
    load_saved(cfg, tensors)  # refuses what is not an EAGLE-1 draft
    if vocab["t2d"].numel() != cfg["vocab_size"]:
        raise SystemExit(f"--draft-vocab-from {source}: its t2d covers {vocab['t2d'].numel()} tokens, but {draft} drafts "
                         f"for a target of vocab_size {cfg['vocab_size']}: a draft vocabulary of another target")
    save_file({**tensors, **vocab}, str(f), metadata={"format": "pt"})
    entry = {"from": str(source), "size": int(vocab["d2t"].numel())}
    report = draft / "train_report.json"
    if report.is_file():
        write_json(report, {**json.loads(report.read_text()), "draft_vocab": entry,
                            "files_bytes": {p.name: p.stat().st_size for p in sorted(draft.glob("*.safetensors"))}})
    return entry


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--budget-min", type=float, default=15.0)
    ap.add_argument("--batch-tokens", type=int, default=4096, help="padded positions per optimizer step")
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--weight-decay", type=float, default=0.0)
    ap.add_argument("--warmup", type=int, default=40)
    ap.add_argument("--clip", type=float, default=0.5)
    ap.add_argument("--w-cls", type=float, default=0.1, help="weight of the token cross entropy")
    ap.add_argument("--noise", type=float, default=0.1, help="half-width of the uniform input-hidden noise")
    ap.add_argument("--max-epochs", type=int, default=40)
    ap.add_argument("--eval-steps", type=int, default=3)
    ap.add_argument("--val-fraction", type=float, default=0.05)
    ap.add_argument("--data-dir", type=Path, default=DATA)
    ap.add_argument("--heldout-dir", type=Path, default=CACHE / "heldout")
    ap.add_argument("--out", type=Path, default=CACHE / "smollm2-eagle",
                    help="where to save the draft (default %(default)s; the shipped draft: bench/drafts/smollm2-eagle)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--draft-vocab-from", type=Path, default=None, metavar="DRAFT",
                    help="save the draft with the draft vocabulary (d2t, t2d) of DRAFT, a draft of the same target "
                         "(the EAGLE-3 draft's); the offline figures after training are then the vocabulary's")
    ap.add_argument("--add-draft-vocab", type=Path, default=None, metavar="DRAFT",
                    help="no training: give the saved draft DRAFT the draft vocabulary of --draft-vocab-from")
    add_evaluation_options(ap)
    return ap


def main(argv: list[str] | None = None) -> None:
    ap = parser()
    args = ap.parse_args(argv)
    if args.add_draft_vocab is not None:
        if args.draft_vocab_from is None:
            ap.error("--add-draft-vocab needs --draft-vocab-from DRAFT")
        print(json.dumps(add_draft_vocab(args.add_draft_vocab, args.draft_vocab_from)))
        return
    if evaluate_only(args, evaluate_saved):
        return
    vocab = draft_vocab_of(args.draft_vocab_from) if args.draft_vocab_from is not None else None
    budget = Budget(args.budget_min)
    seed_everything(args.seed)
    torch.use_deterministic_algorithms(True, warn_only=True)

    from bench.smollm2 import ensure_smollm2

    model_dir = ensure_smollm2()
    target_cfg = json.loads((model_dir / "config.json").read_text())
    cfg = draft_config(target_cfg)
    w = load_lm_head(model_dir)                 # tied: also the embedding table
    embed = w
    w16 = w.to(torch.bfloat16)
    data = load_hidden_data(args.data_dir, args.val_fraction, args.seed)
    n_train_pos = sum(max(data.seq(s)[1] - max(data.seq(s)[2] - 2, 0) - 2, 0) for s in data.train_seqs)
    print(f"train: {len(data.train_seqs)} seqs (~{n_train_pos} loss positions) | val: {len(data.val_seqs)} seqs")
    heldout = load_hidden_data(args.heldout_dir, val_fraction=0.0) \
        if (args.heldout_dir / "hidden_index.pt").is_file() else None

    model = EagleDraft(cfg)
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=args.lr, betas=(0.9, 0.95), weight_decay=args.weight_decay)
    gen = torch.Generator().manual_seed(args.seed)
    noise_gen = torch.Generator().manual_seed(args.seed + 1)
    history = []
    t0 = time.monotonic()
    history.append({"epoch": 0, **evaluate(model, data, data.val_seqs, embed, w, args.eval_steps)})
    eval_s = time.monotonic() - t0
    print("epoch 0 (random init):", history[-1])
    steps_per_epoch = len(make_batches(data, data.train_seqs, args.batch_tokens, None))

    def step(b: list[int], sums: dict) -> None:  # regression on the next hidden state + next-token CE
        emb_next, hid, tgt, labels, pos, mask = load_batch(data, b, embed)
        if args.noise > 0:
            hid = hid + (torch.rand(hid.shape, generator=noise_gen) - 0.5) * (2 * args.noise)
        pred = model(emb_next[0], hid, pos)
        nm = max(int(mask.sum()), 1)
        vloss = F.smooth_l1_loss(pred[mask], tgt[mask], reduction="none").mean(-1).sum() / nm
        flat = pred[mask]
        lab = labels[..., 0][mask]
        g, ls, c, v = chunked_ce_grad(flat.detach(), w16, lab)
        torch.autograd.backward([vloss, flat], [None, g * (args.w_cls / max(v, 1))])
        sums["vloss"] += float(vloss) * nm
        sums["ploss"] += ls
        sums["correct"] += c
        sums["n"] += v

    def plan(step_s: float) -> int:
        return int((budget.left() - eval_s) / (steps_per_epoch * step_s + eval_s) * steps_per_epoch)

    def mean(m: dict, key: str) -> float:
        return m[key] / max(m["n"], 1)

    loop = train_loop(
        desc="eagle", opt=opt, budget=budget, lr=args.lr, warmup=args.warmup, steps_per_epoch=steps_per_epoch,
        max_epochs=args.max_epochs, batches=lambda epoch: make_batches(data, data.train_seqs, args.batch_tokens, gen),
        step=step, plan=plan, reserve=eval_s * 1.5 + 10, params=params, clip=args.clip, history=history,
        new_sums=lambda: {"vloss": 0.0, "ploss": 0.0, "correct": 0, "n": 0},
        postfix=lambda m: {"vloss": f"{mean(m, 'vloss'):.3f}", "ploss": f"{mean(m, 'ploss'):.3f}",
                           "acc": f"{mean(m, 'correct'):.3f}"},
        record=lambda epoch, m: {"train_vloss": round(mean(m, "vloss"), 4), "train_ploss": round(mean(m, "ploss"), 4),
                                 "train_step1_top1": round(mean(m, "correct"), 4),
                                 **evaluate(model, data, data.val_seqs, embed, w, args.eval_steps)})
    step, stopped, total_steps, train_s = loop.steps, loop.stopped, loop.total_steps, loop.train_s

    # ---- save (EAGLE authors' layout; embed_tokens and lm_head shared with the target) ----
    from safetensors.torch import save_file

    tensors = saved_tensors(model, vocab)
    args.out.mkdir(parents=True, exist_ok=True)
    save_file(tensors, args.out / "model.safetensors", metadata={"format": "pt"})
    write_json(args.out / "config.json", cfg)
    saved = load_saved(cfg, tensors)  # the saved float16 weights, as vLLM loads them (into a float32 model)
    ids = vocab_ids(vocab)
    final_val = evaluate(saved, data, data.val_seqs, embed, w, args.eval_steps, vocab=ids)
    heldout_res = evaluate(saved, heldout, list(range(heldout.num_seqs)), embed, w, args.eval_steps, vocab=ids) \
        if heldout else None
    if heldout_res:
        print("held-out prompts:", heldout_res)
    evaluations = {name: evaluate_saved(args.out, path, args.eval_steps) for name, path in args.also_evaluate}
    n_tok = int(data.offsets[-1])
    report = {
        "command": command_line(),
        "target": "SmolLM2-135M-Instruct (GGUF Q4_1 dequantized to float32)",
        "data": {"sequences": data.num_seqs, "train_sequences": len(data.train_seqs),
                 "val_sequences": len(data.val_seqs), "tokens": n_tok,
                 "answer_tokens": int(n_tok - data.prompt_lens.sum()), "train_loss_positions": n_train_pos},
        "label": "draft position p reads (embed(token p+1), hidden p) at RoPE position p; "
                 "targets hidden p+1 (smooth L1) and token p+2 (CE)",
        "hyperparameters": {"batch_tokens": args.batch_tokens, "lr": args.lr, "betas": [0.9, 0.95],
                            "weight_decay": args.weight_decay, "warmup": args.warmup, "clip": args.clip,
                            "w_cls": args.w_cls, "noise_uniform_half_width": args.noise,
                            "schedule": "linear warm-up, cosine to 10 %", "scheduled_steps": total_steps,
                            "lm_head_training_precision": "bf16 GEMM", "seed": args.seed},
        "epochs": history, "steps": step, "epochs_run": round(step / steps_per_epoch, 2),
        "stopped_by_budget": stopped, "val_saved_fp16": final_val, "heldout_prompts": heldout_res,
        "heldout_prompts_sequences": heldout.num_seqs if heldout else None, "evaluations": evaluations,
        "draft_vocab": None if vocab is None else {"from": str(args.draft_vocab_from), "size": int(ids.numel())},
        "train_wall_s": round(train_s, 1), "wall_s": round(budget.elapsed(), 1), "budget_min": args.budget_min,
        "files_bytes": {p.name: p.stat().st_size for p in sorted(args.out.glob("*.safetensors"))},
    }
    write_json(args.out / "train_report.json", report)
    print(json.dumps({"val_saved_fp16": final_val, "heldout_prompts": heldout_res,
                      "epochs_run": report["epochs_run"], "wall_s": report["wall_s"]}))


if __name__ == "__main__":
    main()
