"""A throwaway ``sitecustomize.py`` that counts calls inside an engine's processes (tests only).

An engine test writes one with :func:`counting_site`: its code starts with :data:`PRELUDE` (``counts``, a dict of
named counters, and ``_save()``, which writes them to a file of this process), then the test's own hooks
(``when_imported``). The engine must run as a new process (``VLLM_SPEC_PLUGINS_TEST_FORKSERVER=0``): the test fork
server never runs ``sitecustomize``. :func:`read_counts` sums every process's counters.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

#: The head of every counting ``sitecustomize.py``; ``{names}``: the counters, all starting at 0.
PRELUDE = '''
import json, os
from vllm_spec_plugins.patch._util import when_imported

OUT = os.environ["TEST_SITE_COUNTS"]
counts = dict.fromkeys({names}, 0)


def _save():
    with open(os.path.join(OUT, f"{{os.getpid()}}.json"), "w") as f:
        json.dump(counts, f)
'''


def counting_site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, names: list[str], hooks: str, tag: str = ""
                  ) -> tuple[dict[str, str], Path]:
    """Write the ``sitecustomize.py`` (:data:`PRELUDE` for ``names``, then ``hooks``) under ``tmp_path``, make the
    engine run as a new process; the environment the engine needs (``PYTHONPATH``, where to write the counts) and
    the counts' folder."""
    monkeypatch.setenv("VLLM_SPEC_PLUGINS_TEST_FORKSERVER", "0")
    site, counts = tmp_path / f"site{tag}", tmp_path / f"counts{tag}"
    site.mkdir()
    counts.mkdir()
    (site / "sitecustomize.py").write_text(PRELUDE.format(names=repr(names)) + hooks)
    return {"PYTHONPATH": str(site), "TEST_SITE_COUNTS": str(counts)}, counts


def read_counts(folder: Path) -> dict[str, int]:
    """Every process's counters, summed."""
    total: dict[str, int] = {}
    for f in folder.glob("*.json"):
        for key, n in json.loads(f.read_text()).items():
            total[key] = total.get(key, 0) + n
    return total
