"""Drafters that fail on purpose, for the fault-tolerance tests.

The checkpoint's ``config.json`` chooses the failure: ``"fault"`` is ``"raise"`` (the forward
raises), ``"oov"`` (the forward returns ids >= vocab_size) or ``"state"`` (the state-carry hook
raises), from the ``"fault_at"``-th call on (1-based). Until then the drafter proposes the
last token again (often accepted on the tiny target). ``hidden_size``/``vocab_size`` are left
out of the fixtures' configs: the shim fills them from the target.

``ShadowLlama`` claims ``LlamaForCausalLM``, an architecture vLLM serves: installing this
plugin must change nothing for Llama targets or plain Llama drafts.
"""

from vllm_spec_plugins import Drafter, StateSpec, hookimpl

VLLM_SPEC_API = 1


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
        architectures=("LlamaForCausalLM",),
        model_class="vsp_faulty_drafter.model:FaultyDrafter",
    ))
