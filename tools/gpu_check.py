#!/usr/bin/env python3
"""Checks of the device-side code that needs no vLLM, on a CUDA GPU: prompt lookup and the catch-up rows.

The propose path is designed for CUDA graphs and asynchronous scheduling: static shapes, and no host-device
synchronisation. Everything else in this repository runs on vLLM's CPU build, where neither can be seen. These
parts are plain torch, so a GPU machine with torch and no vLLM can run them (the one vLLM helper they import, the
pinned-memory probe of ``runtime/state.py``, is stood in for here). Checks:

1. ``lookup_drafts`` on the device equals ``reference_lookup`` (plain Python) on 300 random batches.
2. ``PromptLookup.rows``, ``observe`` and ``compose`` over 40 steps of a simulated batch, every call under
   ``torch.cuda.set_sync_debug_mode("error")`` (it raises on the synchronising operations it detects; torch calls
   it a prototype that does not detect all); each step's drafts equal the reference on the sequences so far.
3. ``compose`` captured in a CUDA graph once, then replayed on later steps' tables: equal to eager.
4. ``KeptRows.keep`` and ``take`` (the skipped first-pass rows) under the same sync check: the rows taken back are
   those kept, request by request.
5. The guard's ``sanitize`` (every drafter's drafts pass it) under the same sync check: out-of-range ids become 0,
   and the flag, copied back asynchronously, turns speculation off at the next ``poll``.

    python tools/gpu_check.py            # on a CUDA machine: all five; prints PASS / FAIL lines
    python tools/gpu_check.py --device cpu   # all but the GPU-only parts (the unit suite runs this)

Exit status 1 if a check fails.
"""

from __future__ import annotations

import argparse
import contextlib
import random
import sys
import traceback
import types
from collections.abc import Iterator
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def _stand_in_for_vllm() -> None:
    """``runtime/state.py`` asks vLLM whether pinned memory is available; without vLLM, CUDA's answer."""
    try:
        import vllm.utils.torch_utils  # noqa: F401
        return
    except ImportError:
        pass
    for name in ("vllm", "vllm.utils"):
        sys.modules.setdefault(name, types.ModuleType(name))
    mod = types.ModuleType("vllm.utils.torch_utils")
    mod.is_pin_memory_available = torch.cuda.is_available  # type: ignore[attr-defined]
    sys.modules["vllm.utils.torch_utils"] = mod


@contextlib.contextmanager
def no_sync(device: torch.device) -> Iterator[None]:
    """Raise on any host-device synchronisation inside (CUDA only; on the CPU there is none to see)."""
    if device.type != "cuda":
        yield
        return
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        yield
    finally:
        torch.cuda.set_sync_debug_mode("default")


def check_search(device: torch.device) -> str:
    from vllm_spec_plugins.runtime.lookup import lookup_drafts, reference_lookup

    rng = random.Random(0)
    found = missed = 0
    for _ in range(300):
        B, L = rng.randint(1, 6), rng.randint(3, 64)
        ctx = torch.randint(0, 50, (B, L), dtype=torch.int32)
        seqs = []
        for b in range(B):
            vocab = rng.choice([2, 3, 5, 50])
            seq = [rng.randrange(vocab) for _ in range(rng.randint(1, L))]
            ctx[b, :len(seq)] = torch.tensor(seq, dtype=torch.int32)
            seqs.append(seq)
        k, lo = rng.randint(1, 5), rng.randint(1, 3)
        hi = rng.randint(lo, 5)
        drafts, hit = lookup_drafts(ctx.to(device), torch.tensor([len(s) for s in seqs], device=device), k, lo, hi)
        drafts, hit = drafts.cpu(), hit.cpu()
        for b, seq in enumerate(seqs):
            ref = reference_lookup(seq, k, lo, hi)
            if bool(hit[b]) != (ref is not None) or (ref is not None and drafts[b].tolist() != ref):
                raise AssertionError(f"lookup_drafts on {device}: {seq} k={k} n={lo}..{hi}: {drafts[b].tolist()} "
                                     f"(found {bool(hit[b])}), reference {ref}")
            found += ref is not None
            missed += ref is None
    if found < 100 or missed < 100:
        raise AssertionError(f"too few rows with ({found}) or without ({missed}) a match to check both cases")
    return f"300 batches, {found} rows with a match and {missed} without, all equal to the reference"


class _Batch:
    """A batch of requests decoding with a repetitive vocabulary; each step a request decodes one token or verifies
    up to ``k`` drafts (the inputs ``PromptLookup.observe`` takes, built on the host, copied before the check)."""

    def __init__(self, rng: random.Random, B: int) -> None:
        self.rng = rng
        self.seqs = [[rng.randrange(4) for _ in range(rng.randint(2, 6))] for _ in range(B)]

    def step(self, device: torch.device, drafted: list[int]) -> tuple[int, dict[str, torch.Tensor]]:
        toks, pos, qsl, nxt, npos, produced = [], [], [0], [], [], []
        for b, s in enumerate(self.seqs):
            n_new = 1 + drafted[b]  # scheduled: the last token and the drafts verified
            start = len(s) - 1
            new = [self.rng.randrange(4) for _ in range(n_new)]
            toks += [s[-1]] + new[:-1]
            pos += list(range(start, start + n_new))
            qsl.append(len(toks))
            s.extend(new)
            nxt.append(s[-1])
            npos.append(len(s) - 1)
            produced.append(self.rng.randint(1, n_new))
        return len(toks), {"token_ids": torch.tensor(toks, dtype=torch.int32, device=device),
                "positions": torch.tensor(pos, device=device),
                "query_start_loc": torch.tensor(qsl, dtype=torch.int32, device=device),
                "next_ids": torch.tensor(nxt, dtype=torch.int32, device=device),
                "next_pos": torch.tensor(npos, device=device),
                "produced": torch.tensor(produced, dtype=torch.int32, device=device)}


def check_lookup_steps(device: torch.device, graphs: bool) -> str:
    from vllm_spec_plugins.runtime.lookup import LOOKUP, LookupConfig, PromptLookup, reference_lookup

    rng = random.Random(1)
    B, k, max_len = 4, 3, 512
    lk = PromptLookup(LookupConfig(2, 4), requests=8, max_len=max_len, max_tokens=64, device=device)
    batch = _Batch(rng, B)
    req_ids = [f"r{b}" for b in range(B)]
    prompts = {r: torch.tensor(s[:-1], dtype=torch.int32) for r, s in zip(req_ids, batch.seqs)}
    model = torch.full((B, k), 7, dtype=torch.int64, device=device)
    drafted = [0] * B
    static: dict[str, torch.Tensor] = {}
    graph = None
    replayed = 0
    for step in range(40):
        T, inp = batch.step(device, drafted)
        with no_sync(device):
            rows = lk.rows(req_ids, lambda r: prompts[r])
            lk.observe(rows, B, T, inp["token_ids"], inp["positions"], inp["query_start_loc"],
                       inp["next_ids"], inp["next_pos"], inp["produced"])
            out = lk.compose(rows, model, inp["next_pos"])
        chosen = lk.chosen.cpu().tolist()
        for b, seq in enumerate(batch.seqs):
            ref = reference_lookup(seq, k, 2, 4)
            want = ref if chosen[b] == LOOKUP else [7] * k  # (lookup chosen without a match: want is None)
            if out[b].cpu().tolist() != want:
                raise AssertionError(f"step {step}, request {b}: drafts {out[b].tolist()}, source {chosen[b]}, "
                                     f"reference lookup {ref}")
        drafted = [k] * B
        if not graphs:
            continue
        # a graph of compose, captured on this step's buffers, replayed on later steps' (it reads the tables, and
        # writes each request's source and draft count: the values the eager call wrote)
        if graph is None and step == 10:
            static = {"rows": rows.clone(), "model": model.clone(), "next_pos": inp["next_pos"].clone()}
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                for _ in range(2):  # warm-up on a side stream, as capture requires
                    lk.compose(static["rows"], static["model"], static["next_pos"])
            torch.cuda.current_stream().wait_stream(side)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                static["out"] = lk.compose(static["rows"], static["model"], static["next_pos"])
        elif graph is not None:
            eager = lk.compose(rows, model, inp["next_pos"]).clone()
            static["rows"].copy_(rows)
            static["next_pos"].copy_(inp["next_pos"])
            graph.replay()
            if not torch.equal(static["out"], eager):
                raise AssertionError(f"step {step}: the captured compose gave {static['out'].tolist()}, eager "
                                     f"{eager.tolist()}")
            replayed += 1
    return ("40 steps of rows/observe/compose without a host sync, drafts equal to the reference"
            + (f"; compose captured once and replayed on {replayed} later steps, equal to eager" if graphs else "")
            if device.type == "cuda" else "40 steps, drafts equal to the reference (no sync check off CUDA)")


def check_kept_rows(device: torch.device) -> str:
    from vllm_spec_plugins.runtime.catchup import KeptRows

    kept = KeptRows(max_reqs=4, rows=6, width=8, dtype=torch.float32, device=device)
    req_ids = ["a", "b", "c"]
    history: dict[str, list[tuple[int, int, int, list[float]]]] = {r: [] for r in req_ids}
    for step in range(5):
        tok = torch.arange(3, dtype=torch.int32) + 10 * step
        pos = torch.arange(3) + 100 * step
        slot = torch.arange(3) + 1000 * step
        hid = torch.randn(3, 8)
        args = [t.to(device) for t in (tok, pos, slot, hid)]
        if not kept.can_keep(req_ids):
            raise AssertionError(f"step {step}: no room for one more row per request")
        with no_sync(device):
            kept.keep(req_ids, *args)
        for i, r in enumerate(req_ids):
            history[r].append((int(tok[i]), int(pos[i]), int(slot[i]), hid[i].tolist()))
    with no_sync(device):
        taken = kept.take(["c", "x", "a"])  # the step's batch: c, a request holding none, a
    assert taken is not None
    got_tok = kept.token_ids[taken.index].cpu().tolist()
    got_hid = kept.hidden[taken.index].cpu()
    want = history["c"] + history["a"]
    if taken.batch_rows != [0, 2] or taken.counts != [5, 5] or got_tok != [w[0] for w in want]:
        raise AssertionError(f"taken rows {taken.batch_rows} counts {taken.counts} tokens {got_tok}")
    if not torch.allclose(got_hid, torch.tensor([w[3] for w in want])):
        raise AssertionError("the hidden rows taken back differ from those kept")
    if len(kept) != 1 or kept.take(["a", "c"]) is not None:
        raise AssertionError("rows taken back were not forgotten")
    return ("5 steps of 3 requests kept and 2 requests taken back, rows equal to those kept"
            + (", without a host sync" if device.type == "cuda" else " (no sync check off CUDA)"))


def check_guard(device: torch.device) -> str:
    from vllm_spec_plugins.api import Drafter
    from vllm_spec_plugins.runtime.guard import DraftGuard

    d = Drafter(architectures=("X",), model_class="m:X", plugin="check", dist_label="check 0")
    guard = DraftGuard(d, model_class="m:X", checkpoint="/c", vocab_size=100, device=device, async_scheduling=True)
    good = torch.tensor([[1, 2], [3, 99]], device=device)
    bad = torch.tensor([[1, 100], [-1, 5]], device=device)
    with no_sync(device):
        out_good = guard.sanitize(good)
    if device.type == "cuda":
        torch.cuda.synchronize()
    guard.poll()
    if guard.disabled or not torch.equal(out_good, good):
        raise AssertionError(f"in-range drafts were changed ({out_good.tolist()}) or turned speculation off")
    with no_sync(device):
        out_bad = guard.sanitize(bad)
    if device.type == "cuda":
        torch.cuda.synchronize()  # the flag's copy lands; poll never waits for it
    guard.poll()
    if out_bad.tolist() != [[1, 0], [0, 5]] or not guard.disabled or "outside the target's vocabulary" not in (
            guard.reason or ""):
        raise AssertionError(f"out-of-range drafts gave {out_bad.tolist()}, disabled {guard.disabled}, reason "
                             f"{guard.reason!r}")
    return ("out-of-range draft ids replaced by 0 and reported at the next poll"
            + (", without a host sync" if device.type == "cuda" else " (no sync check off CUDA)"))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python tools/gpu_check.py", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = ap.parse_args(argv)
    device = torch.device(args.device)
    _stand_in_for_vllm()
    print(f"torch {torch.__version__}, device {device}"
          + (f" ({torch.cuda.get_device_name(device)})" if device.type == "cuda" else ""))
    checks = [("lookup search", lambda: check_search(device)),
              ("lookup steps", lambda: check_lookup_steps(device, graphs=device.type == "cuda")),
              ("kept first-pass rows", lambda: check_kept_rows(device)),
              ("draft guard", lambda: check_guard(device))]
    failed = 0
    for name, fn in checks:
        try:
            print(f"PASS {name}: {fn()}")
        except Exception as e:  # noqa: BLE001 - every check reports, whatever it raised
            failed += 1
            print(f"FAIL {name}: {type(e).__name__}: {e}")
            print("".join(traceback.format_exc().splitlines(keepends=True)[-12:]), end="")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
