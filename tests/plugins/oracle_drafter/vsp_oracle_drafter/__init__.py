"""A drafter that looks its drafts up in a table: ``table[position, token] -> next k tokens``.

A test builds the table from a no-speculation run, right for some stretches of each
request and deliberately wrong for others, so the adaptive drafting policy sees
acceptance change mid-request. ``burn`` (config) makes every drafting step do that many
extra matrix products, so drafting has a real cost the policy must weigh.
"""

from vllm_spec_plugins import Drafter, hookimpl

VLLM_SPEC_API = 1


@hookimpl
def vllm_spec_register_drafters(register):
    register(Drafter(
        architectures=("OracleTestDrafter",),
        model_type="vsp_oracle_test",
        config_class="vsp_oracle_drafter.config:OracleTestConfig",
        model_class="vsp_oracle_drafter.model:OracleTestDrafter",
        max_speculative_tokens="num_heads",
    ))
