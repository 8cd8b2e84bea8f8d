"""The optimizer loop the draft trainers share (train_medusa, train_eagle, train_eagle3); each keeps its loss.

Epochs of batches under a wall-clock :class:`~bench.common.Budget`: after the fourth optimizer step the
measured step time fixes how many steps fit (``plan``), and the learning rate follows
:func:`~bench.draft_data.set_lr` (linear warm-up, cosine to 10 % at the planned step); the loop stops when
the budget left falls under ``reserve`` seconds (kept for the evaluations and saving that follow) or at the
planned step. A progress bar shows the trainer's running figures, and every epoch ends with the trainer's
record (its evaluation included), printed and kept in ``history``.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from bench.common import Budget
from bench.draft_data import set_lr


@dataclass
class LoopResult:
    history: list[dict[str, Any]] = field(default_factory=list)
    """One record per epoch (from ``record``), after any the caller put in ``history`` before."""
    steps: int = 0
    stopped: bool = False
    """The budget or the planned step count ended training (not ``max_epochs``)."""
    total_steps: int | None = None
    """The step count planned from the measured step time."""
    train_s: float = 0.0


def train_loop(*, desc: str, opt: Any, budget: Budget, lr: float, warmup: int, steps_per_epoch: int,
               max_epochs: int, batches: Callable[[int], Sequence[Any]], step: Callable[[Any, dict[str, Any]], None],
               new_sums: Callable[[], dict[str, Any]], record: Callable[[int, dict[str, Any]], dict[str, Any]],
               plan: Callable[[float], int], reserve: float | Callable[[], float] = 0.0,
               params: Iterable[Any] | None = None, clip: float | None = None,
               postfix: Callable[[dict[str, Any]], dict[str, str]] | None = None,
               history: list[dict[str, Any]] | None = None, clock: Callable[[], float] = time.monotonic,
               progress: bool = True) -> LoopResult:
    """Train until ``max_epochs``, the planned step count or the budget's ``reserve``.

    ``batches(epoch)``: the epoch's batches. ``step(batch, sums)``: forward and backward of one batch (the
    loop clips, sets the rate, steps and zeroes the optimizer), adding its figures to ``sums``, a fresh
    ``new_sums()`` each epoch. ``record(epoch, sums)``: the epoch's record (the loop adds ``epoch``,
    ``steps`` and ``partial``). ``plan(step_s)``: how many steps fit, from the mean time of the first four
    (capped at ``steps_per_epoch * max_epochs``, at least 8).
    """
    import torch
    from tqdm import tqdm

    out = LoopResult(history=history if history is not None else [])
    params = list(params) if params is not None else None
    t_train = clock()
    bar = tqdm(total=steps_per_epoch * max_epochs, desc=desc, unit="step", disable=not progress)
    for epoch in range(1, max_epochs + 1):
        epoch_batches = batches(epoch)
        sums = new_sums()
        done = 0
        for b in epoch_batches:
            if budget.left() < (reserve() if callable(reserve) else reserve):
                out.stopped = True
                break
            step(b, sums)
            if clip is not None and params is not None:
                torch.nn.utils.clip_grad_norm_(params, clip)
            if out.steps == 3 and out.total_steps is None:  # fix the schedule from the measured step time
                step_s = (clock() - t_train) / 4
                out.total_steps = max(8, min(plan(step_s), steps_per_epoch * max_epochs))
                bar.total = out.total_steps
            set_lr(opt, lr, out.steps, warmup, out.total_steps)
            opt.step()
            opt.zero_grad(set_to_none=True)
            out.steps += 1
            done += 1
            bar.update(1)
            if postfix is not None and out.steps % 10 == 0:
                bar.set_postfix(ep=epoch, left=f"{budget.left():.0f}s", **postfix(sums))
            if out.total_steps is not None and out.steps >= out.total_steps:
                out.stopped = True
                break
        rec = {"epoch": epoch, "steps": out.steps, "partial": out.stopped and done < len(epoch_batches),
               **record(epoch, sums)}
        out.history.append(rec)
        if progress:
            tqdm.write(f"epoch {epoch}: " + json.dumps({k: v for k, v in rec.items() if k != "epoch"}))
        if out.stopped:
            break
    bar.close()
    out.train_s = clock() - t_train
    return out
