# gym-mcp-bridge: make setup | run | test | test-fast | lint | bench | profile | sweep | gym-lock | uv-lock
# Idempotent: uv is bootstrapped into .cache/ when missing (pinned by hash: scripts/uv-requirements.txt),
# the bridge environment is .venv (from uv.lock), the Gym environment for the upstream is .gym-env
# (nemo-gym on Python 3.12, from the hashed lock scripts/gym-env/nemo-gym-$(NEMO_GYM_VERSION).lock.txt).

SHELL := /bin/bash
UV_VERSION ?= $(shell sed -n 's/^uv==\([^ ]*\).*/\1/p' scripts/uv-requirements.txt)
NEMO_GYM_VERSION ?= 0.4.0
UV := $(shell command -v uv 2>/dev/null || echo $(CURDIR)/.cache/uv-venv/bin/uv)
BRIDGE_PYTHON ?= $(shell scripts/find-python.sh 3.11 2>/dev/null || scripts/find-python.sh 3.12)
GYM_PYTHON_BASE ?=# empty: setup-gym-env.sh picks 3.12 for nemo-gym <= 0.4, 3.13 for later
PYTEST_ARGS ?=

.PHONY: setup gym-env gym-lock uv-lock evaluator-env run test test-fast lint fmt bench profile sweep clean

$(CURDIR)/.cache/uv-venv/bin/uv: scripts/uv-requirements.txt
	python3 -m venv .cache/uv-venv
	.cache/uv-venv/bin/pip install -q --require-hashes --only-binary :all: -r scripts/uv-requirements.txt
	touch $@

# Bytecode compiled at install (as the image does): a start never compiles the sources, even where
# PYTHONDONTWRITEBYTECODE is set (the bridge restarted in 2.5 s instead of 1.2 s here without it).
setup: $(UV)
	$(UV) sync -q --frozen --compile-bytecode --python "$(BRIDGE_PYTHON)"
	.venv/bin/python -m compileall -q bridge >/dev/null
	UV="$(UV)" NEMO_GYM_VERSION=$(NEMO_GYM_VERSION) scripts/setup-gym-env.sh .gym-env $(GYM_PYTHON_BASE)

gym-env: $(UV)
	UV="$(UV)" NEMO_GYM_VERSION=$(NEMO_GYM_VERSION) scripts/setup-gym-env.sh .gym-env-$(NEMO_GYM_VERSION) $(GYM_PYTHON_BASE)

# NeMo Evaluator's Gym client (examples/evaluator/, tests/test_clients_evaluator.py): .cache/evaluator-env,
# from the hashed lock scripts/evaluator-env/nemo-evaluator-0.3.0.lock.txt (scripts/lock.sh evaluator remakes it)
evaluator-env: $(UV)
	UV="$(UV)" scripts/setup-evaluator-env.sh

# The hashed lock the Gym environment of NEMO_GYM_VERSION installs from (docs/gym-versions.md):
# made or bumped from PyPI; commit it. `scripts/lock.sh gym` redoes every lock.
gym-lock: $(UV)
	UV="$(UV)" scripts/lock.sh gym $(NEMO_GYM_VERSION)

# uv pinned by hash for the Dockerfile and the bootstrap above: make uv-lock UV_VERSION=0.14.0
uv-lock: $(UV)
	UV="$(UV)" scripts/lock.sh uv $(UV_VERSION)

run: setup
	.venv/bin/gym-mcp-bridge serve $(ARGS)

lint: setup
	.venv/bin/ruff check bridge tests examples benchmarks tools
	.venv/bin/ruff format --check bridge tests examples benchmarks tools
	.venv/bin/mypy

fmt: setup
	.venv/bin/ruff check --fix bridge tests examples benchmarks tools
	.venv/bin/ruff format bridge tests examples benchmarks tools

# Every test (CI: .ci/run); `make test-fast` leaves out the slow roads, each a pytest marker
# (pyproject.toml, tests/README.md): about ten minutes on 2 cores instead of about forty.
FAST := not docker and not launcher and not npm and not evaluator and not soak
test: lint
	.venv/bin/pytest $(PYTEST_ARGS)

test-fast: lint
	.venv/bin/pytest -m "$(FAST)" $(PYTEST_ARGS)

# ARGS="<question> ...": one benchmark per question (benchmarks/run.py; docs/performance.md):
# calls | forwarding | footprint | soak | inflight | collector; ARGS="--help" lists them
bench: setup
	case "$(ARGS)" in calls*|forwarding*|footprint*) scripts/setup-nginx.sh ;; esac
	.venv/bin/python -m benchmarks.run $(ARGS)

# ARGS="--path fwd --sessions 1": where one replica's CPU goes per call, by module, from perf
# (tools/profile.py; installs perf; runs on Python 3.12, which perf can see into: .venv-profile)
profile: setup
	scripts/setup-perf.sh
	test -x .venv-profile/bin/python || $(UV) venv -q -p "$$(scripts/find-python.sh 3.12)" .venv-profile
	$(UV) export -q --frozen --no-hashes --no-emit-project -o .venv-profile/requirements.txt
	$(UV) pip install -q -p .venv-profile/bin/python -r .venv-profile/requirements.txt
	.venv-profile/bin/python -m tools.profile $(ARGS)

# Every bundled Gym environment behind the bridge, replayed natively and bridged: docs/compatibility.md
sweep: setup
	.venv/bin/python -m tools.sweep --out docs/compatibility.md --json tools/results/compatibility.json $(ARGS)

clean:
	rm -rf .venv .venv-profile .gym-env .gym-env-* .cache .pytest_cache .mypy_cache .ruff_cache
