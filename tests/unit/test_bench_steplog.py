"""bench.steplog: the per-step log a benchmark engine writes for the adaptive policy, and its summary."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from bench import steplog
from vllm_spec_plugins import policy as P

from .test_policy import Clock, simulate


@pytest.fixture
def restore_end_step(monkeypatch):
    monkeypatch.setattr(P.AdaptivePolicy, "end_step", P.AdaptivePolicy.end_step)  # put back at teardown


def test_each_step_is_logged_as_the_policy_timed_it(tmp_path, restore_end_step):
    assert steplog.install(str(tmp_path), "our EAGLE")
    assert steplog.install(str(tmp_path), "our EAGLE")  # twice: still one line per step
    clock = Clock()
    pol = P.AdaptivePolicy(2, P.PolicySettings(mode="pinned", pin=1), clock=clock)
    simulate(pol, clock, steps=10, b=4, cost=lambda b, kv, kd: 0.010 + 0.005 * kv, alpha=lambda s: 0.5)
    (log,) = tmp_path.glob("*.tsv")
    assert log.name == f"our EAGLE-{os.getpid()}.tsv"
    rows = steplog.read(log)
    assert len(rows) == 10
    assert rows[0] == (4, 1, 0, 0, True, pytest.approx(0.010), 0)  # the first step verifies nothing yet
    assert [r[:6] for r in rows[1:]] == [(4, 1, 1, 4, True, pytest.approx(0.015))] * 9
    accepted = [r[6] for r in rows]
    assert sum(accepted) == pol.accepted_tokens and 0 < sum(accepted) < 36 and len(set(accepted)) > 1  # per step
    out = steplog.summarize(log, sequence=True)
    assert "10 steps with requests, drafted k=1: 100%" in out
    share = f"{sum(accepted) / 36:.0%}"
    assert f"      4  1     9              15.0      15.0 {share:>8}" in out  # batch 4, k 1, 9 steady steps
    assert "4/10:10 4/11:15" in out
    with log.open("a") as f:  # an empty step (a batch just finished): vLLM's K, not the policy's choice
        f.write("0\t2\t0\t0\t1\t0.002\t0\n")
    assert "10 steps with requests, drafted k=1: 100%" in steplog.summarize(log)


def test_a_log_directory_that_is_not_one_is_refused_without_stopping_anything(tmp_path, capsys, restore_end_step):
    before = P.AdaptivePolicy.end_step
    missing = tmp_path / "nowhere"
    assert steplog.install(str(missing), "x") is False
    assert P.AdaptivePolicy.end_step is before
    err = capsys.readouterr().err
    assert f"BENCH_STEP_LOG={str(missing)!r} is not a directory" in err and "not logging steps" in err


def test_a_malformed_log_line_names_the_file_and_line(tmp_path):
    bad = tmp_path / "x-1.tsv"
    bad.write_text("4\t1\t1\t4\t1\t0.015\t2\n4\t1\t1\n")
    with pytest.raises(ValueError, match=r"x-1.tsv:2: expected 7 tab-separated fields, found 3"):
        steplog.read(bad)


def test_the_summary_says_where_logs_come_from_when_there_are_none(tmp_path, capsys):
    assert steplog.main([str(tmp_path)]) == 1
    assert f"python -m bench.policy --step-log {tmp_path}" in capsys.readouterr().err


@pytest.mark.parametrize("on", [True, False])
def test_the_engine_side_hook_installs_only_where_asked(tmp_path, on):
    """What an engine process gets from bench.policy --step-log: sitecustomize wraps end_step at start-up, from any
    working directory; without BENCH_STEP_LOG it does nothing."""
    env = {k: v for k, v in os.environ.items() if k not in (steplog.ENV_DIR, steplog.ENV_TAG)}
    env.update(steplog.env_for("our EAGLE, adaptive policy", tmp_path, env))
    assert env["PYTHONPATH"].split(os.pathsep)[0] == str(steplog.SITE)
    assert env[steplog.ENV_TAG] == "our_EAGLE_adaptive_policy"
    if not on:
        del env[steplog.ENV_DIR]
    code = "from vllm_spec_plugins.policy import AdaptivePolicy as A; print(getattr(A.end_step, '_bench_steplog', 0))"
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == ("True" if on else "0")
