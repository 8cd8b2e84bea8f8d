"""Signature binding of a drafter's forward / state-carry hook (runtime.inputs.bind)."""

from __future__ import annotations

import dataclasses
import types

import pytest

from vllm_spec_plugins import Drafter, ExtraInput, PluginContractError, Source, StateSpec
from vllm_spec_plugins.runtime.inputs import Binding, bind, needs_aux, resolve_shape, source_row_shape

HIDDEN = 64


def make(**kw) -> Drafter:
    d = Drafter(architectures=("ToyDrafter",), model_class="toy_pkg.model:ToyModel", **kw)
    return dataclasses.replace(d, plugin="toy", dist_label="toy-dist 1.2")


def cfg(**kw):
    kw.setdefault("hidden_size", HIDDEN)
    return types.SimpleNamespace(**kw)


def run(d, fn, *, hf=None, hidden=HIDDEN, num_aux=0, k=3, **kw):
    return bind(d, fn, hf_config=hf if hf is not None else cfg(), hidden_size=hidden, num_aux=num_aux,
                num_spec_tokens=k, **kw)


class ToyModel:
    def forward(self, hidden_states, next_token_ids, positions):
        ...

    def needs_unknown(self, hidden_states, mystery):
        ...

    def optional_unknown(self, hidden_states, temperature=1.0, *args, **kwargs):
        ...


def test_default_inputs():
    out = run(make(), ToyModel.forward)
    assert out == [
        Binding("hidden_states", Source.TARGET_HIDDEN_LAST, None, (HIDDEN,), "model"),
        Binding("next_token_ids", Source.NEXT_TOKEN_IDS, None, (), "int32"),
        Binding("positions", Source.POSITIONS_LAST, None, (), "int64"),
    ]
    assert not needs_aux(out)


def test_subset_of_defaults_in_signature_order():
    def forward(positions, hidden_states):
        ...

    assert [b.param for b in run(make(), forward)] == ["positions", "hidden_states"]


def test_declared_extras():
    d = make(extra_inputs=(
        ExtraInput(name="aux", source=Source.AUX_HIDDEN_LAST),
        ExtraInput(name="all_hidden", source=Source.TARGET_HIDDEN_ALL, shape=("hidden_size",)),
        ExtraInput(name="sampled", source=Source.SAMPLED_TOKEN_IDS, dtype="int32"),
        ExtraInput(name="n_acc", source=Source.NUM_ACCEPTED),
        ExtraInput(name="num_new", source=Source.NUM_NEW_TOKENS, shape=()),
    ))

    def forward(self, hidden_states, aux, all_hidden, sampled, n_acc, num_new):
        ...

    out = run(d, forward, num_aux=3, k=4)
    assert out == [
        Binding("hidden_states", Source.TARGET_HIDDEN_LAST, None, (HIDDEN,), "model"),
        Binding("aux", Source.AUX_HIDDEN_LAST, None, (3 * HIDDEN,), "model"),
        Binding("all_hidden", Source.TARGET_HIDDEN_ALL, None, (HIDDEN,), "model"),
        Binding("sampled", Source.SAMPLED_TOKEN_IDS, None, (5,), "int32"),
        Binding("n_acc", Source.NUM_ACCEPTED, None, (), "int32"),
        Binding("num_new", Source.NUM_NEW_TOKENS, None, (), "int32"),
    ]
    assert needs_aux(out)


def test_extra_overrides_default_name():
    d = make(extra_inputs=(ExtraInput(name="hidden_states", source=Source.AUX_HIDDEN_LAST),))

    def forward(hidden_states):
        ...

    assert run(d, forward, num_aux=2) == [Binding("hidden_states", Source.AUX_HIDDEN_LAST, None, (2 * HIDDEN,))]


def test_extra_names_argument_adds_defaults():
    def forward(hidden_states, accepted):
        ...

    out = run(make(), forward, extra_names={"accepted": Source.NUM_ACCEPTED})
    assert out[1] == Binding("accepted", Source.NUM_ACCEPTED, None, (), "int32")


def test_state_params():
    d = make(state=(StateSpec(name="acc", shape=(3,), dtype="int64"),
                    StateSpec(name="h", shape=("hidden_size",))))

    def update_state(self, acc, h, next_token_ids):
        ...

    out = run(d, update_state, state_params=True)
    assert out == [
        Binding("acc", Source.STATE, "acc", (3,), "int64"),
        Binding("h", Source.STATE, "h", (HIDDEN,), "model"),
        Binding("next_token_ids", Source.NEXT_TOKEN_IDS, None, (), "int32"),
    ]


def test_state_params_need_the_flag():
    d = make(state=(StateSpec(name="acc", shape=(3,)),))

    def forward(acc):
        ...

    with pytest.raises(PluginContractError, match="takes parameter 'acc', which nothing provides"):
        run(d, forward)


def test_state_through_extra_input_under_another_name():
    d = make(state=(StateSpec(name="memory", shape=(2, "hidden_size"), dtype="float32"),),
             extra_inputs=(ExtraInput(name="mem", source=Source.STATE, state="memory"),))

    def forward(hidden_states, mem):
        ...

    assert run(d, forward)[1] == Binding("mem", Source.STATE, "memory", (2, HIDDEN), "float32")


def test_parameter_with_default_not_provided_is_omitted():
    out = run(make(), ToyModel.optional_unknown)
    assert [b.param for b in out] == ["hidden_states"]


def test_parameter_without_default_nothing_provides():
    with pytest.raises(PluginContractError) as ei:
        run(make(extra_inputs=(ExtraInput(name="n_acc", source=Source.NUM_ACCEPTED),)), ToyModel.needs_unknown)
    msg = str(ei.value)
    assert "plugin 'toy' (toy-dist 1.2)" in msg
    assert "toy_pkg.model.ToyModel.needs_unknown" in msg
    assert "parameter 'mystery'" in msg
    assert "Known names: hidden_states, n_acc, next_token_ids, positions" in msg
    assert (ei.value.plugin_name, ei.value.dist) == ("toy", "toy-dist 1.2")


def test_shape_mismatch_reports_expected_and_found():
    d = make(extra_inputs=(ExtraInput(name="h_all", source=Source.TARGET_HIDDEN_ALL, shape=("hidden_size",)),))

    def forward(h_all):
        ...

    with pytest.raises(PluginContractError) as ei:
        run(d, forward, hf=cfg(hidden_size=32), hidden=64)
    msg = str(ei.value)
    assert "extra input 'h_all' from target_hidden_all has shape per row [64] in this engine" in msg
    assert "the plugin declares [32]" in msg
    assert "plugin 'toy' (toy-dist 1.2)" in msg


def test_shape_mismatch_aux_int_dims():
    d = make(extra_inputs=(ExtraInput(name="aux", source=Source.AUX_HIDDEN_ALL, shape=(2 * HIDDEN,)),))

    def forward(aux):
        ...

    assert run(d, forward, num_aux=2)[0].shape == (2 * HIDDEN,)
    with pytest.raises(PluginContractError, match=r"shape per row \[192\] in this engine, but the plugin declares \[128\]"):
        run(d, forward, num_aux=3)


def test_shape_of_scalar_source_declared_as_vector():
    d = make(extra_inputs=(ExtraInput(name="n", source=Source.NUM_ACCEPTED, shape=(1,)),))

    def forward(n):
        ...

    with pytest.raises(PluginContractError, match=r"shape per row \[\] in this engine, but the plugin declares \[1\]"):
        run(d, forward)


def test_shape_dims_resolved_from_config_attribute():
    d = make(extra_inputs=(ExtraInput(name="sampled", source=Source.SAMPLED_TOKEN_IDS, shape=("num_heads_plus_one",)),))

    def forward(sampled):
        ...

    assert run(d, forward, hf=cfg(num_heads_plus_one=4), k=3) == [
        Binding("sampled", Source.SAMPLED_TOKEN_IDS, None, (4,), "int32")]
    with pytest.raises(PluginContractError, match=r"has shape per row \[4\] .* declares \[6\]"):
        run(d, forward, hf=cfg(num_heads_plus_one=6), k=3)


@pytest.mark.parametrize("value", [None, "64", 64.0])
def test_non_int_config_attribute(value):
    d = make(extra_inputs=(ExtraInput(name="h_all", source=Source.TARGET_HIDDEN_ALL, shape=("hidden_size",)),))

    def forward(h_all):
        ...

    with pytest.raises(PluginContractError) as ei:
        run(d, forward, hf=cfg(hidden_size=value))
    assert f"with dimension 'hidden_size', but the draft config has hidden_size={value!r} (expected an int)" in str(
        ei.value)
    assert "extra input 'h_all'" in str(ei.value)


def test_missing_config_attribute_for_state():
    d = make(state=(StateSpec(name="acc", shape=("state_width",)),))

    def update_state(acc):
        ...

    with pytest.raises(PluginContractError, match=r"state 'acc' with dimension 'state_width'.*state_width=None"):
        run(d, update_state, state_params=True)


@pytest.mark.parametrize("declared", ["float32", "int64", "bfloat16"])
def test_dtype_mismatch(declared):
    d = make(extra_inputs=(ExtraInput(name="next_ids", source=Source.NEXT_TOKEN_IDS, dtype=declared),))

    def forward(next_ids):
        ...

    with pytest.raises(PluginContractError) as ei:
        run(d, forward)
    assert f"extra input 'next_ids' from next_token_ids is int32, but the plugin declares dtype {declared!r}" in str(
        ei.value)


@pytest.mark.parametrize("declared", ["model", "int64"])
def test_dtype_ok(declared):
    d = make(extra_inputs=(ExtraInput(name="pos", source=Source.POSITIONS_LAST, dtype=declared),))

    def forward(pos):
        ...

    assert run(d, forward)[0].dtype == "int64"


def test_resolve_shape_and_source_row_shape():
    d = make()
    assert resolve_shape(d, cfg(hidden_size=8, n=3), (2, "hidden_size", "n"), "x") == (2, 8, 3)
    assert source_row_shape(Source.TARGET_HIDDEN_LAST, 8, 2, 3) == (8,)
    assert source_row_shape(Source.AUX_HIDDEN_ALL, 8, 2, 3) == (16,)
    assert source_row_shape(Source.SAMPLED_TOKEN_IDS, 8, 2, 3) == (4,)
    assert source_row_shape(Source.NUM_NEW_TOKENS, 8, 2, 3) == ()


def test_shape_none_vs_scalar_and_api1_compat():
    """API 2: shape=None is not checked, shape=() is one scalar per row (checked); API-1 plugins keep
    the old meaning of () (not checked)."""
    def forward(self, sampled):
        ...

    unchecked = make(extra_inputs=(ExtraInput(name="sampled", source=Source.SAMPLED_TOKEN_IDS),))
    assert run(unchecked, forward, k=3)[0].shape == (4,)
    scalar = make(extra_inputs=(ExtraInput(name="sampled", source=Source.SAMPLED_TOKEN_IDS, shape=()),))
    with pytest.raises(PluginContractError, match=r"has shape per row \[4\] in this engine, but the plugin "
                                                  r"declares \[\]"):
        run(scalar, forward, k=3)
    api1 = dataclasses.replace(scalar, api=1)
    assert run(api1, forward, k=3)[0].shape == (4,)


def test_api2_token_sources():
    d = make(extra_inputs=(ExtraInput(name="tokens", source=Source.TOKEN_IDS_ALL, shape=()),
                           ExtraInput(name="n", source=Source.NUM_SCHEDULED_TOKENS, shape=()),
                           ExtraInput(name="rej", source=Source.NUM_REJECTED, dtype="int32")))

    def forward(self, tokens, n, rej):
        ...

    out = run(d, forward)
    assert [(b.source, b.shape, b.dtype) for b in out] == [
        (Source.TOKEN_IDS_ALL, (), "int32"), (Source.NUM_SCHEDULED_TOKENS, (), "int32"),
        (Source.NUM_REJECTED, (), "int32")]
    assert Source.TOKEN_IDS_ALL.rows == "token" and Source.NUM_REJECTED.rows == "request"


def test_api3_num_drafts_is_the_steps_k_for_heads_drafters_only():
    """API 3: ``num_drafts`` is passed by the shim (no buffer); older plugins and attention drafters never get
    it, and a declared extra input cannot take its name."""
    from vllm_spec_plugins.runtime.inputs import loop_inputs_of

    def forward(self, hidden_states, num_drafts):
        ...

    def optional(self, hidden_states, num_drafts=None):
        ...

    for api in (0, 3):
        d = dataclasses.replace(make(), api=api)
        out = run(d, forward, loop_inputs=loop_inputs_of(d))
        assert out[1] == Binding("num_drafts", None)
    api2 = dataclasses.replace(make(), api=2)
    assert loop_inputs_of(api2) == ()
    assert [b.param for b in run(api2, optional, loop_inputs=loop_inputs_of(api2))] == ["hidden_states"]
    with pytest.raises(PluginContractError, match="takes parameter 'num_drafts', which nothing provides"):
        run(api2, forward, loop_inputs=loop_inputs_of(api2))
    attention = dataclasses.replace(make(kind="attention"), api=3)
    assert "num_drafts" not in loop_inputs_of(attention)
    clash = dataclasses.replace(make(extra_inputs=(ExtraInput(name="num_drafts", source=Source.NUM_ACCEPTED),)),
                                api=3)
    with pytest.raises(PluginContractError, match="extra input 'num_drafts' has the name of a step input"):
        run(clash, forward, loop_inputs=loop_inputs_of(clash))


def test_api4_kv_only_is_passed_to_attention_drafters_only():
    """API 4: ``kv_only`` is passed by the shim to attention drafters (no buffer); API-3 and older plugins and heads
    drafters never get it (a parameter with a default is left out, one without refused), and a declared extra
    input cannot take its name."""
    from vllm_spec_plugins.runtime.inputs import loop_inputs_of

    def forward(self, input_ids, positions, hidden_states, kv_only):
        ...

    def optional(self, input_ids, positions, hidden_states, kv_only=False):
        ...

    for api in (0, 4):
        d = dataclasses.replace(make(kind="attention"), api=api)
        assert [b for b in run(d, forward, loop_inputs=loop_inputs_of(d)) if b.param == "kv_only"] == [
            Binding("kv_only", None)]
    api3 = dataclasses.replace(make(kind="attention"), api=3)
    assert "kv_only" not in loop_inputs_of(api3)
    assert [b.param for b in run(api3, optional, loop_inputs=loop_inputs_of(api3))] == [
        "input_ids", "positions", "hidden_states"]
    with pytest.raises(PluginContractError, match="takes parameter 'kv_only', which nothing provides"):
        run(api3, forward, loop_inputs=loop_inputs_of(api3))
    heads = dataclasses.replace(make(), api=4)
    assert "kv_only" not in loop_inputs_of(heads)
    clash = dataclasses.replace(make(kind="attention", extra_inputs=(
        ExtraInput(name="kv_only", source=Source.NUM_ACCEPTED),)), api=4)
    with pytest.raises(PluginContractError, match=r"extra input 'kv_only' has the name of a step input the shim "
                                                  r"passes itself \(API 4: "):
        run(clash, forward, loop_inputs=loop_inputs_of(clash))


def test_api3_target_input_sources_on_a_multimodal_target():
    from vllm_spec_plugins.runtime.inputs import TargetInputs, multimodal_rows

    d = make(extra_inputs=(
        ExtraInput(name="embeds", source=Source.TARGET_INPUTS_EMBEDS, shape=("hidden_size",)),
        ExtraInput(name="is_mm", source=Source.IS_MULTIMODAL, shape=(), dtype="bool"),
        ExtraInput(name="pos", source=Source.POSITIONS_ALL, shape=()),
        ExtraInput(name="nxt", source=Source.NEXT_POSITIONS, shape=()),
    ))

    def forward(hidden_states, embeds, is_mm, pos, nxt):
        ...

    vlm = TargetInputs(multimodal=True, embeds_size=HIDDEN, model="tiny-vlm")
    out = run(d, forward, target=vlm)
    assert [(b.source, b.shape, b.dtype) for b in out[1:]] == [
        (Source.TARGET_INPUTS_EMBEDS, (HIDDEN,), "model"), (Source.IS_MULTIMODAL, (), "bool"),
        (Source.POSITIONS_ALL, (), "int64"), (Source.NEXT_POSITIONS, (), "int64")]
    assert [b.param for b in multimodal_rows(out)] == ["embeds", "is_mm"]
    assert all(s.rows == "token" for s in (Source.TARGET_INPUTS_EMBEDS, Source.IS_MULTIMODAL, Source.POSITIONS_ALL))
    assert Source.NEXT_POSITIONS.rows == "request"


def test_api3_positions_have_one_column_per_mrope_section_on_an_mrope_target():
    from vllm_spec_plugins.runtime.inputs import TargetInputs

    d = make(extra_inputs=(ExtraInput(name="pos", source=Source.POSITIONS_ALL),
                           ExtraInput(name="nxt", source=Source.NEXT_POSITIONS, shape=(3,))))

    def forward(pos, nxt):
        ...

    out = run(d, forward, target=TargetInputs(multimodal=True, embeds_size=HIDDEN, mrope_dims=3))
    assert [b.shape for b in out] == [(3,), (3,)]
    with pytest.raises(PluginContractError, match=r"shape per row \[\] in this engine, but the plugin declares \[3\]"):
        run(d, forward, target=TargetInputs(multimodal=True, embeds_size=HIDDEN))  # plain positions: scalars


def test_api3_input_embeds_are_refused_on_a_text_only_target_naming_plugin_and_source():
    from vllm_spec_plugins.runtime.inputs import TargetInputs

    d = make(extra_inputs=(ExtraInput(name="embeds", source=Source.TARGET_INPUTS_EMBEDS),))

    def forward(hidden_states, embeds):
        ...

    with pytest.raises(PluginContractError) as e:
        run(d, forward, target=TargetInputs(multimodal=False, model="/ckpt/text-llama"))
    msg = str(e.value)
    assert "plugin 'toy'" in msg and "toy-dist 1.2" in msg and "'embeds'" in msg
    assert "target_inputs_embeds" in msg and "'/ckpt/text-llama' is text-only" in msg
    # the mask alone is fine on a text target: every row is False there
    mask = make(extra_inputs=(ExtraInput(name="is_mm", source=Source.IS_MULTIMODAL, dtype="bool"),))

    def fwd2(hidden_states, is_mm):
        ...

    assert run(mask, fwd2, target=TargetInputs(multimodal=False))[1].source is Source.IS_MULTIMODAL
    with pytest.raises(PluginContractError, match="is bool, but the plugin declares dtype 'int32'"):
        run(make(extra_inputs=(ExtraInput(name="is_mm", source=Source.IS_MULTIMODAL, dtype="int32"),)), fwd2,
            target=TargetInputs(multimodal=False))


def test_api3_target_inputs_are_refused_under_pipeline_parallelism():
    from vllm_spec_plugins.runtime.inputs import TargetInputs, check_pipeline_stages

    d = make(extra_inputs=(ExtraInput(name="is_mm", source=Source.IS_MULTIMODAL, dtype="bool"),))

    def forward(hidden_states, is_mm):
        ...

    out = run(d, forward, target=TargetInputs(multimodal=True, embeds_size=HIDDEN))
    check_pipeline_stages(d, out, 1)  # one stage: fine
    check_pipeline_stages(d, run(make(), ToyModel.forward), 2)  # a drafter not reading them: fine
    with pytest.raises(PluginContractError, match=r"plugin 'toy'.*reads is_multimodal.*pipeline_parallel_size=2"):
        check_pipeline_stages(d, out, 2)
