"""bench.policy_sim: the simulated table of docs/benchmarks.md ("Spells of slow steps")."""

from __future__ import annotations

import pytest

from bench import policy_sim
from tests.unit import test_policy as T


def test_the_recorded_step_noise_is_what_the_docs_describe():
    ratios = policy_sim.noise()
    assert len(ratios) == 508
    ordered = sorted(ratios)
    assert 0.9 < ordered[len(ordered) // 4] <= 1.01  # normalised by the lower quartile of each batch size
    assert ordered[int(0.9 * len(ordered))] > 1.3  # spells: a tenth of the steps 1.35x or slower


def test_replay_scales_the_engine_costs_by_the_recorded_ratios_in_order():
    ratios = [1.0, 2.0, 1.5]
    cost = policy_sim.replay(0, ratios)
    got = [cost(16, 1, 1) / T._cpu_batch_16(16, 1, 1) for _ in range(6)]
    start = got[0]
    i = ratios.index(start)
    assert got == pytest.approx([ratios[(i + j) % 3] for j in range(6)])


def test_settings_must_name_a_policy_setting(capsys):
    with pytest.raises(SystemExit):
        policy_sim.main(["--settings", "compare_sample=8"])
    assert "'compare_sample=8': expected NAME=VALUE with NAME a PolicySettings field" in capsys.readouterr().err
    assert policy_sim._setting("paired=0") == ("paired", False)
    assert policy_sim._setting("compare_samples=8") == ("compare_samples", 8)
