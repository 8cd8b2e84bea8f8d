"""Stage 0 of draft training: varied user instructions written by the target itself (self-instruct, no download).

The first drafts learnt our prompt generator (bench/prompts.py), not the model: offline accuracy on held-out
generator prompts was far above what vLLM measured on ordinary chat questions. This stage asks SmolLM2 to
write the user messages, over thousands of topics and a few dozen kinds of request:

* topics are English words taken from the target's own tokenizer vocabulary (whole-word tokens with a leading
  space: thousands of nouns, verbs and adjectives; nothing is downloaded);
* kinds of request (``TASKS``) range from trivia, advice and how-to to stories, e-mails, code, math word problems,
  role play and extraction from a text the user supplies;
* SmolLM2 writes one user message per (topic, kind) pair, continuing three examples (``EXAMPLES``, few-shot),
  sampled (temperature 0.9, top-p 0.95), through vLLM at a
  high batch size; the answers come later, greedily (``bench.make_data --prompts-jsonl``).

Splits share nothing: topics and kinds of request are each split once by a hash of their text; the held-out split
pairs only held-out topics with held-out kinds. Cleaning: the message only (no "User:" or quotes), 20-600
characters, de-duplicated on normalised text and on the first eight words, and any message sharing an 8-word
sequence with the benchmark's chat questions (bench/data/mt_bench_question.jsonl) is dropped.

Output: ``.cache/bench/si/instructions.{train,heldout}.jsonl`` (``{"prompt", "family", "topic"}``; family is
``si:<kind>``) and ``instructions.meta.json``.

    python -m bench.self_instruct [--budget-min 9] [--train 2000] [--heldout 100]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import re
import time
from pathlib import Path

from bench.common import CACHE, REPO, Budget, command_line, write_json

OUT = CACHE / "si"
CHAT_QUESTIONS = REPO / "bench" / "data" / "mt_bench_question.jsonl"

# (kind, how the user message should look). Held out by hash: see split_of().
TASKS = [
    ("trivia", "a short factual question"),
    ("explain", "a request to explain something in simple words"),
    ("explain-child", "a request to explain something to a young child"),
    ("howto", "a practical how-to question"),
    ("advice", "a request for personal advice about a problem they have"),
    ("compare", "a question comparing two things"),
    ("pros-cons", "a request for the pros and cons of something"),
    ("list", "a request for a list of ideas or examples"),
    ("define", "a request to define a word or concept"),
    ("story", "a request to write a short story"),
    ("poem", "a request to write a short poem"),
    ("email", "a request to write an email or a letter"),
    ("essay", "a request to write a short essay or blog post"),
    ("summary", "a request to summarize a short paragraph that the user includes in the message"),
    ("rewrite", "a request to rewrite or improve a sentence that the user includes in the message"),
    ("extract", "a request to extract names, dates or numbers from a short text the user includes"),
    ("classify", "a request to classify or sort a few items the user lists"),
    ("math", "a math word problem"),
    ("reasoning", "a logic puzzle or a reasoning question"),
    ("python", "a request to write a small Python function"),
    ("code-explain", "a question about how some programming concept works"),
    ("recipe", "a cooking or recipe question"),
    ("travel", "a travel planning question"),
    ("health", "a question about health, sleep or exercise"),
    ("money", "a question about saving money or personal finance"),
    ("history", "a history question"),
    ("science", "a science question"),
    ("opinion", "a question asking for an opinion or recommendation"),
    ("roleplay", "a request for the assistant to play a character and answer in that role"),
    ("plan", "a request for a step-by-step plan or schedule"),
    ("brainstorm", "a request to brainstorm names, slogans or titles"),
    ("dialogue", "a request to write a short dialogue between two people"),
    ("translate", "a request to translate a sentence into another language"),
    ("quiz", "a request to create quiz questions"),
    ("product", "a request to describe or review a product"),
    ("career", "a question about work, study or careers"),
]

# Few-shot completion (not the chat template): asked in chat form, SmolLM2-135M answers the request instead of
# writing one ("I'm ready to help!"). Each request shows three of these examples, drawn at random.
EXAMPLES = [
    ("bicycle", "a practical how-to question", "How do I fix a flat tire on my bike if I don't have a repair kit?"),
    ("ocean", "a science question", "Why is the ocean salty but rivers are not?"),
    ("grandmother", "a request to write an email or a letter",
     "Write a short thank-you letter to my grandmother for the sweater she knitted me."),
    ("garden", "a request for a list of ideas or examples", "Give me five vegetables that are easy to grow on a balcony."),
    ("interview", "a request for personal advice about a problem they have",
     "I get very nervous before job interviews and forget what I wanted to say. What can I do?"),
    ("sorting", "a request to write a small Python function",
     "Write a Python function that sorts a list of names by their last letter."),
    ("train", "a math word problem",
     "A train leaves at 9:40 and the trip takes 2 hours and 35 minutes. When does it arrive?"),
    ("castle", "a request to write a short story", "Tell me a short story about a dragon who is afraid of the dark."),
    ("coffee", "a question comparing two things", "What is the difference between espresso and filter coffee?"),
    ("meeting", "a request to summarize a short paragraph that the user includes in the message",
     "Summarize this: Our team met on Monday to discuss the new website. We agreed to finish the design by "
     "Friday, and Anna will write the texts. The launch is planned for the end of the month."),
    ("pirate", "a request for the assistant to play a character and answer in that role",
     "Pretend you are a pirate captain and tell me about your favourite treasure."),
    ("recycling", "a request for the pros and cons of something", "What are the pros and cons of recycling plastic?"),
]
EXAMPLE_HEADER = "Here are messages that users sent to an AI assistant.\n\n"
EXAMPLE_FORMAT = "Topic: {topic}\nKind of message: {kind}\nMessage: {message}\n\n"


def meta_prompt(rng: random.Random, topic: str, kind: str) -> str:
    shots = rng.sample(EXAMPLES, 3)
    text = EXAMPLE_HEADER + "".join(EXAMPLE_FORMAT.format(topic=t, kind=k, message=m) for t, k, m in shots)
    return text + f"Topic: {topic}\nKind of message: {kind}\nMessage:"


HELDOUT_TOPIC_FRACTION = 0.15
HELDOUT_TASKS = 6  # whole kinds of request never seen in training


def _h(text: str) -> float:
    return int(hashlib.sha256(text.encode()).hexdigest()[:8], 16) / 16**8


def split_tasks() -> tuple[list, list]:
    ranked = sorted(TASKS, key=lambda t: _h("task:" + t[0]))
    return ranked[HELDOUT_TASKS:], ranked[:HELDOUT_TASKS]


def topic_words(tokenizer) -> list[str]:
    """Whole English words of the target's vocabulary (``Ġword`` tokens), sorted, without duplicates."""
    words = set()
    for tok in tokenizer.get_vocab():
        if not tok.startswith("Ġ"):
            continue
        w = tok[1:]
        if 5 <= len(w) <= 14 and w.isalpha() and w.isascii() and w.islower():
            words.add(w)
    return sorted(words)


def split_topics(words: list[str]) -> tuple[list[str], list[str]]:
    held = [w for w in words if _h("topic:" + w) < HELDOUT_TOPIC_FRACTION]
    return [w for w in words if _h("topic:" + w) >= HELDOUT_TOPIC_FRACTION], held


_PREFIX = re.compile(r"^\s*(\*\*)?(user('s)? message|user|message|question|request|prompt)\s*(\*\*)?\s*[:\-]\s*",
                     re.I)


def clean(text: str) -> str | None:
    """The user message from a sampled completion, or None when it is unusable."""
    t = text.strip()
    t = _PREFIX.sub("", t).strip()
    if len(t) >= 2 and t[0] in "\"'“" and t[-1] in "\"'”":
        t = t[1:-1].strip()
    if not (20 <= len(t) <= 600) or "assistant" in t.lower()[:40] or "kind of message" in t.lower():
        return None
    if sum(c.isalpha() for c in t) < 0.6 * len(t):
        return None
    return t


def _norm(t: str) -> str:
    return " ".join(re.findall(r"[a-z0-9]+", t.lower()))


def ngrams(t: str, n: int = 8) -> set[tuple[str, ...]]:
    w = _norm(t).split()
    return {tuple(w[i: i + n]) for i in range(len(w) - n + 1)}


def chat_question_ngrams() -> set:
    out: set = set()
    if CHAT_QUESTIONS.is_file():
        for line in CHAT_QUESTIONS.read_text().splitlines():
            if line.strip():
                for turn in json.loads(line)["turns"]:
                    out |= ngrams(turn)
    return out


class Dedup:
    def __init__(self, banned: set) -> None:
        self.seen: set[str] = set()
        self.heads: set[str] = set()
        self.banned = banned
        self.dropped = {"duplicate": 0, "chat_question_overlap": 0}

    def keep(self, t: str) -> bool:
        n = _norm(t)
        head = " ".join(n.split()[:8])
        if n in self.seen or head in self.heads:
            self.dropped["duplicate"] += 1
            return False
        if ngrams(t) & self.banned:
            self.dropped["chat_question_overlap"] += 1
            return False
        self.seen.add(n)
        self.heads.add(head)
        return True


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--budget-min", type=float, default=9.0, help="wall-clock budget, engine start included")
    ap.add_argument("--train", type=int, default=2000, help="train instructions wanted")
    ap.add_argument("--heldout", type=int, default=100, help="held-out instructions wanted")
    ap.add_argument("--max-tokens", type=int, default=72)
    ap.add_argument("--max-num-seqs", type=int, default=128)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out-dir", type=Path, default=OUT)
    args = ap.parse_args()
    budget = Budget(args.budget_min)

    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "2")
    from transformers import AutoTokenizer
    from vllm import LLM, SamplingParams

    from bench.smollm2 import ensure_smollm2

    model = ensure_smollm2()
    tok = AutoTokenizer.from_pretrained(model)
    words = topic_words(tok)
    train_topics, held_topics = split_topics(words)
    train_tasks, held_tasks = split_tasks()
    rng = random.Random(args.seed)
    # 25 % more requests than wanted: some completions are unusable or duplicates
    jobs = []
    for split, topics, tasks, n in (("heldout", held_topics, held_tasks, args.heldout),
                                    ("train", train_topics, train_tasks, args.train)):
        for i in range(int(n * 1.25) + 8):
            jobs.append((split, rng.choice(topics), tasks[i % len(tasks)]))
    rng.shuffle(jobs)
    print(f"{len(words)} topic words ({len(train_topics)} train / {len(held_topics)} held out), "
          f"{len(TASKS)} kinds ({len(held_tasks)} held out: {[t[0] for t in held_tasks]}); {len(jobs)} requests")

    llm = LLM(model=str(model), dtype="float32", enforce_eager=True, gpu_memory_utilization=0.3,
              max_model_len=1024, max_num_seqs=args.max_num_seqs, seed=args.seed, disable_log_stats=True)
    from vllm.inputs import TokensPrompt

    params = SamplingParams(temperature=0.9, top_p=0.95, max_tokens=args.max_tokens, stop=["\n\n", "\nTopic:"])
    engine = llm.llm_engine
    dedup = Dedup(chat_question_ngrams())
    kept: dict[str, list[dict]] = {"train": [], "heldout": []}
    wanted = {"train": args.train, "heldout": args.heldout}
    unusable = 0
    next_job = 0
    in_flight = 0
    t0 = time.monotonic()
    n_tok = 0
    while True:
        feeding = budget.left() > 25
        while feeding and next_job < len(jobs) and in_flight < args.max_num_seqs + 16:
            split, topic, (kind, desc) = jobs[next_job]
            if len(kept[split]) < wanted[split]:
                ids = tok(meta_prompt(rng, topic, desc), add_special_tokens=False)["input_ids"]
                # no per-request seed: vLLM's CPU sampler rejects it; the engine seed makes a run repeatable
                engine.add_request(str(next_job), TokensPrompt(prompt_token_ids=ids), params)
                in_flight += 1
            next_job += 1
        if in_flight == 0 or budget.over():
            break
        for out in engine.step():
            if not out.finished:
                continue
            in_flight -= 1
            j = int(out.request_id)
            split, topic, (kind, _) = jobs[j]
            comp = out.outputs[0]
            n_tok += len(comp.token_ids)
            text = clean(comp.text) if comp.finish_reason == "stop" else None
            if text is None:
                unusable += 1
                continue
            if len(kept[split]) < wanted[split] and dedup.keep(text):
                kept[split].append({"prompt": text, "family": "si:" + kind, "topic": topic})
        if all(len(kept[s]) >= wanted[s] for s in kept) and in_flight == 0:
            break
    if engine.has_unfinished_requests():
        engine.abort_request([str(j) for j in range(next_job)])
    args.out_dir.mkdir(parents=True, exist_ok=True)
    for split, recs in kept.items():
        with open(args.out_dir / f"instructions.{split}.jsonl", "w") as f:
            for r in recs:
                f.write(json.dumps(r) + "\n")
    meta = {"command": command_line(), "topic_words": len(words), "train_topics": len(train_topics),
            "heldout_topics": len(held_topics), "kinds": len(TASKS), "heldout_kinds": [t[0] for t in held_tasks],
            "requests_sent": next_job, "unusable": unusable, **{f"dropped_{k}": v for k, v in dedup.dropped.items()},
            "train": len(kept["train"]), "heldout": len(kept["heldout"]), "generated_tokens": n_tok,
            "generate_s": round(time.monotonic() - t0, 1), "wall_s": round(budget.elapsed(), 1),
            "budget_min": args.budget_min}
    write_json(args.out_dir / "instructions.meta.json", meta)
    print(json.dumps(meta, indent=2))
    for r in kept["train"][:12]:
        print("-", r["family"], "|", r["prompt"][:160].replace("\n", " "))


if __name__ == "__main__":
    main()
