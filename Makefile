# Two commands set everything up from nothing: `make run` and `make test`.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
# torch==2.13.0 is installed first and pinned, so the package's torch range never
# pulls a multi-GB CUDA build from the index.
TORCH_PIN ?= torch==2.13.0

.PHONY: run test bench verify clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check $(TORCH_PIN)
	$(PY) -m pip install --quiet --disable-pip-version-check -e '.[test]' $(TORCH_PIN)
	touch $(STAMP)

run: $(STAMP)
	$(VENV)/bin/minigpt-tui

test: $(STAMP)
	$(PY) -m pytest -q

verify: $(STAMP)
	$(VENV)/bin/minigpt-tui verify --preset tiny

bench: $(STAMP)
	$(PY) -m benchmarks

clean:
	rm -rf $(VENV) build *.egg-info
