"""The Model Runner V2 backend without an engine: runner choice, source gathering, state parking, patches."""

from __future__ import annotations

import importlib.metadata
import subprocess
import sys
import types

import pytest
import torch

from vllm_spec_plugins.checkpoint import PLUGIN_ATTR
from vllm_spec_plugins.routing import mrv2_refusal, runner_choice


def _spec(method="draft_model", plugin="medusa", **kw):
    hf = types.SimpleNamespace(**({PLUGIN_ATTR: plugin} if plugin else {}))
    return types.SimpleNamespace(method=method, draft_model_config=types.SimpleNamespace(hf_config=hf),
                                 draft_sample_method=kw.pop("draft_sample_method", "greedy"),
                                 enable_adaptive_verification=kw.pop("enable_adaptive_verification", False), **kw)


def test_plugin_drafters_are_served_by_mrv2_by_default():
    assert mrv2_refusal(_spec(), env={}) is None
    assert mrv2_refusal(_spec("eagle3", "eagle"), env={}) is None
    assert mrv2_refusal(_spec(plugin=None), env={"VLLM_SPEC_PLUGINS_RUNNER": "v1"}) is None  # not ours


def test_runner_v1_keeps_plugin_drafters_on_v1():
    why = mrv2_refusal(_spec(), env={"VLLM_SPEC_PLUGINS_RUNNER": "V1"})
    assert why == ("vllm-spec-plugins drafter 'medusa' (VLLM_SPEC_PLUGINS_RUNNER=v1 keeps plugin drafters on the V1 "
                   "model runner)")


def test_an_unknown_runner_value_is_refused_naming_the_variable():
    with pytest.raises(ValueError, match=r"VLLM_SPEC_PLUGINS_RUNNER='v3' is not one of auto, v1"):
        runner_choice({"VLLM_SPEC_PLUGINS_RUNNER": "v3"})
    assert runner_choice({}) == "auto" and runner_choice({"VLLM_SPEC_PLUGINS_RUNNER": " Auto "}) == "auto"


def test_heads_drafters_needing_draft_logits_go_to_v1_with_the_reason():
    why = mrv2_refusal(_spec(draft_sample_method="probabilistic"), env={})
    assert "heads drafter 'medusa' with draft_sample_method='probabilistic'" in why
    assert "adaptive_verification" in mrv2_refusal(_spec(enable_adaptive_verification=True), env={})
    pc = types.SimpleNamespace(prefill_context_parallel_size=2)
    assert "prefill context parallelism" in mrv2_refusal(_spec(), pc, env={})
    # attention drafters sample in vLLM's loop (logits are vLLM's): served
    assert mrv2_refusal(_spec("eagle", "eagle", draft_sample_method="probabilistic"), pc, env={}) is None


def test_a_vllm_without_mrv2_speculators_keeps_v1(monkeypatch):
    import vllm_spec_plugins.routing as routes

    monkeypatch.setattr(routes, "has_mrv2_backend", lambda: False)
    assert "no Model Runner V2 speculator interface" in routes.mrv2_refusal(_spec(), env={})


# -- source gathering (the same arithmetic as MRV2's prepare_prefill_inputs kernel) ----------------


class _Gatherer:
    """Just what Mrv2Runtime._gather needs."""

    def __init__(self, max_reqs=4):
        from vllm_spec_plugins.runtime.mrv2 import Mrv2Runtime

        self.__class__ = type("G", (_Gatherer, Mrv2Runtime), {})
        self.next_ids = torch.zeros(max_reqs, dtype=torch.int32)
        self.last_rows = torch.zeros(max_reqs, dtype=torch.int64)
        self.wants_sampled = True
        self._sampled = None


def test_gather_last_rows_next_tokens_and_sampled():
    """Three requests: a partial prefill (5 tokens, no token sampled), a decode row with 2 drafts of which
    1 was rejected, a plain decode row. Request slots 2, 0, 3."""
    g = _Gatherer()
    batch = types.SimpleNamespace(num_reqs=3, num_tokens=9, idx_mapping=torch.tensor([2, 0, 3]),
                                  query_start_loc=torch.tensor([0, 5, 8, 9], dtype=torch.int32),
                                  req_ids=["a", "b", "c"], input_ids=torch.arange(9, dtype=torch.int32),
                                  positions=torch.arange(9))
    num_sampled = torch.tensor([0, 2, 1], dtype=torch.int32)
    num_rejected = torch.tensor([0, 1, 0], dtype=torch.int32)
    last_sampled = torch.tensor([[99], [0], [0], [31]])  # by slot
    next_prefill = torch.tensor([[0, 0, 15, 0]], dtype=torch.int32)  # [lookahead, max_reqs], by slot
    g._sampled = torch.tensor([[7, 8, 9], [98, 99, 5], [31, 4, 4]])
    B, T, last = g._gather(batch, torch.zeros(9, 2), None, num_sampled, num_rejected, last_sampled, next_prefill)
    assert (B, T) == (3, 9)
    assert last.tolist() == [4, 6, 8]
    assert g.next_ids[:3].tolist() == [15, 99, 31]
    assert g._step["sampled_token_ids"].tolist() == [[-1, -1, -1], [98, 99, -1], [31, -1, -1]]
    assert g._step["sampled_token_ids"].dtype == torch.int32
    assert g._step["valid_count"] is num_sampled and g._step["req_ids"] == ["a", "b", "c"]


# -- carried state: parked on preemption, restored or reset, freed on finish -----------------------


def _stateful(on_preempt="keep"):
    from vllm_spec_plugins.runtime.mrv2 import Mrv2Runtime
    from vllm_spec_plugins.runtime.state import StatePool

    r = Mrv2Runtime.__new__(Mrv2Runtime)
    r.pool = StatePool([("h", (2,), torch.float32, 0.0, on_preempt)], 4, torch.device("cpu"))
    r._reset_on_preempt = ["h"] if on_preempt == "reset" else []
    r._parked = set()
    r.slot_map = torch.full((4,), -1, dtype=torch.int64)
    return r


def _states(index):
    return types.SimpleNamespace(req_id_to_index=index)


@pytest.mark.parametrize("policy,expect", [("keep", [5.0, 5.0]), ("reset", [0.0, 0.0])])
def test_preempted_state_is_parked_then_restored_or_reset(policy, expect):
    r = _stateful(policy)
    r.requests_added(["a", "b"], _states({"a": 0, "b": 1}))
    slot_a = int(r.slot_map[0])
    r.pool.tensors["h"][slot_a] = 5.0
    r.requests_left(set(), {"a"})  # MRV2 frees slot 0
    assert len(r.pool) == 2 and r._parked == {"a"}
    r.requests_added(["a"], _states({"b": 1, "a": 3}))  # back as a new request, another slot
    assert int(r.slot_map[3]) == slot_a and r._parked == set()
    assert r.pool.tensors["h"][slot_a].tolist() == expect
    r.requests_left({"a", "b"}, set())
    assert len(r.pool) == 0


def test_a_parked_request_that_is_aborted_frees_its_state():
    r = _stateful()
    r.requests_added(["a"], _states({"a": 0}))
    r.requests_left(set(), {"a"})
    r.requests_left({"a"}, set())  # aborted while preempted
    assert len(r.pool) == 0 and r._parked == set()


# -- the patches ---------------------------------------------------------------------------------


def test_init_speculator_rebinding_delegates_for_other_specs_and_is_idempotent():
    from vllm_spec_plugins.patch import model_runner_v2 as p

    calls = []

    def original(vllm_config, device, req_states):
        calls.append(vllm_config)
        return "vllm's"

    cls = type("GPUModelRunner", (), {"__init__": lambda self, *a, **k: None,
                                      "finish_requests": lambda self, so: None,
                                      "add_requests": lambda self, so: None,
                                      "postprocess_sampled": lambda self, *a, **k: None,
                                      "take_draft_token_ids": lambda self: None,
                                      "execute_model": lambda self, so, *a, **k: None})
    mod = types.SimpleNamespace(init_speculator=original, GPUModelRunner=cls)
    p.patch_module(mod)
    first = mod.init_speculator
    p.patch_module(mod)
    assert mod.init_speculator is first and first.__wrapped__ is original
    cfg = types.SimpleNamespace(speculative_config=_spec(plugin=None))
    assert mod.init_speculator(cfg, "cpu", None) == "vllm's" and calls == [cfg]
    assert p.is_plugin_spec(_spec()) and p.is_plugin_spec(_spec("eagle3", "eagle"))
    assert not p.is_plugin_spec(_spec("ngram"))


def test_execute_model_hands_k_model_over_and_take_draft_token_ids_the_sources(caplog):
    """Patches 23 and 22 on a stand-in runner: the scheduler's k_model reaches the plugin speculator before the
    step (not from a dummy run, nor from a step without it), and its sources reach the returned drafts; a failing
    read of the sources is logged once and leaves the drafts as they were."""
    from vllm_spec_plugins._names import MODEL_K_ATTR, SOURCES_ATTR
    from vllm_spec_plugins.patch import model_runner_v2 as p

    drafts = types.SimpleNamespace(req_ids=["a", "b"])
    cls = type("GPUModelRunner", (), {"__init__": lambda self, *a, **k: None,
                                      "finish_requests": lambda self, so: None,
                                      "add_requests": lambda self, so: None,
                                      "postprocess_sampled": lambda self, *a, **k: None,
                                      "take_draft_token_ids": lambda self: drafts,
                                      "execute_model": lambda self, so, it=None, dummy_run=False, **k: "ran"})
    mod = types.SimpleNamespace(init_speculator=lambda *a: None, GPUModelRunner=cls)
    p.patch_module(mod)
    runner = cls.__new__(cls)
    runner.speculator = g = _Gatherer()
    assert runner.execute_model(types.SimpleNamespace(**{MODEL_K_ATTR: 1})) == "ran" and g._model_k_next == 1
    runner.execute_model(types.SimpleNamespace(), None, True)  # a dummy run (positional) leaves it
    runner.execute_model(types.SimpleNamespace(), dummy_run=True)
    assert g._model_k_next == 1
    runner.execute_model(types.SimpleNamespace())  # a step without it: the model drafts the step's k
    assert g._model_k_next is None
    g.draft_sources = lambda ids: [1] * len(ids)
    assert getattr(runner.take_draft_token_ids(), SOURCES_ATTR) == [1, 1]
    del drafts.__dict__[SOURCES_ATTR]
    g.draft_sources = lambda ids: 1 / 0
    for _ in range(2):
        assert not hasattr(runner.take_draft_token_ids(), SOURCES_ATTR)
    assert sum("reading the drafts' sources" in r.getMessage() for r in caplog.records) == 1
    runner.speculator = object()  # not a plugin speculator: nothing touched
    assert runner.execute_model(types.SimpleNamespace(**{MODEL_K_ATTR: 2})) == "ran"


def _verifier(async_scheduling=False):
    """Just what PluginEagleSpeculator._keep_verified_rows and _settle_kept need: two decoding requests."""
    import numpy as np

    from vllm_spec_plugins.runtime.catchup import KeptRows
    from vllm_spec_plugins.runtime.mrv2 import PluginEagleSpeculator

    sp = PluginEagleSpeculator.__new__(PluginEagleSpeculator)
    sp.vllm_config = types.SimpleNamespace(scheduler_config=types.SimpleNamespace(async_scheduling=async_scheduling))
    sp.kept = KeptRows(4, 8, 2, torch.float32, torch.device("cpu"))
    sp._step = {"req_ids": ["a", "b"]}
    sp.next_ids = torch.tensor([90, 91, 0, 0], dtype=torch.int32)
    # request a: its token and 2 drafts at positions 10-12; b: its token and 1 draft at positions 20-21
    batch = types.SimpleNamespace(input_ids=torch.tensor([1, 2, 3, 4, 5], dtype=torch.int32),
                                  positions=torch.tensor([10, 11, 12, 20, 21]),
                                  num_scheduled_tokens=np.array([3, 2], dtype=np.int32),
                                  num_computed_tokens_np=np.array([10, 20], dtype=np.int32),
                                  is_prefilling_np=np.array([False, False]))
    return sp, batch


def test_mrv2_keeps_the_rows_of_a_step_that_verified_drafts_and_trims_them_at_the_next():
    """The rows are what MRV2's draft prefill would consume: tokens shifted left by one, each request's next token
    at its last accepted row (a: 1 of 2 drafts accepted, row 1; b: none, row 3); at the next step the scheduler's
    counts (a at 12, b at 21) drop the rows past them."""
    sp, batch = _verifier()
    slots, hidden, last = torch.arange(100, 105), torch.arange(10.0).view(5, 2), torch.tensor([1, 3])
    assert sp._keep_verified_rows(0, 2, 5, batch, slots, hidden, last) and sp._step["first_pass"] == "skipped"
    assert sp.kept.pending and sp.kept.where == {"a": [0, 3], "b": [1, 2]}  # slot, rows held
    assert sp.kept.token_ids[0:3].tolist() == [2, 90, 4] and sp.kept.token_ids[8:10].tolist() == [91, 1]
    assert sp.kept.positions[0:3].tolist() == [10, 11, 12] and sp.kept.slots[8:10].tolist() == [103, 104]
    batch.num_computed_tokens_np[:] = [12, 21]
    sp._settle_kept(2, batch.num_computed_tokens_np)
    assert sp._step["trimmed"] == 2 and not sp.kept.pending and sp.kept.where == {"a": [0, 2], "b": [1, 1]}


@pytest.mark.parametrize("why", ["k", "async", "prefill", "plain decode", "full"])
def test_mrv2_runs_the_first_pass_where_verified_rows_cannot_be_kept(why):
    """The model drafts this step; async scheduling (the host's counts are then optimistic); a request still in
    its prompt; a plain decode step (no drafts verified: the k = 0 path keeps it); no room left to keep them."""
    sp, batch = _verifier(async_scheduling=why == "async")
    k, T = (1 if why == "k" else 0), 5
    if why == "prefill":
        batch.is_prefilling_np[1] = True
    if why == "plain decode":
        T = 2
    if why == "full":
        sp.kept.keep(["a"], torch.zeros(6, dtype=torch.int32), torch.zeros(6), torch.zeros(6), torch.zeros(6, 2),
                     counts=[6])
    assert not sp._keep_verified_rows(k, 2, T, batch, torch.arange(5), torch.zeros(5, 2), torch.tensor([1, 3]))
    assert "first_pass" not in sp._step


@pytest.mark.parametrize("case", ["k = 0", "k > 0", "prefill context parallel", "the loop raised"])
def test_mrv2_draft_prefill_at_k0_runs_the_forward_alone(monkeypatch, case):
    """While the model's ``k`` is 0 the draft prefill is the draft's forward alone (the same arguments as vLLM's
    prefill gives it); at ``k > 0``, with prefill context parallelism, and after the loop raised, vLLM's prefill."""
    from vllm.v1.worker.gpu.spec_decode.target_dependent_ar.speculator import TargetDependentARSpeculator


    calls = []
    monkeypatch.setattr(TargetDependentARSpeculator, "_prefill", lambda self, *a, **k: calls.append(("vllm", a, k)))
    monkeypatch.setattr(TargetDependentARSpeculator, "_run_model", lambda self, *a, **k: calls.append(("fwd", a, k)))

    def loop(self, *args, **kwargs):  # vLLM's propose: the draft prefill, then (k > 0) the decode passes
        if case == "the loop raised":
            raise RuntimeError("boom")
        self._prefill(3, 40, "md", "slots", None, cudagraph_runtime_mode="NONE", mm_inputs=None)
        return "drafts"

    monkeypatch.setattr(TargetDependentARSpeculator, "propose", loop)
    sp, batch = _verifier()
    sp.kept, sp.buffers, sp.lookup = None, {}, None
    sp.pcp_manager = object() if case == "prefill context parallel" else None
    k = 2 if case == "k > 0" else 0
    args = (batch, None, None, None, None)
    if case == "the loop raised":
        with pytest.raises(RuntimeError):
            sp._propose_guarded(2, 2, None, args, {"num_speculative_tokens": k})
        assert sp._prefill_samples and not calls
        return
    assert sp._propose_guarded(2, 2, None, args, {"num_speculative_tokens": k}) == "drafts"
    assert sp._prefill_samples  # reset for the next step (and for warm-up runs, which call vLLM's propose)
    if case == "k = 0":
        assert calls == [("fwd", (40, "md", "slots"), {"num_tokens_across_dp": None, "mm_inputs": None,
                                                       "cudagraph_runtime_mode": "NONE"})]
    else:
        assert [c[0] for c in calls] == ["vllm"]


# -- the test kit's MRV2 stand-in --------------------------------------------------------------------


def test_fake_triton_backend_is_discoverable_only_on_its_path():
    from vllm_spec_plugins.testing.mrv2 import fake_triton_site, mrv2_env, runner_env

    site = fake_triton_site()
    eps = [ep for ep in importlib.metadata.entry_points(group="triton.backends")
           if ep.dist is not None and str(site) in str(getattr(ep.dist, "_path", ""))]
    assert not eps  # not in this process's environment
    env = mrv2_env("/x")
    assert env["PYTHONPATH"] == site + ":/x" and env["TRITON_INTERPRET"] == "1"
    assert runner_env("v1") == {"VLLM_USE_V2_MODEL_RUNNER": "0"}
    with pytest.raises(ValueError):
        runner_env("v3")
    code = ("import importlib.metadata as m; print(sorted(e.name for e in m.entry_points(group='triton.backends')"
            " if e.value == 'vsp_fake_triton_cpu'))")
    out = subprocess.run([sys.executable, "-c", code], env={"PYTHONPATH": site}, capture_output=True, text=True)
    assert out.stdout.strip() == "['cpu']", out.stderr


def test_setup_never_installs_the_fake_backend():
    names = {d.metadata["Name"] for d in importlib.metadata.distributions()}
    assert "vsp_fake_triton_cpu" not in names


def _doctor_line(env):
    import os

    out = subprocess.run([sys.executable, "-m", "vllm_spec_plugins", "doctor"], capture_output=True, text=True,
                         env={**os.environ, **env}, timeout=300)
    return [ln for ln in out.stdout.splitlines() if "model runner:" in ln]


def test_doctor_says_which_runner_plugin_drafters_get():
    from vllm_spec_plugins.testing.mrv2 import mrv2_env

    env = mrv2_env()
    env.pop("VLLM_USE_V2_MODEL_RUNNER")  # vLLM's own default, with Triton usable
    assert _doctor_line(env) == ["  INFO  model runner: Model Runner V2 for engines with plugin drafters: vLLM's "
                                 "default runner; the shim's MRV2 backend serves heads and attention drafters"]
    plain = _doctor_line({"VLLM_USE_V2_MODEL_RUNNER": ""})
    assert len(plain) == 1 and "the V1 model runner" in plain[0] and "Triton has no backend" in plain[0]
    assert "VLLM_SPEC_PLUGINS_RUNNER=v1 keeps" in _doctor_line({**env, "VLLM_SPEC_PLUGINS_RUNNER": "v1"})[0]


# -- the test-only Triton backend ---------------------------------------------------------------------------


def test_the_interpreter_skips_only_overflow_checks_it_would_discard(tmp_path):
    """The backend turns off ``sanitize_overflow`` in Triton's interpreter, whose checks are discarded while
    ``debug`` is off; with ``debug`` on they would be asserted, and are kept. An interpreted kernel's result is
    unchanged."""
    import dataclasses
    import os

    from vllm_spec_plugins.testing.mrv2 import fake_triton_site, mrv2_env

    code = tmp_path / "compiler.py"
    code.write_text(open(os.path.join(fake_triton_site(), "vsp_fake_triton_cpu", "compiler.py")).read())
    ns: dict = {}
    exec(compile(code.read_text(), str(code), "exec"), ns)  # the backend's own source
    sys.meta_path.remove(next(f for f in sys.meta_path if type(f).__name__ == "_SkipDiscardedOverflowChecks"))

    @dataclasses.dataclass(frozen=True)
    class Options:
        debug: bool
        sanitize_overflow: bool = True

    for debug in (False, True):
        module = types.SimpleNamespace(interpreter_builder=types.SimpleNamespace(options=Options(debug)))
        ns["_no_overflow_checks"](module)
        assert module.interpreter_builder.options.sanitize_overflow is debug

    probe = """
import torch, triton, triton.language as tl
from triton.runtime import interpreter
@triton.jit
def add(x, y, out, n, BLOCK: tl.constexpr):
    i = tl.arange(0, BLOCK)
    tl.store(out + i, tl.load(x + i, mask=i < n) + tl.load(y + i, mask=i < n) * 3, mask=i < n)
x, y = torch.arange(8, dtype=torch.int32), torch.full((8,), 2**29, dtype=torch.int32)
out = torch.empty_like(x)
add[(1,)](x, y, out, 8, BLOCK=8)
print(interpreter.interpreter_builder.options.sanitize_overflow, out.tolist())
"""
    env = {**os.environ, **mrv2_env()}
    r = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, check=True)
    assert r.stdout.split(None, 1) == ["False", str((torch.arange(8, dtype=torch.int32) + 3 * 2**29).tolist()) + "\n"]
