"""API 1: a GRU drafter plugin (tests/plugins/compat_api1), checked as the API-1 docs showed (issue 57).

docs/testing-plugins.md of API 1: "every drafting step is saved (request ids, the inputs passed to ``forward``,
drafts, live state slots). Compare the drafts with a plain-torch reference of your model on the very inputs the
engine fed it", the trace files loaded with ``torch.load``, forward inputs at the top level of a record (schema 1),
rows that produced a token compared, and ``k`` per step "may be smaller than num_speculative_tokens (vLLM can
lower it per step); the shim keeps the first k columns" (docs/hooks.md). With prompt lookup on by default, trace
schemas 5 to 8 wrote the lookup's drafts under ``drafts`` and this check failed on every row that took them.
"""

from __future__ import annotations

import glob
import json

import pytest
import torch
import torch.nn.functional as F
from safetensors.torch import load_file, save_file

from tests.compat_api.conftest import (
    LOOKUP_ON,
    lookup_replaced_model_drafts,
    run_with_defaults,
)
from vllm_spec_plugins.testing.fixtures import target_lm_head

H, V, E, HEADS = 128, 259, 32, 4


def make_gru_checkpoint(path, target):
    """A GRU whose update gate mostly keeps the target's hidden state, over the target's lm_head: its first draft is
    often the target's last token again (accepted on the repetitive tiny target), and the GRU moves the rest."""
    g = torch.Generator().manual_seed(57)
    path.mkdir(parents=True)
    (path / "config.json").write_text(json.dumps({
        "model_type": "vsp_compat_gru", "architectures": ["CompatGruDrafter"], "hidden_size": H, "vocab_size": V,
        "embed_size": E, "num_heads": HEADS}))
    bias_ih = torch.randn(3 * H, generator=g) * 0.1
    bias_ih[H:2 * H] += 2.0  # the update gate z (r, z, n): h' = (1 - z) n + z h, z about 0.88
    save_file({"embed": torch.randn(V, E, generator=g), "lm_head": target_lm_head(target).float().contiguous(),
               "gru.weight_ih": torch.randn(3 * H, E, generator=g) * 0.3,
               "gru.weight_hh": torch.randn(3 * H, H, generator=g) * 0.1,
               "gru.bias_ih": bias_ih, "gru.bias_hh": torch.randn(3 * H, generator=g) * 0.1},
              str(path / "model.safetensors"))
    return path


def reference_drafts(draft, hidden_states, next_token_ids):
    """The GRU drafter in plain torch: ``[num_reqs, HEADS]`` drafts for these inputs."""
    sd = load_file(str(draft / "model.safetensors"))
    gru = torch.nn.GRUCell(E, H)
    gru.load_state_dict({k.removeprefix("gru."): v for k, v in sd.items() if k.startswith("gru.")})
    h, token, out = hidden_states.float(), next_token_ids.long(), []
    with torch.no_grad():
        for _ in range(HEADS):
            h = gru(sd["embed"][token], h)
            token = F.linear(h, sd["lm_head"]).argmax(-1)
            out.append(token)
    return torch.stack(out, dim=1)


@pytest.fixture(scope="module")
def gru_run(compat_target, tmp_path_factory):
    d = tmp_path_factory.mktemp("api1")
    draft = make_gru_checkpoint(d / "draft", compat_target)
    r = run_with_defaults(compat_target, draft, d / "trace")
    records = [torch.load(f, weights_only=False) for f in sorted(glob.glob(str(d / "trace" / "*.pt")))]
    return draft, r, records


def test_greedy_output_unchanged_and_drafts_accepted(gru_run, compat_baseline):
    _, r, records = gru_run
    assert r.outputs == compat_baseline.outputs
    assert r.metrics["accepted"] > 0
    assert records, "no drafting step was traced"
    assert "plugin 'compatgru'" in r.log and LOOKUP_ON in r.log  # the default: prompt lookup beside the plugin


def test_drafts_equal_a_plain_torch_reference_on_the_traced_inputs(gru_run):
    draft, _, records = gru_run
    compared = 0
    for rec in records:
        rows = rec["valid_count"] > 0
        k = rec["drafts"].shape[1]
        ref = reference_drafts(draft, rec["hidden_states"], rec["next_token_ids"])
        assert torch.equal(rec["drafts"][rows], ref[rows][:, :k]), (
            f"step {rec['step']}: {int((rec['drafts'][rows] != ref[rows][:, :k]).any(dim=1).sum())} of "
            f"{int(rows.sum())} rows differ from the reference")
        compared += int(rows.sum()) if k else 0
    assert compared >= 10, compared
    # not vacuous: prompt lookup ran, and vLLM got its drafts instead of the model's on some of the rows compared
    assert lookup_replaced_model_drafts(records) > 0
