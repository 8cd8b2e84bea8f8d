"""``make demo``: real vLLM with a plugin drafter vs. no speculation, side by side.

With no download: builds a deterministic tiny Llama target and a Medusa draft for it
(under ``.demo/``), runs vLLM's CPU engine without speculation and with the draft
served by our ``medusa`` plugin, and prints both outputs, whether they are
identical, drafts proposed, acceptance per position and which plugin served the draft.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

PROMPTS = ["hello world, hello world", "abcabcabc", "The quick brown fox", "1, 2, 3, 4,"]


def _served_by(log: str) -> str:
    m = re.search(r"vllm_spec_plugins: draft '.*' served by plugin .*", log)
    return m.group(0) if m else "NOT served by a vllm-spec-plugins plugin"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m vllm_spec_plugins.demo", description=__doc__)
    parser.add_argument("--tiny", action="store_true", help="the tiny built-in target (the default for now)")
    parser.add_argument("--dir", default=".demo", help="where to build the checkpoints (default .demo)")
    parser.add_argument("--max-tokens", type=int, default=48)
    parser.add_argument("--spec-tokens", type=int, default=3)
    args = parser.parse_args(argv)

    from .testing.engine import run_engine
    from .testing.fixtures import make_tiny_medusa, make_tiny_target

    root = Path(args.dir)
    target = make_tiny_target(root / "tiny-target")
    draft = make_tiny_medusa(root / "tiny-medusa", target, num_heads=max(3, args.spec_tokens))
    print(f"target: {target} (random 2-layer Llama, byte tokenizer)\ndraft:  {draft} (Medusa, 3 heads)\n")
    print("running vLLM without speculation ...", flush=True)
    base = run_engine(target, text_prompts=PROMPTS, max_tokens=args.max_tokens)
    print("running vLLM with --spec-model (Medusa plugin) ...", flush=True)
    spec = run_engine(target, text_prompts=PROMPTS, max_tokens=args.max_tokens,
                      speculative_config={"model": str(draft), "num_speculative_tokens": args.spec_tokens})
    print()
    for p, a, b in zip(PROMPTS, base.texts, spec.texts):
        print(f"prompt {p!r}\n  no speculation: {a!r}\n  with Medusa:    {b!r}\n")
    same = base.outputs == spec.outputs
    m = spec.metrics
    drafts, proposed, accepted = m.get("drafts", 0), m.get("draft_tokens", 0), m.get("accepted", 0)
    print(f"outputs identical (token ids): {same}")
    print(f"drafts: {drafts} steps, {proposed} tokens proposed, {accepted} accepted "
          f"(mean acceptance length {1 + accepted / max(drafts, 1):.2f})")
    per_pos = m.get("accepted_per_pos", [])
    print("acceptance per position: " + ", ".join(
        f"{i + 1}: {a}/{drafts} ({a / max(drafts, 1):.0%})" for i, a in enumerate(per_pos)))
    print(_served_by(spec.log))
    print(f"engine wall time (incl. start): no speculation {base.seconds:.1f} s, with Medusa {spec.seconds:.1f} s")
    return 0 if same and accepted > 0 else 1


if __name__ == "__main__":
    sys.exit(main())
