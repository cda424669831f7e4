#!/usr/bin/env bash
# The book's test command (README, "Quickstart"): every check CI runs, in one go.
#   1. ruff over utils/, tests/, tools/ and the notebooks;
#   2. notebook hygiene (clean top-to-bottom runs, the shared setup cell, no stray metadata);
#   3. the LaTeX check: every formula typesets in MathJax 3 (installs mathjax-full via npm once);
#   4. pytest over tests/ and nbval (strict) over every notebook, on 2 workers.
# Runs every step even when an earlier one fails, and exits non-zero if any failed.
set -uo pipefail
cd "$(dirname "$0")/.."
export PYTHONHASHSEED=0
PY="${PYTHON:-python3}"  # the interpreter the requirements were installed into
status=0
step() { echo; echo "=== $1"; }

step "ruff"
"$PY" -m ruff check utils tests tools notebooks || status=1

step "notebook hygiene"
"$PY" tools/check_notebooks.py || status=1

step "LaTeX (MathJax 3)"
if [ ! -d tools/latex/node_modules/mathjax-full ]; then
    npm ci --prefix tools/latex --no-audit --no-fund --loglevel=error || status=1
fi
"$PY" tools/check_latex.py || status=1

step "pytest: unit tests and nbval over every notebook"
"$PY" -m pytest -n 2 --dist loadscope tests notebooks \
    --nbval --nbval-current-env --nbval-sanitize-with tools/nbval_sanitize.cfg "$@" || status=1

if [ "$status" -ne 0 ]; then
    echo "FAILED: see the steps above"
fi
exit "$status"
