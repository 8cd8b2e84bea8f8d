"""Shared helpers for the draft-training pipeline: paths, seeding, time budgets."""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
CACHE = REPO / ".cache" / "bench"
DATA = CACHE / "data"
DRAFTS = REPO / "bench" / "drafts"


def seed_everything(seed: int) -> None:
    random.seed(seed)
    try:
        import numpy as np

        np.random.seed(seed)
    except ImportError:  # pragma: no cover
        pass
    try:
        import torch

        torch.manual_seed(seed)
    except ImportError:  # pragma: no cover
        pass


class Budget:
    """A wall-clock budget in minutes; ``left()`` seconds, ``over()`` when spent."""

    def __init__(self, minutes: float) -> None:
        self.minutes = minutes
        self.start = time.monotonic()
        self.deadline = self.start + 60.0 * minutes

    def elapsed(self) -> float:
        return time.monotonic() - self.start

    def left(self) -> float:
        return self.deadline - time.monotonic()

    def over(self) -> bool:
        return self.left() <= 0


def command_line() -> str:
    return " ".join([Path(sys.executable).name, "-m", sys.modules["__main__"].__spec__.name
                     if getattr(sys.modules["__main__"], "__spec__", None) else sys.argv[0], *sys.argv[1:]])


def write_json(path: Path, obj) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(obj, indent=2) + "\n")
    os.replace(tmp, path)


def read_jsonl(path: Path) -> list[dict]:
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


#: the tensors of an EAGLE draft's vocabulary, as the EAGLE plugin reads them (draft id d is target id d + d2t[d]; t2d
#: marks the target ids in it)
DRAFT_VOCAB = ("d2t", "t2d")


def name_dir(value: str) -> tuple[str, Path]:
    """``NAME=DIR`` as an option's value (``--also-evaluate``): the name and the folder."""
    name, sep, path = value.partition("=")
    if not (sep and name and path):
        raise argparse.ArgumentTypeError(f"expected NAME=DIR, got {value!r}")
    return name, Path(path)


def add_evaluation_options(ap: argparse.ArgumentParser, hidden: str = "bench.hidden") -> None:
    """``--also-evaluate NAME=DIR`` and ``--evaluate DRAFT``, as the EAGLE trainers take them (``hidden``: the prefill
    the answer sets need, as the help shows it)."""
    ap.add_argument("--also-evaluate", action="append", default=[], metavar="NAME=DIR", type=name_dir,
                    help=f"after training, also evaluate the saved draft on the answers in DIR (bench.make_data + "
                         f"{hidden}): train_report.json's evaluations[NAME]; repeatable")
    ap.add_argument("--evaluate", type=Path, default=None,
                    help="no training: evaluate this saved draft on --heldout-dir and print the result")


def evaluate_only(args: argparse.Namespace, evaluate_saved) -> bool:
    """``--evaluate DRAFT``: print ``evaluate_saved(DRAFT, --heldout-dir, --eval-steps)``; True when asked (then no
    training)."""
    if args.evaluate is None:
        return False
    print(json.dumps(evaluate_saved(args.evaluate, args.heldout_dir, args.eval_steps), indent=1))
    return True
