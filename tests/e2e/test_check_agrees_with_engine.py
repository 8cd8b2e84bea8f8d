"""`vllm-spec-plugins check DRAFT --target TARGET` refuses exactly what the engine refuses at start-up, with the
same message, and names the same server (a plugin, or vLLM itself) for what it accepts.

Every case runs both ways, with the same environment: the `check` command as a user runs it (`python -m
vllm_spec_plugins.cli check ... --json`) and a real engine start (`LLM(target, speculative_config=...)`). The
cases are the bad checkpoints, configs and requests of docs/bad-inputs.md (each names its row) and every draft
shipped in bench/drafts; `test_every_catalogue_row_is_a_case_or_says_why_not` keeps that list complete.
"""

from __future__ import annotations

import json
import re
import shutil
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from tests.conftest import PROMPTS, with_pythonpath
from tests.e2e.test_faults import DIST, faulty_checkpoint
from vllm_spec_plugins.testing import forkserver
from vllm_spec_plugins.testing.engine import default_env, run_engine

ROOT = Path(__file__).resolve().parents[2]
CATALOGUE = ROOT / "docs" / "bad-inputs.md"


@dataclass
class Case:
    rows: tuple[str, ...]
    build: Callable  # (tiny, tmp_path) -> draft folder
    what: str | None = None  # the refusal both must show; None: both accept
    method: str | None = None
    spec_tokens: int = 3
    plugins: str = "faulty"  # test plugins on PYTHONPATH: "faulty", "broken" or ""
    env: dict = field(default_factory=dict)
    served_by: str | None = None  # for an accepted draft: the plugin, or "vllm"
    target: str = "tiny"  # or "smollm2"
    warn: str | None = None  # a warning both must give
    same: str = "sentence"  # what the engine's log must repeat: check's first sentence, or just "what"


def _copy(tiny, tmp_path, name, to):
    draft = tmp_path / to
    shutil.copytree(tiny[name], draft)
    return draft


def _edit(draft: Path, **changes):
    cfg = json.loads((draft / "config.json").read_text())
    for k, v in changes.items():
        if v is None:
            cfg.pop(k, None)
        else:
            cfg[k] = v
    (draft / "config.json").write_text(json.dumps(cfg))
    return draft


def _medusa_h64(tiny, tmp_path):
    draft = _copy(tiny, tmp_path, "medusa", "medusa-h64")
    sd = load_file(str(draft / "medusa_lm_head.safetensors"))
    g = torch.Generator().manual_seed(0)
    save_file({k: torch.randn(*[64 if n == 128 else n for n in v.shape], generator=g) for k, v in sd.items()},
              str(draft / "medusa_lm_head.safetensors"))
    return _edit(draft, hidden_size=64)


def _corrupt(tiny, tmp_path):
    draft = _copy(tiny, tmp_path, "medusa", "medusa-corrupt")
    f = draft / "medusa_lm_head.safetensors"
    f.write_bytes(f.read_bytes()[:200])
    return draft


def _faulty(fault="none", arch="FaultyDrafter", **kw):
    return lambda tiny, tmp_path: faulty_checkpoint(tmp_path / f"faulty-{arch}-{fault}", fault=fault, arch=arch, **kw)


def _eagle3_bad_layers(tiny, tmp_path):
    from vllm_spec_plugins.testing.fixtures import make_tiny_eagle3

    return make_tiny_eagle3(tmp_path / "tiny-eagle3-bad", tiny["target"], aux_layer_ids=[0, 1, 5])


def _bad_d2t(kind, change):
    """An EAGLE-1 (``kind="eagle"``) or EAGLE-3 draft with a draft vocabulary (d2t) of 128 tokens, then broken:
    ``outside`` (the last draft id mapped one past the target's last id), ``repeat`` (draft id 1 mapped to draft id
    0's token) or ``lm_head`` (an EAGLE-1 lm_head.weight beside d2t)."""

    def build(tiny, tmp_path):
        from vllm_spec_plugins.testing.fixtures import make_tiny_eagle, make_tiny_eagle3

        if kind == "eagle":
            draft = make_tiny_eagle(tmp_path / "tiny-eagle-1-d2t", tiny["target"], draft_vocab=128)
        else:
            draft = make_tiny_eagle3(tmp_path / "tiny-eagle3-d2t", tiny["target"], draft_vocab=128)
        sd = load_file(str(draft / "model.safetensors"))
        if change == "outside":
            sd["d2t"][-1] = 259 - 127
        elif change == "repeat":
            sd["d2t"][1] = sd["d2t"][0] - 1
        else:
            sd["lm_head.weight"] = load_file(str(tiny["target"] / "model.safetensors"))["lm_head.weight"]
        save_file(sd, str(draft / "model.safetensors"))
        return draft
    return build


def _medusa_token_map_outside(tiny, tmp_path):
    """The Medusa draft vocabulary over the target's lm_head (token_map of 160 tokens), its last entry one past the
    target's last id."""
    draft = _copy(tiny, tmp_path, "medusa_vocab", "medusa-vocab-outside")
    sd = load_file(str(draft / "medusa_lm_head.safetensors"))
    sd["token_map"][-1] = 259
    save_file(sd, str(draft / "medusa_lm_head.safetensors"))
    return draft


def _medusa_truncated_without_map(tiny, tmp_path):
    return _edit(_copy(tiny, tmp_path, "medusa", "medusa-trunc"), truncated_vocab_size=100)


def _shipped(name):
    return lambda tiny, tmp_path: ROOT / "bench" / "drafts" / name


FAULTY = f"(plugin 'faulty', {DIST}, model class vsp_faulty_drafter.model:"
TRIAL = "failed its trial forward at start-up"

CASES = {
    # -- refused ------------------------------------------------------------------------------------------
    "broken-plugin-requested": Case(("2",), lambda t, p: t["medusa"], "which failed to load", method="brokenthing",
                                    plugins="broken"),
    "model-module-missing": Case(("11",), _faulty(arch="FaultyImportDrafter"),
                                 "cannot be imported: module 'vsp_faulty_drafter.no_such_module' failed with "
                                 "ModuleNotFoundError"),
    "model-class-missing": Case(("12",), _faulty(arch="FaultyNoClassDrafter"),
                                "but module 'vsp_faulty_drafter.model' has no attribute 'NoSuchDrafter'"),
    "model-without-load-weights": Case(("69",), _faulty(arch="FaultyNoWeightsDrafter"),
                                       "names model class 'vsp_faulty_drafter.model:FaultyNoWeightsDrafter', which "
                                       "has no load_weights()"),
    "state-without-hook": Case(("16",), _faulty(arch="FaultyNoHookDrafter"),
                               "has no state-carry hook method 'update_state'"),
    "trial-hidden-64": Case(("19",), _faulty(hidden=64), "Expected a draft for this target: hidden_size 128 and "
                                                           "vocab_size 259"),
    "trial-medusa-hidden-64": Case(("19",), _medusa_h64, TRIAL),
    "logits-wider-than-vocab": Case(("21",), _faulty("wide"), "more than the target's vocabulary"),
    "ids-wrong-shape": Case(("22",), _faulty("shape"), "forward() returned shape [1, 1]"),
    "unmarked-eagle": Case(("28",), lambda t, p: _copy(t, p, "eagle", "smolish-draft"),
                           "has the EAGLE layout (fc.weight) but its config.json"),
    "stamp-names-no-plugin": Case(("31",), lambda t, p: _edit(_copy(t, p, "medusa", "m31"), vllm_spec_plugin="nosuch"),
                                  "key 'vllm_spec_plugin' names 'nosuch', which is neither an installed"),
    "stamp-not-a-string": Case(("32",), lambda t, p: _edit(_copy(t, p, "medusa", "m32"), vllm_spec_plugin=3),
                               "sets 'vllm_spec_plugin' to 3; expected a plugin name"),
    "more-tokens-than-heads": Case(("33",), lambda t, p: t["medusa"], "can propose at most 3 tokens per step",
                                   spec_tokens=5),
    "heads-draft-in-eagle-folder": Case(("34",), lambda t, p: _copy(t, p, "medusa", "eagle-medusa"),
                                        "Rename the checkpoint folder"),
    # vLLM 0.32 itself takes an EAGLE-3 checkpoint asked for with "draft_model" to its eagle3 route
    "attention-draft-as-draft-model": Case((), lambda t, p: t["eagle3"], method="draft_model", served_by="eagle"),
    "aux-layer-key-missing": Case(("37",), _faulty(arch="FaultyAuxDrafter"),
                                  "reads target layer ids from draft config key 'layer_ids'"),
    "medusa-truncated-without-map": Case(("38", "68"), _medusa_truncated_without_map, "but has no token_map tensor"),
    "no-architecture-no-model-type": Case(("38b",), lambda t, p: _edit(_copy(t, p, "medusa", "m38b"),
                                                                       architectures=None, model_type=None),
                                          "names neither an architecture nor a model_type"),
    "unknown-method": Case(("39",), lambda t, p: t["medusa"], "names 'medusa2', which is neither an installed "
                                                              "spec-decode plugin", method="medusa2"),
    "method-excluded": Case(("40",), _faulty(), "names plugin 'faulty', which is installed but excluded by "
                                                "VLLM_SPEC_PLUGINS='medusa'", method="faulty",
                            env={"VLLM_SPEC_PLUGINS": "medusa"}),
    "plugin-excluded": Case(("44",), lambda t, p: t["eagle3"], served_by="vllm", env={"VLLM_SPEC_PLUGINS": "medusa"},
                            warn="is served by plugin 'eagle' (vllm-spec-eagle 0.1.0), which "
                                 "VLLM_SPEC_PLUGINS='medusa' excludes"),
    # the engine names the model_type of the config vLLM built ('eagle'), check the one in config.json ('llama')
    "method-of-another-kind": Case(("41",), lambda t, p: t["eagle3"], "speculative method 'medusa' names plugin "
                                   "'medusa' (vllm-spec-medusa 0.1.0), but the draft config has architectures "
                                   "['LlamaForCausalLMEagle3']", method="medusa", same="what"),
    "state-init-raises": Case(("50",), _faulty("init_raise", "FaultyInitDrafter"),
                              "RuntimeError: faulty drafter: planned failure in the state init hook"),
    "state-init-shape": Case(("50",), _faulty("init_shape", "FaultyInitDrafter"),
                             "state 'seen' has shape [1], but its initial value "
                             "vsp_faulty_drafter.model:FaultyStateDrafter.initial_seen has shape [5]"),
    "state-init-missing": Case(("50",), _faulty(arch="FaultyMissingInitDrafter"),
                               "state 'seen' is initialised from vsp_faulty_drafter.model:FaultyStateDrafter."
                               "no_such_attribute, which is NoneType"),
    "bool-ids": Case(("51",), _faulty("bool"), "forward() returned a torch.bool tensor; draft token ids must be "
                                               "integers"),
    "nan-logits": Case(("52",), _faulty("nan"), "returned NaN logits"),
    "eagle3-layers-past-target": Case(("57",), _eagle3_bad_layers, "[5] outside 0..2"),
    "stamp-names-vllm-method": Case(("58",), lambda t, p: _edit(_copy(t, p, "medusa", "m58"), vllm_spec_plugin="ngram"),
                                    "which is one of vLLM's own speculative methods, not a plugin"),
    "speculators-type-on-heads": Case(("59",), lambda t, p: _edit(_copy(t, p, "medusa", "m59"),
                                                                  speculators_model_type="eagle3"),
                                      "says speculators_model_type 'eagle3'"),
    "corrupt-safetensors": Case(("60",), _corrupt, "is not a valid safetensors file"),
    "stamp-names-wrong-plugin": Case(("66",), lambda t, p: _edit(_copy(t, p, "medusa", "m66"), vllm_spec_plugin="eagle"),
                                     "key 'vllm_spec_plugin' names plugin 'eagle'"),
    "zero-spec-tokens": Case(("67",), lambda t, p: t["medusa"], "a speculative config needs num_speculative_tokens >= 1",
                             spec_tokens=0),
    "d2t-outside-target-vocabulary": Case(("80",), _bad_d2t("eagle", "outside"),
                                          "d2t maps draft id 127 to target id 259, outside the target's vocabulary "
                                          "[0, 259)", same="what"),
    "d2t-repeats-a-token": Case(("80",), _bad_d2t("eagle3", "repeat"), "d2t maps draft id 0 and draft id 1 to the same target id",
                                same="what"),
    "eagle1-d2t-with-lm-head": Case(("81",), _bad_d2t("eagle", "lm_head"),
                                    "has both d2t and lm_head.weight. An EAGLE-1 draft vocabulary (d2t) takes the "
                                    "target lm_head's rows of its tokens", same="what"),
    "token-map-outside-target-vocabulary": Case(("82",), _medusa_token_map_outside,
                                                "token_map maps draft id 159 to target id 259, outside the target's "
                                                "vocabulary [0, 259)", same="what"),
    # -- accepted: the same server -----------------------------------------------------------------------
    "medusa": Case((), lambda t, p: t["medusa"], served_by="medusa"),
    "medusa-draft-vocabulary": Case((), lambda t, p: t["medusa_vocab"], served_by="medusa"),
    "mlp-speculator": Case((), lambda t, p: t["mlp"], served_by="mlp_speculator"),
    "eagle3": Case((), lambda t, p: t["eagle3"], served_by="eagle"),
    "stamped-eagle": Case((), lambda t, p: _edit(_copy(t, p, "eagle", "smolish-stamped"), vllm_spec_plugin="eagle"),
                          served_by="eagle"),
    "plain-llama-draft": Case(("9",), lambda t, p: t["target"], served_by="vllm"),
    "shipped-smollm2-eagle": Case((), _shipped("smollm2-eagle"), served_by="eagle", target="smollm2", plugins=""),
    "shipped-smollm2-eagle3": Case((), _shipped("smollm2-eagle3"), served_by="eagle", target="smollm2", plugins=""),
    "shipped-smollm2-medusa": Case((), _shipped("smollm2-medusa"), served_by="medusa", target="smollm2", plugins=""),
}

#: Catalogue rows that are no draft checkpoint, config or request `check` could be asked about, and where
#: their behaviour is tested instead.
NOT_A_CHECK_CASE = {
    "1": "a broken plugin nobody asks for: plain vLLM starts (e:test_medusa_engine)",
    "3": "an unreadable draft while a plugin is broken: vLLM's own error (u:test_shim)",
    "4": "installation: plugin API too new (u:test_manager)", "5": "installation (u:test_manager)",
    "6": "installation (u:test_api)", "7": "installation (u:test_manager)", "8": "installation (u:test_manager)",
    "10": "plugin claims vLLM's draft classes (u:test_shim)",
    "13": "a plugin missing in the workers only: `check` runs in one process",
    "14": "binding rules, unit-tested (u:test_bind); the refusal reaches `check` through the same bind()",
    "15": "binding rules, unit-tested (u:test_bind)",
    "17": "attention-drafter contract, read at bind time inside vLLM's EAGLE loop (u:test_bind)",
    "18": "engine options `check` is not given (u:test_attention_adapter)",
    "20": "attention drafters' trial runs inside vLLM's EAGLE loop; `check` says it skips that trial",
    "23": "state-carry hook keys, checked by the same trial as rows 50-52 (u:test_state_pool)",
    **{r: "run time, after start-up: speculation turns off (e:test_faults)" for r in ("24", "25", "26", "27", "49")},
    "29": "vsp_* keys are ignored, not refused (e:test_faults)",
    "30": "sizes filled from the target: accepted (e:test_faults)",
    "36": "vLLM 0.33 only (make compat)",
    "42": "a method without a model: `check` always has a checkpoint",
    "35": "an attention draft on vLLM's draft_model route: vLLM 0.32 reroutes EAGLE checkpoints itself (case "
          "attention-draft-as-draft-model); the refusal is unit-tested (u:test_shim)",
    **{r: "environment, not a checkpoint (u:test_selection)" for r in ("43", "45")},
    "46": "vLLM version (u:test_shim)", "47": "the shim's own failure (u:test_shim)",
    "48": "a plugin exiting at import: plain vLLM starts (e:test_medusa_engine)",
    "53": "a warning, not a refusal", "54": "a warning (dtype) or the trial of row 50 (NaN state)",
    "55": "environment (e:test_faults)", "56": "registration-time refusal: the plugin is skipped (u:test_api)",
    **{r: "environment or policy, not a checkpoint" for r in ("61", "62", "63", "64", "65")},
    "70": "the heads trial's num_drafts=1 call: `check --target` runs the same trial through the in-process start "
          "the test kit's harness drives (u:test_harness)",
    "71": "binding rules, unit-tested (u:test_bind); the refusal reaches `check` through the same bind()",
    "72": "needs the test-only multimodal probe plugin: check and the engine compared side by side in "
          "e:test_multimodal::test_check_agrees_with_the_engine_on_the_multimodal_sources",
    "73": "pipeline parallelism cannot run on this CPU build; the rule is unit-tested (u:test_bind)",
    "74": "a multimodal target: check and the engine compared in e:test_multimodal (check case and "
          "test_an_eagle3_draft_is_refused_naming_draft_plugin_and_target)",
    "75": "an engine setting (VLLM_SPEC_PLUGINS_PROMPT_LOOKUP), not a property of the draft: refused when the "
          "drafter starts, unit-tested (u:test_lookup)",
    "76": "an engine setting beside a target or config the draft does not choose: refused when the drafter "
          "starts, unit-tested (u:test_lookup)",
    "77": "binding rules, unit-tested (u:test_bind); the refusal reaches `check` through the same bind()",
    "78": "an attention drafter's trial runs inside vLLM's EAGLE loop: `check --target` reports it SKIP and says to "
          "start an engine, which refuses it (e:test_faults)",
    "79": "an engine setting (VLLM_SPEC_PLUGINS_KV_ONLY), not a property of the draft (u:test_catchup)",
}


def test_every_catalogue_row_is_a_case_or_says_why_not():
    rows = set(re.findall(r"^\| (\d+b?) \|", CATALOGUE.read_text(), flags=re.M))
    covered = {r for c in CASES.values() for r in c.rows}
    assert rows, "no rows found in docs/bad-inputs.md"
    assert rows - covered - set(NOT_A_CHECK_CASE) == set(), "catalogue rows with no check case and no reason"
    assert (covered | set(NOT_A_CHECK_CASE)) - rows == set(), "cases naming rows the catalogue does not have"
    assert covered & set(NOT_A_CHECK_CASE) == set()


@pytest.fixture(scope="module")
def smollm2():
    from bench.smollm2 import ensure_smollm2

    return ensure_smollm2()


def _check(target, draft, case, env) -> dict:
    argv = ["check", str(draft), "--target", str(target), "--json", "--spec-tokens", str(case.spec_tokens)]
    if case.method:
        argv += ["--method", case.method]
    rc, log = forkserver.run_module(sys.executable, "vllm_spec_plugins.cli", argv, default_env(env), 600)
    start = log.rfind('\n{\n  "title"')
    assert start >= 0, f"no JSON report from check (rc={rc}):\n{log[-4000:]}"
    report = json.loads(log[start:log.index("\n}\n", start) + 3])
    assert rc == (0 if report["ok"] else 1), log[-3000:]
    return report


@pytest.mark.parametrize("name", list(CASES))
def test_check_and_the_engine_agree(tiny, tmp_path, request, broken_plugin_path, faulty_plugin_path, name):
    case = CASES[name]
    target = request.getfixturevalue("smollm2") if case.target == "smollm2" else tiny["target"]
    draft = case.build(tiny, tmp_path)
    env = dict(case.env)
    if case.plugins:
        env.update(with_pythonpath(faulty_plugin_path if case.plugins == "faulty" else broken_plugin_path))
    report = _check(target, draft, case, env)
    spec = {"model": str(draft), "num_speculative_tokens": case.spec_tokens}
    if case.method:
        spec["method"] = case.method
    r = run_engine(target, speculative_config=spec, prompts=PROMPTS[:1], max_tokens=4, env=env, check=False)
    failed = [i for i in report["items"] if i["status"] == "fail"]
    text = "\n".join(f"{i['check']}: {i['detail']}" for i in report["items"])
    if case.what is None:
        assert report["ok"], text
        assert r.returncode == 0, r.log[-4000:]
        served = report["served_by"]
        if case.served_by == "vllm":
            assert served == {"plugin": None, "vllm": True}, text
            assert f"draft '{draft}' served by plugin" not in r.log
        else:
            assert served["plugin"] == case.served_by, text
            assert f"vllm_spec_plugins: draft '{draft}' served by plugin '{case.served_by}'" in r.log
        if case.warn:
            assert any(case.warn in i["detail"] for i in report["items"] if i["status"] == "warn"), text
            assert case.warn in r.log
        return
    assert not report["ok"] and failed, text
    assert r.returncode != 0, f"the engine started with what `check` refused:\n{text}"
    assert any(case.what in i["detail"] for i in failed), f"`check` refused for another reason:\n{text}"
    assert case.what in r.log, f"the engine refused for another reason:\n{r.log[-4000:]}"
    details = [i["detail"] for i in failed if case.what in i["detail"]]
    detail = next((d for d in details if "vllm_spec_plugins:" in d), details[0])  # the engine's own message
    core = detail[detail.index("vllm_spec_plugins:"):] if "vllm_spec_plugins:" in detail else detail
    if case.same == "sentence":
        assert core.split(". ")[0].splitlines()[0] in r.log, "the engine says it otherwise"
    if TRIAL in detail and "faulty-" in str(draft):
        assert FAULTY in detail, "the trial's refusal does not name plugin, distribution and model class"
