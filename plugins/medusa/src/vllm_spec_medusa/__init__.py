"""Medusa heads (FasterDecoding) as a vllm-spec-plugins drafter plugin.

vLLM 0.33 removed its built-in Medusa; this plugin brings it back with its own
config and model, keeps the checkpoint biases vLLM 0.32 drops, and loads every
FasterDecoding checkpoint layout.
"""

from vllm_spec_plugins import Drafter, hookimpl

__version__ = "0.1.0"
VLLM_SPEC_API = 3  # forward(num_drafts=) runs only the heads the step uses


@hookimpl
def vllm_spec_register_drafters(register):
    register(
        Drafter(
            architectures=("MedusaModel",),
            model_type="medusa",
            config_class="vllm_spec_medusa.config:MedusaConfig",
            model_class="vllm_spec_medusa.model:MedusaDraftModel",
            kind="heads",
            max_speculative_tokens="num_heads",
        )
    )
