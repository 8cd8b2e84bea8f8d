"""The public data types of the plugin API.

A plugin describes each draft architecture it contributes with a :class:`Drafter`,
the inputs its forward needs beyond the defaults with :class:`ExtraInput`, and its
per-request carried state with :class:`StateSpec`. All of them are plain frozen
dataclasses with no torch or vLLM import, so ``vllm-spec-plugins list`` and the
unit tests stay fast.
"""

from __future__ import annotations

import enum
import keyword
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

DrafterKind = Literal["heads", "attention"]
PreemptPolicy = Literal["keep", "reset"]
Dim = int | str
"""One dimension of a shape: an int, or the name of a draft-config attribute."""


class Source(str, enum.Enum):
    """Where the shim takes an input from, at each drafting step.

    ``rows`` is what one row of the input is: ``request`` (one row per request in
    the batch, ``[num_reqs, ...]``) or ``token`` (one row per scheduled token of the
    verification step, ``[num_tokens, ...]``).
    """

    TARGET_HIDDEN_LAST = "target_hidden_last"
    """Target final (normed) hidden state at the last accepted position. ``[num_reqs, hidden_size]``"""
    TARGET_HIDDEN_ALL = "target_hidden_all"
    """Target final hidden states of all scheduled tokens. ``[num_tokens, hidden_size]``"""
    AUX_HIDDEN_LAST = "aux_hidden_last"
    """Chosen target layers (residual stream entering each layer id, concatenated) at the
    last accepted position. ``[num_reqs, num_layers * hidden_size]``"""
    AUX_HIDDEN_ALL = "aux_hidden_all"
    """Chosen target layers for all scheduled tokens. ``[num_tokens, num_layers * hidden_size]``"""
    NEXT_TOKEN_IDS = "next_token_ids"
    """The last token each request produced in this step (the first token to draft after). ``[num_reqs]`` int32"""
    POSITIONS_LAST = "positions_last"
    """Position of that next token. ``[num_reqs]`` int64. On an M-RoPE target: the rotary position the next
    text token takes (one past the largest section of the last accepted token's), on both runners."""
    NUM_ACCEPTED = "num_accepted"
    """Draft tokens accepted in this step (0 if none, or no token was produced). ``[num_reqs]`` int32"""
    NUM_NEW_TOKENS = "num_new_tokens"
    """Tokens appended to the request in this step: accepted drafts + 1, or 0 for a row that
    produced no token (partial prefill). ``[num_reqs]`` int32"""
    SAMPLED_TOKEN_IDS = "sampled_token_ids"
    """Tokens produced in this step, left-aligned, ``-1`` where rejected. ``[num_reqs, num_spec_tokens + 1]`` int32"""
    STATE = "state"
    """A carried per-request state (see :class:`StateSpec`); name it with ``state=``."""
    TOKEN_IDS_ALL = "token_ids_all"
    """API 2. Token ids of all scheduled tokens of the step, in batch order: a prefill row's prompt
    chunk; a decode row's last token followed by the drafts being verified. ``[num_tokens]`` int32"""
    NUM_SCHEDULED_TOKENS = "num_scheduled_tokens"
    """API 2. How many of those token rows belong to each request (consecutive, in batch order).
    ``[num_reqs]`` int32"""
    NUM_REJECTED = "num_rejected"
    """API 2. How many of a request's scheduled tokens (trailing drafts) were rejected: its first
    ``num_scheduled_tokens - num_rejected`` tokens stay in its sequence. ``[num_reqs]`` int32"""

    TARGET_INPUTS_EMBEDS = "target_inputs_embeds"
    """API 3. The target's input embeddings of all scheduled tokens, as the target consumed them: its text
    embeddings with the multimodal (image...) embeddings merged in. ``[num_tokens, inputs_embeds_size]`` (the
    engine's dtype). Multimodal targets only: on a text-only target the drafter is refused at load, naming the
    plugin and the source. Read from the buffer the runner feeds the target from (no second gather)."""
    IS_MULTIMODAL = "is_multimodal"
    """API 3. Which of those token rows hold multimodal embeddings. ``[num_tokens]`` bool. On a text-only target
    (and in vLLM's dummy runs) every row is ``False``."""
    POSITIONS_ALL = "positions_all"
    """API 3. The target's positions of all scheduled tokens: ``[num_tokens]`` int64, or
    ``[num_tokens, mrope_dims]`` on an M-RoPE target (one row per token, like every token-row source)."""
    NEXT_POSITIONS = "next_positions"
    """API 3. The position of each request's next token (the one drafting starts after): ``[num_reqs]`` int64
    (what ``positions_last`` gives), or ``[num_reqs, mrope_dims]`` on an M-RoPE target (every section one past
    the largest section of the request's last accepted token's position, where the next text token goes)."""

    @property
    def rows(self) -> Literal["request", "token"]:
        return "token" if self in (Source.TARGET_HIDDEN_ALL, Source.AUX_HIDDEN_ALL, Source.TOKEN_IDS_ALL,
                                   Source.TARGET_INPUTS_EMBEDS, Source.IS_MULTIMODAL,
                                   Source.POSITIONS_ALL) else "request"


#: API 3. The sources that read what the target was fed (multimodal targets: merged embeddings, their mask).
MULTIMODAL_SOURCES: tuple[Source, ...] = (Source.TARGET_INPUTS_EMBEDS, Source.IS_MULTIMODAL)


#: Forward parameter names the shim provides without any declaration.
DEFAULT_INPUTS: dict[str, Source] = {
    "hidden_states": Source.TARGET_HIDDEN_LAST,
    "next_token_ids": Source.NEXT_TOKEN_IDS,
    "positions": Source.POSITIONS_LAST,
}


#: API 3. Forward parameters of ``heads`` drafters that the shim fills with a plain ``int`` of the step, not a
#: tensor (bound by name, no declaration; only for plugins declaring ``VLLM_SPEC_API >= 3``).
#: ``num_drafts``: how many draft tokens this step uses, ``1..num_speculative_tokens``, the same for every
#: row. The adaptive policy (or vLLM's ``num_speculative_tokens_per_batch_size``) may choose fewer than
#: ``num_speculative_tokens``; a sequential drafter stops after ``num_drafts`` heads and returns at least that
#: many columns. It is the scheduler's decision, known on the host before the step: reading it needs no device
#: sync, and a captured CUDA graph holds it as a constant (one graph per value, as vLLM captures one per ``k``
#: for its own EAGLE loop).
STEP_INPUTS: dict[str, str] = {
    "num_drafts": "draft tokens this step uses (int, 1..num_speculative_tokens)",
}
NUM_DRAFTS = "num_drafts"

#: API 4. Forward parameters of ``attention`` drafters that the shim fills with a plain ``bool`` of the pass
#: (bound by name, no declaration; only for plugins declaring ``VLLM_SPEC_API >= 4``).
#: ``kv_only``: ``True`` in a pass whose outputs vLLM's loop discards (a first pass in a step whose model drafts
#: nothing, and the catch-up of skipped first passes), where all that counts is the draft KV cache the pass
#: writes. The forward may skip what no KV cache write depends on (a last layer's MLP, a final norm) and
#: return anything (``None``). Passed ``True`` only in passes run eagerly (vLLM's forward context says no CUDA
#: graph), never in warm-up, profile or capture runs, so a captured or compiled graph holds ``False``.
ATTENTION_STEP_INPUTS: dict[str, str] = {
    "kv_only": "only this pass's draft KV cache writes are kept, its outputs are discarded (bool)",
}
KV_ONLY = "kv_only"


#: Dtype names a declaration may use: ``"model"`` (the engine's dtype) or a torch dtype attribute name.
DTYPE_NAMES: tuple[str, ...] = (
    "model", "float16", "half", "bfloat16", "float32", "float", "float64", "double", "int8", "int16", "short",
    "int32", "int", "int64", "long", "uint8", "uint16", "uint32", "uint64", "bool", "float8_e4m3fn", "float8_e5m2")
#: The largest dimension a declared shape may have (one dimension of a static buffer).
MAX_DIM = 2**31 - 1


def check_dtype(what: str, dtype: object) -> None:
    if not isinstance(dtype, str) or dtype not in DTYPE_NAMES:
        raise ValueError(f"{what}: dtype {dtype!r} is not 'model' or a torch dtype name "
                         f"({', '.join(n for n in DTYPE_NAMES if n != 'model')})")


def check_shape(what: str, shape: tuple[object, ...]) -> None:
    for dim in shape:
        if isinstance(dim, str):
            if not dim.isidentifier():
                raise ValueError(f"{what}: dimension {dim!r} is neither an int nor a config attribute name")
        elif isinstance(dim, bool) or not isinstance(dim, int) or not 1 <= dim <= MAX_DIM:
            raise ValueError(f"{what}: dimension {dim!r} must be an int from 1 to {MAX_DIM} or a config attribute "
                             f"name, in shape {tuple(shape)!r}")


def _is_param_name(name: str) -> bool:
    return name.isidentifier() and not keyword.iskeyword(name)


@dataclass(frozen=True, kw_only=True)
class ExtraInput:
    """An input a drafter's forward takes beyond the defaults."""

    name: str
    """The forward (or ``update_state``) parameter that receives it."""
    source: Source
    """Where the shim takes it from."""
    shape: tuple[Dim, ...] | None = None
    """Shape of one row: ints or draft-config attribute names, e.g. ``("hidden_size",)``; checked
    against what the source delivers when the drafter loads. ``None`` (the default): not checked.
    ``()``: one scalar per row, checked (API 2; a plugin declaring ``VLLM_SPEC_API = 1`` keeps the
    API-1 meaning, where ``()`` was the default and meant "not checked")."""
    dtype: str = "model"
    """``"model"`` (the engine's dtype), or a torch dtype name such as ``"int32"``."""
    state: str | None = None
    """With ``source=Source.STATE``: the name of the :class:`StateSpec` to pass."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "source", Source(self.source))
        if self.shape is not None:
            object.__setattr__(self, "shape", tuple(self.shape))
        if not _is_param_name(self.name):
            raise ValueError(f"ExtraInput name {self.name!r} is not a valid Python parameter name")
        if (self.source is Source.STATE) != (self.state is not None):
            raise ValueError(f"ExtraInput {self.name!r}: give state= exactly when source is Source.STATE")
        check_dtype(f"ExtraInput {self.name!r}", self.dtype)
        if self.shape is not None:
            check_shape(f"ExtraInput {self.name!r}", self.shape)


@dataclass(frozen=True, kw_only=True)
class StateSpec:
    """Per-request state a drafter carries across decoding steps.

    The shim keeps it keyed by request id (never by batch row) in a pool sized from
    the engine's maximum number of sequences, initialises it when a request is first
    seen, updates it through the drafter's state-carry hook after every step that
    produced tokens for the request, and frees it when the request finishes or aborts.
    """

    name: str
    """State name; ``update_state`` receives and returns it under this name."""
    shape: tuple[Dim, ...] = ()
    """Shape of one request's state: ints or draft-config attribute names."""
    dtype: str = "model"
    """``"model"`` or a torch dtype name."""
    init: float | str = 0.0
    """Initial value: a number fills every element. API 2: a string names an attribute of the draft
    model, read once after loading (and ``bind_target``): a tensor (a learned parameter or a buffer)
    broadcastable to ``shape``, or a method ``() -> tensor`` (an init hook)."""
    on_preempt: PreemptPolicy = "keep"
    """``keep``: a preempted request resumes with its state. ``reset``: it starts again from ``init``."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "shape", tuple(self.shape))
        if not _is_param_name(self.name):
            raise ValueError(f"StateSpec name {self.name!r} is not a valid Python parameter name")
        if isinstance(self.init, str) and not _is_param_name(self.init):
            raise ValueError(f"StateSpec {self.name!r}: init {self.init!r} must be a number or the name of a "
                             f"draft-model attribute")
        if self.on_preempt not in ("keep", "reset"):
            raise ValueError(f"StateSpec {self.name!r}: on_preempt must be 'keep' or 'reset', got {self.on_preempt!r}")
        check_dtype(f"StateSpec {self.name!r}", self.dtype)
        check_shape(f"StateSpec {self.name!r}", self.shape)


@dataclass(frozen=True, kw_only=True)
class Drafter:
    """One draft architecture, as a plugin registers it.

    Example::

        register(Drafter(
            architectures=("MedusaModel",),
            model_type="medusa",
            config_class="vllm_spec_medusa.config:MedusaConfig",
            model_class="vllm_spec_medusa.model:MedusaDraftModel",
            max_speculative_tokens="num_heads",
        ))
    """

    architectures: tuple[str, ...]
    """``architectures`` values of a draft ``config.json`` this drafter serves."""
    model_class: str
    """The draft model class as ``"module:Class"`` (imported lazily, in the worker)."""
    model_type: str | None = None
    """The ``model_type`` of its ``config.json``; registered with ``transformers.AutoConfig``."""
    config_class: str | None = None
    """The HF config class for ``model_type`` as ``"module:Class"``. The module must be
    importable without side effects (the config is pickled to every vLLM process)."""
    kind: DrafterKind = "heads"
    """``heads``: one forward per step over one row per request, returning draft token ids
    ``[num_reqs, k]`` or logits ``[num_reqs, k, vocab]``. ``attention``: an autoregressive
    drafter with its own KV cache, run inside vLLM's multi-step EAGLE loop (fed with the
    target's final hidden states, or with chosen target layers when ``aux_layer_ids`` is set)."""
    extra_inputs: tuple[ExtraInput, ...] = ()
    """Inputs beyond :data:`DEFAULT_INPUTS`."""
    state: tuple[StateSpec, ...] = ()
    """Carried per-request state."""
    update_state: str = "update_state"
    """Name of the model method that is the state-carry hook (used when ``state`` is set)."""
    aux_layer_ids: str | None = None
    """Draft-config attribute listing the target layer ids the drafter consumes (the residual
    stream entering each layer; ``0`` = embeddings). ``heads`` drafters: the layers of the
    ``aux_hidden_*`` sources (the key must be set). ``attention`` drafters: the drafter consumes
    these layers in vLLM's loop, which then runs with the target's aux hidden-state outputs on
    (vLLM's ``eagle3`` route): in the first pass its ``hidden_states`` are the chosen layers
    concatenated, ``[num_tokens, n_layers * target_hidden]``, reduced by the model's
    ``combine_hidden_states(hidden_states) -> [num_tokens, hidden]`` before the loop; later
    passes get the model's own second output as usual. When the draft config lacks the key,
    vLLM's default layer choice applies."""
    max_speculative_tokens: Dim | None = None
    """Most draft tokens per step the checkpoint supports (int or config attribute);
    asking for more is an error."""
    position_free: bool = True
    """The drafter does not embed positions: its max_model_len is raised to the target's."""
    plugin: str = ""
    """Filled by the host: the name (entry-point name) of the plugin that registered it."""
    dist_label: str = ""
    """Filled by the host: ``distribution version`` of that plugin (as ``PluginInfo.dist_label``)."""
    api: int = 0
    """Filled by the host: the ``VLLM_SPEC_API`` the plugin declares (``0``: registered outside a host)."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "architectures", tuple(self.architectures))
        object.__setattr__(self, "extra_inputs", tuple(self.extra_inputs))
        object.__setattr__(self, "state", tuple(self.state))
        if not self.architectures:
            raise ValueError("Drafter needs at least one architecture name")
        for label, ref in (("model_class", self.model_class), ("config_class", self.config_class)):
            if ref is not None and (":" not in ref or ref.startswith(":") or ref.endswith(":")):
                raise ValueError(f"Drafter {label} must be 'module:Class', got {ref!r}")
        if self.kind not in ("heads", "attention"):
            raise ValueError(f"Drafter kind must be 'heads' or 'attention', got {self.kind!r}")
        if self.config_class and not self.model_type:
            raise ValueError("Drafter config_class needs model_type")
        names = [e.name for e in self.extra_inputs]
        dup = {n for n in names if names.count(n) > 1}
        if dup:
            raise ValueError(f"Drafter declares extra input(s) {sorted(dup)} twice")
        state_names = [s.name for s in self.state]
        dup = {n for n in state_names if state_names.count(n) > 1}
        if dup:
            raise ValueError(f"Drafter declares state(s) {sorted(dup)} twice")
        states = set(state_names)
        for e in self.extra_inputs:
            if e.source is Source.STATE and e.state not in states:
                raise ValueError(f"extra input {e.name!r} reads state {e.state!r}, which is not declared in state=")
            if e.name in states and not (e.source is Source.STATE and e.state == e.name):
                raise ValueError(f"extra input {e.name!r} has the name of a state; parameters named like a state "
                                 f"receive that state, so give the extra input another name")

    def culprit(self, *, model_class: bool = False, checkpoint: str | None = None) -> str:
        """This drafter as errors and log lines name it (:func:`vllm_spec_plugins.errors.culprit`)."""
        from .errors import culprit

        return culprit(self.plugin, self.display_dist, model_class=self.model_class if model_class else None,
                       checkpoint=checkpoint)

    @property
    def display_dist(self) -> str:
        """:attr:`dist_label`, or ``"unknown distribution"`` for a drafter registered outside a host."""
        return self.dist_label or "unknown distribution"

    @property
    def name(self) -> str:
        """The API 1-2 spelling of :attr:`plugin` (kept for plugins and tools that read it)."""
        return self.plugin

    @property
    def dist(self) -> str:
        """The API 1-2 spelling of :attr:`dist_label` (kept for plugins and tools that read it)."""
        return self.dist_label


@dataclass(frozen=True)
class PluginInfo:
    """What discovery found for one entry point (shown by ``vllm-spec-plugins list``)."""

    name: str
    value: str
    dist: str | None
    version: str | None
    drafters: tuple[Drafter, ...] = ()
    error: str | None = None
    hooks: tuple[str, ...] = field(default=())

    @property
    def dist_label(self) -> str:
        if self.dist is None:
            return "no distribution"
        return f"{self.dist} {self.version}"


class Register(Protocol):
    """The ``register`` callable a plugin's :func:`~vllm_spec_plugins.hookspecs.vllm_spec_register_drafters`
    receives: ``register(Drafter(...))``, once per architecture. It raises
    :class:`~vllm_spec_plugins.errors.PluginContractError` naming the plugin for anything but a ``Drafter``."""

    def __call__(self, drafter: Drafter, /) -> None: ...


class HeadsDraftModel(Protocol):
    """What the model class of a ``kind="heads"`` drafter provides.

    vLLM's loader builds it as ``cls(vllm_config=..., prefix=...)`` and calls ``load_weights`` with the
    checkpoint's ``(name, tensor)`` pairs (return the names loaded: vLLM fails on a parameter left out).
    The shim calls ``forward`` with the inputs its signature names (docs/hooks.md) and, for carried
    state, the state-carry hook (``Drafter.update_state``, ``update_state`` by default).
    """

    def __init__(self, *, vllm_config: Any, prefix: str = "") -> None: ...

    def forward(self, *args: Any, **kwargs: Any) -> Any: ...

    def load_weights(self, weights: Iterable[tuple[str, Any]]) -> set[str]: ...


class AttentionDraftModel(Protocol):
    """What the model class of a ``kind="attention"`` drafter provides: vLLM's EAGLE loop calls
    ``forward(input_ids, positions, hidden_states, inputs_embeds)`` (plus declared extra inputs, and with
    API 4 ``kv_only``: :data:`ATTENTION_STEP_INPUTS`), then ``compute_logits(hidden_states)``; with
    ``aux_layer_ids`` also ``combine_hidden_states(hidden_states)``."""

    def __init__(self, *, vllm_config: Any, prefix: str = "") -> None: ...

    def forward(self, *args: Any, **kwargs: Any) -> Any: ...

    def compute_logits(self, hidden_states: Any) -> Any: ...

    def load_weights(self, weights: Iterable[tuple[str, Any]]) -> set[str]: ...


#: The methods each drafter kind's model class must have (its protocol's, less ``__init__``).
REQUIRED_METHODS: dict[str, tuple[str, ...]] = {
    "heads": ("forward", "load_weights"),
    "attention": ("forward", "compute_logits", "load_weights"),
}


def model_class_gaps(drafter: Drafter, cls: type) -> list[str]:
    """The methods ``cls`` lacks for ``drafter``'s kind (:class:`HeadsDraftModel`,
    :class:`AttentionDraftModel`); the shim and ``check`` refuse a class with any. (The state-carry hook
    and ``combine_hidden_states`` are checked where they are bound, with their own messages.)"""
    return [m for m in REQUIRED_METHODS[drafter.kind] if not callable(getattr(cls, m, None))]


def model_class_error(drafter: Drafter, gaps: list[str]) -> str:
    """The refusal of a model class that lacks ``gaps`` (one message, for the shim and ``check``)."""
    protocol = "HeadsDraftModel" if drafter.kind == "heads" else "AttentionDraftModel"
    return (f"vllm_spec_plugins: {drafter.culprit()} names model class "
            f"{drafter.model_class!r}, which has no {', '.join(g + '()' for g in gaps)}: the model of a "
            f"{drafter.kind!r} drafter implements vllm_spec_plugins.{protocol} (docs/hooks.md). Add the "
            f"method(s) to the class.")


def target_lm_head(target_model: Any) -> Any:
    """The target's output embedding (its ``lm_head``), for a heads drafter's ``bind_target(target_model)`` to
    share, on text and multimodal targets alike: vLLM's multimodal classes keep it on the outer class
    (Idefics3) or on their language model (``get_language_model()``: PaddleOCR-VL, Qwen-VL...).

    Raises:
        AttributeError: naming the target class, when neither has one.
    """
    head = getattr(target_model, "lm_head", None)
    get_lm = getattr(target_model, "get_language_model", None)
    if head is None and callable(get_lm):
        head = getattr(get_lm(), "lm_head", None)
    if head is None:
        raise AttributeError(f"the target {type(target_model).__name__} has no lm_head, nor does its language "
                             f"model (get_language_model()): the draft cannot share it; give the draft its own")
    return head
