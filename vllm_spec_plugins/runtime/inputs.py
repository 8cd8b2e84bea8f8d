"""Signature matching: which inputs a drafter's forward asks for, and where each comes from.

Pure Python (no torch, no vLLM) so it can be unit-tested and used by the test kit.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..api import ATTENTION_STEP_INPUTS, DEFAULT_INPUTS, MULTIMODAL_SOURCES, STEP_INPUTS, Drafter, ExtraInput, Source
from ..checkpoint import resolve_shape
from ..errors import PluginContractError

#: Dtype each source delivers (``"model"`` = the engine's dtype).
SOURCE_DTYPE: dict[Source, str] = {
    Source.TARGET_HIDDEN_LAST: "model",
    Source.TARGET_HIDDEN_ALL: "model",
    Source.AUX_HIDDEN_LAST: "model",
    Source.AUX_HIDDEN_ALL: "model",
    Source.NEXT_TOKEN_IDS: "int32",
    Source.POSITIONS_LAST: "int64",
    Source.NUM_ACCEPTED: "int32",
    Source.NUM_NEW_TOKENS: "int32",
    Source.SAMPLED_TOKEN_IDS: "int32",
    Source.TOKEN_IDS_ALL: "int32",
    Source.NUM_SCHEDULED_TOKENS: "int32",
    Source.NUM_REJECTED: "int32",
    Source.TARGET_INPUTS_EMBEDS: "model",
    Source.IS_MULTIMODAL: "bool",
    Source.POSITIONS_ALL: "int64",
    Source.NEXT_POSITIONS: "int64",
}


#: What vLLM's EAGLE loop passes to an attention draft model itself, in every pass.
LOOP_INPUTS = ("input_ids", "positions", "hidden_states", "inputs_embeds")


def loop_inputs_of(d: Drafter) -> tuple[str, ...]:
    """The parameters the drafting loop passes itself rather than from a buffer: vLLM's EAGLE loop inputs
    for ``attention`` drafters, with ``kv_only`` (:data:`~vllm_spec_plugins.api.ATTENTION_STEP_INPUTS`) for plugins
    declaring API 4 or later; the step inputs (:data:`~vllm_spec_plugins.api.STEP_INPUTS`, API 3) for ``heads``
    drafters of plugins declaring API 3 or later (``api == 0``: registered outside a host)."""
    if d.kind == "attention":
        return LOOP_INPUTS + (tuple(ATTENTION_STEP_INPUTS) if d.api == 0 or d.api >= 4 else ())
    return tuple(STEP_INPUTS) if d.api == 0 or d.api >= 3 else ()


@dataclass(frozen=True)
class Binding:
    """One parameter of a plugin callable and what fills it.

    ``source is None``: the drafting loop itself passes it (attention drafters'
    ``input_ids``, ``positions``, ``hidden_states``, ``inputs_embeds``; heads drafters' ``num_drafts``).
    """

    param: str
    source: Source | None
    state: str | None = None
    shape: tuple[int, ...] = ()
    dtype: str = "model"

    @property
    def key(self) -> Any:
        """The buffer this binding reads (one per source or state)."""
        return ("state", self.state) if self.source is Source.STATE else self.source


def _where(d: Drafter, fn: Callable[..., Any]) -> str:
    qual = getattr(fn, "__qualname__", getattr(fn, "__name__", repr(fn)))
    return f"{d.culprit()}, {d.model_class.split(':')[0]}.{qual}"


@dataclass(frozen=True)
class TargetInputs:
    """What the target is fed, as far as the API-3 sources need it (from the engine's model config)."""

    multimodal: bool = False
    """The target takes multimodal inputs (vLLM feeds it input embeddings)."""
    embeds_size: int = 0
    """``model_config.get_inputs_embeds_size()`` (0: the hidden size)."""
    mrope_dims: int = 0
    """M-RoPE sections (``model_config.mrope_num_dims``); 0: plain positions."""
    model: str = ""
    """The target's name or path, for messages."""

    @classmethod
    def of(cls, model_config: Any) -> TargetInputs:
        mrope = bool(getattr(model_config, "uses_mrope", False))
        return cls(multimodal=bool(getattr(model_config, "supports_multimodal_inputs", False)),
                   embeds_size=int(model_config.get_inputs_embeds_size()),
                   mrope_dims=int(model_config.mrope_num_dims) if mrope else 0,
                   model=str(getattr(model_config, "model", "")))


def source_row_shape(source: Source, hidden_size: int, num_aux: int, num_spec_tokens: int,
                     target: TargetInputs | None = None) -> tuple[int, ...]:
    """What one row of ``source`` looks like in this engine."""
    if source in (Source.TARGET_HIDDEN_LAST, Source.TARGET_HIDDEN_ALL):
        return (hidden_size,)
    if source is Source.TARGET_INPUTS_EMBEDS:
        return ((target.embeds_size if target is not None and target.embeds_size else hidden_size),)
    if source in (Source.POSITIONS_ALL, Source.NEXT_POSITIONS):
        return (target.mrope_dims,) if target is not None and target.mrope_dims else ()
    if source in (Source.AUX_HIDDEN_LAST, Source.AUX_HIDDEN_ALL):
        return (num_aux * hidden_size,)
    if source is Source.SAMPLED_TOKEN_IDS:
        return (num_spec_tokens + 1,)
    return ()


def bind(d: Drafter, fn: Callable[..., Any], *, hf_config: Any, hidden_size: int, num_aux: int, num_spec_tokens: int,
         extra_names: dict[str, Source] | None = None, state_params: bool = False,
         loop_inputs: tuple[str, ...] = (), target: TargetInputs | None = None) -> list[Binding]:
    """Bind every parameter of ``fn`` to a source.

    Parameters are matched by name: inputs the drafting loop passes itself
    (``loop_inputs``, attention drafters), declared extra inputs, the defaults
    (:data:`~vllm_spec_plugins.api.DEFAULT_INPUTS`), then (with ``state_params``)
    state names. A parameter with a default value that nothing
    provides is left out; one without is a load-time error. ``hf_config=None`` matches
    names only (shapes are neither resolved nor compared). ``target``: what the target is fed (the API-3
    sources' shapes; ``Source.TARGET_INPUTS_EMBEDS`` is refused on a text-only target); ``None``: not checked.

    Raises:
        PluginContractError: naming plugin, class and parameter, or expected vs found shape/dtype.
    """
    extras: dict[str, ExtraInput] = {e.name: e for e in d.extra_inputs}
    states = {s.name: s for s in d.state}
    # hf_config None: names only (``vllm-spec-plugins doctor``), no shapes resolved or compared
    shape_of = resolve_shape if hf_config is not None else (lambda *_: ())
    defaults = {k: v for k, v in DEFAULT_INPUTS.items() if k not in loop_inputs}
    defaults.update(extra_names or {})
    out: list[Binding] = []
    for p in inspect.signature(fn).parameters.values():
        if p.name == "self" or p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            continue
        if p.name in loop_inputs:
            step_input = (f"API 3: {STEP_INPUTS[p.name]}" if p.name in STEP_INPUTS else
                          f"API 4: {ATTENTION_STEP_INPUTS[p.name]}" if p.name in ATTENTION_STEP_INPUTS else None)
            if p.name in extras and step_input:
                raise PluginContractError(
                    f"vllm_spec_plugins: {_where(d, fn)}: extra input {p.name!r} has the name of a step input the "
                    f"shim passes itself ({step_input}); give the extra input another name",
                    plugin_name=d.plugin, dist=d.display_dist)
            out.append(Binding(p.name, None))
        elif p.name in extras:
            e = extras[p.name]
            if e.source is Source.STATE:
                assert e.state is not None  # ExtraInput.__post_init__: state= is given exactly with Source.STATE
                s = states[e.state]  # validated in Drafter.__post_init__
                out.append(Binding(p.name, Source.STATE, s.name, shape_of(d, hf_config, s.shape, f"state {s.name!r}"),
                                   s.dtype))
                continue
            if e.source is Source.TARGET_INPUTS_EMBEDS and target is not None and not target.multimodal:
                raise PluginContractError(
                    f"vllm_spec_plugins: {_where(d, fn)}: extra input {e.name!r} reads {e.source.value} (the "
                    f"target's merged multimodal input embeddings), but the target {target.model!r} is text-only: "
                    f"vLLM feeds it token ids, not embeddings. Serve this draft with a multimodal target, or use "
                    f"a draft made for a text target", plugin_name=d.plugin, dist=d.display_dist)
            found = source_row_shape(e.source, hidden_size, num_aux, num_spec_tokens, target)
            # shape None: not checked; () in an API-1 plugin meant the same (API 2: one scalar per row)
            if e.shape is not None and hf_config is not None and not (e.shape == () and d.api == 1):
                declared = shape_of(d, hf_config, e.shape, f"extra input {e.name!r}")
                if declared != found:
                    raise PluginContractError(
                        f"vllm_spec_plugins: {_where(d, fn)}: extra input {e.name!r} from {e.source.value} has "
                        f"shape per row {list(found)} in this engine, but the plugin declares {list(declared)}",
                        plugin_name=d.plugin, dist=d.display_dist)
            want = SOURCE_DTYPE[e.source]
            floats = ("float16", "bfloat16", "float32", "float64", "half", "float", "double")
            if e.dtype != "model" and ((want == "model" and e.dtype not in floats) or
                                       (want != "model" and e.dtype != want)):
                raise PluginContractError(
                    f"vllm_spec_plugins: {_where(d, fn)}: extra input {e.name!r} from {e.source.value} is {want}, "
                    f"but the plugin declares dtype {e.dtype!r}", plugin_name=d.plugin, dist=d.display_dist)
            out.append(Binding(p.name, e.source, None, found, SOURCE_DTYPE[e.source]))
        elif p.name in defaults:
            src = defaults[p.name]
            out.append(Binding(p.name, src, None, source_row_shape(src, hidden_size, num_aux, num_spec_tokens,
                                                                   target), SOURCE_DTYPE[src]))
        elif state_params and p.name in states:
            s = states[p.name]
            out.append(Binding(p.name, Source.STATE, s.name, shape_of(d, hf_config, s.shape, f"state {s.name!r}"),
                               s.dtype))
        elif p.default is p.empty:
            known = sorted(set(loop_inputs) | set(extras) | set(defaults) | (set(states) if state_params else set()))
            raise PluginContractError(
                f"vllm_spec_plugins: {_where(d, fn)} takes parameter {p.name!r}, which nothing provides. "
                f"Declare it as an ExtraInput in the plugin's Drafter(extra_inputs=...), or give it a default. "
                f"Known names: {', '.join(known)}", plugin_name=d.plugin, dist=d.display_dist)
    return out


def token_rows(bindings: list[Binding]) -> list[Binding]:
    return [b for b in bindings if b.source is not None and b.source.rows == "token"]


def multimodal_rows(bindings: list[Binding]) -> list[Binding]:
    """Bindings reading what the target was fed (its merged input embeddings, their mask)."""
    return [b for b in bindings if b.source in MULTIMODAL_SOURCES]


def check_pipeline_stages(d: Drafter, bindings: list[Binding], pipeline_parallel_size: int) -> None:
    """Refuse a drafter reading what the target was fed under pipeline parallelism: the first stage computes
    the input embeddings and the mask, drafters run on the last stage."""
    names = sorted({b.source.value for b in multimodal_rows(bindings) if b.source is not None})
    if names and pipeline_parallel_size > 1:
        raise PluginContractError(
            f"vllm_spec_plugins: {d.culprit()} reads {', '.join(names)}, which the first pipeline stage "
            f"computes, but with pipeline_parallel_size={pipeline_parallel_size} drafters run on the last stage, "
            f"which never sees them. Serve this draft with pipeline_parallel_size=1 (tensor parallelism works), or "
            f"use a draft that does not read the target's input embeddings", plugin_name=d.plugin,
            dist=d.display_dist)


def needs_aux(bindings: list[Binding]) -> bool:
    return any(b.source in (Source.AUX_HIDDEN_LAST, Source.AUX_HIDDEN_ALL) for b in bindings)
