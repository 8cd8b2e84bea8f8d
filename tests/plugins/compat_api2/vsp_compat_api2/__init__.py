"""An API-2 recurrent drafter (the compatibility suite's, tests/compat_api/test_api2_recurrent.py).

What API 2 added, used as its docs showed: a learned initial state (``StateSpec(init="h0")``), the step's
scheduled tokens (``TOKEN_IDS_ALL``), how many belong to each request (``NUM_SCHEDULED_TOKENS``) and how many of
them were rejected drafts (``NUM_REJECTED``), as checked scalars (``shape=()``). State ``h = [count, weighted
sum]`` folds every token that stays in a request's sequence; the drafts are the request's last token repeated,
or the token after it where the state's sum is a multiple of 5 (so they depend on the state).
"""

from vllm_spec_plugins import Drafter, ExtraInput, Source, StateSpec, hookimpl

VLLM_SPEC_API = 2


@hookimpl
def vllm_spec_register_drafters(register):
    register(Drafter(
        architectures=("CompatRecurrentDrafter",),
        model_type="vsp_compat_rnn",
        config_class="vsp_compat_api2.config:CompatRecurrentConfig",
        model_class="vsp_compat_api2.model:CompatRecurrentDrafter",
        extra_inputs=(
            ExtraInput(name="tokens", source=Source.TOKEN_IDS_ALL, shape=(), dtype="int32"),
            ExtraInput(name="num_sched", source=Source.NUM_SCHEDULED_TOKENS, shape=(), dtype="int32"),
            ExtraInput(name="num_rej", source=Source.NUM_REJECTED, shape=(), dtype="int32"),
        ),
        state=(StateSpec(name="h", shape=(2,), dtype="int64", init="h0", on_preempt="reset"),),
        max_speculative_tokens="num_heads",
    ))
