# The README's two commands: `make demo` runs the main job, `make test` runs the tests.
# Each creates (or reuses) .venv and installs what it needs by itself.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test install clean

$(BIN)/python:
	@echo "make: creating the virtual environment $(VENV) with $(PYTHON)"
	$(PYTHON) -m venv $(VENV)

# The first install downloads torch's CPU build (about 200 MB) and the other dependencies,
# then compiles arborcc's C++ extensions: 2-3 minutes on a 2-core machine with pip's cache
# warm, longer on a slow network. Later runs skip it until pyproject.toml, setup.py or a
# C++ source changes.
$(STAMP): $(BIN)/python pyproject.toml setup.py $(wildcard src/arborcc/*/csrc/*)
	@echo "make: installing arborcc and its dependencies into $(VENV): torch (CPU, ~200 MB), numpy, scipy,"
	@echo "make:   igraph, highspy, matplotlib, mpi4py + MPICH, pytest; then compiling the C++ extensions."
	@echo "make:   This takes 2-3 minutes on 2 cores (longer on a slow network); pip's own output is hidden."
	@start=$$(date +%s); \
	$(BIN)/python -m pip install --quiet --upgrade pip && \
	$(BIN)/python -m pip install --quiet -e '.[all,test]' && \
	echo "make: installed in $$(( $$(date +%s) - start )) s"
	@touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	@echo "make: running arborcc demo (synthesis, verification, simulation, then 4 local ranks: 10-30 s)"
	$(BIN)/arborcc demo

# The suite starts hundreds of Python processes (commands, ranks, examples): with
# PYTHONDONTWRITEBYTECODE set in the environment each would compile arborcc's modules and the
# tests again, so the suite keeps their bytecode caches (__pycache__, ignored by git).
test: $(STAMP)
	@echo "make: running the test suite on every CPU (about 5 minutes on 2 cores)"
	env -u PYTHONDONTWRITEBYTECODE $(BIN)/python -m pytest -n auto --dist worksteal

clean:
	rm -rf $(VENV) build src/*.egg-info src/arborcc/*/native*.so
