#!/usr/bin/env bash
# Install Tollgate with its test tools in .venv, run the quality gates, then the whole test suite.
set -euo pipefail
cd "$(dirname "$0")/.."

python3 -m venv .venv
.venv/bin/python -m pip install --quiet --upgrade pip
.venv/bin/python -m pip install --quiet -e '.[test]'
# Test only: OPA's own engine, the reference for tests/policy/test_engine_conformance.py. It
# declares Python >= 3.14 but loads on 3.11, so pip's Python check is skipped for it alone.
.venv/bin/python -m pip install --quiet --ignore-requires-python 'opa-golib-python-bindings>=0.4.4'

# The request path compiled, as the container image runs it (setup.py, docs/architecture.md).
./scripts/compile.sh
export TOLLGATE_EXPECT_COMPILED=1

export PATH="$PWD/.venv/bin:$PATH"
echo "== ruff"
ruff check gateway adapters telemetry simulator tests bench
ruff format --check gateway adapters telemetry simulator tests bench
echo "== mypy --strict"
mypy gateway adapters telemetry simulator
echo "== import contracts"
lint-imports
echo "== tests"
python -m pytest "$@"
