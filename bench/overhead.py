"""Overheads of the shim, measured side by side with vLLM's built-in drafters.

1. Per drafting step: the time of the runner's ``propose_draft_token_ids`` (everything
   the runner does to draft: vLLM's own bookkeeping, our shim, the draft model) and,
   inside it, the draft model's own compute (its ``forward`` and ``compute_logits``).
   "Everything else" = the difference. Both paths are instrumented the same way, in an
   in-process engine (``VLLM_ENABLE_V1_MULTIPROCESSING=0``; on the CPU the clock needs no
   device sync).
2. Start-up: the time of our ``vllm.general_plugins`` entry point (discovery, registration,
   patch installation) in a fresh process, and engine start with and without our package.

    python -m bench.overhead [--quick]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def in_process_engine(cfg: dict):
    """``(llm, model runner)``: the engine a measuring child runs (``cfg["model"]``, ``cfg["spec"]``), its core in
    this process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``) with the uni-process executor (bench.floor uses it too)."""
    from vllm import LLM

    llm = LLM(model=cfg["model"], enforce_eager=True, gpu_memory_utilization=0.3, max_model_len=2048,
              dtype="float32", seed=0, max_num_seqs=16, speculative_config=cfg["spec"])
    return llm, llm.llm_engine.engine_core.engine_core.model_executor.driver_worker.worker.model_runner


def drive(llm, cfg: dict, after_warmup) -> None:
    """One warm-up batch, ``after_warmup()`` (clear what it recorded), then every prompt of ``cfg`` in batches of
    ``cfg["concurrency"]``, greedy, ``cfg["max_tokens"]`` each (all of them with ``cfg["ignore_eos"]``)."""
    from vllm import SamplingParams

    params = SamplingParams(temperature=0.0, max_tokens=cfg["max_tokens"], ignore_eos=cfg.get("ignore_eos", False))
    prompts = [{"prompt_token_ids": p} for p in cfg["prompts"]]
    c = cfg["concurrency"]
    llm.generate(prompts[:c], params, use_tqdm=False)  # warm-up
    after_warmup()
    for i in range(0, len(prompts), c):
        llm.generate(prompts[i:i + c], params, use_tqdm=False)


def run_child(module: str, row: str, cfg: dict, env: dict) -> dict:
    """``python -m MODULE --child CFG`` in a fresh process with an in-process engine core; its ``RESULT`` line."""
    full = dict(os.environ, VLLM_ENABLE_V1_MULTIPROCESSING="0", **env)
    full.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    out = subprocess.run([sys.executable, "-m", module, "--child", json.dumps(cfg)], cwd=ROOT, env=full,
                         capture_output=True, text=True, timeout=1200)
    line = next((ln for ln in reversed(out.stdout.splitlines()) if ln.startswith("RESULT ")), None)
    if line is None:
        raise RuntimeError(f"{row} failed:\n{out.stderr[-4000:]}")
    return json.loads(line[len("RESULT "):])


def _measure_row(cfg: dict) -> dict:
    """Runs in a child process: one in-process engine, instrumented."""
    from vllm.v1.worker.gpu_model_runner import GPUModelRunner

    llm, runner = in_process_engine(cfg)
    if isinstance(runner, GPUModelRunner):  # V1: the runner's whole drafting call
        owner, entry, model = GPUModelRunner, "propose_draft_token_ids", runner.drafter.model
    else:  # Model Runner V2: the speculator's propose (everything MRV2 does to draft)
        owner, entry, model = type(runner.speculator), "propose", runner.speculator.model
    model = getattr(model, "inner", model)  # our attention adapter: time the plugin model itself
    if cfg.get("ignore_num_drafts"):  # bench.step_k's baseline: the forward computes every head, as before API 3
        full = model.forward
        model.forward = lambda *a, num_drafts=None, **k: full(*a, **k)
    acc = {"model": 0.0}
    steps: list[tuple[float, float]] = []

    def timed(fn):
        def wrapper(*a, **k):
            t = time.perf_counter()
            try:
                return fn(*a, **k)
            finally:
                acc["model"] += time.perf_counter() - t
        return wrapper

    for name in ("forward", "compute_logits"):
        if hasattr(model, name):
            setattr(model, name, timed(getattr(model, name)))
    original = getattr(owner, entry)

    def propose(self, *a, **k):
        if k.get("dummy_run"):
            return original(self, *a, **k)
        acc["model"] = 0.0
        t = time.perf_counter()
        out = original(self, *a, **k)
        steps.append((time.perf_counter() - t, acc["model"]))
        return out

    setattr(owner, entry, propose)
    drive(llm, cfg, steps.clear)
    propose_ms = [s[0] * 1e3 for s in steps]
    model_ms = [s[1] * 1e3 for s in steps]
    return {"steps": len(steps), "propose_ms": statistics.median(propose_ms), "model_ms": statistics.median(model_ms),
            "other_ms": statistics.median(p - m for p, m in zip(propose_ms, model_ms))}


def _child(row: str, cfg: dict, env: dict) -> dict:
    return run_child("bench.overhead", row, cfg, env)


def startup(repeats: int, engine_repeats: int, target: str) -> dict:
    code = ("import json, time, vllm; t0 = time.perf_counter(); import vllm_spec_plugins.shim as s; "
            "t1 = time.perf_counter(); s.register(); t2 = time.perf_counter(); "
            "from vllm_spec_plugins.manager import get_host; "
            "print('RESULT ' + json.dumps([(t1 - t0) * 1e3, (t2 - t1) * 1e3, len(get_host().plugins)]))")
    imp, reg, n = [], [], 0
    for _ in range(repeats):
        out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
        a, b, n = json.loads(next(ln for ln in out.stdout.splitlines() if ln.startswith("RESULT "))[7:])
        imp.append(a)
        reg.append(b)
    res = {"import_ms": statistics.median(imp), "register_ms": statistics.median(reg), "plugins": n}
    if engine_repeats:
        from bench.run import Engine

        log_dir = ROOT / "bench" / "out" / "logs"
        log_dir.mkdir(parents=True, exist_ok=True)
        with_, without = [], []
        for i in range(engine_repeats):
            for env, bucket in (({}, with_), ({"VLLM_PLUGINS": ""}, without))[:: 1 if i % 2 == 0 else -1]:
                e = Engine(f"start-{len(with_) + len(without)}", target, None, env, log_dir, 8)
                bucket.append(e.ready["start_seconds"])
                e.close()
        res.update(engine_start_with=statistics.median(with_), engine_start_without=statistics.median(without),
                   engine_start_ratio=statistics.median(with_) / statistics.median(without),
                   engine_repeats=engine_repeats)
    return res


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.overhead", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--concurrency", type=int, default=1)
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "out")
    ap.add_argument("--runner", choices=("v1", "v2"), default="v1",
                    help="vLLM's model runner (v2: Model Runner V2 through the test kit's Triton stand-in and "
                         "Triton's interpreter: host times compare, speed does not)")
    args = ap.parse_args(argv)
    if args.child:
        print("RESULT " + json.dumps(_measure_row(json.loads(args.child))), flush=True)
        return 0
    from bench.run import (
        CACHE,
        DRAFTS,
        eagle_full_vocab,
        held_out_prompt_ids,
        materialize_builtin_medusa,
        vllm_minor,
    )
    from bench.smollm2 import ensure_smollm2

    target = ensure_smollm2()
    version = vllm_minor()
    n, max_tokens = (2, 48) if args.quick else (4, 128)
    prompts, _ = held_out_prompt_ids(target, n)
    med = materialize_builtin_medusa(DRAFTS / "smollm2-medusa", target, CACHE / "medusa-with-lm-head", False)
    k_med = 2  # as bench.run: the first two heads
    # the shim's overhead against vLLM's own EAGLE on the same work: the draft without its draft vocabulary, which
    # vLLM's EAGLE-1 has not (with it, ours computes a quarter of the logits: bench.floor --k 1)
    eag = eagle_full_vocab()
    rows = {
        "our Medusa": ({"model": str(med), "num_speculative_tokens": k_med}, {}),
        "our EAGLE": ({"model": str(eag), "num_speculative_tokens": 2, "method": "eagle"}, {}),
    }
    if args.runner == "v2":  # vLLM has no Medusa on MRV2: our EAGLE against vLLM's own EAGLE, our Medusa alone
        rows = {"our Medusa": rows["our Medusa"],
                "vLLM built-in EAGLE": ({"model": str(eag), "num_speculative_tokens": 2, "method": "eagle"},
                                        {"VLLM_SPEC_PLUGINS": ""}),
                "our EAGLE": rows["our EAGLE"]}
    elif version.startswith("0.32."):
        rows = {"vLLM built-in Medusa": ({"model": str(med), "num_speculative_tokens": k_med},
                                         {"VLLM_SPEC_PLUGINS": ""}),
                "our Medusa": rows["our Medusa"],
                "vLLM built-in EAGLE": ({"model": str(eag), "num_speculative_tokens": 2, "method": "eagle"},
                                        {"VLLM_SPEC_PLUGINS": ""}),
                "our EAGLE": rows["our EAGLE"]}
    results = []
    for row, (spec, env) in rows.items():
        print(f"  {row} ...", flush=True)
        if args.runner == "v2":
            from vllm_spec_plugins.testing.mrv2 import mrv2_env

            env = {**mrv2_env(), **env}
        r = _child(row, {"model": str(target), "spec": spec, "prompts": prompts, "max_tokens": max_tokens,
                         "concurrency": args.concurrency}, env)
        r["row"] = row
        results.append(r)
        print(f"    {r}", flush=True)
    by = {r["row"]: r for r in results}
    pairs = []
    for kind in ("Medusa", "EAGLE"):
        o, b = by.get(f"our {kind}"), by.get(f"vLLM built-in {kind}")
        if o and b:
            pairs.append({"pair": f"our {kind} / vLLM built-in {kind}", "propose_ratio": o["propose_ms"] / b["propose_ms"],
                          "other_ratio": o["other_ms"] / b["other_ms"] if b["other_ms"] else float("nan")})
    report = {"command": "python -m bench.overhead" + (" --quick" if args.quick else "")
              + (f" --runner {args.runner}" if args.runner != "v1" else ""), "vllm": version, "runner": args.runner,
              "steps": min(r["steps"] for r in results), "concurrency": args.concurrency, "rows": results,
              "pairs": pairs, "startup": startup(3 if args.quick else 7, 0 if args.quick else 3, str(target))}
    from bench.report import overhead_markdown, write

    print(write(args.out, "overhead", report, overhead_markdown))
    return 0


if __name__ == "__main__":
    sys.exit(main())
