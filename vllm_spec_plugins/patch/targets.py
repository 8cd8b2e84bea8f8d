"""Manifest of every vLLM symbol that our runtime patches touch.

Pure data, stdlib only: it must stay importable without torch or vLLM so that
``tools/compat.py`` can check it against a vLLM wheel's *source* (read with
``ast``) without installing or importing vLLM.

Each :class:`Target` names the module and class that really *define* the
symbol (not a subclass that merely inherits it): the checker looks in the
named class only.  ``params`` is the leading prefix of the real parameter
names (``self`` included for methods, keyword-only names after positional
ones, ``*args``/``**kwargs`` ignored) that our shims rely on; an empty tuple
means only existence is checked.
"""

from __future__ import annotations

from dataclasses import dataclass

KINDS: tuple[str, ...] = ("function", "class", "attribute")


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
    class attribute assigned in the class body / in ``__init__`` via
    ``self.X = ...``)."""
    versions: tuple[str, ...] = ("0.32", "0.33")
    """vLLM minor versions in which the symbol must exist."""
    why: str = ""
    """One line: which patch uses it."""


_SPEC = "vllm.config.speculative"
_RUNNER = "vllm.v1.worker.gpu_model_runner"
_BASE = "vllm.v1.spec_decode.llm_base_proposer"
_DRAFT = "vllm.v1.spec_decode.draft_model"
_REGISTRY = "vllm.model_executor.models.registry"

TARGETS: tuple[Target, ...] = (
    # --- config / engine args -------------------------------------------------
    Target(
        "vllm.engine.arg_utils",
        "EngineArgs.create_speculative_config",
        params=("self", "target_model_config", "target_parallel_config"),
        why="spec-config patch: route plugin speculative methods into SpeculativeConfig",
    ),
    Target(
        "vllm.config.vllm",
        "VllmConfig._get_v2_model_runner_unsupported_features",
        params=("self",),
        why="config patch: keep plugin spec methods off the V2 runner's unsupported list",
    ),
    Target(
        _SPEC,
        "SpeculativeConfig",
        kind="class",
        why="spec-config patch: extended/validated to accept plugin methods",
    ),
    Target(
        _SPEC,
        "SpeculativeConfig.compute_hash",
        params=("self",),
        why="spec-config patch: fold plugin method + options into the config hash",
    ),
    Target(
        _SPEC,
        "SpeculativeMethod",
        kind="attribute",
        why="spec-config patch: Literal of method names widened with plugin methods",
    ),
    # --- GPU model runner -----------------------------------------------------
    Target(
        _RUNNER,
        "GPUModelRunner.__init__",
        params=("self", "vllm_config", "device"),
        why="runner patch: build the plugin drafter after the runner's own init",
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
        why="runner patch: dispatch drafting to the plugin proposer",
    ),
    Target(
        _RUNNER,
        "GPUModelRunner._on_request_state_removed",
        params=("self", "req_id", "req_state"),
        why="runner patch: drop plugin per-request state when a request is removed",
    ),
    Target(
        _RUNNER,
        "GPUModelRunner._update_states",
        params=("self", "scheduler_output"),
        why="runner patch: sync plugin per-request state with the scheduler output",
    ),
    Target(
        _RUNNER,
        "GPUModelRunner.load_model",
        params=("self", "load_dummy_weights", "model"),  # model is keyword-only
        why="runner patch: load the plugin drafter's weights with the target model",
    ),
    # --- draft-model proposer ---------------------------------------------------
    Target(
        _DRAFT,
        "DraftModelProposer",
        kind="class",
        why="draft-model plugin: subclassed as the base of plugin proposers",
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
        why="draft-model plugin: propose() overridden/called (inherited by DraftModelProposer)",
    ),
    Target(
        _BASE,
        "SpecDecodeBaseProposer.load_model",
        params=("self", "target_model"),
        why="draft-model plugin: load_model() wrapped to load plugin drafter weights",
    ),
    Target(
        _BASE,
        "SpecDecodeBaseProposer.dummy_run",
        params=("self", "num_tokens", "use_cudagraphs", "is_graph_capturing", "slot_mappings"),
        why="draft-model plugin: dummy_run() wrapped for profiling / cudagraph capture",
    ),
    Target(
        _BASE,
        "SpecDecodeBaseProposer.initialize_attn_backend",
        params=("self", "kv_cache_config", "kernel_block_sizes"),
        why="draft-model plugin: attention backend init for the drafter's KV cache group",
    ),
    Target(
        _BASE,
        "SpecDecodeBaseProposer.prepare_next_token_ids_padded",
        params=("self", "sampled_token_ids", "requests", "gpu_input_batch", "discard_request_mask"),
        why="draft-model plugin: next-token ids for the padded drafter batch",
    ),
    Target(
        _BASE,
        "SpecDecodeBaseProposer.prepare_inputs_padded",
        params=("self", "common_attn_metadata", "spec_decode_metadata", "valid_sampled_tokens_count"),
        why="draft-model plugin: drafter inputs for the padded batch",
    ),
    Target(
        "vllm.v1.spec_decode.eagle",
        "EagleProposer",
        kind="class",
        why="runner patch: isinstance() checks that route EAGLE-style drafting",
    ),
    # --- model registry / plugin loading --------------------------------------
    Target(
        _REGISTRY,
        "ModelRegistry",
        kind="attribute",
        why="registry patch: register plugin drafter architectures",
    ),
    Target(
        _REGISTRY,
        "_ModelRegistry.register_model",
        params=("self", "model_arch", "model_cls"),
        why="registry patch: called to register plugin drafter architectures",
    ),
    Target(
        "vllm.plugins",
        "load_general_plugins",
        params=(),
        why="plugin entry point: our general plugin is loaded from here in every process",
    ),
    Target(
        "vllm.model_executor.models.medusa",
        "Medusa",
        kind="class",
        versions=("0.32",),
        why="medusa plugin: reuses vLLM's Medusa heads (removed in 0.33)",
    ),
)
