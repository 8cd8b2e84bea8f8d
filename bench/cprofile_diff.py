"""Where a drafter's engine spends more than no speculation, function by function (``cProfile``).

``bench.floor`` times a step's parts (the target's forward, the drafting call...). This profiles whole engines
instead: each row of ``bench.floor`` (no speculation, and the drafters pinned to ``k``) runs in its own process
with an in-process engine core: a warm-up batch, then ``--batches`` batches of ``--concurrency`` held-out prompts
(the warm-up's first among them; ``ignore_eos``, so every row decodes as many steps) under ``cProfile``. It
prints, per row, the functions whose own time (``tottime``) grew most against no speculation, in ms per decoded
step (a batch of ``max_tokens`` tokens counts ``max_tokens`` steps; the median of ``--repeats`` runs, alternating
the order), with their call counts in both. ``cProfile``
slows Python code far more than the C kernels it calls: read the C calls (``torch._ops...``) as measured and the
Python ones as where the time goes, not how much.

    python -m bench.cprofile_diff --concurrency 8 [--k 0] [--rows "our EAGLE-3, k=0"] [--top 20] [--repeats 2]
"""

from __future__ import annotations

import argparse
import json
import pstats
import sys
from pathlib import Path

from bench.overhead import drive, in_process_engine, run_child

ROOT = Path(__file__).resolve().parent.parent
Key = tuple[str, int, str]


def _measure(cfg: dict) -> dict:
    """Runs in a child process: profile the timed batches, dump the stats to ``cfg["dump"]``."""
    import cProfile

    llm, _ = in_process_engine(cfg)
    prof = cProfile.Profile()
    drive(llm, cfg, prof.enable)  # the warm-up batch, then profiling on for every later batch
    prof.disable()
    prof.dump_stats(cfg["dump"])
    return {"dump": cfg["dump"]}


def own_times(path: str | Path) -> dict[Key, tuple[int, float]]:
    """``{(file, line, function): (calls, tottime seconds)}`` from a ``cProfile`` dump (file paths shortened to
    what follows ``site-packages/``)."""
    out: dict[Key, tuple[int, float]] = {}
    for (file, line, fn), (_, calls, tottime, _, _) in pstats.Stats(str(path)).stats.items():  # type: ignore[attr-defined]
        key = (file.split("site-packages/")[-1], line, fn)
        calls0, t0 = out.get(key, (0, 0.0))
        out[key] = (calls0 + calls, t0 + tottime)
    return out


def median_times(runs: list[dict[Key, tuple[int, float]]]) -> dict[Key, tuple[int, float]]:
    """Per function, the median own time over repeated runs (a run that never called it counts 0) and the calls
    of the first run that did."""
    import statistics

    keys = set().union(*runs)
    return {k: (next(r[k][0] for r in runs if k in r), statistics.median(r.get(k, (0, 0.0))[1] for r in runs))
            for k in keys}


def grew(base: dict[Key, tuple[int, float]], other: dict[Key, tuple[int, float]], steps: int, top: int
         ) -> list[tuple[float, Key, int, int]]:
    """The ``top`` functions whose own time grew most from ``base`` to ``other``: ``(ms per step, function,
    calls in other, calls in base)``, largest first; before them the total over every function (``"total"``) and
    over the functions ``base`` never called (``"only with speculation"``)."""
    rows = []
    for key in base.keys() | other.keys():
        c1, t1 = other.get(key, (0, 0.0))
        c0, t0 = base.get(key, (0, 0.0))
        rows.append((1e3 * (t1 - t0) / steps, key, c1, c0))
    total = sum(r[0] for r in rows)
    new = sum(r[0] for r in rows if r[3] == 0)
    rows.sort(key=lambda r: r[0], reverse=True)
    return [(total, ("", 0, "total"), 0, 0), (new, ("", 0, "only with speculation"), 0, 0), *rows[:top]]


def render(diffs: dict[str, list[tuple[float, Key, int, int]]], command: str) -> str:
    lines = ["# Own time grown against no speculation, ms per decoded step (cProfile)", "", f"command: {command}", ""]
    for row, rows in diffs.items():
        lines += [f"## {row}: {rows[0][0]:+.3f} ms per step in all, {rows[1][0]:+.3f} in functions no speculation "
                  "never calls", "", "| ms per step | calls | calls, no spec | function |", "|---|---|---|---|"]
        for ms, (file, line, fn), c1, c0 in rows[2:]:
            lines.append(f"| {ms:+.3f} | {c1} | {c0} | `{fn}` ({file}:{line}) |")
        lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.cprofile_diff", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--batches", type=int, default=2, help="timed batches after the warm-up batch")
    ap.add_argument("--max-tokens", type=int, default=96)
    ap.add_argument("--k", type=int, default=0, choices=range(4), help="the drafters pinned to k (default 0)")
    ap.add_argument("--rows", nargs="+", default=None, help="bench.floor's rows to profile beside no speculation")
    ap.add_argument("--top", type=int, default=20)
    ap.add_argument("--repeats", type=int, default=2, help="runs per row, alternating the order; medians")
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "out" / "cprofile")
    args = ap.parse_args(argv)
    if args.child:
        print("RESULT " + json.dumps(_measure(json.loads(args.child))), flush=True)
        return 0
    from bench.floor import floor_rows
    from bench.run import DRAFTS, eagle_full_vocab, held_out_prompt_ids
    from bench.smollm2 import ensure_smollm2
    from vllm_spec_plugins.cpu_env import preload_env

    rows = floor_rows(DRAFTS, args.k, eagle_full_vocab())
    chosen = ["no speculation", *(args.rows or [r for r in rows if r != "no speculation"])]
    unknown = [r for r in chosen if r not in rows]
    if unknown:
        ap.error(f"--rows: unknown {unknown}; rows: {list(rows)}")
    target = ensure_smollm2()
    c = args.concurrency
    prompts, _ = held_out_prompt_ids(target, c * args.batches)  # (the first batch is also the warm-up's)
    args.out.mkdir(parents=True, exist_ok=True)
    runs: dict[str, list[dict[Key, tuple[int, float]]]] = {row: [] for row in chosen}
    for rep in range(args.repeats):
        for row in (chosen if rep % 2 == 0 else chosen[::-1]):
            spec, env = rows[row]
            dump = args.out / (row.replace(" ", "_").replace(",", "").replace("=", "") + f"-{rep + 1}.prof")
            print(f"  {row} (repeat {rep + 1}) ...", flush=True)
            cfg = {"model": str(target), "spec": spec, "prompts": prompts, "max_tokens": args.max_tokens,
                   "concurrency": c, "ignore_eos": True, "dump": str(dump)}
            run_child("bench.cprofile_diff", row, cfg, {**preload_env(), **env})
            runs[row].append(own_times(dump))
    stats = {row: median_times(r) for row, r in runs.items()}
    steps = args.batches * args.max_tokens
    diffs = {row: grew(stats["no speculation"], stats[row], steps, args.top) for row in chosen[1:]}
    text = render(diffs, "python -m bench.cprofile_diff " + " ".join(sys.argv[1:] if argv is None else argv))
    print(text)
    (args.out / "cprofile.md").write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
