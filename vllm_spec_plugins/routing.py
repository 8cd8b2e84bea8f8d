"""Which plugin and which vLLM method serve a draft: the rules of the config phase, and of the runner choice.

The engine's config patch (:mod:`.patch.config`) calls :func:`route_request` before vLLM reads a
speculative config and :func:`finalize_spec` on the ``SpeculativeConfig`` vLLM built;
``vllm-spec-plugins check`` calls the same functions, so what one refuses, the other refuses.
The runtime reads the route constants and :func:`plugin_of`. No torch or vLLM import at module
level: vLLM's modules are imported inside the functions that read them.
"""

from __future__ import annotations

import logging
import os
import typing
from typing import TYPE_CHECKING, Any

from ._compat import has_speculator_registry
from .api import Drafter
from .checkpoint import (
    ARCH_ATTR,
    CONFIG_STAMP,
    DIST_ATTR,
    PLUGIN_ATTR,
    in_plugin_config_class,
    load_plugin_config,
    local_config,
    resolve_dim,
    strip_stamps,
    weight_names,
)
from .errors import PluginContractError, VllmSpecPluginError
from .explain import excluded_claim, installed_text, path_route_error, unknown_method_error, version_error
from .owners import private_arch

if TYPE_CHECKING:
    from .manager import PluginHost

logger = logging.getLogger("vllm.spec_plugins")

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

#: Methods vLLM's path heuristics pick from the checkpoint *path* (config/speculative.py).
PATH_METHODS = ("eagle", "eagle3", "dflash", "dspark")


def attention_method(d: Drafter) -> str:
    """The vLLM method whose loop serves attention drafter ``d``."""
    return AUX_ATTENTION_METHOD if d.aux_layer_ids else ATTENTION_METHOD


def route_of(d: Drafter) -> str:
    """The vLLM method a drafter is served through: ``draft_model`` for heads, else its EAGLE-family loop."""
    return attention_method(d) if d.kind == "attention" else "draft_model"


def path_method(model: str | None) -> str | None:
    """The EAGLE-family method vLLM's path heuristic picks for a checkpoint path (``eagle-`` before ``eagle3``)."""
    low = (model or "").lower()
    if "eagle-" in low:
        return ATTENTION_METHOD
    if "eagle3" in low:
        return AUX_ATTENTION_METHOD
    return None


def vllm_architectures(method: str, archs: list[str]) -> list[str]:
    """The architecture names vLLM shows for a draft config once it took ``method``.

    For its EAGLE-family methods vLLM wraps the draft config in ``EAGLEConfig``, which
    renames architectures (``transformers_utils/configs/eagle.py``): ``eagle``: ``X`` ->
    ``EagleX`` unless ``X`` starts with ``Eagle``; ``eagle3``: ``X`` -> ``Eagle3X`` unless
    ``X`` starts or ends with ``Eagle3``. Other methods keep the names.
    """
    if method == ATTENTION_METHOD:
        return [a if a.startswith("Eagle") else f"Eagle{a}" for a in archs]
    if method == AUX_ATTENTION_METHOD:
        return [a if a.startswith("Eagle3") or a.endswith("Eagle3") else f"Eagle3{a}" for a in archs]
    return list(archs)


def vllm_methods() -> tuple[str, ...]:
    from vllm.config.speculative import SpeculativeMethod

    out: list[str] = []

    def walk(t: Any) -> None:
        for a in typing.get_args(t):
            if isinstance(a, str):
                out.append(a)
            else:
                walk(a)

    walk(SpeculativeMethod)
    return tuple(out)


def alias_route(host: PluginHost, alias: str, model: str | None) -> str:
    """The vLLM method for ``"method": "<alias>"``, before vLLM has read the draft config.

    A plugin whose drafters all take one route: that route. A plugin with drafters on
    several routes (the ``eagle`` plugin: EAGLE-1 on ``eagle``, EAGLE-3 on ``eagle3``)
    picks it from the checkpoint's ``config.json``, which is read here only for a **local
    folder**: the drafters whose architectures match the names vLLM would show on their
    route (:func:`vllm_architectures`), or their ``model_type``. If several routes still
    match (a plain ``LlamaForCausalLM`` becomes ``EagleLlamaForCausalLM`` on one and
    ``Eagle3LlamaForCausalLM`` on the other), a drafter whose ``aux_layer_ids`` key the
    config sets wins, then vLLM's own path heuristic (``eagle-`` / ``eagle3`` in the path),
    then the plugin's first registered drafter. **Hub ids** (no local ``config.json``):
    the path heuristic on the id, then the first registered drafter; pass vLLM's method
    name instead (``"method": "eagle3"``) to force a route, the plugin still serves the
    draft by its architecture.
    """
    own = list(host.plugins[alias].drafters)
    routes = list(dict.fromkeys(route_of(d) for d in own))
    if len(routes) == 1:
        return routes[0]
    by_path = path_method(model)
    cfg = local_config(model)
    if cfg:
        archs = list(cfg.get("architectures") or [])
        mt = cfg.get("model_type")
        match = [d for d in own
                 if set(vllm_architectures(route_of(d), archs)) & set(d.architectures)
                 or (d.kind == "heads" and mt and d.model_type == mt)]
        if len({route_of(d) for d in match}) > 1:
            keyed = [d for d in match if d.aux_layer_ids and d.aux_layer_ids in cfg]
            if len({route_of(d) for d in keyed}) == 1:
                return route_of(keyed[0])
            if by_path in {route_of(d) for d in match}:
                return by_path
        if match:
            return route_of(match[0])
    if by_path in routes:
        return by_path
    return routes[0]


def registered_method(name: str) -> bool:
    """Whether ``name`` is a method of vLLM's speculator registry (vLLM 0.34 on; the shim registers plugin names)."""
    if not has_speculator_registry():
        return False
    from vllm.v1.worker.gpu.spec_decode.speculator_config import registered_speculative_methods

    return name in registered_speculative_methods()


def route_request(host: PluginHost, cfg: Any, model: str | None, method: str | None,
                  supported: bool = True) -> tuple[Any, str | None]:
    """What the config patch does to a speculative config before vLLM reads it (also what ``check`` asks):
    the checkpoint's stamp or ``speculators_model_type`` as ``"method"``, an unmarked EAGLE layout refused, a
    plugin alias rewritten to its vLLM route, an unknown method refused. Returns ``(config, plugin alias)``."""
    alias = None
    local = local_config(model)
    if method is None and local:
        stamp = _stamp_of(host, local, model)
        if stamp is not None:
            _check_stamp_claim(host, stamp, model, local)
            method = stamp
            cfg = dict(cfg or {})
            cfg["method"] = stamp
    if method is None and local and local.get("speculators_model_type") in ATTENTION_METHODS:
        _check_speculators_claim(host, model, local)
        # A speculators checkpoint (vllm-project/speculators) names its algorithm; vLLM 0.32 resolves a
        # plain --spec-model folder to "draft_model" and then cannot load it. Its own method, as given.
        method = local["speculators_model_type"]
        cfg = dict(cfg or {})
        cfg["method"] = method
    if method is None and local and supported:
        _unmarked_eagle(host, model, local)
    if isinstance(method, str) and method in host.plugins:
        host.check_alias(method)  # raises for a broken plugin
        alias = method
        cfg = dict(cfg or {})
        if not supported:
            raise version_error(model, method)
        route = alias_route(host, method, model)
        if route in ATTENTION_METHODS:
            cfg["method"] = route
        elif method not in vllm_methods():
            # vLLM 0.34: the plugin's name is a method of vLLM's registry (vllm_spec_plugins.speculators)
            cfg["method"] = method if registered_method(method) else "draft_model"
            own = host.plugins[method].drafters
            if local and "model_type" not in local and len(own) == 1 and own[0].model_type:
                raise PluginContractError(
                    f"vllm_spec_plugins: '{model}/config.json' has no model_type, and this "
                    f"vLLM cannot be told which config class to use for it. Add "
                    f"\"model_type\": \"{own[0].model_type}\" to that config.json (plugin {method!r}, "
                    f"{own[0].display_dist}).", plugin_name=method, dist=own[0].display_dist)
    elif isinstance(method, str) and supported and method not in vllm_methods():
        raise unknown_method_error(host, method, "speculative method")
    return cfg, alias


def _stamp_of(host: PluginHost, local: dict[str, Any], model: str | None) -> str | None:
    """The plugin a checkpoint's ``vllm_spec_plugin`` stamp names, if any (raises when it is not available)."""
    stamp = local.get(CONFIG_STAMP)
    if stamp is None:
        return None
    if not isinstance(stamp, str) or not stamp:
        raise PluginContractError(
            f"vllm_spec_plugins: '{model}/config.json' sets {CONFIG_STAMP!r} to {stamp!r}; expected a plugin name")
    if stamp in host.plugins:
        host.check_alias(stamp)  # raises for a broken plugin
        return stamp
    if stamp in vllm_methods() and stamp not in host.skipped:
        raise PluginContractError(
            f"vllm_spec_plugins: '{model}/config.json' key {CONFIG_STAMP!r} names {stamp!r}, which is one of vLLM's "
            f"own speculative methods, not a plugin: that key only names the spec-decode plugin that serves the "
            f"checkpoint ({installed_text(host)}). Remove the key, and pass --speculative-config "
            f"'{{\"method\": \"{stamp}\", ...}}' to use vLLM's {stamp!r}.")
    raise unknown_method_error(host, stamp, f"'{model}/config.json' key {CONFIG_STAMP!r}")


def _check_stamp_claim(host: PluginHost, stamp: str, model: str | None, local: dict[str, Any]) -> None:
    """The stamped plugin must serve this kind of checkpoint; said about the key, not about a "method" the user
    never passed."""
    archs = list(local.get("architectures") or [])
    mt = local.get("model_type")
    if not archs and not mt:
        return
    own = host.plugins[stamp].drafters
    route = alias_route(host, stamp, model)
    seen = set(vllm_architectures(route, archs)) | set(archs)
    if any(seen & set(d.architectures) or (d.model_type and d.model_type == mt) for d in own):
        return
    serves = sorted({a for d in own for a in d.architectures})
    raise PluginContractError(
        f"vllm_spec_plugins: '{model}/config.json' key {CONFIG_STAMP!r} names plugin {stamp!r} "
        f"({host.plugins[stamp].dist_label}), which serves {serves}, but the checkpoint has architectures {archs} "
        f"and model_type {mt!r}. Fix that key (or 'architectures'), or remove the key.",
        plugin_name=stamp, dist=host.plugins[stamp].dist_label)


def _check_speculators_claim(host: PluginHost, model: str | None, local: dict[str, Any]) -> None:
    """A ``speculators_model_type`` (EAGLE family) on a checkpoint a heads plugin claims: the two keys disagree.
    Without this, vLLM's EAGLE route fails with its list of every architecture it knows."""
    archs = list(local.get("architectures") or [])
    try:
        d = host.select(archs, local.get("model_type"), None)
    except VllmSpecPluginError:
        return
    if d is not None and d.kind == "heads":
        raise PluginContractError(
            f"vllm_spec_plugins: '{model}/config.json' says speculators_model_type "
            f"{local['speculators_model_type']!r} (an EAGLE-family checkpoint of the speculators format), but its "
            f"architectures {archs} / model_type {local.get('model_type')!r} are a {d.kind} drafter of plugin "
            f"{d.plugin!r} ({d.display_dist}), which vLLM's EAGLE loop cannot run. Remove the "
            f"speculators_model_type key (the checkpoint is then served by {d.plugin!r}), or fix 'architectures'.",
            plugin_name=d.plugin, dist=d.display_dist)


def _unmarked_eagle(host: PluginHost, model: str | None, local: dict[str, Any]) -> None:
    """Refuse an EAGLE-layout draft (``fc.weight``) that nothing marks as one; say exactly what to add.

    EAGLE authors' configs say ``LlamaForCausalLM``: without ``"method"`` (or vLLM's ``eagle-``
    folder-name rule) vLLM loads them as a plain draft LM and fails 30 s later with "There is no
    module or parameter named 'fc' in LlamaForCausalLM", never asking a plugin.
    """
    if path_method(model) or "fc.weight" not in weight_names(model):
        return
    archs = list(local.get("architectures") or [])
    attention = [p for p in host.plugins.values() if not p.error and any(d.kind == "attention" for d in p.drafters)]
    # the plugin claiming the checkpoint's architecture first, if one does
    attention.sort(key=lambda p: not any(d.kind == "attention" and set(archs) & set(d.architectures)
                                         for d in p.drafters))
    if attention:
        p = attention[0]
        how = (f"add \"{CONFIG_STAMP}\": \"{p.name}\" to '{model}/config.json' (plugin {p.name!r}, {p.dist_label}), "
               f"or pass --speculative-config '{{\"method\": \"{p.name}\", \"model\": \"{model}\", ...}}'")
    else:
        how = (f"pass --speculative-config '{{\"method\": \"eagle\", \"model\": \"{model}\", ...}}' "
               f"(vLLM's built-in EAGLE), or install vllm-spec-eagle and add \"{CONFIG_STAMP}\": \"eagle\" to its "
               f"config.json")
    raise PluginContractError(
        f"vllm_spec_plugins: draft '{model}' has the EAGLE layout (fc.weight) but its config.json "
        f"(architectures {archs}) does not say so, and vLLM would load it as a plain draft model (\"There is no "
        f"module or parameter named 'fc'\"). To serve it: {how}.")


def claimed_plugin(host: PluginHost, model: str | None, alias: str | None) -> str | None:
    """On an unsupported vLLM: the plugin a draft asks for, if any.

    Named by alias, or claimed by architecture/model_type unless vLLM itself serves the
    checkpoint's architectures (a plugin may claim names vLLM knows, as the EAGLE plugin's
    ``LlamaForCausalLMEagle3``: vLLM's own class then serves it as if we were not installed).
    """
    if alias and alias in host.plugins:
        return alias
    cfg = local_config(model)
    archs = list(cfg.get("architectures") or [])
    try:
        d = host.select(archs, cfg.get("model_type"))
    except VllmSpecPluginError:
        return None
    if d is None or _vllm_serves(archs):
        return None
    return d.plugin


def _vllm_serves(archs: list[str]) -> bool:
    """True when vLLM's registry knows every one of ``archs`` (unsupported vLLM: nothing of ours is registered)."""
    try:
        from vllm import ModelRegistry

        known = ModelRegistry.get_supported_archs()
    except Exception:  # noqa: BLE001
        return False
    return bool(archs) and all(a in known for a in archs)


def check_spec_tokens(k: Any) -> None:
    """A speculative config asks for at least one token (vLLM's own refusal is a bare validation error)."""
    if isinstance(k, int) and not isinstance(k, bool) and k < 1:
        raise PluginContractError(
            f"vllm_spec_plugins: num_speculative_tokens={k} (--spec-tokens {k}): a speculative config needs "
            f"num_speculative_tokens >= 1 (leave speculation out to run without drafts)")


def precheck_max_tokens(host: PluginHost, model: str | None, alias: str | None, k: Any) -> None:
    """Check ``num_speculative_tokens`` against a local plugin checkpoint before vLLM builds its config.

    vLLM's own rules on config fields fire first otherwise, with errors that name no plugin
    (0.32: ``num_speculative_tokens must be divisible by n_predict`` for any config with an
    ``n_predict``). Only local folders are read here; hub ids get the same check after vLLM
    loaded their config, unless one of vLLM's rules stops it first.
    """
    if not isinstance(k, int):
        return
    cfg = local_config(model)
    if not cfg:
        return
    try:
        drafter = host.select(list(cfg.get("architectures") or []), cfg.get("model_type"), alias)
    except VllmSpecPluginError:
        return  # reported with the full config later
    if drafter is None or drafter.max_speculative_tokens is None:
        return
    if isinstance(drafter.max_speculative_tokens, int):
        hf: Any = None
    elif drafter.config_class:
        try:
            hf = load_plugin_config(drafter, str(model))
        except Exception:  # noqa: BLE001
            return  # vLLM's loading reports what is wrong with the config
    else:
        return
    check_max_tokens(drafter, hf, k, model)


def fill_from_target(host: PluginHost, hf: Any, alias: str | None, tmc: Any, path: Any, revision: Any) -> Any:
    """A plugin draft's config as the plugin reads it: loaded with the plugin's config class (vLLM 0.32
    loads ``model_type: medusa`` with its own class, whose defaults are 4096 / 32001), ``hidden_size`` and
    ``vocab_size`` left unset (missing or null) taken from the target. Returns the config to use."""
    removed = strip_stamps(hf)
    if removed:
        logger.info("vllm_spec_plugins: ignored %s in '%s/config.json' (only the shim sets them)", removed, path)
    try:
        d = host.select(list(getattr(hf, "architectures", None) or []), getattr(hf, "model_type", None), alias)
    except VllmSpecPluginError:
        d = None
    if d is None and alias and alias in host.plugins and len(host.plugins[alias].drafters) == 1:
        d = host.plugins[alias].drafters[0]
    if d is None:
        return hf
    if path is not None:
        hf = in_plugin_config_class(d, hf, str(path), revision)
    for attr, value in (("hidden_size", tmc.get_hidden_size), ("vocab_size", tmc.get_vocab_size)):
        if getattr(hf, attr, None) is None:
            setattr(hf, attr, value())
    return hf


def finalize_spec(host: PluginHost, spec: Any, alias: str | None, supported: bool,
                  user_draft_tp: int | None = None) -> Any:
    """Post-process the SpeculativeConfig vLLM built: route a plugin draft to the plugin.

    ``user_draft_tp``: the ``draft_tensor_parallel_size`` the user passed, if any (vLLM's
    own choice cannot be told from the user's once the config is built).
    """
    dmc = getattr(spec, "draft_model_config", None)
    if dmc is None:
        if alias:
            raise PluginContractError(f"vllm_spec_plugins: method {alias!r} needs a draft model; pass \"model\"")
        return spec
    hf = dmc.hf_config
    removed = strip_stamps(hf)
    if removed:
        logger.info("vllm_spec_plugins: ignored %s in '%s/config.json' (only the shim sets them)", removed, dmc.model)
    archs = list(getattr(hf, "architectures", None) or [])
    drafter = host.select(archs, getattr(hf, "model_type", None), alias)
    if drafter is None:
        claim = excluded_claim(host, archs, getattr(hf, "model_type", None)) if supported else ""
        if claim:
            logger.warning("%s vLLM serves it with its own method %r instead.", claim, spec.method)
        return spec
    if not supported:
        raise version_error(dmc.model, drafter.plugin)
    path = dmc.model
    if drafter.kind == "heads":
        if spec.method in PATH_METHODS:
            raise path_route_error(drafter, path, spec.method)
        spec.method = "draft_model"
    else:
        # Attention drafters run in vLLM's EAGLE loop: vLLM must have taken the EAGLE route
        # (wrapped the config in EAGLEConfig, planned the draft KV cache), and for drafters that
        # consume chosen target layers its eagle3 route (aux hidden-state outputs on).
        want = attention_method(drafter)
        if spec.method != want:
            raise PluginContractError(
                f"vllm_spec_plugins: draft '{path}' belongs to attention-drafter plugin {drafter.plugin!r} "
                f"({drafter.display_dist}), which runs in vLLM's {want!r} drafting loop, but vLLM resolved "
                f"method {spec.method!r}. Pass "
                f"--speculative-config '{{\"method\": \"{drafter.plugin}\", \"model\": \"{path}\", ...}}' "
                f"(for a checkpoint that is not a local folder: \"method\": \"{want}\"; the draft's architecture "
                f"still selects the plugin).",
                plugin_name=drafter.plugin, dist=drafter.display_dist)
    # Load the config with the plugin's own class when vLLM used another one (0.32 has its own classes for
    # 'medusa' and 'mlp_speculator', and loads them before AutoConfig): the plugin's class wins, and says so.
    reloaded = in_plugin_config_class(drafter, hf, path, getattr(dmc, "revision", None))
    if reloaded is not hf:
        hf = dmc.hf_config = dmc.hf_text_config = reloaded
    tmc = spec.target_model_config
    if getattr(hf, "hidden_size", None) is None:
        hf.hidden_size = tmc.get_hidden_size()
    if getattr(hf, "vocab_size", None) is None:
        hf.vocab_size = tmc.get_vocab_size()
    if not getattr(hf, "architectures", None):
        hf.architectures = [drafter.architectures[0]]
    check_max_tokens(drafter, hf, spec.num_speculative_tokens, path)
    if drafter.kind == "heads":
        heads_draft_tp(drafter, spec, path, user_draft_tp)
    if drafter.aux_layer_ids:
        ids = getattr(hf, drafter.aux_layer_ids, None)
        if not ids and drafter.kind == "attention":
            pass  # vLLM's eagle3 route: its runner falls back to its own layer choice
        elif not ids:
            raise PluginContractError(
                f"vllm_spec_plugins: {drafter.culprit()} reads target layer ids "
                f"from draft config key {drafter.aux_layer_ids!r}, which '{path}/config.json' does not set",
                plugin_name=drafter.plugin, dist=drafter.display_dist)
        else:
            check_aux_ids(drafter, path, ids, tmc)
            hf.eagle_aux_hidden_state_layer_ids = list(ids)
    check_policy_env(drafter, spec.num_speculative_tokens)
    if drafter.position_free:
        dmc.max_model_len = spec.target_model_config.max_model_len
    arch = next((a for a in archs if a in drafter.architectures), drafter.architectures[0])
    # vLLM loads the draft through the plugin's private registration: no vLLM class is replaced.
    hf.architectures = [private_arch(arch, drafter.plugin)]
    setattr(hf, PLUGIN_ATTR, drafter.plugin)
    setattr(hf, DIST_ATTR, drafter.display_dist)
    setattr(hf, ARCH_ATTR, arch)
    if has_speculator_registry():
        # 0.34 reads the speculator from the draft's model info (the plugin class declares it): inspect it again
        # for the private architecture, as vLLM does after its own EAGLE config rewrites architectures
        spec.update_arch_()
    logger.info("vllm_spec_plugins: draft '%s' served by plugin '%s' (%s)", path, drafter.plugin, drafter.display_dist)
    return spec


def check_max_tokens(drafter: Drafter, hf: Any, k: int | None, path: str | None) -> None:
    """Raise when ``k`` draft tokens per step exceed what the checkpoint supports."""
    if drafter.max_speculative_tokens is None or k is None:
        return
    most = resolve_dim(drafter, hf, drafter.max_speculative_tokens, "max_speculative_tokens =")
    if k > most:
        raise PluginContractError(
            f"vllm_spec_plugins: num_speculative_tokens={k}, but draft '{path}' (plugin {drafter.plugin!r}, "
            f"{drafter.display_dist}) can propose at most {most} tokens per step "
            f"({drafter.max_speculative_tokens}={most}). Pass --spec-tokens {most} or fewer.",
            plugin_name=drafter.plugin, dist=drafter.display_dist)


def heads_draft_tp(drafter: Drafter, spec: Any, path: str | None, user_draft_tp: int | None) -> None:
    """Heads drafters run in the target's workers, on the target's tensor-parallel group.

    Their draft TP is the target's. vLLM 0.32 sets the draft TP of ``model_type:
    mlp_speculator`` checkpoints to 1 (``SpeculativeConfig._verify_and_get_draft_tp``), and
    its draft-model proposer then refuses to start under TP > 1; that choice is undone here.
    A ``draft_tensor_parallel_size`` the user passed that differs from the target's is an error.
    """
    target_pc = getattr(spec, "target_parallel_config", None)
    draft_pc = getattr(spec, "draft_parallel_config", None)
    if target_pc is None or draft_pc is None:
        return
    tp = target_pc.tensor_parallel_size
    if draft_pc.tensor_parallel_size == tp:
        return
    if user_draft_tp is not None and user_draft_tp != tp:
        raise PluginContractError(
            f"vllm_spec_plugins: draft_tensor_parallel_size={user_draft_tp}, but draft '{path}' (plugin "
            f"{drafter.plugin!r}, {drafter.display_dist}) is a heads drafter: it runs in the target's workers with the "
            f"target's tensor parallelism ({tp}). Drop draft_tensor_parallel_size or set it to {tp}.",
            plugin_name=drafter.plugin, dist=drafter.display_dist)
    logger.info("vllm_spec_plugins: draft '%s' (plugin '%s'): draft tensor parallel size %d -> %d (heads drafters "
                "use the target's tensor parallelism)", path, drafter.plugin, draft_pc.tensor_parallel_size, tp)
    spec.draft_tensor_parallel_size = tp
    spec.draft_parallel_config = type(spec).create_draft_parallel_config(
        target_pc, tp, draft_model_config=spec.draft_model_config)


def check_aux_ids(drafter: Drafter, path: str, ids: Any, target_model_config: Any) -> None:
    """Target layer ids must be distinct ints in ``0..num_hidden_layers`` (0: the embeddings; vLLM collects
    the residual stream entering each layer and after the last one). Others would make the target hand over
    fewer layers than the drafter was built for, failing at the first step with a shape error."""
    text = getattr(target_model_config, "hf_text_config", None) or getattr(target_model_config, "hf_config", None)
    n = getattr(text, "num_hidden_layers", None)
    if not isinstance(n, int):
        return
    ids = list(ids)
    bad = [i for i in ids if not isinstance(i, int) or isinstance(i, bool) or not 0 <= i <= n]
    dup = sorted({i for i in ids if ids.count(i) > 1}, key=str)
    if bad or dup:
        what = f"{bad} outside 0..{n}" if bad else f"{dup} more than once"
        raise PluginContractError(
            f"vllm_spec_plugins: {drafter.culprit(checkpoint=path)} reads target "
            f"layer ids {ids} from config key {drafter.aux_layer_ids!r}: {what}. The target "
            f"'{getattr(target_model_config, 'model', '?')}' has {n} layers, so its layer ids are 0 (the "
            f"embeddings) to {n}, each at most once. Use a draft trained for this target, or fix "
            f"{drafter.aux_layer_ids!r} in '{path}/config.json'.", plugin_name=drafter.plugin, dist=drafter.display_dist)


def check_policy_env(drafter: Drafter, k: int | None) -> None:
    """Refuse a bad ``VLLM_SPEC_PLUGINS_POLICY`` here, in process 0, with the variable named (the
    scheduler that reads it runs in the engine core, where an error would be harder to read)."""
    from .policy import ENV_POLICY, ENV_STATS, PolicySettings

    try:
        settings = PolicySettings.from_env()
    except ValueError as e:
        raise PluginContractError(f"vllm_spec_plugins: {e}", plugin_name=drafter.plugin,
                                  dist=drafter.display_dist) from None
    stats = os.environ.get(ENV_STATS)
    if stats and settings.mode != "off":
        folder = os.path.dirname(os.path.abspath(stats)) or "."
        if os.path.isdir(stats) or not os.path.isdir(folder) or not os.access(folder, os.W_OK):
            why = "is a folder" if os.path.isdir(stats) else f"its folder '{folder}' does not exist or is not writable"
            raise PluginContractError(
                f"vllm_spec_plugins: {ENV_STATS}={stats!r} names where the adaptive policy writes its statistics, "
                f"but {why}. Give a file path in a writable folder, or unset {ENV_STATS}.",
                plugin_name=drafter.plugin, dist=drafter.display_dist)
    if settings.mode == "pinned" and k is not None and (settings.pin or 0) > k:
        raise PluginContractError(
            f"vllm_spec_plugins: {ENV_POLICY}={settings.pin} pins more draft tokens per step than "
            f"num_speculative_tokens={k}; pass --spec-tokens {settings.pin} or pin {k} or fewer",
            plugin_name=drafter.plugin, dist=drafter.display_dist)
