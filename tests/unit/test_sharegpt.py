"""bench.sharegpt: the packaged ShareGPT file read record by record, and a split that shares no conversation."""

from __future__ import annotations

import json

import pytest

from bench import sharegpt


def _record(i, first, reply="A reply.", more=()):
    turns = [{"from": "human", "value": first}, {"from": "gpt", "value": reply}, *more]
    return {"id": f"c{i}", "conversations": turns}


def _write(tmp_path, records, cut=None):
    text = json.dumps(records, indent=1)
    if cut is not None:  # the packaged file is cut off inside a record
        text = text[:cut]
    p = tmp_path / "ShareGPT_V3_unfiltered_cleaned_split.json"
    p.write_text(text)
    return p


def test_reads_up_to_the_first_broken_record(tmp_path):
    recs = [_record(i, f"Question number {i} about something?") for i in range(5)]
    whole = _write(tmp_path, recs)
    assert [c.id for c in sharegpt.conversations(whole)] == [f"c{i}" for i in range(5)]
    with pytest.raises(json.JSONDecodeError):  # what a plain json.load does with the packaged file
        json.loads(json.dumps(recs, indent=1)[:-40])
    cut = _write(tmp_path, recs, cut=len(json.dumps(recs, indent=1)) - 40)  # inside the last record
    got = list(sharegpt.conversations(cut))
    assert [c.id for c in got] == [f"c{i}" for i in range(4)]
    assert got[0].first_exchange == ("Question number 0 about something?", "A reply.")


def test_first_exchange_needs_a_human_turn_then_a_reply(tmp_path):
    p = _write(tmp_path, [{"id": "g", "conversations": [{"from": "gpt", "value": "hi"}, {"from": "human",
                                                                                      "value": "hello"}]},
                          {"id": "e", "conversations": [{"from": "human", "value": "x"}, {"from": "gpt", "value": " "}]},
                          _record(3, "A proper question here?")])
    assert [c.first_exchange is not None for c in sharegpt.conversations(p)] == [False, False, True]


def test_split_is_disjoint_and_keeps_duplicates_on_one_side(tmp_path):
    recs = [_record(i, f"Tell me about topic {i}, please.") for i in range(600)]
    recs += [_record(1000 + i, f"  tell me ABOUT topic {i},   please.") for i in range(600)]  # same, other ids
    p = _write(tmp_path, recs)
    train = [q for q, _ in sharegpt.exchanges(p, "train")]
    held = [q for q, _ in sharegpt.exchanges(p, "heldout")]
    assert len(train) + len(held) == 600  # each distinct first message once
    norm = {" ".join(q.lower().split()) for q in train}
    assert not norm & {" ".join(q.lower().split()) for q in held}
    assert 0 < len(held) < 40  # about 2 %
    assert all(sharegpt.is_heldout(q) for q in held) and not any(sharegpt.is_heldout(q) for q in train)
    prompts = sharegpt.heldout_prompts(p)
    assert prompts == sharegpt.heldout_prompts(p) and set(prompts) <= {q.strip() for q in held}
    assert sharegpt.heldout_prompts(p, n=3) == prompts[:3]
    with pytest.raises(ValueError, match="split must be 'train' or 'heldout'"):
        list(sharegpt.exchanges(p, "test"))


def test_prompts_skip_what_a_chat_benchmark_cannot_send(tmp_path):
    assert sharegpt._usable_prompt("How do plants make their food from sunlight?")
    assert not sharegpt._usable_prompt("hi")  # too short to be a request
    assert not sharegpt._usable_prompt("x" * 2001)  # leaves no room for an answer in 2048 tokens
    assert not sharegpt._usable_prompt("请解释一下光合作用的过程以及它的重要性")  # not English (SmolLM2 is)
