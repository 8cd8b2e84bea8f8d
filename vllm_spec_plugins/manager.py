"""Plugin discovery: entry points → pluggy → a table of drafters.

Failures are isolated per plugin: a plugin that fails to import, or breaks the
contract, is recorded with its entry point, distribution and version and the
original error. It only becomes an error when its draft is requested.
"""

from __future__ import annotations

import importlib.metadata as md
import logging
import os
import traceback
from collections.abc import Iterable
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Literal

import pluggy

from . import hookspecs
from ._names import API_VERSION, ENTRY_POINT_GROUP, ENV_ALLOW, PROJECT_NAME
from .api import Drafter, PluginInfo
from .errors import DuplicateArchitectureError, PluginContractError, PluginLoadError

if TYPE_CHECKING:
    from .owners import Shadow

logger = logging.getLogger("vllm.spec_plugins")


def get_plugin_manager() -> pluggy.PluginManager:
    """A fresh plugin manager with our hookspecs and no plugins."""
    pm = pluggy.PluginManager(PROJECT_NAME)
    pm.add_hookspecs(hookspecs)
    return pm


def allowed_names(environ: dict[str, str] | None = None) -> set[str] | None:
    """The ``VLLM_SPEC_PLUGINS`` allow-list: ``None`` = all plugins, empty set = none."""
    env = os.environ if environ is None else environ
    raw = env.get(ENV_ALLOW)
    if raw is None:
        return None
    return {n.strip() for n in raw.split(",") if n.strip()}


class DrafterRegistry:
    """The ``register`` callable handed to :func:`vllm_spec_register_drafters`."""

    def __init__(self, plugin_name: str, dist_label: str, api: int = API_VERSION) -> None:
        self.plugin_name = plugin_name
        self.dist_label = dist_label
        self.api = api
        self.drafters: list[Drafter] = []

    def __call__(self, drafter: Drafter) -> None:
        if not isinstance(drafter, Drafter):
            raise PluginContractError(
                f"plugin {self.plugin_name!r} ({self.dist_label}) called register() with "
                f"{type(drafter).__name__}; expected vllm_spec_plugins.Drafter",
                plugin_name=self.plugin_name,
                dist=self.dist_label,
            )
        self.drafters.append(replace(drafter, plugin=self.plugin_name, dist_label=self.dist_label, api=self.api))


def _dist_of(ep: Any) -> tuple[str | None, str | None]:
    dist = getattr(ep, "dist", None)
    if dist is None:
        return None, None
    return dist.metadata["Name"], dist.version


def _fix_hint(name: str, dist: str | None) -> str:
    others = ""
    allow = allowed_names()
    keep = sorted((allow or set()) - {name})
    others = ",".join(keep)
    skip = f"set {ENV_ALLOW}={others!r} to skip it" if allow is not None else (
        f"set {ENV_ALLOW} to a comma-separated list of the plugins you use to skip it"
    )
    uninstall = f", or `pip uninstall {dist}`" if dist else ""
    return f"Fix the plugin (upgrade it or vllm-spec-plugins), {skip}{uninstall}."


class PluginHost:
    """The discovered plugins of one process."""

    def __init__(self) -> None:
        self.pm = get_plugin_manager()
        self.plugins: dict[str, PluginInfo] = {}
        self.by_arch: dict[str, Drafter] = {}
        self.by_model_type: dict[str, Drafter] = {}
        self.conflicts: dict[str, list[Drafter]] = {}
        self.skipped: list[str] = []
        #: Names claimed by plugins that vLLM or Transformers already serve (set by the shim, see :mod:`.owners`).
        self.shadows: list[Shadow] = []
        #: ``"architecture:X"`` / ``"model_type:Y"`` keys that select their plugin only through
        #: ``"method"`` or the checkpoint's ``vllm_spec_plugin`` stamp (names of vLLM/Transformers models).
        self.reserved: set[str] = set()

    # -- loading -------------------------------------------------------------

    def load(self, entry_points: Iterable[Any] | None = None,
             allow: set[str] | Literal["env"] | None = "env") -> PluginHost:
        """Load plugins from entry points (default: the installed ``vllm_spec_plugins`` group)."""
        if allow == "env":
            allow = allowed_names()
        eps = list(md.entry_points(group=ENTRY_POINT_GROUP)) if entry_points is None else list(entry_points)
        seen: set[str] = set()
        for ep in sorted(eps, key=lambda e: e.name):
            if ep.name in seen:
                dist, ver = _dist_of(ep)
                logger.warning("vllm_spec_plugins: plugin name %r is installed twice (%s %s); keeping the first",
                               ep.name, dist, ver)
                continue
            seen.add(ep.name)
            if allow is not None and ep.name not in allow:
                self.skipped.append(ep.name)
                continue
            self._load_one(ep)
        if allow:
            for missing in sorted(allow - seen):
                logger.warning("vllm_spec_plugins: %s names %r, but no installed plugin has that name "
                               "(installed: %s)", ENV_ALLOW, missing, ", ".join(sorted(seen)) or "none")
        return self

    def _load_one(self, ep: Any) -> None:
        dist, version = _dist_of(ep)
        label = f"{dist} {version}" if dist else "no distribution"
        try:
            obj = ep.load()
            declared = getattr(obj, "VLLM_SPEC_API", API_VERSION)
            if not isinstance(declared, int) or declared > API_VERSION:
                raise PluginContractError(
                    f"declares VLLM_SPEC_API = {declared!r}, but vllm-spec-plugins provides API version "
                    f"{API_VERSION}; upgrade vllm-spec-plugins")
            try:
                self.pm.register(obj, name=ep.name)
                self.pm.check_pending()
                registry = DrafterRegistry(ep.name, label, declared)
                impls = [i for i in self.pm.hook.vllm_spec_register_drafters.get_hookimpls()
                         if i.plugin_name == ep.name]
                for impl in impls:
                    impl.function(register=registry)
            except BaseException:
                if self.pm.has_plugin(ep.name):
                    self.pm.unregister(name=ep.name)
                raise
        except KeyboardInterrupt:
            raise
        except BaseException as e:  # noqa: BLE001 - isolate every plugin failure (SystemExit at import, argparse... included)
            err = f"{type(e).__name__}: {e}"
            self.plugins[ep.name] = PluginInfo(ep.name, ep.value, dist, version, error=err)
            logger.warning(
                "vllm_spec_plugins: skipping plugin %r (entry point %s = %s, %s): %s\n%s",
                ep.name, ep.name, ep.value, label, err, "".join(traceback.format_exception_only(type(e), e)).strip(),
            )
            return
        hooks = tuple(sorted(h.name for h in self.pm.get_hookcallers(self.pm.get_plugin(ep.name)) or ()))
        self.plugins[ep.name] = PluginInfo(ep.name, ep.value, dist, version, tuple(registry.drafters), hooks=hooks)
        for d in registry.drafters:
            self._index(d)

    def _index(self, d: Drafter) -> None:
        keys = [("architecture", a, self.by_arch) for a in d.architectures]
        if d.model_type:
            keys.append(("model_type", d.model_type, self.by_model_type))
        for what, key, table in keys:
            other = table.get(key)
            ckey = f"{what}:{key}"
            if ckey in self.conflicts:
                self.conflicts[ckey].append(d)
            elif other is not None and other.plugin != d.plugin:
                self.conflicts[ckey] = [other, d]
                del table[key]
                logger.warning("vllm_spec_plugins: %s", self._conflict_message(ckey))
            else:
                table[key] = d

    def _conflict_message(self, ckey: str) -> str:
        what, key = ckey.split(":", 1)
        who = " and ".join(f"{d.culprit()}" for d in self.conflicts[ckey])
        names = ",".join(sorted({d.plugin for d in self.conflicts[ckey]}))
        return (f"{what} {key!r} is claimed by {who}. Keep one: uninstall the other, or set "
                f"{ENV_ALLOW} to the one you want (one of {names}).")

    # -- lookups -------------------------------------------------------------

    @property
    def drafters(self) -> list[Drafter]:
        return [d for p in self.plugins.values() for d in p.drafters]

    @property
    def broken(self) -> list[PluginInfo]:
        return [p for p in self.plugins.values() if p.error]

    def check_alias(self, alias: str) -> bool:
        """True if ``alias`` names a loaded plugin; raise if it names a broken one."""
        info = self.plugins.get(alias)
        if info is None:
            return False
        if info.error:
            raise self.load_error(info)
        return True

    def load_error(self, info: PluginInfo) -> PluginLoadError:
        return PluginLoadError(
            f"vllm_spec_plugins: the draft needs plugin {info.name!r} (entry point {info.name} = {info.value}, "
            f"{info.dist_label}), which failed to load: {info.error}. {_fix_hint(info.name, info.dist)}",
            plugin_name=info.name, dist=info.dist_label)

    def select(self, architectures: Iterable[str] = (), model_type: str | None = None,
               alias: str | None = None) -> Drafter | None:
        """The drafter serving a draft config, or ``None`` when no plugin claims it.

        Raises:
            DuplicateArchitectureError: two plugins claim it.
            PluginContractError: ``alias`` names a plugin that does not serve this config.
        """
        archs = list(architectures or ())
        for a in archs:
            if f"architecture:{a}" in self.conflicts:
                raise DuplicateArchitectureError(self._conflict_message(f"architecture:{a}"))
        def usable(key: str, d: Drafter) -> bool:
            return key not in self.reserved or (alias is not None and d.plugin == alias)

        found = next((self.by_arch[a] for a in archs
                      if a in self.by_arch and usable(f"architecture:{a}", self.by_arch[a])), None)
        if found is None and model_type:
            if f"model_type:{model_type}" in self.conflicts:
                raise DuplicateArchitectureError(self._conflict_message(f"model_type:{model_type}"))
            found = self.by_model_type.get(model_type)
            if found is not None and not usable(f"model_type:{model_type}", found):
                found = None
        if alias is not None and self.check_alias(alias):
            own = self.plugins[alias].drafters
            if found is None or found.plugin != alias:
                if len(own) == 1 and not archs and not model_type:
                    return own[0]
                claimed = sorted({a for d in own for a in d.architectures})
                raise PluginContractError(
                    f"vllm_spec_plugins: speculative method {alias!r} names plugin {alias!r} "
                    f"({self.plugins[alias].dist_label}), but the draft config has architectures {archs} and "
                    f"model_type {model_type!r}; that plugin serves {claimed}. Point the draft model at a "
                    f"checkpoint of that kind, or drop \"method\" to let the config choose.",
                    plugin_name=alias, dist=self.plugins[alias].dist_label)
        return found

    def find(self, name: str, arch: str) -> Drafter | None:
        """Plugin ``name``'s drafter for architecture ``arch`` (what a worker process serves)."""
        info = self.plugins.get(name)
        if info is None or info.error:
            return None
        return next((d for d in info.drafters if arch in d.architectures), None)

    def describe_broken(self) -> str:
        if not self.broken:
            return ""
        lines = [f"plugin {p.name!r} ({p.dist_label}, entry point {p.name} = {p.value}) failed to load: {p.error}"
                 for p in self.broken]
        return "Broken spec-decode plugins, one of which may serve this draft: " + "; ".join(lines)


_HOST: PluginHost | None = None


def get_host(reload: bool = False) -> PluginHost:
    """The process-wide plugin host, loaded on first use."""
    global _HOST
    if _HOST is None or reload:
        _HOST = PluginHost().load()
    return _HOST


def list_plugins() -> list[PluginInfo]:
    return list(get_host().plugins.values())
