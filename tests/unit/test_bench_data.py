"""The draft-training data stages' pure parts: self-instruct splits and cleaning, the chat question set."""

import json
import re

import pytest

from bench import self_instruct as si
from bench.run import CHAT_QUESTIONS, chat_questions


def test_task_and_topic_splits_share_nothing():
    train, held = si.split_tasks()
    assert len(held) == si.HELDOUT_TASKS and not {t[0] for t in train} & {t[0] for t in held}
    assert len(train) + len(held) == len(si.TASKS)
    words = [f"word{chr(97 + i)}{chr(97 + j)}" for i in range(26) for j in range(26)]
    tr, he = si.split_topics(words)
    assert not set(tr) & set(he) and len(tr) + len(he) == len(words)
    assert 0.08 < len(he) / len(words) < 0.25


def test_clean_keeps_the_message_only():
    assert si.clean('User: "How do volcanoes form?"') == "How do volcanoes form?"
    assert si.clean("Message - Write a short poem about the sea.") == "Write a short poem about the sea."
    assert si.clean("ok?") is None                                   # too short
    assert si.clean("Kind of message: a science question") is None  # the prompt echoed
    assert si.clean("1234 5678 9012 3456 7890 !!!! ????") is None   # not words


def test_dedup_drops_repeats_and_benchmark_overlap():
    question = "Compose an engaging travel blog post about a recent trip to Hawaii, highlighting cultural experiences"
    d = si.Dedup(si.ngrams(question))
    assert d.keep("How do I grow tomatoes on a small balcony in a cold climate?")
    assert not d.keep("How do I grow tomatoes on a small balcony in a cold climate?!")  # same normalised text
    assert not d.keep("Please compose an engaging travel blog post about a recent trip to Hawaii for me.")
    assert d.dropped == {"duplicate": 1, "chat_question_overlap": 1}


def test_meta_prompt_shows_three_examples_and_asks_for_one():
    import random

    text = si.meta_prompt(random.Random(0), "lantern", "a history question")
    assert text.count("Message:") == 4 and text.endswith("Kind of message: a history question\nMessage:")
    assert "Topic: lantern" in text


def test_chat_questions_are_mt_bench_first_turns_one_category_after_another():
    recs = [json.loads(line) for line in CHAT_QUESTIONS.read_text().splitlines() if line.strip()]
    assert len(recs) == 80
    qs = chat_questions()
    assert sorted(qs) == sorted(r["turns"][0] for r in recs)
    cat = {r["turns"][0]: r["category"] for r in recs}
    assert len({cat[q] for q in qs[:8]}) == 8 and len({cat[q] for q in qs[8:16]}) == 8


def test_keep_prefix_moves_or_truncates_the_memmap(tmp_path):
    import numpy as np

    from bench.hidden import _keep_prefix

    for n_pos in (5, 3):
        tmp, out = tmp_path / f"t{n_pos}.npy", tmp_path / f"o{n_pos}.npy"
        a = np.lib.format.open_memmap(tmp, mode="w+", dtype=np.float16, shape=(5, 4))
        a[:] = np.arange(20, dtype=np.float16).reshape(5, 4)
        a.flush()
        del a
        _keep_prefix(tmp, out, n_pos)
        assert not tmp.exists()
        assert np.array_equal(np.load(out), np.arange(20, dtype=np.float16).reshape(5, 4)[:n_pos])


def test_copy_rows_copies_the_first_n_rows_in_chunks():
    import numpy as np

    from bench.hidden import _copy_rows

    src = np.arange(20, dtype=np.float16).reshape(10, 2)
    dst = np.full((12, 2), -1, dtype=np.float16)
    _copy_rows(dst, src, 7, chunk=3)  # chunks of 3, 3 and 1 rows
    assert (dst[:7] == src[:7]).all() and (dst[7:] == -1).all()


def test_hidden_resume_keeps_only_a_prefill_of_the_same_records_and_settings(tmp_path):
    import torch

    from bench.hidden import resumable

    recs = [{"id": i, "prompt_ids": [1] * (2 + i), "answer_ids": [5] * 3} for i in range(4)]
    assert resumable(tmp_path, recs, [2, 15], True) == 0  # nothing there yet
    torch.save({"ids": torch.tensor([0, 1]), "offsets": torch.tensor([0, 5, 11]), "aux_layers": [2, 15]},
               tmp_path / "hidden_index.pt")
    (tmp_path / "hidden_meta.json").write_text(json.dumps({"bf16": True}))
    assert resumable(tmp_path, recs, [2, 15], True) == 2
    for args, culprit in [((recs, [2, 27], True), "--aux-layers [2, 15], this run [2, 27]"),
                          ((recs, [2, 15], False), "ran with --bf16, this run without"),
                          ((recs[1:], [2, 15], True), "not the first 2 of --data"),
                          ((recs[:1], [2, 15], True), "not the first 2 of --data"),
                          (([dict(recs[0], answer_ids=[5] * 4), *recs[1:]], [2, 15], True),
                           "other sequence lengths")]:
        with pytest.raises(SystemExit, match=re.escape(culprit)):
            resumable(tmp_path, *args)


def test_set_lr_warms_up_then_decays_to_a_tenth():
    import torch

    from bench.draft_data import set_lr

    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    assert set_lr(opt, 1.0, 0, 10, 100) == 0.1 and opt.param_groups[0]["lr"] == 0.1  # warm-up
    assert abs(set_lr(opt, 1.0, 9, 10, None) - 1.0) < 1e-9                           # not planned yet
    assert abs(set_lr(opt, 1.0, 50, 10, 100) - 0.55) < 1e-9                          # half way: cosine midpoint
    assert abs(set_lr(opt, 1.0, 100, 10, 100) - 0.1) < 1e-9


def test_expected_accepted_is_the_sum_of_running_products():
    from bench.draft_data import expected_accepted

    res = {"step1_top1": 0.5, "step2_top1": 0.4, "step3_top1": 0.5}
    assert expected_accepted(res, 3) == 0.8 and expected_accepted(res, 1) == 0.5  # 0.5 + 0.5*0.4 + 0.5*0.4*0.5


def test_train_eagle_load_saved_round_trips_and_refuses_other_layouts():
    """``bench.train_eagle --evaluate`` loads a saved EAGLE-1 draft as the trainer saved it, and refuses a file with
    a tensor missing or one it does not know (else the random init would be scored silently)."""
    import torch

    from bench.train_eagle import EagleDraft, draft_config, load_saved, saved_tensors

    target = {"hidden_size": 32, "intermediate_size": 48, "num_attention_heads": 4, "num_key_value_heads": 2,
              "num_hidden_layers": 2, "vocab_size": 64, "max_position_embeddings": 64, "rms_norm_eps": 1e-5}
    cfg = draft_config(target)
    torch.manual_seed(0)
    model = EagleDraft(cfg)
    tensors = saved_tensors(model)
    emb, hid, pos = torch.randn(1, 5, 32), torch.randn(1, 5, 32), torch.arange(5)[None]
    with torch.no_grad():
        assert torch.allclose(load_saved(cfg, tensors)(emb, hid, pos), model(emb, hid, pos), atol=1e-2)  # float16
    with pytest.raises(SystemExit, match=r"missing \['fc.bias'\]"):
        load_saved(cfg, {k: v for k, v in tensors.items() if k != "fc.bias"})
    with pytest.raises(SystemExit, match=r"unexpected tensors \['lm_head.weight'\]"):
        load_saved(cfg, {**tensors, "lm_head.weight": torch.zeros(64, 32)})
