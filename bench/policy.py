"""``make bench-policy``: the adaptive drafting policy against fixed K, vLLM's static schedule and n-gram.

Rows (SmolLM2-135M-Instruct, held-out prompts, greedy; each row a persistent engine, timed
phases interleaved round robin with the no-speculation row of the same group):

* no speculation;
* vLLM's own n-gram drafter (prompt lookup, what a CPU user would try first);
* our EAGLE, our EAGLE-3 and our Medusa at fixed K (``VLLM_SPEC_PLUGINS_POLICY=off``: every step drafts K);
* the same with vLLM's static ``num_speculative_tokens_per_batch_size`` schedule, tuned by hand
  the way an operator would from the fixed-K rows of ``make bench``: speculation paid at
  concurrency 1 and lost at 8, so K for batches of 1-2 requests and 0 from 3 up;
* the same with our adaptive policy (the default: no flag, no tuning; prompt-lookup drafts beside the plugin's
  included, which the adaptive policy turns on by default: runtime/lookup.py);
* the same pinned to ``k = 0`` (``VLLM_SPEC_PLUGINS_POLICY=0``): the drafter loaded but never
  drafting, the floor under every step the policy spends at ``k = 0``.

Every row runs at concurrency 1, 4, 8 and 16, on the generator's held-out prompts or (``--prompt-set``) MT-Bench's
questions or held-out ShareGPT first turns, as ``bench.run``. The CPU runtime is set up as vLLM prescribes
(Intel OpenMP, and tcmalloc when installed, in ``LD_PRELOAD``: ``vllm_spec_plugins.cpu_env``).
Per adaptive row the policy's own statistics (what ``k`` it chose, at which batch sizes, its
cost per decision) are read from ``VLLM_SPEC_PLUGINS_POLICY_STATS``.

Writes ``bench/out/policy.json`` and ``bench/out/policy.md``.

    python -m bench.policy            # full (about 55 minutes: four groups of engines)
    python -m bench.policy --quick    # one repetition, fewer tokens
    python -m bench.policy --only EAGLE-3 --prompt-set chat --stream --prompts-cn 3 --max-tokens 96
                                      # the EAGLE-3 draft's goals on MT-Bench, a closed loop at 4, 8 and 16
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from bench.report import lengths_note, prefix_cache_note, prompt_set_note, restart_note, stream_note
from bench.run import (
    DRAFTS,
    OUT,
    add_lengths_option,
    add_prefix_cache_option,
    add_prompt_set_option,
    add_restart_option,
    held_out_prompt_ids,
    run_group,
    summarize,
    vllm_minor,
)

#: The drafters whose adaptive policy is held against the goals, as their rows name them.
KINDS = ("EAGLE", "EAGLE-3", "Medusa")


def cpu_runtime_env() -> dict[str, str]:
    """What vLLM's CPU docs prescribe for speculative decoding: Intel OpenMP (and tcmalloc when
    installed) in ``LD_PRELOAD``, as ``vllm-spec-plugins cpu-env`` prints it (docs/cpu.md)."""
    from vllm_spec_plugins.cpu_env import preload_env

    return preload_env()


def kind_of(name: str) -> str | None:
    """The drafter a row serves (``"our EAGLE-3, fixed K=3"`` -> ``"EAGLE-3"``); None for the others."""
    head = name.split(",")[0]
    return head.removeprefix("our ") if head.startswith("our ") else None


def stats_name(kind: str) -> str:
    return kind.lower()


def rows_for(k_medusa: int, k_eagle: int, stats_dir: Path, k_eagle3: int = 3) -> dict[str, dict]:
    med, eag = DRAFTS / "smollm2-medusa", DRAFTS / "smollm2-eagle"
    fixed = {"VLLM_SPEC_PLUGINS_POLICY": "off"}
    rows: dict[str, dict] = {
        "no speculation": {"spec": None, "env": {}},
        "vLLM n-gram": {"spec": {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 4,
                                 "prompt_lookup_min": 2}, "env": {}},
    }
    for kind, path, k, extra in (("EAGLE", eag, k_eagle, {"method": "eagle"}), ("Medusa", med, k_medusa, {})):
        spec = {"model": str(path), "num_speculative_tokens": k, **extra}
        rows[f"our {kind}, fixed K={k}"] = {"spec": spec, "env": fixed}
        rows[f"our {kind}, vLLM static schedule"] = {
            "spec": {**spec, "num_speculative_tokens_per_batch_size": [[1, 2, k], [3, 256, 0]]}, "env": {}}
        rows[f"our {kind}, adaptive policy"] = {
            "spec": spec, "env": {"VLLM_SPEC_PLUGINS_POLICY_STATS": str(stats_dir / f"{stats_name(kind)}.json")}}
        # The floor under the policy: the drafter loaded, drafting never (what every k=0 step costs).
        rows[f"our {kind}, pinned k=0"] = {"spec": spec, "env": {"VLLM_SPEC_PLUGINS_POLICY": "0"}}
    # The same EAGLE floor with the draft's first pass run in every step (as before the catch-up; vLLM's own
    # behaviour), and the EAGLE-3 floor (--floor)
    rows["our EAGLE, pinned k=0, first pass every step"] = {
        "spec": rows["our EAGLE, pinned k=0"]["spec"],
        "env": {"VLLM_SPEC_PLUGINS_POLICY": "0", "VLLM_SPEC_PLUGINS_DRAFT_CATCHUP": "0"}}
    spec3 = {"model": str(DRAFTS / "smollm2-eagle3"), "num_speculative_tokens": k_eagle3}
    rows[f"our EAGLE-3, fixed K={k_eagle3}"] = {"spec": spec3, "env": fixed}
    rows["our EAGLE-3, adaptive policy"] = {
        "spec": spec3, "env": {"VLLM_SPEC_PLUGINS_POLICY_STATS": str(stats_dir / f"{stats_name('EAGLE-3')}.json")}}
    rows["our EAGLE-3, pinned k=0"] = {"spec": spec3, "env": {"VLLM_SPEC_PLUGINS_POLICY": "0"}}
    return rows


def groups_for(rows: dict[str, dict], *, only: str | None = None, floor: bool = False,
               skip: list[str] | tuple[str, ...] = ()) -> list[list[str]]:
    """The groups of engines alive together, each with its own no-speculation row (at most four engines at once:
    about 3.5 GB each with SmolLM2 in float32 on the CPU build): EAGLE with n-gram; Medusa with its floor; vLLM's
    static schedules with EAGLE's floor; EAGLE-3 with its floor. ``skip``: rows whose name holds one of these words
    left out; ``only``: then the groups that still have a row of that drafter; ``floor``: :data:`FLOOR_ROWS` alone.
    A group left with no speculation alone is dropped (it would measure nothing)."""
    def of(kind: str, *words: str) -> list[str]:
        return [n for n in rows if kind_of(n) == kind and any(w in n for w in words) and "static" not in n]

    groups = [["no speculation", "vLLM n-gram"] + of("EAGLE", "fixed", "adaptive"),
              ["no speculation"] + of("Medusa", "fixed", "adaptive", "pinned"),
              ["no speculation"] + [n for n in rows if "static" in n] + of("EAGLE", "pinned k=0"),
              ["no speculation"] + of("EAGLE-3", "fixed", "adaptive", "pinned")]
    groups[2] = [n for n in groups[2] if "first pass" not in n]
    if floor:
        groups = [FLOOR_ROWS]
    groups = [[n for n in g if not any(w in n for w in skip)] for g in groups]
    if only and not floor:
        groups = [g for g in groups if any(kind_of(n) == only for n in g)]
    return [g for g in groups if len(g) > 1]


#: --floor: what a step that drafts nothing costs with an attention drafter loaded, side by side (one group)
FLOOR_ROWS = ["no speculation", "our EAGLE, pinned k=0", "our EAGLE, pinned k=0, first pass every step",
              "our EAGLE-3, pinned k=0"]


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m bench.policy", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="one repetition, 64 tokens, concurrency 1 and 8")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--concurrency", type=int, nargs="+", default=[1, 4, 8, 16])
    ap.add_argument("--prompts-c1", type=int, default=3)
    ap.add_argument("--prompts-cn", type=int, default=1)
    ap.add_argument("--stream", action="store_true", help="as bench.run --stream: at concurrency c > 1, c requests "
                    "in flight over --prompts-cn x c prompts per phase, instead of batches of c")
    add_prefix_cache_option(ap)
    add_lengths_option(ap)
    add_restart_option(ap)
    ap.add_argument("--k-medusa", type=int, default=2)
    ap.add_argument("--k-eagle", type=int, default=2)
    ap.add_argument("--k-eagle3", type=int, default=3, help="speculative tokens for the EAGLE-3 draft")
    add_prompt_set_option(ap)
    ap.add_argument("--only", choices=list(KINDS), help="only the groups with a row of this drafter")
    ap.add_argument("--floor", action="store_true",
                    help="only the k = 0 floor of the attention drafters, in one group: no speculation, our EAGLE "
                         "pinned to k = 0 (first pass skipped and caught up), the same with the first pass run "
                         "every step, our EAGLE-3 pinned to k = 0 (writes policy-floor.json / .md)")
    ap.add_argument("--skip", nargs="*", default=[], help="leave out rows whose name contains one of these words")
    ap.add_argument("--no-iomp", action="store_true", help="do not preload Intel OpenMP")
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument("--parallel-start", action="store_true",
                    help="start a group's engines at once (faster; start-up seconds are then not comparable)")
    ap.add_argument("--warmup-tokens", type=int, default=None, help="tokens per warm-up request (default: --max-tokens)")
    ap.add_argument("--step-log", type=Path, default=None, metavar="DIR",
                    help="log every step of every plugin row's engine (batch size, k, seconds) to DIR/<row>-<pid>.tsv; "
                         "python -m bench.steplog DIR summarises them")
    return ap


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if args.quick:
        args.repeats, args.max_tokens, args.concurrency = 1, 64, [1, 8]
    from bench.smollm2 import ensure_smollm2

    target = ensure_smollm2()
    args.out.mkdir(parents=True, exist_ok=True)
    stats_dir = args.out / "policy-stats"
    stats_dir.mkdir(exist_ok=True)
    log_dir = args.out / "logs"
    log_dir.mkdir(exist_ok=True)
    rows = rows_for(args.k_medusa, args.k_eagle, stats_dir, args.k_eagle3)
    runtime = {} if args.no_iomp else cpu_runtime_env()
    for r in rows.values():
        r["env"] = {**runtime, **r["env"]}
    if args.step_log:
        from bench.steplog import env_for

        args.step_log.mkdir(parents=True, exist_ok=True)
        for name, r in rows.items():
            if r["spec"] and "model" in r["spec"]:  # the plugin rows: the adaptive policy runs in their engines
                r["env"] = {**r["env"], **env_for(name, args.step_log.resolve())}
    n_prompts = max(args.prompts_c1, args.prompts_cn * max(args.concurrency))
    prompts, _ = held_out_prompt_ids(target, n_prompts, args.prompt_set)
    groups = groups_for(rows, only=args.only, floor=args.floor, skip=args.skip)
    t0 = time.perf_counter()
    results = []
    for gi, names in enumerate(groups):
        print(f"group {gi + 1}/{len(groups)}: {', '.join(names)}", flush=True)
        g = run_group(names, rows, target, prompts, args, log_dir)
        for c in args.concurrency:
            base = g["phases"][("no speculation", c)]
            for name in names:
                if name == "no speculation" and gi > 0:
                    continue
                s = summarize(name, g["phases"][(name, c)], base, len(base[0]["outputs"]))
                s.update(concurrency=c, group=gi + 1, start_seconds=g["starts"][name])
                results.append(s)
    stats = {}
    for kind in KINDS:
        p = stats_dir / f"{stats_name(kind)}.json"
        if p.exists() and any(r["row"] == f"our {kind}, adaptive policy" for r in results):
            stats[stats_name(kind)] = json.loads(p.read_text())
    report = {
        "command": " ".join(["python -m bench.policy", *(sys.argv[1:] if argv is None else argv)]),
        "vllm": vllm_minor(),
        "settings": {"repeats": args.repeats, "max_tokens": args.max_tokens, "concurrency": args.concurrency,
                     "k_medusa": args.k_medusa, "k_eagle": args.k_eagle, "k_eagle3": args.k_eagle3,
                     "prompt_set": args.prompt_set, "cpu_runtime": runtime,
                     "dtype": "float32", "enforce_eager": True, "stream": args.stream,
                     "prompts_cn": args.prompts_cn, "prefix_cache": args.prefix_cache, "lengths": args.lengths,
                     "restart": args.restart},
        "rows": results,
        "policy_stats": stats,
        "targets": targets(results),
        "wall_seconds": time.perf_counter() - t0,
    }
    name = "policy-floor" if args.floor else "policy"
    (args.out / f"{name}.json").write_text(json.dumps(report, indent=1))
    md = markdown(report)
    (args.out / f"{name}.md").write_text(md)
    print(md)
    return 0


def targets(rows: list[dict]) -> list[dict]:
    """The issue's goals, per drafter and concurrency: adaptive vs the better of no spec and fixed K."""
    out = []
    by = {(r["row"], r["concurrency"]): r for r in rows}
    for kind in KINDS:
        for (name, c), r in sorted(by.items(), key=lambda x: x[0][1]):
            if name != f"our {kind}, adaptive policy":
                continue
            fixed = next((v for (n, cc), v in by.items() if cc == c and n.startswith(f"our {kind}, fixed")), None)
            if fixed is None:
                continue
            best = max(1.0, fixed["speedup"])
            out.append({"drafter": kind, "concurrency": c, "adaptive_vs_no_spec": r["speedup"],
                        "fixed_vs_no_spec": fixed["speedup"],
                        "adaptive_vs_better_of_no_spec_and_fixed": r["speedup"] / best})
    return out


def markdown(report: dict) -> str:
    s = report["settings"]
    lines = [
        f"vLLM {report['vllm']} (CPU build), float32, enforce_eager, greedy; {lengths_note(s)}; median of "
        f"{s['repeats']} interleaved repetitions after warm-up; Medusa K={s['k_medusa']}, "
        f"EAGLE K={s['k_eagle']}, EAGLE-3 K={s.get('k_eagle3', 3)}; "
        + prompt_set_note(s)
        + (f"{stream_note(s)}. " if s.get("stream") else "")
        + prefix_cache_note(s)
        + restart_note(s)
        + f"CPU runtime: {s['cpu_runtime'] or 'default'}. Command: `{report['command']}` "
        f"({report['wall_seconds'] / 60:.1f} min).",
        "",
        "| row | concurrency | tokens/s | speedup vs no spec (per rep) | mean acceptance length | outputs = no spec |",
        "|---|---|---|---|---|---|",
    ]
    for r in sorted(report["rows"], key=lambda r: (r["concurrency"], r["group"])):
        acc = r["mean_acceptance_length"]
        per = ", ".join(f"{x:.2f}" for x in r["speedup_all"])
        lines.append(f"| {r['row']} | {r['concurrency']} | {r['tokens_per_s']:.1f} | {r['speedup']:.2f}x ({per}) | "
                     f"{'–' if acc is None else f'{acc:.2f}'} | {'yes' if r['outputs_equal_no_spec'] else 'NO'} |")
    if report["targets"]:
        lines += ["", "Adaptive policy against the goals (speedups are medians of per-repetition ratios):", "",
                  "| drafter | concurrency | adaptive / no spec | fixed K / no spec | adaptive / better of (no spec, fixed K) |",
                  "|---|---|---|---|---|"]
        for t in report["targets"]:
            lines.append(f"| {t['drafter']} | {t['concurrency']} | {t['adaptive_vs_no_spec']:.2f}x | "
                         f"{t['fixed_vs_no_spec']:.2f}x | {t['adaptive_vs_better_of_no_spec_and_fixed']:.3f} |")
    for kind, st in report["policy_stats"].items():
        steps = max(st["steps"], 1)
        chosen = ", ".join(f"b<={b}: k={v['best_k']}" for b, v in st["buckets"].items() if v["best_k"] is not None)
        lines += ["", f"Policy ({kind}, whole run incl. warm-up): {st['steps']} steps, k chosen "
                  + ", ".join(f"{k}: {100 * n / steps:.0f}%" for k, n in st["k_steps"].items())
                  + f"; by batch size: {chosen}; probes {100 * st['probe_steps'] / steps:.1f}% of steps; "
                  f"the policy's host time {st.get('host_us_per_step', st['decide_us_per_step'])} us per step = "
                  f"{st.get('host_us_per_step', st['decide_us_per_step']) / 1000 / max(st['mean_step_ms'], 1e-9):.5f}"
                  f" of a mean timed step ({st['mean_step_ms']} ms; deciding alone {st['decide_us_per_step']} us)."]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
