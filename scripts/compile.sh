#!/usr/bin/env bash
# Compile the request path with mypyc, in place, into this checkout's .venv (setup.py lists
# the modules): what the container image runs. `--clean` removes the compiled modules, back
# to plain Python. Rerun after editing a compiled module: the compiled one shadows its source
# (the test suite refuses to run on a stale build).
set -euo pipefail
cd "$(dirname "$0")/.."

find gateway adapters telemetry -name '*.so' -delete
rm -rf build
if [ "${1:-}" = "--clean" ]; then
    exit 0
fi
log=$(mktemp)
if ! TOLLGATE_COMPILE=1 .venv/bin/python setup.py --quiet build_ext --inplace >"$log" 2>&1; then
    cat "$log"
    exit 1
fi
rm -f "$log"
.venv/bin/python -c 'from gateway.build import compiled; assert compiled(), "the request path did not compile"'
