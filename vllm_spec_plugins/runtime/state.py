"""Per-request carried state, keyed by request id (never by batch row)."""

from __future__ import annotations

import logging

import torch

logger = logging.getLogger("vllm.spec_plugins")


class StatePool:
    """Device tensors ``[capacity + 1, *shape]`` per state, one slot per live request.

    The last row is scratch. Slots are allocated (and initialised) when a request
    is first seen, kept across steps and preemption (or re-initialised, per
    policy), and freed when the request finishes or aborts. Capacity starts at
    twice the engine's max number of sequences (preempted requests keep their
    slot) and grows, outside any graph, only if more requests are alive at once.
    """

    def __init__(self, specs: list[tuple[str, tuple[int, ...], torch.dtype, float, str]], capacity: int,
                 device: torch.device) -> None:
        self.specs = specs
        self.device = device
        self.capacity = capacity
        self.tensors: dict[str, torch.Tensor] = {
            name: torch.full((capacity + 1, *shape), init, dtype=dtype, device=device)
            for name, shape, dtype, init, _ in specs
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
            t = torch.full((new_cap + 1, *shape), init, dtype=dtype, device=self.device)
            t[: self.capacity].copy_(self.tensors[name][: self.capacity])
            self.tensors[name] = t
        self.free.extend(range(new_cap - 1, self.capacity - 1, -1))
        self.capacity = new_cap

    def _init_slot(self, slot: int) -> None:
        for name, _, _, init, _ in self.specs:
            self.tensors[name][slot].fill_(init)

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
                self.tensors[name][slot].fill_(init)
