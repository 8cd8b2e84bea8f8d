"""bench.lookup_choices: what the lookup's drafts would have got accepted, grouped by the choice made."""

from __future__ import annotations

import torch

from bench.lookup_choices import accepted, table, tally
from vllm_spec_plugins.runtime.lookup import LOOKUP, MODEL


def test_accepted_is_the_common_prefix():
    assert accepted([1, 2, 3], [1, 2, 4]) == 2
    assert accepted([1, 2, 3], [9, 2, 3]) == 0  # verification stops at the first wrong draft
    assert accepted([1, 2, 3], [1, 2]) == 2


def _rec(req_ids, next_pos, chosen, rates, k=3, model_k=1):
    return {"req_ids": req_ids, "drafts": torch.zeros((len(req_ids), model_k), dtype=torch.int64),
            "returned_drafts": torch.zeros((len(req_ids), k), dtype=torch.int64),
            "lookup": torch.tensor(chosen), "lookup_model_k": model_k, "lookup_next_positions": torch.tensor(next_pos),
            "lookup_rates": torch.tensor(rates)}


def test_tally_groups_matches_by_choice_and_scores_the_lookups_drafts():
    # request 0: "1 2" recurs at its end (drafts 3 1 2, then 3 1 9 followed: 2 accepted); request 1: no match
    seqs = [[1, 2, 3, 1, 2, 3, 1, 9], [5, 6, 7, 8]]
    recs = [_rec(["0-ab", "1-cd"], [4, 2], [MODEL, MODEL], [[0.6, 0.3], [0.5, 0.5]]),
            _rec(["0-ab"], [5], [LOOKUP], [[0.6, 0.7]], model_k=0),  # "2 3" recurs: drafts 1 2 3, truth 1 9: 1
            {"req_ids": ["0-ab"], "lookup": None},  # a step without drafts
            _rec(["0-ab"], [7], [LOOKUP], [[0.6, 0.7]])]  # the request's last token: nothing followed
    rows = tally(recs, seqs)
    assert rows == {(3, 1, "model", True): [1, 1, 2], (3, 0, "lookup", False): [1, 1, 1]}
    lines = table(rows)
    assert lines[2] == "| 3 | 0 | lookup | no | 1 | 100% | 1.00 of 3 |"
    assert lines[3] == "| 3 | 1 | model | yes | 1 | 100% | 2.00 of 3 |"
