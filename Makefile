# Two commands do all their own set-up: `make demo` and `make test`.
# `make check-core` installs the engine alone (no napari, no Qt) in a fresh venv and runs it.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.medvl-installed
DEV_STAMP := $(VENV)/.medvl-dev-installed
TORCH_CPU := torch==2.13.0

.PHONY: demo demo-models test check-core lint bench clean install docs

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip

# Install a CPU torch first (unless one is already importable) so that the
# project's `torch>=2.2` requirement is met without pulling a CUDA build.
$(STAMP): pyproject.toml | $(PY)
	$(PY) -c "import torch" 2>/dev/null || $(PY) -m pip install -q $(TORCH_CPU) \
		|| $(PY) -m pip install -q torch --index-url https://download.pytorch.org/whl/cpu
	$(PY) -m pip install -q -e ".[napari,text,dicom]"
	touch $@

$(DEV_STAMP): $(STAMP)
	$(PY) -m pip install -q -e ".[napari,text,dicom,dev]"
	tools/install_dicom_tools.sh
	touch $@

install: $(STAMP)

demo: $(STAMP)
	tools/with_display.sh --optional $(VENV)/bin/napari-medvl-demo --out demo-output

# Rebuild both shipped demo models (synthetic data, not for diagnosis) from their recipes.
demo-models: $(STAMP)
	$(PY) -m medvl_engine.tasks.demo_models all

test: $(DEV_STAMP)
	HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 tools/with_display.sh $(PY) -m pytest -q --durations=30

# The core install (`pip install .`, no extras) in a fresh venv outside the checkout.
check-core:
	PYTHON=$(PYTHON) TORCH_CPU=$(TORCH_CPU) tools/check_core.sh

lint: $(DEV_STAMP)
	$(VENV)/bin/ruff check src tests bench
	$(VENV)/bin/mypy

# The documentation site (docs/, mkdocs.yml) into site/; warnings are errors.
docs: $(DEV_STAMP)
	$(VENV)/bin/mkdocs build --strict

bench: $(STAMP)
	for b in bench/bench_*.py; do echo "== $$b"; tools/with_display.sh --optional $(PY) $$b || exit 1; done

clean:
	rm -rf $(VENV) demo-output .pytest_cache site
