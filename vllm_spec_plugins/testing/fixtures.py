"""Deterministic tiny checkpoints that need no download.

The target is a random 2-layer Llama (hidden 128, vocab 259: 3 specials + 256 bytes)
with a byte-level tokenizer. Random tiny targets repeat themselves a lot, so a draft
that proposes "the target's own next token again" gets accepted often: that
exercises the acceptance paths without a trained draft.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

VOCAB = 259
HIDDEN = 128


def _tokenizer(path: Path) -> None:
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2}
    for i in range(256):
        vocab.setdefault(chr(i), len(vocab))
    while len(vocab) < VOCAB:  # chr() of the specials' code points collide with nothing, but be safe
        vocab[f"<extra_{len(vocab)}>"] = len(vocab)
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    tok.decoder = decoders.Fuse()
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", bos_token="<s>", eos_token="</s>")
    fast.save_pretrained(path)


def _write_checkpoint(path: Path, cfg: dict[str, Any], sd: dict[str, torch.Tensor], weights_file: str) -> Path:
    """``config.json`` and the weights (``.safetensors`` by name, else ``torch.save``) into ``path``."""
    import torch

    (path / "config.json").write_text(json.dumps(cfg, indent=2))
    sd = {k: v.contiguous() for k, v in sd.items()}
    if weights_file.endswith(".safetensors"):
        from safetensors.torch import save_file

        save_file(sd, str(path / weights_file))
    else:
        torch.save(sd, str(path / weights_file))
    return path


def make_tiny_target(path: str | os.PathLike[str], seed: int = 0) -> Path:
    """A random tiny Llama target with a byte tokenizer (about 1 MB). Idempotent."""
    path = Path(path)
    if (path / "config.json").exists() and (path / "model.safetensors").exists():
        return path
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    path.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=VOCAB, hidden_size=HIDDEN, intermediate_size=256, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=512,
                      tie_word_embeddings=False, bos_token_id=1, eos_token_id=2, torch_dtype="float32")
    model = LlamaForCausalLM(cfg).to(torch.float32)
    with torch.no_grad():  # larger weights make a more peaked, more repetitive random LM
        for p in model.parameters():
            if p.dim() == 2:
                p.mul_(3.0)
    model.save_pretrained(path, safe_serialization=True)
    _tokenizer(path)
    return path


#: The tiny vision-language target: Idefics3 (SmolVLM's architecture: a SigLIP-style vision tower, a pixel
#: shuffle connector, a Llama text model). A 32x32 image, patch 8, pixel shuffle 2: 4 image tokens per image.
VLM_IMAGE_SIZE, VLM_PATCH, VLM_SCALE = 32, 8, 2
VLM_IMAGE_TOKENS = (VLM_IMAGE_SIZE // VLM_PATCH) ** 2 // VLM_SCALE ** 2
VLM_SPECIALS = ("<fake_token_around_image>", "<image>", "<end_of_utterance>", "<global-img>",
                *(f"<row_{i + 1}_col_{j + 1}>" for i in range(6) for j in range(6)))
#: A prompt with one image, in the tiny VLM's own format (``<image>`` expands to the image's tokens).
VLM_PROMPT = "User:<image>What is this?<end_of_utterance>\nAssistant:"
#: Its chat template (an OpenAI chat message with an image part and a text part gives :data:`VLM_PROMPT`).
VLM_CHAT_TEMPLATE = (
    "{% for m in messages %}{{ m['role'] | capitalize }}:{% if m['content'] is string %}{{ m['content'] }}"
    "{% else %}{% for c in m['content'] %}{% if c['type'] in ('image', 'image_url') %}<image>"
    "{% elif c['type'] == 'text' %}{{ c['text'] }}{% endif %}{% endfor %}{% endif %}<end_of_utterance>\n"
    "{% endfor %}{% if add_generation_prompt %}Assistant:{% endif %}")


def _text_config(target: str | os.PathLike[str]) -> dict[str, Any]:
    cfg: dict[str, Any] = json.loads((Path(target) / "config.json").read_text())
    return cfg.get("text_config") or cfg


def target_dims(target: str | os.PathLike[str]) -> tuple[int, int]:
    """``(hidden_size, vocab_size)`` of a tiny target's language model (a VLM's text model)."""
    cfg = _text_config(target)
    return int(cfg["hidden_size"]), int(cfg["vocab_size"])


def _target_weight(target: str | os.PathLike[str], *names: str) -> torch.Tensor:
    from safetensors.torch import load_file

    weights: dict[str, torch.Tensor] = load_file(str(Path(target) / "model.safetensors"))
    return next(weights[n] for n in names if n in weights)


def target_lm_head(target: str | os.PathLike[str]) -> torch.Tensor:
    """The tiny target's ``lm_head.weight`` ``[vocab, hidden]`` (for plain-torch references)."""
    return _target_weight(target, "lm_head.weight")


def target_embeddings(target: str | os.PathLike[str]) -> torch.Tensor:
    """The tiny target's token embeddings ``model.embed_tokens.weight`` ``[vocab, hidden]`` (a VLM's:
    ``model.text_model.embed_tokens.weight``), for references of drafters that embed tokens with the target's
    table."""
    return _target_weight(target, "model.embed_tokens.weight", "model.text_model.embed_tokens.weight")


def _vlm_tokenizer(specials: Sequence[str], added: Sequence[str], extra_special_tokens: Any) -> tuple[dict[str, int], Any]:
    """The byte tokenizer (one token per character) plus a VLM's special tokens, vocabulary padded to 16."""
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2}
    for i in range(256):
        vocab.setdefault(chr(i), len(vocab))
    for name in specials:
        vocab[name] = len(vocab)
    while len(vocab) % 16:
        vocab[f"<extra_{len(vocab)}>"] = len(vocab)
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    tok.decoder = decoders.Fuse()
    tok.add_special_tokens([AddedToken(name, normalized=False, special=True) for name in added])
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", bos_token="<s>", eos_token="</s>",
                                   pad_token="<unk>", extra_special_tokens=extra_special_tokens)
    return vocab, fast


def _save_random_vlm(model_cls: Any, cfg: Any, path: Path) -> None:
    import torch

    cfg.torch_dtype = "float32"
    model = model_cls(cfg).to(torch.float32).eval()
    with torch.no_grad():  # larger weights: a more peaked random LM, and the image matters more
        for p in model.parameters():
            if p.dim() == 2:
                p.mul_(3.0)
    model.save_pretrained(path, safe_serialization=True)


def make_tiny_vlm(path: str | os.PathLike[str], seed: int = 0) -> Path:
    """A random tiny vision-language target (about 2 MB): Idefics3, whose path in vLLM's CPU build needs no
    torchvision (Transformers' PIL image processor). Vision tower 1 layer, hidden 32; text model the tiny
    target's Llama shape (2 layers, hidden 128); the byte tokenizer plus Idefics3's special tokens (vocab 304;
    ``<image>`` is id 260). One image becomes :data:`VLM_IMAGE_TOKENS` tokens. Idempotent."""
    path = Path(path)
    if (path / "config.json").exists() and (path / "model.safetensors").exists():
        return path
    import torch
    from transformers import (
        Idefics3Config,
        Idefics3ForConditionalGeneration,
        Idefics3ImageProcessorPil,
        Idefics3Processor,
    )

    path.mkdir(parents=True, exist_ok=True)
    vocab, fast = _vlm_tokenizer(VLM_SPECIALS, VLM_SPECIALS, list(VLM_SPECIALS[:3]))
    fast.chat_template = VLM_CHAT_TEMPLATE
    fast.save_pretrained(path)
    torch.manual_seed(seed)
    cfg = Idefics3Config(
        vision_config=dict(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
                           image_size=VLM_IMAGE_SIZE, patch_size=VLM_PATCH, num_channels=3),
        text_config=dict(model_type="llama", vocab_size=len(vocab), hidden_size=HIDDEN, intermediate_size=256,
                         num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=4,
                         max_position_embeddings=512, tie_word_embeddings=False, bos_token_id=1, eos_token_id=2,
                         pad_token_id=0, rms_norm_eps=1e-5),
        scale_factor=VLM_SCALE, image_token_id=vocab["<image>"], tie_word_embeddings=False, bos_token_id=1,
        eos_token_id=2, pad_token_id=0)
    _save_random_vlm(Idefics3ForConditionalGeneration, cfg, path)
    processor = Idefics3Processor(
        image_processor=Idefics3ImageProcessorPil(size={"longest_edge": VLM_IMAGE_SIZE},
                                                  max_image_size={"longest_edge": VLM_IMAGE_SIZE},
                                                  do_image_splitting=False),
        tokenizer=fast, image_seq_len=VLM_IMAGE_TOKENS, chat_template=VLM_CHAT_TEMPLATE)
    processor.save_pretrained(path)
    return path


#: The tiny M-RoPE vision-language target: PaddleOCR-VL (a SigLIP-style vision tower with 2-D positions, an
#: Ernie 4.5 text model with multimodal rotary positions, sections ``[4, 6, 6]``: temporal, height, width). A
#: 32x32 image, patch 8, merge 2: 4 image tokens per image, at positions (t, h, w) that advance over the
#: image's 2x2 grid rather than one per token; text after the image resumes one past the largest of them.
MROPE_VLM_IMAGE_TOKENS = 4
MROPE_VLM_SPECIALS = ("<|IMAGE_PLACEHOLDER|>", "<|IMAGE_START|>", "<|IMAGE_END|>", "<|video_pad|>")
#: A prompt with one image, in the tiny M-RoPE VLM's format (the placeholder expands to the image's tokens).
MROPE_VLM_PROMPT = "<s>User: <|IMAGE_START|><|IMAGE_PLACEHOLDER|><|IMAGE_END|>OCR:\nAssistant: "


def make_tiny_mrope_vlm(path: str | os.PathLike[str], seed: int = 0) -> Path:
    """A random tiny vision-language target with M-RoPE positions (about 2 MB): PaddleOCR-VL, whose path in
    vLLM's CPU build needs no torchvision (Transformers' PIL image processor; vLLM's own model file). Vision
    tower 1 layer, hidden 32; text model 2 layers, hidden 128, head size 32; the byte tokenizer plus
    PaddleOCR-VL's image tokens (vocab 272; ``<|IMAGE_PLACEHOLDER|>`` is id 259). One image becomes
    :data:`MROPE_VLM_IMAGE_TOKENS` tokens. Transformers' ``generate`` gives vLLM's greedy tokens. Idempotent."""
    path = Path(path)
    if (path / "config.json").exists() and (path / "model.safetensors").exists():
        return path
    import torch
    from transformers import (
        PaddleOCRVLConfig,
        PaddleOCRVLForConditionalGeneration,
        PaddleOCRVLImageProcessorPil,
        PaddleOCRVLProcessor,
    )

    path.mkdir(parents=True, exist_ok=True)
    image, start, end, video = MROPE_VLM_SPECIALS
    vocab, fast = _vlm_tokenizer(MROPE_VLM_SPECIALS, ("<s>", "</s>", *MROPE_VLM_SPECIALS),
                                 {"image_token": image, "image_start_token": start, "image_end_token": end})
    fast.save_pretrained(path)
    torch.manual_seed(seed)
    cfg = PaddleOCRVLConfig(
        vision_config=dict(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
                           image_size=VLM_IMAGE_SIZE, patch_size=VLM_PATCH, num_channels=3, spatial_merge_size=2),
        text_config=dict(vocab_size=len(vocab), hidden_size=HIDDEN, intermediate_size=256, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, head_dim=32, max_position_embeddings=512,
                         rms_norm_eps=1e-5, use_bias=False, tie_word_embeddings=False, bos_token_id=1,
                         eos_token_id=2, pad_token_id=0,
                         # (Transformers warns that it does not know mrope_section; it and vLLM both read it)
                         rope_parameters={"rope_type": "default", "rope_theta": 500000.0,
                                          "mrope_section": [4, 6, 6]}),  # sums to head_dim / 2
        image_token_id=vocab[image], video_token_id=vocab[video], vision_start_token_id=vocab[start],
        vision_end_token_id=vocab[end], tie_word_embeddings=False, bos_token_id=1, eos_token_id=2, pad_token_id=0)
    _save_random_vlm(PaddleOCRVLForConditionalGeneration, cfg, path)
    pixels = VLM_IMAGE_SIZE * VLM_IMAGE_SIZE  # every image resized to 32x32
    processor = PaddleOCRVLImageProcessorPil(size={"shortest_edge": pixels, "longest_edge": pixels},
                                             patch_size=VLM_PATCH, merge_size=2, temporal_patch_size=1)
    PaddleOCRVLProcessor(image_processor=processor, tokenizer=fast).save_pretrained(path)
    return path


def make_test_image(path: str | os.PathLike[str], kind: str = "pattern") -> Path:
    """A 32x32 PNG for the tiny VLMs: ``"red"`` (one colour), ``"pattern"`` or ``"stripes"``."""
    from PIL import Image

    path = Path(path)
    img = Image.new("RGB", (VLM_IMAGE_SIZE, VLM_IMAGE_SIZE), (255, 0, 0))
    n = VLM_IMAGE_SIZE
    if kind == "pattern":
        img.putdata([((x * 8) % 256, (y * 8) % 256, ((x ^ y) * 16) % 256) for y in range(n) for x in range(n)])
    elif kind == "stripes":
        img.putdata([(255 * (x // 4 % 2), 40, 255 * (y // 8 % 2)) for y in range(n) for x in range(n)])
    elif kind != "red":
        raise ValueError(f"image kind: 'red', 'pattern' or 'stripes', not {kind!r}")
    img.save(path)
    return path


def make_tiny_medusa(path: str | os.PathLike[str], target: str | os.PathLike[str], *, num_heads: int = 3,
                     num_layers: int = 1, biases: bool = False, layout: str = "new", seed: int = 1,
                     noise: float = 0.02, fmt: str = "safetensors", original_lm_head: bool = False,
                     include_lm_head: bool = True, truncate_vocab: int | None = None) -> Path:
    """A Medusa checkpoint for the tiny target.

    Head 0's residual block is zero and every lm_head is the target's, so head 0
    proposes the target's own next token again (accepted often on a repetitive
    random target); later heads add small random residuals.

    Args:
        layout: ``"new"`` (``blocks.*``/``lm_heads.*``, ``model_type: medusa``) or ``"old"``
            (FasterDecoding ``{h}.{l}.linear.*``/``{h}.{N}.weight``, ``medusa_num_heads``, no model_type,
            no ``hidden_size``/``vocab_size``).
        biases: give every residual Linear a bias (FasterDecoding trains them).
        fmt: ``safetensors``, ``bin`` or ``pt``.
        original_lm_head: one lm_head shared by all heads (``lm_head.weight``); with
            ``include_lm_head=False`` the checkpoint has none and the target's is shared.
        truncate_vocab: keep only this many vocabulary rows (the most likely tokens of the
            target are unknown here, so: a seeded random subset) and store ``token_map``.
    """
    import torch

    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    lm = target_lm_head(target)
    H, V = target_dims(target)
    g = torch.Generator().manual_seed(seed)
    sd = {}
    for h in range(num_heads):
        for layer in range(num_layers):
            w = torch.zeros(H, H) if h == 0 else torch.randn(H, H, generator=g) * noise
            b = torch.randn(H, generator=g) * (noise * 10) if biases else None
            if layout == "new":
                sd[f"blocks.{h}.layers.{layer}.weight"] = w
                if b is not None:
                    sd[f"blocks.{h}.layers.{layer}.bias"] = b
            else:
                sd[f"{h}.{layer}.linear.weight"] = w
                if b is not None:
                    sd[f"{h}.{layer}.linear.bias"] = b
        if original_lm_head:
            continue
        key = f"lm_heads.{h}.weight" if layout == "new" else f"{h}.{num_layers}.weight"
        sd[key] = lm.clone()
    token_map = None
    if truncate_vocab:
        token_map = torch.randperm(V, generator=g)[:truncate_vocab].sort().values
        sd["token_map"] = token_map
        for key in [k for k in sd if k.startswith("lm_heads.")]:
            sd[key] = sd[key][token_map].clone()
    if original_lm_head and include_lm_head:
        sd["lm_head.weight"] = lm.clone() if token_map is None else lm[token_map].clone()
    if layout == "new":
        cfg = {"model_type": "medusa", "architectures": ["MedusaModel"], "hidden_size": H,
               "vocab_size": V, "num_heads": num_heads, "num_hidden_layers": num_layers}
        if original_lm_head:
            cfg["original_lm_head"] = True
        if truncate_vocab:
            cfg["truncated_vocab_size"] = truncate_vocab
    else:
        # as FasterDecoding ships it: no model_type, no hidden_size / vocab_size (the target's apply)
        cfg = {"medusa_num_heads": num_heads, "medusa_num_layers": num_layers,
               "base_model_name_or_path": str(target)}
    files = {"safetensors": "medusa_lm_head.safetensors", "pt": "medusa_lm_head.pt"}
    return _write_checkpoint(path, cfg, sd, files.get(fmt, "pytorch_model.bin"))


def _draft_vocab_tensors(sel: torch.Tensor, vocab_size: int) -> dict[str, torch.Tensor]:
    """An EAGLE draft vocabulary of the sorted target ids ``sel``: ``d2t`` (target id = draft id + d2t[draft id]) and
    ``t2d`` (the target ids in it)."""
    import torch

    t2d = torch.zeros(vocab_size, dtype=torch.bool)
    t2d[sel] = True
    return {"d2t": (sel - torch.arange(sel.numel())).to(torch.int64), "t2d": t2d}


def make_tiny_eagle(path: str | os.PathLike[str], target: str | os.PathLike[str], *, num_layers: int = 1,
                    fc_bias: bool = False, noise: float = 0.05, seed: int = 2, own_embed: bool = True,
                    own_lm_head: bool = False, draft_vocab: int | None = None, fmt: str = "safetensors") -> Path:
    """An EAGLE-1 checkpoint (EAGLE authors' layout) for the tiny target.

    Built to be accepted often: ``fc = [I | small]`` passes the token embedding through,
    ``embed_tokens`` is the target's lm_head (so the draft leans towards repeating the
    last token, which a random tiny target often does), and small random attention and
    MLP weights make the draft depend on the context through its own KV cache.

    ``draft_vocab``: a draft vocabulary of the target's most frequently produced tokens
    (:func:`target_frequent_tokens`), stored as ``d2t``/``t2d`` (the EAGLE plugin then drafts from the
    target lm_head's rows of those tokens alone).
    """
    import torch

    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    lm = target_lm_head(target)
    g = torch.Generator().manual_seed(seed)
    (H, V), inter = target_dims(target), 256

    def rnd(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=g) * noise

    sd = {"fc.weight": torch.cat([torch.eye(H), rnd(H, H) * 0.2], dim=1)}
    if fc_bias:
        sd["fc.bias"] = torch.randn(H, generator=g) * 2.0
    for i in range(num_layers):
        p = f"layers.{i}."
        for n in ("q_proj", "k_proj", "v_proj", "o_proj"):
            sd[p + f"self_attn.{n}.weight"] = rnd(H, H) * (10 if n in ("q_proj", "k_proj") else 1)
        sd[p + "mlp.gate_proj.weight"] = rnd(inter, H)
        sd[p + "mlp.up_proj.weight"] = rnd(inter, H)
        sd[p + "mlp.down_proj.weight"] = rnd(H, inter)
        sd[p + "post_attention_layernorm.weight"] = torch.ones(H)
        if i > 0:
            sd[p + "input_layernorm.weight"] = torch.ones(H)
    if own_embed:  # unit rows of the target's lm_head, scaled: the embedding dominates the residual stream
        sd["embed_tokens.weight"] = lm / lm.norm(dim=1, keepdim=True) * 8
    if own_lm_head:
        sd["lm_head.weight"] = lm.clone() + rnd(V, H)
    if draft_vocab is not None:
        sd.update(_draft_vocab_tensors(torch.tensor(sorted(target_frequent_tokens(target)[:draft_vocab])), V))
    cfg = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": H,
           "intermediate_size": inter, "num_hidden_layers": num_layers, "num_attention_heads": 4,
           "num_key_value_heads": 4, "head_dim": 32, "vocab_size": V, "max_position_embeddings": 512,
           "rms_norm_eps": 1e-06, "hidden_act": "silu", "rope_theta": 10000.0,
           "tie_word_embeddings": False, "attention_bias": False, "mlp_bias": False, "torch_dtype": "float32",
           "bos_token_id": 1, "eos_token_id": 2}
    return _write_checkpoint(path, cfg, sd, "model.safetensors" if fmt == "safetensors" else "pytorch_model.bin")


def target_frequent_tokens(target: str | os.PathLike[str], *, num_prompts: int = 64, prompt_len: int = 8,
                           new_tokens: int = 64, seed: int = 3) -> list[int]:
    """Token ids of the tiny target, most often produced first: greedy continuations of random prompts.

    Ties (and ids never produced) keep ascending id order.
    """
    import torch
    from transformers import LlamaForCausalLM

    model = LlamaForCausalLM.from_pretrained(str(target), torch_dtype=torch.float32).eval()
    g = torch.Generator().manual_seed(seed)
    prompts = torch.randint(3, VOCAB, (num_prompts, prompt_len), generator=g)
    prompts[:, 0] = 1
    counts = torch.zeros(VOCAB, dtype=torch.long)
    with torch.no_grad():
        out = model.generate(prompts, attention_mask=torch.ones_like(prompts), max_new_tokens=new_tokens,
                             min_new_tokens=new_tokens, do_sample=False, pad_token_id=0)
    counts += torch.bincount(out[:, prompt_len:].flatten(), minlength=VOCAB)
    return sorted(range(VOCAB), key=lambda t: (-int(counts[t]), t))


def make_tiny_eagle3(path: str | os.PathLike[str], target: str | os.PathLike[str], *, draft_vocab: int | None = 200,
                     aux_layer_ids: Sequence[int] | None = (0, 1, 2), num_layers: int = 1, layout: str = "midlayer",
                     fc_scale: float = 0.08, noise: float = 0.02, seed: int = 4, own_embed: bool = True,
                     keep: list[int] | None = None, lm_head: str = "own") -> Path:
    """An EAGLE-3 checkpoint (SafeAILab layout) for the tiny target; keep "eagle3" in the folder name.

    Built to be accepted sometimes: the draft's embeddings are unit rows of the target's
    lm_head, scaled; q/k/v of layer 0 read only the embedding half of their input, so the
    attention attends to the current token (and earlier copies of it), and ``o_proj = I``
    carries its embedding into the residual stream; ``lm_head`` holds the same embedding
    rows, so the draft leans towards repeating the last token, which the random tiny
    target often does. ``fc`` over the target layers is random (``fc_scale``): the residual
    stream mixes the target's layers in, so drafts depend on the aux hidden states.

    Args:
        draft_vocab: draft vocabulary size (< 259 keeps the target's most frequently produced
            tokens, :func:`target_frequent_tokens`, and stores ``d2t``/``t2d``); ``None``: the full vocabulary.
        aux_layer_ids: written as ``eagle_aux_hidden_state_layer_ids`` (``None``: not written; vLLM's default
            layers then apply, which the 2-layer tiny target does not have).
        layout: ``"midlayer"`` (SafeAILab: ``midlayer.*``) or ``"layers"`` (``layers.0.*``).
        keep: the target ids of the draft vocabulary (overrides the frequency choice).
        lm_head: ``"own"`` (the embedding rows above), ``"target_rows"`` (a stored copy of the target
            lm_head's rows of the draft vocabulary) or ``"none"`` (not stored: the EAGLE plugin then takes
            those rows from the target; same drafts as ``"target_rows"``).
    """
    import torch

    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    lm = target_lm_head(target)
    g = torch.Generator().manual_seed(seed)
    (H, V), inter, heads, head_dim = target_dims(target), 256, 4, 32
    n_aux = len(aux_layer_ids) if aux_layer_ids else 3

    def rnd(*shape: int, scale: float = noise) -> torch.Tensor:
        return torch.randn(*shape, generator=g) * scale

    embed = lm / lm.norm(dim=1, keepdim=True) * 8
    if keep is None and draft_vocab is not None and draft_vocab < V:
        keep = target_frequent_tokens(target)[:draft_vocab]
    sel = torch.tensor(sorted(keep), dtype=torch.long) if keep is not None else torch.arange(V)
    dv = int(sel.numel())
    eye_embed_half = torch.cat([torch.eye(H), torch.zeros(H, H)], dim=1)  # [H, 2H]: reads the embedding half
    sd = {"fc.weight": rnd(H, n_aux * H, scale=fc_scale)}
    for i in range(num_layers):
        p = "midlayer." if (layout == "midlayer" and num_layers == 1) else f"layers.{i}."
        width = 2 * H if i == 0 else H
        if i == 0:
            sd[p + "self_attn.q_proj.weight"] = eye_embed_half * 1.5 + rnd(heads * head_dim, width)
            sd[p + "self_attn.k_proj.weight"] = eye_embed_half * 1.5 + rnd(heads * head_dim, width)
            sd[p + "self_attn.v_proj.weight"] = eye_embed_half + rnd(heads * head_dim, width, scale=0.1)
            sd[p + "self_attn.o_proj.weight"] = torch.eye(H) + rnd(H, H)
            sd[p + "hidden_norm.weight"] = torch.ones(H)
        else:
            for n in ("q_proj", "k_proj", "v_proj", "o_proj"):
                sd[p + f"self_attn.{n}.weight"] = rnd(H, H)
        sd[p + "input_layernorm.weight"] = torch.ones(H)
        sd[p + "post_attention_layernorm.weight"] = torch.ones(H)
        sd[p + "mlp.gate_proj.weight"] = rnd(inter, H)
        sd[p + "mlp.up_proj.weight"] = rnd(inter, H)
        sd[p + "mlp.down_proj.weight"] = rnd(H, inter)
    sd["norm.weight"] = torch.ones(H)
    if lm_head == "own":
        sd["lm_head.weight"] = embed[sel].clone()
    elif lm_head == "target_rows":
        sd["lm_head.weight"] = lm[sel].clone()
    elif lm_head != "none":
        raise ValueError(f"lm_head: 'own', 'target_rows' or 'none', not {lm_head!r}")
    if dv < V:
        sd.update(_draft_vocab_tensors(sel, V))
    if own_embed:
        sd["embed_tokens.weight"] = embed.clone()
    cfg = {"architectures": ["LlamaForCausalLMEagle3"], "model_type": "llama", "hidden_size": H,
           "intermediate_size": inter, "num_hidden_layers": num_layers, "num_attention_heads": heads,
           "num_key_value_heads": heads, "head_dim": head_dim, "vocab_size": V, "draft_vocab_size": dv,
           "target_hidden_size": H, "max_position_embeddings": 512, "rms_norm_eps": 1e-06, "hidden_act": "silu",
           "rope_theta": 10000.0, "tie_word_embeddings": False, "attention_bias": False, "mlp_bias": False,
           "torch_dtype": "float32", "bos_token_id": 1, "eos_token_id": 2}
    if aux_layer_ids:
        cfg["eagle_aux_hidden_state_layer_ids"] = list(aux_layer_ids)
    return _write_checkpoint(path, cfg, sd, "model.safetensors")


def make_tiny_mlp_speculator(path: str | os.PathLike[str], target: str | os.PathLike[str], *, n_predict: int = 3,
                             tie_weights: bool = False, scale_input: bool = False, prefix: str = "",
                             tied_keys: str = "once", inner_dim: int = 0, proj_scale: float = 10.0,
                             seed: int = 5, fmt: str = "safetensors") -> Path:
    """An MLP speculator checkpoint (IBM fms-extras layout) for the tiny target.

    Built to be accepted often, the way the Medusa fixture is: the rows of every ``emb.{i}``
    are random unit-RMS vectors ``E[t]``, and every ``head.{i}`` holds the matching rows of
    ``GELU(E)`` (normalised), so a state dominated by the previous token's embedding
    proposes that token again (a random tiny target often repeats itself). The
    projections are random (``proj_scale`` sets the RMS of ``proj(x)`` relative to ``x``;
    the embedding term's is about 4): the target hidden state and the chained states mix
    in, so many drafts are not repetitions and every part of the math shows in them. With
    the default 10, on the tiny target about 60% of first drafts repeat the last token
    (about 90% with ``scale_input``, which scales the hidden state down by sqrt(2)).

    Args:
        tie_weights: one ``emb``, ``head`` and ``ln`` for all heads, one ``proj`` for heads 1..
        tied_keys: with ``tie_weights``: ``"once"`` stores each shared tensor once (at its
            first index, as Hugging Face's safetensors writer does), ``"all"`` at every index.
        prefix: key prefix, e.g. ``"speculator."`` (fms-extras' ``MLPSpeculatorPreTrainedModel``).
        inner_dim: written as is; 0 means ``emb_dim`` (128).
        fmt: ``safetensors`` or ``bin``.
    """
    import torch
    import torch.nn.functional as F

    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    g = torch.Generator().manual_seed(seed)
    H, V = target_dims(target)
    inner = inner_dim or H
    distinct = 1 if tie_weights else n_predict

    def rms_rows(x: torch.Tensor) -> torch.Tensor:
        return x / x.pow(2).mean(dim=-1, keepdim=True).sqrt()

    embs, heads = [], []
    for _ in range(distinct):
        e = rms_rows(torch.randn(V, inner, generator=g))
        embs.append(e)
        h = F.gelu(e)
        heads.append(h / h.norm(dim=-1, keepdim=True) * 4.0)
    projs = [torch.randn(inner, H if i == 0 else inner, generator=g) * (proj_scale / (H if i == 0 else inner) ** 0.5)
             for i in range(min(n_predict, 2) if tie_weights else n_predict)]
    lns = [(1.0 + 0.1 * torch.randn(inner, generator=g), 0.1 * torch.randn(inner, generator=g))
           for _ in range(distinct)]
    sd = {}
    for i in range(n_predict):
        if tie_weights and tied_keys == "once" and i > 0:
            if i == 1:
                sd[f"{prefix}proj.1.weight"] = projs[1]
            continue
        j = 0 if tie_weights else i
        sd[f"{prefix}emb.{i}.weight"] = embs[j].clone()
        sd[f"{prefix}head.{i}.weight"] = heads[j].clone()
        sd[f"{prefix}ln.{i}.weight"] = lns[j][0].clone()
        sd[f"{prefix}ln.{i}.bias"] = lns[j][1].clone()
        sd[f"{prefix}proj.{i}.weight"] = projs[min(i, 1) if tie_weights else i].clone()
    cfg = {"architectures": ["MLPSpeculatorPreTrainedModel"], "model_type": "mlp_speculator", "emb_dim": H,
           "inner_dim": inner_dim, "vocab_size": V, "n_predict": n_predict,
           "top_k_tokens_per_head": [4, 3, 2, 2, 2, 2, 2, 2][:n_predict], "n_candidates": 5,
           "tie_weights": tie_weights, "scale_input": scale_input, "torch_dtype": "float32"}
    return _write_checkpoint(path, cfg, sd, "model.safetensors" if fmt == "safetensors" else "pytorch_model.bin")
