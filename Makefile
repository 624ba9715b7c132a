# Two commands set everything up from nothing: `make run` and `make test`.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
# torch==2.13.0 is installed first and pinned, so the package's torch range never
# pulls a multi-GB CUDA build from the index.
TORCH_PIN ?= torch==2.13.0
# Where torch comes from: empty means pip's own configuration; set it to a PyTorch wheel index
# (CPU or a CUDA version) to choose the build, e.g. make run TORCH_INDEX=https://download.pytorch.org/whl/cpu
TORCH_INDEX ?=
TORCH_INDEX_ARG := $(if $(TORCH_INDEX),--index-url $(TORCH_INDEX),)

.PHONY: run test test-slow bench verify wheel-check screenshots docs clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check $(TORCH_INDEX_ARG) $(TORCH_PIN)
	$(PY) -m pip install --quiet --disable-pip-version-check -e '.[test]' $(TORCH_PIN)
	touch $(STAMP)

# Our modules compiled first, as a wheel install does (quick when nothing changed).
run: $(STAMP)
	$(PY) -m compileall -q minigpt_tui > /dev/null
	$(VENV)/bin/minigpt-tui

# The suite without the long multi-process experiments (marked slow); CI runs both. Two
# workers, one per core of a two-core machine (TEST_WORKERS=0 runs it in this process).
TEST_WORKERS ?= 2
TEST_PARALLEL := $(if $(filter 0,$(TEST_WORKERS)),,-n $(TEST_WORKERS) --dist worksteal)
test: $(STAMP)
	$(PY) -m pytest -q -m "not slow" $(TEST_PARALLEL) --durations=15

test-slow: $(STAMP)
	$(PY) -m pytest -q -m slow

verify: $(STAMP)
	$(VENV)/bin/minigpt-tui verify --preset tiny

# Build the wheel, install it into a fresh virtual environment and run the installed command.
wheel-check: $(STAMP)
	PYTHON=$(PYTHON) BUILD_PY=$(PY) TORCH_PIN='$(TORCH_PIN)' bash tools/check_wheel.sh

# Regenerate the README's pictures (assets/*.svg) from the app, driven by its keys.
screenshots: $(STAMP)
	$(PY) tools/make_screenshots.py --out assets

bench: $(STAMP)
	$(PY) -m benchmarks

# The guide (docs/) as a website in site/; strict: a broken link or a missing page fails.
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(PY) -m mkdocs build --strict --site-dir site

clean:
	rm -rf $(VENV) build *.egg-info
