"""StatePool: per-request carried state keyed by request id (CPU tensors)."""

from __future__ import annotations

import pytest
import torch

from vllm_spec_plugins.runtime.state import StatePool

CPU = torch.device("cpu")


def pool(capacity=3, init_acc=0.0, init_h=-1.0):
    specs = [("acc", (3,), torch.int64, init_acc, "keep"), ("h", (2, 4), torch.float32, init_h, "reset")]
    return StatePool(specs, capacity, CPU)


def test_tensors_have_capacity_plus_scratch_row():
    p = pool(capacity=3)
    assert p.tensors["acc"].shape == (4, 3) and p.tensors["acc"].dtype == torch.int64
    assert p.tensors["h"].shape == (4, 2, 4) and p.tensors["h"].dtype == torch.float32
    assert p.scratch == 3
    assert torch.all(p.tensors["h"] == -1.0)
    assert len(p) == 0


def test_allocation_initialises_and_is_stable():
    p = pool(capacity=4, init_acc=7)
    p.tensors["acc"].fill_(99)  # garbage everywhere: allocation must re-initialise
    slots = p.slots_for(["a", "b"])
    assert len(set(slots)) == 2 and all(0 <= s < 4 for s in slots)
    assert p.scratch not in slots
    for s in slots:
        assert p.tensors["acc"][s].tolist() == [7, 7, 7]
        assert torch.all(p.tensors["h"][s] == -1.0)
    assert len(p) == 2
    # write state, then ask again in another order with a new request: same slots, values kept
    p.tensors["acc"][slots[0]] = torch.tensor([1, 2, 3])
    again = p.slots_for(["c", "b", "a"])
    assert again[1:] == [slots[1], slots[0]]
    assert again[0] not in slots
    assert p.tensors["acc"][slots[0]].tolist() == [1, 2, 3]
    assert p.slot_of == {"a": slots[0], "b": slots[1], "c": again[0]}
    assert len(p) == 3


def test_duplicate_ids_in_one_call_share_a_slot():
    p = pool()
    s = p.slots_for(["x", "x"])
    assert s[0] == s[1] and len(p) == 1


def test_release_and_reuse_reinitialises():
    p = pool(capacity=2, init_acc=5)
    (sa,) = p.slots_for(["a"])
    p.tensors["acc"][sa] = torch.tensor([1, 1, 1])
    p.tensors["h"][sa] = 3.0
    p.release("a")
    assert len(p) == 0 and "a" not in p.slot_of
    p.release("a")  # releasing twice / unknown ids is harmless
    p.release("never-seen")
    assert len(p) == 0
    (sb,) = p.slots_for(["b"])
    assert sb == sa  # the freed slot is reused
    assert p.tensors["acc"][sb].tolist() == [5, 5, 5]
    assert torch.all(p.tensors["h"][sb] == -1.0)
    # a request id coming back after release starts from init as well
    p.tensors["acc"][sb] = torch.tensor([9, 9, 9])
    p.release("b")
    (sb2,) = p.slots_for(["b"])
    assert p.tensors["acc"][sb2].tolist() == [5, 5, 5]


def test_reset_all_or_named():
    p = pool(capacity=2, init_acc=0, init_h=-1.0)
    (s,) = p.slots_for(["a"])
    (other,) = p.slots_for(["b"])
    for slot in (s, other):
        p.tensors["acc"][slot] = torch.tensor([4, 5, 6])
        p.tensors["h"][slot] = 2.0
    p.reset("a", ["h"])
    assert p.tensors["acc"][s].tolist() == [4, 5, 6]
    assert torch.all(p.tensors["h"][s] == -1.0)
    p.reset("a")
    assert p.tensors["acc"][s].tolist() == [0, 0, 0]
    # other requests untouched, slot kept
    assert p.tensors["acc"][other].tolist() == [4, 5, 6]
    assert torch.all(p.tensors["h"][other] == 2.0)
    assert p.slot_of["a"] == s
    p.reset("unknown")  # no-op
    assert len(p) == 2


def test_growth_keeps_existing_values():
    p = pool(capacity=2, init_acc=0)
    first = p.slots_for(["a", "b"])
    p.tensors["acc"][first[0]] = torch.tensor([1, 2, 3])
    p.tensors["acc"][first[1]] = torch.tensor([4, 5, 6])
    p.tensors["acc"][p.scratch] = torch.tensor([-9, -9, -9])  # scratch garbage must not leak into a slot
    slots = p.slots_for(["c", "d", "e"])
    assert p.capacity >= 5
    assert p.tensors["acc"].shape[0] == p.capacity + 1 == p.tensors["h"].shape[0]
    assert p.scratch == p.capacity
    assert p.slots_for(["a", "b"]) == first
    assert p.tensors["acc"][first[0]].tolist() == [1, 2, 3]
    assert p.tensors["acc"][first[1]].tolist() == [4, 5, 6]
    assert len(set(slots) | set(first)) == 5
    assert p.scratch not in slots + first
    for s in slots:
        assert p.tensors["acc"][s].tolist() == [0, 0, 0]
        assert torch.all(p.tensors["h"][s] == -1.0)
    assert len(p) == 5


def test_growth_from_capacity_one():
    p = pool(capacity=1)
    slots = p.slots_for([f"r{i}" for i in range(6)])
    assert len(set(slots)) == 6
    assert p.capacity >= 6 and p.scratch == p.capacity
    assert all(s < p.capacity for s in slots)


def test_scratch_row_never_allocated():
    p = pool(capacity=3)
    slots = p.slots_for(["a", "b", "c"])
    assert sorted(slots) == [0, 1, 2] and p.scratch == 3
    assert p.free == []


@pytest.mark.parametrize("init", [0.0, 2.5])
def test_float_init(init):
    p = StatePool([("h", (2,), torch.float32, init, "keep")], 1, CPU)
    (s,) = p.slots_for(["a"])
    assert p.tensors["h"][s].tolist() == [init, init]


def test_tensor_init_and_set_init():
    pool = StatePool([("h", (2,), torch.int64, 0.0, "reset")], 2, torch.device("cpu"))
    (a,) = pool.slots_for(["a"])
    pool.set_init("h", torch.tensor([3, 4]))
    assert pool.tensors["h"][a].tolist() == [3, 4]  # live slots take the new init
    pool.tensors["h"][a] += 1
    pool.reset("a")
    assert pool.tensors["h"][a].tolist() == [3, 4]
    (b,) = pool.slots_for(["b"])
    assert pool.tensors["h"][b].tolist() == [3, 4]
    pool.slots_for(["c", "d"])  # grows: new rows start from the tensor init too
    assert pool.capacity > 2 and pool.tensors["h"][pool.slot_of["d"]].tolist() == [3, 4]


class _FakeEvent:
    """Stands in for a CUDA event: remembers what happened to one staging buffer, in order."""

    log: list[tuple[int, str]] = []
    made = 0

    def __init__(self) -> None:
        self.id = _FakeEvent.made
        _FakeEvent.made += 1

    def record(self) -> None:
        _FakeEvent.log.append((self.id, "record"))

    def synchronize(self) -> None:
        _FakeEvent.log.append((self.id, "synchronize"))


def test_index_staging_copies_the_values_and_waits_before_reusing_a_buffer():
    """Each call hands back its values on the device; a pinned buffer is written again only after the host waited
    for the copy last made from it (async scheduling: the host may run a step ahead of the device)."""
    from vllm_spec_plugins.runtime.state import IndexStaging

    _FakeEvent.log, _FakeEvent.made = [], 0
    staging = IndexStaging(8, torch.device("cpu"), event=_FakeEvent)
    outs = [staging(v).tolist() for v in ([3, 1, 2], [5], [7, 0, 6, 4], [2, 2])]
    assert outs == [[3, 1, 2], [5], [7, 0, 6, 4], [2, 2]]
    # buffers 0, 1, 0, 1 in turn; each write waits on its buffer's event, each copy records it
    assert _FakeEvent.log == [(0, "synchronize"), (0, "record"), (1, "synchronize"), (1, "record"),
                              (0, "synchronize"), (0, "record"), (1, "synchronize"), (1, "record")]
    plain = IndexStaging(4, torch.device("cpu"))  # off an accelerator: synchronous copies, no events
    assert plain._events is None and plain([1, 2]).tolist() == [1, 2]
