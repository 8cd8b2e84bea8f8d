"""Reading this package's environment variables (stdlib only)."""

from __future__ import annotations

import os
from collections.abc import Mapping

TRUE = ("1", "true", "yes", "on")
FALSE = ("0", "false", "no", "off", "")


def env_flag(name: str, env: Mapping[str, str] | None = None) -> bool:
    """A true/false variable: ``1/0``, ``true/false``, ``yes/no``, ``on/off`` (any case); unset or empty is false.

    Raises:
        ValueError: any other value, naming the variable and what it accepts.
    """
    raw = (os.environ if env is None else env).get(name)
    if raw is None:
        return False
    value = raw.strip().lower()
    if value in TRUE:
        return True
    if value in FALSE:
        return False
    raise ValueError(f"vllm_spec_plugins: {name}={raw!r} is not a true/false value; use 1 or 0 (also accepted: "
                     f"true/false, yes/no, on/off, any case)")
