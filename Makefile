# `make demo` and `make test` each create .venv when missing and install everything.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# Their metadata pins spacy<3.8 (hence numpy<2) although they run on spacy 3.8; see pyproject.toml.
NO_DEPS := medspacy==1.3.1 PyRuSH==1.0.13 scispacy==0.6.2
# Real Milvus servers for the backend tests and bench/bench_milvus.py (issue 7), in their own virtualenv:
# milvus-lite 2.5.1 imports pkg_resources (setuptools<70), which capr's environment does not pin.
MILVUS_VENV := .venv-milvus
MILVUS_STAMP := $(MILVUS_VENV)/.installed
MILVUS_SERVERS := milvus==2.3.5 milvus-lite==2.5.1 setuptools<70

.PHONY: demo test bench reproduce reproduce-quick install milvus-venv clean

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

# torch==2.13.0 is a CPU build installed from local disk here (plain `torch` would pull CUDA builds).
$(STAMP): $(BIN)/python pyproject.toml
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -e '.[test,bench,milvus,ray]'
	$(BIN)/pip install -q --no-deps $(NO_DEPS)
	touch $(STAMP)

$(MILVUS_STAMP):
	$(PY) -m venv $(MILVUS_VENV)
	$(MILVUS_VENV)/bin/pip install -q $(foreach p,$(MILVUS_SERVERS),'$(p)')
	touch $(MILVUS_STAMP)

install: $(STAMP)

milvus-venv: $(MILVUS_STAMP)

demo: $(STAMP)
	$(BIN)/capr demo

# Two workers, one thread each (the machine's two cores); a test file stays on one worker, so its module fixtures
# (indexes, trained models, servers) are built once.
test: $(STAMP) $(MILVUS_STAMP)
	OMP_NUM_THREADS=1 $(BIN)/python -m pytest -q -n 2 --dist loadfile

bench: $(STAMP) $(MILVUS_STAMP)
	$(BIN)/python -m bench.bench_bm25
	$(BIN)/python -m bench.bench_dense
	$(BIN)/python -m bench.bench_service
	$(BIN)/python -m bench.bench_milvus

# Every published evaluation re-run and compared with reproduce/conditions.toml (needs ../shared/data);
# ONLY=NAME runs one condition.
reproduce: $(STAMP)
	$(BIN)/python -m capr.reproduce $(if $(ONLY),--only $(ONLY))

reproduce-quick: $(STAMP)
	$(BIN)/python -m capr.reproduce --quick

clean:
	rm -rf $(VENV) $(MILVUS_VENV) build *.egg-info src/*.egg-info
