"""Per-request carried state, keyed by request id (never by batch row)."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

import torch

from ..api import Drafter, Source
from ..errors import PluginContractError

if TYPE_CHECKING:
    from .inputs import Binding

logger = logging.getLogger("vllm.spec_plugins")

#: API-2 sources describing the step's scheduled tokens (filled by :func:`fill_token_source`).
TOKEN_SOURCES = (Source.TOKEN_IDS_ALL, Source.NUM_SCHEDULED_TOKENS, Source.NUM_REJECTED)

#: One carried state as the pool keeps it: name, shape, dtype, initial value (a number, or a tensor once
#: :meth:`StatePool.set_init` read it from the model), ``on_preempt`` policy.
StateRow = tuple[str, tuple[int, ...], torch.dtype, float | torch.Tensor, str]


def sees_tokens(bindings: list[Binding]) -> bool:
    """A state-carry hook reading the scheduled tokens is applied to every row, partial prefills included."""
    return any(b.source in TOKEN_SOURCES for b in bindings)


def fill_token_source(key: Source, buf: torch.Tensor, step: dict[str, Any], B: int, T: int) -> None:
    """Fill the static buffer of a :data:`TOKEN_SOURCES` source from what ``propose`` received."""
    if key is Source.TOKEN_IDS_ALL:
        buf[:T].copy_(step["target_token_ids"][:T])
    elif key is Source.NUM_SCHEDULED_TOKENS:
        qsl = step["query_start_loc"]
        buf[:B].copy_(qsl[1:B + 1] - qsl[:B])
    elif step.get("num_rejected") is not None:  # NUM_REJECTED; None: no drafts were verified this step
        buf[:B].copy_(step["num_rejected"][:B])
    else:
        buf[:B].zero_()


def token_requests(query_start_loc: torch.Tensor, arange: torch.Tensor, B: int, T: int) -> torch.Tensor:
    """The batch row of the request each of the step's ``T`` token rows belongs to (requests' tokens are
    consecutive, ``query_start_loc[:B + 1]`` their bounds; ``arange`` holds at least ``0..T-1``). On the device, no
    host sync."""
    qsl = query_start_loc[1:B + 1]
    return torch.searchsorted(qsl, arange[:T].to(qsl.dtype), right=True).clamp_(max=B - 1)


class IndexStaging:
    """Small int64 index lists (request slots, rows) copied to the device every step without a host sync.

    The host writes a pinned buffer and the device copies from it asynchronously. Async scheduling runs the host
    up to a step ahead of the device, so a pinned buffer written again at once could change under a copy still
    queued: the buffers are used in turn, and before one is written again the host waits for the event recorded
    after its last copy (on the device that copy ran long ago, so the wait is free). Off an accelerator the copies
    are synchronous and there are no events. One device buffer holds the result: the device reads it before the
    next copy into it, in stream order."""

    def __init__(self, n: int, device: torch.device, *, buffers: int = 2, event: Any = None) -> None:
        from vllm.utils.torch_utils import is_pin_memory_available

        pin = is_pin_memory_available() and device.type != "cpu"
        self._host = [torch.zeros(n, dtype=torch.int64, pin_memory=pin) for _ in range(buffers)]
        self._dev = torch.zeros(n, dtype=torch.int64, device=device)
        if event is None and device.type == "cuda":
            event = torch.cuda.Event
        self._events = [event() for _ in range(buffers)] if event is not None else None
        self._turn = 0

    def __call__(self, values: list[int]) -> torch.Tensor:
        """``values`` on the device (a view of the device buffer, valid until the next call)."""
        n = len(values)
        i = self._turn
        self._turn = (i + 1) % len(self._host)
        if self._events is not None:
            self._events[i].synchronize()  # the last copy from this buffer has run
        host = self._host[i]
        host[:n] = torch.tensor(values, dtype=torch.int64)
        out = self._dev[:n]
        out.copy_(host[:n], non_blocking=True)
        if self._events is not None:
            self._events[i].record()
        return out


def _init_value(init: float | torch.Tensor, rows: int, shape: tuple[int, ...], dtype: torch.dtype,
                device: torch.device) -> torch.Tensor:
    if isinstance(init, torch.Tensor):
        return init.to(device=device, dtype=dtype).expand(rows, *shape).clone()
    return torch.full((rows, *shape), init, dtype=dtype, device=device)


def resolve_inits(pool: StatePool, model: Any, attrs: dict[str, str], d: Drafter) -> None:
    """API 2 ``StateSpec(init="<attribute>")``: read each initial state from the loaded draft model."""
    for name, attr in attrs.items():
        value = getattr(model, attr, None)
        if callable(value) and not isinstance(value, torch.Tensor):
            value = value()
        spec = next(s for s in pool.specs if s[0] == name)
        shape = spec[1]
        if not isinstance(value, torch.Tensor):
            raise PluginContractError(
                f"vllm_spec_plugins: {d.culprit()}: state {name!r} is initialised from "
                f"{d.model_class}.{attr}, which is {type(value).__name__}; expected a tensor (parameter or buffer) "
                f"or a method returning one", plugin_name=d.plugin, dist=d.display_dist)
        try:  # the value must broadcast *to* the state's shape (not merely with it)
            # (torch.broadcast_shapes has no annotations: the ignore below is for that alone)
            if len(value.shape) > len(shape) or torch.broadcast_shapes(  # type: ignore[no-untyped-call]
                    tuple(value.shape), tuple(shape)) != tuple(shape):
                raise RuntimeError
        except RuntimeError:
            raise PluginContractError(
                f"vllm_spec_plugins: {d.culprit()}: state {name!r} has shape {list(shape)}, "
                f"but its initial value {d.model_class}.{attr} has shape {list(value.shape)}",
                plugin_name=d.plugin, dist=d.display_dist) from None
        pool.set_init(name, value.detach())


class StatePool:
    """Device tensors ``[capacity + 1, *shape]`` per state, one slot per live request.

    The last row is scratch. Slots are allocated (and initialised) when a request
    is first seen, kept across steps and preemption (or re-initialised, per
    policy), and freed when the request finishes or aborts. Capacity starts at
    twice the engine's max number of sequences (preempted requests keep their
    slot) and grows, outside any graph, only if more requests are alive at once.
    """

    def __init__(self, specs: list[StateRow], capacity: int, device: torch.device) -> None:
        self.specs = specs
        self.device = device
        self.capacity = capacity
        self.tensors: dict[str, torch.Tensor] = {
            name: _init_value(init, capacity + 1, shape, dtype, device) for name, shape, dtype, init, _ in specs
        }
        self.slot_of: dict[str, int] = {}
        self.free: list[int] = list(range(capacity - 1, -1, -1))

    @property
    def scratch(self) -> int:
        return self.capacity

    def __len__(self) -> int:
        return len(self.slot_of)

    def _grow(self) -> None:
        extra = max(1, self.capacity // 2)
        new_cap = self.capacity + extra
        logger.info("vllm_spec_plugins: growing carried-state pool from %d to %d requests", self.capacity, new_cap)
        for name, shape, dtype, init, _ in self.specs:
            t = _init_value(init, new_cap + 1, shape, dtype, self.device)
            t[: self.capacity].copy_(self.tensors[name][: self.capacity])
            self.tensors[name] = t
        self.free.extend(range(new_cap - 1, self.capacity - 1, -1))
        self.capacity = new_cap

    def _init_slot(self, slot: int) -> None:
        for name, _, _, init, _ in self.specs:
            self._fill(name, slot, init)

    def _fill(self, name: str, slot: int, init: float | torch.Tensor) -> None:
        if isinstance(init, torch.Tensor):
            self.tensors[name][slot].copy_(init.expand_as(self.tensors[name][slot]))
        else:
            self.tensors[name][slot].fill_(init)

    def set_init(self, name: str, value: torch.Tensor) -> None:
        """Initialise state ``name`` from ``value`` (broadcast to its shape) from now on, live slots included."""
        self.specs = [(n, shape, dtype, value.to(device=self.device, dtype=dtype) if n == name else init, pol)
                      for n, shape, dtype, init, pol in self.specs]
        for slot in self.slot_of.values():
            self._fill(name, slot, value.to(device=self.device, dtype=self.tensors[name].dtype))

    def slots_for(self, req_ids: list[str]) -> list[int]:
        out = []
        for r in req_ids:
            slot = self.slot_of.get(r)
            if slot is None:
                if not self.free:
                    self._grow()
                slot = self.free.pop()
                self._init_slot(slot)
                self.slot_of[r] = slot
            out.append(slot)
        return out

    def release(self, req_id: str) -> None:
        slot = self.slot_of.pop(req_id, None)
        if slot is not None:
            self.free.append(slot)

    def reset(self, req_id: str, names: list[str] | None = None) -> None:
        slot = self.slot_of.get(req_id)
        if slot is None:
            return
        for name, _, _, init, _ in self.specs:
            if names is None or name in names:
                self._fill(name, slot, init)
