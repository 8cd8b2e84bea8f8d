"""What telling a heads drafter the step's k saves (API 3 ``num_drafts``), measured side by side.

The drafting policy may verify ``k < K`` drafts in a step. Before API 3 a heads drafter computed all
``K`` heads (each a full-vocabulary logits call for Medusa) and the core dropped the extra columns; now
its forward is told ``num_drafts=k`` and stops there. Each row is one in-process engine (SmolLM2-135M,
the shipped Medusa draft, K=4 heads, ``VLLM_SPEC_PLUGINS_POLICY=k`` so every step drafts k), timed as
``bench.overhead`` times it: the draft model's forward and the whole drafting call per step (median ms).
"told" is the shipped plugin; "not told" is the same plugin with ``num_drafts`` withheld (every head
runs). The rows alternate, and the ratio compares the two of one k in the same run.

    python -m bench.step_k [--quick] [--concurrency N]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from bench.overhead import _child

ROOT = Path(__file__).resolve().parent.parent
K = 4


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.step_k", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="2 prompts of 48 tokens (default: 4 of 128)")
    ap.add_argument("--concurrency", type=int, default=1)
    ap.add_argument("--ks", default="1,2,4", help="pinned k values (default: 1,2,4)")
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "out")
    args = ap.parse_args(argv)
    from bench.run import DRAFTS, held_out_prompt_ids
    from bench.smollm2 import ensure_smollm2

    target = ensure_smollm2()
    n, max_tokens = (2, 48) if args.quick else (4, 128)
    n = max(n, 2 * args.concurrency) if args.concurrency > 1 else n  # two full batches
    prompts, _ = held_out_prompt_ids(target, n)
    spec = {"model": str(DRAFTS / "smollm2-medusa"), "num_speculative_tokens": K}
    rows = []
    for k in (int(x) for x in args.ks.split(",")):
        pair = {}
        order = ("told", "not told") if len(rows) % 2 == 0 else ("not told", "told")
        for variant in order:
            cfg = {"model": str(target), "spec": spec, "prompts": prompts, "max_tokens": max_tokens,
                   "concurrency": args.concurrency, "ignore_num_drafts": variant == "not told"}
            print(f"  k={k} of K={K}, {variant} ...", flush=True)
            pair[variant] = _child(f"k={k} {variant}", cfg, {"VLLM_SPEC_PLUGINS_POLICY": str(k)})
        told, full = pair["told"], pair["not told"]
        rows.append({"k": k, "told": told, "not_told": full,
                     "forward_ratio": told["model_ms"] / full["model_ms"],
                     "propose_ratio": told["propose_ms"] / full["propose_ms"]})
    lines = [f"# heads drafter told the step's k (num_drafts), Medusa K={K} on SmolLM2-135M, concurrency "
             f"{args.concurrency}", "",
             f"command: python -m bench.step_k{' --quick' if args.quick else ''} --concurrency {args.concurrency}",
             "", "| k | forward ms told | forward ms not told | ratio | drafting call ms told | not told | ratio |",
             "|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['k']} | {r['told']['model_ms']:.3f} | {r['not_told']['model_ms']:.3f} | "
                     f"{r['forward_ratio']:.2f} | {r['told']['propose_ms']:.3f} | {r['not_told']['propose_ms']:.3f} | "
                     f"{r['propose_ratio']:.2f} |")
    text = "\n".join(lines)
    print(text)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"step_k-c{args.concurrency}.json").write_text(json.dumps(rows, indent=1))
    (args.out / f"step_k-c{args.concurrency}.md").write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
