"""The plugin drafter vLLM's model runner calls (worker processes only; imports vLLM)."""

from __future__ import annotations

import contextlib
import importlib
import logging
import os
from typing import Any

import torch

from vllm.forward_context import set_forward_context
from vllm.utils.torch_utils import is_pin_memory_available
from vllm.v1.spec_decode.draft_model import DraftModelProposer
from vllm.v1.spec_decode.eagle import EagleProposer
from vllm.v1.spec_decode.llm_base_proposer import SpecDecodeBaseProposer

from .._names import ENV_TRACE_DIR
from ..api import Drafter, Source
from ..errors import PluginContractError, PluginLoadError
from ..manager import get_host
from ..routes import ARCH_ATTR, ATTENTION_METHOD, PLUGIN_ATTR
from . import trace
from .guard import DraftGuard
from .inputs import Binding, bind, needs_aux, resolve_shape, token_rows
from .state import TOKEN_SOURCES, StatePool, fill_token_source, resolve_inits, sees_tokens

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


def make_proposer(vllm_config: Any, device: torch.device, runner: Any = None):
    d = drafter_for(vllm_config)
    if d.kind == "heads":
        return HeadsProposer(vllm_config, device, runner, drafter=d)
    return AttentionProposer(vllm_config, device, runner, drafter=d)


def _import_class(d: Drafter) -> type:
    mod, _, name = d.model_class.partition(":")
    try:
        module = importlib.import_module(mod)
    except Exception as e:
        raise PluginLoadError(
            f"vllm_spec_plugins: plugin {d.name!r} ({d.display_dist}) names model class {d.model_class!r}, "
            f"but its module {mod!r} failed to import: {type(e).__name__}: {e}. Reinstall or upgrade "
            f"{d.display_dist}, or install what it needs.", plugin_name=d.name, dist=d.display_dist) from e
    cls = getattr(module, name, None)
    if cls is None:
        raise PluginLoadError(
            f"vllm_spec_plugins: plugin {d.name!r} ({d.display_dist}) names model class {d.model_class!r}, but "
            f"module {mod!r} has no attribute {name!r}. Fix the Drafter(model_class=...) of the plugin.",
            plugin_name=d.name, dist=d.display_dist)
    return cls


def _dtype(name: str, model_dtype: torch.dtype) -> torch.dtype:
    if name == "model":
        return model_dtype
    dt = getattr(torch, name, None)
    if not isinstance(dt, torch.dtype):
        raise PluginContractError(f"vllm_spec_plugins: unknown dtype {name!r}")
    return dt



class PluginProposerMixin:
    """What both plugin proposers share: bindings, static buffers, carried state, per-step hand-over.

    Placed before the vLLM proposer class in the MRO, so its
    ``prepare_next_token_ids_padded`` wraps vLLM's.
    """

    needs_aux_hidden_states = False

    def _setup_plugin(self, vllm_config: Any, device: torch.device, runner: Any, drafter: Drafter, *,
                      request_rows: int, loop_inputs: tuple[str, ...] = ()) -> None:
        self.runner = runner
        self.drafter = drafter
        self.model_cls = _import_class(drafter)
        hf = self.draft_model_config.hf_config
        aux_ids = getattr(hf, "eagle_aux_hidden_state_layer_ids", None) or []
        common = dict(hf_config=hf, hidden_size=vllm_config.model_config.get_hidden_size(), num_aux=len(aux_ids),
                      num_spec_tokens=self.num_speculative_tokens)
        self.forward_bindings = bind(drafter, self.model_cls.forward, state_params=True, loop_inputs=loop_inputs,
                                     **common)
        self.update_bindings: list[Binding] = []
        if drafter.state:
            update = getattr(self.model_cls, drafter.update_state, None)
            if update is None:
                raise PluginContractError(
                    f"vllm_spec_plugins: plugin {drafter.name!r} ({drafter.display_dist}) declares carried state "
                    f"{[s.name for s in drafter.state]} but {drafter.model_class} has no state-carry hook method "
                    f"{drafter.update_state!r}", plugin_name=drafter.name, dist=drafter.display_dist)
            self.update_bindings = bind(drafter, update, state_params=True, **common)
        self.needs_aux_hidden_states = needs_aux(self.forward_bindings + self.update_bindings)
        if self.needs_aux_hidden_states and not aux_ids:
            raise PluginContractError(
                f"vllm_spec_plugins: plugin {drafter.name!r} ({drafter.display_dist}) asks for aux hidden states "
                f"but declares no aux_layer_ids config key", plugin_name=drafter.name, dist=drafter.display_dist)

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
            specs = []
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
            self.slot_index_cpu = torch.zeros(self.max_reqs, dtype=torch.int64, pin_memory=is_pin_memory_available())
        self._step: dict[str, Any] = {}
        self.target_hidden_size = vllm_config.model_config.get_hidden_size()
        self.target_vocab_size = vllm_config.model_config.get_vocab_size()
        self.guard = DraftGuard(drafter, model_class=drafter.model_class, checkpoint=str(self.draft_model_config.model),
                                vocab_size=self.target_vocab_size, device=device,
                                async_scheduling=bool(getattr(vllm_config.scheduler_config, "async_scheduling", False)))
        self._trace_dir = os.environ.get(ENV_TRACE_DIR)
        self._trace_n = 0

    # -- hand-over from the runner patches -------------------------------------

    def stash_step(self, runner: Any, *, hidden_states: torch.Tensor,
                   aux_hidden_states: list[torch.Tensor] | None) -> None:
        self._step = {"hidden_states": hidden_states, "aux_hidden_states": aux_hidden_states}

    def prepare_next_token_ids_padded(self, sampled_token_ids, requests, gpu_input_batch, discard_request_mask):
        next_token_ids, valid = super().prepare_next_token_ids_padded(
            sampled_token_ids, requests, gpu_input_batch, discard_request_mask)
        self._step["sampled_token_ids"] = sampled_token_ids
        self._step["valid_count"] = valid
        self._step["req_ids"] = list(gpu_input_batch.req_ids[: gpu_input_batch.num_reqs])
        return next_token_ids, valid

    def on_request_removed(self, req_id: str) -> None:
        if self.pool is not None:
            self.pool.release(req_id)

    def on_request_resumed(self, req_id: str) -> None:
        if self.pool is not None and self._reset_on_preempt:
            self.pool.reset(req_id, self._reset_on_preempt)

    # -- inputs ----------------------------------------------------------------

    def _kwargs(self, bindings: list[Binding], rows: int, tokens: int) -> dict[str, torch.Tensor]:
        return {b.param: self.buffers[b.key][: tokens if b.source.rows == "token" else rows]
                for b in bindings if b.source is not None}

    def _prepare_step(self, B: int, T: int, next_token_ids: torch.Tensor, target_positions: torch.Tensor,
                      idx: torch.Tensor) -> None:
        """Fill every requested buffer for this step, then carry the state (before the forward)."""
        step = self._step
        buf = self.buffers
        hidden = step.get("hidden_states")
        valid = step.get("valid_count")
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
            elif key == Source.POSITIONS_LAST:
                pos = target_positions[0] if target_positions.dim() == 2 else target_positions
                buf[key][:B].copy_(pos.index_select(0, idx) + 1)
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

    def _carry_state(self, B: int, T: int) -> None:
        pool = self.pool
        assert pool is not None
        slots = pool.slots_for(self._step["req_ids"][:B])
        self.slot_index_cpu[:B] = torch.tensor(slots, dtype=torch.int64)
        idx = self.slot_index[:B]
        idx.copy_(self.slot_index_cpu[:B], non_blocking=True)
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

    def _checked_update(self, B: int, T: int) -> dict[str, torch.Tensor]:
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
                f"vllm_spec_plugins: plugin {d.name!r} ({d.display_dist}): {d.model_class}.{d.update_state}() must "
                f"return a dict with keys {sorted(pool.tensors)}; got {got}", plugin_name=d.name, dist=d.display_dist)
        if self._trace_dir:
            self._trace_hook["hook_outputs"] = trace.copy_tensors(new)
        for name, value in new.items():
            cur = self.buffers[("state", name)][:B]
            if not isinstance(value, torch.Tensor) or tuple(value.shape) != tuple(cur.shape):
                got = list(value.shape) if isinstance(value, torch.Tensor) else type(value).__name__
                raise PluginContractError(
                    f"vllm_spec_plugins: plugin {d.name!r} ({d.display_dist}): state {name!r} returned by "
                    f"{d.update_state}() has shape {got}, expected {list(cur.shape)}",
                    plugin_name=d.name, dist=d.display_dist)
        return new

    # -- start-up check ----------------------------------------------------------

    def _load_error(self, what: str, exc: BaseException | None = None) -> PluginLoadError:
        d = self.drafter
        hf = self.draft_model_config.hf_config
        cause = f": {type(exc).__name__}: {exc}" if exc is not None else ""
        return PluginLoadError(
            f"vllm_spec_plugins: draft '{self.draft_model_config.model}' (plugin {d.name!r}, {d.display_dist}, "
            f"model class {d.model_class}) {what}{cause}. Expected a draft for this target: hidden_size "
            f"{self.target_hidden_size} and vocab_size {self.target_vocab_size} (the target's); found in the "
            f"draft config: hidden_size {getattr(hf, 'hidden_size', None)}, vocab_size "
            f"{getattr(hf, 'vocab_size', None)}. Use a draft trained for this target, or fix its config.json.",
            plugin_name=d.name, dist=d.display_dist)

    def _trial(self, run: Any) -> None:
        """Run ``run()`` once at load (one trial forward on the static buffers); refuse the draft if it fails."""
        try:
            with torch.inference_mode():
                run()
        except PluginLoadError:
            raise
        except Exception as e:  # noqa: BLE001
            raise self._load_error("failed its trial forward at start-up", e) from e

    @staticmethod
    def _sample_index(B: int, token_indices_to_sample: torch.Tensor | None, common_attn_metadata: Any):
        if token_indices_to_sample is None:  # no drafts in this batch: the last scheduled token of each request
            return (common_attn_metadata.query_start_loc[1:B + 1] - 1).to(torch.int64)
        return token_indices_to_sample[:B].to(torch.int64)

    def _trace(self, B: int, T: int, drafts: torch.Tensor, extra: dict | None = None) -> None:
        trace.save_record(self, B, T, drafts, extra)  # schema: runtime/trace.py, docs/trace.md
        self._trace_n += 1


class HeadsProposer(PluginProposerMixin, DraftModelProposer):
    """Runs a ``heads`` plugin drafter: one forward per step, one row per request.

    It subclasses :class:`DraftModelProposer` so every ``isinstance`` check and
    the ``draft_model`` branch of the runner (padded batch, async-safe GPU
    token ids) keep working. Inputs come from static buffers allocated here,
    before any warm-up or graph capture; each step fills slices of them.
    """

    def __init__(self, vllm_config: Any, device: torch.device, runner: Any = None, *, drafter: Drafter) -> None:
        # Skip DraftModelProposer.__init__: its vocab/tokenizer checks are for independent draft LMs.
        SpecDecodeBaseProposer.__init__(self, vllm_config=vllm_config, device=device,
                                        pass_hidden_states_to_model=False, runner=runner)
        self._raise_if_draft_tp_mismatch()
        self.use_heterogeneous_vocab = False
        self.vocab_mapping = None
        self._setup_plugin(vllm_config, device, runner, drafter,
                           request_rows=vllm_config.scheduler_config.max_num_seqs)

    def load_model(self, target_model: torch.nn.Module) -> None:
        self.model = self._get_model()
        bind_target = getattr(self.model, "bind_target", None)
        if bind_target is not None:
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

    def _trial_heads(self) -> None:
        """State-carry hook and forward on one row of the static buffers; the drafts must be target ids."""
        k = self.num_speculative_tokens
        self._dummy_counts(1, 1)
        with set_forward_context(None, self.vllm_config, num_tokens=1):
            if self.update_bindings:
                self._checked_update(1, 1)
            out = self.model(**self._kwargs(self.forward_bindings, 1, 1))
        if isinstance(out, torch.Tensor) and out.is_floating_point() and out.dim() == 3 \
                and out.shape[-1] > self.target_vocab_size:
            raise self._load_error(f"returns logits over {out.shape[-1]} tokens, more than the target's vocabulary")
        drafts = self._to_drafts(out, 1, k)
        top = int(drafts.max()) if drafts.numel() else 0
        low = int(drafts.min()) if drafts.numel() else 0
        if low < 0 or top >= self.target_vocab_size:
            raise self._load_error(f"proposed draft token id {top if top >= self.target_vocab_size else low} "
                                   f"in its trial forward, outside the target's vocabulary [0, "
                                   f"{self.target_vocab_size})")

    def initialize_attn_backend(self, kv_cache_config: Any, kernel_block_sizes: Any = None) -> None:
        """Heads drafters have no attention layers and no draft KV cache."""
        self.draft_attn_groups = []

    @torch.inference_mode()
    def dummy_run(self, num_tokens: int, use_cudagraphs: bool = True, is_graph_capturing: bool = False,
                  slot_mappings: Any = None) -> None:
        rows = max(1, min(num_tokens, self.max_reqs))
        tokens = max(1, min(num_tokens, self.max_num_tokens))
        self._dummy_counts(rows, tokens)
        with set_forward_context(None, self.vllm_config, num_tokens=rows):
            if self.update_bindings:
                getattr(self.model, self.drafter.update_state)(**self._kwargs(self.update_bindings, rows, tokens))
            self.model(**self._kwargs(self.forward_bindings, rows, tokens))

    @torch.inference_mode()
    def propose(self, num_speculative_tokens, target_token_ids, target_positions, target_hidden_states,
                next_token_ids, token_indices_to_sample, common_attn_metadata, sampling_metadata,
                mm_embed_inputs=None, num_rejected_tokens_gpu=None, slot_mappings=None) -> torch.Tensor:
        B = next_token_ids.shape[0]
        T = common_attn_metadata.num_actual_tokens
        guard = self.guard
        guard.poll()
        if guard.disabled:
            return guard.idle(B, num_speculative_tokens, next_token_ids)
        idx = self._sample_index(B, token_indices_to_sample, common_attn_metadata)
        self._step.update(target_token_ids=target_token_ids, num_rejected=num_rejected_tokens_gpu,
                          query_start_loc=common_attn_metadata.query_start_loc)
        self._prepare_step(B, T, next_token_ids, target_positions, idx)  # carries the state, whatever k is
        if guard.disabled:  # the state-carry hook failed
            return guard.idle(B, num_speculative_tokens, next_token_ids)
        if num_speculative_tokens == 0:  # the drafting policy (or vLLM's schedule) chose a plain decode step
            drafts = torch.empty((B, 0), dtype=torch.int64, device=next_token_ids.device)
        else:
            ok, drafts = guard.run(f"{self.drafter.model_class}.forward()", self._forward_drafts, B, T,
                                   num_speculative_tokens)
            if not ok:
                return guard.idle(B, num_speculative_tokens, next_token_ids)
            drafts = guard.sanitize(drafts)
        if self._trace_dir:
            self._trace(B, T, drafts)
        return drafts

    def _forward_drafts(self, B: int, T: int, k: int) -> torch.Tensor:
        with set_forward_context(None, self.vllm_config, num_tokens=B):
            out = self.model(**self._kwargs(self.forward_bindings, B, T))
        return self._to_drafts(out, B, k)

    def _to_drafts(self, out: Any, B: int, k: int) -> torch.Tensor:
        d = self.drafter
        if not isinstance(out, torch.Tensor):
            raise PluginContractError(
                f"vllm_spec_plugins: plugin {d.name!r} ({d.display_dist}): {d.model_class}.forward() returned "
                f"{type(out).__name__}; expected a tensor of draft token ids [num_reqs, k] or logits "
                f"[num_reqs, k, vocab]", plugin_name=d.name, dist=d.display_dist)
        if out.is_floating_point():
            if out.dim() != 3:
                raise PluginContractError(
                    f"vllm_spec_plugins: plugin {d.name!r} ({d.display_dist}): forward() returned a float tensor of "
                    f"shape {list(out.shape)}; logits must be [num_reqs={B}, k>={k}, vocab]",
                    plugin_name=d.name, dist=d.display_dist)
            out = out.argmax(dim=-1)
        if out.dim() != 2 or out.shape[0] != B or out.shape[1] < k:
            raise PluginContractError(
                f"vllm_spec_plugins: plugin {d.name!r} ({d.display_dist}): forward() returned shape "
                f"{list(out.shape)}; expected draft token ids [num_reqs={B}, k>={k}]",
                plugin_name=d.name, dist=d.display_dist)
        return out[:, :k].to(torch.int64)


#: What vLLM's EAGLE loop passes to the draft model itself, in every pass.
LOOP_INPUTS = ("input_ids", "positions", "hidden_states", "inputs_embeds")


class AttentionDrafterAdapter(torch.nn.Module):
    """What vLLM's EAGLE loop calls as ``self.model``: calls the plugin model with only what it asks for.

    The loop passes ``input_ids``, ``positions``, ``hidden_states`` and ``inputs_embeds``;
    the plugin's forward receives those of them it names, plus its declared
    request-row extra inputs and state. In the first pass (one row per scheduled
    token) those are expanded to the tokens of each request; in later passes
    (one row per request) they are passed as they are. Everything else (``compute_logits``,
    ``embed_input_ids``, ``lm_head``, ``model``...) is the plugin model's own.
    """

    def __init__(self, inner: torch.nn.Module, proposer: AttentionProposer) -> None:
        super().__init__()
        self.inner = inner
        object.__setattr__(self, "_proposer", proposer)  # not a submodule

    def __getattr__(self, name: str) -> Any:
        try:
            return super().__getattr__(name)
        except AttributeError:
            return getattr(self._modules["inner"], name)

    def forward(self, input_ids=None, positions=None, hidden_states=None, inputs_embeds=None):
        p = self._proposer
        loop = {"input_ids": input_ids, "positions": positions, "hidden_states": hidden_states,
                "inputs_embeds": inputs_embeds}
        rows = next(t for t in (input_ids, inputs_embeds, hidden_states) if t is not None).shape[0]
        kwargs = {}
        for b in p.forward_bindings:
            if b.source is None:
                kwargs[b.param] = loop[b.param]
            elif p.pass_index == 0:  # rows are tokens: give each token its request's row
                exp = p.expanded[b.key][:rows]
                torch.index_select(p.buffers[b.key], 0, p.token_request[:rows], out=exp)
                kwargs[b.param] = exp
            else:
                kwargs[b.param] = p.buffers[b.key][:rows]
        p.pass_index += 1
        out = self.inner(**kwargs)
        if isinstance(out, torch.Tensor):
            return out, out
        return out


class AttentionProposer(PluginProposerMixin, EagleProposer):
    """Runs an ``attention`` plugin drafter inside vLLM's multi-step EAGLE loop.

    Draft KV cache, attention metadata, positions, slot mappings and CUDA-graph
    dispatch stay vLLM's (:class:`EagleProposer`); the plugin model is wrapped in
    :class:`AttentionDrafterAdapter`.

    A drafter that consumes chosen target layers (``aux_layer_ids``) is served through
    vLLM's ``eagle3`` method: the runner turns the target's aux hidden-state outputs
    on and passes their concatenation ``[num_tokens, n_layers * H_target]`` as
    ``target_hidden_states``. :meth:`propose` reduces it with the model's
    ``combine_hidden_states`` to ``[num_tokens, H]`` before the loop, as vLLM does for
    its own EAGLE-3 classes.
    """

    def __init__(self, vllm_config: Any, device: torch.device, runner: Any = None, *, drafter: Drafter) -> None:
        EagleProposer.__init__(self, vllm_config, device, runner)
        rows = self.max_num_tokens  # later passes may be padded beyond max_num_seqs
        self._setup_plugin(vllm_config, device, runner, drafter, request_rows=rows, loop_inputs=LOOP_INPUTS)
        self.combines_target_layers = bool(drafter.aux_layer_ids)
        if self.combines_target_layers and not callable(getattr(self.model_cls, "combine_hidden_states", None)):
            raise PluginContractError(
                f"vllm_spec_plugins: plugin {drafter.name!r} ({drafter.display_dist}): attention drafter "
                f"{drafter.model_class} declares aux_layer_ids={drafter.aux_layer_ids!r}, so vLLM's loop feeds it "
                f"the chosen target layers concatenated, but the class has no combine_hidden_states(hidden_states) "
                f"method reducing [num_tokens, n_layers * hidden] to [num_tokens, hidden]",
                plugin_name=drafter.name, dist=drafter.display_dist)
        bad = token_rows(self.forward_bindings)
        if bad:
            raise PluginContractError(
                f"vllm_spec_plugins: plugin {drafter.name!r} ({drafter.display_dist}): attention drafters get "
                f"token rows from vLLM's loop (hidden_states); extra input(s) {[b.param for b in bad]} use "
                f"token-row sources", plugin_name=drafter.name, dist=drafter.display_dist)
        self.expanded = {b.key: torch.zeros_like(self.buffers[b.key]) for b in self.forward_bindings
                         if b.source is not None}
        self.token_request = torch.zeros(self.max_num_tokens, dtype=torch.int64, device=device)
        self.pass_index = 0

    def load_model(self, target_model: torch.nn.Module) -> None:
        super().load_model(target_model)  # vLLM's: draft attention layers, embedding / lm_head sharing
        self.model = AttentionDrafterAdapter(self.model, self)
        if not self.combines_target_layers and self.hidden_size != self.target_hidden_size:
            raise self._load_error(f"has hidden size {self.hidden_size}; vLLM's EAGLE loop feeds it the target's "
                                   f"hidden states of size {self.target_hidden_size}")
        self._trial(self._trial_attention)

    def _trial_attention(self) -> None:
        """One pass of the plugin model on the static buffers (no attention metadata, as in vLLM's warm-up)."""
        if self.combines_target_layers:
            n = len(getattr(self.draft_model_config.hf_config, "eagle_aux_hidden_state_layer_ids", None) or []) or 3
            combined = self.model.combine_hidden_states(
                torch.zeros((1, n * self.target_hidden_size), dtype=self.dtype, device=self.device))
            if combined.shape[-1] != self.hidden_size:
                raise self._load_error(f"combine_hidden_states() returned shape {list(combined.shape)}, expected "
                                       f"[num_tokens, {self.hidden_size}]")
        if self.update_bindings:
            with set_forward_context(None, self.vllm_config, num_tokens=1):
                self._checked_update(1, 1)
        self.pass_index = 1  # request rows: no expansion
        with set_forward_context(None, self.vllm_config, num_tokens=1):
            out = self.model(input_ids=self.input_ids[:1], positions=self._get_positions(1),
                             hidden_states=self.hidden_states[:1], inputs_embeds=None)
            h = out[0] if isinstance(out, tuple) else out
            logits = self.model.compute_logits(h)
        self.pass_index = 0
        if logits is not None and logits.shape[-1] > self.target_vocab_size:
            raise self._load_error(f"returns logits over {logits.shape[-1]} tokens, more than the target's "
                                   f"vocabulary")

    @torch.inference_mode()
    def propose(self, num_speculative_tokens, target_token_ids, target_positions, target_hidden_states,
                next_token_ids, token_indices_to_sample, common_attn_metadata, sampling_metadata,
                mm_embed_inputs=None, num_rejected_tokens_gpu=None, slot_mappings=None) -> torch.Tensor:
        B = next_token_ids.shape[0]
        T = common_attn_metadata.num_actual_tokens
        guard = self.guard
        guard.poll()
        if guard.disabled:
            return guard.idle(B, num_speculative_tokens, next_token_ids)
        ok, drafts = guard.run(f"{self.drafter.model_class} in vLLM's EAGLE loop", self._propose_guarded,
                               B, T, num_speculative_tokens, target_token_ids, target_positions, target_hidden_states,
                               next_token_ids, token_indices_to_sample, common_attn_metadata, sampling_metadata,
                               mm_embed_inputs, num_rejected_tokens_gpu, slot_mappings)
        if not ok or guard.disabled:
            return guard.idle(B, num_speculative_tokens, next_token_ids)
        return guard.sanitize(drafts)

    def _propose_guarded(self, B, T, num_speculative_tokens, target_token_ids, target_positions,
                         target_hidden_states, next_token_ids, token_indices_to_sample, common_attn_metadata,
                         sampling_metadata, mm_embed_inputs, num_rejected_tokens_gpu, slot_mappings) -> torch.Tensor:
        if self.buffers:
            idx = self._sample_index(B, token_indices_to_sample, common_attn_metadata)
            self._step.update(target_token_ids=target_token_ids, num_rejected=num_rejected_tokens_gpu,
                              query_start_loc=common_attn_metadata.query_start_loc)
            self._prepare_step(B, T, next_token_ids, target_positions, idx)
            if self.guard.disabled:  # the state-carry hook failed
                return self.guard.idle(B, num_speculative_tokens, next_token_ids)
            if self.expanded:
                qsl = common_attn_metadata.query_start_loc[1:B + 1]
                tokens = self.arange[:T].to(qsl.dtype)
                self.token_request[:T].copy_(torch.searchsorted(qsl, tokens, right=True).clamp_(max=B - 1))
        self.pass_index = 0
        trace_first = None
        if self._trace_dir:
            trace_first = {"target_token_ids": target_token_ids[:T].cpu().clone(),
                           "target_positions": target_positions[..., :T].cpu().clone(),
                           "target_hidden_states": target_hidden_states[:T].cpu().clone(),
                           "next_token_ids": next_token_ids[:B].cpu().clone(),
                           "query_start_loc": common_attn_metadata.query_start_loc[:B + 1].cpu().clone(),
                           "token_indices_to_sample": None if token_indices_to_sample is None
                           else token_indices_to_sample[:B].cpu().clone()}
        if self.combines_target_layers:
            # What vLLM's propose does for method eagle3, but for any model class (see _plain_loop).
            target_hidden_states = self.model.combine_hidden_states(target_hidden_states)
            if target_hidden_states.shape[-1] != self.hidden_size:
                d = self.drafter
                raise PluginContractError(
                    f"vllm_spec_plugins: plugin {d.name!r} ({d.display_dist}): {d.model_class}."
                    f"combine_hidden_states() returned shape {list(target_hidden_states.shape)}; expected "
                    f"[num_tokens, {self.hidden_size}] (the draft's hidden size)", plugin_name=d.name,
                    dist=d.display_dist)
            if trace_first is not None:
                trace_first["combined_hidden_states"] = target_hidden_states[:T].cpu().clone()
        with self._plain_loop():
            drafts = super().propose(num_speculative_tokens, target_token_ids, target_positions,
                                     target_hidden_states, next_token_ids, token_indices_to_sample,
                                     common_attn_metadata, sampling_metadata, mm_embed_inputs,
                                     num_rejected_tokens_gpu, slot_mappings)
        if self._trace_dir:
            self._trace(B, T, drafts, trace_first)
        return drafts

    @contextlib.contextmanager
    def _plain_loop(self):
        """Run vLLM's loop as method ``eagle`` when the target layers were combined here already.

        For method ``eagle3`` vLLM's ``propose`` asserts that the model is one of its own
        EAGLE-3 classes before calling ``combine_hidden_states``; the plugin model is not.
        Having combined them in :meth:`propose`, the loop that follows is exactly the
        ``eagle`` one (``propose`` reads ``self.method`` only for that step), so the
        attribute is switched for the duration of the call and restored afterwards. The
        runner and the config keep ``eagle3`` (aux outputs on, draft KV cache).
        """
        if not self.combines_target_layers or self.method == ATTENTION_METHOD:
            yield
            return
        method = self.method
        self.method = ATTENTION_METHOD
        try:
            yield
        finally:
            self.method = method
