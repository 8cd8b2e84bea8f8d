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


def _tiny_eagle1():
    import torch

    from bench.train_eagle import EagleDraft, draft_config

    target = {"hidden_size": 32, "intermediate_size": 48, "num_attention_heads": 4, "num_key_value_heads": 2,
              "num_hidden_layers": 2, "vocab_size": 64, "max_position_embeddings": 64, "rms_norm_eps": 1e-5}
    cfg = draft_config(target)
    torch.manual_seed(0)
    return cfg, EagleDraft(cfg)


def test_train_eagle_evaluate_with_a_draft_vocabulary():
    """Offline accuracy as the plugin serves a draft vocabulary (d2t): the argmax over the vocabulary's lm_head rows,
    mapped back to target ids; a label outside it is never right. A permuted full vocabulary scores as the full
    head (the mapping back is checked), one without the labels scores 0 with coverage 0."""
    import numpy as np
    import torch

    from bench.draft_data import HiddenData
    from bench.train_eagle import evaluate

    _, model = _tiny_eagle1()
    g = torch.Generator().manual_seed(1)
    lens = [9, 12, 7]
    n = sum(lens)
    data = HiddenData(hidden=np.asarray(torch.randn(n, 32, generator=g), dtype=np.float16),
                      tokens=torch.randint(0, 64, (n,), generator=g), targets=torch.randint(0, 3, (n,), generator=g),
                      offsets=torch.tensor([0, 9, 21, 28]), prompt_lens=torch.tensor([2, 3, 2]),
                      train_seqs=[0, 1, 2], val_seqs=[])
    w = torch.randn(64, 32, generator=g)
    w[:3] *= 20  # the draft mostly says 0, 1 or 2, as the labels: some are right
    full = evaluate(model, data, [0, 1, 2], w, w, 2)
    assert full["step1_top1"] > 0 and "draft_vocab_coverage" not in full
    permuted = evaluate(model, data, [0, 1, 2], w, w, 2, vocab=torch.randperm(64, generator=g))
    assert {k: v for k, v in permuted.items() if k != "draft_vocab_coverage"} == full
    assert permuted["draft_vocab_coverage"] == 1.0
    none = evaluate(model, data, [0, 1, 2], w, w, 2, vocab=torch.arange(3, 64))  # no label
    assert none["step1_top1"] == 0 and none["step2_top1"] == 0 and none["draft_vocab_coverage"] == 0


def _vocab_source(draft, vocab_size=64):
    """A draft folder holding only a draft vocabulary of target ids 1, 5, 6 and 40 of a target of ``vocab_size``
    (d2t, t2d): what ``--draft-vocab-from`` reads. Returns its t2d."""
    import torch
    from safetensors.torch import save_file

    sel = torch.tensor([1, 5, 6, 40])
    t2d = torch.zeros(vocab_size, dtype=torch.bool)
    t2d[sel] = True
    save_file({"d2t": sel - torch.arange(4), "t2d": t2d}, str(draft / "model.safetensors"))
    return t2d


def test_train_eagle_add_draft_vocab(tmp_path):
    """``--add-draft-vocab DRAFT --draft-vocab-from OTHER``: DRAFT gets OTHER's d2t/t2d, its weights unchanged, its
    report says where they came from; a source without a vocabulary, or with another target's, is refused."""
    import json

    import torch
    from safetensors.torch import load_file, save_file

    from bench.train_eagle import add_draft_vocab, load_saved, main, saved_tensors

    cfg, model = _tiny_eagle1()
    draft, other = tmp_path / "draft", tmp_path / "other"
    draft.mkdir()
    other.mkdir()
    save_file(saved_tensors(model), str(draft / "model.safetensors"))
    (draft / "config.json").write_text(json.dumps(cfg))
    (draft / "train_report.json").write_text(json.dumps({"steps": 3}))
    with pytest.raises(SystemExit, match="has no draft vocabulary"):
        add_draft_vocab(draft, draft)
    t2d = _vocab_source(other)
    main(["--add-draft-vocab", str(draft), "--draft-vocab-from", str(other)])
    got = load_file(str(draft / "model.safetensors"))
    assert (torch.arange(4) + got["d2t"]).tolist() == [1, 5, 6, 40] and torch.equal(got["t2d"], t2d)
    assert all(torch.equal(got[k], v) for k, v in saved_tensors(model).items())
    load_saved(cfg, got)  # the vocabulary is not a weight
    assert json.loads((draft / "train_report.json").read_text()) == {
        "steps": 3, "draft_vocab": {"from": str(other), "size": 4},
        "files_bytes": {"model.safetensors": (draft / "model.safetensors").stat().st_size}}
    _vocab_source(other, vocab_size=100)
    with pytest.raises(SystemExit, match=r"covers 100 tokens, but .* vocab_size 64"):
        add_draft_vocab(draft, other)
    with pytest.raises(SystemExit):
        main(["--add-draft-vocab", str(draft)])  # needs --draft-vocab-from


def _tiny_medusa(tmp_path, hidden=16, heads=2):
    """Saved Medusa heads as bench.train_medusa writes them, random, for a target of vocab_size 64."""
    import json

    import torch
    from safetensors.torch import save_file

    torch.manual_seed(0)
    draft = tmp_path / "medusa"
    draft.mkdir()
    tensors = {}
    for h in range(heads):
        tensors[f"blocks.{h}.layers.0.weight"] = torch.randn(hidden, hidden).half()
        tensors[f"blocks.{h}.layers.0.bias"] = torch.randn(hidden).half()
    save_file(tensors, str(draft / "medusa_lm_head.safetensors"))
    cfg = {"model_type": "medusa", "architectures": ["MedusaModel"], "hidden_size": hidden, "vocab_size": 64,
           "num_heads": heads, "num_hidden_layers": 1, "original_lm_head": True}
    (draft / "config.json").write_text(json.dumps(cfg))
    (draft / "train_report.json").write_text(json.dumps({"steps": 3}))
    return draft, tensors, cfg


def test_train_medusa_accuracy_over_a_draft_vocabulary(tmp_path):
    """Over a draft vocabulary the argmax runs over those rows alone and maps back to target ids: with the full
    vocabulary permuted, the figures equal the full head's (mapping back removed, they would not); with a vocabulary
    of one token, only that token is ever right."""
    import torch

    from bench.train_medusa import accuracy, load_heads

    draft, _, _ = _tiny_medusa(tmp_path)
    heads = load_heads(draft)
    torch.manual_seed(1)
    w, x = torch.randn(64, 16), torch.randn(300, 16).half()
    labels = torch.stack([(heads.head(h, x.float()) @ w.T).argmax(-1) for h in range(2)], dim=1)
    labels[::3, 1] = 7
    full = accuracy(heads, x, labels, w)
    assert full[0][0] == 1.0 and 0 < full[0][1] < 1
    assert accuracy(heads, x, labels, w, vocab=torch.randperm(64)) == full
    one = accuracy(heads, x, labels, w, vocab=torch.tensor([7]))
    assert one[0][1] == round(float((labels[:, 1] == 7).float().mean()), 4)


def test_train_medusa_add_draft_vocab(tmp_path):
    """``--add-draft-vocab DRAFT --draft-vocab-from EAGLE``: DRAFT gets the EAGLE draft's vocabulary as token_map and
    truncated_vocab_size, its heads unchanged, its report saying where it came from; a source without a vocabulary,
    or with another target's, is refused; the plugin accepts the token_map it wrote."""
    import json

    import torch
    from safetensors.torch import load_file, save_file

    from bench.train_medusa import add_draft_vocab, main

    draft, tensors, cfg = _tiny_medusa(tmp_path)
    other = tmp_path / "eagle"
    other.mkdir()
    save_file({"fc.weight": torch.zeros(1)}, str(other / "model.safetensors"))
    with pytest.raises(SystemExit, match="has no draft vocabulary"):
        add_draft_vocab(draft, other)
    _vocab_source(other)
    main(["--add-draft-vocab", str(draft), "--draft-vocab-from", str(other)])
    got = load_file(str(draft / "medusa_lm_head.safetensors"))
    assert got["token_map"].tolist() == [1, 5, 6, 40] and got["token_map"].dtype == torch.int64
    assert all(torch.equal(got[k], v) for k, v in tensors.items())
    assert json.loads((draft / "config.json").read_text()) == {**cfg, "truncated_vocab_size": 4}
    assert json.loads((draft / "train_report.json").read_text()) == {
        "steps": 3, "draft_vocab": {"from": str(other), "size": 4},
        "files_bytes": {"medusa_lm_head.safetensors": (draft / "medusa_lm_head.safetensors").stat().st_size}}
    from vllm_spec_medusa.model import check_token_map

    check_token_map(got["token_map"], 64, 4, str(draft))
    _vocab_source(other, vocab_size=100)
    with pytest.raises(SystemExit, match=r"covers 100 tokens, but .* vocab_size 64"):
        add_draft_vocab(draft, other)
    with pytest.raises(SystemExit):
        main(["--add-draft-vocab", str(draft)])  # needs --draft-vocab-from
