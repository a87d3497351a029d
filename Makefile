# The README's two commands: `make demo` runs the main job, `make test` runs the tests.
# Each creates (or reuses) .venv and installs what it needs by itself.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test install clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(STAMP): $(BIN)/python pyproject.toml setup.py $(wildcard src/arborcc/*/csrc/*)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[all,test]'
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(BIN)/arborcc demo

test: $(STAMP)
	$(BIN)/python -m pytest

clean:
	rm -rf $(VENV) build src/*.egg-info src/arborcc/*/native*.so
