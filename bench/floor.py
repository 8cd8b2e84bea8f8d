"""Where a drafting step that drafts nothing (``k = 0``) spends its time, against no speculation.

With an attention drafter (EAGLE) loaded and the policy pinned to ``k = 0``, vLLM runs the draft model's
first pass every step to keep the draft KV cache in sync; ``make bench-policy`` measured such steps at
0.85-0.92x of no speculation. Our V1 runtime now skips that pass in plain decode steps and catches the draft KV
up in one pass every 16 steps (``VLLM_SPEC_PLUGINS_DRAFT_CATCHUP``; docs/adaptive-policy.md); the row "first
pass every step" is the same drafter without it. Since a catch-up step is one in 16, the mean per step counts
it where the median does not: both are reported. This profiles one in-process engine per row (V1 runner,
uni-process executor, ``VLLM_ENABLE_V1_MULTIPROCESSING=0``; on the CPU the clock needs no device sync), on pure
decode steps only:

* ``step``: the engine core's whole step (scheduler, policy hooks, model runner, output processing), and its
  ``post_step`` (where vLLM takes the step's drafts from the runner: a direct call here, a round trip to the worker
  process in a multi-process engine such as a server's; skipped after a step at ``k = 0``, patch 25);
* ``execute``: ``GPUModelRunner.execute_model`` (input preparation, the target's forward, logits);
* ``target fwd``: the target model's own forward inside it;
* ``sample+draft``: ``GPUModelRunner.sample_tokens`` (sampling, bookkeeping and the drafting call);
* ``propose``: the drafting call (``propose_draft_token_ids``) inside it;
* ``draft fwd``: the draft model's own forward inside that.

Rows: no speculation; our EAGLE-1, our EAGLE-3 and our Medusa pinned to ``k = 0``
(``VLLM_SPEC_PLUGINS_POLICY=0``); vLLM's built-in EAGLE-1 with its static schedule at ``k = 0`` for every
batch size (``num_speculative_tokens_per_batch_size``), vLLM's own floor. Rows alternate and repeat; medians.

``--k K`` profiles drafting steps instead: the same drafters pinned to ``k = K`` (those whose ``K`` reaches it;
vLLM's EAGLE-1 with its static schedule at ``K``), on the pure decode steps that verify ``K`` drafts per request.

``--kv-only`` compares, at ``k = 0``, the EAGLE drafts whose forward is told ``kv_only`` in the passes whose outputs
are discarded (API 4: catch-ups, a first pass at ``k = 0``; the shipped drafts then skip their last layer's MLP)
with the same drafts never told, the whole forward running there.

    python -m bench.floor [--quick] [--concurrency 1] [--repeats 2] [--k 0] [--kv-only]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

from bench.overhead import drive, in_process_engine, run_child

ROOT = Path(__file__).resolve().parent.parent
PARTS = ("step", "execute", "target_fwd", "sample_draft", "propose", "draft_fwd")


def step_tokens(cfg: dict) -> int:
    """Tokens per request in the steps a row profiles: the decoded one, and ``k`` drafts where it speculates."""
    return 1 + (int(cfg.get("k", 0)) if cfg.get("spec") else 0)


def _measure(cfg: dict) -> dict:
    """Runs in a child process: one in-process engine, instrumented."""
    from vllm.v1.worker.gpu_model_runner import GPUModelRunner

    llm, runner = in_process_engine(cfg)
    qlen = step_tokens(cfg)
    cur: dict[str, float] = {}
    decode = {"now": False}
    samples: list[dict[str, float]] = []

    def timed(name, fn):
        def wrapper(*a, **k):
            t = time.perf_counter()
            try:
                return fn(*a, **k)
            finally:
                cur[name] = cur.get(name, 0.0) + time.perf_counter() - t
        return wrapper

    def wrap_method(owner, attr, name):
        setattr(owner, attr, timed(name, getattr(owner, attr)))

    original_execute = GPUModelRunner.execute_model

    def execute(self, scheduler_output, *a, **k):
        n = scheduler_output.num_scheduled_tokens
        decode["now"] = bool(n) and not scheduler_output.scheduled_new_reqs and all(v == qlen for v in n.values())
        return original_execute(self, scheduler_output, *a, **k)

    GPUModelRunner.execute_model = execute
    wrap_method(GPUModelRunner, "execute_model", "execute")
    wrap_method(GPUModelRunner, "sample_tokens", "sample_draft")
    wrap_method(GPUModelRunner, "propose_draft_token_ids", "propose")
    runner.model.forward = timed("target_fwd", runner.model.forward)
    drafter = getattr(runner, "drafter", None)
    if drafter is not None:
        dm = getattr(drafter.model, "inner", drafter.model)  # our attention adapter: the plugin model itself
        dm.forward = timed("draft_fwd", dm.forward)
    core = llm.llm_engine.engine_core.engine_core  # the in-process EngineCore; its step_fn is bound at init
    original_step = core.step_fn

    original_post_step = core.post_step
    kept = {"last": False}

    def step(*a, **k):
        cur.clear()
        decode["now"] = False
        t = time.perf_counter()
        out = original_step(*a, **k)
        cur["step"] = time.perf_counter() - t
        kept["last"] = decode["now"] and "execute" in cur
        if kept["last"]:
            samples.append(dict(cur))
        return out

    def post_step(*a, **k):  # where vLLM takes the step's drafts (skipped at k = 0: patch 25): part of the step
        t = time.perf_counter()
        out = original_post_step(*a, **k)
        if kept["last"]:
            samples[-1]["step"] += time.perf_counter() - t
        return out

    core.step_fn = step
    core.post_step = post_step
    drive(llm, cfg, samples.clear)
    return {"steps": len(samples), **{p: statistics.median(s.get(p, 0.0) for s in samples) * 1e3 for p in PARTS},
            **{f"{p}_mean": statistics.fmean(s.get(p, 0.0) for s in samples) * 1e3 for p in PARTS}}


#: ``--kv-only``'s rows: the EAGLE drafts pinned to ``k = 0``, their forward told ``kv_only`` in the passes whose
#: outputs are discarded (API 4: catch-ups, first passes at ``k = 0``) or never told (``VLLM_SPEC_PLUGINS_KV_ONLY=0``:
#: the whole forward runs there)
WHOLE = "whole forward in discarded passes"


def kv_only_rows(drafts: Path) -> dict[str, tuple[dict | None, dict[str, str]]]:
    floor = floor_rows(drafts)
    rows = {"no speculation": floor["no speculation"]}
    for name in ("our EAGLE-1, k=0", "our EAGLE-3, k=0"):
        spec, env = floor[name]
        rows[name] = (spec, env)
        rows[f"{name}, {WHOLE}"] = (spec, {**env, "VLLM_SPEC_PLUGINS_KV_ONLY": "0"})
    return rows


def floor_rows(drafts: Path, k: int = 0, full_vocab: Path | None = None, medusa_full_vocab: Path | None = None
               ) -> dict[str, tuple[dict | None, dict[str, str]]]:
    """Each row's speculative config and environment: no speculation, and every drafter whose ``K`` reaches ``k``
    pinned to ``k`` (at ``k = 0`` also our EAGLE-1 with its first pass every step; at ``k >= 1`` also our EAGLE-1
    and our Medusa without their draft vocabulary). ``full_vocab``: the EAGLE-1 draft without its draft vocabulary
    (``bench.run.eagle_full_vocab``), which vLLM's own EAGLE-1 row loads too (it has no draft vocabulary);
    ``medusa_full_vocab``: the Medusa heads without theirs (``bench.run.medusa_full_vocab``)."""
    pin = {"VLLM_SPEC_PLUGINS_POLICY": str(k)}
    eagle = {"model": str(drafts / "smollm2-eagle"), "num_speculative_tokens": 2, "method": "eagle"}
    full = {**eagle, "model": str(full_vocab or drafts / "smollm2-eagle")}
    rows: dict[str, tuple[dict | None, dict[str, str]]] = {"no speculation": (None, {})}
    if k <= 2:
        rows[f"our EAGLE-1, k={k}"] = (eagle, pin)
    if k == 0:
        rows["our EAGLE-1, k=0, first pass every step"] = (eagle, {**pin, "VLLM_SPEC_PLUGINS_DRAFT_CATCHUP": "0"})
    elif k <= 2:
        rows[f"our EAGLE-1, full vocabulary, k={k}"] = (full, pin)
    if k <= 2:
        rows[f"vLLM EAGLE-1, k={k} schedule"] = ({**full, "num_speculative_tokens_per_batch_size": [(1, 16, k)]},
                                                {"VLLM_SPEC_PLUGINS": ""})
    rows[f"our EAGLE-3, k={k}"] = ({"model": str(drafts / "smollm2-eagle3"), "num_speculative_tokens": 3}, pin)
    if k <= 2:
        medusa = {"model": str(drafts / "smollm2-medusa"), "num_speculative_tokens": 2}
        rows[f"our Medusa, k={k}"] = (medusa, pin)
    if 1 <= k <= 2:
        rows[f"our Medusa, full vocabulary, k={k}"] = ({**medusa, "model": str(medusa_full_vocab or medusa["model"])},
                                                       pin)
    return rows


def _child(row: str, cfg: dict, env: dict) -> dict:
    from vllm_spec_plugins.cpu_env import preload_env

    # the CPU runtime vLLM prescribes (Intel OpenMP, tcmalloc when installed), as bench.policy runs its rows
    return run_child("bench.floor", row, cfg, {**preload_env(), **env})


def render(med: dict[str, dict], command: str, concurrency: int, repeats: int, k: int = 0) -> str:
    """The markdown table. ``beside target`` = step - target fwd: what the step spends outside the target's
    forward, the part speculation adds to (the target's own forward varies by several % from one engine to the
    next on this machine, more than what the drafter adds)."""
    base = med["no speculation"]
    beside0 = base["step"] - base["target_fwd"]
    mean0 = base["step_mean"] - base["target_fwd_mean"]
    what = "k = 0 floor: pure decode steps" if not k else f"steps verifying k = {k} drafts per request"
    lines = [f"# {what}, ms per step (median of {repeats} alternating runs), "
             f"concurrency {concurrency}", "", f"command: {command}", "",
             "| row | step | target fwd | beside target | added vs no spec | added, mean per step | sample+draft | "
             "propose | propose, mean | draft fwd | steps |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r, m in med.items():
        beside = m["step"] - m["target_fwd"]
        mean = m["step_mean"] - m["target_fwd_mean"]
        lines.append(f"| {r} | {m['step']:.2f} | {m['target_fwd']:.2f} | {beside:.2f} | {beside - beside0:+.2f} "
                     f"({(beside - beside0) / base['target_fwd']:+.1%} of a target fwd) | {mean - mean0:+.2f} "
                     f"({(mean - mean0) / base['target_fwd_mean']:+.1%}) | {m['sample_draft']:.2f} | "
                     f"{m['propose']:.2f} | {m['propose_mean']:.2f} | {m['draft_fwd']:.2f} | {m['steps']} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.floor", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--quick", action="store_true", help="2 prompts of 48 tokens (default: 4 of 128)")
    ap.add_argument("--concurrency", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--k", type=int, default=0, choices=range(4),
                    help="profile steps drafting and verifying k tokens per request (default 0: the floor)")
    ap.add_argument("--kv-only", action="store_true",
                    help="k = 0 only: the EAGLE drafts told kv_only in passes whose outputs are discarded (API 4) "
                         "against the same drafts never told")
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "out")
    args = ap.parse_args(argv)
    if args.kv_only and args.k:
        ap.error("--kv-only compares k = 0 floors")
    if args.child:
        print("RESULT " + json.dumps(_measure(json.loads(args.child))), flush=True)
        return 0
    from bench.run import DRAFTS, eagle_full_vocab, held_out_prompt_ids, medusa_full_vocab
    from bench.smollm2 import ensure_smollm2

    target = ensure_smollm2()
    n, max_tokens = (2, 48) if args.quick else (4, 128)
    n = max(n, 2 * args.concurrency) if args.concurrency > 1 else n  # two full batches
    prompts, _ = held_out_prompt_ids(target, n)
    rows = kv_only_rows(DRAFTS) if args.kv_only else floor_rows(DRAFTS, args.k, eagle_full_vocab(),
                                                                          medusa_full_vocab())
    results: dict[str, list[dict]] = {r: [] for r in rows}
    for rep in range(args.repeats):
        for row in (list(rows) if rep % 2 == 0 else list(rows)[::-1]):
            spec, env = rows[row]
            print(f"  {row} (repeat {rep + 1}) ...", flush=True)
            cfg = {"model": str(target), "spec": spec, "prompts": prompts, "max_tokens": max_tokens,
                   "concurrency": args.concurrency, "k": args.k}
            try:
                results[row].append(_child(row, cfg, env))
            except RuntimeError as e:
                print(f"    failed: {str(e)[-600:]}", flush=True)
    parts = (*PARTS, *(f"{p}_mean" for p in PARTS))
    med = {r: {p: statistics.median(x[p] for x in v) for p in parts} | {"steps": min(x["steps"] for x in v)}
           for r, v in results.items() if v}
    text = render(med, f"python -m bench.floor{' --quick' if args.quick else ''} --concurrency {args.concurrency} "
                       f"{f'--k {args.k} ' if args.k else ''}{'--kv-only ' if args.kv_only else ''}"
                       f"--repeats {args.repeats}", args.concurrency, args.repeats, args.k)
    print(text)
    args.out.mkdir(parents=True, exist_ok=True)
    name = f"floor-c{args.concurrency}" + (f"-k{args.k}" if args.k else "") + ("-kv-only" if args.kv_only else "")
    (args.out / f"{name}.json").write_text(json.dumps({"rows": results, "median": med}, indent=1))
    (args.out / f"{name}.md").write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
