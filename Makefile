# `make demo` and `make test` work on a fresh machine: they create .venv,
# install torch's CPU wheel first (a looser requirement would pull a
# multi-GB CUDA build), then the package and its tools. Both go through uv, which
# leaves the torch already there alone (it satisfies torch>=2.4) and installs the
# same packages as pip in a fraction of the time: CI installs on every run. A clean
# clone's `make install`: 39 s with every package's bytecode written and uv's cache cold;
# 44 s before (torch through pip, the rest without bytecode), with uv's cache warm.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
TORCH := torch==2.13.0
STAMP := $(VENV)/.installed

.PHONY: install browser fonts vendor demo plots test test-full test-quick lint build clean gpu-check

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

# One package is left out: rfc3987-syntax, which jsonschema's format-nongpl extra (asked for by
# jupyter-events) brings in and imports whenever jsonschema is imported. It builds a lark grammar
# there, 2 CPU-s for every process that imports nbformat or starts an ipykernel (`import
# nbformat`: 2.0 -> 0.2 CPU-s); it checks only the "iri" string format, which nothing here uses.
# pip picks torch's wheel, as it reads this machine's configuration (the CPU wheel on disk: uv does
# not look there), and uv installs it. Both installs write the bytecode: where PYTHONDONTWRITEBYTECODE
# is set (as on this machine), a package installed without it is compiled again by every process
# that imports it (`import torch, hypothesis, pytest, numpy, nbformat`: 3.5 s against 2.5 s).
$(STAMP): $(BIN)/python pyproject.toml Makefile
	$(BIN)/pip install --quiet uv
	wheels=$$(mktemp -d) && $(BIN)/pip download --quiet --no-deps -d $$wheels $(TORCH) && \
	  $(BIN)/uv pip install --quiet --compile-bytecode --python $(BIN)/python $$wheels/torch-*.whl; \
	  status=$$?; rm -rf $$wheels; exit $$status
	printf 'rfc3987-syntax ; sys_platform == "never"\n' | \
	  $(BIN)/uv pip install --quiet --compile-bytecode --python $(BIN)/python --override /dev/stdin -e '.[dev]'
	$(BIN)/python -m ipykernel install --sys-prefix --name python3 >/dev/null
	touch $(STAMP)

install: $(STAMP)

# Debian's Chromium drives the attention-viewer test headless. Installing it
# needs root (as in CI); without it that test skips with the reason.
browser:
	@command -v chromium >/dev/null 2>&1 || \
	  (DEBIAN_FRONTEND=noninteractive apt-get update -qq && \
	   DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null) || \
	  echo "chromium not installed: the viewer test will skip"

# Debian's Noto CJK fonts draw the Chinese in the plots (狗咬人). Without them (no root) the
# plots write pinyin and say so.
fonts:
	@fc-list 2>/dev/null | grep -q "Noto Sans CJK" || \
	  (DEBIAN_FRONTEND=noninteractive apt-get update -qq && \
	   DEBIAN_FRONTEND=noninteractive apt-get install -y -qq fonts-noto-cjk >/dev/null) || \
	  echo "fonts-noto-cjk not installed: the plots will write Chinese as pinyin"

# The platforms' own artefacts that a package registry publishes, fetched into the cache the tests
# read (tests/vendor/README.md): the pin and its sha256 are in tests/vendor/, the files are not.
# A failed download says so, and the tests that need the file skip, naming it.
VENDOR_DIR := $(or $(ATTN_VENDOR_DIR),$(HOME)/.cache/attention-course/vendor)
JUNIT_XSD := $(VENDOR_DIR)/junit/junit-10.xsd

vendor: $(JUNIT_XSD)
	@for rel in classroom-reporter/dist/main.js prairielearn/infoQuestion.json; do \
	  [ -f "$(VENDOR_DIR)/$$rel" ] || echo "$$rel is on no package registry: its tests skip (tests/vendor/README.md)"; \
	done

# pytest's sdist (pip checks the hash) holds junit-10.xsd; its LICENSE comes along.
$(JUNIT_XSD): tests/vendor/junit/requirements.txt | install
	@tmp=$$(mktemp -d) && \
	if $(BIN)/pip download --quiet --no-deps --no-binary pytest --require-hashes -d $$tmp -r $< && \
	   tar -xzOf $$tmp/pytest-*.tar.gz --wildcards --no-wildcards-match-slash 'pytest-*/testing/example_scripts/junit-10.xsd' > $$tmp/junit-10.xsd && \
	   tar -xzOf $$tmp/pytest-*.tar.gz --wildcards --no-wildcards-match-slash 'pytest-*/LICENSE' > $$tmp/LICENSE; then \
	  mkdir -p $(@D) && mv $$tmp/LICENSE $(@D)/LICENSE && mv $$tmp/junit-10.xsd $@; \
	else \
	  echo "junit-10.xsd could not be fetched from PyPI: the JUnit schema test will skip"; \
	fi; \
	rm -rf $$tmp

build: install
	$(BIN)/attn-course build

demo: install
	$(BIN)/attn-course grade solutions assignments

plots: install fonts
	$(BIN)/python course/make_plots.py build/plots --readme docs/img

# --dist loadgroup keeps each xdist_group (the tests that share an expensive fixture) on one
# worker; tests/project/conftest.py makes it work under pytest 9.2 with xdist 3.8.
# pytest exits 5 when it collects nothing: treated as success, as CI requires.
test: install browser fonts vendor
	$(BIN)/python -m pytest -n 2 --dist loadgroup --durations=15 || [ $$? -eq 5 ]

# The same suite with every mutant also graded sandboxed (make test grades a sample there:
# tests/project/test_mutants.py says which).
test-full: install browser fonts vendor
	AUTOGRADER_TEST_FULL=1 $(BIN)/python -m pytest -n 2 --dist loadgroup --durations=15 || [ $$? -eq 5 ]

# ruff, configured in pyproject.toml ([tool.ruff]): pyflakes and pycodestyle's errors and warnings;
# then mypy ([tool.mypy]): the types of autograder/.
lint: install
	$(BIN)/ruff check .
	$(BIN)/mypy

# The edit loop, under 30 s on the 2-core machine (26 s wall, pytest 15 s): the engine's layers and
# session rule, the unit registry, the stubs and notebooks against solutions/, the page-to-property
# trace, the class report, and the hints' own rules. The hints' tests that read the graded catalogue
# (conftest's `catalogue`: every mutant graded, minutes) are left out by name. `make test` runs everything.
QUICK := tests/project/test_layers.py tests/project/test_registry.py tests/project/test_stubs.py \
         tests/project/test_trace.py tests/project/test_class_report.py tests/project/test_hints.py
test-quick: install
	$(BIN)/python -m pytest -n 2 --dist loadgroup $(wildcard $(QUICK)) \
	  -k "not fire_on and not fires_on and not catalogue_is_named" || [ $$? -eq 5 ]

# CUDA parity of every unit on the reference and two device mutants; says so and exits 0 without CUDA.
gpu-check: install
	$(BIN)/python benchmarks/gpu_check.py

clean:
	rm -rf $(VENV) build *.egg-info
