"""Drafters that fail on purpose, for the fault-tolerance tests.

The checkpoint's ``config.json`` chooses the failure: ``"fault"`` is ``"raise"`` (the forward
raises), ``"exit"`` (the forward calls ``sys.exit``), ``"oov"`` (the forward returns ids >= vocab_size)
or ``"state"`` (the state-carry hook raises), from the ``"fault_at"``-th call on (1-based);
``"bool"`` (the forward returns a bool tensor as ids, from the first call). ``FaultyInitDrafter``
initialises its state from ``initial_seen()`` (API 2), which raises (``"init_raise"``) or has the
wrong shape (``"init_shape"``); ``FaultyMissingInitDrafter`` names an attribute its model lacks.
Until then the drafter proposes the
last token again (often accepted on the tiny target). ``hidden_size``/``vocab_size`` are left
out of the fixtures' configs: the shim fills them from the target.

``"shape"`` (ids of width 1), ``"wide"`` (logits over more tokens than the vocabulary) and
``"nan"`` (NaN logits) fail the start-up trial. ``FaultyImportDrafter`` and ``FaultyNoClassDrafter``
name a model class that cannot be imported; ``FaultyNoWeightsDrafter``'s
model has no ``load_weights``; ``FaultyNoHookDrafter`` declares state without a
state-carry hook; ``FaultyAuxDrafter`` reads target layer ids from a config key ``layer_ids``.

``ShadowLlama`` claims ``LlamaForCausalLM``, an architecture vLLM serves: installing this
plugin must change nothing for Llama targets or plain Llama drafts.
"""

from vllm_spec_plugins import Drafter, StateSpec, hookimpl

VLLM_SPEC_API = 2


@hookimpl
def vllm_spec_register_drafters(register):
    register(Drafter(
        architectures=("FaultyDrafter",),
        model_type="vsp_faulty",
        config_class="vsp_faulty_drafter.config:FaultyConfig",
        model_class="vsp_faulty_drafter.model:FaultyDrafter",
        max_speculative_tokens="num_heads",
    ))
    register(Drafter(
        architectures=("FaultyStateDrafter",),
        model_type="vsp_faulty",  # same config class; the architecture picks this drafter
        model_class="vsp_faulty_drafter.model:FaultyStateDrafter",
        config_class="vsp_faulty_drafter.config:FaultyConfig",
        state=(StateSpec(name="seen", shape=(1,), dtype="int64", init=0, on_preempt="keep"),),
        max_speculative_tokens="num_heads",
    ))
    register(Drafter(
        architectures=("FaultyInitDrafter",),
        model_type="vsp_faulty",
        model_class="vsp_faulty_drafter.model:FaultyStateDrafter",
        config_class="vsp_faulty_drafter.config:FaultyConfig",
        state=(StateSpec(name="seen", shape=(1,), dtype="int64", init="initial_seen"),),
        max_speculative_tokens="num_heads",
    ))
    register(Drafter(
        architectures=("FaultyMissingInitDrafter",),
        model_type="vsp_faulty",
        model_class="vsp_faulty_drafter.model:FaultyStateDrafter",
        config_class="vsp_faulty_drafter.config:FaultyConfig",
        state=(StateSpec(name="seen", shape=(1,), dtype="int64", init="no_such_attribute"),),
        max_speculative_tokens="num_heads",
    ))
    register(Drafter(
        architectures=("FaultyImportDrafter",),
        model_type="vsp_faulty",
        config_class="vsp_faulty_drafter.config:FaultyConfig",
        model_class="vsp_faulty_drafter.no_such_module:FaultyDrafter",
    ))
    register(Drafter(
        architectures=("FaultyNoClassDrafter",),
        model_type="vsp_faulty",
        config_class="vsp_faulty_drafter.config:FaultyConfig",
        model_class="vsp_faulty_drafter.model:NoSuchDrafter",
    ))
    register(Drafter(
        architectures=("FaultyNoWeightsDrafter",),
        model_type="vsp_faulty",
        config_class="vsp_faulty_drafter.config:FaultyConfig",
        model_class="vsp_faulty_drafter.model:FaultyNoWeightsDrafter",
    ))
    register(Drafter(
        architectures=("FaultyNoHookDrafter",),
        model_type="vsp_faulty",
        config_class="vsp_faulty_drafter.config:FaultyConfig",
        model_class="vsp_faulty_drafter.model:FaultyDrafter",
        state=(StateSpec(name="seen", shape=(1,), dtype="int64"),),
    ))
    register(Drafter(
        architectures=("FaultyAuxDrafter",),
        model_type="vsp_faulty",
        config_class="vsp_faulty_drafter.config:FaultyConfig",
        model_class="vsp_faulty_drafter.model:FaultyDrafter",
        aux_layer_ids="layer_ids",
    ))
    register(Drafter(
        architectures=("LlamaForCausalLM",),
        model_class="vsp_faulty_drafter.model:FaultyDrafter",
    ))
