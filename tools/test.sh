#!/usr/bin/env bash
# The book's test command (README, "Quickstart"): every check CI runs, in one go.
#   1. ruff (lint, then `ruff format --check`) over utils/, tests/, tools/ and the notebooks,
#      and mypy over utils/ (its settings: pyproject.toml);
#   2. notebook hygiene (clean top-to-bottom runs, the shared setup cell, no stray metadata);
#   3. the LaTeX check: every formula typesets in MathJax 3 (installs mathjax-full via npm once);
#   4. pytest over tests/ and nbval (strict) over every notebook, on 2 workers, printing the
#      ten slowest notebooks (tools/book/nbtimes.py); then each chapter's budget table
#      (tools/book/budget.py: main-line words and code lines, running time; printed, not
#      yet enforced);
#   5. the HTML book: built, then every page checked in headless Chromium.
# Runs every step even when an earlier one fails, and exits non-zero if any failed.
set -uo pipefail
cd "$(dirname "$0")/.."
export PYTHONHASHSEED=0
PY="${PYTHON:-python3}"  # the interpreter the requirements were installed into
status=0
step() { echo; echo "=== $1"; }

step "ruff and mypy"
"$PY" -m ruff check utils tests tools notebooks || status=1
"$PY" -m ruff format --check utils tests tools notebooks || status=1
"$PY" -m mypy || status=1

step "notebook hygiene"
"$PY" tools/book/check_notebooks.py || status=1

step "LaTeX (MathJax 3)"
if [ ! -d tools/book/latex/node_modules/mathjax-full ]; then
    npm ci --prefix tools/book/latex --no-audit --no-fund --loglevel=error || status=1
fi
"$PY" tools/book/check_latex.py || status=1

step "pytest: unit tests and nbval over every notebook"
"$PY" -m pytest -n 2 --dist loadscope -p nbtimes tests notebooks \
    --nbval --nbval-current-env --nbval-sanitize-with tools/book/nbval_sanitize.cfg "$@" || status=1

step "chapter budgets (words, lines and minutes of each notebook)"
"$PY" tools/book/budget.py || status=1

step "HTML book: build and browser check"
# Builds _build/html from the committed notebooks, then opens every page in Chromium
# (requirements-book.txt and Debian's chromium; .ci/run installs both). Without them the
# step is skipped with one line, except under CI=true, where that is a failure.
if ! command -v chromium >/dev/null 2>&1 && ! command -v chromium-browser >/dev/null 2>&1; then
    if [ "${CI:-}" = "true" ]; then
        echo "FAILED: chromium is not installed (CI=true needs it: apt-get install chromium)"
        status=1
    else
        echo "skipped: chromium is not installed (apt-get install chromium)"
    fi
elif ! "$PY" -c "import sphinx, myst_nb, sphinx_book_theme, playwright" 2>/dev/null; then
    if [ "${CI:-}" = "true" ]; then
        echo "FAILED: the book's packages are missing (pip install -r requirements-book.txt)"
        status=1
    else
        echo "skipped: the book's packages are not installed (pip install -r requirements-book.txt)"
    fi
else
    { "$PY" tools/book/build_book.py && "$PY" tools/book/check_book.py; } || status=1
fi

if [ "$status" -ne 0 ]; then
    echo "FAILED: see the steps above"
fi
exit "$status"
