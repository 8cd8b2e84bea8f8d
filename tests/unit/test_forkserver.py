"""The fork server that test engines start from: each job sees its own environment and path."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from vllm_spec_plugins.testing import forkserver

PROBE = textwrap.dedent("""
    import gc, json, os, sys
    class Cycle: pass
    c = Cycle(); c.me = c; del c
    out = {"frozen": gc.get_freeze_count(), "gc_on": gc.isenabled(), "collected": gc.collect(),
           "flag": os.environ.get("VLLM_SPEC_PLUGINS_PROBE"), "cwd": os.getcwd(), "path": sys.path,
           "ours_loaded": [m for m in sys.modules if m.startswith("vllm_spec_plugins")],
           "vllm_loaded": "vllm" in sys.modules, "pid": os.getpid(), "pgid": os.getpgid(0)}
    print("PROBE " + json.dumps(out))
    if os.environ.get("VLLM_SPEC_PLUGINS_PROBE") == "sleep":
        import time; time.sleep(60)
    if os.environ.get("VLLM_SPEC_PLUGINS_PROBE") == "wait":  # until the other job of the pair has started
        import time
        open(os.environ["VLLM_SPEC_PLUGINS_PROBE_MINE"], "w").close()
        for _ in range(600):
            if os.path.exists(os.environ["VLLM_SPEC_PLUGINS_PROBE_OTHER"]):
                break
            time.sleep(0.1)
        else:
            sys.exit(9)
    sys.exit(int(os.environ.get("VLLM_SPEC_PLUGINS_PROBE_RC", "0")))
""")


def _probe(log: str) -> dict:
    return json.loads(next(line for line in log.splitlines() if line.startswith("PROBE "))[6:])


def test_import_key_ignores_only_what_is_read_after_import():
    base = {"PATH": "/bin", "LD_PRELOAD": "libgomp.so", "PYTHONPATH": "/a"}
    key = forkserver.import_key("py", base)
    assert forkserver.import_key("py", {**base, "VLLM_SPEC_PLUGINS": "medusa", "VLLM_SPEC_PLUGINS_STRICT": "1",
                                        "PYTEST_CURRENT_TEST": "t", "PYTHONPATH": "/b"}) == key
    assert forkserver.import_key("py", {**base, "LD_PRELOAD": ""}) != key
    assert forkserver.import_key("py", {**base, "TRITON_INTERPRET": "1"}) != key
    assert forkserver.import_key("other-python", base) != key
    # the vLLM version a job runs is ours but read at import (its overlay comes first on PYTHONPATH)
    v034 = forkserver.import_key("py", {**base, "VLLM_SPEC_PLUGINS_TEST_VLLM": "0.34"})
    assert v034 != key and v034 != forkserver.import_key("py", {**base, "VLLM_SPEC_PLUGINS_TEST_VLLM": "0.32"})


def test_jobs_get_their_own_environment_folder_path_and_exit_code(tmp_path, monkeypatch):
    monkeypatch.setenv("VLLM_SPEC_PLUGINS_TEST_FORKSERVER", "1")
    mods = tmp_path / "mods"
    mods.mkdir()
    (mods / "vsp_probe_job.py").write_text(PROBE)
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(mods), os.environ.get("PYTHONPATH", "")]))
    forkserver._close_all()

    rc, log = forkserver.run_module(sys.executable, "vsp_probe_job", [], {**env, "VLLM_SPEC_PLUGINS_PROBE": "a"}, 120)
    first = _probe(log)
    assert rc == 0 and first["flag"] == "a" and first["cwd"] == str(work)
    assert first["vllm_loaded"], "the job did not start from the server's import"
    assert first["ours_loaded"] == [], "the server imported this package: it would not start fresh in each job"
    assert first["path"][:2] == [str(work), str(mods)]
    assert first["pgid"] == first["pid"]
    assert first["frozen"] > 100_000, "the server's import was not frozen: every job's collections walk it"
    assert first["gc_on"] and first["collected"] > 0, "a job's own garbage is no longer collected"
    assert len(forkserver._servers) == 1

    rc, log = forkserver.run_module(sys.executable, "vsp_probe_job", [],
                                    {**env, "VLLM_SPEC_PLUGINS_PROBE": "b", "VLLM_SPEC_PLUGINS_PROBE_RC": "3"}, 120)
    second = _probe(log)
    assert rc == 3 and second["flag"] == "b" and second["pid"] != first["pid"]
    assert len(forkserver._servers) == 1, "a job that differs only in what is read later got a server of its own"

    with pytest.raises(subprocess.TimeoutExpired):
        forkserver.run_module(sys.executable, "vsp_probe_job", [], {**env, "VLLM_SPEC_PLUGINS_PROBE": "sleep"}, 4)
    rc, log = forkserver.run_module(sys.executable, "vsp_probe_job", [], {**env, "VLLM_SPEC_PLUGINS_PROBE": "c"}, 120)
    assert rc == 0 and _probe(log)["flag"] == "c", "the server did not survive a job killed at its timeout"
    forkserver._close_all()


def test_turned_off_every_job_is_a_plain_process(tmp_path, monkeypatch):
    monkeypatch.setenv("VLLM_SPEC_PLUGINS_TEST_FORKSERVER", "0")
    (tmp_path / "vsp_probe_job.py").write_text(PROBE)
    env = dict(os.environ, PYTHONPATH=str(tmp_path), VLLM_SPEC_PLUGINS_PROBE="x")
    forkserver._close_all()
    rc, log = forkserver.run_module(sys.executable, "vsp_probe_job", [], env, 60)
    assert rc == 0 and not _probe(log)["vllm_loaded"] and forkserver._servers == []


def test_jobs_from_two_threads_run_at_the_same_time_on_two_servers(tmp_path, monkeypatch):
    """Each job waits until the other has started: run one after the other, the first would exit 9."""
    import threading

    monkeypatch.setenv("VLLM_SPEC_PLUGINS_TEST_FORKSERVER", "1")
    (tmp_path / "vsp_probe_job.py").write_text(PROBE)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]),
               VLLM_SPEC_PLUGINS_PROBE="wait")
    forkserver._close_all()
    out: dict[str, tuple[int, str]] = {}

    def job(me: str, other: str) -> None:
        out[me] = forkserver.run_module(sys.executable, "vsp_probe_job", [], {
            **env, "VLLM_SPEC_PLUGINS_PROBE_MINE": str(tmp_path / me),
            "VLLM_SPEC_PLUGINS_PROBE_OTHER": str(tmp_path / other)}, 300)

    threads = [threading.Thread(target=job, args=pair) for pair in (("a", "b"), ("b", "a"))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert out["a"][0] == 0 and out["b"][0] == 0, out
    assert all(_probe(log)["vllm_loaded"] for _, log in out.values()), "a job ran outside a server"
    assert len(forkserver._servers) == 2 and not any(s.busy for s in forkserver._servers)
    forkserver._close_all()


def test_engines_start_vllm_processes_with_the_method_asked_for(monkeypatch):
    """``run_engine(start_method=...)``: the CPU platform's ``spawn`` is replaced by ``fork`` right after it is set,
    and left alone for ``spawn``; any other value is refused before an engine starts."""
    from vllm.platforms.cpu import CpuPlatform

    from vllm_spec_plugins.testing import engine

    def cpu_platform_sets_spawn(cls, vllm_config):
        os.environ["VLLM_WORKER_MULTIPROC_METHOD"] = "spawn"

    for method, want in (("spawn", "spawn"), ("fork", "fork")):
        monkeypatch.setattr(CpuPlatform, "check_and_update_config", classmethod(cpu_platform_sets_spawn))
        engine._start_processes_with(method)
        CpuPlatform.check_and_update_config(None)
        assert os.environ["VLLM_WORKER_MULTIPROC_METHOD"] == want, method
    with pytest.raises(ValueError, match="start_method must be 'fork' or 'spawn', got 'forkserver'"):
        engine.run_engine("unused", start_method="forkserver")
