"""Stage 2 of draft training: the target's final normed hidden states for every position of the train data.

``LlamaForCausalLM.model(input_ids).last_hidden_state`` (after the final RMSNorm, float32 compute) is what
vLLM hands drafters: the first attempt (bench/README.md) found it reproduces vLLM's greedy tokens at 100 % of positions.
Sequences are prompt + answer from ``train.jsonl``; they are processed in groups (original order), sorted by
length inside a group and right-padded (causal attention: padding at the end never reaches a real token, so
no mask is needed). When the budget runs out, the groups done so far are kept.

Output in ``.cache/bench/data/``:

* ``hidden_f16.npy``: float16 ``[num_positions, hidden_size]``, sequences back to back;
* ``hidden_index.pt``: ``{"ids", "offsets" [S+1], "prompt_lens" [S], "tokens" int32 [num_positions],
  "greedy" int32 [num_positions], ...}`` where sequence ``s`` occupies rows ``offsets[s]:offsets[s+1]``, its first
  ``prompt_lens[s]`` tokens the chat-templated prompt, and ``greedy[t] = argmax(lm_head(h_t))`` is the target's own
  greedy next token after position ``t`` (float32, as vLLM serves it): what the drafts learn to predict (from the
  last prompt position on; earlier prompt positions hold 0, no trainer reads them). On the
  target's own greedy answers it equals token ``t + 1``; on a prefill of other text (``bench.prefill_data``) it is
  what the target would have said there.

With ``--aux-layers 2,15,27`` it also writes ``aux_f16.npy`` float16 ``[num_positions, len(layers) * hidden_size]``:
the residual stream entering each listed decoder layer (``output_hidden_states[i]``, before any norm), which is
what vLLM's Llama hands an EAGLE-3 draft (``aux_hidden_states`` taken before layer ``i``; vLLM's default layers for a
30-layer target are 2, 15 and 27).

``--bf16`` runs the target's forward under bfloat16 autocast (AVX512-BF16: about 1.8x the float32 rate on this
CPU), for a prefill of many positions; the greedy tokens are still taken with a float32 lm_head. Measured on 4096
ShareGPT positions, they agree with the float32 forward's at 99.7 % of positions.

It also measures ``greedy_reproduction``: the share of answer positions where ``greedy[t] == token_{t+1}``
(100 % on the target's own greedy answers: the check that these hidden states are vLLM's; on real replies, how
often the reply says what the target would).

``--resume`` continues a prefill its budget stopped: the sequences already in ``--out-dir`` are kept (checked to be
the first ones of ``--data``, with the same ``--aux-layers`` and ``--bf16``) and the prefill goes on from the next;
when they are all there, nothing is done.

    python -m bench.hidden [--budget-min 7] [--batch-tokens 4096] [--aux-layers 2,15,27] [--resume]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

from bench.common import DATA, Budget, command_line, read_jsonl, seed_everything, write_json


def load_hidden(data_dir: Path = DATA) -> tuple[np.ndarray, dict]:
    """``(hidden [N, H] float16 memmap, index)`` as written by this stage."""
    import torch

    index = torch.load(data_dir / "hidden_index.pt")
    hidden = np.load(data_dir / "hidden_f16.npy", mmap_mode="r")
    return hidden, index


def _keep_prefix(tmp: Path, out: Path, n_pos: int) -> None:
    """Move the memmap ``tmp`` to ``out``, keeping only its first ``n_pos`` rows (the budget may stop early)."""
    full = np.load(tmp, mmap_mode="r")
    if n_pos == full.shape[0]:
        del full
        tmp.replace(out)
        return
    part = np.lib.format.open_memmap(out, mode="w+", dtype=np.float16, shape=(n_pos, full.shape[1]))
    part[:] = full[:n_pos]
    part.flush()
    del full, part
    tmp.unlink()


def _copy_rows(dst: np.ndarray, src: np.ndarray, n: int, chunk: int = 1 << 18) -> None:
    """``dst[:n] = src[:n]``, ``chunk`` rows at a time (memmaps of millions of rows, never all in memory)."""
    for c in range(0, n, chunk):
        dst[c: min(c + chunk, n)] = src[c: min(c + chunk, n)]


def resumable(out_dir: Path, recs: list[dict], aux_layers: list[int], bf16: bool) -> int:
    """How many of ``recs`` (in order) the prefill in ``out_dir`` already holds; raises ``SystemExit`` naming what
    differs when that prefill is not of these records with these settings (nothing there: 0)."""
    import torch

    meta_path, index_path = out_dir / "hidden_meta.json", out_dir / "hidden_index.pt"
    if not index_path.exists():
        return 0
    where = f"--resume: the prefill in {out_dir}"
    meta = json.loads(meta_path.read_text()) if meta_path.exists() else {}
    index = torch.load(index_path)
    if list(index["aux_layers"]) != aux_layers:
        raise SystemExit(f"{where} has --aux-layers {list(index['aux_layers'])}, this run {aux_layers}: "
                         "pass the same layers, or a new --out-dir")
    if bool(meta.get("bf16")) != bf16:
        raise SystemExit(f"{where} ran {'with' if meta.get('bf16') else 'without'} --bf16, this run "
                         f"{'with' if bf16 else 'without'}: pass the same, or a new --out-dir")
    done = len(index["ids"])
    ids = [r["id"] for r in recs[:done]]
    if done > len(recs) or index["ids"].tolist() != ids:
        raise SystemExit(f"{where} holds {done} sequences that are not the first {done} of --data "
                         f"(was --data changed?): prefill into a new --out-dir, or remove {out_dir}")
    lens = [len(r["prompt_ids"]) + len(r["answer_ids"]) for r in recs[:done]]
    if index["offsets"].tolist() != np.concatenate([[0], np.cumsum(lens, dtype=np.int64)]).tolist():
        raise SystemExit(f"{where} has other sequence lengths than the first {done} of --data "
                         f"(was --data changed?): prefill into a new --out-dir, or remove {out_dir}")
    return done


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--budget-min", type=float, default=7.0)
    ap.add_argument("--data", type=Path, default=DATA / "train.jsonl")
    ap.add_argument("--out-dir", type=Path, default=DATA)
    ap.add_argument("--batch-tokens", type=int, default=4096, help="padded tokens per forward pass")
    ap.add_argument("--group", type=int, default=64, help="sequences per length-sorted group")
    ap.add_argument("--bf16", action="store_true", help="the forward under bfloat16 autocast (about 1.8x faster)")
    ap.add_argument("--aux-layers", default="", help="comma-separated decoder layer indices (EAGLE-3 inputs)")
    ap.add_argument("--resume", action="store_true",
                    help="keep the sequences already prefilled in --out-dir and go on from the next")
    return ap


def main(argv: list[str] | None = None) -> None:
    args = parser().parse_args(argv)
    aux_layers = [int(x) for x in args.aux_layers.split(",") if x.strip()]
    budget = Budget(args.budget_min)
    seed_everything(0)

    import torch
    from tqdm import tqdm
    from transformers import AutoModelForCausalLM

    from bench.smollm2 import ensure_smollm2

    torch.use_deterministic_algorithms(True, warn_only=True)
    model = AutoModelForCausalLM.from_pretrained(ensure_smollm2(), dtype=torch.float32).eval()
    hsize = model.config.hidden_size
    recs = read_jsonl(args.data)
    start = resumable(args.out_dir, recs, aux_layers, args.bf16) if args.resume else 0
    if start == len(recs):
        print(f"--resume: all {start} sequences of {args.data} are already prefilled in {args.out_dir}")
        return
    seqs = [r["prompt_ids"] + r["answer_ids"] for r in recs]
    plens = [len(r["prompt_ids"]) for r in recs]
    total = sum(len(s) for s in seqs)
    args.out_dir.mkdir(parents=True, exist_ok=True)
    out_path = args.out_dir / "hidden_f16.npy"
    tmp_path = args.out_dir / "hidden_f16.tmp.npy"
    hidden = np.lib.format.open_memmap(tmp_path, mode="w+", dtype=np.float16, shape=(total, hsize))
    aux_path, aux_tmp = args.out_dir / "aux_f16.npy", args.out_dir / "aux_f16.tmp.npy"
    aux = np.lib.format.open_memmap(aux_tmp, mode="w+", dtype=np.float16, shape=(total, len(aux_layers) * hsize)) \
        if aux_layers else None
    offsets = np.zeros(len(seqs) + 1, dtype=np.int64)
    np.cumsum([len(s) for s in seqs], out=offsets[1:])

    greedy = np.zeros(total, dtype=np.int32)
    done_seqs = start
    if start:  # the rows already prefilled, copied into the new files
        kept = int(offsets[start])
        old_hidden, old_index = load_hidden(args.out_dir)
        _copy_rows(hidden, old_hidden, kept)
        greedy[:kept] = old_index["greedy"].numpy()
        if aux is not None:
            old_aux = np.load(out_path.with_name("aux_f16.npy"), mmap_mode="r")
            _copy_rows(aux, old_aux, kept)
            del old_aux
        del old_hidden, old_index
        print(f"--resume: {start} sequences ({kept} positions) kept from {args.out_dir}")
    bar = tqdm(total=total, initial=int(offsets[start]), desc="hidden", unit="tok")
    t0 = time.monotonic()
    stopped = False
    with torch.inference_mode():
        for g0 in range(start, len(seqs), args.group):
            if budget.over():
                stopped = True
                break
            group = sorted(range(g0, min(g0 + args.group, len(seqs))), key=lambda i: -len(seqs[i]))
            batches, cur = [], []
            for i in group:  # longest first: a batch's padded size is len(first) * count
                if cur and len(seqs[cur[0]]) * (len(cur) + 1) > args.batch_tokens:
                    batches.append(cur)
                    cur = []
                cur.append(i)
            batches.append(cur)
            for b in batches:
                L = len(seqs[b[0]])
                ids = torch.full((len(b), L), 2, dtype=torch.long)  # right padding: never attended by real tokens
                for row, i in enumerate(b):
                    ids[row, : len(seqs[i])] = torch.tensor(seqs[i])
                with torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.bf16):
                    out = model.model(input_ids=ids, output_hidden_states=bool(aux_layers))
                h = out.last_hidden_state.float()  # [B, L, H], after the final norm
                # greedy tokens from the last prompt position on (earlier ones are never a label): float32 lm_head
                ans = torch.cat([h[row, plens[i] - 1: len(seqs[i])] for row, i in enumerate(b)])
                g = torch.cat([model.lm_head(ans[c: c + 1024]).argmax(-1) for c in range(0, len(ans), 1024)])
                g_at = 0
                a = torch.cat([out.hidden_states[i].float() for i in aux_layers], -1) if aux_layers else None
                for row, i in enumerate(b):
                    n = len(seqs[i])
                    hidden[offsets[i]: offsets[i] + n] = h[row, :n].numpy().astype(np.float16)
                    p = plens[i]
                    greedy[offsets[i] + p - 1: offsets[i] + n] = g[g_at: g_at + n - p + 1].numpy()
                    g_at += n - p + 1
                    if aux is not None:
                        aux[offsets[i]: offsets[i] + n] = a[row, :n].numpy().astype(np.float16)
                    bar.update(n)
            done_seqs = g0 + len(group)
            bar.set_postfix(seqs=done_seqs, left=f"{budget.left():.0f}s")
    bar.close()
    hidden.flush()
    n_pos = int(offsets[done_seqs])
    del hidden
    _keep_prefix(tmp_path, out_path, n_pos)
    if aux is not None:
        aux.flush()
        del aux
        _keep_prefix(aux_tmp, aux_path, n_pos)
    tokens = np.concatenate([np.asarray(s, dtype=np.int32) for s in seqs[:done_seqs]]) if done_seqs else \
        np.zeros(0, dtype=np.int32)
    match = n_check = 0
    for i in range(done_seqs):  # answer positions: does the text say what the target would?
        a, p, n = int(offsets[i]), plens[i], len(seqs[i])
        match += int((greedy[a + p - 1: a + n - 1] == tokens[a + p: a + n]).sum())
        n_check += n - p
    index = {
        "ids": torch.tensor([r["id"] for r in recs[:done_seqs]]),
        "offsets": torch.from_numpy(offsets[: done_seqs + 1].copy()),
        "prompt_lens": torch.tensor(plens[:done_seqs]),
        "finished": torch.tensor([bool(r["finished"]) for r in recs[:done_seqs]]),
        "tokens": torch.from_numpy(tokens),
        "greedy": torch.from_numpy(greedy[:n_pos].copy()),
        "hidden_size": hsize,
        "aux_layers": aux_layers,
    }
    torch.save(index, args.out_dir / "hidden_index.pt")
    wall = time.monotonic() - t0
    meta = {"command": command_line(), "sequences": done_seqs, "sequences_available": len(seqs),
            "positions": n_pos, "stopped_by_budget": stopped, "resumed_from_sequences": start,
            "tok_per_s": round((n_pos - int(offsets[start])) / max(wall, 1e-6), 1),
            "aux_layers": aux_layers, "bf16": args.bf16, "greedy_reproduction": round(match / max(n_check, 1), 5),
            "greedy_checked_positions": n_check,
            "file_mb": round(n_pos * hsize * 2 / 2**20, 1), "wall_s": round(budget.elapsed(), 1)}
    write_json(args.out_dir / "hidden_meta.json", meta)
    print(json.dumps(meta, indent=2))


if __name__ == "__main__":
    main()
