"""A drafter whose drafts depend only on its carried per-request state.

State ``acc = [count, hash, last]``: how many tokens the request has generated, a
rolling hash of them, and the last one. The state-carry hook folds in the tokens
each step produced; the forward proposes ``last`` repeated. A test compares the
state seen at every step with what the request really generated.
"""

from vllm_spec_plugins import Drafter, ExtraInput, Source, StateSpec, hookimpl

VLLM_SPEC_API = 1


@hookimpl
def vllm_spec_register_drafters(register):
    register(Drafter(
        architectures=("StateTestDrafter",),
        model_type="vsp_state_test",
        config_class="vsp_state_drafter.config:StateTestConfig",
        model_class="vsp_state_drafter.model:StateTestDrafter",
        extra_inputs=(
            ExtraInput(name="sampled", source=Source.SAMPLED_TOKEN_IDS, dtype="int32"),
            ExtraInput(name="num_new", source=Source.NUM_NEW_TOKENS, dtype="int32"),
        ),
        state=(StateSpec(name="acc", shape=(3,), dtype="int64", init=0, on_preempt="keep"),),
        max_speculative_tokens="num_heads",
    ))
