# `make demo` and `make test` each create .venv when missing and install everything.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# Their metadata pins spacy<3.8 (hence numpy<2) although they run on spacy 3.8; see pyproject.toml.
NO_DEPS := medspacy==1.3.1 PyRuSH==1.0.13 scispacy==0.6.2

.PHONY: demo test bench install clean

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

# torch==2.13.0 is a CPU build installed from local disk here (plain `torch` would pull CUDA builds).
$(STAMP): $(BIN)/python pyproject.toml
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -e '.[test,bench]'
	$(BIN)/pip install -q --no-deps $(NO_DEPS)
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(BIN)/capr demo

test: $(STAMP)
	$(BIN)/python -m pytest -q

bench: $(STAMP)
	$(BIN)/python bench/bench_bm25.py
	$(BIN)/python bench/bench_dense.py
	$(BIN)/python bench/bench_service.py

clean:
	rm -rf $(VENV) build *.egg-info src/*.egg-info
