"""An API-1 GRU drafter (the compatibility suite's, tests/compat_api/test_api1_gru.py).

Written as an outside author would have against the API-1 docs: the default inputs only (``hidden_states``,
``next_token_ids``), no state, no ``num_drafts``. A GRU cell starts from the target's hidden state at the last
token and is fed its own drafts: ``h = gru(embed(token), h)``, ``token = argmax(lm_head(h))``, ``num_heads`` times.
"""

from vllm_spec_plugins import Drafter, hookimpl

VLLM_SPEC_API = 1


@hookimpl
def vllm_spec_register_drafters(register):
    register(Drafter(
        architectures=("CompatGruDrafter",),
        model_type="vsp_compat_gru",
        config_class="vsp_compat_api1.config:CompatGruConfig",
        model_class="vsp_compat_api1.model:CompatGruDrafter",
        max_speculative_tokens="num_heads",
    ))
