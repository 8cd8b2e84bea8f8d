"""Distilling prefills of real replies: the records bench.prefill_data writes, and that the trainers learn the
target's greedy token (bench.hidden's ``greedy``), not the text's next token (Medusa's heads only where the text
follows the target's greedy chain)."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from bench import prefill_data
from bench.draft_data import IGNORE, load_hidden_data


class _Tok:
    """Whitespace 'tokenizer' with a chat template: one id per word."""

    def __init__(self) -> None:
        self.vocab: dict[str, int] = {}

    def apply_chat_template(self, msgs, add_generation_prompt, tokenize):
        return f"<u> {msgs[0]['content']} <a>"

    def __call__(self, text, add_special_tokens=False):
        return {"input_ids": [self.vocab.setdefault(w, 10 + len(self.vocab)) for w in text.split()]}


def _records(pairs, **kw):
    counts = {"skipped_not_ascii": 0, "skipped_long_prompt": 0, "skipped_short_reply": 0}
    args = {"max_prompt_tokens": 12, "max_answer_tokens": 10, "end_id": 2, **kw}
    return list(prefill_data.records(pairs, _Tok(), counts=counts, **args)), counts


def test_records_are_prompt_then_real_reply_cut_or_ended():
    words = " ".join(f"w{i}" for i in range(30))
    recs, counts = _records([
        ("What is a lake?", "A lake is a body of water surrounded by land ."),   # 11 tokens: cut at 10
        ("Hi there", "one two three four five six seven"),                         # ends with <|im_end|>
        ("Привет, как дела у тебя сегодня?", "Хорошо, спасибо, а у тебя как дела?"),  # not ASCII
        (words, "a reply long enough to be kept here"),                            # prompt too long
        ("Short one", "ok then"),                                                  # reply too short
    ])
    assert counts == {"skipped_not_ascii": 1, "skipped_long_prompt": 1, "skipped_short_reply": 1}
    assert [r["id"] for r in recs] == [0, 1]
    cut, ended = recs
    assert len(cut["answer_ids"]) == 10 and 2 not in cut["answer_ids"] and cut["finished"] is False
    assert ended["answer_ids"][-1] == 2 and len(ended["answer_ids"]) == 8 and ended["finished"] is True
    assert len(cut["prompt_ids"]) == len("<u> What is a lake? <a>".split()) and cut["family"] == "sharegpt"
    assert cut["prompt"] == "What is a lake?"


def _write_index(tmp_path, tokens, greedy, offsets, prompt_lens, aux_dim=6):
    n = len(tokens)
    np.save(tmp_path / "hidden_f16.npy", np.zeros((n, 4), dtype=np.float16))
    np.save(tmp_path / "aux_f16.npy", np.arange(n * aux_dim, dtype=np.float16).reshape(n, aux_dim))
    index = {"tokens": torch.tensor(tokens, dtype=torch.int32), "offsets": torch.tensor(offsets),
             "prompt_lens": torch.tensor(prompt_lens), "aux_layers": [0, 1, 2]}
    if greedy is not None:
        index["greedy"] = torch.tensor(greedy, dtype=torch.int32)
    torch.save(index, tmp_path / "hidden_index.pt")


def test_targets_are_the_greedy_tokens_or_the_shifted_answer(tmp_path):
    tokens, greedy = [5, 6, 7, 8, 9, 1, 2, 3], [16, 17, 18, 19, 20, 12, 13, 14]
    _write_index(tmp_path, tokens, greedy, [0, 5, 8], [2, 1])
    assert load_hidden_data(tmp_path, 0.5).targets.tolist() == greedy
    _write_index(tmp_path, tokens, None, [0, 5, 8], [2, 1])  # an index from before greedy: own greedy answers
    assert load_hidden_data(tmp_path, 0.5).targets.tolist()[:4] == tokens[1:5]


@pytest.mark.parametrize("greedy", [[16, 17, 18, 19, 20, 21, 22], None])
def test_eagle3_labels_are_the_targets_greedy_tokens(tmp_path, greedy):
    from bench.train_eagle3 import load_batch

    tokens = [5, 6, 7, 8, 9, 10, 11]  # one sequence, prompt 3 tokens
    _write_index(tmp_path, tokens, greedy, [0, 7], [3])
    data = load_hidden_data(tmp_path, 0.0)
    aux = np.load(tmp_path / "aux_f16.npy", mmap_mode="r")
    t2d_id = torch.arange(40)
    A, _embs, labels, _pos = load_batch(data, aux, [0], torch.randn(40, 4), t2d_id, steps=2)
    nxt = greedy if greedy is not None else tokens[1:] + [0]
    # step s at index i predicts the token after position i + s: IGNORE unless it is an answer token (>= 3)
    want = [[nxt[i + s] if 3 <= i + s + 1 < 7 else IGNORE for s in (1, 2)] for i in range(6)]
    assert labels[0].tolist() == want
    assert A.shape == (1, 6, 6)


def test_medusa_labels_only_where_the_text_follows_the_targets_greedy_chain(tmp_path):
    from bench.train_medusa import positions_and_labels

    tokens = [5, 6, 7, 8, 9, 10, 11, 12]  # one sequence, prompt 2 tokens
    greedy = [6, 7, 8, 9, 40, 11, 12, 0]  # the text follows the target's greedy tokens except at token 5 (10, not 40)
    _write_index(tmp_path, tokens, greedy, [0, 8], [2])
    data = load_hidden_data(tmp_path, 0.0)
    rows, labels = positions_and_labels(data, [0], 3)
    # head h at t: the target's greedy token after t + h + 1, where tokens t + 1 ... t + h + 1 are its greedy chain;
    # at t = 4 the next token already leaves the chain: no label, row dropped
    assert rows.tolist() == [1, 2, 3, 5]
    assert labels.tolist() == [[8, 9, 40], [9, 40, IGNORE], [40, IGNORE, IGNORE], [12, IGNORE, IGNORE]]
    # the alignment check's head (the token after t itself) needs no chain
    rows, labels = positions_and_labels(data, [0], 1, first=1)
    assert rows.tolist() == [1, 2, 3, 4, 5, 6] and labels[:, 0].tolist() == greedy[1:7]
    # the target's own greedy answers (an index from before greedy): every label kept, the token at t + h + 2
    _write_index(tmp_path, tokens, None, [0, 8], [2])
    rows, labels = positions_and_labels(load_hidden_data(tmp_path, 0.0), [0], 3)
    assert rows.tolist() == [1, 2, 3, 4, 5]
    assert labels.tolist() == [[tokens[t + h + 2] if t + h + 2 < 8 else IGNORE for h in range(3)] for t in range(1, 6)]


def _tiny_draft():
    from bench.train_eagle3 import Eagle3Draft

    cfg = {"hidden_size": 32, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 8, "rms_norm_eps": 1e-5,
           "vocab_size": 64, "max_position_embeddings": 128, "rope_theta": 10000.0, "hidden_act": "silu",
           "intermediate_size": 48, "num_hidden_layers": 1}
    torch.manual_seed(0)
    return Eagle3Draft(cfg, 3)


def _tiny_batch(steps=3, B=2, L=24, H=32, dv=40):
    g = torch.Generator().manual_seed(1)
    labels = torch.randint(0, dv, (B, L, steps), generator=g)
    labels[0, :5] = IGNORE  # a prompt
    return (torch.randn(B, L, 3 * H, generator=g), [torch.randn(B, L, H, generator=g) for _ in range(steps)], labels,
            torch.arange(L)[None, :].expand(B, L), torch.randn(dv, H, generator=g))


def test_eagle3_bf16_loss_and_gradients_follow_float32():
    # --bf16 runs the draft and its logits under bfloat16 autocast: not the float32 numbers (else the flag did
    # nothing), but close to them, gradients included; the loss, the weights and the gradients stay float32
    from bench.train_eagle3 import train_loss

    A, embs, labels, pos, w_d = _tiny_batch()
    weights = [1.0, 0.8, 0.64]
    results = []
    for bf16 in (False, True):
        model = _tiny_draft()
        sums = {"loss": 0.0, "n": 0, "c1": 0}
        loss = train_loss(model, A, embs, labels, pos, w_d, weights, sums, bf16=bf16)
        loss.backward()
        grad = torch.cat([p.grad.reshape(-1) for p in model.parameters() if p.grad is not None])
        results.append((loss, grad, sums))
    (l32, g32, s32), (l16, g16, s16) = results
    assert l16.dtype == g16.dtype == torch.float32
    assert s32["n"] == s16["n"] == int((labels[..., 0] >= 0).sum())
    assert float(l16) != float(l32)
    assert abs(float(l16) - float(l32)) < 2e-2 * float(l32)
    assert float(F.cosine_similarity(g16, g32, dim=0)) > 0.99
