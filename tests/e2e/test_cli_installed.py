"""`vllm-spec-plugins list` on the real installation: plugins found from their distributions."""

import json
import subprocess
import sys
from pathlib import Path

from tests.conftest import with_pythonpath
from vllm_spec_plugins.testing.engine import default_env

CLI = str(Path(sys.executable).parent / "vllm-spec-plugins")


def test_list_json_shows_installed_plugins(broken_plugin_path):
    out = subprocess.run([CLI, "list", "--json"], capture_output=True, text=True, check=True,
                         env=default_env(with_pythonpath(broken_plugin_path)))
    plugins = {p["name"]: p for p in json.loads(out.stdout)}
    med, eag, st = plugins["medusa"], plugins["eagle"], plugins["statetest"]
    assert (med["distribution"], med["version"]) == ("vllm-spec-medusa", "0.1.0")
    assert med["drafters"][0]["architectures"] == ["MedusaModel"] and med["drafters"][0]["model_type"] == "medusa"
    assert (eag["distribution"], eag["version"]) == ("vllm-spec-eagle", "0.1.0")
    assert "EagleLlamaForCausalLM" in [a for d in eag["drafters"] for a in d["architectures"]]
    assert {d["kind"] for d in eag["drafters"]} == {"attention"}
    assert st["drafters"][0]["state"] == [{"name": "acc", "shape": [3], "dtype": "int64", "init": 0.0,
                                           "on_preempt": "keep"}]
    assert [e["source"] for e in st["drafters"][0]["extra_inputs"]] == ["sampled_token_ids", "num_new_tokens"]
    broken = plugins["brokenthing"]
    assert broken["distribution"] == "vsp-test-broken-plugin" and "this_module_does_not_exist_anywhere" in broken["error"]


def test_list_table_and_allow_list():
    out = subprocess.run([CLI, "list"], capture_output=True, text=True, check=True,
                         env=default_env({"VLLM_SPEC_PLUGINS": "medusa"}))
    lines = out.stdout.split("\n\n")[0].splitlines()  # the table; notes follow after a blank line
    assert lines[0].split()[:3] == ["PLUGIN", "DISTRIBUTION", "VERSION"]
    assert [ln.split()[0] for ln in lines[1:]] == ["medusa"]
    none = subprocess.run([CLI, "list"], capture_output=True, text=True, check=True,
                          env=default_env({"VLLM_SPEC_PLUGINS": ""}))
    assert "No vllm-spec-plugins drafter plugins" in none.stdout


def test_test_only_plugins_stay_out_of_the_users_environment(test_plugins_site):
    """`make setup`'s environment holds the real plugins only; the test session adds its own on PYTHONPATH."""
    assert test_plugins_site  # this session installed them into its temporary folder
    out = subprocess.run([CLI, "list", "--json"], capture_output=True, text=True, check=True,
                         env=default_env({"PYTHONPATH": None}))
    names = {p["name"] for p in json.loads(out.stdout)}
    assert {"medusa", "eagle"} <= names and not names & {"statetest", "eaglevariant", "brokenthing"}, names


def test_list_survives_a_plugin_that_exits_at_import(exiting_plugin_path):
    """The plugin's argparse sees `list --json` and exits: that is the plugin's failure, not the command's."""
    out = subprocess.run([CLI, "list", "--json"], capture_output=True, text=True,
                         env=default_env(with_pythonpath(exiting_plugin_path)))
    assert out.returncode == 0, out.stderr[-3000:]
    plugins = {p["name"]: p for p in json.loads(out.stdout)}
    bad = plugins["exitingthing"]
    assert bad["distribution"] == "vsp-test-exiting-plugin" and bad["error"].startswith("SystemExit: 2")
    assert "medusa" in plugins and not plugins["medusa"].get("error")
