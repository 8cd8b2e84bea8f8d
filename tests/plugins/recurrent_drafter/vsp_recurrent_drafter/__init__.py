"""An API-2 recurrent drafter: it folds every token that enters a request's sequence, prompt included.

State ``h = [count, weighted sum]``: how many tokens were folded and ``sum((t + 1) * k)`` over
them (``k``: 1-based index in the sequence), initialised from the checkpoint's learned ``h0``
(``StateSpec(init="h0")``). The state-carry hook reads the step's scheduled token ids
(``TOKEN_IDS_ALL``), how many belong to each request (``NUM_SCHEDULED_TOKENS``) and how many of
those were rejected drafts (``NUM_REJECTED``); after every step the state covers the request's
whole sequence except the token just produced. The forward proposes that token again.
"""

from vllm_spec_plugins import Drafter, ExtraInput, Source, StateSpec, hookimpl

VLLM_SPEC_API = 2


@hookimpl
def vllm_spec_register_drafters(register):
    register(Drafter(
        architectures=("RecurrentTestDrafter",),
        model_type="vsp_recurrent_test",
        config_class="vsp_recurrent_drafter.config:RecurrentTestConfig",
        model_class="vsp_recurrent_drafter.model:RecurrentTestDrafter",
        extra_inputs=(
            ExtraInput(name="tokens", source=Source.TOKEN_IDS_ALL, shape=(), dtype="int32"),
            ExtraInput(name="num_sched", source=Source.NUM_SCHEDULED_TOKENS, shape=(), dtype="int32"),
            ExtraInput(name="num_rej", source=Source.NUM_REJECTED, shape=(), dtype="int32"),
        ),
        # a recomputed (preempted) request is scheduled again from its first token: start again from h0
        state=(StateSpec(name="h", shape=(2,), dtype="int64", init="h0", on_preempt="reset"),),
        max_speculative_tokens="num_heads",
    ))
