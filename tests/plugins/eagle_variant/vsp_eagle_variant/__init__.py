"""A third-party EAGLE variant: proves an attention drafter can take extra inputs and carry state.

Its draft is EAGLE-1's (it subclasses the EAGLE plugin's model), but its forward also
takes ``count``, a carried per-request state (tokens generated so far) updated by
its state-carry hook from ``num_new`` (an extra input). In vLLM's first drafting pass
(one row per scheduled token) ``count`` arrives expanded to the tokens of each
request; in later passes (one row per request) as is. With
``VSP_VARIANT_LOG=<dir>`` the model saves what it received on every call.
"""

from vllm_spec_plugins import Drafter, ExtraInput, Source, StateSpec, hookimpl

VLLM_SPEC_API = 1


@hookimpl
def vllm_spec_register_drafters(register):
    register(Drafter(
        architectures=("EagleVariantLlama",),
        model_class="vsp_eagle_variant.model:VariantModel",
        kind="attention",
        position_free=False,
        extra_inputs=(ExtraInput(name="num_new", source=Source.NUM_NEW_TOKENS, dtype="int32"),),
        state=(StateSpec(name="count", dtype="int64", init=0),),
    ))
