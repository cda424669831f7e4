#!/usr/bin/env bash
# The book's printed outputs under another PyTorch: nbval over every notebook in a second
# virtual environment that has that torch, the rest of requirements.txt as pinned, and the
# book's package. README promises "PyTorch 2.6 or newer", and Colab runs its own build, so
# the outputs must not depend on the version (docs/CONVENTIONS.md, "Outputs under another
# PyTorch"). The wheel is large (2.6 from PyPI brings ~3 GB of CUDA libraries), so this is
# not part of tools/test.sh or CI: run it before a release, and after re-executing notebooks.
#
#   bash tools/book/nbval_other_torch.sh 2.6.0                  # build once, then nbval, all
#   bash tools/book/nbval_other_torch.sh 2.6.0 notebooks/07_encoder.ipynb   # some notebooks
#   bash tools/book/nbval_other_torch.sh 2.6.0 --build-only     # only make the environment
#
# The environment lives in $VENV (default ~/.cache/attention-book/venv-torch-VERSION) and is
# reused while its torch is VERSION. Extra arguments go to pytest (default: notebooks/).
set -euo pipefail
VERSION="${1:?usage: bash tools/book/nbval_other_torch.sh TORCH_VERSION [--build-only | pytest args]}"
shift
cd "$(dirname "$0")/../.."
VENV="${VENV:-$HOME/.cache/attention-book/venv-torch-$VERSION}"
PY="$VENV/bin/python"

has_torch() {
    "$PY" -c "import sys, torch; sys.exit(torch.__version__.split('+')[0] != '$VERSION')" \
        2>/dev/null
}

if ! has_torch; then
    echo "building $VENV with torch==$VERSION (a large download the first time) ..."
    mkdir -p "$(dirname "$VENV")"
    python3 -m venv --clear "$VENV"
    # requirements.txt without its torch pin; it ends with `-e .`, the book's package
    grep -v '^torch==' requirements.txt > "$VENV/requirements-other-torch.txt"
    "$PY" -m pip install -q "torch==$VERSION" -r "$VENV/requirements-other-torch.txt"
    has_torch || { echo "FAILED: $VENV does not import torch $VERSION"; exit 1; }
fi
"$PY" -c "import torch, utils; print('torch', torch.__version__, '| utils from', utils.__file__)"
if [ "${1:-}" = "--build-only" ]; then
    exit 0
fi
[ "$#" -gt 0 ] || set -- notebooks
export PYTHONHASHSEED=0
exec "$PY" -m pytest -p no:cacheprovider -n 2 --dist loadscope \
    --nbval --nbval-current-env --nbval-sanitize-with tools/book/nbval_sanitize.cfg "$@"
