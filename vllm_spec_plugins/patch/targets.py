"""Manifest of every vLLM symbol that our runtime patches touch, and of the vLLM interfaces the shim and the
runtime rely on without patching.

Pure data, stdlib only: it must stay importable without torch or vLLM so that
``tools/compat.py`` can check it against a vLLM wheel's *source* (read with
``ast``) without installing or importing vLLM.

Each :class:`Target` names the module and class that really *define* the
symbol (not a subclass that merely inherits it): the checker looks in the
named class only.  ``params`` is the leading prefix of the real parameter
names (``self`` included for methods, keyword-only names after positional
ones, ``*args``/``**kwargs`` ignored) that our shims rely on; an empty tuple
means only existence is checked.

``versions`` is the vLLM minors in which the symbol must exist *and* our code uses it: a symbol still present in a
version it does not list is reported as INFO, one missing from a version it lists fails the check.  A symbol whose
leading parameters changed between versions has one target per signature, with disjoint ``versions``.
``patch`` is the number of the registry entry (:mod:`vllm_spec_plugins.patch`) that wraps or rebinds the symbol,
on the target of the wrapped symbol only (``None`` for what is only read, subclassed or called); the patches
applied on a version are the distinct ``patch`` numbers of the targets whose ``versions`` list it.
"""

from __future__ import annotations

from dataclasses import dataclass

KINDS: tuple[str, ...] = ("function", "class", "attribute")

#: The vLLM minors the package supports (``vllm_spec_plugins._names.SUPPORTED_VLLM``).
SUPPORTED: tuple[str, ...] = ("0.32", "0.33", "0.34")
#: The releases with the V1 model runner and without vLLM's speculator registry.
BEFORE_REGISTRY: tuple[str, ...] = ("0.32", "0.33")
#: The releases with vLLM's speculator registry (``register_speculative_method``), without the V1 model runner.
REGISTRY: tuple[str, ...] = ("0.34",)


@dataclass(frozen=True)
class Target:
    module: str
    """Dotted module path, e.g. ``"vllm.engine.arg_utils"``."""
    qualname: str
    """``Class.method``, ``Class``, ``function`` or ``name`` inside ``module``."""
    params: tuple[str, ...] = ()
    """Leading parameter names the shim relies on (prefix, in order)."""
    kind: str = "function"
    """``"function"`` | ``"class"`` | ``"attribute"`` (module-level name, or a
    class attribute assigned in the class body / via ``self.X = ...`` in
    ``__init__``, or failing that in another method of the class)."""
    versions: tuple[str, ...] = SUPPORTED
    """vLLM minor versions in which the symbol must exist and is used."""
    why: str = ""
    """One line: which patch or which part of the runtime uses it."""
    patch: int | None = None
    """The registry number of the patch that wraps / rebinds this symbol (``None``: read, subclassed or called)."""


_SPEC = "vllm.config.speculative"
_RUNNER = "vllm.v1.worker.gpu_model_runner"
_BASE = "vllm.v1.spec_decode.llm_base_proposer"
_DRAFT = "vllm.v1.spec_decode.draft_model"
_REGISTRY = "vllm.model_executor.models.registry"
_SCHED = "vllm.v1.core.sched.scheduler"
_CORE = "vllm.v1.engine.core"
_MR2 = "vllm.v1.worker.gpu.model_runner"
_MR2_SPEC = "vllm.v1.worker.gpu.spec_decode.speculator"
_TDAR = "vllm.v1.worker.gpu.spec_decode.target_dependent_ar.speculator"
_SPEC_CFG = "vllm.v1.worker.gpu.spec_decode.speculator_config"
_EAGLE_CFG = "vllm.v1.worker.gpu.spec_decode.eagle.config"
_V1 = BEFORE_REGISTRY  # the V1 model runner and its proposers: gone in 0.34

TARGETS: tuple[Target, ...] = (
    # --- config / engine args -------------------------------------------------
    Target(
        "vllm.engine.arg_utils",
        "EngineArgs.create_speculative_config",
        params=("self", "target_model_config", "target_parallel_config"),
        patch=1,
        why="patch 1 (config.py): plugin alias -> vLLM method before, route the built config to the plugin after",
    ),
    Target(
        "vllm.config.vllm",
        "VllmConfig._get_v2_model_runner_unsupported_features",
        params=("self",),
        versions=BEFORE_REGISTRY,
        patch=2,
        why="patch 2 (config.py): list a plugin draft as unsupported by Model Runner V2 only when the MRV2 backend "
            "cannot serve it (gone in 0.34: no V1 runner to fall back to)",
    ),
    Target(
        _SPEC,
        "SpeculativeConfig",
        kind="class",
        why="patch 1: its method/draft_model_config attributes are rewritten after construction",
    ),
    Target(
        _SPEC,
        "SpeculativeConfig.compute_hash",
        params=("self",),
        versions=BEFORE_REGISTRY,
        patch=3,
        why="patch 3 (config.py): plugin name, distribution, architecture and aux layers added to the hash "
            "(0.34: compile_factors + our SpeculatorConfig.hash_factors)",
    ),
    Target(
        _SPEC,
        "SpeculativeConfig.create_draft_parallel_config",
        params=("target_parallel_config", "speculative_draft_tensor_parallel_size", "draft_model_config"),
        why="patch 1: heads drafters get the target's draft TP back (0.32 sets 1 for mlp_speculator)",
    ),
    Target(
        _SPEC,
        "SpeculativeMethod",
        kind="attribute",
        why="patch 1: read (never widened) to know whether vLLM itself accepts a plugin alias",
    ),
    Target(
        _SPEC,
        "SpeculativeConfig.update_arch_",
        params=("self",),
        versions=REGISTRY,
        why="patch 1 (routing.finalize_spec, 0.34): re-inspect the draft's model info after stamping the private "
            "architecture, so vLLM sees the speculator_config_class the plugin class declares",
    ),
    Target(
        _SPEC,
        "SpeculativeConfig.custom_method",
        kind="attribute",
        versions=REGISTRY,
        why="speculators: vLLM moves a registered plugin name here from method (then the config's base_method: "
            "draft_model / eagle / eagle3, the methods the shim's checks expect)",
    ),
    Target(
        _SPEC,
        "SpeculativeConfig.compile_factors",
        params=("self",),
        versions=REGISTRY,
        why="replaces patch 3 on 0.34: hashes speculator_config.hash_factors(), which our configs extend",
    ),
    Target(
        _SPEC,
        "SpeculativeConfig.uses_aux_hidden_states",
        params=("self",),
        versions=REGISTRY,
        why="replaces patch 14 on 0.34: MRV2's runner turns aux outputs on from it (our SpeculatorConfig answers)",
    ),
    # --- GPU model runner (V1; gone in 0.34) -------------------------------------
    Target(
        _RUNNER,
        "GPUModelRunner.__init__",
        params=("self", "vllm_config", "device"),
        versions=_V1,
        patch=4,
        why="patch 4 (model_runner.py): the runner builds the plugin proposer instead of vLLM's",
    ),
    Target(
        _RUNNER,
        "GPUModelRunner.propose_draft_token_ids",
        params=(
            "self",
            "scheduler_output",
            "sampled_token_ids",
            "sampling_metadata",
            "hidden_states",
            "sample_hidden_states",
            "aux_hidden_states",
            "spec_decode_metadata",
            "common_attn_metadata",
            "slot_mappings",
        ),
        versions=_V1,
        patch=5,
        why="patch 5 (model_runner.py): stash full hidden states / aux layers for the plugin proposer",
    ),
    Target(
        _RUNNER,
        "GPUModelRunner._get_positions",
        params=("self", "num_tokens"),
        versions=_V1,
        why="patch 5 / runtime: the step's positions, in a plain decode step answered without vLLM's preparation",
    ),
    Target(
        _RUNNER,
        "GPUModelRunner.get_model",
        params=("self",),
        versions=_V1,
        why="runtime: a target overriding the hidden states fed to drafters keeps vLLM's path at k = 0 (patch 5)",
    ),
    Target(
        _RUNNER,
        "GPUModelRunner._on_request_state_removed",
        params=("self", "req_id", "req_state"),
        versions=_V1,
        patch=6,
        why="patch 6 (model_runner.py): free carried state of finished/aborted requests",
    ),
    Target(
        _RUNNER,
        "GPUModelRunner._update_states",
        params=("self", "scheduler_output"),
        versions=_V1,
        patch=7,
        why="patch 7 (model_runner.py): reset carried state of resumed requests (on_preempt=reset)",
    ),
    Target(
        _RUNNER,
        "GPUModelRunner.take_draft_token_ids",
        params=("self",),
        versions=_V1,
        patch=20,
        why="patch 20 (model_runner.py): each request's draft source (prompt lookup or the model) to the scheduler",
    ),
    Target(
        _RUNNER,
        "GPUModelRunner._sample",
        params=("self", "logits", "spec_decode_metadata"),
        versions=_V1,
        patch=24,
        why="patch 24 (model_runner.py): the plain sampler in steps that verify no draft (plugin drafters, sync)",
    ),
    Target(
        _RUNNER,
        "GPUModelRunner.use_async_scheduling",
        kind="attribute",
        versions=_V1,
        why="patch 24: the plain sampler only with synchronous scheduling",
    ),
    Target(
        "vllm.v1.spec_decode.metadata",
        "SpecDecodeMetadata.max_spec_len",
        kind="attribute",
        versions=_V1,
        why="patch 24: the step's most drafts of any request (0: no draft verified)",
    ),
    Target(
        _RUNNER,
        "GPUModelRunner.load_model",
        params=("self", "load_dummy_weights", "model"),  # model is keyword-only
        versions=_V1,
        why="not patched: it calls drafter.load_model(target) (CPU runner: unconditionally)",
    ),
    # --- draft-model proposer (V1) -------------------------------------------------
    Target(
        _DRAFT,
        "DraftModelProposer",
        kind="class",
        versions=_V1,
        why="runtime: HeadsProposer subclasses it (isinstance checks in the runner)",
    ),
    Target(
        _BASE,
        "SpecDecodeBaseProposer.propose",
        params=(
            "self",
            "num_speculative_tokens",
            "target_token_ids",
            "target_positions",
            "target_hidden_states",
            "next_token_ids",
            "token_indices_to_sample",
            "common_attn_metadata",
            "sampling_metadata",
            "mm_embed_inputs",
            "num_rejected_tokens_gpu",
            "slot_mappings",
        ),
        versions=_V1,
        why="runtime: overridden by both plugin proposers; the runner calls it with these keywords",
    ),
    Target(
        _BASE,
        "SpecDecodeBaseProposer.load_model",
        params=("self", "target_model"),
        versions=_V1,
        why="runtime: AttentionProposer calls it (draft attention layers, embedding/lm_head sharing)",
    ),
    Target(
        _BASE,
        "SpecDecodeBaseProposer.dummy_run",
        params=("self", "num_tokens", "use_cudagraphs", "is_graph_capturing", "slot_mappings"),
        versions=_V1,
        why="runtime: HeadsProposer overrides it; the runner calls it in warm-up and capture",
    ),
    Target(
        _BASE,
        "SpecDecodeBaseProposer.initialize_attn_backend",
        params=("self", "kv_cache_config", "kernel_block_sizes"),
        versions=_V1,
        why="runtime: HeadsProposer overrides it with a no-op (no draft KV cache)",
    ),
    Target(
        _BASE,
        "SpecDecodeBaseProposer.prepare_next_token_ids_padded",
        params=("self", "sampled_token_ids", "requests", "gpu_input_batch", "discard_request_mask"),
        versions=_V1,
        why="runtime: wrapped by the plugin proposers to keep sampled tokens and valid counts",
    ),
    Target(
        _BASE,
        "SpecDecodeBaseProposer.prepare_inputs_padded",
        params=("self", "common_attn_metadata", "spec_decode_metadata", "valid_sampled_tokens_count"),
        versions=_V1,
        why="runtime: the runner calls it before propose (token_indices_to_sample)",
    ),
    Target(
        "vllm.v1.spec_decode.eagle",
        "EagleProposer",
        kind="class",
        versions=_V1,
        why="runtime: AttentionProposer subclasses it; patch 4 rebinds the runner's name during __init__",
    ),
    # --- model registry / plugin loading --------------------------------------
    Target(
        _REGISTRY,
        "ModelRegistry",
        kind="attribute",
        why="shim.register(): plugin architectures registered (lazy module:Class)",
    ),
    Target(
        _REGISTRY,
        "_ModelRegistry.register_model",
        params=("self", "model_arch", "model_cls"),
        why="shim.register(): plugin architectures registered (lazy module:Class)",
    ),
    Target(
        "vllm.plugins",
        "load_general_plugins",
        params=(),
        why="calls our vllm.general_plugins entry point (shim.register) once per process",
    ),
    # --- further symbols the shim and the runtime rely on (V1) ------------------------
    Target(
        _RUNNER,
        "DraftModelProposer",
        kind="attribute",
        versions=_V1,
        why="patch 4: the runner module's name for DraftModelProposer is rebound during __init__",
    ),
    Target(
        _RUNNER,
        "EagleProposer",
        kind="attribute",
        versions=_V1,
        why="patch 4: the runner module's name for EagleProposer is rebound during __init__",
    ),
    Target(
        _RUNNER,
        "GPUModelRunner.use_aux_hidden_state_outputs",
        kind="attribute",
        versions=_V1,
        why="patch 4: set for heads drafters that read target layers; vLLM sets it for eagle3",
    ),
    Target(
        _BASE,
        "SpecDecodeBaseProposer.method",
        kind="attribute",
        versions=_V1,
        why="runtime: AttentionProposer switches it to 'eagle' around propose once it combined target layers",
    ),
    Target(
        _BASE,
        "SpecDecodeBaseProposer.eagle3_use_aux_hidden_state",
        kind="attribute",
        versions=_V1,
        why="runtime: the runner reads it from our EagleProposer subclass to turn aux outputs on (eagle3)",
    ),
    Target(
        _BASE,
        "SpecDecodeBaseProposer._get_model",
        params=("self",),
        versions=_V1,
        why="runtime: plugin models are built through vLLM's loader",
    ),
    Target(
        _DRAFT,
        "DraftModelProposer._get_model",
        params=("self",),
        versions=_V1,
        why="runtime: HeadsProposer.load_model builds the plugin model with it",
    ),
    Target(
        _DRAFT,
        "DraftModelProposer._raise_if_draft_tp_mismatch",
        params=("self",),
        versions=_V1,
        why="runtime: HeadsProposer keeps vLLM's draft TP == target TP check",
    ),
    Target(
        "vllm.v1.spec_decode.eagle",
        "EagleProposer.__init__",
        params=("self", "vllm_config", "device", "runner"),
        versions=_V1,
        why="runtime: AttentionProposer.__init__ calls it",
    ),
    Target(
        "vllm.transformers_utils.configs.eagle",
        "EAGLEConfig",
        kind="class",
        why="patch 1: attention drafters are matched on the architecture names EAGLEConfig gives",
    ),
    # --- scheduler: the adaptive drafting policy (patch 8-12, 21, 25: scheduler.py) ------------
    Target(
        _SCHED,
        "Scheduler.__init__",
        params=("self", "vllm_config"),
        patch=8,
        why="patch 8 (scheduler.py): attach the adaptive policy as the scheduler's dynamic_sd_lookup",
    ),
    Target(
        _SCHED,
        "Scheduler.dynamic_sd_lookup",
        kind="attribute",
        why="patch 8: read as lookup[number of scheduled requests] once per step to set num_spec_tokens_to_schedule",
    ),
    Target(
        _SCHED,
        "Scheduler.schedule",
        params=("self",),
        patch=9,
        why="patch 9 (scheduler.py): start of a step (timing); per-request cuts of request.spec_token_ids",
    ),
    Target(
        _SCHED,
        "Scheduler.make_spec_decoding_stats",
        params=("self", "spec_decoding_stats", "num_draft_tokens", "num_accepted_tokens",
                "num_invalid_spec_tokens", "request_id"),
        patch=10,
        why="patch 10 (scheduler.py): per-request acceptance fed to the policy",
    ),
    Target(
        _SCHED,
        "Scheduler.update_from_output",
        params=("self", "scheduler_output", "model_runner_output"),
        patch=11,
        why="patch 11 (scheduler.py): end of a step (timing, shape of the step)",
    ),
    Target(
        _SCHED,
        "Scheduler.update_draft_token_ids",
        params=("self", "draft_token_ids"),
        patch=21,
        why="patch 21 (scheduler.py): the per-request draft sources to the policy (prompt lookup; patches 20, 22)",
    ),
    Target(
        _CORE,
        "EngineCore.post_step",
        params=("self", "model_executed"),
        versions=BEFORE_REGISTRY,
        patch=25,
        why="patch 25 (scheduler.py): no draft take from the runner after a step that drafted nothing (k = 0); "
            "V1 runner only, so not installed on 0.34",
    ),
    Target(
        _CORE,
        "EngineCore.batch_queue",
        kind="attribute",
        versions=BEFORE_REGISTRY,
        why="patch 25: only without a batch queue (the policy's k is then the step's just run)",
    ),
    Target(
        _CORE,
        "EngineCore.async_scheduling",
        kind="attribute",
        versions=BEFORE_REGISTRY,
        why="patch 25: only with synchronous scheduling (vLLM's post_step takes drafts only then)",
    ),
    Target(
        _CORE,
        "EngineCore.vllm_config",
        kind="attribute",
        versions=BEFORE_REGISTRY,
        why="patch 25: which model runner the engine runs",
    ),
    Target(
        "vllm.config.vllm",
        "VllmConfig.use_v2_model_runner",
        kind="attribute",
        versions=_V1,
        why="patch 25: V1 only (the V1 runner's drafts at k = 0 are an empty list per request); a property; "
            "gone in 0.34 (read as MRV2: patch 25 never skips there)",
    ),
    Target(
        _SCHED,
        "Scheduler.shutdown",
        params=("self",),
        patch=12,
        why="patch 12 (scheduler.py): the policy's summary line and stats file at shutdown",
    ),
    Target(
        "vllm.v1.core.sched.output",
        "SchedulerOutput.num_spec_tokens_to_schedule",
        kind="attribute",
        why="patches 8/11: the per-step k the runner passes to propose (and async placeholders are sized by)",
    ),
    Target(
        "vllm.model_executor.models.medusa",
        "Medusa",
        kind="class",
        versions=("0.32",),
        why="tests only: vLLM 0.32's built-in Medusa is the parity oracle (removed in 0.33)",
    ),
    Target(
        "vllm.config.model",
        "get_config",
        kind="attribute",
        why="patch 1: swapped while create_speculative_config runs (plugin config class, sizes from the target)",
    ),
    Target(
        _REGISTRY,
        "_SPECULATIVE_DECODING_MODELS",
        kind="attribute",
        why="owners.py: names of vLLM's own draft classes (a plugin may serve them; never registered over)",
    ),
    Target(
        "vllm.transformers_utils.config",
        "_SPECULATIVE_DECODING_CONFIGS",
        kind="attribute",
        why="owners.py: model types vLLM loads with its own draft config classes",
    ),
    Target(
        _BASE,
        "SpecDecodeBaseProposer._get_positions",
        params=("self", "num_tokens"),
        versions=_V1,
        why="runtime: AttentionProposer's trial forward at load feeds the plugin model from vLLM's buffers",
    ),
    # --- Model Runner V2 (patches 13-17, 19, 22, 23: model_runner_v2.py; runtime/mrv2.py) ---------------------
    Target(
        _MR2,
        "init_speculator",
        kind="attribute",
        versions=BEFORE_REGISTRY,
        patch=13,
        why="patch 13 (model_runner_v2.py): the runner module's own binding of init_speculator, rebound "
            "(0.34: vLLM's registry builds the class our SpeculatorConfig names)",
    ),
    Target(
        "vllm.v1.worker.gpu.spec_decode",
        "init_speculator",
        params=("vllm_config", "device", "req_states"),
        why="patch 13 delegates to it for non-plugin specs; on 0.34 it builds our speculator, with req_states",
    ),
    Target(
        _MR2,
        "GPUModelRunner.__init__",
        params=("self", "vllm_config", "device"),
        versions=BEFORE_REGISTRY,
        patch=14,
        why="patch 14: after it, turn aux hidden-state outputs on for plugin drafters that read target layers",
    ),
    Target(
        _MR2,
        "GPUModelRunner.use_aux_hidden_state_outputs",
        kind="attribute",
        versions=BEFORE_REGISTRY,
        why="patch 14: read by load_model (sets the target's aux layers) and execute_model",
    ),
    Target(
        _MR2,
        "GPUModelRunner.finish_requests",
        params=("self", "scheduler_output"),
        patch=15,
        why="patch 15: free finished requests' state, park preempted ones' (MRV2 frees their slots)",
    ),
    Target(
        _MR2,
        "GPUModelRunner.add_requests",
        params=("self", "scheduler_output"),
        versions=BEFORE_REGISTRY,
        patch=16,
        why="patch 16: map each new request's MRV2 slot to its state, restore parked state (0.34: add_request hook)",
    ),
    Target(
        _MR2,
        "GPUModelRunner.postprocess_sampled",
        params=("self", "idx_mapping", "sampled_tokens"),
        patch=17,
        why="patch 17: keep the step's sampled tokens for Source.SAMPLED_TOKEN_IDS",
    ),
    Target(
        _MR2,
        "GPUModelRunner.take_draft_token_ids",
        params=("self",),
        patch=22,
        why="patch 22: each request's draft source (prompt lookup or the model) to the scheduler (MRV2)",
    ),
    Target(
        _MR2,
        "GPUModelRunner.execute_model",
        params=("self", "scheduler_output", "intermediate_tensors", "dummy_run"),
        patch=23,
        why="patch 23: the step's k_model (SchedulerOutput) to the plugin speculator before its propose (MRV2)",
    ),
    Target(
        _RUNNER,
        "GPUModelRunner._gather_mm_embeddings",
        params=("self", "scheduler_output", "shift_computed_tokens"),
        versions=_V1,
        patch=18,
        why="patch 18: keep the target's multimodal-row mask of the step for Source.IS_MULTIMODAL",
    ),
    Target(
        _RUNNER,
        "GPUModelRunner.inputs_embeds",
        kind="attribute",
        versions=_V1,
        why="runtime/proposer.py: Source.TARGET_INPUTS_EMBEDS reads the V1 runner's merged input embeddings",
    ),
    Target(
        "vllm.v1.worker.gpu.mm.encoder_runner",
        "EncoderRunner.gather_mm_embeddings",
        params=("self", "req_ids", "total_num_scheduled_tokens", "num_scheduled_tokens", "query_start_loc",
                "prefill_lens", "num_computed_tokens", "draft_lookahead"),
        patch=19,
        why="patch 19: keep the target's multimodal-row mask of the step (MRV2) for Source.IS_MULTIMODAL",
    ),
    Target(
        "vllm.v1.worker.gpu.mm.encoder_runner",
        "EncoderRunner.inputs_embeds",
        kind="attribute",
        why="runtime/mrv2.py: Source.TARGET_INPUTS_EMBEDS reads MRV2's merged input embeddings buffer",
    ),
    Target(
        "vllm.v1.worker.gpu.states",
        "RequestState.req_id_to_index",
        kind="attribute",
        why="patch 16 / add_request hook: a new request's slot; runtime/mrv2.py: a request's token row",
    ),
    Target(
        "vllm.v1.worker.gpu.states",
        "RequestState.index_to_req_id",
        kind="attribute",
        versions=REGISTRY,
        why="runtime/mrv2.py add_request (0.34 hook, called with a slot only): the request id of a new slot",
    ),
    Target(
        "vllm.v1.worker.gpu.states",
        "RequestState.all_token_ids",
        kind="attribute",
        why="runtime/mrv2.py: prompt lookup reads a request's prompt from MRV2's token table",
    ),
    Target(
        "vllm.v1.worker.gpu.states",
        "RequestState.prefill_len",
        kind="attribute",
        why="runtime/mrv2.py: how much of a request's token row prompt lookup reads",
    ),
    Target(
        _MR2_SPEC,
        "DraftModelSpeculator",
        kind="class",
        why="runtime/mrv2.py: PluginHeadsSpeculator's base (the runner's isinstance checks)",
    ),
    Target(
        _MR2_SPEC,
        "DraftModelSpeculator.__init__",
        params=("self", "vllm_config", "device"),
        why="runtime/mrv2.py: PluginHeadsSpeculator.__init__ calls it",
    ),
    Target(
        _MR2_SPEC,
        "DraftModelSpeculator.load_model",
        params=("self", "target_model"),
        why="runtime/mrv2.py: calls load_draft_model, marks draft layers, decides multimodal inputs",
    ),
    Target(
        _MR2_SPEC,
        "DraftModelSpeculator.load_draft_model",
        params=("self", "target_model", "target_attn_layer_names"),
        why="runtime/mrv2.py: PluginHeadsSpeculator loads the plugin class here",
    ),
    Target(
        _MR2_SPEC,
        "DraftModelSpeculator.set_attn",
        params=("self", "model_state"),
        why="runtime/mrv2.py: the runner hands the speculator its model state here (what the target was fed)",
    ),
    Target(
        _MR2_SPEC,
        "DraftModelSpeculator.model_state",
        kind="attribute",
        why="runtime/mrv2.py: read at propose for the target's inputs embeddings, mask and M-RoPE positions",
    ),
    Target(
        "vllm.v1.worker.gpu.model_states.interface",
        "ModelState.encoder_runner",
        kind="attribute",
        why="runtime/mrv2.py: its encoder runner holds the target's inputs embeddings (and patch 19's mask)",
    ),
    Target(
        "vllm.v1.worker.gpu.model_states.default",
        "DefaultModelState.rope_state",
        kind="attribute",
        why="runtime/mrv2.py: the target's M-RoPE positions, where it has them",
    ),
    Target(
        _MR2_SPEC,
        "BaseSpeculator.propose",
        params=("self", "input_batch", "attn_metadata", "slot_mappings", "last_hidden_states", "aux_hidden_states",
                "num_sampled", "num_rejected", "last_sampled", "next_prefill_tokens", "temperature", "seeds",
                "dp_sync_state", "dummy_run", "skip_attn_for_dummy_run", "mm_inputs", "is_profile",
                "num_speculative_tokens"),
        why="runtime/mrv2.py: both plugin speculators' propose (every source is gathered from these arguments)",
    ),
    Target(
        _MR2_SPEC,
        "BaseSpeculator.add_request",
        params=("self", "req_index"),
        versions=REGISTRY,
        why="replaces patch 16 on 0.34: Mrv2Runtime.add_request maps the new slot to the request's state",
    ),
    Target(
        _MR2_SPEC,
        "BaseSpeculator.on_requests_finished",
        params=("self", "finished_req_ids"),
        versions=REGISTRY,
        why="0.34 hook for finished requests only (not preempted): not overridden; patch 15 frees and parks",
    ),
    Target(
        _MR2_SPEC,
        "DraftModelSpeculator.draft_tokens",
        kind="attribute",
        why="runtime/mrv2.py: the [max_num_reqs, K] draft buffer propose returns rows of",
    ),
    Target(
        "vllm.v1.worker.gpu.spec_decode.eagle.speculator",
        "EagleSpeculator",
        kind="class",
        why="runtime/mrv2.py: PluginEagleSpeculator's base (vLLM's EAGLE loop on MRV2)",
    ),
    Target(
        _TDAR,
        "TargetDependentARSpeculator.__init__",
        params=("self", "vllm_config", "device"),
        why="runtime/mrv2.py: PluginEagleSpeculator.__init__ calls it (as EagleSpeculator.__init__)",
    ),
    Target(
        _TDAR,
        "TargetDependentARSpeculator.on_prefill_begin",
        params=("self", "num_reqs"),
        versions=BEFORE_REGISTRY,
        why="runtime/mrv2.py: the adapter's token-row pass starts here (capture and replay alike)",
    ),
    Target(
        _TDAR,
        "TargetDependentARSpeculator.on_multi_step_decode_begin",
        params=("self", "num_reqs"),
        versions=BEFORE_REGISTRY,
        why="runtime/mrv2.py: the adapter's request-row passes start here",
    ),
    Target(
        "vllm.v1.worker.gpu.spec_decode.autoregressive.speculator",
        "AutoRegressiveSpeculator.on_prefill_begin",
        params=("self", "num_reqs"),
        versions=REGISTRY,
        why="runtime/mrv2.py: the adapter's token-row pass starts here (moved here from TargetDependentAR in 0.34)",
    ),
    Target(
        "vllm.v1.worker.gpu.spec_decode.autoregressive.speculator",
        "AutoRegressiveSpeculator.on_multi_step_decode_begin",
        params=("self", "num_reqs"),
        versions=REGISTRY,
        why="runtime/mrv2.py: the adapter's request-row passes start here (moved here in 0.34)",
    ),
    Target(
        _TDAR,
        "TargetDependentARSpeculator._prefill",
        params=("self", "num_reqs", "num_tokens", "attn_metadata", "slot_mappings", "num_tokens_across_dp",
                "cudagraph_runtime_mode", "mm_inputs"),
        versions=("0.32",),
        why="runtime/mrv2.py: PluginEagleSpeculator overrides it (at k = 0 the draft's forward only, no first draft)",
    ),
    Target(
        _TDAR,
        "TargetDependentARSpeculator._prefill",
        params=("self", "num_reqs", "num_tokens", "attn_metadata", "slot_mappings", "num_tokens_across_dp",
                "cudagraph_runtime_mode", "mm_inputs", "skip_sample"),
        versions=("0.33", "0.34"),
        why="runtime/mrv2.py: PluginEagleSpeculator overrides it and passes skip_sample on (True also at model k = 0)",
    ),
    Target(
        _TDAR,
        "TargetDependentARSpeculator._run_model",
        params=("self", "num_tokens", "attn_metadata", "slot_mappings", "num_tokens_across_dp",
                "cudagraph_runtime_mode", "mm_inputs"),
        why="runtime/mrv2.py: the draft's forward alone, in a draft prefill at k = 0 and in catch-up passes",
    ),
    Target(
        _TDAR,
        "TargetDependentARSpeculator.hidden_states",
        kind="attribute",
        why="runtime/mrv2.py: PluginEagleSpeculator's trial forward at load reads one row of it",
    ),
    Target(
        "vllm.forward_context",
        "is_forward_context_available",
        why="runtime/core.py: eager_pass (kv_only, API 4) reads the forward context only where one is set",
    ),
    Target(
        "vllm.forward_context",
        "get_forward_context",
        why="runtime/core.py: eager_pass (kv_only, API 4)",
    ),
    Target(
        "vllm.forward_context",
        "ForwardContext.cudagraph_runtime_mode",
        kind="attribute",
        why="runtime/core.py: eager_pass: a forward is told kv_only only in passes run without a CUDA graph",
    ),
    # --- vLLM 0.34's speculator registry (speculators/: what the shim declares instead of patches 2, 3, 13, 14, 16)
    Target(
        _SPEC_CFG,
        "register_speculative_method",
        params=("name", "config_cls"),
        versions=REGISTRY,
        why="speculators.register(): each plugin name becomes a vLLM method (config by qualified name, lazy)",
    ),
    Target(
        _SPEC_CFG,
        "registered_speculative_methods",
        params=(),
        versions=REGISTRY,
        why="routing.registered_method: whether a plugin alias is a method of vLLM's registry",
    ),
    Target(
        _SPEC_CFG,
        "SpeculatorConfig",
        kind="class",
        versions=REGISTRY,
        why="speculators/config.py: the base of every config our three subclass",
    ),
    Target(
        _SPEC_CFG,
        "SpeculatorConfig.spec_config",
        kind="attribute",
        versions=REGISTRY,
        why="speculators/config.py: our configs read the draft config (stamps, aux layer ids) from it",
    ),
    Target(
        _SPEC_CFG,
        "SpeculatorConfig.speculator_class",
        kind="attribute",
        versions=REGISTRY,
        why="speculators/config.py: set to PluginHeadsSpeculator / PluginEagleSpeculator (replaces patch 13)",
    ),
    Target(
        _SPEC_CFG,
        "SpeculatorConfig.draft_has_own_vocab",
        kind="attribute",
        versions=REGISTRY,
        why="speculators/config.py: False for heads drafters (StandaloneAR's is True)",
    ),
    Target(
        _SPEC_CFG,
        "SpeculatorConfig.num_lookahead_tokens",
        params=("self",),
        versions=REGISTRY,
        why="speculators/config.py: 0 for heads drafters (no draft KV cache to write ahead)",
    ),
    Target(
        _SPEC_CFG,
        "SpeculatorConfig.max_num_new_slots_for_drafting",
        params=("self",),
        versions=REGISTRY,
        why="speculators/config.py: 0 for heads drafters",
    ),
    Target(
        _SPEC_CFG,
        "SpeculatorConfig.max_model_len",
        params=("self",),
        versions=REGISTRY,
        why="speculators/config.py: None for heads drafters (position-free: never limits the sequence)",
    ),
    Target(
        _SPEC_CFG,
        "SpeculatorConfig.uses_aux_hidden_states",
        params=("self",),
        versions=REGISTRY,
        why="speculators/config.py: heads drafters with aux_layer_ids answer True (replaces patch 14)",
    ),
    Target(
        _SPEC_CFG,
        "SpeculatorConfig.hash_factors",
        params=("self",),
        versions=REGISTRY,
        why="speculators/config.py: plugin, distribution, architecture, aux layers (replaces patch 3)",
    ),
    Target(
        _SPEC_CFG,
        "SpeculatorConfig.matches",
        params=("cls", "spec"),
        versions=REGISTRY,
        why="speculators/config.py: overridden to False (selected by declaration, never by checkpoint name)",
    ),
    Target(
        "vllm.v1.worker.gpu.spec_decode.standalone_ar.config",
        "StandaloneARSpeculatorConfig",
        kind="class",
        versions=REGISTRY,
        why="speculators/config.py: PluginHeadsConfig's base (base_method draft_model, the draft model's setup)",
    ),
    Target(
        _EAGLE_CFG,
        "EagleSpeculatorConfig",
        kind="class",
        versions=REGISTRY,
        why="speculators/config.py: PluginEagleConfig's base (vLLM's EAGLE setup, base_method eagle)",
    ),
    Target(
        _EAGLE_CFG,
        "EagleSpeculatorConfig.matches",
        params=("cls", "spec"),
        versions=REGISTRY,
        why="speculators/config.py: overridden to False in PluginEagleConfig",
    ),
    Target(
        _EAGLE_CFG,
        "Eagle3SpeculatorConfig",
        kind="class",
        versions=REGISTRY,
        why="speculators/config.py: PluginEagle3Config's base (base_method eagle3)",
    ),
    Target(
        _EAGLE_CFG,
        "Eagle3SpeculatorConfig.matches",
        params=("cls", "spec"),
        versions=REGISTRY,
        why="speculators/config.py: overridden to False in PluginEagle3Config",
    ),
    Target(
        _EAGLE_CFG,
        "Eagle3SpeculatorConfig.uses_aux_hidden_states",
        params=("self",),
        versions=REGISTRY,
        why="speculators/config.py: inherited by PluginEagle3Config (aux outputs for EAGLE-3 drafters)",
    ),
    Target(
        "vllm.model_executor.models.interfaces",
        "SpeculativeDraftModel.speculator_config_class",
        kind="attribute",
        versions=REGISTRY,
        why="speculators.register(): set on each plugin model class (the class of its SpeculatorConfig)",
    ),
    Target(
        _REGISTRY,
        "_ModelInfo.speculator_config_class",
        kind="attribute",
        versions=REGISTRY,
        why="speculators: vLLM reads the plugin class's declaration into its (cached) model info",
    ),
    Target(
        "vllm.config.model",
        "ModelConfig.speculator_config_class",
        params=("self",),
        versions=REGISTRY,
        why="speculators: vLLM picks our config from the draft model info (after update_arch_, patch 1)",
    ),
    Target(
        "vllm.utils.import_utils",
        "resolve_obj_by_qualname",
        params=("qualname",),
        versions=REGISTRY,
        why="speculators.register(): the declared config class, resolved from its qualified name",
    ),
    Target(
        _REGISTRY,
        "_LazyRegisteredModel.module_name",
        kind="attribute",
        versions=REGISTRY,
        why="speculators: built with module_name= and class_name= to find a plugin class's model-info cache entry",
    ),
    Target(
        _REGISTRY,
        "_LazyRegisteredModel.class_name",
        kind="attribute",
        versions=REGISTRY,
        why="speculators: as module_name",
    ),
    Target(
        _REGISTRY,
        "_LazyRegisteredModel._get_cache_dir",
        params=(),
        versions=REGISTRY,
        why="speculators: the model-info cache folder (<VLLM_CACHE_ROOT>/modelinfos), for the stale-entry check",
    ),
    Target(
        _REGISTRY,
        "_LazyRegisteredModel._get_cache_filename",
        params=("self",),
        versions=REGISTRY,
        why="speculators: a plugin class's model-info cache file, for the stale-entry check",
    ),
)
