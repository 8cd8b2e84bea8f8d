"""A failing drafter degrades, it does not crash: fault handling for plugin drafters (worker processes).

Every call into plugin code at run time (the draft forward, the state-carry hook,
``combine_hidden_states``, vLLM's EAGLE loop running a plugin model) goes through
:meth:`DraftGuard.run`. An exception there is logged once at ERROR, naming plugin,
distribution and version, model class and checkpoint with the original traceback;
speculation is then off for the rest of the engine's life: :meth:`DraftGuard.idle`
drafts stand in for the plugin's, the target keeps serving, every request completes
with the output it would have had without speculation (drafts are only verified, never
emitted, so what stands in for them cannot change greedy output).

Draft token ids outside the target's vocabulary would reach the target's embedding and
kill the engine. :meth:`DraftGuard.sanitize` checks them on the device with no host
sync (graph-safe: fixed-shape tensor ops into a persistent flag): out-of-range ids are
replaced by token 0 in that step (still a valid draft, merely rejected), the flag is
copied to the host without blocking, and the next step reads it (:meth:`DraftGuard.poll`,
after a CUDA event says the copy landed) and turns speculation off the same way.

What "off" means for vLLM's scheduler:

* sync scheduling (the CPU build, and GPU with async scheduling off): the proposer
  returns ``[num_reqs, 0]`` drafts; the runner hands the scheduler empty draft lists, so
  no draft is scheduled or verified again and the ``vllm:spec_decode_*`` counters stop.
* async scheduling (GPU default for ``draft_model``/``eagle``): the scheduler has already
  reserved ``k`` placeholder slots per request before the drafts exist, and the runner
  scatters ``draft_token_ids.flatten()[prev_index * width + j]`` into them
  (``GPUModelRunner._prepare_input_ids``), with ``width`` the returned tensor's second
  dimension: a ``[num_reqs, 0]`` tensor would be indexed out of range. The proposer
  therefore returns ``[num_reqs, k]`` copies of each request's next token: valid ids,
  verified and mostly rejected, output unchanged; the scheduler keeps scheduling ``k``
  drafts, so the spec-decode counters keep growing (with acceptance near zero) while
  the engine serves. Not run here (no GPU on the test machine).

``VLLM_SPEC_PLUGINS_STRICT=1`` re-raises instead (for plugin authors' tests: the engine
then fails as it would without the guard, with the plugin named).
"""

from __future__ import annotations

import logging
import traceback
from collections.abc import Callable
from typing import Any

import torch

from .._env import env_flag
from .._names import ENV_STRICT
from ..api import Drafter

logger = logging.getLogger("vllm.spec_plugins")


def strict() -> bool:
    """``VLLM_SPEC_PLUGINS_STRICT`` (a true/false variable; anything else raises, naming it)."""
    return env_flag(ENV_STRICT)


class DraftGuard:
    """Per-proposer fault state: turned off for good after the first plugin failure."""

    def __init__(self, drafter: Drafter, *, model_class: str, checkpoint: str, vocab_size: int,
                 device: torch.device, async_scheduling: bool) -> None:
        self.drafter = drafter
        self.model_class = model_class
        self.checkpoint = checkpoint
        self.vocab_size = int(vocab_size)
        self.device = device
        self.async_scheduling = bool(async_scheduling)
        self.strict = strict()  # read once, at start-up: a bad value refuses the engine, naming the variable
        self.disabled = False
        self.reason: str | None = None
        # Out-of-range flag: device side (written inside the propose path), host copy, copy event.
        self.flag = torch.zeros(1, dtype=torch.int32, device=device)
        pin = device.type == "cuda"
        self.flag_host = torch.zeros(1, dtype=torch.int32, pin_memory=pin)
        # (torch.cuda.Event's constructor and query() have no annotations)
        self.event = torch.cuda.Event() if device.type == "cuda" else None  # type: ignore[no-untyped-call]
        self._flag_pending = False

    # -- identity --------------------------------------------------------------

    def who(self) -> str:
        d = self.drafter
        return (f"{d.culprit()}, model class {self.model_class}, "
                f"draft '{self.checkpoint}'")

    # -- failures --------------------------------------------------------------

    def fail(self, what: str, exc: BaseException | None = None) -> None:
        """Turn speculation off for good; log once at ERROR; re-raise in strict mode."""
        if self.strict:
            if exc is not None:
                raise exc
            raise RuntimeError(f"vllm_spec_plugins: {what} ({self.who()}); {ENV_STRICT} is set")
        if self.disabled:
            return
        self.disabled = True
        self.reason = what
        tb = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__)) if exc is not None else ""
        logger.error(
            "vllm_spec_plugins: %s: %s. Speculative decoding is now OFF for the rest of this engine's life; "
            "the target keeps serving every request (output as without speculation). Fix or upgrade the plugin, "
            "or run without the draft; set %s=1 to make this fatal while testing the plugin.%s",
            self.who(), what, ENV_STRICT, ("\nOriginal error:\n" + tb.rstrip()) if tb else "")

    def run(self, what: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> tuple[bool, Any]:
        """Call plugin code; ``(True, result)``, or ``(False, None)`` after a failure (then disabled)."""
        try:
            return True, fn(*args, **kwargs)
        except KeyboardInterrupt:
            raise
        except BaseException as e:  # noqa: BLE001 - any plugin failure degrades, SystemExit included
            self.fail(f"{what} raised {type(e).__name__}: {e}", e)
            return False, None

    # -- drafts ----------------------------------------------------------------

    def idle(self, B: int, k: int, next_token_ids: torch.Tensor) -> torch.Tensor:
        """The drafts that stand in once speculation is off (see the module docstring)."""
        if not self.async_scheduling or k == 0:
            return torch.empty((B, 0), dtype=torch.int64, device=next_token_ids.device)
        return next_token_ids[:B].to(torch.int64).unsqueeze(1).expand(B, k).contiguous()

    def sanitize(self, drafts: torch.Tensor) -> torch.Tensor:
        """Replace ids outside ``[0, vocab)`` by 0 and record that it happened; no host sync."""
        if drafts.numel() == 0:
            return drafts
        bad = (drafts < 0) | (drafts >= self.vocab_size)
        torch.maximum(self.flag, bad.any().to(self.flag.dtype).view(1), out=self.flag)
        out = torch.where(bad, torch.zeros_like(drafts), drafts)
        self.flag_host.copy_(self.flag, non_blocking=True)
        if self.event is not None:
            self.event.record()
        self._flag_pending = True
        return out

    def poll(self) -> None:
        """Read the host copy of the out-of-range flag once its copy has landed (never waits)."""
        if not self._flag_pending or self.disabled:
            return
        if self.event is not None and not self.event.query():  # type: ignore[no-untyped-call]  # unannotated
            return
        if int(self.flag_host[0]) != 0:
            self._flag_pending = False
            self.fail(f"proposed draft token ids outside the target's vocabulary [0, {self.vocab_size}) "
                      f"(they were replaced before reaching the target)")
