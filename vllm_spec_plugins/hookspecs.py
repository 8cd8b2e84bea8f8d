"""Hook specifications: what a plugin may implement.

Every hook runs in every vLLM process (API server, engine core, each worker) when
the plugins are discovered, before vLLM builds its speculative config.
"""

from __future__ import annotations

import pluggy

from ._names import PROJECT_NAME
from .api import Register

hookspec = pluggy.HookspecMarker(PROJECT_NAME)


# -- discovery ---------------------------------------------------------------


@hookspec
def vllm_spec_register_drafters(register: Register) -> None:
    """Contribute one or more draft architectures.

    Called once per process when the plugins are discovered. Call ``register`` with
    one :class:`~vllm_spec_plugins.Drafter` per architecture. Keep it cheap: import
    no torch or vLLM here; name classes as ``"module:Class"`` strings instead.

    Args:
        register: callable registry (:class:`~vllm_spec_plugins.Register`); ``register(Drafter(...))``. It checks the
            registration and raises :class:`~vllm_spec_plugins.errors.PluginContractError`
            naming your plugin when something is wrong.

    Returns:
        Nothing.
    """
