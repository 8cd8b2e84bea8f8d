"""Names other tools rely on. Changing one is a breaking change."""

PROJECT_NAME = "vllm_spec_plugins"
"""Pluggy project name and the entry-point group drafter plugins register under."""
ENTRY_POINT_GROUP = PROJECT_NAME
ENV_ALLOW = "VLLM_SPEC_PLUGINS"
"""Comma-separated allow-list of plugin names; unset = all, empty = none."""
ENV_TRACE_DIR = "VLLM_SPEC_PLUGINS_TRACE_DIR"
"""If set, every drafting step saves its inputs and drafts under this folder (debugging; syncs)."""
ENV_SKIP_VERSION_CHECK = "VLLM_SPEC_PLUGINS_SKIP_VERSION_CHECK"
ENV_STRICT = "VLLM_SPEC_PLUGINS_STRICT"
"""``1``: a plugin drafter that fails at run time re-raises (engine fails) instead of turning speculation off."""
ENV_RUNNER = "VLLM_SPEC_PLUGINS_RUNNER"
"""``auto`` (default) or ``v1``: the model runner plugin drafters may run on (:func:`vllm_spec_plugins.routing.runner_choice`)."""
API_VERSION = 4
"""Version of the plugin API (hooks, dataclasses, model contract). 2 added ``StateSpec(init="<model
attribute>")``, the ``TOKEN_IDS_ALL`` / ``NUM_SCHEDULED_TOKENS`` / ``NUM_REJECTED`` sources and
``ExtraInput(shape=None)`` (not checked) vs ``shape=()`` (scalar, checked). 3 added the ``num_drafts``
forward parameter of ``heads`` drafters (:data:`vllm_spec_plugins.api.STEP_INPUTS`) and the sources of what
the target was fed (``TARGET_INPUTS_EMBEDS``, ``IS_MULTIMODAL``, ``POSITIONS_ALL``, ``NEXT_POSITIONS``). 4 added the
``kv_only`` forward parameter of ``attention`` drafters (:data:`vllm_spec_plugins.api.ATTENTION_STEP_INPUTS`).
Plugins declaring an earlier API work unchanged."""
MM_MASK_ATTR = "_vsp_is_mm_embed"
"""Where the runner patches leave the step's multimodal-row mask (patches 18 and 19), on the V1 runner or MRV2's
``EncoderRunner``, for ``Source.IS_MULTIMODAL``."""
SOURCES_ATTR = "vsp_sources"
"""Where the runner patches (20: V1, 22: MRV2) put, on the ``DraftTokenIds`` they hand the scheduler, the source of
each request's drafts with prompt lookup on (1: the plugin's model, 2: lookup); the scheduler patch (21) reads it."""
MODEL_K_ATTR = "vsp_model_k"
"""Where the scheduler patch (9) puts, on a ``SchedulerOutput`` whose ``k`` the policy raised for prompt lookup's
drafts, how many of them the plugin's model drafts (the rest are padding where lookup finds no match); the runner
patch (5 on V1, 23 on MRV2) hands it to the proposer."""
SUPPORTED_VLLM = ((0, 32), (0, 33), (0, 34))
