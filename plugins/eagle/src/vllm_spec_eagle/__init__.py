"""EAGLE-1 (SafeAILab) drafters as a vllm-spec-plugins plugin.

An attention drafter: an autoregressive one-layer (or more) Llama decoder fed with
the target's hidden states and token embeddings, with its own paged KV cache, run
inside vLLM's multi-step EAGLE drafting loop. Unlike vLLM's built-in EAGLE it keeps
the reference ``fc.bias`` and accepts an own ``lm_head`` in the checkpoint.

Checkpoints are in the EAGLE authors' layout: a Llama ``config.json`` whose
``num_hidden_layers`` counts draft layers, ``fc.weight``/``fc.bias`` [H, 2H],
``layers.{i}.*``, optional ``embed_tokens.weight`` and ``lm_head.weight`` (shared from
the target when absent), as ``.safetensors`` or ``.bin``. vLLM wraps such a config in
its ``EAGLEConfig`` and names the architecture ``EagleLlamaForCausalLM``.
"""

from vllm_spec_plugins import Drafter, hookimpl

__version__ = "0.1.0"
VLLM_SPEC_API = 1


@hookimpl
def vllm_spec_register_drafters(register):
    register(
        Drafter(
            architectures=("EagleLlamaForCausalLM",),
            model_class="vllm_spec_eagle.model:EagleDraftModel",
            kind="attention",
            position_free=False,
        )
    )
