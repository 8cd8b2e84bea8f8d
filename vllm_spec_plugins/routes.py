"""Route constants shared by the config phase (:mod:`.patch.config`) and the runtime (:mod:`.runtime`).

Neither side imports the other: both import this module (no torch, no vLLM imports).
"""

from __future__ import annotations

from typing import Any

#: Draft hf_config attributes the shim stamps (the hf_config is pickled to every process).
#: Only the shim sets them: values read from a checkpoint's ``config.json`` are stripped
#: (:func:`vllm_spec_plugins.patch.config.strip_stamps`).
PLUGIN_ATTR = "vsp_plugin"
DIST_ATTR = "vsp_dist"
ARCH_ATTR = "vsp_architecture"
STAMP_PREFIX = "vsp_"

#: The key a checkpoint's ``config.json`` may carry to name the plugin that serves it
#: (same effect as ``"method": "<plugin>"``): ``"vllm_spec_plugin": "eagle"``. For layouts whose
#: architecture name vLLM or Transformers already serve (EAGLE-1 drafts say ``LlamaForCausalLM``).
CONFIG_STAMP = "vllm_spec_plugin"

#: vLLM's EAGLE-family methods whose multi-step drafting loop (draft KV cache, attention metadata)
#: attention drafters reuse: the plain loop, fed with the target's final hidden states, and the loop
#: with the target's aux hidden-state outputs on, fed with its chosen layers, concatenated.
ATTENTION_METHODS = ("eagle", "eagle3")
#: The plain loop (attention drafters without ``aux_layer_ids``).
ATTENTION_METHOD = ATTENTION_METHODS[0]
#: The loop with chosen target layers (attention drafters with ``aux_layer_ids``).
AUX_ATTENTION_METHOD = ATTENTION_METHODS[1]


def plugin_of(spec: Any) -> str | None:
    """The plugin name stamped on a SpeculativeConfig's draft hf_config, if any."""
    dmc = getattr(spec, "draft_model_config", None) if spec is not None else None
    if dmc is None:
        return None
    return getattr(dmc.hf_config, PLUGIN_ATTR, None)
