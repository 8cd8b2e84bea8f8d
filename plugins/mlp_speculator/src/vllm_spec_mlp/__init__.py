"""IBM's MLP speculator (fms-extras ``MLPSpeculator``) as a vllm-spec-plugins drafter plugin.

vLLM 0.32's V1 engine cannot run it (no forward, no runner branch) and vLLM 0.33
removed it; this plugin serves every ``MLPSpeculatorPreTrainedModel`` /
``model_type: mlp_speculator`` checkpoint (IBM's ``*-accelerator`` releases) again,
drafting greedily along one chain.
"""

from vllm_spec_plugins import Drafter, hookimpl

__version__ = "0.1.0"
VLLM_SPEC_API = 3  # forward(num_drafts=) runs only the heads the step uses


@hookimpl
def vllm_spec_register_drafters(register):
    register(
        Drafter(
            architectures=("MLPSpeculatorPreTrainedModel",),
            model_type="mlp_speculator",
            config_class="vllm_spec_mlp.config:MLPSpeculatorConfig",
            model_class="vllm_spec_mlp.model:MLPSpeculatorDraftModel",
            kind="heads",
            max_speculative_tokens="n_predict",
        )
    )
