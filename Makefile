# The two commands: `make demo` (the main job) and `make test`. Each sets up what is missing.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
INSTALLED := $(VENV)/.installed
FASHION_MNIST := /usr/share/datasets/fashion-mnist

.PHONY: demo test data clean

# Reinstalls only when pyproject.toml or the tested versions changed since the last install.
$(INSTALLED): pyproject.toml constraints.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet -c constraints.txt -e '.[dev]'
	touch $(INSTALLED)

# Fashion-MNIST and chromium from Debian (root only; others get torchvision's download as the fallback).
data:
	@if [ ! -d $(FASHION_MNIST) ]; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    apt-get install -y -q dataset-fashion-mnist >/dev/null 2>&1 || \
	    { apt-get update -q >/dev/null && apt-get install -y -q dataset-fashion-mnist >/dev/null; }; \
	  else echo "note: $(FASHION_MNIST) is missing; install the Debian package dataset-fashion-mnist"; fi; \
	fi
	@# the page test of `zoo serve` (tests/test_serve_page.py) drives Debian's chromium through Playwright
	@if ! command -v chromium >/dev/null; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    apt-get install -y -q chromium >/dev/null 2>&1 || \
	    { apt-get update -q >/dev/null && apt-get install -y -q chromium >/dev/null; }; \
	  else echo "note: chromium is missing (the page test skips); install the Debian package chromium"; fi; \
	fi

demo: $(INSTALLED) data
	$(BIN)/zoo demo

test: $(INSTALLED) data
	$(BIN)/python -m pytest -q -n auto --dist worksteal

clean:
	rm -rf $(VENV) *.egg-info .pytest_cache
