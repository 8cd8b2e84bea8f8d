"""Config-phase patches (process 0 builds the config; the others receive it pickled).

Thin wrappers: what they decide is :mod:`vllm_spec_plugins.routing`, what they read is
:mod:`vllm_spec_plugins.checkpoint`, what they say is :mod:`vllm_spec_plugins.explain`. See
:mod:`vllm_spec_plugins.patch` for the registry of every patch.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
from collections.abc import Callable, Iterator
from typing import Any

from .._compat import has_speculator_registry
from ..checkpoint import stamp_hash_factors
from ..errors import VllmSpecPluginError
from ..explain import version_error, why_config_failed
from ..manager import PluginHost
from ..routing import (
    check_spec_tokens,
    claimed_plugin,
    fill_from_target,
    finalize_spec,
    mrv2_refusal,
    plugin_of,
    precheck_max_tokens,
    route_request,
)
from ._util import when_imported, wrap_method

logger = logging.getLogger("vllm.spec_plugins")


Wrap = Callable[[Callable[..., Any]], Callable[..., Any]]


def make_create_speculative_config(host: PluginHost, supported: bool) -> Wrap:
    def wrap(original: Callable[..., Any]) -> Callable[..., Any]:
        def create_speculative_config(self: Any, target_model_config: Any, target_parallel_config: Any) -> Any:
            cfg = self.speculative_config
            cfg = dict(cfg) if isinstance(cfg, dict) else cfg
            model = (cfg.get("model") if isinstance(cfg, dict) else None) or getattr(self, "spec_model", None)
            method = (cfg.get("method") if isinstance(cfg, dict) else None) or getattr(self, "spec_method", None)
            cfg, alias = route_request(host, cfg, model, method, supported)
            if isinstance(cfg, dict):
                self.speculative_config = cfg
            raw = {str(key).replace("-", "_"): v for key, v in cfg.items()} if isinstance(cfg, dict) else {}
            k = raw.get("num_speculative_tokens", getattr(self, "spec_tokens", None))
            user_draft_tp = raw.get("draft_tensor_parallel_size")
            if not supported:
                claimed = claimed_plugin(host, model, alias)
                if claimed:
                    raise version_error(model, claimed)
                return original(self, target_model_config, target_parallel_config)
            check_spec_tokens(k)
            precheck_max_tokens(host, model, alias, k)
            try:
                with _filling_sizes(host, alias, target_model_config):
                    spec = original(self, target_model_config, target_parallel_config)
            except VllmSpecPluginError:
                raise
            except Exception as e:
                note = why_config_failed(host, model, alias)
                if note:
                    # Ours first: vLLM's message may list hundreds of architectures.
                    raise RuntimeError(f"{note}\n\nvLLM's error: {type(e).__name__}: {e}") from e
                raise
            return finalize_spec(host, spec, alias, supported, user_draft_tp=user_draft_tp)

        return create_speculative_config

    return wrap


@contextlib.contextmanager
def _filling_sizes(host: PluginHost, alias: str | None, tmc: Any) -> Iterator[None]:
    """While vLLM builds the draft ModelConfig: fill unset sizes of a plugin draft's config from the target.

    vLLM reads ``hidden_size``/``vocab_size`` of the draft config right after loading it
    (``ModelArchitectureConfig`` requires ints), before the shim sees the SpeculativeConfig,
    so :func:`finalize_spec` is too late: the draft ModelConfig's ``get_config`` is wrapped
    for the duration of the original call.
    """
    try:
        import vllm.config.model as model_mod
    except Exception:  # noqa: BLE001
        yield
        return
    original = model_mod.get_config

    def get_config(*args: Any, **kwargs: Any) -> Any:
        hf = original(*args, **kwargs)
        path = args[0] if args else kwargs.get("model")
        revision = args[2] if len(args) > 2 else kwargs.get("revision")
        try:
            return fill_from_target(host, hf, alias, tmc, path, revision)
        except Exception:  # never worse than vLLM alone
            logger.debug("vllm_spec_plugins: could not fill draft sizes", exc_info=True)
            return hf

    model_mod.get_config = get_config
    try:
        yield
    finally:
        model_mod.get_config = original


def _unsupported_features_wrap(original: Callable[..., list[str]]) -> Callable[..., list[str]]:
    def _get_v2_model_runner_unsupported_features(self: Any) -> list[str]:
        out = original(self)
        reason = mrv2_refusal(self.speculative_config, self.parallel_config)
        if reason:
            out.append(reason)
        return out

    return _get_v2_model_runner_unsupported_features


def _compute_hash_wrap(original: Callable[..., str]) -> Callable[..., str]:
    def compute_hash(self: Any) -> str:
        base = original(self)
        name = plugin_of(self)
        if not name:
            return base
        extra = stamp_hash_factors(self.draft_model_config.hf_config)
        return hashlib.sha256("|".join([base, *extra]).encode()).hexdigest()

    return compute_hash


def apply(host: PluginHost, supported: bool) -> None:
    """Install the config-phase patches (lazily, when vLLM imports each module)."""
    def engine_args(m: Any) -> None:
        wrap_method(m.EngineArgs, "create_speculative_config", make_create_speculative_config(host, supported))

    def vllm_config(m: Any) -> None:
        wrap_method(m.VllmConfig, "_get_v2_model_runner_unsupported_features", _unsupported_features_wrap)

    def speculative(m: Any) -> None:
        wrap_method(m.SpeculativeConfig, "compute_hash", _compute_hash_wrap)

    when_imported("vllm.engine.arg_utils", engine_args)
    if not supported or has_speculator_registry():
        return  # 0.34: no V1 runner to choose, and each SpeculatorConfig adds its own hash factors
    when_imported("vllm.config.vllm", vllm_config)
    when_imported("vllm.config.speculative", speculative)
