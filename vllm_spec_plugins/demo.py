"""``python -m vllm_spec_plugins.demo``: the installed package at work, with no model to download.

Builds a deterministic tiny random Llama target and a Medusa draft for it on the spot, runs
real vLLM without speculation and with ``speculative_config={"model": DRAFT, ...}`` (served
by the ``medusa`` plugin from ``vllm-spec-medusa``), and checks that the greedy outputs are
identical token for token, that drafts were accepted, and which plugin served the draft.
The text is gibberish (random weights); the checks are the real ones. Runs anywhere the
package and ``vllm-spec-medusa`` are installed (it imports nothing from a repository).

The real-model demo (SmolLM2-135M-Instruct with the drafts trained in this repository,
speed side by side) needs the repository's ``bench/`` and lives there: ``make demo``
(``python -m bench.demo``).
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path
from typing import Any

TINY_PROMPTS = ["hello world, hello world", "abcabcabc", "The quick brown fox", "1, 2, 3, 4,"]


def served_by(log: str) -> str:
    m = re.search(r"vllm_spec_plugins: draft '.*' served by plugin .*", log)
    return m.group(0) if m else "NOT served by a vllm-spec-plugins plugin"


def lookup_line(log: str) -> str:
    """Whether prompt-lookup drafts ran beside the plugin's (``VLLM_SPEC_PLUGINS_PROMPT_LOOKUP``), from the engine's
    log: the acceptance printed counts both."""
    if re.search(r"vllm_spec_plugins: VLLM_SPEC_PLUGINS_PROMPT_LOOKUP=\S+( \(the default\))?: prompt-lookup drafts", log):
        return ("prompt lookup: on beside the draft (each request takes whichever paid; the acceptance above counts "
                "both; VLLM_SPEC_PLUGINS_PROMPT_LOOKUP=off for the draft alone)")
    m = re.search(r"vllm_spec_plugins: no prompt-lookup drafts beside .*?: (.*?)(\. VLLM_SPEC_PLUGINS_PROMPT_LOOKUP=on|$)",
                  log, re.M)
    return f"prompt lookup: off ({m.group(1)})" if m else "prompt lookup: off"


def print_acceptance(spec: dict[str, Any]) -> None:
    drafts, proposed, accepted = spec.get("drafts", 0), spec.get("draft_tokens", 0), spec.get("accepted", 0)
    print(f"drafts: {drafts} steps, {proposed} tokens proposed, {accepted} accepted "
          f"(mean acceptance length {1 + accepted / max(drafts, 1):.2f})")
    print("acceptance per position: " + ", ".join(
        f"{i + 1}: {a / max(drafts, 1):.0%}" for i, a in enumerate(spec.get("accepted_per_pos", []))))


def tiny(args: argparse.Namespace) -> int:
    from .testing.engine import run_engine
    from .testing.fixtures import make_tiny_medusa, make_tiny_target

    root = Path(args.dir)
    target = make_tiny_target(root / "tiny-target")
    draft = make_tiny_medusa(root / "tiny-medusa", target, num_heads=max(3, args.spec_tokens))
    print(f"target: {target} (random 2-layer Llama, byte tokenizer)\ndraft:  {draft} (Medusa)\n")
    print("running vLLM without speculation ...", flush=True)
    base = run_engine(target, text_prompts=TINY_PROMPTS, max_tokens=args.max_tokens)
    print("running vLLM with --spec-model (Medusa plugin; prompt lookup off, so every draft is the plugin's) ...",
          flush=True)
    spec = run_engine(target, text_prompts=TINY_PROMPTS, max_tokens=args.max_tokens,
                      speculative_config={"model": str(draft), "num_speculative_tokens": args.spec_tokens},
                      env={"VLLM_SPEC_PLUGINS_PROMPT_LOOKUP": "off"})
    print()
    for p, a, b in zip(TINY_PROMPTS, base.texts, spec.texts):
        print(f"prompt {p!r}\n  no speculation: {a!r}\n  with Medusa:    {b!r}\n")
    same = base.outputs == spec.outputs
    print(f"outputs identical (token ids): {same}")
    print_acceptance(spec.metrics)
    print(served_by(spec.log))
    return 0 if same and spec.metrics.get("accepted", 0) > 0 else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m vllm_spec_plugins.demo", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tiny", action="store_true", help="accepted for compatibility: this demo is always tiny")
    parser.add_argument("--dir", default=".demo", help="where the tiny checkpoints are built (default .demo)")
    parser.add_argument("--max-tokens", type=int, default=48)
    parser.add_argument("--spec-tokens", type=int, default=3)
    return tiny(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
