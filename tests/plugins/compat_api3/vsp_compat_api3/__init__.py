"""An API-3 heads drafter (the compatibility suite's, tests/compat_api/test_api3_heads.py).

What API 3 added, used as its docs showed: the forward takes ``num_drafts`` (the step's k) and runs only that
many heads. Head ``i`` drafts ``argmax(lm_head(h + silu(W_i h)))`` from the target's hidden state ``h`` at the
last token (Medusa's residual block, with the target's lm_head stored in the checkpoint).
"""

from vllm_spec_plugins import Drafter, hookimpl

VLLM_SPEC_API = 3


@hookimpl
def vllm_spec_register_drafters(register):
    register(Drafter(
        architectures=("CompatHeadsDrafter",),
        model_type="vsp_compat_heads",
        config_class="vsp_compat_api3.config:CompatHeadsConfig",
        model_class="vsp_compat_api3.model:CompatHeadsDrafter",
        max_speculative_tokens="num_heads",
    ))
