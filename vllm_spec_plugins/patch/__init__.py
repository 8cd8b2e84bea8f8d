"""The runner shim's patches to vLLM, one entry per target.

Every patch is installed by :func:`vllm_spec_plugins.shim.register` (the
``vllm.general_plugins`` entry point), lazily when vLLM imports the target module
(:func:`._util.when_imported`), at most once (:func:`._util.wrap_method` and
:func:`._util.rebind_global` mark each wrapper ``__vsp_patched__``, keep ``__wrapped__`` and record
it in ``_util.APPLIED``; tests/unit/test_patch_registry.py holds that record against this registry
and the manifest). The wrappers are thin: what they decide is :mod:`vllm_spec_plugins.routing`
and the runtime, what they read :mod:`vllm_spec_plugins.checkpoint`, what they say
:mod:`vllm_spec_plugins.explain`. ``tools/compat.py`` (``make compat``) checks every symbol and
signature below against the installed vLLM and the vLLM 0.33.0 and 0.34.0 wheels, each against the manifest's
view of its version; the manifest is :mod:`.targets` (``Target.patch`` names the entry, ``Target.versions`` where
it is applied). Each entry's "Supported vLLM" lists the versions it is applied on.

1. ``vllm.engine.arg_utils.EngineArgs.create_speculative_config`` — :mod:`.config`
   Why: vLLM picks the speculative method before any drafter exists. A plugin
   alias (``"method": "medusa"``) is not a vLLM method on 0.33 (0.34: registered, see "vLLM 0.34" below), model_type
   heuristics send ``model_type: medusa`` to vLLM 0.32's built-in Medusa, and the
   draft config must name its plugin for the worker processes.
   How: (:func:`vllm_spec_plugins.routing.route_request` before the original,
   :func:`vllm_spec_plugins.routing.finalize_spec` after it): pre: rewrite a plugin
   alias to ``draft_model`` (kept when vLLM also knows it, so vLLM's own handling of old Medusa configs runs), or for attention
   drafters to vLLM's EAGLE-family method of their loop (``ATTENTION_METHODS``:
   ``eagle``, or ``eagle3`` for drafters with ``aux_layer_ids``; a plugin with
   drafters on both picks from the local checkpoint's ``config.json``,
   :func:`vllm_spec_plugins.routing.alias_route`); post: select the
   plugin from the draft config (architectures, model_type), set ``method =
   "draft_model"`` for heads drafters (attention drafters must be on their
   ``eagle``/``eagle3`` route), reload the config with the plugin's class (an INFO
   line when it replaces vLLM's own, as 0.32's for ``medusa``/``mlp_speculator``), fill
   missing hidden/vocab sizes from the target, check ``num_speculative_tokens`` (for a
   local plugin checkpoint already *before* the original, so vLLM's field rules such as
   ``n_predict`` divisibility cannot reject it first with an error naming no plugin),
   give heads drafters the target's draft TP (0.32 sets 1 for ``mlp_speculator``; rebuilt
   with ``SpeculativeConfig.create_draft_parallel_config``), set aux
   layer ids (attention drafters: only when the config sets the key, else vLLM's
   default layers), raise the draft max_model_len for position-free drafters, stamp
   ``vsp_plugin``/``vsp_dist``/``vsp_architecture`` on the draft hf_config (pickled
   to every process), log the INFO line. On unsupported vLLM versions only this
   patch is installed, to refuse plugin drafts with a clear error.
   Remove when: vLLM resolves draft methods through a registry plugins can extend (0.34 has one) *and* lets a
   registered speculator claim its checkpoints and adapt the draft config before vLLM validates it.
   Upstream: vLLM RFC #36219 (a ``ProposerRegistry`` keyed by method), PR #39487 (``custom_class``:
   a proposer class by path, token ids only); proposal: docs/upstream.md. Supported vLLM: 0.32, 0.33, 0.34 (same
   body; on 0.34 a heads plugin's alias the shim registered stays the method, which vLLM moves to
   ``custom_method``, and ``routing.finalize_spec`` calls ``SpeculativeConfig.update_arch_`` after the stamps so
   that vLLM reads the plugin class's ``speculator_config_class``). Verified by:
   tests/e2e/test_medusa_engine.py, tests/e2e/test_mlp_engine.py, tests/unit/test_shim.py.
2. ``vllm.config.vllm.VllmConfig._get_v2_model_runner_unsupported_features`` — :mod:`.config`
   Why: vLLM picks the model runner from this list; a plugin drafter must not land on a
   runner that cannot serve it. How: append a reason only when the shim's Model Runner V2
   backend (rows 13-17) cannot serve the spec (:func:`vllm_spec_plugins.routing.mrv2_refusal`:
   ``VLLM_SPEC_PLUGINS_RUNNER=v1``, a vLLM without MRV2's speculator interface, heads drafters
   with probabilistic draft sampling, adaptive verification or prefill context parallelism);
   vLLM then picks V1 (or, with ``VLLM_USE_V2_MODEL_RUNNER=1``, refuses with that reason).
   Remove when: vLLM drops the V1 runner (then nothing needs V1) or resolves speculators
   through a registry. Upstream: vLLM issue #57684 (V1 removal plan), PR #56899.
   Supported vLLM: 0.32, 0.33. Not applied on 0.34: the V1 runner is gone, and this method with it (no runner
   to choose). Verified by: tests/e2e/test_mrv2.py (``VLLM_SPEC_PLUGINS_RUNNER=v1``),
   tests/unit/test_mrv2_backend.py.
3. ``vllm.config.speculative.SpeculativeConfig.compute_hash`` — :mod:`.config`
   Why: aux hidden-state outputs change the target's compiled graph but vLLM only
   hashes them for eagle3/dflash. How: add plugin name, distribution, architecture
   and aux layer ids. Remove when: vLLM hashes aux layers for every method.
   Upstream: none filed. Supported vLLM: 0.32, 0.33. Not applied on 0.34: replaced by the registry
   (``compute_hash`` is gone; ``SpeculativeConfig.compile_factors`` hashes ``speculator_config.hash_factors()``,
   which our configs extend with the same factors). Verified by: tests/unit/test_shim.py.
4. ``vllm.v1.worker.gpu_model_runner.GPUModelRunner.__init__`` — :mod:`.model_runner`
   Why: the runner hard-codes ``DraftModelProposer`` for ``draft_model`` and
   ``EagleProposer`` for ``eagle``/``eagle3``. How:
   while the original ``__init__`` runs, the module global ``DraftModelProposer``
   (or ``EagleProposer``) builds the plugin proposer instead (a subclass, so every
   ``isinstance`` check holds; for ``eagle3`` the runner itself then turns on aux
   hidden-state outputs from the inherited ``eagle3_use_aux_hidden_state``);
   afterwards set ``use_aux_hidden_state_outputs`` if the plugin asks for
   target layers. Covers ``CPUModelRunner`` (it calls ``super().__init__``).
   Remove when: vLLM has a proposer factory hook. Upstream: vLLM RFC #36219 (``ProposerRegistry.create``
   in ``_init_drafter``). Supported vLLM: 0.32, 0.33. Not applied on 0.34: the V1 runner
   (``vllm.v1.worker.gpu_model_runner``) is gone.
   Verified by: tests/e2e/*.
5. ``GPUModelRunner.propose_draft_token_ids`` — :mod:`.model_runner`
   Why: ``propose`` does not receive the full hidden states (with aux outputs on it
   gets only their concatenation) and not the request ids; and vLLM prepares the drafter's inputs in every
   step, also where nothing is drafted. How: stash them on the
   plugin proposer (with prompt lookup, also the model's ``k`` the scheduler put on the ``SchedulerOutput``,
   ``MODEL_K_ATTR``, row 9); in a plain decode step that drafts nothing and verifies nothing (synchronous
   scheduling, no prompt lookup), return what the proposer answers without vLLM's preparation
   (``PluginProposerMixin.propose_without_drafts``: no drafts; an attention drafter keeps the step's first-pass
   rows), else call the original unchanged. Remove when: the V1 runner is gone
   (MRV2's ``propose`` receives both), or V1's ``propose`` gains them. Upstream: vLLM issue #57684
   (V1 removal plan), RFC #36219 (one ``ProposerInput`` for every proposer). Supported vLLM: 0.32, 0.33.
   Not applied on 0.34: the V1 runner (``vllm.v1.worker.gpu_model_runner``) is gone.
   Verified by: tests/e2e/* (the shortcut: tests/e2e/test_plain_decode_without_drafts.py,
   tests/unit/test_without_drafts.py).
6. ``GPUModelRunner._on_request_state_removed`` — :mod:`.model_runner`
   Why: finished/aborted requests must free their carried state. How: release the
   request's state slot, then call the original (a documented hook for platform
   runners). Remove when: the V1 runner is gone (MRV2: row 15). Upstream: vLLM issue #57684.
   Supported vLLM: 0.32, 0.33. Not applied on 0.34: the V1 runner (``vllm.v1.worker.gpu_model_runner``) is gone.
   Verified by: tests/e2e/test_state_plugin.py.
7. ``GPUModelRunner._update_states`` — :mod:`.model_runner`
   Why: the ``reset`` preemption policy needs to know which requests resumed.
   How: after the original, reset state of ``scheduled_cached_reqs.resumed_req_ids``.
   Remove when: the V1 runner is gone (MRV2: row 16). Upstream: vLLM issue #57684.
   Supported vLLM: 0.32, 0.33. Not applied on 0.34: the V1 runner (``vllm.v1.worker.gpu_model_runner``) is gone.
   Verified by: tests/e2e/test_state_plugin.py (keep policy).
8. ``vllm.v1.core.sched.scheduler.Scheduler.__init__`` — :mod:`.scheduler`
   Why: vLLM drafts ``num_speculative_tokens`` at every step unless the user hand-tunes a
   static batch-size schedule; the adaptive drafting policy (:mod:`vllm_spec_plugins.policy`,
   docs/adaptive-policy.md) decides ``k`` per step from what it measures. How: after the
   original, for a plugin spec without ``num_speculative_tokens_per_batch_size`` (that
   schedule wins, logged), without data parallelism and with ``VLLM_SPEC_PLUGINS_POLICY``
   not ``off``: set ``dynamic_sd_lookup`` (vLLM's dense batch-size -> k list, read once per
   step into ``SchedulerOutput.num_spec_tokens_to_schedule``) to an object whose look-up
   asks the policy. Never raises (a failure logs and leaves vLLM's behaviour). Remove when:
   vLLM has a pluggable draft-length policy. Upstream: vLLM PR #32374 (dynamic speculative decoding:
   the ``dynamic_sd_lookup`` used here), RFC #48627 (a policy ladder above that table), RFC #4565; proposal:
   docs/upstream.md. Supported vLLM: 0.32, 0.33, 0.34.
   Verified by: tests/e2e/test_policy_engine.py, tests/unit/test_policy.py.
9. ``Scheduler.schedule`` — :mod:`.scheduler`
   Why: the policy times whole steps and skips the drafts of requests whose drafts keep
   failing. How: before the original, start the step clock and slice
   ``request.spec_token_ids`` of such requests to ``[]`` (new lists; async placeholders are
   shared); with prompt lookup (rows 20-23), slice a request's model drafts to the ``k`` the model drafted, and
   after the original, where the policy drafts more than that for lookup's drafts, put the model's ``k`` on the
   returned ``SchedulerOutput`` (``MODEL_K_ATTR``; it pickles with it to the workers). Remove when: as row 8.
   Upstream: as row 8.
   Supported vLLM: 0.32, 0.33, 0.34. Verified by: tests/e2e/test_policy_engine.py, tests/e2e/test_lookup_widths.py.
10. ``Scheduler.make_spec_decoding_stats`` — :mod:`.scheduler`
    Why: per-request acceptance (it receives ``request_id``, drafts, accepted). How: feed
    the policy, then call the original unchanged (metrics stay vLLM's). Remove when: as row 8.
    Upstream: as row 8.
    Supported vLLM: 0.32, 0.33, 0.34. Verified by: tests/e2e/test_policy_engine.py.
11. ``Scheduler.update_from_output`` — :mod:`.scheduler`
    Why: end of a step: its wall time and shape (batch size, k drafted and verified, prefill
    or not). How: read the shape before, time after the original. Remove when: as row 8.
    Upstream: as row 8.
    Supported vLLM: 0.32, 0.33, 0.34. Verified by: tests/e2e/test_policy_engine.py.
12. ``Scheduler.shutdown`` — :mod:`.scheduler`
    Why: the policy's summary line and statistics file. How: before the original. Remove when:
    as row 8. Upstream: as row 8. Supported vLLM: 0.32, 0.33, 0.34. Verified by: tests/unit/test_policy.py (the
    file), by hand (the line).

13. ``vllm.v1.worker.gpu.model_runner.init_speculator`` (the runner module's binding) — :mod:`.model_runner_v2`
    Why: MRV2 builds its speculator with an ``if/elif`` chain (``spec_decode.init_speculator``)
    imported by name into the runner module; nothing can extend it. How: rebind the module
    global (looked up at call time in ``GPUModelRunner.__init__``) to a wrapper that returns
    :class:`~vllm_spec_plugins.runtime.mrv2.PluginHeadsSpeculator` (heads drafters, method
    ``draft_model``) or :class:`~vllm_spec_plugins.runtime.mrv2.PluginEagleSpeculator`
    (attention drafters, ``eagle``/``eagle3``) for plugin specs, and calls the original
    otherwise. Both subclass vLLM's ``DraftModelSpeculator`` so every ``isinstance`` check of
    the runner holds. Remove when: MRV2 has a speculator factory hook. Upstream: vLLM RFC #51212
    and PR #53895 (factories for other MRV2 components, not speculators); vLLM 0.34 has the registry.
    Supported vLLM: 0.32, 0.33. Not applied on 0.34: replaced by the registry (vLLM's ``init_speculator`` builds
    the ``speculator_class`` our ``SpeculatorConfig`` names, with ``req_states``).
    Verified by: tests/e2e/test_mrv2.py, tests/e2e/test_state_plugin.py::TestStatePluginMRV2.
14. ``vllm.v1.worker.gpu.model_runner.GPUModelRunner.__init__`` — :mod:`.model_runner_v2`
    Why: MRV2 turns the target's aux hidden-state outputs on for four method names only.
    How: after the original, set ``use_aux_hidden_state_outputs`` when the plugin speculator
    reads target layers (``load_model`` then sets the target's aux layers). Covers
    ``CPUModelRunner``. Remove when: MRV2 asks the speculator. Upstream: none filed. Supported vLLM: 0.32, 0.33.
    Not applied on 0.34: replaced by the registry (the runner reads ``speculative_config.uses_aux_hidden_states``,
    which our config answers).
    Verified by: tests/e2e/test_mrv2.py (EAGLE-3).
15. ``GPUModelRunner.finish_requests`` (MRV2) — :mod:`.model_runner_v2`
    Why: finished and aborted requests free their carried state; MRV2 also frees the slot of
    a *preempted* request (and later sends it back as a new one). How: before the original,
    release finished requests' state and park preempted ones' under their request id.
    Remove when: MRV2 tells speculators about preempted requests. Upstream: none filed; proposal:
    docs/upstream.md. Supported vLLM: 0.32, 0.33, 0.34 (0.34's ``BaseSpeculator.on_requests_finished`` hook is
    called for finished requests only, not preempted ones; our speculator leaves it to this patch).
    Verified by: tests/e2e/test_state_plugin.py::TestStatePluginMRV2.
16. ``GPUModelRunner.add_requests`` (MRV2) — :mod:`.model_runner_v2`
    Why: state is indexed on the device by MRV2's request slot. How: after the original, for
    each new request restore parked state (``keep``) or re-initialise it (``reset``) and write
    its pool slot into the speculator's slot table. Not ``_remove_request`` (also called for
    streaming input updates). Remove when: as row 15. Upstream: as row 15. Supported vLLM: 0.32, 0.33.
    Not applied on 0.34: replaced by a hook (``BaseSpeculator.add_request(req_index)``, called after the slot is
    assigned; our speculator implements it).
    Verified by: as row 15.
17. ``GPUModelRunner.postprocess_sampled`` (MRV2) — :mod:`.model_runner_v2`
    Why: ``Source.SAMPLED_TOKEN_IDS`` is the only source that is not an argument of MRV2's
    ``propose``. How: keep ``sampled_tokens`` (a device tensor, no copy) when a bound drafter
    reads that source; called right before ``propose``. Arguments after ``sampled_tokens`` are
    passed through (0.33 adds ``draft_tokens``). Remove when: ``propose`` receives them.
    Upstream: none filed; proposal: docs/upstream.md.
    Supported vLLM: 0.32, 0.33, 0.34. Verified by: tests/e2e/test_state_plugin.py::TestStatePluginMRV2.
18. ``GPUModelRunner._gather_mm_embeddings`` (V1) — :mod:`.model_runner`
    Why: ``Source.IS_MULTIMODAL`` (API 3): which scheduled tokens the target fed multimodal embeddings.
    The V1 runner builds that mask per step as a local host tensor, keeps no buffer of it, and hands
    ``propose`` only the EAGLE loop's mask, shifted by one token. How: after the original, for the target's
    own gather (``shift_computed_tokens == 0``) with a plugin drafter, keep the returned mask on the runner
    (``MM_MASK_ATTR``, a reference, no copy); ``stash_step`` (row 5) hands it over and clears it. The merged
    embeddings need no patch: they stay in the runner's ``inputs_embeds`` buffer. Remove when: the V1 runner
    is gone (MRV2: row 19), or ``propose`` receives the target's own mask. Upstream: none filed.
    Supported vLLM: 0.32, 0.33. Not applied on 0.34: the V1 runner (``vllm.v1.worker.gpu_model_runner``) is
    gone. Verified by: tests/e2e/test_multimodal.py.
19. ``vllm.v1.worker.gpu.mm.encoder_runner.EncoderRunner.gather_mm_embeddings`` (MRV2) — :mod:`.model_runner_v2`
    Why: as row 18 on MRV2: the mask is a per-step host tensor, and the speculator's ``mm_inputs`` is the
    draft's look-ahead gather (``draft_lookahead=1``), not what the target consumed. How: after the
    original, for ``draft_lookahead == 0``, keep the returned mask on the encoder runner (a reference);
    the plugin speculator reads it with the encoder runner's ``inputs_embeds`` buffer and clears it.
    Remove when: MRV2 gives speculators what the target consumed. Upstream: none filed; proposal: docs/upstream.md.
    Supported vLLM: 0.32, 0.33, 0.34. Verified by: tests/e2e/test_multimodal.py.
20. ``GPUModelRunner.take_draft_token_ids`` (V1) — :mod:`.model_runner`
    Why: with prompt lookup beside a plugin drafter, each request's drafts are the lookup's or the model's,
    chosen on the device; the policy verifies the lookup's at their own ``k`` and the model's at the model's
    ``k``, so the scheduler must know which is which. How: after the original (synchronous scheduling
    only: vLLM calls it there, and copies the drafts to the host there anyway), put the proposer's per-request
    sources on the returned ``DraftTokenIds`` (``SOURCES_ATTR``, a list of ints; it pickles with the object
    to the engine core). Remove when: vLLM drafts carry per-request lengths. Upstream: none filed.
    Supported vLLM: 0.32, 0.33. Not applied on 0.34: the V1 runner (``vllm.v1.worker.gpu_model_runner``) is
    gone. Verified by: tests/e2e/test_lookup_widths.py.
21. ``Scheduler.update_draft_token_ids`` — :mod:`.scheduler`
    Why: row 20's other end. How: before the original, hand the sources (or their absence) to the policy
    (``note_sources``); ``schedule`` (row 9) then verifies each request's drafts at its source's ``k``
    (``request_width``). Remove when: as row 20. Upstream: none filed; proposal: docs/upstream.md.
    Supported vLLM: 0.32, 0.33, 0.34. Verified by: tests/e2e/test_lookup_widths.py.
22. ``GPUModelRunner.take_draft_token_ids`` (MRV2) — :mod:`.model_runner_v2`
    Why: as row 20 on MRV2, whose drafts stay on the device (the scheduler gets ``-1`` placeholders without
    structured output). How: as row 20 (the speculator's sources; one small copy to the host after the step).
    Remove when: as row 20. Upstream: none filed; proposal: docs/upstream.md. Supported vLLM: 0.32, 0.33, 0.34.
    Verified by: tests/e2e/test_lookup_widths.py (MRV2 rows).
23. ``GPUModelRunner.execute_model`` (MRV2) — :mod:`.model_runner_v2`
    Why: where the policy raised ``k`` for the lookup's drafts, the plugin's model drafts only ``k_model`` of them;
    V1 reads it from the ``SchedulerOutput`` in row 5, but MRV2's ``propose`` gets only the step's ``k``
    (``num_spec_tokens_to_schedule``). How: before the original (not for dummy runs), hand
    ``SchedulerOutput``'s ``k_model`` (``MODEL_K_ATTR``, or ``None``) to the plugin speculator, which reads it in
    the ``propose`` of that step's ``sample_tokens``. Remove when: MRV2 drafts carry per-request lengths.
    Upstream: none filed; proposal: docs/upstream.md. Supported vLLM: 0.32, 0.33, 0.34. Verified by:
    tests/e2e/test_lookup_widths.py (MRV2 rows).
24. ``GPUModelRunner._sample`` (V1) — :mod:`.model_runner`
    Why: the V1 runner of a speculative engine samples through its rejection sampler in every step, drafts or
    none (0.46 ms against 0.09 ms for the plain sampler on the same logits, SmolLM2 at batch 16 on the CPU
    build); steps that verify no draft are the adaptive policy's ``k = 0`` steps. MRV2 already calls its plain
    sampler when a step has no drafts. How: with a plugin drafter, synchronous scheduling, no request asking for
    logprobs and no draft in the step (``SpecDecodeMetadata.max_spec_len == 0``), call the original with no
    spec-decode metadata: vLLM's plain sampler, the one the rejection sampler itself calls for the bonus token
    (same logits, same per-request generators: the same tokens, greedy or seeded). The metadata still reaches
    the bookkeeping and the drafter. Remove when: vLLM skips it (as MRV2 does) or the V1 runner is gone.
    Upstream: none filed. Supported vLLM: 0.32, 0.33. Not applied on 0.34: the V1 runner
    (``vllm.v1.worker.gpu_model_runner``) is gone.
    Verified by: tests/e2e/test_plain_sampler.py, tests/unit/test_patch_sample.py (seeded sampling: read from code,
    and one manual run with SmolLM2, Medusa pinned to ``k = 0``: the same tokens as without speculation).
25. ``vllm.v1.engine.core.EngineCore.post_step`` — :mod:`.scheduler`
    Why: after every step of a speculative engine with synchronous scheduling, the engine core asks the model
    runner for its drafts (``take_draft_token_ids``), a round trip to the worker process: 0.44-0.47 ms per step
    with SmolLM2 at batch 8 on the CPU build (a plain step 76 ms), paid also after the adaptive policy's ``k = 0``
    steps, whose drafts are an empty list per request on the V1 runner. How: where the engine's plugin drafter's
    policy chose ``k = 0`` for the step just run (lookup's drafts included), on the V1 runner (read once from
    ``VllmConfig.use_v2_model_runner``), with synchronous scheduling and no batch queue, skip the original: the
    scheduler emptied each scheduled request's ``spec_token_ids`` when it scheduled the step, so the empty
    drafts would change nothing. MRV2 hands ``-1`` placeholders of the drafts' width instead, and keeps vLLM's
    call. The policy counts the skips (``draft_takes_skipped``). Remove when: vLLM skips the call without
    drafts. Upstream: none filed; proposal: docs/upstream.md. Supported vLLM: 0.32, 0.33. Not applied on 0.34:
    it only ever skips on the V1 runner, which 0.34 removed.
    Verified by: tests/e2e/test_plain_decode_without_drafts.py (output, acceptance and drafts unchanged; the
    control engine's drafts at ``k = 0`` were empty), tests/unit/test_patch_post_step.py.

Not a patch, but vLLM internals the runtime relies on (V1 runner only; MRV2's loop calls the plugin
model's ``combine_hidden_states`` itself): for attention drafters that
consume chosen target layers (method ``eagle3``), vLLM's ``SpecDecodeBaseProposer.propose``
combines them only after asserting the model is one of *its own* EAGLE-3 classes.
:meth:`vllm_spec_plugins.runtime.proposer.AttentionProposer.propose` therefore calls the
plugin model's ``combine_hidden_states`` itself and runs the base loop with the proposer's
``method`` attribute set to ``eagle`` for the duration of that call (nothing else in
``propose`` tells ``eagle`` from ``eagle3``; checked on 0.32 and 0.33).
Verified by: tests/e2e/test_eagle3_engine.py.

Not a patch, but set for the duration of a plugin EAGLE drafter's ``load_model`` only (both runners;
:func:`vllm_spec_plugins.runtime.core.multimodal_target`): under a multimodal target whose language model is
the decoder itself (Idefics3 / SmolVLM), the target instance's ``get_language_model`` returns a view with
``.model`` and ``.lm_head``, which vLLM's EAGLE loaders expect; a config with ``image_token_id`` but no
``image_token_index`` gets the latter (V1 reads it). Both are undone when the call returns. Verified by:
tests/e2e/test_multimodal.py (EAGLE-1 on the tiny VLM; vLLM's own EAGLE fails there without it).

Public vLLM APIs used without patching: ``ModelRegistry.register_model`` (lazy
``"module:Class"``; plugin classes under private names ``<arch>__vsp_<plugin>``, never over
a name vLLM or Transformers serve, :mod:`vllm_spec_plugins.owners`) and
``transformers.AutoConfig.register`` (only for model types Transformers does not know).

Not a patch, but swapped for the duration of the wrapped ``create_speculative_config``
(row 1) in the API-server process only: the module global ``vllm.config.model.get_config``,
so a plugin draft's config is loaded with the plugin's class and gets the target's
``hidden_size``/``vocab_size`` when it leaves them unset, before vLLM reads them
(``ModelArchitectureConfig`` requires ints); restored when the call returns.

vLLM 0.34: the V1 runner is gone (patches 4-7, 18, 20 and 24 have nothing to patch), and vLLM builds speculators
from its own registry (``vllm.v1.worker.gpu.spec_decode.speculator_config``, experimental). Instead of patches 2, 3,
13, 14 and 16, the shim declares plugin drafters to it, in every process (:mod:`vllm_spec_plugins.speculators`):
each plugin name that is not a vLLM method is registered with ``register_speculative_method(name, "<qualname>")``;
each plugin model class gets ``speculator_config_class`` when its module is imported (vLLM reads it into the
model info, ``ModelConfig.speculator_config_class``; stale ``<VLLM_CACHE_ROOT>/modelinfos`` entries of plugin
classes are dropped); the configs (:mod:`vllm_spec_plugins.speculators.config`: ``PluginHeadsConfig`` over
``StandaloneARSpeculatorConfig``, ``PluginEagleConfig`` / ``PluginEagle3Config`` over ``EagleSpeculatorConfig`` /
``Eagle3SpeculatorConfig``) name the plugin speculator (``speculator_class``: 13), answer
``uses_aux_hidden_states`` (14), add the plugin's factors to ``hash_factors`` (3), never match a checkpoint by name
(``matches``), and for heads drafters declare no look-ahead tokens or drafting slots, no length limit and the
target's vocabulary; the speculator implements ``BaseSpeculator.add_request(req_index)`` (16) and takes
``req_states`` in its constructor. Still applied: 1, 8-12, 15, 17, 19, 21-23 and 25 (13 patches; the hooks that
would let each go: docs/upstream.md).
"""
