"""Render bench results (``bench/out/*.json``) as Markdown tables."""

from __future__ import annotations

import json
import sys
from pathlib import Path


def stream_note(settings: dict) -> str:
    """How ``--stream`` loads an engine, for a report's header (bench.run's and bench.policy's)."""
    return (f"At concurrency c > 1, c requests in flight (a closed loop over {settings.get('prompts_cn', 1)} x c "
            "prompts per phase)")


def prompt_set_note(settings: dict) -> str:
    """Which prompts a run used (``--prompt-set``), for a report's header (bench.run's and bench.policy's)."""
    return {"chat": "MT-Bench questions (bench/data/README.md). ", "heldout": "held-out generator prompts. ",
            "sharegpt": "first turns of held-out ShareGPT conversations (bench/sharegpt.py). "}.get(
        settings.get("prompt_set", "heldout"), "")


def lengths_note(settings: dict) -> str:
    """How long answers may be (``--max-tokens``, ``--lengths``), for a report's header (bench.run's and
    bench.policy's)."""
    if settings.get("lengths") == "varied":
        from bench.run import VARIED_HIGH, VARIED_LOW

        n = settings["max_tokens"]
        return (f"at most {round(VARIED_LOW * n)}-{round(VARIED_HIGH * n)} new tokens per request, a length of its own "
                f"per prompt (--lengths varied, mean {n})")
    return f"{settings['max_tokens']} new tokens per request"


def restart_note(settings: dict) -> str:
    """Whether each repetition had engines of its own (``--restart``), for a report's header."""
    return "Every row's engine started afresh for each repetition (--restart). " if settings.get("restart") else ""


def prefix_cache_note(settings: dict) -> str:
    """What ``--prefix-cache`` did, for a report's header (bench.run's and bench.policy's; reports from before the
    option say nothing)."""
    return {"fresh": "Prefix cache emptied before every timed phase. ",
            "warm": "Prefix cache kept across phases (their prompts repeat). "}.get(settings.get("prefix_cache"), "")


def _pct(xs: list[float]) -> str:
    return " / ".join(f"{x:.0%}" for x in xs) if xs else "–"


def _runtime(s: dict) -> str:
    mode = s.get("cpu_runtime")
    if mode is None:  # reports from before the option
        return ""
    libs = s.get("ld_preload") or "nothing found"
    return {"on": f"CPU runtime in LD_PRELOAD: {libs}. ",
            "off": "No CPU runtime in LD_PRELOAD. ",
            "both": f"Every row with the CPU runtime in LD_PRELOAD ({libs}) and without it, the two engines "
                    "alive together and their timed phases interleaved. "}[mode]


def _k(r: dict) -> str:
    """Mean tokens drafted per drafting step, and the share of request-steps that drafted."""
    k = r.get("draft_tokens_per_drafting_step")
    return "–" if k is None else f"{k:.2f} in {100 * r.get('drafting_share', 0):.0f} % of steps"


def markdown(report: dict) -> str:
    s = report["settings"]
    lines = [
        f"vLLM {report['vllm']} (CPU build), {report['machine']['cpus']} CPUs ({report['machine']['processor']}), "
        f"float32, enforce_eager, greedy; {lengths_note(s)}; median of {s['repeats']} "
        f"interleaved repetitions after warm-up; Medusa K={s['k_medusa']}, EAGLE K={s['k_eagle']}"
        + (f", EAGLE-3 K={s['k_eagle3']}" if "k_eagle3" in s else "") + "; "
        + prompt_set_note(s)
        + (f"{stream_note(s)}. " if s.get("stream") else "")
        + prefix_cache_note(s)
        + restart_note(s)
        + _runtime(s) +
        f"Command: `{report['command']}` ({report['wall_seconds'] / 60:.1f} min).",
        "",
        "| row | concurrency | tokens/s | speedup vs no spec | mean acceptance length | acceptance per position | "
        "drafted k (policy) | outputs = no spec |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in sorted(report["rows"], key=lambda r: (r["concurrency"], r["group"])):
        acc = r["mean_acceptance_length"]
        lines.append(
            f"| {r['row']} | {r['concurrency']} | {r['tokens_per_s']:.1f} | {r['speedup']:.2f}x | "
            f"{'–' if acc is None else f'{acc:.2f}'} | {_pct(r['acceptance_per_position'])} | {_k(r)} | "
            f"{'yes' if r['outputs_equal_no_spec'] else 'NO'} |")
    if report.get("runtime"):
        lines = lines[:2] + ["| row | concurrency | tokens/s with LD_PRELOAD | tokens/s without | ratio (median) | "
                             "per repetition | same outputs |", "|---|---|---|---|---|---|---|"]
        for r in sorted(report["runtime"], key=lambda r: r["concurrency"]):
            lines.append(f"| {r['row']} | {r['concurrency']} | {r['tokens_per_s']:.1f} | "
                         f"{r['tokens_per_s_without']:.1f} | {r['ratio']:.3f} | "
                         f"{', '.join(f'{x:.3f}' for x in r['ratios'])} | {'yes' if r['outputs_equal'] else 'NO'} |")
    if report.get("paired"):
        lines += ["", "Paired ratios (same checkpoint, interleaved, median of per-repetition ratios):", "",
                  "| pair | concurrency | tokens/s ratio | per repetition |", "|---|---|---|---|"]
        for p in report["paired"]:
            lines.append(f"| {p['pair']} | {p['concurrency']} | {p['ratio']:.3f} | "
                         f"{', '.join(f'{x:.3f}' for x in p['ratios'])} |")
    return "\n".join(lines) + "\n"


def overhead_markdown(report: dict) -> str:
    lines = [f"Command: `{report['command']}`. vLLM {report['vllm']}, in-process engine "
             f"(VLLM_ENABLE_V1_MULTIPROCESSING=0), {report['steps']} decoding steps per row, concurrency "
             f"{report['concurrency']}.", "",
             "| drafter | runner.propose_draft_token_ids ms/step (median) | draft model compute ms/step | "
             "everything else ms/step |", "|---|---|---|---|"]
    for r in report["rows"]:
        lines.append(f"| {r['row']} | {r['propose_ms']:.2f} | {r['model_ms']:.2f} | {r['other_ms']:.2f} |")
    if report.get("pairs"):
        lines += ["", "| ours / built-in | propose | everything else |", "|---|---|---|"]
        for p in report["pairs"]:
            lines.append(f"| {p['pair']} | {p['propose_ratio']:.3f} | {p['other_ratio']:.3f} |")
    st = report.get("startup")
    if st:
        lines += ["", f"Start-up: `register()` (discover {st['plugins']} plugins, register them, install patches) "
                  f"takes {st['register_ms']:.1f} ms median in a fresh process after `import vllm` "
                  f"(import of the entry-point module alone: {st['import_ms']:.1f} ms)."]
        if st.get("engine_start_with") is not None:
            lines.append(f"Engine start without speculation, median of {st['engine_repeats']} interleaved: with our "
                         f"package {st['engine_start_with']:.1f} s, without it (`VLLM_PLUGINS=''`) "
                         f"{st['engine_start_without']:.1f} s (ratio {st['engine_start_ratio']:.3f}).")
    return "\n".join(lines) + "\n"


def write(out_dir: Path, stem: str, report: dict, render) -> str:
    """Write ``<stem>.json`` and ``<stem>.md`` (``render(report)``) to ``out_dir``; return the Markdown."""
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / f"{stem}.json").write_text(json.dumps(report, indent=2))
    md = render(report)
    (out_dir / f"{stem}.md").write_text(md)
    return md


if __name__ == "__main__":
    data = json.loads(Path(sys.argv[1]).read_text())
    print(overhead_markdown(data) if "startup" in data or "pairs" in data else markdown(data))
