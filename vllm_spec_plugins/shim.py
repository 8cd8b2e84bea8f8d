"""The ``vllm.general_plugins`` entry point: discover plugins, register them, patch vLLM.

vLLM calls :func:`register` once in every process (API server, engine core, each
worker, the model-inspection subprocess) before it builds the speculative config,
and calls it without a guard: nothing here may raise.
"""

from __future__ import annotations

import logging
import os
import threading
from typing import TYPE_CHECKING

from ._compat import has_speculator_registry, supported_text, version_supported, vllm_version
from ._names import ENV_ALLOW, ENV_SKIP_VERSION_CHECK
from .checkpoint import import_class_path

if TYPE_CHECKING:
    from .manager import PluginHost

logger = logging.getLogger("vllm.spec_plugins")

_LOCK = threading.Lock()
_APPLIED = False
STATUS: dict[str, object] = {"applied": False, "supported": None, "vllm": None, "error": None}
"""What :func:`register` did in this process (for tests and debugging)."""


#: Every environment variable this package reads (vLLM warns about ``VLLM_*`` names it does not know, and can be
#: told to refuse them: ``EngineArgs.fail_on_environ_validation``).
ENV_NAMES = ("VLLM_SPEC_PLUGINS", "VLLM_SPEC_PLUGINS_TRACE_DIR", "VLLM_SPEC_PLUGINS_SKIP_VERSION_CHECK",
             "VLLM_SPEC_PLUGINS_STRICT", "VLLM_SPEC_PLUGINS_RUNNER", "VLLM_SPEC_PLUGINS_POLICY",
             "VLLM_SPEC_PLUGINS_POLICY_STATS", "VLLM_SPEC_PLUGINS_POLICY_LOG_INTERVAL",
             "VLLM_SPEC_PLUGINS_POLICY_MAX_PROBE_INTERVAL", "VLLM_SPEC_PLUGINS_POLICY_COST_MODEL",
             "VLLM_SPEC_PLUGINS_DRAFT_CATCHUP", "VLLM_SPEC_PLUGINS_KV_ONLY", "VLLM_SPEC_PLUGINS_PROMPT_LOOKUP",
             "VLLM_SPEC_PLUGINS_CPU_RUNTIME", "VLLM_SPEC_PLUGINS_TEST_FORKSERVER", "VLLM_SPEC_PLUGINS_TEST_START_METHOD",
             "VLLM_SPEC_PLUGINS_TEST_VLLM", "VLLM_SPEC_PLUGINS_TEST_CACHE")


def declare_env_names() -> None:
    """Make our variables known to vLLM (``vllm.envs.environment_variables``), so setting one does not log
    "Unknown vLLM environment variable detected"."""
    try:
        from vllm import envs
    except Exception:  # noqa: BLE001 - no vLLM: nothing to declare
        return
    table = getattr(envs, "environment_variables", None)
    if isinstance(table, dict):
        for name in ENV_NAMES:
            table.setdefault(name, lambda name=name: os.environ.get(name))


def register() -> None:
    """Entry point for ``vllm.general_plugins``. Runs once per process; never raises."""
    global _APPLIED
    with _LOCK:
        if _APPLIED:
            return
        _APPLIED = True
        try:
            declare_env_names()
        except Exception:
            logger.debug("vllm_spec_plugins: could not declare environment variables", exc_info=True)
        try:
            _register()
            STATUS["applied"] = True
        except KeyboardInterrupt:
            raise
        except BaseException as e:  # never take vLLM down (a plugin's SystemExit included)
            STATUS["error"] = f"{type(e).__name__}: {e}"
            logger.exception("vllm_spec_plugins: failed to install the runner shim; plugin drafters are "
                             "unavailable, plain vLLM is unaffected")


def _register() -> None:
    if os.environ.get(ENV_ALLOW) == "":
        # Exactly as if the package were not installed.
        STATUS["supported"] = None
        return
    from .manager import get_host

    ver, minor = vllm_version()
    STATUS["vllm"] = ver
    supported = version_supported(minor)
    STATUS["supported"] = supported
    host = get_host()
    from .patch import config as config_patch

    if not supported:
        logger.warning("vllm_spec_plugins supports vLLM %s; found %s. Plugin drafters are disabled, "
                       "plain vLLM is unaffected (set %s=1 to try anyway).", supported_text(), ver,
                       ENV_SKIP_VERSION_CHECK)
        config_patch.apply(host, supported=False)
        return
    if not host.drafters:
        config_patch.apply(host, supported=True)  # only to explain requests for plugins (none is usable)
        return
    _register_with_vllm(host)
    if has_speculator_registry(minor):
        from .patch._util import when_imported
        from .speculators import register as register_speculators

        register_speculators(host, when_imported)
    config_patch.apply(host, supported=True)
    from .patch import model_runner, model_runner_v2, scheduler

    model_runner.apply_when_imported()
    model_runner_v2.apply_when_imported()
    scheduler.apply_when_imported()
    names = ", ".join(f"{p.dist}-{p.version}" if p.dist else p.name for p in host.plugins.values() if not p.error)
    logger.debug("vllm_spec_plugins: registered spec-decode plugins: %s", names)


def _register_with_vllm(host: PluginHost) -> None:
    """Register every drafter's config and model class, never over a name vLLM or Transformers serve."""
    from transformers import AutoConfig
    from vllm import ModelRegistry

    from .owners import find_shadows, own_names, private_arch

    shadows = find_shadows(host.drafters)
    host.shadows = shadows
    host.reserved = {s.ckey for s in shadows if not s.selectable}
    for s in shadows:
        if s.selectable:
            logger.debug("vllm_spec_plugins: %s", s.describe())
        else:
            logger.warning("vllm_spec_plugins: %s", s.describe())
    shadowed_types = {s.key for s in shadows if s.what == "model_type" and s.owner == "Transformers"}
    for d in host.drafters:
        if d.config_class and d.model_type and d.model_type not in shadowed_types:
            try:
                config_cls = import_class_path(d.config_class)
                AutoConfig.register(d.model_type, config_cls, exist_ok=True)
            except KeyboardInterrupt:
                raise
            except BaseException as e:  # noqa: BLE001
                logger.warning("vllm_spec_plugins: plugin %r (%s) config class %s failed to import: %s: %s",
                               d.plugin, d.display_dist, d.config_class, type(e).__name__, e)
        for arch in d.architectures:
            ModelRegistry.register_model(private_arch(arch, d.plugin), d.model_class)
        for arch in own_names(d, shadows):
            ModelRegistry.register_model(arch, d.model_class)
