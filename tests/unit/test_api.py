"""Validation of the public dataclasses (Drafter, ExtraInput, StateSpec) and Source."""

from __future__ import annotations

import dataclasses

import pytest

from vllm_spec_plugins import DEFAULT_INPUTS, Drafter, ExtraInput, Source, StateSpec


def drafter(**kw):
    kw.setdefault("architectures", ("Toy",))
    kw.setdefault("model_class", "toy.model:Toy")
    return Drafter(**kw)


# -- Drafter -------------------------------------------------------------------


def test_minimal_drafter_defaults():
    d = drafter(architectures=["A", "B"])
    assert d.architectures == ("A", "B")  # list normalised to tuple
    assert d.kind == "heads"
    assert d.extra_inputs == () and d.state == ()
    assert d.position_free is True
    assert d.update_state == "update_state"
    assert d.plugin == "" and d.dist == ""
    assert d.display_dist == "unknown distribution"
    assert dataclasses.replace(d, dist_label="x 1.0").display_dist == "x 1.0"


def test_drafter_is_frozen():
    d = drafter()
    with pytest.raises(dataclasses.FrozenInstanceError):
        d.kind = "attention"  # type: ignore[misc]


@pytest.mark.parametrize("ref", ["toy.model.Toy", ":Toy", "toy.model:", ""])
def test_bad_model_class_ref(ref):
    with pytest.raises(ValueError, match=r"model_class must be 'module:Class'"):
        drafter(model_class=ref)


@pytest.mark.parametrize("ref", ["toy.config.Cfg", ":Cfg", "toy.config:"])
def test_bad_config_class_ref(ref):
    with pytest.raises(ValueError, match=r"config_class must be 'module:Class'"):
        drafter(config_class=ref, model_type="toy")


def test_config_class_without_model_type():
    with pytest.raises(ValueError, match="config_class needs model_type"):
        drafter(config_class="toy.config:Cfg")
    assert drafter(config_class="toy.config:Cfg", model_type="toy").model_type == "toy"


def test_no_architectures():
    with pytest.raises(ValueError, match="at least one architecture"):
        drafter(architectures=())


def test_bad_kind():
    with pytest.raises(ValueError, match=r"kind must be 'heads' or 'attention', got 'tree'"):
        drafter(kind="tree")
    assert drafter(kind="attention").kind == "attention"


def test_duplicate_extra_names():
    e1 = ExtraInput(name="aux", source=Source.AUX_HIDDEN_LAST)
    e2 = ExtraInput(name="aux", source=Source.AUX_HIDDEN_ALL)
    e3 = ExtraInput(name="n", source=Source.NUM_ACCEPTED)
    with pytest.raises(ValueError, match=r"extra input\(s\) \['aux'\] twice"):
        drafter(extra_inputs=[e1, e3, e2])
    assert drafter(extra_inputs=[e1, e3]).extra_inputs == (e1, e3)


def test_extra_reads_undeclared_state():
    e = ExtraInput(name="h", source=Source.STATE, state="hidden")
    with pytest.raises(ValueError, match=r"extra input 'h' reads state 'hidden', which is not declared in state="):
        drafter(extra_inputs=(e,))
    with pytest.raises(ValueError, match="reads state 'hidden'"):
        drafter(extra_inputs=(e,), state=(StateSpec(name="other"),))
    ok = drafter(extra_inputs=(e,), state=[StateSpec(name="hidden", shape=("hidden_size",))])
    assert ok.state[0].name == "hidden" and isinstance(ok.state, tuple)


# -- ExtraInput ------------------------------------------------------------------


def test_extra_input_coerces_source_and_shape():
    e = ExtraInput(name="acc", source="num_accepted", shape=[4, "hidden_size"])
    assert e.source is Source.NUM_ACCEPTED
    assert e.shape == (4, "hidden_size")
    assert e.dtype == "model" and e.state is None


def test_extra_input_unknown_source():
    with pytest.raises(ValueError, match="not_a_source"):
        ExtraInput(name="x", source="not_a_source")


def test_state_source_without_state_name():
    with pytest.raises(ValueError, match=r"ExtraInput 'h': give state= exactly when source is Source.STATE"):
        ExtraInput(name="h", source=Source.STATE)


def test_state_name_without_state_source():
    with pytest.raises(ValueError, match=r"ExtraInput 'h': give state= exactly when source is Source.STATE"):
        ExtraInput(name="h", source=Source.TARGET_HIDDEN_LAST, state="hidden")


@pytest.mark.parametrize("name", ["1abc", "my-input", "a b", ""])
def test_extra_input_non_identifier(name):
    with pytest.raises(ValueError, match="is not a valid Python parameter name"):
        ExtraInput(name=name, source=Source.NUM_ACCEPTED)


# -- StateSpec -------------------------------------------------------------------


def test_state_spec_defaults():
    s = StateSpec(name="h", shape=["hidden_size"])
    assert s.shape == ("hidden_size",)
    assert (s.dtype, s.init, s.on_preempt) == ("model", 0.0, "keep")
    assert StateSpec(name="h", on_preempt="reset").on_preempt == "reset"


@pytest.mark.parametrize("policy", ["drop", "KEEP", "", None])
def test_state_spec_bad_on_preempt(policy):
    with pytest.raises(ValueError, match=r"on_preempt must be 'keep' or 'reset'"):
        StateSpec(name="h", on_preempt=policy)


@pytest.mark.parametrize("name", ["2x", "x.y", "with space", ""])
def test_state_spec_non_identifier(name):
    with pytest.raises(ValueError, match=r"StateSpec name .* is not a valid Python parameter name"):
        StateSpec(name=name)


# -- Source ------------------------------------------------------------------------


@pytest.mark.parametrize("source,rows", [
    (Source.TARGET_HIDDEN_LAST, "request"),
    (Source.TARGET_HIDDEN_ALL, "token"),
    (Source.AUX_HIDDEN_LAST, "request"),
    (Source.AUX_HIDDEN_ALL, "token"),
    (Source.NEXT_TOKEN_IDS, "request"),
    (Source.POSITIONS_LAST, "request"),
    (Source.NUM_ACCEPTED, "request"),
    (Source.NUM_NEW_TOKENS, "request"),
    (Source.SAMPLED_TOKEN_IDS, "request"),
    (Source.STATE, "request"),
])
def test_source_rows(source, rows):
    assert source.rows == rows


def test_every_source_has_a_rows_case():
    assert {s.rows for s in Source} == {"request", "token"}
    assert [s for s in Source if s.rows == "token"] == [Source.TARGET_HIDDEN_ALL, Source.AUX_HIDDEN_ALL,
                                                        Source.TOKEN_IDS_ALL, Source.TARGET_INPUTS_EMBEDS,
                                                        Source.IS_MULTIMODAL, Source.POSITIONS_ALL]


def test_source_is_str_enum():
    assert Source("state") is Source.STATE
    assert Source.NEXT_TOKEN_IDS == "next_token_ids"


def test_default_inputs():
    assert DEFAULT_INPUTS == {
        "hidden_states": Source.TARGET_HIDDEN_LAST,
        "next_token_ids": Source.NEXT_TOKEN_IDS,
        "positions": Source.POSITIONS_LAST,
    }


# -- validation of names ------------------------------------------------------------


def test_duplicate_state_names():
    with pytest.raises(ValueError, match=r"state.*'acc'.*twice"):
        drafter(state=(StateSpec(name="acc", shape=(3,)), StateSpec(name="acc", shape=(5,))))


def test_extra_input_name_shadows_state_name():
    with pytest.raises(ValueError, match="'acc'"):
        drafter(extra_inputs=(ExtraInput(name="acc", source=Source.NUM_ACCEPTED),),
                state=(StateSpec(name="acc", shape=(3,)),))


@pytest.mark.parametrize("make", [
    lambda: ExtraInput(name="lambda", source=Source.NUM_ACCEPTED),
    lambda: StateSpec(name="class"),
], ids=["ExtraInput", "StateSpec"])
def test_keyword_names_rejected(make):
    with pytest.raises(ValueError, match="not a valid Python parameter name"):
        make()


def test_state_init_from_model_attribute():
    assert StateSpec(name="h", init="h0").init == "h0"
    assert StateSpec(name="h", init=1.5).init == 1.5
    with pytest.raises(ValueError, match="must be a number or the name of a draft-model attribute"):
        StateSpec(name="h", init="not valid")


# -- declarations validated at registration (a bad one skips the plugin, naming the field) ------------------


@pytest.mark.parametrize("kwargs,match", [
    ({"dtype": "floot32"}, r"StateSpec 'h': dtype 'floot32' is not 'model' or a torch dtype name"),
    ({"shape": (-1,)}, r"StateSpec 'h': dimension -1 must be an int from 1 to 2147483647"),
    ({"shape": (2**34,)}, r"StateSpec 'h': dimension 17179869184 must be an int from 1"),
    ({"shape": (0, 4)}, r"dimension 0 must be an int"),
    ({"shape": (True,)}, r"dimension True must be an int"),
    ({"shape": ("not a name",)}, r"dimension 'not a name' is neither an int nor a config attribute name"),
])
def test_bad_state_declarations_are_refused(kwargs, match):
    from vllm_spec_plugins import StateSpec

    with pytest.raises(ValueError, match=match):
        StateSpec(name="h", **kwargs)


def test_bad_extra_input_declarations_are_refused():
    from vllm_spec_plugins import ExtraInput, Source

    with pytest.raises(ValueError, match=r"ExtraInput 'x': dtype 'int33'"):
        ExtraInput(name="x", source=Source.NUM_ACCEPTED, dtype="int33")
    with pytest.raises(ValueError, match=r"ExtraInput 'x': dimension -3"):
        ExtraInput(name="x", source=Source.TARGET_HIDDEN_LAST, shape=(-3,))
    assert ExtraInput(name="x", source=Source.TARGET_HIDDEN_LAST, shape=("hidden_size",), dtype="bfloat16")


def test_a_plugin_with_a_bad_declaration_is_skipped_naming_plugin_and_field():
    from tests.unit.fakes import FakeEntryPoint
    from vllm_spec_plugins import Drafter, StateSpec, hookimpl
    from vllm_spec_plugins.manager import PluginHost

    class Plugin:
        @hookimpl
        def vllm_spec_register_drafters(self, register):
            register(Drafter(architectures=("X",), model_class="m:X",
                             state=(StateSpec(name="h", dtype="floot32"),)))

    host = PluginHost().load([FakeEntryPoint("badstate", Plugin(), dist="vsp-bad", version="1.2")], allow=None)
    info = host.plugins["badstate"]
    assert info.error == ("ValueError: StateSpec 'h': dtype 'floot32' is not 'model' or a torch dtype name (float16, "
                          "half, bfloat16, float32, float, float64, double, int8, int16, short, int32, int, int64, "
                          "long, uint8, uint16, uint32, uint64, bool, float8_e4m3fn, float8_e5m2)")
    assert not host.drafters


def test_model_class_gaps_name_what_each_kind_lacks():
    from vllm_spec_plugins import AttentionDraftModel, HeadsDraftModel, Register
    from vllm_spec_plugins.api import model_class_error, model_class_gaps

    class Heads:
        def forward(self, hidden_states): ...

        def load_weights(self, weights): ...

    class HeadsNoWeights:
        def forward(self, hidden_states): ...

    heads = Drafter(architectures=("A",), model_class="m:C", plugin="p", dist_label="d 1.0")
    attention = Drafter(architectures=("B",), model_class="m:C", kind="attention", plugin="p", dist_label="d 1.0")
    assert model_class_gaps(heads, Heads) == []
    assert model_class_gaps(heads, HeadsNoWeights) == ["load_weights"]
    assert model_class_gaps(attention, Heads) == ["compute_logits"]
    msg = model_class_error(heads, ["load_weights"])
    assert "plugin 'p' (d 1.0) names model class 'm:C', which has no load_weights()" in msg
    assert "vllm_spec_plugins.HeadsDraftModel" in msg
    assert {"forward", "load_weights"} <= set(dir(HeadsDraftModel)) and "compute_logits" in dir(AttentionDraftModel)
    assert callable(Register)


def test_culprit_is_written_one_way():
    from vllm_spec_plugins.errors import culprit

    d = Drafter(architectures=("A",), model_class="m:C", plugin="p", dist_label="d 1.0")
    assert d.culprit() == culprit("p", "d 1.0") == "plugin 'p' (d 1.0)"
    assert d.culprit(model_class=True) == "plugin 'p' (d 1.0), model class m:C"
    assert d.culprit(model_class=True, checkpoint="/ck") == "draft '/ck' (plugin 'p', d 1.0, model class m:C)"
    assert d.culprit(checkpoint="/ck") == "draft '/ck' (plugin 'p', d 1.0)"


def test_target_lm_head_on_text_and_multimodal_targets():
    import pytest
    import torch

    from vllm_spec_plugins import target_lm_head

    head = torch.nn.Linear(2, 3)

    class Text(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lm_head = head

    class Outer(torch.nn.Module):  # PaddleOCR-VL, Qwen-VL: the head on the language model
        def __init__(self):
            super().__init__()
            self.language_model = Text()

        def get_language_model(self):
            return self.language_model

    class Headless(torch.nn.Module):
        def get_language_model(self):
            return torch.nn.Identity()

    assert target_lm_head(Text()) is head
    assert target_lm_head(Outer()) is head
    with pytest.raises(AttributeError, match="the target Headless has no lm_head"):
        target_lm_head(Headless())
