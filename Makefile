# Two entry points for a fresh Debian machine: `make demo` and `make test`. Both install what they
# need (apt packages, a .venv) and are safe to re-run.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# python3-venv for the .venv; prometheus (and promtool) and prometheus-alertmanager for the rule tests,
# the end-to-end tests and the demo; openssl for the certificates of the Alertmanager TLS test.
APT_PACKAGES := python3-venv prometheus prometheus-alertmanager openssl
SHARED_FIXTURES := ../shared/fixtures
# Python's compiled bytecode is kept, under .venv/pycache (never beside the sources), even where the environment
# sets PYTHONDONTWRITEBYTECODE (this project's CI does): the suite starts thousands of Python processes (pytest's
# workers, the programs under test, the benches), and each would otherwise compile every module it imports again,
# and pytest rewrite every test module again. Deleting .venv (make clean) deletes it.
export PYTHONDONTWRITEBYTECODE :=
export PYTHONPYCACHEPREFIX := $(CURDIR)/$(VENV)/pycache

.PHONY: demo demo-node test e2e clock-shift clock-shift-halves lint typecheck unit rules-test dashboards runbooks xids install-tables architecture golden-metrics deps apt clean bench image chart \
	podresources-stubs schema image-lock image-name release-check

# Debian packages, only those missing (needs root or sudo): $(call apt_install,<packages>) in a stamp's recipe.
# Debian's prometheus package starts a service on install where an init system runs; nothing here depends on it.
define apt_install
	@missing=""; for p in $(1); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  echo "installing Debian packages:$$missing"; \
	  $$SUDO apt-get update -q && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -q --no-install-recommends $$missing; \
	fi
	@touch $@
endef

.stamp-apt: Makefile
	$(call apt_install,$(APT_PACKAGES))

apt: .stamp-apt

# The venv needs python3-venv alone (`make chart` needs nothing more: no Prometheus).
.stamp-apt-venv:
	$(call apt_install,python3-venv)

$(BIN)/python: | .stamp-apt-venv
	$(PYTHON) -m venv $(VENV)

# Re-installs when pyproject.toml changes.
$(VENV)/.installed: pyproject.toml training/pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[dev,torch]' -e ./training
	@touch $@

deps: $(VENV)/.installed .stamp-apt

lint: deps
	$(BIN)/ruff check .

typecheck: deps
	$(BIN)/mypy

# Two workers (pytest-xdist): one runs the end-to-end scenarios in turn while the other runs the rest.
PYTEST_WORKERS ?= 2
# The slowest tests are listed at the end: the suite must stay under 15 minutes on 2 cores.
unit: deps
	$(BIN)/pytest -q -n $(PYTEST_WORKERS) --dist loadgroup --durations=15 $(PYTEST_ARGS)

# The tests that fix a start time, with it a year back and a year ahead (GPUHEALTH_TEST_T0): no behaviour may
# depend on the wall clock being near the date the suite fixes.
clock-shift: deps
	GPUHEALTH_TEST_T0=2025-12-02T10:00:00Z $(BIN)/pytest -q -n $(PYTEST_WORKERS) -m fixed_clock
	GPUHEALTH_TEST_T0=2027-12-02T10:00:00Z $(BIN)/pytest -q -n $(PYTEST_WORKERS) -m fixed_clock

# make test's share of clock-shift: each test that fixes a start time runs once, a year back or a year ahead (half
# of them each, chosen by a stable hash of the test's id: GPUHEALTH_CLOCK_HALF, tests/conftest.py). Either date is a
# year from the one the suite fixes, which is what shows a clock left unpinned; both dates for every test (make
# clock-shift) took the suite to 19 minutes on 2 cores.
clock-shift-halves: deps
	GPUHEALTH_CLOCK_HALF=0 GPUHEALTH_TEST_T0=2025-12-02T10:00:00Z $(BIN)/pytest -q -n $(PYTEST_WORKERS) -m fixed_clock
	GPUHEALTH_CLOCK_HALF=1 GPUHEALTH_TEST_T0=2027-12-02T10:00:00Z $(BIN)/pytest -q -n $(PYTEST_WORKERS) -m fixed_clock

# Every test once: those that fix a start time at a shifted date instead of at the fixed one (that date is near the
# day the suite was written, the one least likely to show a clock left unpinned). `make unit` alone runs every test
# at the fixed date; `make clock-shift` every such test at both shifted dates.
test: lint typecheck
	$(MAKE) --no-print-directory unit PYTEST_ARGS='-m "not fixed_clock"'
	$(MAKE) --no-print-directory clock-shift-halves

# The health policy alone, for a fast loop while editing rules/ (make test runs these too, via pytest).
rules-test: deps
	promtool check rules rules/alerts/*.yaml rules/recording/*.yaml
	promtool test rules rules/tests/*.yaml

# Rewrite the exporter's golden /metrics (tests/fixtures/golden/once_fixture_node.prom) after an intended change
# to a family, a parser or a fixture; `git diff` it before committing.
golden-metrics: deps
	GPUHEALTH_UPDATE_GOLDEN=1 $(BIN)/pytest -q -p no:xdist tests/exporter/test_exporter_golden_metrics.py

# Regenerate dashboards/json/ from dashboards/generate.py (tests/dashboards/test_dashboards.py fails while the
# committed JSON is stale). The Helm chart reads the JSON through helm/gpuhealth/files/dashboards.
dashboards: deps
	$(BIN)/python -m dashboards.generate

# Regenerate the shared blocks of every runbook (docs/runbooks/<Alert>.md: what gpuhealth does for the alert, holds,
# the lasting record) from rules/ and the remediator's policy defaults (tests/docs/test_runbooks.py fails while one is
# stale). Run it after adding an alert or changing a policy default.
runbooks: deps
	$(BIN)/python docs/runbooks/generate.py

# Regenerate docs/alerts.md's Xid table (every Xid of NVIDIA's catalog, its action and gpuhealth's alert and rung)
# from gpuhealth/contract/xids.py, xid_catalog.py and rules/alerts/gpu.yaml (tests/docs/test_xid_table.py).
xids: deps
	$(BIN)/python docs/xids/generate.py

# Regenerate docs/install.md's tables of the node-action Jobs and of every grant from the rendered chart (the reasons
# for the grants: helm/grants.yaml; tests/chart/test_install_tables.py fails while a table is stale). Run it after
# changing the chart's RBAC, the Jobs' templates or their admission policy.
install-tables: deps
	$(BIN)/python helm/install_tables.py

# Regenerate docs/architecture.md's rooms and modules from docs/architecture/rooms.yaml, the table of each program's
# rooms, what each may import and one line per module (tests/docs/test_architecture.py fails while the page is stale,
# while a module is named nowhere in it, and while a room imports what its row does not allow). Run it after adding,
# moving or removing a module: its line goes under its room in the table first.
architecture: deps
	$(BIN)/python docs/architecture/generate.py

# Regenerate the remediator.policy part of helm/gpuhealth/values.schema.json from the policy reader (gpuhealth/remediator/policy/)
# (tests/chart/test_policy_schema.py fails while it is stale), so `helm template` (Argo CD's diff) refuses a policy the
# remediator would refuse at start. Run it after adding or changing a policy key.
schema: deps
	$(BIN)/python helm/policy_schema.py

# Regenerate the kubelet pod-resources stubs (gpuhealth/exporter/kubelet/api_pb2.py, .pyi, api_pb2_grpc.py) from the checked-in
# gpuhealth/exporter/kubelet/api.proto. grpcio-tools is installed into the venv for this alone (no dependency of the project);
# the stubs it writes require grpcio and protobuf at least as new as it (pyproject.toml's pins follow it).
GRPCIO_TOOLS ?= grpcio-tools==1.85.1
podresources-stubs: deps
	$(BIN)/python -m pip install -q '$(GRPCIO_TOOLS)'
	$(BIN)/python -m grpc_tools.protoc -I . --python_out=. --pyi_out=. --grpc_python_out=. gpuhealth/exporter/kubelet/api.proto

# What a user installs. `make chart`: dist/gpuhealth-<version>.tgz, as `helm package` makes it, loaded back and
# rendered before it is kept; it needs the venv only, not the apt packages (no Prometheus). `make image`: the
# Dockerfile's image (IMAGE=... to push elsewhere); where docker cannot build (no daemon), it says so and skips.
# Its tag is the release's, the one the chart runs by default, only on the release's commit (the tag v<version>,
# docs/releasing.md): any other build is <version>-dev.<commit>, so that a release's tag names one image for good.
CHART_VERSION := $(shell sed -n 's/^appVersion: *"\{0,1\}\([^"]*\)"\{0,1\}/\1/p' helm/gpuhealth/Chart.yaml)
RELEASE_COMMIT := $(shell git rev-parse -q --verify 'refs/tags/v$(CHART_VERSION)^{commit}' 2>/dev/null)
HEAD_COMMIT := $(shell git rev-parse -q --verify HEAD 2>/dev/null)
IMAGE_TAG := $(if $(and $(RELEASE_COMMIT),$(filter $(RELEASE_COMMIT),$(HEAD_COMMIT))),$(CHART_VERSION),$(CHART_VERSION)-dev.$(shell git rev-parse --short=12 HEAD 2>/dev/null || echo unknown))
IMAGE ?= ghcr.io/gpuhealth/gpuhealth:$(IMAGE_TAG)
DOCKER ?= docker

chart: $(VENV)/.installed
	@$(BIN)/python helm/package.py --destination dist

# Before and after cutting a release (docs/releasing.md): every released version is tagged on the commit its
# CHANGELOG link names. Not part of `make test`: a clone of a branch (CI's) may carry no tags.
release-check: deps
	$(BIN)/pytest -q -p no:randomly tests/release/check_release_tags.py

# The image's name and tag that `make image` builds, for scripts (and tests/release/test_release_tags.py).
image-name:
	@echo $(IMAGE)

# requirements/image.txt, the versions the image installs (the Dockerfile builds with it as pip's constraints):
# gpuhealth[nvml] and the build backend ([build-system] requires) resolved afresh in a clean venv of the image's
# Python (3.11), from PyPI alone (PIP_CONFIG_FILE=/dev/null: no local index or constraints of this machine), as
# `pip freeze` lists them. Re-run to take new releases (and after changing pyproject.toml's dependencies); review
# the diff. tests/release/test_image.py checks that it pins every runtime dependency.
IMAGE_LOCK := requirements/image.txt
image-lock:
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info[:2] == (3, 11) else "make image-lock: needs Python 3.11, the image'"'"'s (PYTHON=python3.11)")'
	@venv=$$(mktemp -d) && trap 'rm -rf "$$venv"' EXIT && export PIP_CONFIG_FILE=/dev/null && \
	  build=$$($(PYTHON) -c 'import tomllib; print(" ".join(tomllib.load(open("pyproject.toml", "rb"))["build-system"]["requires"]))') && \
	  $(PYTHON) -m venv "$$venv" && "$$venv/bin/pip" install -q --upgrade pip && \
	  "$$venv/bin/pip" install -q --upgrade '.[nvml]' $$build && \
	  { echo "# The image's Python packages, pinned: generated by \`make image-lock\` (a clean venv of Python 3.11,"; \
	    echo "# PyPI); the Dockerfile builds with it as constraints. Do not edit by hand."; \
	    "$$venv/bin/pip" freeze --all --exclude pip --exclude gpuhealth; } > $(IMAGE_LOCK)
	@echo "wrote $(IMAGE_LOCK)"

image:
	@if command -v $(DOCKER) >/dev/null 2>&1 && $(DOCKER) info >/dev/null 2>&1; then \
	  $(DOCKER) build -t $(IMAGE) . && echo "built $(IMAGE)"; \
	else \
	  echo "make image: skipped: '$(DOCKER) info' fails here (no docker daemon); elsewhere: docker build -t $(IMAGE) ."; \
	fi

# The whole pipeline with scripted faults, narrated (under 3 minutes).
demo: deps
	@$(BIN)/python demo/pipeline.py

# The node agent alone on a recorded fixture node.
demo-node: deps
	@bash demo/run-fixture-node.sh

# Only the end-to-end scenarios (make test runs them too).
e2e: deps
	$(BIN)/pytest -q -m e2e

# Every benchmark in its quick mode (about 11 minutes: 5 min 43 s on this 2-core machine, plus ~2 min for the sharded
# rules and ~3 min for the storm at 10 ms a request), figures beside their references; docs/benchmarks.md
# gives each one's full command. Debian's prometheus-node-exporter is the exporter's reference.
.stamp-apt-bench: Makefile | .stamp-apt
	@dpkg -s prometheus-node-exporter >/dev/null 2>&1 || { SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -q && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -q --no-install-recommends \
	  prometheus-node-exporter; }
	@touch $@

bench: deps .stamp-apt-bench
	$(BIN)/python bench/exporter_cost.py --quick
	$(BIN)/python bench/kmsg_parse.py --quick
	$(BIN)/python bench/remediator_storm.py --quick
	$(BIN)/python bench/rules_scale.py --quick
	$(BIN)/python bench/rules_scale.py --shards 4 --quick
	$(BIN)/python bench/sim_speed.py --quick
	$(BIN)/python bench/gpu_scope_capacity.py
	$(BIN)/python bench/api_requests.py --quick
	$(BIN)/python bench/remediator_api_rate.py --quick

clean:
	rm -rf $(VENV) .stamp-* .mypy_cache .ruff_cache .pytest_cache
