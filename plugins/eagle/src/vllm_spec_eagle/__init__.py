"""EAGLE-1 and EAGLE-3 (SafeAILab) drafters as a vllm-spec-plugins plugin.

Attention drafters: autoregressive one-layer (or more) Llama decoders fed with the
target's hidden states and token embeddings, with their own paged KV cache, run inside
vLLM's multi-step EAGLE drafting loop.

* **EAGLE-1** (``vllm_spec_eagle.model:EagleDraftModel``): fed with the target's final
  hidden states. Unlike vLLM's built-in EAGLE it keeps the reference ``fc.bias`` and
  accepts an own ``lm_head``. Checkpoints in the EAGLE authors' layout: a Llama
  ``config.json`` whose ``num_hidden_layers`` counts draft layers, ``fc.weight``/``fc.bias``
  [H, 2H], ``layers.{i}.*``, optional ``embed_tokens.weight`` and ``lm_head.weight`` (shared
  from the target when absent), or instead of ``lm_head.weight`` a draft vocabulary ``d2t``
  (``t2d`` ignored): logits from the target lm_head's rows of those tokens alone, as
  ``.safetensors`` or ``.bin``. vLLM wraps such a config in
  its ``EAGLEConfig`` and names the architecture ``EagleLlamaForCausalLM``.
* **EAGLE-3** (``vllm_spec_eagle.eagle3:Eagle3DraftModel``): fed with chosen target layers
  (``eagle_aux_hidden_state_layer_ids`` in its ``config.json``; vLLM's default layers when
  absent), combined by its ``fc`` [H, n*H]; own ``lm_head`` over a truncated draft
  vocabulary mapped to the target's by ``d2t``. Numerically the same as vLLM's built-in
  EAGLE-3. Checkpoints: ``"architectures": ["LlamaForCausalLMEagle3"]`` (kept as is by vLLM's
  eagle3 route) or a plain ``LlamaForCausalLM`` config taken on the eagle3 route (renamed
  ``Eagle3LlamaForCausalLM``); keys ``fc.weight``, ``midlayer.*`` or ``layers.0.*``,
  ``norm.weight``, ``lm_head.weight``, ``d2t``, ``t2d`` (ignored), optional ``embed_tokens.weight``.

Routes: ``"method": "eagle"`` (this plugin's name) picks EAGLE-1 or EAGLE-3 from a local
checkpoint's ``config.json``; ``"method": "eagle3"`` (vLLM's name) or a path containing
``eagle3`` takes the EAGLE-3 route, ``eagle-`` in the path the EAGLE-1 route. For a hub id
whose name does not say ``eagle3``, pass ``"method": "eagle3"`` for an EAGLE-3 draft.
"""

from vllm_spec_plugins import Drafter, hookimpl

__version__ = "0.1.0"
VLLM_SPEC_API = 4  # forward(kv_only=) writes the draft KV alone in passes whose outputs are discarded


@hookimpl
def vllm_spec_register_drafters(register):
    # First registered = the route "method": "eagle" takes when nothing else decides it.
    register(
        Drafter(
            architectures=("EagleLlamaForCausalLM",),
            model_class="vllm_spec_eagle.model:EagleDraftModel",
            kind="attention",
            position_free=False,
        )
    )
    register(
        Drafter(
            # as vLLM names them on its eagle3 route: the SafeAILab name is kept, a plain Llama one is prefixed
            architectures=("LlamaForCausalLMEagle3", "Eagle3LlamaForCausalLM"),
            model_class="vllm_spec_eagle.eagle3:Eagle3DraftModel",
            kind="attention",
            aux_layer_ids="eagle_aux_hidden_state_layer_ids",
            position_free=False,
        )
    )
