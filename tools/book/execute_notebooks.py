"""Re-execute notebooks in place, top to bottom in a fresh kernel, reproducibly.

    python tools/book/execute_notebooks.py                 # every chapter, then the solutions
    python tools/book/execute_notebooks.py notebooks/03_*.ipynb notebooks/solutions/03_*.ipynb

Each notebook is run by nbclient in a new `python3` kernel started in `notebooks/` (the
solutions too; nbval starts them in `notebooks/solutions/`, so no notebook may depend on its
working directory: paths come from the setup cell's `ROOT`), with per-cell timing and widget
state off and PYTHONHASHSEED fixed; then metadata that varies between machines (timings, Colab
and papermill fields, widget state, the Python patch version) is removed, so a re-run changes a
notebook only where its outputs changed.
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient

from book import NOTEBOOKS, all_notebook_paths

# Metadata keys that record how or where a notebook ran rather than what it says.
VOLATILE_NOTEBOOK_KEYS = (
    "widgets",
    "colab",
    "papermill",
    "execution",
    "toc",
    "vscode",
    "accelerator",
    "gpuClass",
)
VOLATILE_CELL_KEYS = (
    "execution",
    "ExecuteTime",
    "colab",
    "papermill",
    "outputId",
    "collapsed",
    "scrolled",
    "pycharm",
)
KERNELSPEC = {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"}


def clean_metadata(nb: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """Drop volatile metadata in place; keep tags and the standard kernelspec."""
    for key in VOLATILE_NOTEBOOK_KEYS:
        nb.metadata.pop(key, None)
    nb.metadata["kernelspec"] = dict(KERNELSPEC)
    info = nb.metadata.get("language_info")
    if info is not None:
        info.pop("version", None)  # differs between machines, means nothing to a reader
    for cell in nb.cells:
        for key in VOLATILE_CELL_KEYS:
            cell.metadata.pop(key, None)
    return nb


def execute(path: Path, timeout: int = 1800) -> float:
    """Execute `path` in place; return the seconds it took."""
    nb = nbformat.read(path, as_version=4)
    clean_metadata(nb)
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.outputs = []
            cell.execution_count = None
    start = time.perf_counter()
    client = NotebookClient(
        nb,
        timeout=timeout,
        kernel_name="python3",
        record_timing=False,
        store_widget_state=False,
        coalesce_streams=True,  # one stream output per cell, however the prints were timed
        resources={"metadata": {"path": str(NOTEBOOKS)}},
    )
    client.execute()
    seconds = time.perf_counter() - start
    clean_metadata(nb)
    nbformat.validate(nb)
    nbformat.write(nb, path)
    return seconds


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "notebooks", nargs="*", type=Path, help="default: every chapter and solutions notebook"
    )
    parser.add_argument("--timeout", type=int, default=1800, help="seconds per cell")
    args = parser.parse_args(argv)
    os.environ["PYTHONHASHSEED"] = "0"  # inherited by the kernel
    os.environ.setdefault("MPLBACKEND", "module://matplotlib_inline.backend_inline")
    paths = args.notebooks or all_notebook_paths()
    for path in paths:
        seconds = execute(Path(path).resolve(), timeout=args.timeout)
        print(f"{path}: executed in {seconds:.1f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
