"""A conformance suite for drafter plugins, run in the plugin author's own pytest session.

Subclass :class:`ConformanceSuite` in a test module (the class name must start with
``Test``) and say how to write a checkpoint for the kit's tiny target; the suite then runs
real vLLM engines with your plugin installed as a distribution (``pip install -e .``)::

    from vllm_spec_plugins.testing.conformance import ConformanceSuite

    class TestMyDrafter(ConformanceSuite):
        num_speculative_tokens = 3

        def make_draft(self, path, target):          # required: a checkpoint folder for `target`
            return write_my_checkpoint(path, target)

        def reference(self, record, draft, target):  # optional: drafts from one traced step, plain torch
            return my_plain_torch_drafts(record["inputs"], draft)

        def replay_state(self, prompt, generated, draft):  # optional: the carried state after `generated`
            return {"h": my_recurrence(prompt, generated)}

Two engines per suite (the no-speculation baseline is shared by every suite of the
session): one generating greedily without speculation, one with the plugin's drafts, driven
step by step (requests join mid-stream, two are aborted) in a KV cache so small that
requests are preempted, with the trace on. The tests:

* ``test_greedy_output_equals_no_speculation``: every request that finished produced exactly
  the tokens it produces without speculation (bit for bit);
* ``test_no_drafter_error``: the core logged no drafter failure. The engines run strict
  (``strict = True``, the default: ``VLLM_SPEC_PLUGINS_STRICT=1``), so a drafter that raises or
  proposes ids outside the vocabulary stops the engine and every test reports its error;
* ``test_drafts_accepted``: drafts were proposed and some accepted (a suite that cannot
  fail is worthless: a drafter that only produces rejected drafts fails here);
* ``test_preemption_and_aborts``: preemption happened, aborted requests produced no output,
  and carried state (if any) was freed: at the end only the running request holds a slot;
* ``test_drafts_equal_reference``: with :meth:`reference`, the drafts of every traced step
  equal your plain-torch reference on the very inputs the engine fed the drafter;
* ``test_state_equals_replay``: with :meth:`replay_state`, the state each step leaves equals
  your replay of the request's tokens so far (``on_preempt="keep"`` states);
* ``test_tensor_parallel_2``: with ``tensor_parallel = True``, the drafts at TP=2 keep
  the greedy output unchanged;
* ``test_kv_only_writes_the_draft_kv_of_the_whole_forward``: attention drafters whose forward takes
  ``kv_only`` (API 4). Two more engines under a static schedule that drafts nothing while two or more
  requests run (so first passes are skipped, caught up, or run for the draft KV alone), one telling the
  forward ``kv_only=True`` in those passes, one running the whole forward there
  (``VLLM_SPEC_PLUGINS_KV_ONLY=0``): every draft must be the same. A ``kv_only`` branch that writes a
  different draft KV changes the drafts after it (the output stays right, so only this test sees it); a
  draft whose drafts do not depend on its context cannot show it. Skipped for heads drafters and forwards
  without ``kv_only``.

The tests carry the ``e2e`` mark (engines start in 20-40 s on a CPU).
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

#: Prompts (token ids of the tiny byte-level target).
PROMPTS = [
    [1, 50, 60, 70, 80],
    [1, 100, 101, 102],
    [1, 7, 7, 7, 7, 7, 30],
    [1, 200, 13, 45, 99, 120, 33, 81, 9, 64, 210],
    [1, 33],
    [1, 66, 67, 68, 69, 70, 71],
    [1, 90, 91],
    [1, 5, 6, 7, 8],
]
#: Requests 1, 2 and 4 are aborted mid-stream; 6 and 7 join later; 7 runs last and alone.
SCHEDULE = [
    {"step": 0, "add": [0, 1, 2, 3, 4, 5]},
    {"step": 3, "abort": [1, 2]},
    {"step": 10, "add": [6]},
    {"step": 12, "abort": [4]},
    {"step": 60, "add": [7]},
]
ABORTED = {"1", "2", "4"}
MAX_TOKENS = 150
#: 3 KV blocks for 4 concurrent requests that each outgrow one block: forces preemption.
SMALL_CACHE = {"num_gpu_blocks_override": 3, "max_num_seqs": 4, "max_model_len": 256}

_SHARED: dict[Any, Any] = {}


def _tiny_target() -> Path:
    from .fixtures import make_tiny_target

    if "target" not in _SHARED:
        _SHARED["target"] = make_tiny_target(Path(tempfile.mkdtemp(prefix="vsp-conformance-")) / "target")
    target: Path = _SHARED["target"]
    return target


def _baseline(target: Path, prompts: list[list[int]], max_tokens: int, timeout: float = 1200,
              runner: str | None = None, vllm: str | None = None) -> Any:
    from .engine import run_engine

    key = (str(target), repr(prompts), max_tokens, runner, vllm)
    if key not in _SHARED:
        _SHARED[key] = run_engine(target, prompts=prompts, max_tokens=max_tokens, timeout=timeout, runner=runner,
                                  vllm=vllm)
    return _SHARED[key]


def replay_tokens(records: list[dict[str, Any]]) -> list[dict[str, list[int]]]:
    """For every traced step: each row's request (base id) -> all tokens it generated up to and
    including that step (from ``sampled_token_ids`` and ``valid_count``)."""
    from ..runtime.trace import base_request_id

    seen: dict[str, list[int]] = {}
    out = []
    for rec in records:
        now = {}
        for row, rid in enumerate(rec["req_ids"]):
            req = base_request_id(rid)
            n = int(rec["valid_count"][row])
            seen.setdefault(req, []).extend(int(t) for t in rec["sampled_token_ids"][row, :n])
            now[req] = list(seen[req])
        out.append(now)
    return out


@pytest.mark.e2e
class ConformanceSuite:
    """Subclass as ``TestSomething`` and implement :meth:`make_draft` (see the module docstring)."""

    num_speculative_tokens: int = 3
    """``num_speculative_tokens`` of the speculative engine."""
    tensor_parallel: bool = False
    """Also run at ``tensor_parallel_size=2`` (the drafter must support TP: vLLM's parallel layers)."""
    method: str | None = None
    """``"method"`` for the speculative config (e.g. the plugin name for configs vLLM would misroute)."""
    env: dict[str, str] = {}
    """Extra environment for the engines."""
    policy: str = "off"
    """``VLLM_SPEC_PLUGINS_POLICY`` for the engines: ``off`` (default) drafts at every step, so every
    traced step's drafts are checked; ``adaptive`` runs the suite as users run the drafter, with
    steps where the adaptive drafting policy verifies no drafts (their trace records have
    ``drafts`` of shape ``[num_reqs, 0]``)."""
    timeout: float = 1200
    """Seconds one engine run may take."""
    strict: bool = True
    """Any drafter failure fails the suite (the engines run with ``VLLM_SPEC_PLUGINS_STRICT=1``: the first
    exception in your forward or state-carry hook, or a draft id outside the vocabulary, stops the engine, and
    every test of the suite reports it with the drafter's own error). Without it the core would turn speculation
    off and the output would still match. ``False``: for a suite that tests the degraded path on purpose; a test
    then checks that no ERROR line says speculation was turned off unless you expect it."""
    runner: str | None = None
    """vLLM's model runner for every engine of the suite: ``"v1"``, ``"v2"`` (Model Runner V2, run on a
    CPU build through the test kit's Triton stand-in, :mod:`vllm_spec_plugins.testing.mrv2`), or ``None``
    (what vLLM picks). Subclass your suite with ``runner = "v2"`` to run it on both runners."""
    vllm: str | None = None
    """The vLLM version for every engine of the suite: ``None`` (the installed one) or ``"0.34"`` (vLLM 0.34's Python
    code over the installed CPU build, :func:`vllm_spec_plugins.testing.mrv2.vllm_env`; Model Runner V2 only).
    Subclass your suite with ``vllm = "0.34"`` to test against the vLLM your users run."""

    # -- what the author provides ---------------------------------------------------------

    def make_target(self, path: Path) -> Path:
        """The target checkpoint (default: the kit's tiny Llama, shared by every suite)."""
        return _tiny_target()

    def make_draft(self, path: Path, target: Path) -> Path:
        raise NotImplementedError("ConformanceSuite: implement make_draft(self, path, target) -> checkpoint folder")

    reference: Callable[..., Any] | None = None
    """Optional method ``reference(self, record, draft, target) -> draft token ids [num_reqs, k]``."""

    replay_state: Callable[..., Any] | None = None
    """Optional method ``replay_state(self, prompt, generated, draft) -> {state name: tensor [*shape]}``."""

    # -- engines --------------------------------------------------------------------------

    @pytest.fixture(scope="class")
    @classmethod
    def vsp_inputs(cls, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
        """The suite's target, draft and speculative config (once per class)."""
        self = cls()
        base = tmp_path_factory.mktemp("vsp-conformance")
        target = Path(self.make_target(base / "target"))
        draft = Path(self.make_draft(base / "draft", target))
        spec = {"model": str(draft), "num_speculative_tokens": self.num_speculative_tokens}
        if self.method:
            spec["method"] = self.method
        return {"target": target, "draft": draft, "spec": spec, "base": base}

    @pytest.fixture(scope="class")
    @classmethod
    def vsp_run(cls, vsp_inputs: dict[str, Any]) -> dict[str, Any]:
        from ..runtime.trace import load_trace
        from .engine import run_engine

        self = cls()
        target, draft, spec = vsp_inputs["target"], vsp_inputs["draft"], vsp_inputs["spec"]
        trace = vsp_inputs["base"] / "trace"
        baseline = _baseline(target, PROMPTS, MAX_TOKENS, self.timeout, self.runner, self.vllm)
        result = run_engine(target, speculative_config=spec, prompts=PROMPTS, max_tokens=MAX_TOKENS,
                            schedule=SCHEDULE, env={**self._env(), "VLLM_SPEC_PLUGINS_TRACE_DIR": str(trace)},
                            llm_kwargs=SMALL_CACHE, timeout=self.timeout, runner=self.runner, vllm=self.vllm)
        records = load_trace(trace)
        return {"target": target, "draft": draft, "spec": spec, "baseline": baseline, "result": result,
                "records": records}

    def _env(self) -> dict[str, str]:
        # prompt lookup off (with the adaptive policy it is on by default): its drafts would be accepted where the
        # plugin's are not, so test_drafts_accepted would count them. (The trace's drafts are the plugin's either
        # way, schema 9: returned_drafts holds what lookup made of them.)
        return {"VLLM_SPEC_PLUGINS_POLICY": self.policy, "VLLM_SPEC_PLUGINS_STRICT": "1" if self.strict else "0",
                "VLLM_SPEC_PLUGINS_PROMPT_LOOKUP": "off", **self.env}

    # -- the suite ------------------------------------------------------------------------

    def test_greedy_output_equals_no_speculation(self, vsp_run: dict[str, Any]) -> None:
        r, base = vsp_run["result"], vsp_run["baseline"]
        expect = {str(i) for i in range(len(PROMPTS))} - ABORTED
        assert set(r.finished) == expect, f"finished requests {sorted(r.finished)}, expected {sorted(expect)}"
        for i in sorted(expect, key=int):
            assert r.finished[i] == base.outputs[int(i)], (
                f"request {i}: greedy output with drafts differs from the output without speculation")

    def test_no_drafter_error(self, vsp_run: dict[str, Any]) -> None:
        """The core logged no drafter failure (with ``strict = False`` a failure turns speculation off and the
        output still matches: this test is what catches it)."""
        lines = [ln for ln in vsp_run["result"].log.splitlines() if "Speculative decoding is now OFF" in ln]
        assert not lines, "the core turned speculation off after a drafter failure:\n" + "\n".join(lines)

    def test_drafts_accepted(self, vsp_run: dict[str, Any]) -> None:
        m = vsp_run["result"].metrics
        assert m.get("drafts", 0) > 0, f"no drafting steps recorded: {m}"
        assert m.get("accepted", 0) > 0, f"drafts were proposed but none was accepted: {m}"
        assert vsp_run["records"], "the trace is empty: the plugin drafter never ran"

    def test_preemption_and_aborts(self, vsp_run: dict[str, Any]) -> None:
        r, records = vsp_run["result"], vsp_run["records"]
        assert r.metrics.get("preemptions", 0) > 0, "the engine was expected to preempt requests"
        assert not ABORTED & set(r.finished)
        last = records[-1]
        if last["live_state_slots"] is not None:
            assert last["live_state_slots"] == len(last["req_ids"]), (
                f"{last['live_state_slots']} state slots live at the end, for {len(last['req_ids'])} running "
                f"request(s): finished or aborted requests must free their state")
            assert max(rec["live_state_slots"] for rec in records) <= 2 * SMALL_CACHE["max_num_seqs"]

    def test_drafts_equal_reference(self, vsp_run: dict[str, Any]) -> None:
        if self.reference is None:
            pytest.skip("no reference(record, draft, target) defined")
        compared = 0
        for rec in vsp_run["records"]:
            want = self.reference(rec, vsp_run["draft"], vsp_run["target"])
            got = rec["drafts"]
            if not got.shape[1]:
                continue  # a step whose model drafted nothing (the policy verified none, or only lookup's)
            assert got.tolist() == want[:, : got.shape[1]].tolist(), (
                f"step {rec['step']}: drafts {got.tolist()} differ from the reference {want.tolist()}")
            compared += got.shape[0]
        assert compared > 0

    def test_state_equals_replay(self, vsp_run: dict[str, Any]) -> None:
        if self.replay_state is None:
            pytest.skip("no replay_state(prompt, generated, draft) defined")
        from ..runtime.trace import base_request_id

        records = vsp_run["records"]
        assert records and records[0]["state"], "replay_state is defined but the drafter carries no state"
        r = vsp_run["result"]
        checked = 0
        for rec, tokens in zip(records, replay_tokens(records)):
            for row, rid in enumerate(rec["req_ids"]):
                req = base_request_id(rid)
                gen = tokens[req]
                if req in r.finished:
                    out = r.finished[req]
                    n = min(len(gen), len(out))
                    assert gen[:n] == out[:n], f"request {req}: traced tokens are not a prefix of its output"
                want = self.replay_state(PROMPTS[int(req)], gen, vsp_run["draft"])
                for name, value in want.items():
                    got = rec["state"][name][row]
                    assert got.tolist() == value.to(got.dtype).tolist(), (
                        f"step {rec['step']}, request {req} after {len(gen)} tokens: state {name!r} is "
                        f"{got.tolist()}, the replay says {value.tolist()}")
                checked += 1
        assert checked > 0

    def test_tensor_parallel_2(self, vsp_run: dict[str, Any]) -> None:
        if not self.tensor_parallel:
            pytest.skip("tensor_parallel = False")
        from .engine import run_engine

        prompts, n = PROMPTS[:4], 48
        base = _baseline(vsp_run["target"], prompts, n, self.timeout, self.runner, self.vllm)
        r = run_engine(vsp_run["target"], speculative_config=vsp_run["spec"], prompts=prompts, max_tokens=n,
                       tensor_parallel_size=2, env=self._env(), timeout=self.timeout, runner=self.runner, vllm=self.vllm,
                       start_method="spawn")  # as vLLM's CPU build starts them: the plugin loads in fresh workers
        assert r.outputs == base.outputs
        assert r.metrics.get("accepted", 0) > 0

    @pytest.fixture(scope="class")
    @classmethod
    def vsp_kv_only(cls, vsp_inputs: dict[str, Any], vsp_run: dict[str, Any],
                    tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
        """The two engines of :meth:`test_kv_only_writes_the_draft_kv_of_the_whole_forward`, for an attention
        drafter (the suite's run says which kind; none for heads drafters), the second only where the first told
        the forward ``kv_only``: ``{"told": (result, records), "whole": ...}``."""
        from ..runtime.trace import load_trace
        from .engine import run_engine

        self = cls()
        if not vsp_run["records"] or vsp_run["records"][0]["kind"] != "attention":
            return {}
        spec = {**vsp_inputs["spec"],
                "num_speculative_tokens_per_batch_size": kv_only_schedule(self.num_speculative_tokens)}
        out: dict[str, Any] = {}
        for name, flag in (("told", "1"), ("whole", "0")):
            trace = tmp_path_factory.mktemp(f"vsp-kv-only-{name}")
            r = run_engine(vsp_inputs["target"], speculative_config=spec, prompts=PROMPTS, max_tokens=MAX_TOKENS,
                           schedule=SCHEDULE, env={**self._env(), "VLLM_SPEC_PLUGINS_KV_ONLY": flag,
                                                   "VLLM_SPEC_PLUGINS_TRACE_DIR": str(trace)},
                           llm_kwargs=SMALL_CACHE, timeout=self.timeout, runner=self.runner, vllm=self.vllm)
            out[name] = (r, load_trace(trace))
            if not sum(rec["kv_only"] or 0 for rec in out[name][1]):
                break  # a forward without kv_only: nothing to compare
        return out

    def test_kv_only_writes_the_draft_kv_of_the_whole_forward(self, vsp_kv_only: dict[str, Any]) -> None:
        if not vsp_kv_only:
            pytest.skip("a heads drafter: kv_only is for attention drafters (API 4)")
        (r, records) = vsp_kv_only["told"]
        told = sum(rec["kv_only"] or 0 for rec in records)
        if "whole" not in vsp_kv_only:
            pytest.skip("the forward does not take kv_only (API 4): no pass was told")
        (r0, records0) = vsp_kv_only["whole"]
        assert not sum(rec["kv_only"] or 0 for rec in records0), "VLLM_SPEC_PLUGINS_KV_ONLY=0 still told kv_only"
        assert r.finished == r0.finished, "the output differs between the two engines"
        mine, whole = drafts_by_position(records), drafts_by_position(records0)
        assert mine, "no step drafted under the schedule"
        differ = sorted(key for key in mine.keys() | whole.keys() if mine.get(key) != whole.get(key))
        if differ:
            rid, n = differ[0]
            raise AssertionError(
                f"{len(differ)} of {len(mine)} drafting steps differ between the engine whose forward was told "
                f"kv_only=True (in {told} passes whose outputs are discarded) and one running the whole forward "
                f"there (VLLM_SPEC_PLUGINS_KV_ONLY=0); first: request {rid} after {n} tokens drafted "
                f"{mine.get((rid, n))} against {whole.get((rid, n))}. Told kv_only, the forward must write the "
                f"same draft KV cache as the whole forward, for every layer (docs/hooks.md, \"Passes whose "
                f"outputs are discarded\")")


def kv_only_schedule(k: int) -> list[list[int]]:
    """vLLM's ``num_speculative_tokens_per_batch_size`` for the ``kv_only`` test: ``k`` drafts while one request
    runs, none while two or more do (the suite's 3-block KV cache holds one or two at a time)."""
    return [[1, 1, k], [2, 16, 0]]


def drafts_by_position(records: list[dict[str, Any]]) -> dict[tuple[str, int], list[int]]:
    """Each drafting step's drafts, keyed by request (base id) and how many tokens it had sampled then: the same
    key in two engines whatever their steps' make-up."""
    from ..runtime.trace import base_request_id

    out: dict[tuple[str, int], list[int]] = {}
    sampled: dict[str, int] = {}
    for rec in records:
        for i, rid in enumerate(map(base_request_id, rec["req_ids"])):
            sampled[rid] = sampled.get(rid, 0) + int(rec["valid_count"][i])
            if rec["drafts"].shape[1]:
                out[(rid, sampled[rid])] = rec["drafts"][i].tolist()
    return out


__all__ = ["ABORTED", "MAX_TOKENS", "PROMPTS", "SCHEDULE", "ConformanceSuite", "drafts_by_position", "kv_only_schedule",
           "replay_tokens"]
