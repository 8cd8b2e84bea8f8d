"""A persistent vLLM engine in its own process, driven over stdin/stdout (one JSON object per line).

The benchmark keeps several of these alive at once and interleaves their timed
phases, so machine drift hits every row alike. Commands:

* ``{"cmd": "run", "prompts": [[ids], ...], "concurrency": c, "max_tokens": n}``: generate greedily (at most ``n``
  tokens per answer, or with a list, ``n[i]`` for prompt ``i``), ``c`` requests at a time, and answer
  ``{"seconds", "tokens", "outputs", "spec": {metric deltas}}``. In batches of ``c`` (each waits for its longest
  request), or with ``"stream": true`` as a closed loop: ``c`` requests in flight, the next prompt starting as soon as
  one finishes (what a server sees from ``c`` busy clients, vLLM's ``--max-concurrency``).
  ``"fresh_prefix_cache": true`` empties vLLM's prefix cache first (untimed), so that no prompt of the run is found
  cached from an earlier one; the answer's ``"prefix_cache_hits"`` counts the prompt tokens the run found cached
  (vLLM's ``vllm:prefix_cache_hits``).
* ``{"cmd": "quit"}``.

The first line written is ``{"ready": true, "start_seconds": ...}`` once the engine is up.
"""

from __future__ import annotations

import json
import os
import sys
import time


def _delta(after: dict, before: dict) -> dict:
    out = {}
    for k, v in after.items():
        b = before.get(k)
        if isinstance(v, list):
            b = b or [0] * len(v)
            out[k] = [x - y for x, y in zip(v, b)]
        else:
            out[k] = v - (b or 0)
    return out


def prefix_cache_hits(llm) -> int:
    """vLLM's cumulative count of prompt tokens found in the prefix cache."""
    return int(sum(getattr(m, "value", 0) for m in llm.get_metrics() if m.name == "vllm:prefix_cache_hits"))


def generate_stream(engine, prompts: list, params: list, c: int, tag: str) -> list[list[int]]:
    """Keep ``c`` requests in flight on ``engine`` (vLLM's ``LLMEngine``) until every prompt is answered (prompt ``i``
    with ``params[i]``); the answers in prompt order. Request ids are ``tag-i``: give each call its own ``tag``."""
    answers: dict[int, list[int]] = {}
    nxt = live = 0
    while nxt < len(prompts) or live:
        while nxt < len(prompts) and live < c:
            engine.add_request(f"{tag}-{nxt}", prompts[nxt], params[nxt])
            nxt += 1
            live += 1
        for o in engine.step():
            if o.finished:
                answers[int(o.request_id.rsplit("-", 1)[1])] = list(o.outputs[0].token_ids)
                live -= 1
    return [answers[i] for i in range(len(prompts))]


def main() -> None:
    # vLLM (and the engine processes it spawns) log to stdout: keep the protocol on a private copy of
    # the original stdout and point file descriptor 1 at stderr.
    out = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    cfg = json.loads(sys.argv[1])
    t0 = time.perf_counter()
    from vllm import LLM, SamplingParams

    from vllm_spec_plugins.testing.engine import spec_metrics

    kwargs = dict(model=cfg["model"], enforce_eager=True, gpu_memory_utilization=cfg.get("gpu_memory_utilization", 0.3),
                  max_model_len=cfg.get("max_model_len", 2048), dtype="float32", seed=0, disable_log_stats=False,
                  max_num_seqs=cfg.get("max_num_seqs", 16))
    if cfg.get("speculative_config"):
        kwargs["speculative_config"] = cfg["speculative_config"]
    llm = LLM(**kwargs)
    start = time.perf_counter() - t0
    out.write(json.dumps({"ready": True, "start_seconds": start, "pid": os.getpid()}) + "\n")
    out.flush()
    runs = 0
    for line in sys.stdin:
        cmd = json.loads(line)
        if cmd["cmd"] == "quit":
            break
        prompts = [{"prompt_token_ids": p} for p in cmd["prompts"]]
        lengths = cmd["max_tokens"] if isinstance(cmd["max_tokens"], list) else [cmd["max_tokens"]] * len(prompts)
        if len(lengths) != len(prompts):
            raise ValueError(f"bench.engine_worker: {len(lengths)} answer lengths for {len(prompts)} prompts")
        params = [SamplingParams(temperature=0.0, max_tokens=n, ignore_eos=cmd.get("ignore_eos", False))
                  for n in lengths]
        c = cmd["concurrency"]
        if cmd.get("fresh_prefix_cache") and not llm.reset_prefix_cache():
            raise RuntimeError("bench.engine_worker: vLLM did not empty the prefix cache (requests still running?)")
        before, hits = spec_metrics(llm), prefix_cache_hits(llm)
        outputs: list[list[int]] = []
        t = time.perf_counter()
        runs += 1
        if cmd.get("stream"):
            outputs = generate_stream(llm.llm_engine, prompts, params, c, f"run{runs}")
        else:
            for i in range(0, len(prompts), c):
                for r in llm.generate(prompts[i:i + c], params[i:i + c], use_tqdm=False):
                    outputs.append(list(r.outputs[0].token_ids))
        seconds = time.perf_counter() - t
        out.write(json.dumps({"seconds": seconds, "tokens": sum(map(len, outputs)), "outputs": outputs,
                              "spec": _delta(spec_metrics(llm), before),
                              "prefix_cache_hits": prefix_cache_hits(llm) - hits}) + "\n")
        out.flush()


if __name__ == "__main__":
    main()
