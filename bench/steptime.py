"""Where an engine's steps go, every engine alike (no speculation included): ``bench.run --step-time DIR``.

``bench.steplog`` logs steps as the adaptive policy times them, in engines with a plugin drafter only. This puts
``bench/steptime_site`` on every engine's ``PYTHONPATH``; its ``sitecustomize.py`` wraps, in each process of the
engine, through :func:`install`:

* the engine core (``EngineCore.step`` and ``post_step``): one line per step with requests to
  ``DIR/core-<engine>-<pid>.tsv``: requests, tokens scheduled, requests with prompt tokens, prompt tokens, draft
  tokens verified, then milliseconds in ``schedule``, in the rest of ``step`` (execution and
  ``update_from_output``) and in ``post_step`` (where vLLM takes the step's drafts from the runner; 0 where it was
  skipped, patch 25);
* the V1 model runner (the worker process): one line per step to ``DIR/runner-<engine>-<pid>.tsv``: the same four
  counts, then milliseconds in ``execute_model``, ``sample_tokens`` (drafting included) and each of
  :data:`PARTS` (zero where not called).

``<engine>`` names the drafter (``none``, or the speculative method and the draft folder's name) and the
``VLLM_SPEC_PLUGINS_*`` settings of the engine. Lines are written only while ``BENCH_STEP_TIME`` is set; nothing
here raises into an engine (a warning on stderr instead). The wrappers' own cost (a clock read and a line per
step) is in every engine alike.

    python -m bench.steptime DIR     # per engine: decode steps at the most common batch size, without drafts and
                                     # verifying drafts, and prefill steps
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import sys
import time
from collections import Counter
from pathlib import Path

ENV_DIR = "BENCH_STEP_TIME"
SITE = Path(__file__).resolve().parent / "steptime_site"
#: the V1 runner's methods timed inside ``execute_model`` and ``sample_tokens``
PARTS = ("_update_states", "_prepare_inputs", "_build_attention_metadata", "_model_forward", "_sample",
         "_bookkeeping_sync", "propose_draft_token_ids")
COUNTS = ("requests", "tokens", "prompt_requests", "prompt_tokens", "draft_tokens")
CORE_TIMES = ("schedule", "step", "post_step")
RUNNER_TIMES = ("execute_model", "sample_tokens", *PARTS)


def env_for(directory: Path, environ: dict[str, str] | None = None) -> dict[str, str]:
    """What an engine needs in its environment to log its steps to ``directory``."""
    env = os.environ if environ is None else environ
    path = str(SITE) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return {"PYTHONPATH": path, ENV_DIR: str(directory)}


def engine_name(vllm_config) -> str:  # type: ignore[no-untyped-def]
    spec = getattr(vllm_config, "speculative_config", None)
    name = "none" if spec is None else f"{spec.method}-{os.path.basename(str(spec.model or ''))}"
    settings = sorted(f"{k[len('VLLM_SPEC_PLUGINS_'):].lower()}={v}" for k, v in os.environ.items()
                      if k.startswith("VLLM_SPEC_PLUGINS_") and not k.startswith("VLLM_SPEC_PLUGINS_TEST_"))
    return re.sub(r"[^A-Za-z0-9_.=,-]+", "_", ",".join([name, *settings]))


def shape(so) -> tuple[int, int, int, int, int]:  # type: ignore[no-untyped-def]
    """``COUNTS`` of a ``SchedulerOutput``."""
    n = so.num_scheduled_tokens
    spec = {r: len(v) for r, v in (so.scheduled_spec_decode_tokens or {}).items()}
    prompt = [v - 1 - spec.get(r, 0) for r, v in n.items() if v - spec.get(r, 0) > 1]
    return len(n), so.total_num_scheduled_tokens, len(prompt), sum(prompt), sum(spec.values())


class _Log:
    def __init__(self, directory: str, kind: str) -> None:
        self.directory, self.kind, self.f = directory, kind, None

    def write(self, owner, fields) -> None:  # type: ignore[no-untyped-def]
        if self.f is None:
            name = engine_name(getattr(owner, "vllm_config", None))
            self.f = open(os.path.join(self.directory, f"{self.kind}-{name}-{os.getpid()}.tsv"), "a", buffering=1)
        self.f.write("\t".join(str(x) if isinstance(x, int) else f"{1e3 * x:.4f}" for x in fields) + "\n")


def _patch_core(mod, directory: str) -> None:  # type: ignore[no-untyped-def]
    cls = mod.EngineCore
    step, post_step = cls.step, cls.post_step
    log = _Log(directory, "core")
    pending: dict = {}  # the step just run, written at the next step (post_step may be skipped: patch 25)

    def flush(core) -> None:  # type: ignore[no-untyped-def]
        if pending.get("shape"):
            log.write(core, [*pending["shape"], pending["schedule"], pending["step"] - pending["schedule"],
                             pending.get("post", 0.0)])
        pending.clear()

    def timed_step(self):  # type: ignore[no-untyped-def]
        flush(self)
        sched = self.scheduler
        if not getattr(sched, "_bench_steptime", False):
            schedule = sched.schedule

            def timed_schedule(*a, **k):  # type: ignore[no-untyped-def]
                t = time.perf_counter()
                so = schedule(*a, **k)
                pending["schedule"] = time.perf_counter() - t
                pending["shape"] = shape(so) if so.total_num_scheduled_tokens else None
                return so

            sched.schedule = timed_schedule
            sched._bench_steptime = True
        t = time.perf_counter()
        out = step(self)
        pending["step"] = time.perf_counter() - t
        return out

    def timed_post_step(self, model_executed):  # type: ignore[no-untyped-def]
        t = time.perf_counter()
        out = post_step(self, model_executed)
        pending["post"] = pending.get("post", 0.0) + time.perf_counter() - t
        return out

    cls.step, cls.post_step = timed_step, timed_post_step


def _patch_runner(mod, directory: str) -> None:  # type: ignore[no-untyped-def]
    cls = mod.GPUModelRunner
    log = _Log(directory, "runner")
    acc: dict[str, float] = {}
    state: dict = {}

    def timer(name: str, original):  # type: ignore[no-untyped-def]
        def timed(self, *a, **k):  # type: ignore[no-untyped-def]
            t = time.perf_counter()
            try:
                return original(self, *a, **k)
            finally:
                acc[name] = acc.get(name, 0.0) + time.perf_counter() - t
        return timed

    for name in PARTS:
        if hasattr(cls, name):
            setattr(cls, name, timer(name, getattr(cls, name)))
    execute_model, sample_tokens = cls.execute_model, cls.sample_tokens

    def timed_execute(self, scheduler_output, *a, **k):  # type: ignore[no-untyped-def]
        acc.clear()
        state["shape"] = shape(scheduler_output) if scheduler_output.total_num_scheduled_tokens else None
        t = time.perf_counter()
        out = execute_model(self, scheduler_output, *a, **k)
        state["execute"] = time.perf_counter() - t
        return out

    def timed_sample(self, *a, **k):  # type: ignore[no-untyped-def]
        t = time.perf_counter()
        out = sample_tokens(self, *a, **k)
        sample = time.perf_counter() - t
        if state.get("shape"):
            log.write(self, [*state["shape"], state["execute"], sample, *(acc.get(p, 0.0) for p in PARTS)])
        state["shape"] = None
        return out

    cls.execute_model, cls.sample_tokens = timed_execute, timed_sample


def install(directory: str) -> bool:
    """Wrap the engine core and the V1 runner when vLLM imports them. Never raises: returns whether it is installed."""
    try:
        from vllm_spec_plugins.patch._util import when_imported

        if not os.path.isdir(directory):
            raise NotADirectoryError(f"{ENV_DIR}={directory!r} is not a directory")
        when_imported("vllm.v1.engine.core", lambda m: _patch_core(m, directory))
        when_imported("vllm.v1.worker.gpu_model_runner", lambda m: _patch_runner(m, directory))
        return True
    except Exception as e:  # noqa: BLE001 - reported, never raised
        print(f"bench.steptime: not timing steps ({type(e).__name__}: {e})", file=sys.stderr)
        return False


def read(path: Path, names: tuple[str, ...]) -> list[dict]:
    rows = []
    for n, line in enumerate(path.read_text().splitlines(), 1):
        f = line.split("\t")
        if len(f) != len(COUNTS) + len(names):
            raise ValueError(f"{path}:{n}: expected {len(COUNTS) + len(names)} tab-separated fields, found {len(f)}")
        rows.append({**dict(zip(COUNTS, map(int, f))), **dict(zip(names, map(float, f[len(COUNTS):])))})
    return rows


def summarize(path: Path) -> str:
    """At the file's most common batch size of decode steps, the decode steps without drafts and those verifying
    drafts (mean ms per part), and prefill steps."""
    names = CORE_TIMES if path.name.startswith("core-") else RUNNER_TIMES
    rows = read(path, names)
    decode = [r for r in rows if not r["prompt_requests"]]
    lines = [f"{path.name}: {len(rows)} steps, {sum(r['prompt_tokens'] for r in rows)} prompt tokens computed"]
    if decode:
        b = Counter(r["requests"] for r in decode).most_common(1)[0][0]
        plain = [r for r in decode if r["requests"] == b and not r["draft_tokens"]]
        drafts = [r for r in decode if r["requests"] == b and r["draft_tokens"]]
        for at_b, what in ((plain, "decode steps"), (drafts, "decode steps verifying drafts")):
            if at_b:
                per_step = f", {statistics.fmean(r['draft_tokens'] for r in at_b):.2f} drafts a step" \
                    if at_b is drafts else ""
                lines.append(f"  {what} at batch {b} ({len(at_b)}{per_step}), mean ms: " + ", ".join(
                    f"{n} {statistics.fmean(r[n] for r in at_b):.2f}" for n in names))
    prefill = [r for r in rows if r["prompt_requests"]]
    if prefill:
        lines.append(f"  prefill steps ({len(prefill)}), mean ms: " + ", ".join(
            f"{n} {statistics.fmean(r[n] for r in prefill):.2f}" for n in names))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.steptime", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("dir", type=Path)
    args = ap.parse_args(argv)
    files = sorted(args.dir.glob("core-*.tsv")) + sorted(args.dir.glob("runner-*.tsv"))
    if not files:
        print(f"bench.steptime: no step times (core-*.tsv, runner-*.tsv) in {args.dir}; run python -m bench.run "
              f"--step-time {args.dir}", file=sys.stderr)
        return 1
    print("\n\n".join(summarize(p) for p in files))
    return 0


if __name__ == "__main__":
    sys.exit(main())
