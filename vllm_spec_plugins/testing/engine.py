"""Run a real vLLM engine in a fresh process and return greedy outputs and spec-decode metrics.

A fresh process per engine keeps environment variables (``VLLM_SPEC_PLUGINS``...)
and vLLM's global state apart; vLLM spawns its own engine-core and worker
processes from it, which discover the plugins from their installed distributions.

Usage as a script: ``python -m vllm_spec_plugins.testing.engine JOB.json OUT.json``.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from . import forkserver

SPEC_METRICS = {
    "vllm:spec_decode_num_drafts": "drafts",
    "vllm:spec_decode_num_draft_tokens": "draft_tokens",
    "vllm:spec_decode_num_accepted_tokens": "accepted",
    "vllm:spec_decode_num_accepted_tokens_per_pos": "accepted_per_pos",
    "vllm:num_preemptions": "preemptions",
}


@dataclass
class EngineResult:
    outputs: list[list[int]]
    metrics: dict[str, Any]
    log: str
    seconds: float
    returncode: int
    texts: list[str] = field(default_factory=list)
    finished: dict[str, list[int]] = field(default_factory=dict)

    @property
    def accepted_per_pos(self) -> list[int]:
        return [int(x) for x in self.metrics.get("accepted_per_pos", [])]


def default_env(extra: Mapping[str, str | None] | None = None) -> dict[str, str]:
    env = dict(os.environ)
    env.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    env.setdefault("VLLM_LOGGING_LEVEL", "INFO")
    env.setdefault("TOKENIZERS_PARALLELISM", "false")
    env.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "1")
    # One OpenMP thread per engine process: vLLM serves with one torch thread anyway, but an OpenMP pool of
    # one thread per core still spins on every core, so two test engines started at once took as long as
    # two in a row on 2 cores (8.4 s instead of 15.6 s for the pair with it, measured side by side). TP=2
    # workers are bound to a core each (VLLM_CPU_OMP_THREADS_BIND).
    env.setdefault("OMP_NUM_THREADS", "1")
    for k, v in (extra or {}).items():
        if v is None:
            env.pop(k, None)
        else:
            env[k] = v
    return env


def run_engine(model: str | os.PathLike[str], *, speculative_config: dict[str, Any] | None = None,
               prompts: list[list[int]] | None = None, text_prompts: list[str] | None = None,
               max_tokens: int | list[int] = 32, env: Mapping[str, str | None] | None = None,
               tensor_parallel_size: int = 1, llm_kwargs: dict[str, Any] | None = None,
               schedule: list[dict[str, Any]] | None = None, images: list[str | os.PathLike[str] | None] | None = None,
               python: str | None = None, timeout: float = 600, check: bool = True,
               runner: str | None = None, start_method: str = "fork", vllm: str | None = None) -> EngineResult:
    """Start ``LLM(model, speculative_config=...)`` in a subprocess, generate greedily, return the result.

    Args:
        prompts: token-id prompts (the engine then skips tokenizer init), or
        text_prompts: text prompts (needs a tokenizer in ``model``).
        images: with ``text_prompts``, one image file (or ``None``) per prompt, passed as the prompt's
            ``multi_modal_data`` (a multimodal target such as :func:`~.fixtures.make_tiny_vlm`).
        max_tokens: one for all prompts, or one per prompt.
        schedule: drive the engine step by step instead of ``generate``: a list of
            ``{"step": n, "add": [prompt index, ...], "abort": [prompt index, ...]}``.
        env: extra environment (``None`` removes a variable).
        check: raise ``RuntimeError`` with the log tail if the engine fails.
        runner: ``"v1"`` (vLLM's V1 model runner) or ``"v2"`` (Model Runner V2, run on this CPU
            build through a test-only Triton backend, :mod:`vllm_spec_plugins.testing.mrv2`);
            ``None``: whatever vLLM picks (V1 on the CPU build).
        vllm: the vLLM version to run: ``None`` or ``"0.32"``, the installed one; ``"0.34"``, vLLM 0.34's Python code
            over the installed CPU build (:func:`~.mrv2.vllm_env`; Model Runner V2 only, so ``runner`` must be
            ``None`` or ``"v2"``).
        start_method: how vLLM starts its engine-core and worker processes when it runs several
            (``tensor_parallel_size=2``, or ``VLLM_ENABLE_V1_MULTIPROCESSING=1``): ``"fork"``, vLLM's
            default where the platform does not force another, or ``"spawn"``, which vLLM's CPU build forces
            (each process a fresh interpreter that imports vLLM and discovers the plugins itself). Forked,
            a TP=2 EAGLE engine took 22 s here instead of 55 s (medians of 3, side by side, same outputs
            and spec-decode counters).

    At ``tensor_parallel_size=1`` the engine runs in one process (engine core and worker inside
    the subprocess: ``VLLM_ENABLE_V1_MULTIPROCESSING=0``, which also makes vLLM's CPU build use
    its in-process executor): on 2 CPU cores that starts an engine in about 16 s instead of 60
    to 85 s for three processes each importing vLLM, measured side by side (same outputs, same
    spec-decode counters). vLLM's process layout (API process, engine core, workers) is what
    ``tensor_parallel_size=2`` and a served engine exercise; pass
    ``env={"VLLM_ENABLE_V1_MULTIPROCESSING": "1"}`` to get it at TP=1.

    The process is forked from an interpreter that has already imported vLLM
    (:mod:`vllm_spec_plugins.testing.forkserver`), which saves about 12 s per engine here;
    this package and its plugins still start fresh in every engine.
    ``VLLM_SPEC_PLUGINS_TEST_FORKSERVER=0`` starts each engine as a plain new process.
    """
    job = {"model": str(model), "speculative_config": speculative_config, "prompts": prompts,
           "text_prompts": text_prompts, "max_tokens": max_tokens, "tp": tensor_parallel_size,
           "llm_kwargs": llm_kwargs or {}, "schedule": schedule,
           "images": [None if i is None else str(i) for i in images] if images is not None else None}
    extra = dict(env or {})
    # the version's or runner's variables, then ``env`` over them (PYTHONPATH: both, theirs extending env's)
    chosen: dict[str, str] = {}
    pythonpath = extra.get("PYTHONPATH", os.environ.get("PYTHONPATH"))
    if vllm not in (None, "0.32"):
        if runner not in (None, "v2"):
            raise ValueError(f"vLLM {vllm} has only Model Runner V2; got runner={runner!r}")
        from .mrv2 import vllm_env

        chosen = vllm_env(str(vllm), pythonpath)
    elif runner is not None:
        from .mrv2 import runner_env

        chosen = runner_env(runner, pythonpath)
    extra = {**chosen, **extra}
    if "PYTHONPATH" in chosen:
        extra["PYTHONPATH"] = chosen["PYTHONPATH"]
    if start_method not in ("fork", "spawn"):
        raise ValueError(f"start_method must be 'fork' or 'spawn', got {start_method!r}")
    extra["VLLM_SPEC_PLUGINS_TEST_START_METHOD"] = start_method  # the parameter, not a stray env entry, decides
    if tensor_parallel_size > 1:
        extra.setdefault("VLLM_CPU_OMP_THREADS_BIND", "|".join(str(i) for i in range(tensor_parallel_size)))
    else:
        extra.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    with tempfile.TemporaryDirectory(prefix="vsp-engine-") as tmp:
        job_path, out_path = os.path.join(tmp, "job.json"), os.path.join(tmp, "out.json")
        with open(job_path, "w") as f:
            json.dump(job, f)
        t0 = time.monotonic()
        returncode, log = forkserver.run_module(python or sys.executable, "vllm_spec_plugins.testing.engine",
                                                [job_path, out_path], default_env(extra), timeout)
        seconds = time.monotonic() - t0
        if returncode != 0 or not os.path.exists(out_path):
            if check:
                raise RuntimeError(f"engine failed (rc={returncode}); log tail:\n{log[-6000:]}")
            return EngineResult([], {}, log, seconds, returncode)
        with open(out_path) as f:
            out = json.load(f)
    return EngineResult(out["outputs"], out["metrics"], log, seconds, returncode, out.get("texts", []),
                        out.get("finished", {}))


def spec_metrics(llm: Any) -> dict[str, Any]:
    """vLLM's cumulative spec-decode counters (and preemptions) of an ``LLM``, by short name."""
    out: dict[str, Any] = {}
    for m in llm.get_metrics():
        key = SPEC_METRICS.get(m.name)
        if key is None:
            continue
        if hasattr(m, "values"):
            prev = out.get(key) or [0] * len(m.values)
            out[key] = [a + b for a, b in zip(prev, m.values)]
        else:
            out[key] = out.get(key, 0) + m.value
    return out


def _main(job_path: str, out_path: str) -> None:
    with open(job_path) as f:
        job = json.load(f)
    from vllm import LLM, SamplingParams

    _start_processes_with(os.environ.get("VLLM_SPEC_PLUGINS_TEST_START_METHOD"))
    kwargs = dict(model=job["model"], enforce_eager=True, gpu_memory_utilization=0.3, max_model_len=512,
                  dtype="float32", seed=0, disable_log_stats=False, tensor_parallel_size=job["tp"],
                  max_num_seqs=8)
    if job["prompts"] is not None:
        kwargs["skip_tokenizer_init"] = True
    if job["speculative_config"] is not None:
        kwargs["speculative_config"] = job["speculative_config"]
    kwargs.update(job["llm_kwargs"])
    llm = LLM(**kwargs)
    if job["prompts"] is not None:
        inputs = [{"prompt_token_ids": p} for p in job["prompts"]]
    elif job.get("images"):
        from PIL import Image

        inputs = [t if i is None else {"prompt": t, "multi_modal_data": {"image": Image.open(i).convert("RGB")}}
                  for t, i in zip(job["text_prompts"], job["images"], strict=True)]
    else:
        inputs = list(job["text_prompts"])
    mt = job["max_tokens"]
    per_prompt = [SamplingParams(temperature=0.0, max_tokens=m, ignore_eos=True)
                  for m in (mt if isinstance(mt, list) else [mt] * len(inputs))]
    texts: list[str] = []
    finished: dict[str, list[int]] = {}
    if job["schedule"]:
        engine = llm.llm_engine
        plan = {s["step"]: s for s in job["schedule"]}
        step = 0
        while True:
            s = plan.get(step, {})
            for i in s.get("add", []):
                engine.add_request(str(i), inputs[i], per_prompt[i])
            if s.get("abort"):
                engine.abort_request([str(i) for i in s["abort"]])
            if not engine.has_unfinished_requests() and step > max(plan):
                break
            for o in engine.step():
                if o.finished:
                    finished[o.request_id] = list(o.outputs[0].token_ids) if o.outputs else []
            step += 1
        outputs = [finished.get(str(i), []) for i in range(len(inputs))]
    else:
        results = llm.generate(inputs, per_prompt, use_tqdm=False)
        outputs = [list(r.outputs[0].token_ids) for r in results]
        texts = [r.outputs[0].text or "" for r in results]
    with open(out_path, "w") as f:
        json.dump({"outputs": outputs, "metrics": spec_metrics(llm), "texts": texts, "finished": finished}, f)


def _start_processes_with(method: str | None) -> None:
    """Make vLLM start its engine core and workers with ``method`` (``run_engine(start_method=...)``): the CPU
    platform sets ``VLLM_WORKER_MULTIPROC_METHOD=spawn`` while it checks the config; this sets ``method`` back
    right after, in this engine's process (the processes it forks inherit it)."""
    if not method or method == "spawn":
        return
    chosen: str = method
    from vllm.platforms.cpu import CpuPlatform

    update = CpuPlatform.check_and_update_config.__func__

    def check_and_update_config(cls: Any, vllm_config: Any) -> None:
        update(cls, vllm_config)
        os.environ["VLLM_WORKER_MULTIPROC_METHOD"] = chosen

    CpuPlatform.check_and_update_config = classmethod(check_and_update_config)


if __name__ == "__main__":
    _main(sys.argv[1], sys.argv[2])
