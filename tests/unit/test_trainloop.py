"""The trainers' shared loop (bench/trainloop.py): schedule from the measured step time, budget, records."""

from __future__ import annotations

import torch

from bench.trainloop import train_loop


class FakeBudget:
    def __init__(self, seconds: float, clock):
        self.end, self.clock = seconds, clock

    def left(self) -> float:
        return self.end - self.clock()


def _run(budget_s: float, step_s: float = 1.0, max_epochs: int = 3, reserve: float = 0.0, clip=None, plan=None):
    now = [0.0]
    clock = lambda: now[0]  # noqa: E731
    model = torch.nn.Linear(2, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = torch.randn(8, 2, generator=torch.Generator().manual_seed(0)), torch.zeros(8, 1)
    lrs: list[float] = []

    def step(b, sums):
        now[0] += step_s  # each step costs step_s seconds of the fake clock
        loss = ((model(x[b]) - y[b]) ** 2).mean()
        loss.backward()
        sums["loss"] += float(loss)
        sums["n"] += 1
        lrs.append(opt.param_groups[0]["lr"])

    out = train_loop(desc="t", opt=opt, budget=FakeBudget(budget_s, clock), lr=0.1, warmup=2, steps_per_epoch=4,
                     max_epochs=max_epochs, batches=lambda epoch: [slice(2 * i, 2 * i + 2) for i in range(4)],
                     step=step, new_sums=lambda: {"loss": 0.0, "n": 0},
                     record=lambda epoch, m: {"train_loss": m["loss"] / max(m["n"], 1)},
                     plan=plan or (lambda s: int(budget_s / s)), reserve=reserve, params=model.parameters(), clip=clip,
                     clock=clock, progress=False)
    return out, lrs


def test_runs_every_epoch_when_the_budget_allows():
    out, _ = _run(budget_s=100.0)
    assert out.steps == 12 and out.total_steps == 12  # planned 100 steps, capped at 3 epochs x 4
    assert [r["epoch"] for r in out.history] == [1, 2, 3] and not any(r["partial"] for r in out.history)
    assert out.history[-1]["train_loss"] < out.history[0]["train_loss"], "the optimizer did not step"
    assert out.train_s == 12.0


def test_the_measured_step_time_plans_the_steps_and_the_rate_decays_to_them():
    seen: list[float] = []
    out, lrs = _run(budget_s=100.0, step_s=2.0, max_epochs=5, plan=lambda s: seen.append(s) or 6)
    assert seen == [2.0], "the plan did not get the mean time of the first four steps"
    assert out.total_steps == 8 and out.steps == 8 and out.stopped  # 6 planned, at least 8
    assert len(out.history) == 2 and out.history[-1]["partial"] is False
    import math

    assert lrs[0] == 0.1  # the rate the optimizer was built with: the loop sets one after each backward
    assert abs(lrs[-1] - 0.1 * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * 6 / 8)))) < 1e-9


def test_the_budget_reserve_stops_mid_epoch_and_marks_it_partial():
    out, _ = _run(budget_s=106.0, step_s=20.0, max_epochs=3, reserve=50.0)
    assert out.stopped and out.steps == 3  # 106 - 3 * 20 = 46 s left < 50 s kept for evaluation
    assert out.history[-1]["partial"] is True
