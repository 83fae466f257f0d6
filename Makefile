# gpu-labkit: two commands do all the setup.
#   make lab    create .venv if needed, install the pinned environment, open JupyterLab
#   make test   same setup, then ruff, the notebook format check, pytest and strict nbval
#
# GPU machines:  make lab EXTRAS=gpu,lab,dev   (only the NVIDIA driver is needed)

PYTHON      ?= python3
VENV        ?= .venv
EXTRAS      ?= cpu,lab,dev
CONSTRAINTS := requirements/constraints.txt
PY          := $(VENV)/bin/python
comma       := ,
STAMP       := $(VENV)/.installed-$(subst $(comma),-,$(EXTRAS))
# Extra arguments for pytest (e.g. PYTEST_ARGS="-k timing") and JupyterLab.
PYTEST_ARGS ?=
LAB_ARGS    ?=
NOTEBOOKS   := $(sort $(wildcard notebooks/[0-9][0-9]_*.ipynb))
SANITIZE    := notebooks/nbval_sanitize.cfg
# The committed outputs assume the reference profile (labkit/machine/profile.py): 2 threads,
# buffers sized for 6 GiB of free host memory, GPUs hidden. Every run that makes or
# compares them goes through it; it stops at once where the machine cannot provide it.
PROFILE     ?= reference
WITH_PROFILE = $(PY) tools/with_profile.py $(PROFILE) --

.PHONY: help setup lab lab-student student test test-nbval test-flaky test-gpu lint check-notebooks \
        notebooks clean setup-matrix test-matrix

help:
	@echo "make lab               set up .venv and open JupyterLab on notebooks/"
	@echo "make student           write the student edition (solutions and outputs removed) to build/student"
	@echo "make lab-student       build the student edition and open JupyterLab on it"
	@echo "make test              set up .venv, then lint and run every test (pytest + strict nbval)"
	@echo "make test-nbval        only the strict nbval part of make test (under the reference profile)"
	@echo "make test-gpu          on an NVIDIA GPU machine: every notebook with the GPU visible, GPU cells checked"
	@echo "make test-flaky        strict nbval over every notebook RUNS=5 times in a row (flakiness)"
	@echo "make test-matrix       every notebook in a torch-only and a torch+TensorFlow venv (.venv-matrix/)"
	@echo "make notebooks         re-execute every notebook in place (the committed outputs)"
	@echo "make check-notebooks   fail on notebooks without outputs, with errors, or not built by make notebooks"
	@echo "Variables: EXTRAS=$(EXTRAS) (GPU: gpu,lab,dev)  PYTHON=$(PYTHON)  VENV=$(VENV)"

setup: $(STAMP)

# The stamp depends on the pins: editing them (or pyproject.toml) reinstalls.
$(STAMP): pyproject.toml $(CONSTRAINTS)
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 10) else 1)' || \
	  { echo "gpu-labkit needs Python 3.10 or newer; '$(PYTHON)' is older. Run: make PYTHON=python3.11 ..." >&2; exit 1; }
	@test -x $(PY) || $(PYTHON) -m venv $(VENV) || \
	  { echo "Could not create $(VENV). On Debian/Ubuntu install the venv module: apt-get install python3-venv" >&2; exit 1; }
	$(PY) -m pip install --disable-pip-version-check -q -c $(CONSTRAINTS) -e ".[$(EXTRAS)]"
	$(PY) -m ipykernel install --sys-prefix --name gpu-labkit --display-name "Python (gpu-labkit)" >/dev/null
	@rm -f $(VENV)/.installed-*
	@touch $@
	@echo "Environment ready in $(VENV) (extras: $(EXTRAS))."

lab: $(STAMP)
	$(PY) tools/lab.py $(LAB_ARGS)

# The student edition: nbgrader's generate_assignment preprocessors (no
# database) strip the solution regions and the outputs. See docs/nbgrader.md.
student: $(STAMP)
	$(PY) tools/student.py --out build/student

lab-student: student
	$(PY) tools/lab.py --root build/student $(LAB_ARGS)

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy

check-notebooks: $(STAMP)
	$(PY) tools/nbcheck.py $(NOTEBOOKS)

# Unit tests run on both cores. Then strict nbval: every output is compared,
# except what the sanitize file masks (times, rates, sizes) and cells marked
# NBVAL_IGNORE_OUTPUT. The notebooks run one at a time, alone: they measure the
# machine, and a second process on a 2-core machine oversubscribes torch's
# threads (a 2-thread matmul then runs up to 1000x slower), which would make
# the measured roofline, and the verdicts printed from it, meaningless.
# Strict nbval runs under the reference profile ($(PROFILE)), so the outputs have the same
# structure on any machine that can provide it (docs/reliability.md, section 5).
test: lint check-notebooks
	$(PY) -m pytest -p no:cacheprovider -n 2 --dist loadfile tests $(PYTEST_ARGS)
	$(MAKE) --no-print-directory test-nbval

test-nbval: $(STAMP)
	$(WITH_PROFILE) $(PY) -m pytest -p no:cacheprovider \
	  --nbval --nbval-current-env --nbval-sanitize-with $(SANITIZE) \
	  $(NOTEBOOKS) $(PYTEST_ARGS)

# The same strict nbval run, RUNS times in a row: outputs that change between
# runs on one machine are flaky, and a mask must not hide them (issue 8).
RUNS ?= 5
test-flaky: $(STAMP)
	$(WITH_PROFILE) $(PY) tools/nbval_repeat.py --runs $(RUNS) --log build/nbval_repeat.json

# On a machine with an NVIDIA GPU (EXTRAS=gpu,lab,dev): every notebook with the GPU
# visible and no profile; no cell may raise, every GPU cell must run live, and what
# the GPU cells print must be sane (tools/gpu_notebooks.py). Outputs are not compared.
test-gpu: $(STAMP)
	$(PY) tools/gpu_notebooks.py --json build/gpu_notebooks.json $(NOTEBOOKS)

# The environment matrix (issue 8): the notebooks where optional packages are
# missing, for real. b-torch has torch only (no TensorFlow, CuPy, numba, Triton,
# scikit-learn or Kernel Tuner); c-torch-tf adds tensorflow-cpu and Keras. Their
# outputs differ from the committed ones by design, so instead of strict nbval
# tools/run_notebooks.py checks that each notebook runs to the end with no
# traceback, and that each missing package is announced in one line naming its
# install command. Same pins as .venv; pip reuses its cache. Not part of
# `make test` (it takes as long again; see .ci/run).
MATRIX            := .venv-matrix
MATRIX_ENVS       := b-torch c-torch-tf
MATRIX_b-torch    := notebook-runner
MATRIX_c-torch-tf := notebook-runner,tensorflow
NOT_IN_MATRIX     := cupy,numba,numba_cuda,kernel_tuner,sklearn,triton

setup-matrix: $(MATRIX_ENVS:%=$(MATRIX)/%/.installed)

$(MATRIX)/%/.installed: pyproject.toml $(CONSTRAINTS)
	@test -x $(MATRIX)/$*/bin/python || $(PYTHON) -m venv $(MATRIX)/$*
	$(MATRIX)/$*/bin/python -m pip install --disable-pip-version-check -q \
	  -c $(CONSTRAINTS) -e ".[$(MATRIX_$*)]"
	@touch $@
	@echo "Matrix environment ready in $(MATRIX)/$* (extras: $(MATRIX_$*))."

# Both run even if the first fails; the target fails if either did.
test-matrix: setup-matrix
	@status=0; \
	$(MATRIX)/b-torch/bin/python tools/run_notebooks.py --json build/matrix/b-torch.json \
	  --without tensorflow,keras,$(NOT_IN_MATRIX) $(NOTEBOOKS) || status=1; \
	$(MATRIX)/c-torch-tf/bin/python tools/run_notebooks.py --json build/matrix/c-torch-tf.json \
	  --without $(NOT_IN_MATRIX) --with tensorflow,keras $(NOTEBOOKS) || status=1; \
	exit $$status

# Progress bars print elapsed times to stderr: off wherever outputs are stored
# or compared (a student's `make lab` keeps them).
test test-nbval test-flaky test-gpu test-matrix notebooks: export LABKIT_PROGRESS := 0

notebooks: $(STAMP)
	$(WITH_PROFILE) $(PY) tools/build_notebooks.py $(NOTEBOOKS)

clean:
	rm -rf $(VENV) build .pytest_cache .ruff_cache
	find . -name __pycache__ -type d -prune -exec rm -rf {} +
