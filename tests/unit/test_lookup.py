"""Prompt lookup beside a plugin drafter (runtime/lookup.py): the device search, the variable, the per-request
choice, and the refusals at start-up."""

from __future__ import annotations

import re
from types import SimpleNamespace

import pytest
import torch

from vllm_spec_plugins.demo import lookup_line
from vllm_spec_plugins.runtime.lookup import (
    AUTO_MAX_TABLE_BYTES,
    ENV_LOOKUP,
    LOOKUP,
    MODEL,
    LookupConfig,
    PromptLookup,
    auto_off_reason,
    lookup_config,
    reference_lookup,
)

from .fakes import attach


def test_reference_examples():
    assert reference_lookup([5, 6, 7, 8, 5, 6], 3, 2, 4) == [7, 8, 5]  # "5 6" seen at 0: what followed
    assert reference_lookup([1, 2, 1, 2], 3, 2, 4) == [1, 2, 1]  # the match runs into the end: its period
    assert reference_lookup([9, 9, 9], 4, 2, 4) == [9, 9, 9, 9]
    assert reference_lookup([1, 2, 3, 4], 2, 2, 4) is None
    # longest first: "3 4" occurs at 2 and, as "2 3 4", at 1; the 3-gram wins and continues at 4
    assert reference_lookup([2, 3, 4, 7, 1, 3, 4, 8, 2, 3, 4], 1, 2, 3) == [7]
    # latest occurrence of the same n-gram: "3 4" then 8, not 7
    assert reference_lookup([3, 4, 7, 3, 4, 8, 3, 4], 1, 2, 2) == [8]


# The device search against reference_lookup on 300 random batches: tools/gpu_check.py's first check, which the unit
# suite runs on the CPU (tests/unit/test_gpu_check.py) and a GPU machine runs on CUDA.


@pytest.mark.parametrize(("value", "expected"), [
    (None, LookupConfig(2, 4, auto=True)), ("", LookupConfig(2, 4, auto=True)), (" Auto ", LookupConfig(2, 4, auto=True)),
    ("0", None), ("off", None), (" OFF ", None), ("on", LookupConfig(2, 4)), ("1:3", LookupConfig(1, 3)),
    ("4:4", LookupConfig(4, 4)), ("2:16", LookupConfig(2, 16)),
])
def test_variable(value, expected):
    assert lookup_config({} if value is None else {ENV_LOOKUP: value}) == expected


@pytest.mark.parametrize("value", ["yes", "1", "3", "0:2", "3:2", "2:17", "a:b", "2:", ":4", "2-4"])
def test_bad_variable_is_refused_naming_it(value):
    with pytest.raises(ValueError, match=f"{ENV_LOOKUP}={value!r} is neither 'auto', 'on', 'off' nor MIN:MAX"):
        lookup_config({ENV_LOOKUP: value})


def _step(lk: PromptLookup, rows: torch.Tensor, seqs: list[list[int]], produced: list[int],
          new: list[list[int]]) -> torch.Tensor:
    """One step: each request schedules ``new[b]`` (their positions follow ``seqs[b]``, which grows by them), and
    its last token is the next one. Returns the next positions."""
    toks, pos, qsl, nxt, npos = [], [], [0], [], []
    for b, s in enumerate(seqs):
        start = len(s)
        s.extend(new[b])
        toks += new[b][:-1]
        pos += list(range(start, start + len(new[b]) - 1))
        qsl.append(len(toks))
        nxt.append(new[b][-1])
        npos.append(len(s) - 1)
    T = len(toks)
    npos_t = torch.tensor(npos)
    lk.observe(rows, len(seqs), T, torch.tensor(toks + [0], dtype=torch.int32), torch.tensor(pos + [0]),
               torch.tensor(qsl, dtype=torch.int32), torch.tensor(nxt, dtype=torch.int32), npos_t,
               torch.tensor(produced, dtype=torch.int32))
    return npos_t


def test_choice_per_request_follows_what_each_source_got_accepted():
    lk = PromptLookup(LookupConfig(2, 3), requests=4, max_len=64, max_tokens=64, device=torch.device("cpu"))
    prompts = {"a": [1, 2, 3, 4, 1, 2], "b": [9, 8, 7, 6]}
    rows = lk.rows(["a", "b"], lambda r: torch.tensor(prompts[r][:2], dtype=torch.int32))
    seqs = [prompts["a"][:2], prompts["b"][:2]]  # the first two tokens came from the prompt (prefix cache)
    npos = _step(lk, rows, seqs, [1, 1], [prompts["a"][2:], prompts["b"][2:]])
    model = torch.tensor([[50, 51], [60, 61]])
    out = lk.compose(rows, model, npos)
    # a: "1 2" seen at 0 (tokens the prefix cache served, from the prompt read on first sight) -> 3 4; b: no match
    assert out.tolist() == [[3, 4], [60, 61]]
    assert lk.chosen is not None and lk.chosen.tolist() == [LOOKUP, MODEL]
    # a's lookup drafts are rejected (1 token produced: none accepted), b's model drafts both accepted
    for _ in range(3):
        npos = _step(lk, rows, seqs, [1, 3], [[3, 1, 2], [5, 5, 5]])
        out = lk.compose(rows, model, npos)
    rate = lk.pool.tensors["rate"][rows]
    assert rate[0, 1] < 0.5 and rate[1, 0] > 0.5
    # a's lookup rate fell below its model rate (0.5, never tried): a takes the model's drafts from now on.
    # b's "5 5" repeats now, but its model drafts were accepted (rate above 0.5): its untried lookup loses
    seq_b = seqs[1][:int(npos[1]) + 1]
    assert reference_lookup(seq_b, 2, 2, 3) == [5, 5]
    assert lk.chosen.tolist() == [MODEL, MODEL], rate
    assert out.tolist() == model.tolist()
    # a finished: its row is freed and a new request starts fresh (rates at their start, its own prompt)
    lk.release("a")
    rows2 = lk.rows(["c"], lambda r: torch.tensor([4, 4], dtype=torch.int32))
    assert int(rows2[0]) == int(rows[0]) and lk.pool.tensors["rate"][rows2[0]].tolist() == [0.5, 0.5]
    npos = _step(lk, rows2, [[4, 4]], [1], [[4]])
    assert lk.compose(rows2, model[:1], npos).tolist() == [[4, 4]]


def test_a_step_whose_model_drafts_nothing_takes_every_match():
    """Where the policy verifies only the lookup's drafts (the model's ``k`` 0), a request whose lookup fell behind
    its model takes its match anyway: the model's drafts would be cut to none, and the rates, which move only with
    drafts verified, would keep the request from drafting for as long as the model's ``k`` stays 0."""
    lk = PromptLookup(LookupConfig(2, 2), requests=2, max_len=32, max_tokens=32, device=torch.device("cpu"))
    rows = lk.rows(["a", "b"], lambda r: None)
    seqs: list[list[int]] = [[], []]
    npos = _step(lk, rows, seqs, [1, 1], [[1, 2, 3, 1, 2], [7, 8, 9]])
    model = torch.tensor([[50, 51], [60, 61]])
    lk.compose(rows, model, npos)
    assert lk.chosen is not None and lk.chosen.tolist() == [LOOKUP, MODEL]
    npos = _step(lk, rows, seqs, [1, 1], [[4, 1, 2], [9]])  # a's "3 1" rejected (4 came), "1 2" repeats again
    rate = lk.pool.tensors["rate"][rows]
    assert rate[0, 1] < rate[0, 0]  # a's lookup now behind its (untried) model
    assert lk.compose(rows, model, npos).tolist() == [[50, 51], [60, 61]]  # the model drafts: a takes its drafts
    for model_k in (0, None):  # the model drafted none of the step's k (the lookup's alone) / all of them
        out = lk.compose(rows, torch.zeros_like(model), npos, model_k)
        assert lk.chosen.tolist() == ([LOOKUP, MODEL] if model_k == 0 else [MODEL, MODEL])
        assert out.tolist() == ([[4, 1], [0, 0]] if model_k == 0 else [[0, 0], [0, 0]])


def test_where_the_policy_raised_k_for_the_lookup_each_source_counts_the_drafts_it_fills():
    """With the step's ``k`` above the model's share (the policy raised it for the lookup's drafts), a request compares
    the accepted tokens each source is expected to yield: its lookup rate times ``k`` against its model rate times
    ``model_k``. A lookup behind its model per draft still wins where it fills enough more of them."""
    lk = PromptLookup(LookupConfig(2, 2), requests=3, max_len=32, max_tokens=32, device=torch.device("cpu"))
    rows = lk.rows(["a", "b", "c"], lambda r: None)
    npos = _step(lk, rows, [[], [], []], [1, 1, 1], [[1, 2, 3, 1, 2], [4, 5, 6, 4, 5], [7, 8, 9]])
    # [model, lookup]: a 0.6 vs 0.3 (0.9 of 3 against 0.6 of 1: the lookup), b 0.9 vs 0.2 (0.6 against 0.9: the
    # model), c no match
    lk.pool.tensors["rate"][rows] = torch.tensor([[0.6, 0.3], [0.9, 0.2], [0.1, 0.9]])
    model = torch.tensor([[50, 0, 0], [60, 0, 0], [70, 0, 0]])  # the model drafted 1 of the step's 3
    out = lk.compose(rows, model, npos, 1)
    assert lk.chosen is not None and lk.chosen.tolist() == [LOOKUP, MODEL, MODEL]
    assert out.tolist() == [[3, 1, 2], [60, 0, 0], [70, 0, 0]]
    for model_k in (3, None):  # the model drafted all of the step's k: its rates compared, as before
        lk.compose(rows, model, npos, model_k)
        assert lk.chosen.tolist() == [MODEL, MODEL, MODEL]
    # at equal expected tokens the lookup's (0.25 x 2 = 0.5 x 1)
    lk.pool.tensors["rate"][rows[0]] = torch.tensor([0.5, 0.25])
    assert lk.compose(rows, model[:, :2], npos, 1)[0].tolist() == [3, 1]


def test_the_runtime_tells_the_lookup_how_many_drafts_the_model_made():
    """The proposers resolve the model's share of the step's ``k`` (``_model_k``) before composing: the lookup sees
    it, and a step whose model drafted none takes every match."""
    from vllm_spec_plugins.runtime.core import DrafterRuntime

    lk = PromptLookup(LookupConfig(2, 2), requests=2, max_len=32, max_tokens=32, device=torch.device("cpu"))
    rows = lk.rows(["a"], lambda r: None)
    npos = _step(lk, rows, [[]], [1], [[1, 2, 3, 1, 2]])
    lk.pool.tensors["rate"][rows[0]] = torch.tensor([0.9, 0.1])  # its lookup far behind its model
    rt = SimpleNamespace(lookup=lk, _step={"lookup": (rows, npos), "model_k": 0})
    assert DrafterRuntime._model_k(rt, 2) == 0  # type: ignore[arg-type]
    assert DrafterRuntime._lookup_compose(rt, torch.zeros((1, 2), dtype=torch.int64)).tolist() == [[3, 1]]  # type: ignore[arg-type]
    rt._step["model_k"] = 2
    assert DrafterRuntime._model_k(rt, 2) == 2  # type: ignore[arg-type]
    assert DrafterRuntime._lookup_compose(rt, torch.full((1, 2), 7)).tolist() == [[7, 7]]  # type: ignore[arg-type]


def test_compose_keeps_the_models_drafts_for_the_trace_only():
    """``_compose``: the drafts returned (the lookup's where a request takes them, padded to the step's k) and, with
    the trace on, a copy of the model's own taken before the composition (MRV2's EAGLE loop writes the composed
    drafts into the very buffer the model's are a view of); without the trace nothing is copied."""
    from vllm_spec_plugins.runtime.core import DrafterRuntime

    lk = PromptLookup(LookupConfig(2, 2), requests=2, max_len=32, max_tokens=32, device=torch.device("cpu"))
    rows = lk.rows(["a", "b"], lambda r: None)
    npos = _step(lk, rows, [[], []], [1, 1], [[1, 2, 3, 1, 2], [4, 5, 6, 7, 8]])
    rt = SimpleNamespace(lookup=lk, _step={"lookup": (rows, npos), "model_k": 1}, _trace_dir="/t",
                         _lookup_compose=lambda d: DrafterRuntime._lookup_compose(rt, d), _padded=DrafterRuntime._padded)
    DrafterRuntime._model_k(rt, 3)  # type: ignore[arg-type]
    buf = torch.tensor([[50, 51, 52], [60, 61, 62]])
    returned, model = DrafterRuntime._compose(rt, buf[:, :1], 3)  # type: ignore[arg-type]
    buf[:, :3] = returned  # as MRV2's EAGLE speculator does
    assert returned.tolist() == [[3, 1, 2], [60, 0, 0]] and model is not None and model.tolist() == [[50], [60]]
    rt._trace_dir = None
    assert DrafterRuntime._compose(rt, buf[:, :1], 3)[1] is None  # type: ignore[arg-type]


def test_a_step_without_drafts_chooses_nothing():
    lk = PromptLookup(LookupConfig(2, 4), requests=2, max_len=16, max_tokens=16, device=torch.device("cpu"))
    rows = lk.rows(["a"], lambda r: None)
    npos = _step(lk, rows, [[]], [1], [[1, 2, 1, 2]])
    empty = torch.empty((1, 0), dtype=torch.int64)
    assert lk.compose(rows, empty, npos) is empty and lk.chosen is None


def _runtime(max_reqs=2, max_model_len=32, async_scheduling=False, per_batch_size=None, dp=1, **model_config):
    from vllm_spec_plugins.api import Drafter

    d = Drafter(architectures=("X",), model_class="m:X", plugin="medusa", dist_label="vllm-spec-medusa 0.1.0")
    return SimpleNamespace(drafter=d, max_reqs=max_reqs, max_num_tokens=8, lookup=None), SimpleNamespace(
        model_config=SimpleNamespace(max_model_len=max_model_len, **model_config),
        scheduler_config=SimpleNamespace(async_scheduling=async_scheduling),
        parallel_config=SimpleNamespace(data_parallel_size=dp),
        speculative_config=SimpleNamespace(draft_sample_method=model_config.pop("draft_sample_method", "greedy"),
                                           num_speculative_tokens_per_batch_size=per_batch_size))


def test_start_up_refuses_what_lookup_cannot_serve():
    from vllm_spec_plugins.runtime.core import DrafterRuntime

    rt, cfg = _runtime()
    DrafterRuntime._setup_lookup(rt, LookupConfig(2, 4), cfg, torch.device("cpu"))  # type: ignore[arg-type]
    assert isinstance(rt.lookup, PromptLookup)
    rt, cfg = _runtime(uses_mrope=True)
    with pytest.raises(ValueError, match=f"{ENV_LOOKUP}=2:4 cannot run beside plugin 'medusa' .*M-RoPE"):
        DrafterRuntime._setup_lookup(rt, LookupConfig(2, 4), cfg, torch.device("cpu"))  # type: ignore[arg-type]
    rt, cfg = _runtime()
    cfg.speculative_config.disable_padded_drafter_batch = True
    with pytest.raises(ValueError, match="disable_padded_drafter_batch is set"):
        DrafterRuntime._setup_lookup(rt, LookupConfig(2, 4), cfg, torch.device("cpu"))  # type: ignore[arg-type]
    rt, cfg = _runtime()
    cfg.speculative_config.draft_sample_method = "probabilistic"
    with pytest.raises(ValueError, match="'probabilistic'.*Unset " + ENV_LOOKUP):
        DrafterRuntime._setup_lookup(rt, LookupConfig(2, 4), cfg, torch.device("cpu"))  # type: ignore[arg-type]


AUTO = LookupConfig(2, 4, auto=True)


def test_auto_turns_lookup_on_where_it_can_serve_and_pay(monkeypatch, caplog):
    from vllm_spec_plugins.runtime.core import DrafterRuntime

    monkeypatch.delenv("VLLM_SPEC_PLUGINS_POLICY", raising=False)
    rt, cfg = _runtime()
    with attach(caplog.handler, "vllm.spec_plugins"):
        DrafterRuntime._setup_lookup(rt, AUTO, cfg, torch.device("cpu"))  # type: ignore[arg-type]
    assert isinstance(rt.lookup, PromptLookup) and rt.lookup.cfg == AUTO
    assert f"{ENV_LOOKUP}=auto (the default): prompt-lookup drafts (n-grams of 2 to 4 tokens)" in caplog.text
    # what the demos print is read from this very line
    assert lookup_line(caplog.text).startswith("prompt lookup: on beside the draft")
    # the table auto sizes is the one allocated
    assert rt.lookup.pool.tensors["tokens"].nbytes == PromptLookup.table_bytes(2, 32)


@pytest.mark.parametrize(("setting", "why", "on_runs"), [
    ({"policy": "off"}, r"the adaptive policy does not choose k here \(VLLM_SPEC_PLUGINS_POLICY=off\)", True),
    ({"policy": "2"}, r"the adaptive policy does not choose k here \(VLLM_SPEC_PLUGINS_POLICY=2 pins k\)", True),
    ({"per_batch_size": [[1, 4, 2]]}, r"the adaptive policy does not choose k here \(num_speculative_tokens_per_batch_"
                                      r"size is set: vLLM's static schedule decides k\)", True),
    ({"dp": 2}, r"the adaptive policy does not choose k here \(data parallel size 2\)", True),
    ({"async_scheduling": True}, "async scheduling is on: the scheduler does not learn", True),
    # (`on` would allocate the 512 MiB: not tried)
    ({"max_reqs": 512, "max_model_len": 131072}, r"its token table would take 512 MiB .* more than the 512 MiB", None),
    ({"uses_mrope": True}, "the target uses M-RoPE", False),
    ({"draft_sample_method": "probabilistic"}, "draft_sample_method is 'probabilistic'", False),
])
def test_auto_leaves_lookup_off_where_it_cannot_serve_or_is_not_known_to_pay(monkeypatch, caplog, setting, why,
                                                                             on_runs):
    """Never refused at start: off, with one line saying why (and, where it could run, how to turn it on)."""
    from vllm_spec_plugins.runtime.core import DrafterRuntime

    setting = dict(setting)
    monkeypatch.setenv("VLLM_SPEC_PLUGINS_POLICY", setting.pop("policy", "adaptive"))
    rt, cfg = _runtime(**setting)
    with attach(caplog.handler, "vllm.spec_plugins"):
        DrafterRuntime._setup_lookup(rt, AUTO, cfg, torch.device("cpu"))  # type: ignore[arg-type]
    assert rt.lookup is None
    assert re.search(f"no prompt-lookup drafts beside those of plugin 'medusa' .*{ENV_LOOKUP} unset or auto.*: {why}",
                     caplog.text), caplog.text
    assert (f"{ENV_LOOKUP}=on turns them on anyway" in caplog.text) == (on_runs is not False)
    # what the demos print is read from this very line: off, and why
    said = lookup_line(caplog.text)
    assert said.startswith("prompt lookup: off (") and re.search(why, said), said
    if on_runs:  # asked for, it runs (where it cannot, it is refused: test_start_up_refuses_what_lookup_cannot_serve)
        DrafterRuntime._setup_lookup(rt, LookupConfig(2, 4), cfg, torch.device("cpu"))  # type: ignore[arg-type]
        assert isinstance(rt.lookup, PromptLookup)


def test_auto_table_cap_is_inclusive():
    assert auto_off_reason(None, False, AUTO_MAX_TABLE_BYTES) is None
    assert auto_off_reason(None, False, AUTO_MAX_TABLE_BYTES + 1) is not None
    assert PromptLookup.table_bytes(256, 131072) < AUTO_MAX_TABLE_BYTES < PromptLookup.table_bytes(512, 131072)


def test_drafts_the_scheduler_cut_are_not_counted_as_rejected():
    """The policy may verify fewer drafts than were made (a request's drafts cut to its source's ``k``): the rate
    folds in the drafts verified (scheduled tokens less one), and a request cut to none keeps its rate."""
    lk = PromptLookup(LookupConfig(2, 2), requests=2, max_len=32, max_tokens=32, device=torch.device("cpu"))
    rows = lk.rows(["a", "b"], lambda r: None)
    seqs: list[list[int]] = [[], []]
    npos = _step(lk, rows, seqs, [1, 1], [[1, 2, 3, 1], [7, 8, 9, 6]])
    out = lk.compose(rows, torch.tensor([[50, 51, 52], [60, 61, 62]]), npos)
    assert lk.chosen is not None and lk.chosen.tolist() == [MODEL, MODEL]  # no 2-gram repeats yet
    assert out.shape == (2, 3)
    # a: cut to 0 drafts (1 token scheduled, 1 produced); b: cut to 1 draft (2 scheduled), accepted (2 produced)
    npos = _step(lk, rows, seqs, [1, 2], [[1, 4], [6, 6, 5]])
    assert lk.verified is not None and lk.verified.tolist() == [0, 1]
    rate = lk.pool.tensors["rate"][rows]
    assert rate[0].tolist() == [0.5, 0.5]  # nothing verified: unchanged, not a rejection
    assert rate[1, 0].item() == pytest.approx(0.7 * 0.5 + 0.3)  # 1 of 1 verified accepted, not 1 of 3


@pytest.mark.parametrize(("env", "spec", "dp"), [
    ({}, {}, 1), ({"VLLM_SPEC_PLUGINS_POLICY": "off"}, {}, 1), ({"VLLM_SPEC_PLUGINS_POLICY": "2"}, {}, 1),
    ({}, {"num_speculative_tokens_per_batch_size": [[1, 4, 2]]}, 1), ({}, {}, 2),
])
def test_auto_reads_the_adaptive_policy_as_the_scheduler_attaches_it(env, spec, dp):
    """``auto`` decides in the worker whether the engine core's scheduler runs the adaptive policy: both must agree."""
    from vllm_spec_plugins.checkpoint import PLUGIN_ATTR
    from vllm_spec_plugins.patch.scheduler import attach as attach_policy
    from vllm_spec_plugins.policy import PolicySettings, not_adaptive

    hf = SimpleNamespace(**{PLUGIN_ATTR: "medusa"})
    cfg = SimpleNamespace(
        speculative_config=SimpleNamespace(**{"draft_model_config": SimpleNamespace(hf_config=hf),
                                              "num_speculative_tokens": 3,
                                              "num_speculative_tokens_per_batch_size": None, **spec}),
        parallel_config=SimpleNamespace(data_parallel_size=dp))
    policy = attach_policy(SimpleNamespace(), cfg, env)
    adaptive = policy is not None and policy.cfg.mode == "adaptive"
    assert adaptive == (not_adaptive(PolicySettings.from_env(env), cfg) is None)


def test_the_conformance_suite_checks_the_plugins_drafts_alone():
    """With ``policy = "adaptive"`` prompt lookup would be on by default: its drafts, accepted where the plugin's are
    not, would pass ``test_drafts_accepted`` for a drafter whose drafts are all wrong."""
    from vllm_spec_plugins.testing.conformance import ConformanceSuite

    class Suite(ConformanceSuite):
        policy = "adaptive"

    assert lookup_config(Suite()._env()) is None
    # an author's own choice still wins
    Suite.env = {ENV_LOOKUP: "on"}
    assert lookup_config(Suite()._env()) == LookupConfig(2, 4)


def test_draft_sources_follow_the_request_ids_the_runner_hands_over():
    """V1 and MRV2 on 0.32/0.33 hand over the step's batch (a prefix); vLLM 0.34 every live request with drafts,
    in the order each first got some: matched by id, a request the step did not draft for keeps the model."""
    from types import SimpleNamespace

    from vllm_spec_plugins.runtime.core import DrafterRuntime
    from vllm_spec_plugins.runtime.lookup import LOOKUP, MODEL

    rt = SimpleNamespace(lookup=SimpleNamespace(chosen=torch.tensor([LOOKUP, MODEL, LOOKUP])),
                         _step={"req_ids": ["a", "b", "c"]})
    assert DrafterRuntime.draft_sources(rt, ["a", "b"]) == [LOOKUP, MODEL]
    assert DrafterRuntime.draft_sources(rt, ["c", "z", "a"]) == [LOOKUP, MODEL, LOOKUP]
    assert DrafterRuntime.draft_sources(rt, ["z"]) is None
    assert DrafterRuntime.draft_sources(SimpleNamespace(lookup=None, _step={}), ["a"]) is None
