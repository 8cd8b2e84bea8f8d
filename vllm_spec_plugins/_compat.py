"""Which vLLM is installed, and whether this package supports it (read by the shim, the config patch and
``doctor``; imports nothing of vLLM but its version)."""

from __future__ import annotations

from ._env import env_flag
from ._names import ENV_SKIP_VERSION_CHECK, SUPPORTED_VLLM

__all__ = ["has_speculator_registry", "supported_text", "version_supported", "vllm_version"]


def vllm_version() -> tuple[str, tuple[int, int] | None]:
    """The installed vLLM version string and its (major, minor), without importing vllm's heavy modules."""
    try:
        from vllm import __version__ as ver
    except Exception:  # noqa: BLE001 - pragma: no cover - vllm missing or broken
        return "not installed", None
    parts = ver.split(".")
    try:
        return ver, (int(parts[0]), int(parts[1]))
    except (ValueError, IndexError):
        return ver, None


def version_supported(minor: tuple[int, int] | None) -> bool:
    if env_flag(ENV_SKIP_VERSION_CHECK):
        return True
    return minor in SUPPORTED_VLLM


def supported_text() -> str:
    names = [f"{a}.{b}" for a, b in SUPPORTED_VLLM]
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


#: The first vLLM with a speculator registry (``register_speculative_method``) and without the V1 runner.
REGISTRY_VLLM = (0, 34)


def has_speculator_registry(minor: tuple[int, int] | None = None) -> bool:
    """Whether the installed vLLM (or ``minor``) builds speculators from its registry (0.34 on): the shim then
    declares plugin drafters to it (:mod:`vllm_spec_plugins.speculators`) instead of patching the runner's
    ``init_speculator``."""
    if minor is None:
        minor = vllm_version()[1]
    return minor is not None and minor >= REGISTRY_VLLM
