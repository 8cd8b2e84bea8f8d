"""The rows an attention drafter keeps from skipped first passes (runtime/catchup.py): bookkeeping and the variable."""

from __future__ import annotations

import pytest
import torch

from vllm_spec_plugins.runtime.catchup import DEFAULT_ROWS, ENV_CATCHUP, KeptRows, catchup_rows


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
