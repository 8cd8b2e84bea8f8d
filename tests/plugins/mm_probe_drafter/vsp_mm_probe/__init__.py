"""A heads drafter that reads what a multimodal target was fed (the API-3 sources).

It carries the merged input embedding of each request's last image token (state ``image``),
folded in by its state-carry hook from ``Source.TARGET_INPUTS_EMBEDS`` and ``Source.IS_MULTIMODAL``
(a chunked prefill that splits an image included), and drafts with the target's lm_head over
``hidden_states + image_weight * image``. Its forward also takes the token-row positions and each
request's next position, so a test can compare every traced input with what the target consumed.

``EagleMMProbeLlama`` is the attention counterpart: EAGLE-1's draft (it subclasses the EAGLE plugin's
model) whose forward also takes the token-row sources. vLLM's loop gives them in its first pass, row for
row with the target's tokens, and zeros in the later passes. With ``VSP_MM_PROBE_LOG=<dir>`` the model saves
what it received on every call.
"""

from vllm_spec_plugins import Drafter, ExtraInput, Source, StateSpec, hookimpl

VLLM_SPEC_API = 3


@hookimpl
def vllm_spec_register_drafters(register):
    register(Drafter(
        architectures=("MMProbeDrafter",),
        model_type="vsp_mm_probe",
        config_class="vsp_mm_probe.config:MMProbeConfig",
        model_class="vsp_mm_probe.model:MMProbeDrafter",
        extra_inputs=(
            ExtraInput(name="embeds", source=Source.TARGET_INPUTS_EMBEDS, shape=("hidden_size",)),
            ExtraInput(name="is_mm", source=Source.IS_MULTIMODAL, shape=(), dtype="bool"),
            ExtraInput(name="pos", source=Source.POSITIONS_ALL),  # [] or [mrope_dims]: the target's
            ExtraInput(name="next_pos", source=Source.NEXT_POSITIONS),
            ExtraInput(name="tokens", source=Source.TOKEN_IDS_ALL, shape=(), dtype="int32"),
            ExtraInput(name="counts", source=Source.NUM_SCHEDULED_TOKENS, shape=(), dtype="int32"),
        ),
        state=(StateSpec(name="image", shape=("hidden_size",), init=0.0),),
        max_speculative_tokens="num_heads",
    ))
    register(Drafter(
        architectures=("EagleMMProbeLlama",),  # (vLLM renames an attention draft's class unless it starts "Eagle")
        model_class="vsp_mm_probe.eagle:EagleMMProbe",
        kind="attention",
        position_free=False,
        extra_inputs=(
            ExtraInput(name="embeds", source=Source.TARGET_INPUTS_EMBEDS, shape=("hidden_size",)),
            ExtraInput(name="is_mm", source=Source.IS_MULTIMODAL, shape=(), dtype="bool"),
            ExtraInput(name="pos", source=Source.POSITIONS_ALL),  # [] or [mrope_dims]: the target's
            ExtraInput(name="tokens", source=Source.TOKEN_IDS_ALL, shape=(), dtype="int32"),
            ExtraInput(name="counts", source=Source.NUM_SCHEDULED_TOKENS, shape=(), dtype="int32"),  # request rows
        ),
    ))
