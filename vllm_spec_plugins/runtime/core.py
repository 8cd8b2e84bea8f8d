"""What every plugin drafter needs, whichever model runner calls it (worker processes only).

The runner-independent half of the shim's runtime: the bindings of the plugin's forward
and state-carry hook, the static buffers allocated before warm-up or graph capture, the
carried-state pool and its checks, the fault guard, the start-up trial forward and the
trace. Two thin front ends feed it: :mod:`.proposer` (vLLM's V1 model runner, its
``propose`` arguments) and :mod:`.mrv2` (Model Runner V2, its ``BaseSpeculator.propose``
arguments). Each front end fills ``self._step`` (``hidden_states``, ``aux_hidden_states``,
``valid_count``, ``req_ids``, ``sampled_token_ids``, ``target_token_ids``, ``num_rejected``,
``query_start_loc``) and implements :meth:`DrafterRuntime._state_index`.
"""

from __future__ import annotations

import contextlib
import importlib
import itertools
import logging
import os
from collections.abc import Iterator
from typing import Any, cast

import torch
from vllm.forward_context import set_forward_context

from .._names import ENV_TRACE_DIR
from ..api import KV_ONLY, MULTIMODAL_SOURCES, NUM_DRAFTS, Drafter, Source, model_class_error, model_class_gaps
from ..checkpoint import ARCH_ATTR, PLUGIN_ATTR, resolve_shape, split_class_path
from ..errors import PluginContractError, PluginLoadError
from ..manager import get_host
from ..policy import PolicySettings, not_adaptive
from . import trace
from .catchup import ENV_CATCHUP, ENV_KV_ONLY, KeptRows, catchup_rows, kv_only_enabled
from .guard import DraftGuard
from .inputs import (
    Binding,
    TargetInputs,
    bind,
    check_pipeline_stages,
    loop_inputs_of,
    multimodal_rows,
    needs_aux,
    token_rows,
)
from .lookup import ENV_LOOKUP, MODEL, LookupConfig, PromptLookup, auto_off_reason, lookup_config
from .state import (
    TOKEN_SOURCES,
    StatePool,
    StateRow,
    fill_token_source,
    resolve_inits,
    sees_tokens,
    token_requests,
)

logger = logging.getLogger("vllm.spec_plugins")


def drafter_for(vllm_config: Any) -> Drafter:
    hf = vllm_config.speculative_config.draft_model_config.hf_config
    name, arch = getattr(hf, PLUGIN_ATTR), getattr(hf, ARCH_ATTR)
    host = get_host()
    info = host.plugins.get(name)
    if info is not None and info.error:
        raise host.load_error(info)
    d = host.find(name, arch)
    if d is None:
        raise PluginLoadError(
            f"vllm_spec_plugins: the engine was configured with plugin {name!r} for architecture {arch!r}, "
            f"but this worker process (pid {os.getpid()}) did not load it. Make sure the plugin is installed "
            f"in the environment of every vLLM process and allowed by VLLM_SPEC_PLUGINS.", plugin_name=name)
    return d


def _import_class(d: Drafter) -> type[Any]:
    mod, name = split_class_path(d.model_class)
    try:
        module = importlib.import_module(mod)
    except KeyboardInterrupt:
        raise
    except BaseException as e:  # SystemExit at import included
        raise PluginLoadError(
            f"vllm_spec_plugins: {d.culprit()} names model class {d.model_class!r}, "
            f"but its module {mod!r} failed to import: {type(e).__name__}: {e}. Reinstall or upgrade "
            f"{d.display_dist}, or install what it needs.", plugin_name=d.plugin, dist=d.display_dist) from e
    cls: type[Any] | None = getattr(module, name, None)
    if cls is None:
        raise PluginLoadError(
            f"vllm_spec_plugins: {d.culprit()} names model class {d.model_class!r}, but "
            f"module {mod!r} has no attribute {name!r}. Fix the Drafter(model_class=...) of the plugin.",
            plugin_name=d.plugin, dist=d.display_dist)
    gaps = model_class_gaps(d, cls)
    if gaps:
        raise PluginContractError(model_class_error(d, gaps), plugin_name=d.plugin, dist=d.display_dist)
    return cls


def state_hook(drafter: Drafter, model_cls: type) -> Any:
    """The state-carry hook method of a drafter that declares carried state (``check`` asks the same)."""
    update = getattr(model_cls, drafter.update_state, None)
    if update is None:
        raise PluginContractError(
            f"vllm_spec_plugins: {drafter.culprit()} declares carried state "
            f"{[s.name for s in drafter.state]} but {drafter.model_class} has no state-carry hook method "
            f"{drafter.update_state!r}", plugin_name=drafter.plugin, dist=drafter.display_dist)
    return update


class _LanguageModelView:
    """What vLLM's EAGLE loaders expect ``get_language_model()`` to return: ``.model`` (the decoder, with
    ``embed_tokens``) and ``.lm_head``."""

    def __init__(self, decoder: Any, lm_head: Any) -> None:
        self.model = decoder
        self.lm_head = lm_head


@contextlib.contextmanager
def multimodal_target(target_model: Any) -> Iterator[None]:
    """While vLLM's EAGLE ``load_model`` runs (both runners): two gaps in how it reads a multimodal target,
    which stop vLLM's own EAGLE on the same targets (Idefics3 / SmolVLM among them):

    * it takes the target's decoder as ``get_language_model().model``; for targets whose language model *is*
      the decoder (Idefics3: a ``LlamaModel``, no ``.model``, its ``lm_head`` on the outer class) it raises
      ``AttributeError: Target model does not have 'model' attribute``. For the call, ``get_language_model``
      returns a view with ``.model`` (that decoder) and ``.lm_head`` (the target's);
    * V1 reads the image token from the config's ``image_token_index``, except for a fixed list of
      architectures; Idefics3's config calls it ``image_token_id``. For the call, it is copied over.

    Both are undone when the call returns; text targets and targets vLLM reads correctly are left alone."""
    undo: list[Any] = []
    cfg = getattr(target_model, "config", None)
    if cfg is not None and not hasattr(cfg, "image_token_index") and hasattr(cfg, "image_token_id"):
        cfg.image_token_index = cfg.image_token_id
        undo.append(lambda: delattr(cfg, "image_token_index"))
    get_lm = getattr(target_model, "get_language_model", None)
    if callable(get_lm):
        lm = get_lm()
        if getattr(lm, "model", None) is None and hasattr(lm, "embed_tokens"):
            view = _LanguageModelView(lm, getattr(lm, "lm_head", None) or getattr(target_model, "lm_head", None))
            object.__setattr__(target_model, "get_language_model", lambda: view)
            undo.append(lambda: object.__delattr__(target_model, "get_language_model"))
    try:
        yield
    finally:
        for step in reversed(undo):
            with contextlib.suppress(AttributeError):
                step()


TARGET_LAYERS_ADVICE = ("Serve this target with a draft that reads only its final hidden states (EAGLE-1, Medusa, "
                        "the MLP speculator).")


def target_layers_refusal(model_config: Any) -> str | None:
    """Why a drafter reading chosen target layers (aux hidden states: EAGLE-3's loop, or a bound aux source)
    cannot run on this target, or ``None``: vLLM takes them only from target classes implementing its
    ``SupportsEagle3``, and otherwise fails while loading the target with a message naming neither draft nor
    plugin. The target's class comes from vLLM's registry (nothing is loaded). ``check --target`` asks too."""
    from vllm.model_executor.model_loader.utils import get_model_architecture
    from vllm.model_executor.models.interfaces import supports_eagle3

    cls, arch = get_model_architecture(model_config)
    if supports_eagle3(cls):
        return None
    return (f"reads hidden states of chosen target layers (aux_layer_ids, EAGLE-3 style), which vLLM takes only "
            f"from target classes implementing its SupportsEagle3 interface; the target {arch} "
            f"('{model_config.model}') does not in this vLLM (vLLM's own EAGLE-3 cannot serve it either)")


def _next_positions(pos: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
    """``[num_reqs]``: the position after each request's token row ``idx``. ``pos``: ``[num_tokens]``, or
    ``[mrope_dims, num_tokens]`` on an M-RoPE target (V1 passes those as ``target_positions``; MRV2 keeps them
    apart), where the next text token goes one past the largest section."""
    if pos.dim() == 2:
        return pos.index_select(1, idx).amax(dim=0) + 1
    return pos.index_select(0, idx) + 1


def _dtype(name: str, model_dtype: torch.dtype) -> torch.dtype:
    if name == "model":
        return model_dtype
    dt = getattr(torch, name, None)
    if not isinstance(dt, torch.dtype):
        raise PluginContractError(f"vllm_spec_plugins: unknown dtype {name!r}")
    return dt



class DrafterRuntime:
    """Bindings, static buffers, carried state, guard, trial forward and trace of one plugin drafter.

    A mixin of both runners' front ends (placed before the vLLM class in the MRO). The
    host class provides ``vllm_config``, ``draft_model_config``, ``max_num_tokens``,
    ``num_speculative_tokens`` and, once loaded, ``model``.
    """

    # Set by the vLLM proposer / speculator class this mixin is combined with (annotations only, no values):
    vllm_config: Any  # set by vLLM's proposer: the engine's VllmConfig
    draft_model_config: Any  # set by vLLM's proposer: the draft's ModelConfig
    max_num_tokens: int  # set by vLLM's proposer: max_num_batched_tokens
    num_speculative_tokens: int  # set by vLLM's proposer (V1); by Mrv2Runtime._setup_mrv2 on MRV2
    model: Any  # set by vLLM's proposer when it loads the draft: the plugin model (AttentionRuntime wraps it)
    device: torch.device  # set by vLLM's proposer / speculator

    needs_aux_hidden_states = False
    #: prompt-lookup drafts beside the plugin's (.lookup); set by ``_setup_plugin`` when the variable asks for them
    lookup: PromptLookup | None = None

    def _setup_plugin(self, vllm_config: Any, device: torch.device, runner: Any, drafter: Drafter, *,
                      request_rows: int) -> None:
        self.runner = runner
        self.drafter = drafter
        self.model_cls = _import_class(drafter)
        hf = self.draft_model_config.hf_config
        aux_ids = getattr(hf, "eagle_aux_hidden_state_layer_ids", None) or []
        self.target_inputs = TargetInputs.of(vllm_config.model_config)
        common = dict(hf_config=hf, hidden_size=vllm_config.model_config.get_hidden_size(), num_aux=len(aux_ids),
                      num_spec_tokens=self.num_speculative_tokens, target=self.target_inputs)
        self.forward_bindings = bind(drafter, self.model_cls.forward, state_params=True,
                                     loop_inputs=loop_inputs_of(drafter), **common)
        #: API 3: the forward takes ``num_drafts`` (heads drafters), passed the step's k
        self.takes_num_drafts = any(b.param == NUM_DRAFTS and b.source is None for b in self.forward_bindings)
        self._forward_columns: int | None = None  # columns the last heads forward returned (the trace's)
        self.update_bindings: list[Binding] = []
        if drafter.state:
            self.update_bindings = bind(drafter, state_hook(drafter, self.model_cls), state_params=True, **common)
        self.needs_aux_hidden_states = needs_aux(self.forward_bindings + self.update_bindings)
        if self.needs_aux_hidden_states and not aux_ids:
            raise PluginContractError(
                f"vllm_spec_plugins: {drafter.culprit()} asks for aux hidden states "
                f"but declares no aux_layer_ids config key", plugin_name=drafter.plugin, dist=drafter.display_dist)

        #: API 3: the forward or hook reads what the target was fed (merged input embeddings, their mask)
        self.reads_target_inputs = bool(multimodal_rows(self.forward_bindings + self.update_bindings))
        check_pipeline_stages(drafter, self.forward_bindings + self.update_bindings,
                              int(getattr(vllm_config.parallel_config, "pipeline_parallel_size", 1) or 1))
        self.max_reqs = vllm_config.scheduler_config.max_num_seqs
        model_dtype = vllm_config.model_config.dtype
        self.buffers: dict[Any, torch.Tensor] = {}
        for b in self.forward_bindings + self.update_bindings:
            if b.source is None or b.key in self.buffers:
                continue
            rows = self.max_num_tokens if b.source.rows == "token" else request_rows
            self.buffers[b.key] = torch.zeros((rows, *b.shape), dtype=_dtype(b.dtype, model_dtype), device=device)
        self.pool: StatePool | None = None
        self._reset_on_preempt: list[str] = []
        if drafter.state:
            specs: list[StateRow] = []
            for s in drafter.state:
                shape = resolve_shape(drafter, hf, s.shape, f"state {s.name!r}")
                dtype = _dtype(s.dtype, model_dtype)
                specs.append((s.name, shape, dtype, 0.0 if isinstance(s.init, str) else float(s.init), s.on_preempt))
                self.buffers.setdefault(("state", s.name), torch.zeros((request_rows, *shape), dtype=dtype,
                                                                       device=device))
            self.pool = StatePool(specs, 2 * self.max_reqs, device)
            self._reset_on_preempt = [s.name for s in drafter.state if s.on_preempt == "reset"]
            self._state_init_attrs = {s.name: s.init for s in drafter.state if isinstance(s.init, str)}
            self._hook_sees_tokens = sees_tokens(self.update_bindings)
            self.slot_index = torch.zeros(self.max_reqs, dtype=torch.int64, device=device)
        self._step: dict[str, Any] = {}
        self.target_hidden_size = vllm_config.model_config.get_hidden_size()
        self.target_vocab_size = vllm_config.model_config.get_vocab_size()
        self.guard = DraftGuard(drafter, model_class=drafter.model_class, checkpoint=str(self.draft_model_config.model),
                                vocab_size=self.target_vocab_size, device=device,
                                async_scheduling=bool(getattr(vllm_config.scheduler_config, "async_scheduling", False)))
        self._check_target_layers()
        self.lookup = None
        lookup_cfg = lookup_config()
        if lookup_cfg is not None:
            self._setup_lookup(lookup_cfg, vllm_config, device)
        self._trace_dir = os.environ.get(ENV_TRACE_DIR) or None
        self._trace_n = 0
        if self._trace_dir:
            try:
                os.makedirs(self._trace_dir, exist_ok=True)
                probe = os.path.join(self._trace_dir, f".vsp-write-test-{os.getpid()}")
                with open(probe, "wb"):
                    pass
                os.remove(probe)
            except OSError as e:
                raise ValueError(f"vllm_spec_plugins: {ENV_TRACE_DIR}={self._trace_dir!r} cannot hold the drafting "
                                 f"trace: {type(e).__name__}: {e}. Give a folder this process can create and write "
                                 f"to, or unset {ENV_TRACE_DIR}.") from e

    def _drop_kept(self, req_id: str) -> None:
        """A request finished, or was preempted: forget the first-pass rows kept for it (an attention drafter's;
        a heads drafter keeps none)."""

    # -- prompt lookup beside the plugin's drafts (.lookup) ----------------------

    def _setup_lookup(self, cfg: LookupConfig, vllm_config: Any, device: torch.device) -> None:
        d = self.drafter
        why = None
        if getattr(vllm_config.model_config, "uses_mrope", False):
            why = "the target uses M-RoPE, whose positions are not sequence indices (not supported yet)"
        elif getattr(vllm_config.speculative_config, "disable_padded_drafter_batch", False):
            why = ("disable_padded_drafter_batch is set: V1's runner then hands drafters host lists instead of the "
                   "per-request counts lookup reads (not supported yet)")
        elif getattr(vllm_config.speculative_config, "draft_sample_method", "greedy") == "probabilistic":
            why = ("draft_sample_method is 'probabilistic': vLLM verifies those drafts against the draft's "
                   "probabilities, which lookup drafts do not have")
        max_len = int(vllm_config.model_config.max_model_len)
        if why is not None and cfg.auto:
            logger.info("vllm_spec_plugins: no prompt-lookup drafts beside those of %s (%s unset or auto): %s",
                        d.culprit(), ENV_LOOKUP, why)
            return
        if why is not None:
            raise ValueError(f"vllm_spec_plugins: {ENV_LOOKUP}={cfg} cannot run beside {d.culprit()}: {why}. "
                             f"Unset {ENV_LOOKUP} (or set it to off) for this engine.")
        if cfg.auto:
            why = auto_off_reason(not_adaptive(PolicySettings.from_env(), vllm_config),
                                  bool(getattr(vllm_config.scheduler_config, "async_scheduling", False)),
                                  PromptLookup.table_bytes(self.max_reqs, max_len))
            if why is not None:
                logger.info("vllm_spec_plugins: no prompt-lookup drafts beside those of %s (%s unset or auto): %s. "
                            "%s=on turns them on anyway, off silences this.", d.culprit(), ENV_LOOKUP, why,
                            ENV_LOOKUP)
                return
        self.lookup = PromptLookup(cfg, self.max_reqs, max_len, self.max_num_tokens, device)
        logger.info("vllm_spec_plugins: %s=%s%s: prompt-lookup drafts (n-grams of %d to %d tokens) beside those of "
                    "%s, chosen per request", ENV_LOOKUP, cfg, " (the default)" if cfg.auto else "", cfg.min_n,
                    cfg.max_n, d.culprit())

    def _lookup_prompt(self, req_id: str) -> torch.Tensor | None:
        """The tokens a request starts with (its prompt; after a preemption, with its output), read once when
        prompt lookup first sees it: what the prefix cache served is never scheduled."""
        raise NotImplementedError

    def _lookup_observe(self, B: int, T: int, token_ids: torch.Tensor, positions: torch.Tensor,
                        next_ids: torch.Tensor, next_pos: torch.Tensor) -> None:
        """Every step, whatever k: the step's tokens into each request's lookup row, and the verdict on the
        drafts this step verified (``self._step``: ``req_ids``, ``query_start_loc``, ``valid_count``)."""
        lk = self.lookup
        assert lk is not None
        rows = lk.rows(self._step["req_ids"][:B], self._lookup_prompt)
        lk.observe(rows, B, T, token_ids, positions, self._step["query_start_loc"], next_ids, next_pos,
                   self._step["valid_count"])
        self._step["lookup"] = (rows, next_pos[:B])
        lk.chosen = lk.rates = None

    def _lookup_compose(self, drafts: torch.Tensor) -> torch.Tensor:
        """The step's drafts with each request's lookup drafts in place of the plugin's where they win."""
        seen = self._step.get("lookup")
        if self.lookup is None or seen is None:
            return drafts
        return self.lookup.compose(seen[0], drafts, seen[1], self._step.get("drafted_by_model"))

    def _compose(self, drafts: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The step's ``k`` drafts for vLLM from the model's (``drafts``, ``[B, model's k]``): padded to ``k`` and,
        with prompt lookup on, the lookup's in place of the model's where a request takes them. Second: with the
        trace on, a host copy of the model's own (the trace's ``drafts``, taken before the composition, which may
        write into the buffer they are a view of); ``None`` without it, so that drafting does no more work."""
        model = drafts.detach().to("cpu", copy=True) if self._trace_dir else None
        return self._lookup_compose(self._padded(drafts, k)), model

    def _model_k(self, k: int) -> int:
        """How many of the step's ``k`` drafts the plugin's model drafts: fewer where the policy raised ``k`` for prompt
        lookup's drafts (the scheduler verifies the model's only up to that many); ``k`` otherwise."""
        mk = self._step.get("model_k")
        mk = k if mk is None or self.lookup is None else max(0, min(int(mk), k))
        self._step["drafted_by_model"] = mk
        return mk

    @staticmethod
    def _padded(drafts: torch.Tensor, k: int) -> torch.Tensor:
        """``[B, k]``: the model's drafts, then zeros (columns the scheduler never verifies for the model's)."""
        if drafts.shape[1] == k:
            return drafts
        out = torch.zeros((drafts.shape[0], k), dtype=torch.int64, device=drafts.device)
        out[:, :drafts.shape[1]] = drafts
        return out

    def draft_sources(self, req_ids: list[str]) -> list[int] | None:
        """Where the drafts of the latest step came from, per request of ``req_ids`` (the runner hands them to the
        scheduler in this order): ``runtime.lookup.MODEL`` or ``LOOKUP``; ``None`` without prompt lookup, or without
        drafts. Called on the host after the step, by the runner's ``take_draft_token_ids`` (vLLM calls it with
        synchronous scheduling; one small copy to the host, after the step's own)."""
        lk = self.lookup
        if lk is None or lk.chosen is None or not req_ids:
            return None
        step_ids = list(self._step.get("req_ids", ()))
        if step_ids[:len(req_ids)] == list(req_ids):
            return [int(x) for x in lk.chosen[:len(req_ids)].tolist()]
        # vLLM 0.34 hands over every live request holding drafts, in the order each first got some: match by id;
        # a request this step did not draft for keeps the model as its source (the policy's default)
        row = {r: i for i, r in enumerate(step_ids)}
        if not any(r in row for r in req_ids):
            return None
        chosen = lk.chosen[:len(step_ids)].tolist()
        return [int(chosen[row[r]]) if r in row else MODEL for r in req_ids]

    # -- inputs ----------------------------------------------------------------

    def _kwargs(self, bindings: list[Binding], rows: int, tokens: int) -> dict[str, torch.Tensor]:
        return {b.param: self.buffers[b.key][: tokens if b.source.rows == "token" else rows]
                for b in bindings if b.source is not None}

    def _prepare_step(self, B: int, T: int, next_token_ids: torch.Tensor, target_positions: torch.Tensor,
                      idx: torch.Tensor) -> None:
        """Fill every requested buffer for this step, then carry the state (before the forward)."""
        step = self._step
        buf = self.buffers
        # (set by the front end before every step; read only for the sources that need them)
        hidden = cast(torch.Tensor, step.get("hidden_states"))
        valid = cast(torch.Tensor, step.get("valid_count"))
        for key in {b.key for b in self.forward_bindings + self.update_bindings if b.source is not None}:
            if key == Source.TARGET_HIDDEN_LAST:
                torch.index_select(hidden, 0, idx, out=buf[key][:B])
            elif key == Source.TARGET_HIDDEN_ALL:
                buf[key][:T].copy_(hidden[:T])
            elif key in (Source.AUX_HIDDEN_LAST, Source.AUX_HIDDEN_ALL):
                aux = step["aux_hidden_states"]
                width = aux[0].shape[-1]
                for i, h in enumerate(aux):
                    dst = buf[key][:, i * width:(i + 1) * width]
                    if key == Source.AUX_HIDDEN_LAST:
                        dst[:B].copy_(h.index_select(0, idx))
                    else:
                        dst[:T].copy_(h[:T])
            elif key == Source.NEXT_TOKEN_IDS:
                buf[key][:B].copy_(next_token_ids[:B])
            elif key == Source.POSITIONS_LAST:  # M-RoPE: the next text token's, as NEXT_POSITIONS's sections
                buf[key][:B].copy_(_next_positions(step.get("mrope_positions", target_positions), idx))
            elif key == Source.TARGET_INPUTS_EMBEDS:
                buf[key][:T].copy_(step["inputs_embeds"][:T])
            elif key == Source.IS_MULTIMODAL:
                mask = step.get("is_multimodal")
                if mask is None:  # a text-only target, or a step that gathered no multimodal rows
                    buf[key][:T].zero_()
                else:  # (a pinned host tensor the runner built: an asynchronous copy, no sync)
                    buf[key][:T].copy_(mask[:T], non_blocking=True)
            elif key == Source.POSITIONS_ALL:
                pos = step.get("mrope_positions", target_positions)  # MRV2 keeps M-RoPE positions apart
                buf[key][:T].copy_(pos[:, :T].t() if pos.dim() == 2 else pos[:T])
            elif key == Source.NEXT_POSITIONS:  # M-RoPE: the same in every section
                nxt = _next_positions(step.get("mrope_positions", target_positions), idx)
                buf[key][:B].copy_(nxt.unsqueeze(1).expand(B, buf[key].shape[1]) if buf[key].dim() == 2 else nxt)
            elif key == Source.NUM_NEW_TOKENS:
                buf[key][:B].copy_(valid[:B])
            elif key == Source.NUM_ACCEPTED:
                buf[key][:B].copy_((valid[:B] - 1).clamp_(min=0))
            elif key in TOKEN_SOURCES:
                fill_token_source(key, buf[key], step, B, T)
            elif key == Source.SAMPLED_TOKEN_IDS:
                s = step["sampled_token_ids"]
                c = min(s.shape[1], buf[key].shape[1])
                buf[key][:B].fill_(-1)
                buf[key][:B, :c].copy_(s[:B, :c])
        if self.pool is not None:
            self._carry_state(B, T)

    def _zero_target_inputs(self, tokens: int) -> None:
        """Dummy runs: zero input embeddings and an all-false multimodal mask (not the last step's)."""
        for key in MULTIMODAL_SOURCES:
            if key in self.buffers:
                self.buffers[key][:tokens].zero_()

    def _carry_state(self, B: int, T: int) -> None:
        pool = self.pool
        assert pool is not None
        idx = self._state_index(B)
        for name in pool.tensors:
            torch.index_select(pool.tensors[name], 0, idx, out=self.buffers[("state", name)][:B])
        if self._state_init_attrs:  # API 2: state initialised from a model attribute, read once
            resolve_inits(pool, self.model, self._state_init_attrs, self.drafter)
            self._state_init_attrs = {}
            for name in pool.tensors:
                torch.index_select(pool.tensors[name], 0, idx, out=self.buffers[("state", name)][:B])
        if not self.update_bindings:
            return
        d = self.drafter
        ok, new = self.guard.run(f"the state-carry hook {d.model_class}.{d.update_state}()",
                                 self._checked_update, B, T)
        if not ok:
            return
        keep = self._step["valid_count"][:B] > 0
        if self._hook_sees_tokens:  # API 2: a hook reading scheduled tokens folds partial-prefill rows too
            keep = torch.ones_like(keep)
        for name, value in new.items():
            cur = self.buffers[("state", name)][:B]
            mask = keep.view(B, *([1] * (cur.dim() - 1)))
            cur.copy_(torch.where(mask, value.to(cur.dtype), cur))
            pool.tensors[name].index_copy_(0, idx, cur)

    def _checked_update(self, B: int, T: int, trial: bool = False) -> dict[str, torch.Tensor]:
        """Call the state-carry hook; check what it returned against the declared state."""
        d = self.drafter
        pool = self.pool
        assert pool is not None
        hook_kwargs = self._kwargs(self.update_bindings, B, T)
        if self._trace_dir:
            self._trace_hook = {"hook_inputs": trace.copy_tensors(hook_kwargs)}
        new = getattr(self.model, d.update_state)(**hook_kwargs)
        if not isinstance(new, dict) or set(new) != set(pool.tensors):
            got = sorted(new) if isinstance(new, dict) else type(new).__name__
            raise PluginContractError(
                f"vllm_spec_plugins: {d.culprit()}: {d.model_class}.{d.update_state}() must "
                f"return a dict with keys {sorted(pool.tensors)}; got {got}", plugin_name=d.plugin, dist=d.display_dist)
        if self._trace_dir:
            self._trace_hook["hook_outputs"] = trace.copy_tensors(new)
        if trial:
            self._check_trial_state({k: v for k, v in new.items() if isinstance(v, torch.Tensor)})
        for name, value in new.items():
            cur = self.buffers[("state", name)][:B]
            if not isinstance(value, torch.Tensor) or tuple(value.shape) != tuple(cur.shape):
                got = list(value.shape) if isinstance(value, torch.Tensor) else type(value).__name__
                raise PluginContractError(
                    f"vllm_spec_plugins: {d.culprit()}: state {name!r} returned by "
                    f"{d.update_state}() has shape {got}, expected {list(cur.shape)}",
                    plugin_name=d.plugin, dist=d.display_dist)
        return new

    # -- start-up check ----------------------------------------------------------

    def _load_error(self, what: str, exc: BaseException | None = None, *, advice: str = "") -> PluginLoadError:
        d = self.drafter
        hf = self.draft_model_config.hf_config
        cause = f": {type(exc).__name__}: {exc}" if exc is not None else ""
        found = (getattr(hf, "hidden_size", None), getattr(hf, "vocab_size", None))
        if not advice and found == (self.target_hidden_size, self.target_vocab_size):
            advice = (f"The draft config's sizes match the target's (hidden_size {found[0]}, vocab_size {found[1]}): "
                      f"fix the checkpoint, or report it to the authors of {d.display_dist}.")
        elif not advice:
            advice = (f"Expected a draft for this target: hidden_size {self.target_hidden_size} and vocab_size "
                      f"{self.target_vocab_size} (the target's); found in the draft config: hidden_size {found[0]}, "
                      f"vocab_size {found[1]}. Use a draft trained for this target, or fix its config.json.")
        return PluginLoadError(
            f"vllm_spec_plugins: {d.culprit(model_class=True, checkpoint=self.draft_model_config.model)} "
            f"{what}{cause}. {advice}", plugin_name=d.plugin, dist=d.display_dist)

    def _check_target_layers(self) -> None:
        """A drafter reading chosen target layers needs a target class that exposes them (checked once, when the
        drafter is built, before any model loads; :func:`target_layers_refusal`)."""
        if not (self.needs_aux_hidden_states or getattr(self, "combines_target_layers", False)):
            return
        why = target_layers_refusal(self.vllm_config.model_config)
        if why:
            raise self._load_error(why, advice=TARGET_LAYERS_ADVICE)

    @contextlib.contextmanager
    def _plugin_call(self, what: str) -> Iterator[None]:
        """Plugin code at start-up (model construction, weight loading, ``bind_target``): a failure refuses
        the draft with the culprit named, instead of a bare traceback from inside vLLM's loader."""
        try:
            yield
        except (PluginLoadError, KeyboardInterrupt):
            raise
        except BaseException as e:  # SystemExit included
            raise self._load_error(what, e) from e

    def _resolve_state_inits(self) -> None:
        """At start-up: read ``StateSpec(init="<attribute>")`` initial states from the loaded model (API 2) and
        put every state's initial value in the first row of its buffer, for the trial's state-carry hook."""
        pool = self.pool
        if pool is None:
            return
        if self._state_init_attrs:
            resolve_inits(pool, self.model, self._state_init_attrs, self.drafter)
            self._state_init_attrs = {}
        for name, _, _, init, _ in pool.specs:
            pool._fill(name, pool.scratch, init)
            self.buffers[("state", name)][:1].copy_(pool.tensors[name][pool.scratch:pool.scratch + 1])

    def _check_trial_state(self, new: dict[str, torch.Tensor]) -> None:
        """What the state-carry hook returned in the trial: finite values; a dtype other than the declared one
        is cast at every step (a warning, once)."""
        d = self.drafter
        for name, value in new.items():
            want = self.buffers[("state", name)].dtype
            if value.is_floating_point() and not bool(torch.isfinite(value).all()):
                raise PluginContractError(
                    f"vllm_spec_plugins: {d.culprit()}: {d.model_class}.{d.update_state}() "
                    f"returned non-finite values (NaN or inf) for state {name!r} from its initial state",
                    plugin_name=d.plugin, dist=d.display_dist)
            if value.dtype != want:
                logger.warning("vllm_spec_plugins: plugin %r (%s): %s.%s() returns state %r as %s, declared %s: "
                               "it is cast to %s at every step", d.plugin, d.display_dist, d.model_class,
                               d.update_state, name, value.dtype, want, want)

    def _check_finite_logits(self, logits: torch.Tensor) -> None:
        """NaN logits, or a row with no finite logit, on the trial's inputs: every draft would be rejected,
        silently. Refused. (``-inf`` for tokens a drafter cannot propose, such as EAGLE-3 ids outside its
        draft vocabulary, is fine.)"""
        if bool(torch.isnan(logits).any()) or bool((~torch.isfinite(logits)).all(dim=-1).any()):
            raise self._load_error("returned NaN logits (or no finite logit for a row) in its trial forward; "
                                   "check the checkpoint's weights")

    def _warn_non_finite_weights(self) -> None:
        """A parameter with NaN or inf values (a warning, once per parameter name list)."""
        model = getattr(self.model, "inner", self.model)
        bad = [n for n, p in model.named_parameters() if p.is_floating_point() and not bool(torch.isfinite(p).all())]
        if bad:
            d = self.drafter
            logger.warning("vllm_spec_plugins: draft '%s' (plugin %r, %s): parameter(s) %s hold NaN or inf values; "
                           "its drafts will be rejected", self.draft_model_config.model, d.plugin, d.display_dist,
                           ", ".join(bad[:8]) + (" ..." if len(bad) > 8 else ""))

    def _trial(self, run: Any) -> None:
        """Run ``run()`` once at load (one trial forward on the static buffers); refuse the draft if it fails."""
        try:
            with torch.inference_mode():
                self._warn_non_finite_weights()
                self._resolve_state_inits()
                run()
        except (PluginLoadError, KeyboardInterrupt):
            raise
        except BaseException as e:  # SystemExit included
            raise self._load_error("failed its trial forward at start-up", e) from e

    def _state_index(self, B: int) -> torch.Tensor:
        """The carried-state pool slot of each of the step's first ``B`` requests, on the device."""
        raise NotImplementedError

    def _trace(self, B: int, T: int, drafts: torch.Tensor, extra: dict[str, Any] | None = None,
               model_drafts: torch.Tensor | None = None) -> None:
        """Write one trace record (schema: runtime/trace.py, docs/trace.md): ``drafts`` returned to vLLM, and the
        model's own where prompt lookup composed them (:meth:`_compose`). A failure (disk full, the folder
        removed...) is not the plugin's: it is logged once and tracing stops; drafting goes on."""
        try:
            trace.save_record(self, B, T, drafts, extra, model_drafts)
        except KeyboardInterrupt:
            raise
        except BaseException as e:  # noqa: BLE001
            logger.error("vllm_spec_plugins: writing the drafting trace to %s=%r failed (%s: %s); tracing is off "
                         "for the rest of this engine's life, drafting goes on", ENV_TRACE_DIR, self._trace_dir,
                         type(e).__name__, e)
            self._trace_dir = None
        self._trace_n += 1




class HeadsRuntime(DrafterRuntime):
    """A ``heads`` drafter: one forward per step over one row per request (both runners)."""

    def _bind_and_trial(self, target_model: torch.nn.Module | None) -> None:
        bind_target = getattr(self.model, "bind_target", None)
        if bind_target is not None:
            with self._plugin_call("failed in bind_target(target_model)"):
                bind_target(target_model)
        self._trial(self._trial_heads)

    def _dummy_counts(self, rows: int, tokens: int) -> None:
        """Make the per-request scheduled-token counts of dummy inputs add up to their token rows
        (a hook folding ``TOKEN_IDS_ALL`` by ``NUM_SCHEDULED_TOKENS`` relies on it)."""
        buf = self.buffers.get(Source.NUM_SCHEDULED_TOKENS)
        if buf is None:
            return
        buf.zero_()
        buf[:rows].fill_(tokens // rows)
        buf[0] += tokens - rows * (tokens // rows)

    def _forward_kwargs(self, rows: int, tokens: int, k: int) -> dict[str, Any]:
        """The forward's inputs: buffer slices, and (API 3) ``num_drafts=k`` when it asks for it."""
        kwargs: dict[str, Any] = self._kwargs(self.forward_bindings, rows, tokens)
        if self.takes_num_drafts:
            kwargs[NUM_DRAFTS] = k
        return kwargs

    def _trial_heads(self) -> None:
        """State-carry hook and forward on one row of the static buffers; the drafts must be target ids.
        A forward taking ``num_drafts`` is tried with 1 too: it must return at least that many columns."""
        k = self.num_speculative_tokens
        self._dummy_counts(1, 1)
        with set_forward_context(None, self.vllm_config, num_tokens=1):
            if self.update_bindings:
                self._checked_update(1, 1, trial=True)
            out = self.model(**self._forward_kwargs(1, 1, k))
            if self.takes_num_drafts and k > 1:
                self._to_drafts(self.model(**self._forward_kwargs(1, 1, 1)), 1, 1)
        if isinstance(out, torch.Tensor) and out.is_floating_point() and out.dim() == 3 \
                and out.shape[-1] > self.target_vocab_size:
            raise self._load_error(f"returns logits over {out.shape[-1]} tokens, more than the target's vocabulary")
        if isinstance(out, torch.Tensor) and out.is_floating_point():
            self._check_finite_logits(out)
        drafts = self._to_drafts(out, 1, k)
        top = int(drafts.max()) if drafts.numel() else 0
        low = int(drafts.min()) if drafts.numel() else 0
        if low < 0 or top >= self.target_vocab_size:
            raise self._load_error(f"proposed draft token id {top if top >= self.target_vocab_size else low} "
                                   f"in its trial forward, outside the target's vocabulary [0, "
                                   f"{self.target_vocab_size})")

    def _dummy_forward(self, rows: int, tokens: int) -> None:
        """State-carry hook and forward on the static buffers, writing no state (vLLM's warm-up runs)."""
        self._dummy_counts(rows, tokens)
        self._zero_target_inputs(tokens)
        with set_forward_context(None, self.vllm_config, num_tokens=rows):
            if self.update_bindings:
                getattr(self.model, self.drafter.update_state)(**self._kwargs(self.update_bindings, rows, tokens))
            self.model(**self._forward_kwargs(rows, tokens, self.num_speculative_tokens))

    def _forward_drafts(self, B: int, T: int, k: int) -> torch.Tensor:
        with set_forward_context(None, self.vllm_config, num_tokens=B):
            out = self.model(**self._forward_kwargs(B, T, k))
        self._forward_columns = int(out.shape[1]) if isinstance(out, torch.Tensor) and out.dim() >= 2 else None
        return self._to_drafts(out, B, k)

    def _to_drafts(self, out: object, B: int, k: int) -> torch.Tensor:
        d = self.drafter
        if not isinstance(out, torch.Tensor):
            raise PluginContractError(
                f"vllm_spec_plugins: {d.culprit()}: {d.model_class}.forward() returned "
                f"{type(out).__name__}; expected a tensor of draft token ids [num_reqs, k] or logits "
                f"[num_reqs, k, vocab]", plugin_name=d.plugin, dist=d.display_dist)
        if out.dtype == torch.bool or out.is_complex():
            raise PluginContractError(
                f"vllm_spec_plugins: {d.culprit()}: {d.model_class}.forward() returned a "
                f"{out.dtype} tensor; draft token ids must be integers [num_reqs, k] (or logits [num_reqs, k, "
                f"vocab] as floats)", plugin_name=d.plugin, dist=d.display_dist)
        if out.is_floating_point():
            if out.dim() != 3:
                raise PluginContractError(
                    f"vllm_spec_plugins: {d.culprit()}: forward() returned a float tensor of "
                    f"shape {list(out.shape)}; logits must be [num_reqs={B}, k>={k}, vocab]",
                    plugin_name=d.plugin, dist=d.display_dist)
            out = out.argmax(dim=-1)
        if out.dim() != 2 or out.shape[0] != B or out.shape[1] < k:
            asked = f" (it was passed num_drafts={k})" if self.takes_num_drafts else ""
            raise PluginContractError(
                f"vllm_spec_plugins: {d.culprit()}: forward() returned shape "
                f"{list(out.shape)}; expected draft token ids [num_reqs={B}, k>={k}]{asked}",
                plugin_name=d.plugin, dist=d.display_dist)
        return out[:, :k].to(torch.int64)


class AttentionDrafterAdapter(torch.nn.Module):
    """What vLLM's EAGLE loop calls as ``self.model``: calls the plugin model with only what it asks for.

    The loop passes ``input_ids``, ``positions``, ``hidden_states`` and ``inputs_embeds``;
    the plugin's forward receives those of them it names, plus its declared
    request-row extra inputs and state. In the first pass (one row per scheduled
    token) those are expanded to the tokens of each request; in later passes
    (one row per request) they are passed as they are. Everything else (``compute_logits``,
    ``embed_input_ids``, ``lm_head``, ``model``...) is the plugin model's own.
    """

    _proposer: AttentionRuntime  # set in __init__ (outside nn.Module's attribute handling)

    def __init__(self, inner: torch.nn.Module, proposer: AttentionRuntime) -> None:
        super().__init__()
        self.inner = inner
        object.__setattr__(self, "_proposer", proposer)  # not a submodule

    def __getattr__(self, name: str) -> Any:
        try:
            return super().__getattr__(name)
        except AttributeError:
            return getattr(self._modules["inner"], name)

    def forward(self, input_ids: torch.Tensor | None = None, positions: torch.Tensor | None = None,
                hidden_states: torch.Tensor | None = None, inputs_embeds: torch.Tensor | None = None) -> Any:
        p = self._proposer
        # API 4: a first pass whose outputs vLLM's loop discards, run eagerly, tells the forward so
        kv_only = p.discarding and p.takes_kv_only and p.pass_index == 0 and hidden_states is not None \
            and eager_pass()
        loop = {"input_ids": input_ids, "positions": positions, "hidden_states": hidden_states,
                "inputs_embeds": inputs_embeds, KV_ONLY: kv_only}
        rows = next(t for t in (input_ids, inputs_embeds, hidden_states) if t is not None).shape[0]
        kwargs: dict[str, torch.Tensor | bool | None] = {}
        for b in p.forward_bindings:
            if b.source is None:
                kwargs[b.param] = loop[b.param]
            elif b.key in p.later_pass_rows:  # a token-row source: the target's rows, then zeros
                kwargs[b.param] = (p.buffers if p.pass_index == 0 else p.later_pass_rows)[b.key][:rows]
            elif p.pass_index == 0:  # rows are tokens: give each token its request's row
                exp = p.expanded[b.key][:rows]
                torch.index_select(p.buffers[b.key], 0, p.token_request[:rows], out=exp)
                kwargs[b.param] = exp
            else:
                kwargs[b.param] = p.buffers[b.key][:rows]
        p.pass_index += 1
        out = self.inner(**kwargs)
        if kv_only:
            # its return value is not looked at: the loop gets the pass's input hidden states in its place (the
            # shape it indexes before returning; [rows, hidden], the draft's width), and discards them
            p._step["kv_only"] = p._step.get("kv_only", 0) + 1
            return hidden_states, hidden_states
        if isinstance(out, torch.Tensor):
            return out, out
        return out


def eager_pass() -> bool:
    """Whether the pass now running runs eagerly: vLLM's forward context (set around every drafter pass) says no
    CUDA graph (``CUDAGraphMode.NONE``). A captured graph replays what it captured, whatever a flag says."""
    from vllm.forward_context import get_forward_context, is_forward_context_available

    if not is_forward_context_available():
        return False
    mode = getattr(get_forward_context(), "cudagraph_runtime_mode", None)
    return mode is not None and getattr(mode, "name", None) == "NONE"




class AttentionRuntime(DrafterRuntime):
    """An ``attention`` drafter: run inside vLLM's multi-step EAGLE loop behind
    :class:`AttentionDrafterAdapter` (both runners).

    The adapter reads ``pass_index`` (0: the first pass, one row per scheduled token; 1 and
    later: one row per request) and ``token_request`` (the request row of each token row).
    """

    hidden_size: int  # set by vLLM's proposer: the draft's hidden size

    def _setup_attention(self, vllm_config: Any, device: torch.device, runner: Any, drafter: Drafter) -> None:
        rows = self.max_num_tokens  # later passes may be padded beyond max_num_seqs
        self.combines_target_layers = bool(drafter.aux_layer_ids)  # (before _setup_plugin: it checks the target)
        self._setup_plugin(vllm_config, device, runner, drafter, request_rows=rows)
        if self.combines_target_layers and not callable(getattr(self.model_cls, "combine_hidden_states", None)):
            raise PluginContractError(
                f"vllm_spec_plugins: {drafter.culprit()}: attention drafter "
                f"{drafter.model_class} declares aux_layer_ids={drafter.aux_layer_ids!r}, so vLLM's loop feeds it "
                f"the chosen target layers concatenated, but the class has no combine_hidden_states(hidden_states) "
                f"method reducing [num_tokens, n_layers * hidden] to [num_tokens, hidden]",
                plugin_name=drafter.plugin, dist=drafter.display_dist)
        #: API 3: token-row sources get the target's rows in the first pass, and these zeros in the later passes
        #: (one row per request: drafted tokens, which the target never consumed)
        self.later_pass_rows = {b.key: torch.zeros_like(self.buffers[b.key]) for b in token_rows(self.forward_bindings)}
        if self.later_pass_rows:
            self._check_first_pass_layout(vllm_config, drafter)
        self.expanded = {b.key: torch.zeros_like(self.buffers[b.key]) for b in self.forward_bindings
                         if b.source is not None and b.key not in self.later_pass_rows}
        self.token_request = torch.zeros(self.max_num_tokens, dtype=torch.int64, device=device)
        self.token_arange = torch.arange(self.max_num_tokens, dtype=torch.int64, device=device)
        self.pass_index = 0
        #: API 4: the forward takes ``kv_only``, told ``True`` in eager first passes whose outputs are discarded
        self.takes_kv_only = any(b.param == KV_ONLY and b.source is None for b in self.forward_bindings)
        if self.takes_kv_only and not kv_only_enabled():
            self.takes_kv_only = False
            logger.info("vllm_spec_plugins: plugin %r: %s=0: its forward, which takes kv_only, is never told it; the "
                        "whole forward runs in passes whose outputs are discarded", drafter.plugin, ENV_KV_ONLY)

    #: set around the passes whose outputs vLLM's loop discards (:meth:`_discarding`)
    discarding = False

    @contextlib.contextmanager
    def _discarding(self) -> Iterator[None]:
        """Around a call of vLLM's loop whose first pass's outputs are discarded: a draft prefill while the model
        drafts nothing (V1's ``propose`` at ``k = 0`` returns before its logits; MRV2's forward-only prefill), and
        the catch-up of skipped first passes. All it writes that counts is the draft KV cache: a forward taking
        ``kv_only`` (API 4) is told so (:class:`AttentionDrafterAdapter`, eager passes only)."""
        self.discarding = True
        try:
            yield
        finally:
            self.discarding = False

    #: V1's runner condenses the first pass to the accepted tokens under ``disable_padded_drafter_batch``
    condensed_first_pass_option = False
    #: rows of first passes skipped in steps that drafted nothing (:mod:`.catchup`); None: never skipped
    kept: KeptRows | None = None

    # -- the k = 0 floor: skipped first passes and their catch-up (.catchup) -----------------------------------

    def _setup_catchup(self, runner_reasons: dict[str, bool], *, token_dtype: torch.dtype) -> None:
        """Once the draft is loaded: allocate the kept rows, unless a skipped first pass could not be replayed from
        the token, position, KV slot and target hidden state of each row alone (``runner_reasons``: the model
        runner's own); the engine log says which."""
        rows = catchup_rows()
        parallel = self.vllm_config.parallel_config
        reasons = {
            f"{ENV_CATCHUP}=0": not rows,
            "the drafter reads extra inputs or carried state": bool(self.buffers or self.reads_target_inputs),
            "M-RoPE positions": bool(getattr(self.vllm_config.model_config, "uses_mrope", False)),
            "context parallelism": max(int(getattr(parallel, "decode_context_parallel_size", 1) or 1),
                                       int(getattr(parallel, "prefill_context_parallel_size", 1) or 1)) > 1,
            # (the ranks of a data-parallel group run their drafter in lockstep: one may not skip alone)
            "data parallelism": int(getattr(parallel, "data_parallel_size", 1) or 1) > 1,
            **runner_reasons,
        }
        why_not = ", ".join(why for why, applies in reasons.items() if applies)
        if why_not:
            logger.info("vllm_spec_plugins: plugin %r: the draft's first pass runs in every step, also those that "
                        "draft nothing (%s)", self.drafter.plugin, why_not)
            return
        self.kept = KeptRows(self.max_reqs, min(rows, self.max_num_tokens), self.target_rows_width,
                             self.vllm_config.model_config.dtype, self.device, token_dtype=token_dtype)
        logger.info("vllm_spec_plugins: plugin %r: in steps that draft nothing, the draft's first pass is skipped and "
                    "caught up before drafting resumes (up to %d rows kept per request; %s=0 runs it every step)",
                    self.drafter.plugin, self.kept.rows, ENV_CATCHUP)

    def _keep_first_pass(self, k: int, B: int, T: int, max_query_len: int, token_ids: torch.Tensor,
                         positions: torch.Tensor, slots: torch.Tensor, hidden: torch.Tensor) -> bool:
        """In a plain decode step that drafts nothing (``k = 0``, one token per request), keep each request's
        first-pass row (row ``i``: input token, position, KV slot, target hidden state) instead of running the
        pass; not when a request has kept as many rows as it may. Returns whether the pass is skipped."""
        req_ids = self._step.get("req_ids")
        if (self.kept is None or k != 0 or T != B or max_query_len != 1 or req_ids is None
                or not self.kept.can_keep(req_ids[:B])):
            return False
        self.kept.keep(req_ids[:B], token_ids[:B], positions[:B], slots[:B], hidden[:B])
        self._step["first_pass"] = "skipped"
        return True

    def _may_keep_verified(self, k: int, B: int, T: int) -> bool:
        """Whether this step may keep its verified rows (:meth:`_keep_verified`), before a front end reads its
        batch: the model drafts nothing (``k`` is the model's) but drafts are verified (more tokens than requests:
        prompt lookup's, or the model's own from the step before its ``k`` fell to 0), and scheduling is
        synchronous (the host's count of computed tokens is then exact at the next step)."""
        return (k == 0 and T > B and self._step.get("req_ids") is not None
                and not self.vllm_config.scheduler_config.async_scheduling)

    def _keep_verified(self, B: int, T: int, counts: list[int], computed: list[int], token_ids: torch.Tensor,
                       last: torch.Tensor, next_ids: torch.Tensor, positions: torch.Tensor, slots: torch.Tensor,
                       hidden: torch.Tensor) -> bool:
        """Keep every row the first pass would have consumed, each request's ``counts[i]`` verified tokens, instead
        of running it; which of them hold accepted drafts the host learns at the request's next step
        (:meth:`_settle_kept`). Both front ends call it after :meth:`_may_keep_verified`, once every request of the
        batch is known to be decoding (a prefill's chunk runs the pass).

        The rows are what both runners' first passes build: the target's tokens shifted left by one, each request's
        next token at its last accepted row (``last``), the target's positions, KV slots and hidden states (before
        ``combine_hidden_states``); ``computed``: each request's count of computed tokens, its first row's position.
        Returns whether the pass is skipped (not when the counts miss a row, or a request has no room left)."""
        req_ids = self._step["req_ids"]
        assert self.kept is not None
        if sum(counts) != T or not self.kept.can_keep(req_ids[:B], counts):
            return False
        tokens = torch.roll(token_ids[:T], -1)
        tokens.index_copy_(0, last[:B].to(torch.int64), next_ids[:B].to(tokens.dtype))
        self.kept.keep(req_ids[:B], tokens, positions[:T], slots[:T], hidden[:T], counts=counts,
                       first_positions=computed)
        self._step["first_pass"] = "skipped"
        return True

    def _settle_kept(self, B: int, computed: Any) -> None:
        """Trim rows kept from steps that verified drafts to the drafts accepted, from each request's count of
        computed tokens now (``computed``, the runner's host array of the scheduler's counts: exact with synchronous
        scheduling)."""
        assert self.kept is not None
        req_ids = self._step.get("req_ids")
        if not self.kept.pending or req_ids is None:
            return
        self._step["trimmed"] = self.kept.settle(req_ids[:B], [int(c) for c in computed[:B]])

    def _kept_passes(self) -> Iterator[tuple[list[int], list[int], torch.Tensor]]:
        """Hand back the kept rows of this step's requests, in catch-up passes of whole requests of at most
        ``max_num_tokens`` rows (vLLM's static buffers): per pass, the requests' rows in this step's batch, where
        each request's rows start and end (``ends``, from 0), and the rows' flat index in the kept buffers."""
        req_ids = self._step.get("req_ids")
        taken = self.kept.take(req_ids) if self.kept is not None and req_ids and len(self.kept) else None
        if taken is None:
            return
        self._step["caught_up"] = sum(taken.counts)
        starts = [0, *itertools.accumulate(taken.counts)]  # each request's first row in taken.index
        lo = 0
        while lo < len(taken.counts):
            hi = lo + 1
            while hi < len(taken.counts) and starts[hi + 1] - starts[lo] <= self.max_num_tokens:
                hi += 1
            yield (taken.batch_rows[lo:hi], [c - starts[lo] for c in starts[lo:hi + 1]],
                   taken.index[starts[lo]:starts[hi]])
            lo = hi

    def _catch_up_layout(self, batch_rows: list[int], ends: list[int], positions: torch.Tensor, dtype: torch.dtype
                         ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, int]:
        """What both runners' catch-up passes describe to attention, from a pass of :meth:`_kept_passes` and its
        rows' positions: ``query_start_loc`` on the host and the device, the requests' batch rows on the device,
        each request's sequence length (its last kept position + 1) and the longest query (``dtype``: vLLM's)."""
        qsl_cpu = torch.tensor(ends, dtype=dtype)
        qsl = qsl_cpu.to(self.device, non_blocking=True)
        rows = torch.tensor(batch_rows, dtype=torch.int64).to(self.device, non_blocking=True)
        seq_lens = (positions[qsl[1:].to(torch.int64) - 1] + 1).to(dtype)
        return qsl_cpu, qsl, rows, seq_lens, max(b - a for a, b in itertools.pairwise(ends))

    def _drop_kept(self, req_id: str) -> None:
        """A request finished, or was preempted (its blocks are freed; the prefill it resumes with runs the first
        pass): forget its kept rows."""
        if self.kept is not None:
            self.kept.drop(req_id)

    @property
    def target_rows_width(self) -> int:
        """Width of the target hidden-state rows vLLM's loop feeds the first pass: the hidden size, or the chosen
        target layers concatenated (``n * hidden``) for a drafter that combines them."""
        width = int(self.target_hidden_size)
        if not self.combines_target_layers:
            return width
        n = len(getattr(self.draft_model_config.hf_config, "eagle_aux_hidden_state_layer_ids", None) or []) or 3
        return n * width

    def _check_first_pass_layout(self, vllm_config: Any, drafter: Drafter) -> None:
        """Token-row sources need the first pass in the target's own token layout (row t: the target's row t)."""
        spec = vllm_config.speculative_config
        pcp = int(getattr(vllm_config.parallel_config, "prefill_context_parallel_size", 1) or 1)
        why = None
        if self.condensed_first_pass_option and getattr(spec, "disable_padded_drafter_batch", False):
            why = ("disable_padded_drafter_batch is set: V1's runner then drops each request's rejected tokens "
                   "from the first pass, so its rows are no longer the target's. Leave "
                   "disable_padded_drafter_batch unset (the default)")
        elif pcp > 1:
            why = (f"prefill_context_parallel_size={pcp}: the first pass is split across the context-parallel "
                   f"ranks, so its rows are no longer the target's. Run with prefill_context_parallel_size=1")
        if why:
            names = sorted(b.param for b in token_rows(self.forward_bindings))
            raise PluginContractError(
                f"vllm_spec_plugins: {drafter.culprit()}: attention drafter {drafter.model_class} takes "
                f"token-row source(s) {names}, given in the first pass of vLLM's EAGLE loop row for row with the "
                f"target's tokens, but {why}.", plugin_name=drafter.plugin, dist=drafter.display_dist)

    def _wrap_loaded_model(self) -> None:
        """After vLLM loaded the plugin model (embedding / lm_head sharing are vLLM's): wrap it, check it."""
        self.model = AttentionDrafterAdapter(self.model, self)
        if not self.combines_target_layers and self.hidden_size != self.target_hidden_size:
            raise self._load_error(f"has hidden size {self.hidden_size}; vLLM's EAGLE loop feeds it the target's "
                                   f"hidden states of size {self.target_hidden_size}")

    def _set_token_request(self, query_start_loc: torch.Tensor, B: int, T: int) -> None:
        """``token_request[t]``: the request row of token row ``t`` (on the device, no host sync)."""
        if not self.expanded:
            return
        self.token_request[:T].copy_(token_requests(query_start_loc, self.token_arange, B, T))

    def _trial_attention(self, input_ids: torch.Tensor, positions: torch.Tensor, hidden: torch.Tensor) -> None:
        """One pass of the plugin model on one row of static buffers (no attention metadata, as in vLLM's
        warm-up); a forward taking ``kv_only`` (API 4) is also run told ``kv_only=True``."""
        if self.combines_target_layers:
            combined = self.model.combine_hidden_states(
                torch.zeros((1, self.target_rows_width), dtype=hidden.dtype, device=hidden.device))
            if combined.shape[-1] != self.hidden_size:
                raise self._load_error(f"combine_hidden_states() returned shape {list(combined.shape)}, expected "
                                       f"[num_tokens, {self.hidden_size}]")
        if self.update_bindings:
            with set_forward_context(None, self.vllm_config, num_tokens=1):
                self._checked_update(1, 1, trial=True)
        self.pass_index = 1  # request rows: no expansion
        with set_forward_context(None, self.vllm_config, num_tokens=1):
            out = self.model(input_ids=input_ids, positions=positions, hidden_states=hidden, inputs_embeds=None)
            h = out[0] if isinstance(out, tuple) else out
            logits = self.model.compute_logits(h)
        self.pass_index = 0
        if self.takes_kv_only:  # API 4: the forward told that only its draft KV counts must run too
            with self._discarding(), set_forward_context(None, self.vllm_config, num_tokens=1):
                self.model(input_ids=input_ids, positions=positions, hidden_states=hidden, inputs_embeds=None)
            self.pass_index = 0
            self._step.pop("kv_only", None)
        # (no finite-logits check here: without attention metadata vLLM's attention layers skip their kernel and
        # leave their output uninitialised, so these logits are not meaningful; heads drafters' are)
        if logits is not None and logits.shape[-1] > self.target_vocab_size:
            raise self._load_error(f"returns logits over {logits.shape[-1]} tokens, more than the target's "
                                   f"vocabulary")

    def _check_combined(self, combined: torch.Tensor) -> None:
        if combined.shape[-1] != self.hidden_size:
            d = self.drafter
            raise PluginContractError(
                f"vllm_spec_plugins: {d.culprit()}: {d.model_class}."
                f"combine_hidden_states() returned shape {list(combined.shape)}; expected "
                f"[num_tokens, {self.hidden_size}] (the draft's hidden size)", plugin_name=d.plugin,
                dist=d.display_dist)
