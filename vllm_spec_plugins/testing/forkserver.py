"""Start test engines from an interpreter that has already imported vLLM.

On a 2-core CPU machine ``from vllm import LLM`` takes about 12 s, three quarters of what
starting a small in-process engine takes. :func:`~vllm_spec_plugins.testing.run_engine` therefore
asks a *fork server* for each engine: a Python process started once with the job's
environment, which imports vLLM (and nothing of this package) and then forks one child per
job. The child sets the job's environment, changes to its folder, becomes the leader of its
own process group and runs ``python -m vllm_spec_plugins.testing.engine JOB OUT`` there, so
this package, its plugins and vLLM's plugin discovery all start fresh in every engine, as in
a new process. vLLM itself forks its workers the same way.

Once vLLM is imported, the server moves everything the import left into the garbage
collector's permanent generation (``gc.freeze()``, the usual move before forking workers), so a
job's collections no longer walk vLLM's and torch's objects (622k here). vLLM collects
explicitly about ten times while it starts an engine (around each model load and memory
measurement). A small TP=1 engine took 8.3 s instead of 10.3 on V1 and 14.4 s instead of 18.4
on MRV2 (medians of 3, side by side, same outputs); TP=2 engines gained little (18.1 s and 18.5).
The garbage collector stays on for whatever a job creates, and a job unfreezes the import as it
exits, so its exit collects it as a plain process's exit does (frozen, Triton's bindings warn of
leaked objects at exit).

What the fork cannot change is read once, at ``import vllm``: the interpreter, and every
environment variable outside :data:`READ_AFTER_IMPORT` (``LD_PRELOAD``, ``PYTHONPATH``,
``TRITON_*``, vLLM's logging variables...). Jobs whose other variables differ get a server of
their own. ``VLLM_SPEC_PLUGINS_TEST_FORKSERVER=0`` turns the servers off: every engine is
then a plain ``subprocess`` run.
"""

from __future__ import annotations

import atexit
import json
import os
import select
import signal
import subprocess
import tempfile
import threading
import time
from typing import Any

#: Variables that nothing reads while ``from vllm import LLM`` runs: a server serves jobs
#: whose environments differ only in these.
#: ``PYTHONPATH`` is set again in each job (``sys.path``), provided that no module the server
#: imported came from an entry the job's ``PYTHONPATH`` lacks.
READ_AFTER_IMPORT_PREFIXES = ("VLLM_SPEC_PLUGINS",)
READ_AFTER_IMPORT = frozenset({"VLLM_ENABLE_V1_MULTIPROCESSING", "VLLM_CPU_OMP_THREADS_BIND", "PYTHONPATH",
                               "PYTEST_CURRENT_TEST", "PWD", "OLDPWD"})

#: Variables of ours that differ between imports all the same: the vLLM version a job runs
#: (:func:`vllm_spec_plugins.testing.mrv2.vllm_env`; its overlay comes first on ``PYTHONPATH``).
READ_AT_IMPORT = frozenset({"VLLM_SPEC_PLUGINS_TEST_VLLM"})

#: How many servers stay up at once (each holds an idle interpreter of about 0.6 GB).
MAX_SERVERS = 4

_SERVER_CODE = r"""
import json, os, sys
proto = os.fdopen(os.dup(1), "w")
os.dup2(2, 1)
from vllm import LLM, SamplingParams  # the import every job shares
sys.stderr.flush()
import gc  # what the import left is never garbage: keep every job's collections off it (module docstring)
gc.collect()
gc.freeze()
entries = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
roots = sorted({os.path.join(os.path.abspath(p), "") for p in sys.path if p}, key=len, reverse=True)
found = set()  # the sys.path entry each imported module came from (the longest that holds its file)
for m in list(sys.modules.values()):
    f = getattr(m, "__file__", None) or ""
    hit = next((r for r in roots if f.startswith(r)), None)
    if hit:
        found.add(hit)
used = [p for p in entries if os.path.join(os.path.abspath(p), "") in found]
proto.write(json.dumps({"ready": True, "used": used}) + "\n"); proto.flush()
while True:
    line = sys.stdin.readline()
    if not line:
        os._exit(0)
    job = json.loads(line)
    pid = os.fork()
    if pid == 0:
        break
    proto.write(json.dumps({"pid": pid}) + "\n"); proto.flush()
    _, status = os.waitpid(pid, 0)
    proto.write(json.dumps({"rc": os.waitstatus_to_exitcode(status)}) + "\n"); proto.flush()
os.setsid()
proto.close()
null = os.open(os.devnull, os.O_RDONLY); os.dup2(null, 0); os.close(null)
log = os.open(job["log"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
os.dup2(log, 1); os.dup2(log, 2); os.close(log)
sys.stdin = open(0, closefd=False)
os.environ.clear(); os.environ.update(job["env"])
os.chdir(job["cwd"])
job_entries = [p for p in job["env"].get("PYTHONPATH", "").split(os.pathsep) if p]
sys.path[:] = [os.getcwd(), *job_entries, *(p for p in sys.path[1:] if p not in entries)]
import importlib; importlib.invalidate_caches()
import atexit; atexit.register(gc.unfreeze)  # runs last: the exit collects the import as a plain process's does
sys.argv = [job["argv"][0], *job["argv"][1:]]
import runpy
runpy.run_module(job["module"], run_name="__main__", alter_sys=True)
"""


def enabled() -> bool:
    return os.environ.get("VLLM_SPEC_PLUGINS_TEST_FORKSERVER", "1").strip().lower() not in ("0", "false", "no", "off")


#: The interpreter and the variables read at import (see :func:`import_key`).
ImportKey = tuple[str, tuple[tuple[str, str], ...]]


def import_key(python: str, env: dict[str, str]) -> ImportKey:
    """What a server must share with a job: the interpreter and the variables read at import."""
    kept = sorted((k, v) for k, v in env.items()
                  if k in READ_AT_IMPORT or (k not in READ_AFTER_IMPORT and not k.startswith(READ_AFTER_IMPORT_PREFIXES)))
    return (python, tuple(kept))


class _Server:
    def __init__(self, python: str, env: dict[str, str]) -> None:
        self.import_log = tempfile.NamedTemporaryFile(prefix="vsp-forkserver-", suffix=".log", delete=False)
        self.proc = subprocess.Popen([python, "-c", _SERVER_CODE], env=env, stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=self.import_log, cwd=tempfile.gettempdir())
        self._buf = b""
        self._import_text: str | None = None
        self.used: list[str] = []
        self.key = import_key(python, env)
        self.busy = False  # running a job (under _lock)

    def _message(self, deadline: float | None) -> dict[str, Any] | None:
        """The next protocol line, or None at the deadline or if the server is gone."""
        assert self.proc.stdout is not None  # Popen(stdout=PIPE)
        fd = self.proc.stdout.fileno()
        while b"\n" not in self._buf:
            wait = None if deadline is None else max(0.0, deadline - time.monotonic())
            ready, _, _ = select.select([fd], [], [], wait)
            if not ready:
                return None
            chunk = os.read(fd, 65536)
            if not chunk:
                return None
            self._buf += chunk
        line, self._buf = self._buf.split(b"\n", 1)
        msg: dict[str, Any] = json.loads(line)  # the server writes one JSON object per line
        return msg

    def ready(self, timeout: float) -> bool:
        msg = self._message(time.monotonic() + timeout)
        if not (msg and msg.get("ready")):
            return False
        self.used = list(msg.get("used", []))
        return True

    def serves(self, env: dict[str, str]) -> bool:
        """Whether every ``PYTHONPATH`` entry the server imported from is on the job's too."""
        entries = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
        return all(p in entries for p in self.used)

    def import_text(self) -> str:
        """What ``import vllm`` printed in the server: each job's log begins with it, as in a new process."""
        if self._import_text is None:
            with open(self.import_log.name, errors="replace") as f:
                self._import_text = f.read()
        return self._import_text

    def alive(self) -> bool:
        return self.proc.poll() is None

    def run(self, module: str, argv: list[str], env: dict[str, str], cwd: str, log_path: str,
            timeout: float) -> int | None:
        """Run one job; its exit code, or None if the server broke down (the caller runs it another way).

        Raises ``subprocess.TimeoutExpired`` after killing the job's process group at the timeout.
        """
        job = {"module": module, "argv": argv, "env": env, "cwd": cwd, "log": log_path}
        assert self.proc.stdin is not None  # Popen(stdin=PIPE)
        try:
            self.proc.stdin.write((json.dumps(job) + "\n").encode())
            self.proc.stdin.flush()
        except OSError:
            return None
        deadline = time.monotonic() + timeout
        started = self._message(deadline)
        if not started or "pid" not in started:
            return None
        done = self._message(deadline)
        if done is None and self.alive():
            try:
                os.killpg(started["pid"], signal.SIGKILL)
            except OSError:
                pass
            self._message(time.monotonic() + 30)
            raise subprocess.TimeoutExpired([module, *argv], timeout)
        if not done or "rc" not in done:
            return None
        return int(done["rc"])

    def close(self) -> None:
        assert self.proc.stdin is not None  # Popen(stdin=PIPE)
        try:
            self.proc.stdin.close()
            self.proc.wait(timeout=10)
        except Exception:  # noqa: BLE001
            self.proc.kill()
        try:
            os.unlink(self.import_log.name)
        except OSError:
            pass


#: Idle and busy servers, least recently used first. A server runs one job at a time: jobs run at the same
#: time (threads) get servers of their own, up to :data:`MAX_SERVERS`, then plain subprocesses.
_servers: list[_Server] = []
_lock = threading.Lock()


def _server_for(python: str, env: dict[str, str]) -> _Server | None:
    """An idle server for the job (marked busy: :func:`_release` it), a new one, or None."""
    key = import_key(python, env)
    with _lock:
        for server in [s for s in _servers if s.key == key and not s.busy]:
            if server.alive() and server.serves(env):
                _servers.remove(server)
                _servers.append(server)  # most recently used last
                server.busy = True
                return server
            _servers.remove(server)  # gone, or importing from entries the job lacks
            server.close()
        while len(_servers) >= MAX_SERVERS:
            idle = next((s for s in _servers if not s.busy), None)
            if idle is None:
                return None  # every server is busy: a plain subprocess
            _servers.remove(idle)
            idle.close()
        server = _Server(python, env)
        server.busy = True
        _servers.append(server)
    if not server.ready(timeout=300):
        _drop(server)
        return None
    return server


def _release(server: _Server) -> None:
    with _lock:
        server.busy = False


def _drop(server: _Server) -> None:
    with _lock:
        if server in _servers:
            _servers.remove(server)
    server.close()


def run_module(python: str, module: str, argv: list[str], env: dict[str, str], timeout: float) -> tuple[int, str]:
    """``python -m module *argv`` with ``env``: (exit code, stdout and stderr together).

    Through a fork server when :func:`enabled`, else (or when a server breaks down, or all are busy) as
    a plain subprocess. Raises ``subprocess.TimeoutExpired`` at the timeout. Thread-safe: jobs started
    from several threads run at the same time.
    """
    if enabled():
        server = _server_for(python, env)
        if server is not None:
            with tempfile.NamedTemporaryFile(prefix="vsp-engine-", suffix=".log", delete=False) as f:
                log_path = f.name
            try:
                rc = server.run(module, [module, *argv], env, os.getcwd(), log_path, timeout)
                if rc is not None:
                    with open(log_path, errors="replace") as f:
                        out = rc, server.import_text() + f.read()
                    _release(server)
                    return out
            except BaseException:
                _release(server)
                raise
            finally:
                os.unlink(log_path)
            _drop(server)
    proc = subprocess.run([python, "-m", module, *argv], env=env, capture_output=True, text=True, timeout=timeout)
    return proc.returncode, proc.stdout + proc.stderr


@atexit.register
def _close_all() -> None:
    with _lock:
        servers = list(_servers)
        _servers.clear()
    for server in servers:
        server.close()
