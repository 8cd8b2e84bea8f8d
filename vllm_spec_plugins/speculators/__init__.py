"""vLLM 0.34's speculator registry: how plugin drafters are declared to it (every process, from the shim).

vLLM 0.34 builds a speculator from ``SpeculativeConfig.speculator_config`` (a ``SpeculatorConfig`` subclass that names
a ``BaseSpeculator`` subclass), found by one of:

* a registered method (``register_speculative_method(name, config)``): ``"method": "<plugin name>"``;
* the draft checkpoint's model class declaring ``speculator_config_class``: ``--spec-model DRAFT`` alone.

:func:`register` does both for every loaded drafter: each plugin name that is not one of vLLM's own methods is
registered with the config of its kind (:mod:`.config`), and each plugin model class is given
``speculator_config_class`` when its module is imported (in every process that imports it, vLLM's model-inspection
subprocess included), unless the plugin declared one itself. Plugins need no change: the same plugin runs on 0.32,
0.33 and 0.34.

The config classes live in :mod:`.config`, which imports vLLM 0.34's config modules; this module imports no vLLM.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..api import Drafter
from ..checkpoint import split_class_path

if TYPE_CHECKING:
    from ..manager import PluginHost

logger = logging.getLogger("vllm.spec_plugins")

_CONFIG_MODULE = f"{__name__}.config"
#: The ``SpeculatorConfig`` of each kind of drafter, by qualified name (importable in every process).
HEADS_CONFIG = f"{_CONFIG_MODULE}.PluginHeadsConfig"
EAGLE_CONFIG = f"{_CONFIG_MODULE}.PluginEagleConfig"
EAGLE3_CONFIG = f"{_CONFIG_MODULE}.PluginEagle3Config"
#: The attribute vLLM 0.34 reads on a draft model class (``SpeculativeDraftModel``).
DECLARED_ATTR = "speculator_config_class"


def config_for(d: Drafter) -> str:
    """The qualified name of the ``SpeculatorConfig`` a drafter runs under on vLLM 0.34."""
    if d.kind == "heads":
        return HEADS_CONFIG
    return EAGLE3_CONFIG if d.aux_layer_ids else EAGLE_CONFIG


def plugin_config(host: PluginHost, name: str) -> str | None:
    """The config a plugin's name registers (``"method": name``): its drafters' kind, when they agree."""
    kinds = {config_for(d) for d in host.drafters if d.plugin == name}
    return kinds.pop() if len(kinds) == 1 else None


def register(host: PluginHost, when_imported: Callable[[str, Callable[[Any], None]], None]) -> list[str]:
    """Declare every loaded drafter to vLLM 0.34's registry. Returns the method names registered.

    ``when_imported(module, callback)``: the shim's import hook (it runs ``callback`` on a plugin's model module
    once that is imported)."""
    from vllm.v1.worker.gpu.spec_decode.speculator_config import register_speculative_method

    from ..routing import vllm_methods

    builtin = set(vllm_methods())
    registered: list[str] = []
    for name in sorted({d.plugin for d in host.drafters}):
        config = plugin_config(host, name)
        if name in builtin or config is None:  # e.g. plugin 'eagle': selected by checkpoint or alias route
            continue
        try:
            register_speculative_method(name, config)
            registered.append(name)
        except ValueError as e:  # already registered differently (another package) or built in
            logger.warning("vllm_spec_plugins: plugin %r is not registered as vLLM speculative method %r: %s",
                           name, name, e)
    for d in host.drafters:
        module, cls_name = split_class_path(d.model_class)
        when_imported(module, _declarer(cls_name, config_for(d)))
        _drop_stale_model_info(module, cls_name)
    return registered


def _drop_stale_model_info(module: str, cls_name: str) -> None:
    """vLLM caches what it inspected of a lazily registered model class on disk, keyed by the hash of the class's
    module file (``<VLLM_CACHE_ROOT>/modelinfos``). An entry written before the shim declared the class's speculator
    (a run without this package's registration) would hide the declaration: drop it, so vLLM inspects again."""
    try:
        import json

        from vllm.model_executor.models.registry import _LazyRegisteredModel

        lazy = _LazyRegisteredModel(module_name=module, class_name=cls_name)
        path = lazy._get_cache_dir() / lazy._get_cache_filename()  # where vLLM keeps that entry
        if not path.is_file():
            return
        declared = json.loads(path.read_text()).get("modelinfo", {}).get(DECLARED_ATTR)
        if declared is None:
            path.unlink(missing_ok=True)
    except Exception:
        logger.debug("vllm_spec_plugins: could not check vLLM's model-info cache for %s", cls_name, exc_info=True)


def _declarer(cls_name: str, config: str) -> Any:
    def declare(module: Any) -> None:
        cls = getattr(module, cls_name, None)
        if cls is None or DECLARED_ATTR in vars(cls):
            return  # missing (the runtime reports it when it loads) or declared by the plugin itself
        from vllm.utils.import_utils import resolve_obj_by_qualname

        setattr(cls, DECLARED_ATTR, resolve_obj_by_qualname(config))

    return declare
