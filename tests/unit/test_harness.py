"""The in-process harness and ``check --target``: real vLLM config, loader and proposer on CPU, no engine.

These run vLLM in the test process (the runner shim registered, one gloo rank), building tiny
checkpoints once per module.
"""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file, save_file

from vllm_spec_plugins import diagnose
from vllm_spec_plugins.testing.fixtures import make_tiny_medusa, make_tiny_target


@pytest.fixture(scope="module")
def ck(tmp_path_factory):
    d = tmp_path_factory.mktemp("harness")
    target = make_tiny_target(d / "target")
    medusa = make_tiny_medusa(d / "medusa", target, num_heads=3)
    shared = make_tiny_medusa(d / "medusa_shared", target, num_heads=3, original_lm_head=True,
                              include_lm_head=False)
    bad = make_tiny_medusa(d / "medusa_bad", target, num_heads=3)
    sd = load_file(str(bad / "medusa_lm_head.safetensors"))
    sd["blocks.1.layers.0.weight"] = torch.zeros(128, 64)  # wrong shape
    save_file(sd, str(bad / "medusa_lm_head.safetensors"))
    missing = make_tiny_medusa(d / "medusa_missing", target, num_heads=3)
    sd = load_file(str(missing / "medusa_lm_head.safetensors"))
    del sd["blocks.2.layers.0.weight"]
    save_file(sd, str(missing / "medusa_lm_head.safetensors"))
    state = d / "state"
    state.mkdir()
    (state / "config.json").write_text(json.dumps({"model_type": "vsp_state_test", "hidden_size": 128,
                                                   "vocab_size": 259, "architectures": ["StateTestDrafter"],
                                                   "num_heads": 4}))
    save_file({"one": torch.ones(1)}, str(state / "model.safetensors"))
    return {"target": target, "medusa": medusa, "shared": shared, "bad": bad, "missing": missing, "state": state}


def _items(rep):
    return {i.check: i for i in rep.items}


def test_check_with_target_loads_the_checkpoint(ck):
    rep = diagnose.check_checkpoint(str(ck["medusa"]), str(ck["target"]))
    items = _items(rep)
    assert rep.ok, rep.format()
    assert "vLLM method 'draft_model', 3 speculative tokens" in items["engine config"].detail
    assert "vllm_spec_medusa.config.MedusaConfig" in items["engine config"].detail
    assert items["weights"].status == "ok" and "every one loaded" in items["weights"].detail
    assert "num_drafts <- the step's number of drafts (int, API 3)" in items["forward"].detail


def test_check_with_target_state_drafter(ck):
    rep = diagnose.check_checkpoint(str(ck["state"]), str(ck["target"]))
    items = _items(rep)
    assert rep.ok, rep.format()
    assert "sampled <- sampled_token_ids [5] int32" in items["update_state"].detail  # k = num_heads = 4
    assert "acc <- state 'acc' [3] int64" in items["forward"].detail


def test_check_with_target_fills_missing_sizes_and_reports_what_an_engine_start_raises(ck, tmp_path):
    # A config without hidden_size / vocab_size: the shim fills them from the target, as an engine start does.
    nosize = tmp_path / "nosize"
    nosize.mkdir()
    (nosize / "config.json").write_text(json.dumps({"model_type": "vsp_state_test",
                                                    "architectures": ["StateTestDrafter"], "num_heads": 4}))
    save_file({"one": torch.ones(1)}, str(nosize / "model.safetensors"))
    rep = diagnose.check_checkpoint(str(nosize), str(ck["target"]))
    assert _items(rep)["engine config"].status == "ok", rep.format()
    # More draft tokens than the checkpoint's heads: the engine start would refuse it, and check says so.
    rep = diagnose.check_checkpoint(str(nosize), str(ck["target"]), num_speculative_tokens=5)
    ec = _items(rep)["engine config"]
    assert ec.status == "fail" and "at most 4 tokens per step" in ec.detail, rep.format()


def test_check_with_target_reports_bad_and_missing_keys(ck):
    rep = diagnose.check_checkpoint(str(ck["bad"]), str(ck["target"]))
    w = _items(rep)["weights"]
    assert w.status == "fail" and "'blocks.1.layers.0.weight' has shape [128, 64], expected [128, 128]" in w.detail
    rep = diagnose.check_checkpoint(str(ck["missing"]), str(ck["target"]))
    w = _items(rep)["weights"]
    assert w.status == "fail" and "blocks.2.layers.0.weight" in w.detail and str(ck["missing"]) in w.detail


def test_check_with_target_too_many_tokens(ck):
    rep = diagnose.check_checkpoint(str(ck["medusa"]), str(ck["target"]), num_speculative_tokens=5)
    ec = _items(rep)["engine config"]
    assert ec.status == "fail" and "can propose at most 3 tokens per step" in ec.detail


def _medusa_reference(ckpt, hidden, lm_head=None):
    sd = load_file(str(ckpt / "medusa_lm_head.safetensors"))
    out = []
    for h in range(3):
        x = hidden + torch.nn.functional.silu(hidden @ sd[f"blocks.{h}.layers.0.weight"].T)
        lm = sd.get(f"lm_heads.{h}.weight", lm_head)
        out.append((x @ lm.T).argmax(-1))
    return torch.stack(out, 1)


def test_harness_medusa_drafts_equal_reference(ck):
    from vllm_spec_plugins.testing.harness import DrafterHarness

    h = DrafterHarness(ck["target"], ck["medusa"], num_speculative_tokens=3)
    assert h.target_model is not None  # Medusa defines bind_target
    hidden = torch.randn(5, 128, generator=torch.Generator().manual_seed(0)) * 3
    # three requests: 2, 1 and 2 scheduled tokens; the hidden state of each request's last token is used
    out = h.step(["a", "b", "c"], sampled=[[5, 6], [7], [8, 9]], hidden_states=hidden)
    assert out.drafts.shape == (3, 3) and out.drafts.dtype == torch.int64
    last = hidden[[1, 2, 4]]
    assert torch.equal(out.inputs["hidden_states"], last)
    assert torch.equal(out.drafts, _medusa_reference(ck["medusa"], last))
    assert out.state == {} and out.hook_inputs == {}


def test_harness_bind_target_shares_lm_head(ck):
    from vllm_spec_plugins.testing.fixtures import target_lm_head
    from vllm_spec_plugins.testing.harness import DrafterHarness

    h = DrafterHarness(ck["target"], ck["shared"], num_speculative_tokens=3)
    assert h.model.lm_head is h.target_model.lm_head
    hidden = torch.randn(2, 128, generator=torch.Generator().manual_seed(1)) * 3
    out = h.step(["a", "b"], hidden_states=hidden)
    assert torch.equal(out.drafts, _medusa_reference(ck["shared"], hidden, target_lm_head(ck["target"])))


def test_harness_state_carry_by_request_id(ck):
    from vsp_state_drafter.model import fold

    from vllm_spec_plugins.testing.harness import DrafterHarness

    h = DrafterHarness(ck["target"], ck["state"], num_speculative_tokens=3)
    assert h.target_model is None  # no bind_target: the target is not built
    out = h.step(["a", "b"], sampled=[[10, 11, -1, -1], [20, -1, -1, -1]])
    assert out.state["acc"].tolist() == [[2, fold(0, [10, 11]), 11], [1, fold(0, [20]), 20]]
    assert out.drafts.tolist() == [[11] * 3, [20] * 3]
    assert out.hook_inputs["acc"].tolist() == [[0, 0, 0], [0, 0, 0]]  # the state before the step
    assert out.hook_inputs["num_new"].tolist() == [2, 1]
    # rows move: "b" first now; "a" produced nothing this step (partial prefill): its state is kept
    out = h.step(["b", "a"], sampled=[[21, 22, 23, 24], [-1, -1, -1, -1]])
    assert out.state["acc"].tolist() == [[5, fold(0, [20, 21, 22, 23, 24]), 24], [2, fold(0, [10, 11]), 11]]
    assert h.live_requests == 2
    h.finish("a")
    assert h.live_requests == 1 and h.state("a") == {}
    out = h.step(["a"], sampled=[[30]])  # a new request with a reused id starts from init
    assert out.state["acc"].tolist() == [[1, fold(0, [30]), 30]]
    assert h.state("b")["acc"].tolist() == [5, fold(0, [20, 21, 22, 23, 24]), 24]


def test_harness_refuses_attention_drafters(ck, tmp_path):
    from vllm_spec_plugins.testing.fixtures import make_tiny_eagle
    from vllm_spec_plugins.testing.harness import DrafterHarness

    eagle = make_tiny_eagle(tmp_path / "tiny-eagle-1", ck["target"])
    with pytest.raises(ValueError, match="DrafterHarness runs heads drafters; plugin 'eagle'"):
        DrafterHarness(ck["target"], eagle, num_speculative_tokens=2)


@pytest.fixture(scope="module")
def recurrent(ck):
    d = ck["target"].parent / "recurrent"
    d.mkdir(exist_ok=True)
    (d / "config.json").write_text(json.dumps({"model_type": "vsp_recurrent_test", "hidden_size": 128,
                                               "vocab_size": 259, "architectures": ["RecurrentTestDrafter"],
                                               "num_heads": 3}))
    save_file({"h0": torch.tensor([0, 777])}, str(d / "model.safetensors"))
    return d


def test_harness_api2_token_sources_and_learned_init(ck, recurrent):
    """API 2: the state starts from the checkpoint's h0 and the hook folds the scheduled tokens (prompt
    included) that stay in each request's sequence."""
    from vsp_recurrent_drafter.model import replay

    from vllm_spec_plugins.testing.harness import DrafterHarness

    h = DrafterHarness(ck["target"], recurrent, num_speculative_tokens=3)
    assert h.drafter.api == 2
    h0 = [0, 777]
    # prefill: prompts of 4 and 2 tokens are scheduled; each produced one token
    pa, pb = [1, 50, 60, 70], [1, 33]
    out = h.step(["a", "b"], sampled=[[9], [8]], query_lens=[4, 2], token_ids=pa + pb)
    assert out.hook_inputs["h"].tolist() == [h0, h0]  # initialised from the model parameter
    assert out.hook_inputs["num_sched"].tolist() == [4, 2] and out.hook_inputs["num_rej"].tolist() == [0, 0]
    assert out.state["h"].tolist() == [replay(h0, pa), replay(h0, pb)]
    # decode: "a" verifies [9, d1, d2, d3] and keeps 9 and d1 (2 rejected); "b" keeps only 8 (3 rejected)
    out = h.step(["a", "b"], sampled=[[11, 12, -1, -1], [5, -1, -1, -1]], query_lens=[4, 4],
                 token_ids=[9, 11, 40, 41, 8, 30, 31, 32], num_rejected=[2, 3])
    assert out.state["h"].tolist() == [replay(h0, pa + [9, 11]), replay(h0, pb + [8])]
    assert out.drafts.tolist() == [[12] * 3, [5] * 3]
    # a partial prefill (no token produced) is folded too: the hook reads the scheduled tokens
    out = h.step(["c"], sampled=[[-1]], num_new=[0], query_lens=[3], token_ids=[1, 2, 3])
    assert out.state["h"].tolist() == [replay(h0, [1, 2, 3])]


def test_harness_hidden_states_need_one_row_per_scheduled_token(ck):
    """A wrong row count used to give a bare IndexError from the runtime; the harness names the rule."""
    from vllm_spec_plugins.testing.harness import DrafterHarness

    h = DrafterHarness(ck["target"], ck["medusa"], num_speculative_tokens=3)
    with pytest.raises(ValueError, match=r"hidden_states has shape \[2, 128\], expected \[3, hidden\] \(one row per "
                                         r"scheduled token: query_lens \[2, 1\] add up to 3"):
        h.step(["a", "b"], sampled=[[5, 6, -1, -1], [7, -1, -1, -1]], hidden_states=torch.zeros(2, 128))
    out = h.step(["a", "b"], sampled=[[5, 6, -1, -1], [7, -1, -1, -1]], hidden_states=torch.zeros(3, 128))
    assert out.drafts.shape == (2, 3)


def test_fixture_helpers_give_the_targets_tables(ck):
    from vllm_spec_plugins.testing.fixtures import target_embeddings, target_lm_head

    emb, lm = target_embeddings(ck["target"]), target_lm_head(ck["target"])
    assert emb.shape == lm.shape == (259, 128) and not torch.equal(emb, lm)


def test_check_with_target_runs_the_engines_trial_forward(ck, tmp_path):
    """A Medusa draft of hidden size 64 for a target of 128: every key loads, but the engine refuses it at
    start-up (its trial forward gets the target's hidden states). check used to say PASS; now it refuses it
    with the engine's own message."""
    import shutil

    draft = tmp_path / "medusa-h64"
    shutil.copytree(ck["medusa"], draft)
    sd = load_file(str(draft / "medusa_lm_head.safetensors"))
    g = torch.Generator().manual_seed(0)
    sd = {k: torch.randn(*[64 if n == 128 else n for n in v.shape], generator=g) for k, v in sd.items()}
    save_file(sd, str(draft / "medusa_lm_head.safetensors"))
    cfg = json.loads((draft / "config.json").read_text())
    cfg["hidden_size"] = 64
    (draft / "config.json").write_text(json.dumps(cfg))
    rep = diagnose.check_checkpoint(str(draft), str(ck["target"]))
    items = _items(rep)
    assert not rep.ok and items["weights"].status == "ok"
    trial = items["trial forward"]
    assert trial.status == "fail"
    assert (f"draft '{draft}' (plugin 'medusa', vllm-spec-medusa 0.1.0, model class "
            f"vllm_spec_medusa.model:MedusaDraftModel) failed its trial forward at start-up") in trial.detail
    assert _items(diagnose.check_checkpoint(str(ck["medusa"]), str(ck["target"])))["trial forward"].status == "ok"


def test_harness_medusa_runs_only_the_heads_the_step_uses(ck):
    """API 3: the forward gets the step's k as ``num_drafts``; Medusa runs that many heads, and their drafts
    are the first columns of a full step's."""
    from vllm_spec_plugins.testing.harness import DrafterHarness

    h = DrafterHarness(ck["target"], ck["medusa"], num_speculative_tokens=3)
    assert h.proposer.takes_num_drafts
    calls = []
    for i, block in enumerate(h.model.blocks):
        block.register_forward_hook(lambda mod, args, out, i=i: calls.append(i))
    hidden = torch.randn(2, 128, generator=torch.Generator().manual_seed(2)) * 3
    full = h.step(["a", "b"], hidden_states=hidden)
    assert calls == [0, 1, 2] and full.drafts.shape == (2, 3)
    for k in (1, 2):
        calls.clear()
        out = h.step(["a", "b"], hidden_states=hidden, num_drafts=k)
        assert calls == list(range(k)), (k, calls)
        assert torch.equal(out.drafts, full.drafts[:, :k])
    calls.clear()
    assert h.step(["a", "b"], hidden_states=hidden, num_drafts=0).drafts.shape == (2, 0) and calls == []
    with pytest.raises(ValueError, match=r"num_drafts=4 is outside 0\.\.3"):
        h.step(["a"], num_drafts=4)


def test_trial_forward_refuses_a_drafter_that_breaks_below_k(ck, monkeypatch):
    """The start-up trial also asks a ``num_drafts`` forward for one draft: one that returns fewer columns
    than it was asked for is refused at load, naming the plugin (not at the first step the policy cuts k)."""
    from vllm_spec_medusa.model import MedusaDraftModel

    from vllm_spec_plugins.errors import PluginLoadError
    from vllm_spec_plugins.testing.harness import DrafterHarness

    full = MedusaDraftModel.forward

    def broken(self, hidden_states, num_drafts=None):
        out = full(self, hidden_states)
        return out if num_drafts == self.num_heads else out[:, :0]  # nothing below the full k

    monkeypatch.setattr(MedusaDraftModel, "forward", broken)
    with pytest.raises(PluginLoadError) as e:
        DrafterHarness(ck["target"], ck["medusa"], num_speculative_tokens=3)
    msg = str(e.value)
    assert "plugin 'medusa', vllm-spec-medusa 0.1.0" in msg and "failed its trial forward at start-up" in msg
    assert "returned shape [1, 0]; expected draft token ids [num_reqs=1, k>=1] (it was passed num_drafts=1)" in msg
    rep = diagnose.check_checkpoint(str(ck["medusa"]), str(ck["target"]))  # check --target refuses it the same way
    trial = _items(rep)["trial forward"]
    assert not rep.ok and trial.status == "fail" and "(it was passed num_drafts=1)" in trial.detail
