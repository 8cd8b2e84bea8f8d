"""The rows an attention drafter keeps from skipped first passes (runtime/catchup.py): bookkeeping and the variable."""

from __future__ import annotations

import pytest
import torch

from vllm_spec_plugins.runtime.catchup import (
    DEFAULT_ROWS,
    ENV_CATCHUP,
    ENV_KV_ONLY,
    KeptRows,
    catchup_rows,
    kv_only_enabled,
)


def _kept(max_reqs=3, rows=2, width=4) -> KeptRows:
    return KeptRows(max_reqs, rows, width, torch.float32, torch.device("cpu"))


def _keep(k: KeptRows, req_ids: list[str], step: int) -> None:
    """One skipped step: request i's row holds token 100*step+i, position step, slot 10*step+i, hidden step."""
    n = len(req_ids)
    k.keep(req_ids, torch.tensor([100 * step + i for i in range(n)], dtype=torch.int32),
           torch.full((n,), step), torch.tensor([10 * step + i for i in range(n)]),
           torch.full((n, 4), float(step)))


def test_rows_come_back_request_by_request_in_the_batch_order_of_the_catch_up_step():
    k = _kept()
    _keep(k, ["a", "b"], 1)
    _keep(k, ["b", "a"], 2)  # the batch order may change between steps
    taken = k.take(["x", "a", "b"])  # x holds nothing; a is batch row 1, b row 2
    assert taken is not None and (taken.batch_rows, taken.counts) == ([1, 2], [2, 2])
    assert k.token_ids[taken.index].tolist() == [100, 201, 101, 200]  # a: steps 1, 2; then b
    assert k.positions[taken.index].tolist() == [1, 2, 1, 2]
    assert k.slots[taken.index].tolist() == [10, 21, 11, 20]
    assert k.hidden[taken.index][:, 0].tolist() == [1.0, 2.0, 1.0, 2.0]
    assert len(k) == 0 and k.take(["a", "b"]) is None  # taken rows are forgotten


def test_a_request_at_its_limit_or_no_free_slot_stops_keeping():
    k = _kept(max_reqs=2, rows=2)
    _keep(k, ["a"], 1)
    assert k.can_keep(["a", "b"])
    _keep(k, ["a", "b"], 2)
    assert not k.can_keep(["a", "b"])  # a holds 2 of 2 rows: it must be caught up first
    assert not k.can_keep(["c"])  # both slots are held
    k.drop("a")  # finished or preempted: its slot is free again, its rows gone
    assert k.can_keep(["b", "c"]) and list(k.where) == ["b"]
    _keep(k, ["b", "c"], 3)
    taken = k.take(["c", "b"])
    assert taken is not None and taken.counts == [1, 2] and k.positions[taken.index].tolist() == [3, 2, 3]


def test_rows_per_request_from_the_environment():
    assert catchup_rows({}) == DEFAULT_ROWS == 16
    assert catchup_rows({ENV_CATCHUP: " 0 "}) == 0 and catchup_rows({ENV_CATCHUP: "64"}) == 64
    for bad in ("-1", "4097", "many", "1.5"):
        with pytest.raises(ValueError, match=rf"{ENV_CATCHUP}={bad!r} is not a whole number from 0 to 4096"):
            catchup_rows({ENV_CATCHUP: bad})


def test_kv_only_from_the_environment():
    """On unless set to a false value; anything else is refused, naming the variable."""
    assert kv_only_enabled({}) and kv_only_enabled({ENV_KV_ONLY: ""}) and kv_only_enabled({ENV_KV_ONLY: "1"})
    assert not kv_only_enabled({ENV_KV_ONLY: "0"}) and not kv_only_enabled({ENV_KV_ONLY: " off "})
    with pytest.raises(ValueError, match=rf"{ENV_KV_ONLY}='maybe' is not a true/false value; use 1 or 0"):
        kv_only_enabled({ENV_KV_ONLY: "maybe"})


def _keep_verified(k: KeptRows, req_ids: list[str], counts: list[int], first_positions: list[int], step: int) -> None:
    """A skipped step that verified drafts: request i keeps counts[i] rows at positions first_positions[i]...;
    row j of request i holds token 100*step+10*i+j and that position."""
    tokens = [100 * step + 10 * i + j for i, n in enumerate(counts) for j in range(n)]
    positions = [p + j for p, n in zip(first_positions, counts) for j in range(n)]
    T = len(tokens)
    k.keep(req_ids, torch.tensor(tokens, dtype=torch.int32), torch.tensor(positions), torch.tensor(positions),
           torch.zeros((T, 4)), counts=counts, first_positions=first_positions)


def test_rows_of_a_step_that_verified_drafts_are_trimmed_to_the_accepted_ones():
    k = _kept(max_reqs=3, rows=8)
    _keep(k, ["a", "b"], 5)  # a plain step first: one row each at position 5
    _keep_verified(k, ["a", "b", "c"], [4, 1, 3], [6, 6, 20], step=2)  # a verified 3 drafts, b none, c 2
    assert k.pending == {"a": (1, 6, 4), "c": (0, 20, 3)}  # b's single row is sure
    assert not k.can_keep(["a"], [4])  # a holds 5 rows until trimmed: 5 + 4 > 8
    # the next step: a accepted one draft (now at position 8: rows at 6 and 7 hold), c all of its two (23)
    assert k.settle(["c", "a", "b"], [23, 8, 7]) == 2 and not k.pending
    assert k.can_keep(["a"], [4])  # 3 rows now
    taken = k.take(["a", "b", "c"])
    assert taken is not None and taken.counts == [3, 2, 3]
    assert k.positions[taken.index].tolist() == [5, 6, 7, 5, 6, 20, 21, 22]  # contiguous per request
    assert k.token_ids[taken.index].tolist() == [500, 200, 201, 501, 210, 220, 221, 222]


def test_a_pending_request_is_trimmed_before_its_rows_are_taken_or_kept_on():
    k = _kept(max_reqs=2, rows=8)
    _keep_verified(k, ["a"], [4], [10], step=1)
    with pytest.raises(RuntimeError, match="request 'a' were not trimmed"):
        k.take(["a"])
    k.settle(["b"], [3])  # a request holding nothing: nothing to do
    assert k.settle(["a"], [11]) == 3  # every draft rejected: the verified token's row alone
    _keep(k, ["a"], 11)  # the next plain step appends after it
    taken = k.take(["a"])
    assert taken is not None and k.positions[taken.index].tolist() == [10, 11]
    _keep_verified(k, ["a"], [3], [12], step=2)
    k.drop("a")  # finished while pending
    assert not k.pending and len(k) == 0
