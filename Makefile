# Two entry points do all the set-up on a fresh machine: `make report` and `make test`.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed-stamp
OUT    ?= zoo-report
SBC_OUT  ?= zoo-sbc
SBC_REPS ?= 100

.PHONY: report test test-slow test-torch-next lint typecheck bench clean sbc docs

# torch==2.13.0 is the CPU build (an unpinned torch pulls a multi-GB CUDA build).
$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check torch==2.13.0
	$(PY) -m pip install --quiet --disable-pip-version-check -e ".[dev]"
	touch $(STAMP)

report: $(STAMP)
	$(VENV)/bin/zoo report --out $(OUT)

# Two worker processes (pytest-xdist): the machines have two cores. One torch / OpenMP thread
# each: two workers of two threads on two cores made the kernels' tests many times slower.
test: $(STAMP)
	OMP_NUM_THREADS=1 $(PY) -m pytest -n 2

test-slow: $(STAMP)
	OMP_NUM_THREADS=1 $(PY) -m pytest -n 2 -m slow

# The newest torch the project supports (pyproject.toml's range), in a venv of its own: the density,
# sampler and engine tests, which are what touch torch's tracer and compiler (inference/backend).
NEXT_VENV  := .venv-torch-next
NEXT_PY    := $(NEXT_VENV)/bin/python
NEXT_STAMP := $(NEXT_VENV)/.installed-stamp
NEXT_TORCH ?= 2.14.1
NEXT_TESTS ?= tests/inference/backend tests/inference/test_density.py tests/inference/test_engines.py \
	$(addprefix tests/inference/samplers/test_,driver.py nuts.py chees.py metric.py hmc.py samplers.py)

$(NEXT_STAMP): pyproject.toml
	test -x $(NEXT_PY) || $(PYTHON) -m venv $(NEXT_VENV)
	$(NEXT_PY) -m pip install --quiet --disable-pip-version-check torch==$(NEXT_TORCH)
	$(NEXT_PY) -m pip install --quiet --disable-pip-version-check -e ".[dev]"
	touch $(NEXT_STAMP)

test-torch-next: $(NEXT_STAMP)
	$(NEXT_PY) -m pytest -n 2 $(NEXT_TESTS)

# lint-imports: the layering contracts of pyproject.toml ([tool.importlinter]); typecheck: mypy
lint: $(STAMP)
	$(VENV)/bin/ruff check . && $(VENV)/bin/ruff format --check . && $(VENV)/bin/lint-imports
	$(MAKE) typecheck

# mypy ([tool.mypy] in pyproject.toml) over .typecheck/, symlinks that give the folders their import
# names (the package-dir of pyproject.toml): mypy cannot find zoo_inference etc. from the tree.
typecheck: $(STAMP)
	mkdir -p .typecheck
	ln -sfn ../zoo .typecheck/zoo
	ln -sfn ../inference .typecheck/zoo_inference
	ln -sfn ../reports .typecheck/zoo_reports
	ln -sfn ../datasets .typecheck/zoo_datasets
	$(VENV)/bin/mypy -p zoo -p zoo_inference

# Simulation-based calibration of nuts, chees and svi on every model with continuous parameters:
# SBC_OUT/sbc.html links a page per model and engine (hours on two cores: benchmarks/results/sbc.md).
sbc: $(STAMP)
	$(VENV)/bin/zoo sbc --engine nuts,chees,svi --reps $(SBC_REPS) --out $(SBC_OUT)

# The documentation site (docs/_build/html/index.html). Its gallery shows a quick report: by
# default `make docs` runs one into docs/_build/zoo-report (resumed from its cells when rerun);
# `make docs REPORT=zoo-report` shows a report you already have and runs nothing.
DOCS_STAMP  := $(VENV)/.docs-stamp
DOCS_REPORT := docs/_build/zoo-report
REPORT      ?=

$(DOCS_STAMP): $(STAMP)
	$(PY) -m pip install --quiet --disable-pip-version-check -e ".[dev,docs]"
	touch $(DOCS_STAMP)

docs: $(DOCS_STAMP)
	@command -v dot >/dev/null || { echo "make docs: Graphviz's dot is missing (apt-get install graphviz)" >&2; exit 2; }
	$(if $(REPORT),,$(VENV)/bin/zoo report --profile quick --out $(DOCS_REPORT) -q)
	ZOO_DOCS_REPORT="$(or $(REPORT),$(DOCS_REPORT))" $(PY) -m sphinx -W --keep-going -q -b html docs docs/_build/html

bench: $(STAMP)
	$(PY) benchmarks/engines.py

clean:
	rm -rf $(VENV) $(NEXT_VENV) $(OUT) *.egg-info .typecheck docs/_build docs/gallery docs/benchmarks
