"""The conformance suite's ``kv_only`` test (API 4) passes the shipped EAGLE and fails a broken ``kv_only`` branch.

Two suites on the shipped EAGLE-1 plugin with a context-sensitive tiny draft (test_draft_catchup's: its drafts
depend on what the draft KV holds): as shipped, where the test passes, and with the plugin's ``write_kv`` broken
by a throwaway ``sitecustomize.py`` on the engines' ``PYTHONPATH`` (it writes the draft KV of zeroed target hidden
states: no error, a wrong KV cache, the output still right), where it must fail and say why. Only that test and
the suite run it builds on run (``-k kv_only``).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap

from tests.conftest import ROOT

BROKEN_SITE = '''
from vllm_spec_plugins.patch._util import when_imported


def _break(mod):
    whole = mod.EagleDecoder.write_kv

    def write_kv(self, input_ids, positions, hidden_states):
        whole(self, input_ids, positions, hidden_states * 0)

    mod.EagleDecoder.write_kv = write_kv


when_imported("vllm_spec_eagle.model", _break)
'''

SUITE = textwrap.dedent('''
    import os

    from vllm_spec_plugins.testing.conformance import ConformanceSuite
    from vllm_spec_plugins.testing.fixtures import make_tiny_eagle


    class TestEagleKvOnly(ConformanceSuite):
        method = "eagle"

        def make_draft(self, path, target):
            return make_tiny_eagle(path, target, noise=0.12)


    class TestEagleKvOnlyBroken(TestEagleKvOnly):
        env = {"PYTHONPATH": os.environ["BROKEN_KV_SITE"]}

        def make_draft(self, path, target):
            os.environ["VLLM_SPEC_PLUGINS_TEST_FORKSERVER"] = "0"  # the fork server never runs sitecustomize
            return super().make_draft(path, target)
''')


def test_kv_only_test_passes_the_shipped_eagle_and_fails_a_wrong_draft_kv(tmp_path):
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(BROKEN_SITE)
    (tmp_path / "test_kv_suite.py").write_text(SUITE)
    env = dict(os.environ, BROKEN_KV_SITE=str(site),
               PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    out = subprocess.run([sys.executable, "-m", "pytest", "-v", "-p", "no:cacheprovider", "-k", "kv_only",
                          str(tmp_path / "test_kv_suite.py")], capture_output=True, text=True, env=env, cwd=tmp_path,
                         timeout=1500)
    report = out.stdout
    status = dict(re.findall(r"::(\w+)::test_kv_only\w* (PASSED|FAILED|ERROR|SKIPPED)", report))
    assert status == {"TestEagleKvOnly": "PASSED", "TestEagleKvOnlyBroken": "FAILED"}, report[-6000:]
    assert "drafting steps differ between the engine whose forward was told kv_only=True" in report
    assert "Told kv_only, the forward must write the same draft KV cache as the whole forward" in report
