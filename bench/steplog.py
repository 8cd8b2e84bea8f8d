"""Per-step times inside a benchmark engine, as the adaptive policy saw them, and a summary of them.

``python -m bench.policy --step-log DIR`` starts every plugin row's engine with ``bench/steplog_site`` on
``PYTHONPATH``. Its ``sitecustomize.py`` (run at the start of every Python process of that engine, the engine
core included) wraps :meth:`vllm_spec_plugins.policy.AdaptivePolicy.end_step` through :func:`install`, so each
finished step appends one line to ``DIR/<row>-<pid>.tsv``: batch size, ``k`` drafted, ``k`` verified, draft tokens
verified, pure decode (1/0), the step's seconds as the policy times it (idle time between steps excluded), and the
draft tokens accepted in it (as the policy observed them).
Lines are written only while ``BENCH_STEP_LOG`` is set. The policy's own estimates (``VLLM_SPEC_PLUGINS_POLICY_STATS``)
say what it believed; these lines say what each step cost, so a belief can be checked against the steps it came
from (docs/benchmarks.md, "Spells of slow steps").

    python -m bench.steplog DIR              # per row: step time by batch size and k
    python -m bench.steplog DIR --sequence   # and the steps in order: batch/k_drafted k_verified:ms
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import sys
from collections import defaultdict
from pathlib import Path

ENV_DIR = "BENCH_STEP_LOG"
ENV_TAG = "BENCH_STEP_LOG_TAG"
SITE = Path(__file__).resolve().parent / "steplog_site"


def env_for(row: str, directory: Path, environ: dict[str, str] | None = None) -> dict[str, str]:
    """What a row's engine needs in its environment to log its steps to ``directory``."""
    env = os.environ if environ is None else environ
    path = str(SITE) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return {"PYTHONPATH": path, ENV_DIR: str(directory), ENV_TAG: re.sub(r"[^A-Za-z0-9_.=-]+", "_", row).strip("_")}


def install(directory: str, tag: str) -> bool:
    """Wrap ``AdaptivePolicy.end_step`` to log each step to ``directory/<tag>-<pid>.tsv``. Never raises: a bench
    aid must not stop an engine (a warning on stderr instead). Returns whether it is installed."""
    try:
        from vllm_spec_plugins import policy as P

        if not os.path.isdir(directory):
            raise NotADirectoryError(f"{ENV_DIR}={directory!r} is not a directory")
        if getattr(P.AdaptivePolicy.end_step, "_bench_steplog", False):
            return True
        original = P.AdaptivePolicy.end_step
        path = os.path.join(directory, f"{tag or 'engine'}-{os.getpid()}.tsv")

        def end_step(self, *, b, k_drafted, k_verified, pure_decode, n_verified=None):  # type: ignore[no-untyped-def]
            start = self.step_start()
            original(self, b=b, k_drafted=k_drafted, k_verified=k_verified, pure_decode=pure_decode,
                     n_verified=n_verified)
            accepted = self.accepted_tokens - getattr(self, "_bench_steplog_accepted", 0)  # observed in this step
            self._bench_steplog_accepted = self.accepted_tokens
            if start is not None and self._t_last_end is not None:
                nv = b * k_verified if n_verified is None else n_verified
                with open(path, "a") as f:
                    f.write(f"{b}\t{k_drafted}\t{k_verified}\t{nv}\t{int(bool(pure_decode))}\t"
                            f"{self._t_last_end - start:.6f}\t{accepted}\n")

        end_step._bench_steplog = True  # type: ignore[attr-defined]
        P.AdaptivePolicy.end_step = end_step  # type: ignore[method-assign]
        return True
    except Exception as e:  # noqa: BLE001 - reported, never raised
        print(f"bench.steplog: not logging steps ({type(e).__name__}: {e})", file=sys.stderr)
        return False


def read(path: Path) -> list[tuple[int, int, int, int, bool, float, int]]:
    """A step log's lines: ``(batch, k drafted, k verified, draft tokens verified, pure decode, seconds, draft tokens
    accepted)``."""
    rows = []
    for n, line in enumerate(path.read_text().splitlines(), 1):
        f = line.split("\t")
        if len(f) != 7:
            raise ValueError(f"{path}:{n}: expected 7 tab-separated fields, found {len(f)}: {line!r}")
        rows.append((int(f[0]), int(f[1]), int(f[2]), int(f[3]), f[4] == "1", float(f[5]), int(f[6])))
    return rows


def summarize(path: Path, sequence: bool = False) -> str:
    """Steady steps (pure decode, verifying drafts made with the same k) by batch size and k: count, lower
    quartile and median in ms, and the share of the draft tokens they verified that was accepted; with
    ``sequence``, every step in order."""
    from vllm_spec_plugins.policy import lower_quartile  # here: importing this module (in sitecustomize) never fails

    steps = read(path)
    cells: dict[tuple[int, int], list[float]] = defaultdict(list)
    drafts: dict[tuple[int, int], list[int]] = defaultdict(lambda: [0, 0])  # verified, accepted
    for b, kd, kv, nv, pure, dt, acc in steps:
        if pure and kd == kv:
            cells[(b, kd)].append(1e3 * dt)
            drafts[(b, kd)][0] += nv
            drafts[(b, kd)][1] += acc
    by_k: dict[int, int] = defaultdict(int)
    for b, kd, *_ in steps:
        if b:  # a step with no request (a batch just finished) asks for vLLM's K without the policy deciding
            by_k[kd] += 1
    n = sum(by_k.values())
    lines = [f"{path.name}: {n} steps with requests, drafted " + ", ".join(
        f"k={k}: {100 * c / max(n, 1):.0f}%" for k, c in sorted(by_k.items())),
        f"  {'batch':>5} {'k':>2} {'steps':>5} {'lower quartile ms':>17} {'median ms':>9} {'accepted':>8}"]
    for (b, k), v in sorted(cells.items()):
        nv, acc = drafts[(b, k)]
        rate = f"{acc / nv:.0%}" if nv else "-"
        lines.append(f"  {b:>5} {k:>2} {len(v):>5} {lower_quartile(v):>17.1f} {statistics.median(v):>9.1f} {rate:>8}")
    if sequence:
        lines.append("  " + " ".join(f"{b}{'' if pure else 'P'}/{kd}{kv}:{1e3 * dt:.0f}" + (f"+{acc}" if acc else "")
                                     for b, kd, kv, _, pure, dt, acc in steps))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.steplog", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("dir", type=Path)
    ap.add_argument("--sequence", action="store_true", help="also print every step in order (P: a prefill step)")
    args = ap.parse_args(argv)
    files = sorted(args.dir.glob("*.tsv"))
    if not files:
        print(f"bench.steplog: no step logs (*.tsv) in {args.dir}; run python -m bench.policy --step-log {args.dir}",
              file=sys.stderr)
        return 1
    print("\n\n".join(summarize(p, args.sequence) for p in files))
    return 0


if __name__ == "__main__":
    sys.exit(main())
