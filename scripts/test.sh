#!/usr/bin/env bash
# Install Tollgate with its test tools in .venv, run the quality gates, then the whole test suite.
set -euo pipefail
cd "$(dirname "$0")/.."

python3 -m venv .venv
.venv/bin/python -m pip install --quiet --upgrade pip
.venv/bin/python -m pip install --quiet -e '.[test]'

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
