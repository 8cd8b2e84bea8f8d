"""How each request's choice between prompt lookup's drafts and the plugin model's turned out, step by step.

One engine as a user gets it (SmolLM2-135M-Instruct, the shipped EAGLE-3 draft, ``num_speculative_tokens`` 3, the
default policy, prompt lookup ``auto``), one request at a time (``max_num_seqs`` 1), greedy, traced
(``VLLM_SPEC_PLUGINS_TRACE_DIR``). Wherever a plain-Python prompt lookup over a request's true tokens finds a match
in a step that drafts, its drafts are compared with the tokens that followed: how often the first was right, and
how many of the step's ``k`` would have been accepted, whichever source the request took. Rows are grouped by the
step's ``k``, the model's share of it, the source chosen and whether the request's lookup rate was behind its model
rate. The model's own drafts' acceptance, from the policy's statistics, is printed beside them.

The policy times steps on the wall clock, so which steps draft depends on the machine: the counts are for reading
(docs/benchmarks.md), not for tests. ``--env KEY=VALUE`` adds to the engine's environment (a ``PYTHONPATH`` with a
``sitecustomize.py`` to compare a variant, a ``VLLM_SPEC_PLUGINS_*`` setting).

    python -m bench.lookup_choices [--prompt-set chat] [--prompts 16] [--max-tokens 96] [--env KEY=VALUE ...]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from collections import defaultdict
from pathlib import Path
from typing import Any


def accepted(drafts: list[int], truth: list[int]) -> int:
    """How many of ``drafts`` verification accepts against the tokens that followed: the common prefix."""
    n = 0
    for d, t in zip(drafts, truth):
        if d != t:
            break
        n += 1
    return n


def tally(records: list[dict[str, Any]], seqs: list[list[int]], min_n: int = 2, max_n: int = 4
          ) -> dict[tuple[int, int, str, bool], list[int]]:
    """Per (step's ``k``, model's ``k``, source chosen, lookup behind its model per draft): ``[requests with a
    match, first lookup draft right, lookup drafts that would have been accepted]``. ``seqs``: each request's true
    tokens (prompt and output), by request index."""
    from vllm_spec_plugins.runtime.lookup import LOOKUP, reference_lookup
    from vllm_spec_plugins.runtime.trace import base_request_id

    out: dict[tuple[int, int, str, bool], list[int]] = defaultdict(lambda: [0, 0, 0])
    for rec in records:
        if rec.get("lookup") is None:
            continue
        k, mk = int(rec["returned_drafts"].shape[1]), rec["lookup_model_k"]  # the step's k (trace schema 9)
        for b, rid in enumerate(rec["req_ids"]):
            seq = seqs[int(base_request_id(rid))]
            n = int(rec["lookup_next_positions"][b]) + 1
            if n >= len(seq):
                continue  # nothing followed: the request ended here
            drafts = reference_lookup(seq[:n], k, min_n, max_n)
            if drafts is None:
                continue
            model_rate, lookup_rate = (float(x) for x in rec["lookup_rates"][b])
            key = (k, k if mk is None else int(mk), "lookup" if int(rec["lookup"][b]) == LOOKUP else "model",
                   lookup_rate < model_rate)
            got = accepted(drafts, seq[n:n + k])
            row = out[key]
            row[0] += 1
            row[1] += got > 0
            row[2] += got
    return dict(out)


def table(rows: dict[tuple[int, int, str, bool], list[int]]) -> list[str]:
    lines = ["| step's k | model's k | chosen | lookup behind per draft | requests with a match | first lookup draft "
             "right | lookup drafts accepted, mean |", "|---|---|---|---|---|---|---|"]
    for (k, mk, chosen, behind), (n, first, acc) in sorted(rows.items()):
        lines.append(f"| {k} | {mk} | {chosen} | {'yes' if behind else 'no'} | {n} | {first / n:.0%} | "
                     f"{acc / n:.2f} of {k} |")
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.lookup_choices", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--prompt-set", choices=["heldout", "chat", "sharegpt"], default="chat")
    ap.add_argument("--prompts", type=int, default=16)
    ap.add_argument("--max-tokens", type=int, default=96)
    ap.add_argument("--env", action="append", default=[], metavar="KEY=VALUE")
    args = ap.parse_args(argv)
    extra = {}
    for item in args.env:
        key, sep, value = item.partition("=")
        if not sep or not key:
            ap.error(f"--env {item!r}: expected KEY=VALUE")
        extra[key] = value
    from bench.run import DRAFTS, held_out_prompt_ids
    from bench.smollm2 import ensure_smollm2
    from vllm_spec_plugins.cpu_env import preload_env
    from vllm_spec_plugins.runtime.trace import load_trace
    from vllm_spec_plugins.testing.engine import run_engine

    target = ensure_smollm2()
    prompts, _ = held_out_prompt_ids(target, args.prompts, args.prompt_set)
    with tempfile.TemporaryDirectory() as d:
        trace, stats = Path(d) / "trace", Path(d) / "stats.json"
        r = run_engine(target, speculative_config={"model": str(DRAFTS / "smollm2-eagle3"), "num_speculative_tokens": 3},
                       prompts=prompts, max_tokens=args.max_tokens, timeout=3600,
                       llm_kwargs={"max_num_seqs": 1, "max_model_len": 1024},
                       env={**preload_env(), "VLLM_SPEC_PLUGINS_TRACE_DIR": str(trace),
                            "VLLM_SPEC_PLUGINS_POLICY_STATS": str(stats), **extra})
        rows = tally(load_trace(trace), [p + o for p, o in zip(prompts, r.outputs)])
        sources = json.loads(stats.read_text())["sources"]
    print(f"# prompt lookup's matches, {args.prompts} {args.prompt_set} prompts, {args.max_tokens} tokens, one at a "
          f"time; command: python -m bench.lookup_choices {' '.join(argv if argv is not None else sys.argv[1:])}")
    print("\n".join(table(rows)))
    for name in ("model", "lookup"):
        s = sources[name]
        print(f"{name} drafts: {s['accepted_draft_tokens']} of {s['verified_draft_tokens']} verified accepted")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
