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


#: ``VLLM_SPEC_PLUGINS_RUNNER``: which vLLM model runner plugin drafters may run on. ``auto`` (or
#: unset): the one vLLM picks (Model Runner V2 where vLLM defaults to it); ``v1``: keep plugin
#: drafters on the V1 model runner (the shim then lists them among the features MRV2 lacks, so
#: vLLM picks V1 for the whole engine).
RUNNER_CHOICES = ("auto", "v1")


def runner_choice(env: Any = None) -> str:
    """``VLLM_SPEC_PLUGINS_RUNNER``, checked: ``auto`` or ``v1``."""
    import os

    from ._names import ENV_RUNNER

    value = (os.environ if env is None else env).get(ENV_RUNNER, "").strip().lower() or "auto"
    if value not in RUNNER_CHOICES:
        raise ValueError(f"vllm_spec_plugins: {ENV_RUNNER}={value!r} is not one of {', '.join(RUNNER_CHOICES)} "
                         f"(unset means auto: the model runner vLLM picks)")
    return value


def has_mrv2_backend() -> bool:
    """Whether the installed vLLM has Model Runner V2's speculator interface (vLLM 0.32 and 0.33 do)."""
    import importlib.util

    try:
        return importlib.util.find_spec("vllm.v1.worker.gpu.spec_decode.speculator") is not None
    except (ImportError, ValueError):
        return False


def mrv2_refusal(spec: Any, parallel_config: Any = None, env: Any = None) -> str | None:
    """Why the shim's Model Runner V2 backend cannot serve this plugin spec (``None``: it can).

    The reason goes into vLLM's list of features MRV2 lacks, so vLLM picks the V1 runner.
    """
    name = plugin_of(spec)
    if not name:
        return None
    if runner_choice(env) == "v1":
        from ._names import ENV_RUNNER

        return f"vllm-spec-plugins drafter '{name}' ({ENV_RUNNER}=v1 keeps plugin drafters on the V1 model runner)"
    if not has_mrv2_backend():
        return (f"vllm-spec-plugins drafter '{name}' (this vLLM has no Model Runner V2 speculator interface; "
                f"it runs on the V1 model runner)")
    heads = getattr(spec, "method", None) not in ATTENTION_METHODS
    if heads and getattr(spec, "draft_sample_method", "greedy") == "probabilistic":
        return (f"vllm-spec-plugins heads drafter '{name}' with draft_sample_method='probabilistic' (heads "
                f"drafters return draft ids, not the draft logits MRV2's probabilistic verification reads)")
    if heads and getattr(spec, "enable_adaptive_verification", False):
        return (f"vllm-spec-plugins heads drafter '{name}' with enable_adaptive_verification (it needs draft "
                f"logits, which heads drafters do not return)")
    if heads and getattr(parallel_config, "prefill_context_parallel_size", 1) > 1:
        return f"vllm-spec-plugins heads drafter '{name}' with prefill context parallelism"
    return None
