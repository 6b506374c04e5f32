# normsweep: `make train` runs one job on the embedded defaults, `make test` runs the tests.
# Both create .venv and install everything on first use.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
# torch is installed first and pinned, so the project install never swaps in another build.
# On Linux, PyPI's torch==2.13.0 is the CUDA build; a CPU-only laptop can save the download with
#   make install TORCH_PIP_ARGS="--index-url https://download.pytorch.org/whl/cpu"
TORCH_SPEC ?= torch==2.13.0
TORCH_PIP_ARGS ?=
ARGS ?=

.PHONY: install server train sweep sweep-quick sweep-seeds collapse test test-fast test-properties lint ui ui-screenshot data bench-norms bench-train bench-variants clean

# pip's own notices (a newer pip, running as root, scripts off PATH) are not the project's lines.
PIP := PIP_ROOT_USER_ACTION=ignore $(PY) -m pip --quiet --disable-pip-version-check --no-input
PIP_INSTALL := $(PIP) install --no-warn-script-location

$(VENV)/.installed: pyproject.toml
	@echo "[normsweep] installing into $(VENV): torch ($(TORCH_SPEC)), then the project and its dev tools"
	$(PYTHON) -m venv $(VENV)
	@$(PIP_INSTALL) --upgrade pip
	@$(PIP_INSTALL) "$(TORCH_SPEC)" $(TORCH_PIP_ARGS)
	@$(PIP_INSTALL) -e '.[dev]'
	touch $@

install: $(VENV)/.installed  ## create .venv and install the project with its dev tools

data: install  ## tokenize the bundled Shakespeare corpus into .cache/data
	$(PY) -m src.data $(ARGS)

train: install  ## one run on the defaults (CPU, Shakespeare, MLflow in ./mlflow.db)
	$(PY) -m src.train $(ARGS)

# What a CPU sweep answers, said before it runs (the README's "What a CPU sweep can answer" has the measurements).
define CPU_SWEEP_NOTE
[normsweep] on a CPU this sweep answers: each pair's kernel speed verdict (the speed check, at its end), each pair's
[normsweep] test loss at cpu_small, and the study's claim 8 (RMSNorm's saving against LayerNorm as the model grows,
[normsweep] timed at GPT-2's three sizes). Claims 1-7 need GPT-2 small, 16-bit and A100s (a GPU runs experiment=gpt2_small_study), and
[normsweep] no_norm's lower loss at 150 steps is the study's init, not a finding.
endef
export CPU_SWEEP_NOTE

sweep: install  ## the five-norm sweep, then the study's table (8-16 min quiet on 2 cores, ~50 min loaded)
	@echo "$$CPU_SWEEP_NOTE"
	@echo "[normsweep] expect 8-16 min on a quiet 2-core CPU (49 min at load average 7); make sweep-quick: a first look"
	$(PY) -m src.train -m experiment=norm_sweep $(ARGS)

sweep-quick: install  ## a first look in minutes: the five norms' kernel speed verdicts, one run each x 20 steps
	@echo "[normsweep] a first look: each pair's kernel speed verdict; 20 steps train nothing to judge (docs/sweeps.md)"
	$(PY) -m src.train -m experiment=norm_sweep_quick $(ARGS)

sweep-seeds: install  ## five norms x three seeds, with statistics
	$(PY) -m src.train -m experiment=norm_sweep_seeds $(ARGS)

collapse: install  ## reproduce the no-norm divergence on the CPU
	$(PY) -m src.train -m experiment=no_norm_collapse $(ARGS)

# The slow tests mostly wait (on subprocesses, servers, signals, SLURM), so the workers overlap them;
# three against two measured within the noise on two cores (README). tests/conftest.py keeps what
# shares an engine on one worker and hands out the longest groups first (--no-loadscope-reorder keeps
# that order), so no worker ends alone with a long one.
TEST_WORKERS ?= 3

# The alone part collects only the files that hold such tests (collecting all of them: ~5 s more, alone on
# the machine); where ARGS names test files, those are the ones. tests/conftest.py refuses a test marked
# alone in a file this would not find.
ALONE_FILES = $(shell grep -l 'pytest.mark.alone' tests/test_*.py)

test: install  ## the whole test suite (what CI runs): on three workers, then the timing tests alone
	$(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadgroup --no-loadscope-reorder -m "not alone" $(ARGS)
	$(PY) -m pytest -q -m alone $(if $(filter tests/%,$(ARGS)),,$(ALONE_FILES)) $(ARGS) || [ $$? -eq 5 ]  # 5: ARGS chose no such test

test-fast: install  ## the inner loop: everything but the slow tests
	$(PY) -m pytest -q -m "not slow" $(ARGS)

# The long profile of the report's property test: thousands of generated sweeps (PROPERTY_EXAMPLES sets how many).
test-properties: install  ## the report's invariants on 2,000 generated sweeps (the fast suite runs a seeded few)
	HYPOTHESIS_PROFILE=long $(PY) -m pytest -q -p no:cacheprovider tests/test_report_properties.py $(ARGS)

lint: install
	$(VENV)/bin/ruff check .

# Needs PostgreSQL (sudo apt-get install postgresql); ARGS="--port 5060 --dir /data/mlflow-team" (docs/store.md).
server: install  ## a team tracking server: PostgreSQL + mlflow server on 127.0.0.1:5050, data in .team_server/
	$(PY) -c 'import psycopg' 2>/dev/null || $(PIP_INSTALL) -e '.[server]'
	$(PY) -m src.tracking.team_server $(ARGS)

ui: install  ## browse every run at http://127.0.0.1:5000
	$(PY) -m src.ui $(ARGS)

# Needs Debian's chromium (sudo apt-get install -y chromium); ARGS picks the store and the experiment.
ui-screenshot: install  ## PNGs of the MLflow UI on a sweep into docs/img/ (runs, charts, report)
	$(PY) -c 'import playwright' 2>/dev/null || $(PIP_INSTALL) -e '.[screenshots]'
	PYTHON=$(PY) scripts/ui_screenshot.sh $(or $(ARGS),experiment=norm_sweep)

bench-norms: install
	$(PY) -m src.bench norms $(ARGS)

bench-train: install
	$(PY) -m src.bench train $(ARGS)

bench-variants: install  ## the variants' training steps, interleaved (e.g. ARGS="experiment_name=norm_sweep_seeds")
	$(PY) -m src.bench variants $(ARGS)

clean:  ## remove the venv and caches (keeps mlflow.db and mlartifacts/)
	rm -rf $(VENV) .cache .pytest_cache .ruff_cache
