"""Stage 1 of draft training: the target's own greedy answers to the train prompts (self-distillation data).

Runs vLLM's offline engine on the CPU (float32, eager, greedy, chat template with the generation prompt) and
keeps the queue full by stepping the engine itself, so the time budget is respected: new prompts stop being
added near the end of the budget, and when it runs out the answers still in flight are kept as they are (a
prefix of a greedy answer is still a greedy answer), marked ``finished: false``.

Output: ``.cache/bench/data/train.jsonl``, one line per prompt in prompt order:
``{"id", "family", "prompt", "prompt_ids", "answer_ids", "finished", "finish_reason"}``;
``prompt_ids`` are the chat-templated prompt tokens, ``answer_ids`` the generated tokens (ending with
``<|im_end|>`` when the answer finished). A summary goes to ``train.meta.json``.

    python -m bench.make_data [--budget-min 10] [--max-tokens 256] [--num-prompts 1200]
    python -m bench.make_data --split heldout --budget-min 2     # -> .cache/bench/heldout/heldout.jsonl
    python -m bench.make_data --prompts-jsonl .cache/bench/si/instructions.train.jsonl --generator-prompts 600 \
        --out .cache/bench/data3/train.jsonl        # self-instruct messages (bench.self_instruct) + the generator's
"""

from __future__ import annotations

import argparse
import json
import os
import random
import time
from pathlib import Path

from bench.common import CACHE, DATA, Budget, command_line, read_jsonl, write_json


def chat_prompt_ids(tokenizer, prompt: str) -> list[int]:
    """Token ids of the chat-templated user message plus the assistant generation prompt."""
    text = tokenizer.apply_chat_template([{"role": "user", "content": prompt}], add_generation_prompt=True,
                                         tokenize=False)
    return tokenizer(text, add_special_tokens=False)["input_ids"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--budget-min", type=float, default=10.0, help="wall-clock budget, engine start included")
    ap.add_argument("--max-tokens", type=int, default=256)
    ap.add_argument("--num-prompts", type=int, default=1200, help="size of the train split to draw from")
    ap.add_argument("--max-num-seqs", type=int, default=64)
    ap.add_argument("--split", choices=["train", "heldout"], default="train",
                    help="heldout: answers to bench.prompts.heldout_prompts() (offline evaluation of the drafts)")
    ap.add_argument("--out", type=Path, default=None,
                    help="default .cache/bench/data/train.jsonl, or .cache/bench/heldout/heldout.jsonl")
    ap.add_argument("--prompts-jsonl", type=Path, default=None,
                    help="user messages from this file ({'prompt', 'family'} per line, e.g. bench.self_instruct) "
                         "instead of the generator's")
    ap.add_argument("--prompt-set", choices=["chat", "sharegpt"], default=None,
                    help="instead of the generator's: the MT-Bench first turns (bench.run.chat_questions) or the "
                         "held-out ShareGPT first turns (bench.sharegpt.heldout_prompts); offline evaluation sets")
    ap.add_argument("--num-prompts-set", type=int, default=None, help="with --prompt-set: the first this many")
    ap.add_argument("--generator-prompts", type=int, default=0,
                    help="with --prompts-jsonl: mix in this many of the generator's prompts of the split")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    budget = Budget(args.budget_min)
    if args.out is None:
        args.out = DATA / "train.jsonl" if args.split == "train" else CACHE / "heldout" / "heldout.jsonl"

    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "2")
    from tqdm import tqdm
    from transformers import AutoTokenizer
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt

    from bench.prompts import heldout_families, heldout_prompts, train_families, train_prompts
    from bench.smollm2 import ensure_smollm2

    model = ensure_smollm2()
    tok = AutoTokenizer.from_pretrained(model)
    if args.prompt_set is not None:
        from bench.run import prompt_texts

        prompts = prompt_texts(args.prompt_set, args.num_prompts_set)
        families = [args.prompt_set] * len(prompts)
    elif args.prompts_jsonl is not None:
        recs = read_jsonl(args.prompts_jsonl)
        prompts, families = [r["prompt"] for r in recs], [r.get("family", "file") for r in recs]
        if args.generator_prompts:
            gen = (train_prompts, train_families) if args.split == "train" else (heldout_prompts, heldout_families)
            prompts += gen[0](args.generator_prompts)
            families += gen[1](args.generator_prompts)
        order = list(range(len(prompts)))
        random.Random(args.seed).shuffle(order)  # any prefix mixes both sources (the budget may stop early)
        prompts, families = [prompts[i] for i in order], [families[i] for i in order]
    elif args.split == "train":
        prompts, families = train_prompts(args.num_prompts), train_families(args.num_prompts)
    else:
        prompts, families = heldout_prompts(), heldout_families()
    prompt_ids = [chat_prompt_ids(tok, p) for p in prompts]

    llm = LLM(model=str(model), dtype="float32", enforce_eager=True, gpu_memory_utilization=0.3,
              max_model_len=1024, max_num_seqs=args.max_num_seqs, seed=args.seed, disable_log_stats=True)
    engine = llm.llm_engine
    params = SamplingParams(temperature=0.0, max_tokens=args.max_tokens, detokenize=False)
    t_start = time.monotonic()
    start_s = budget.elapsed()

    latest: dict[int, object] = {}   # prompt index -> last RequestOutput
    counted: dict[int, int] = {}     # prompt index -> answer tokens counted so far (outputs may be updated in place)
    done: set[int] = set()
    next_idx = 0
    in_flight = 0
    step_s = 0.3                    # running estimate of one engine step, for the drain estimate
    n_tokens = 0
    bar = tqdm(total=len(prompts), desc="make_data", unit="prompt")
    stopped_feeding_at = None
    while True:
        # keep a little more than one batch queued so the scheduler never starves
        drain_s = args.max_tokens * step_s * 0.6
        feeding = budget.left() > drain_s
        if not feeding and stopped_feeding_at is None:
            stopped_feeding_at = next_idx
        while feeding and next_idx < len(prompts) and in_flight < args.max_num_seqs + 8:
            engine.add_request(str(next_idx), TokensPrompt(prompt_token_ids=prompt_ids[next_idx]), params)
            next_idx += 1
            in_flight += 1
        if in_flight == 0 or budget.over():
            break
        t0 = time.monotonic()
        outs = engine.step()
        step_s = 0.9 * step_s + 0.1 * (time.monotonic() - t0)
        for out in outs:
            i = int(out.request_id)
            latest[i] = out
            n = len(out.outputs[0].token_ids)
            n_tokens += n - counted.get(i, 0)
            counted[i] = n
            if out.finished:
                done.add(i)
                in_flight -= 1
                bar.update(1)
        bar.set_postfix(tok=n_tokens, tok_s=f"{n_tokens / max(time.monotonic() - t_start, 1e-6):.0f}",
                        left=f"{budget.left():.0f}s")
    bar.close()
    unfinished = [str(i) for i in latest if i not in done]
    if engine.has_unfinished_requests():
        engine.abort_request([str(i) for i in range(next_idx) if i not in done])

    args.out.parent.mkdir(parents=True, exist_ok=True)
    tmp = args.out.with_suffix(".jsonl.tmp")
    n_kept = n_prompt_tok = n_answer_tok = 0
    with open(tmp, "w") as f:
        for i in sorted(latest):
            comp = latest[i].outputs[0]
            ids = list(comp.token_ids)
            if len(ids) < 8:  # an answer cut after a few tokens teaches nothing
                continue
            rec = {"id": i, "family": families[i], "prompt": prompts[i], "prompt_ids": prompt_ids[i],
                   "answer_ids": ids, "finished": i in done, "finish_reason": comp.finish_reason}
            f.write(json.dumps(rec) + "\n")
            n_kept += 1
            n_prompt_tok += len(prompt_ids[i])
            n_answer_tok += len(ids)
    os.replace(tmp, args.out)
    gen_s = time.monotonic() - t_start
    meta = {"command": command_line(), "split": args.prompt_set or args.split, "model": str(model),
            "prompts_available": len(prompts),
            "prompts_submitted": next_idx, "sequences": n_kept, "finished": len(done),
            "cut_at_budget": len(unfinished), "prompt_tokens": n_prompt_tok, "answer_tokens": n_answer_tok,
            "max_tokens": args.max_tokens, "max_num_seqs": args.max_num_seqs, "engine_start_s": round(start_s, 1),
            "generate_s": round(gen_s, 1), "answer_tok_per_s": round(n_tokens / gen_s, 1),
            "wall_s": round(budget.elapsed(), 1), "budget_min": args.budget_min}
    write_json(args.out.with_suffix(".meta.json"), meta)
    print(json.dumps(meta, indent=2))


if __name__ == "__main__":
    main()
