"""Notebook hygiene: each notebook is as a clean "Restart & Run All" left it.

    python tools/check_notebooks.py [notebooks...]

Checks, naming the notebook and cell of each problem:
- kernelspec `python3`;
- the first code cell is the book's setup cell, character for character (`tools/book.py`);
- code cells' execution counts are exactly 1..N, every code cell executed, none empty;
- no Colab, timing, papermill or widget-state metadata;
- error outputs only in cells tagged `raises-exception`.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from tools.book import ROOT, notebook_paths, setup_cell  # noqa: E402
from tools.execute_notebooks import (  # noqa: E402  (one list: what re-execution strips)
    VOLATILE_CELL_KEYS,
    VOLATILE_NOTEBOOK_KEYS,
)


def check_notebook(path: Path) -> list[str]:
    """Every hygiene problem of one notebook, as `path: cell i: what` lines."""
    try:
        rel = path.resolve().relative_to(ROOT)
    except ValueError:
        rel = path
    try:
        nb = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        return [f"{rel}: not a readable notebook ({exc})"]
    if not isinstance(nb, dict) or not isinstance(nb.get("cells"), list):
        return [f"{rel}: not a notebook (expected a JSON object with a list of cells)"]
    problems: list[str] = []
    meta = nb.get("metadata", {})
    name = meta.get("kernelspec", {}).get("name")
    if name != "python3":
        problems.append(f"{rel}: kernelspec name is {name!r}, expected 'python3'")
    problems += [f"{rel}: notebook metadata has {key!r} (run tools/execute_notebooks.py)"
                 for key in VOLATILE_NOTEBOOK_KEYS if key in meta]

    code_cells = [(i, c) for i, c in enumerate(nb["cells"])
                  if isinstance(c, dict) and c.get("cell_type") == "code"]
    if not code_cells:
        problems.append(f"{rel}: has no code cells")
        return problems
    first_index, first = code_cells[0]
    if "".join(first.get("source", "")) != setup_cell():
        problems.append(f"{rel}: cell {first_index}: the first code cell is not the book's setup "
                        "cell (copy it from tools/book.py)")
    empty = {i for i, c in code_cells if not "".join(c.get("source", "")).strip()}
    problems += [f"{rel}: cell {i}: empty code cell (delete it)" for i in sorted(empty)]
    code_cells = [(i, c) for i, c in code_cells if i not in empty]  # never executed
    counts = [c.get("execution_count") for _, c in code_cells]
    if counts != list(range(1, len(code_cells) + 1)):
        problems.append(f"{rel}: execution counts are {counts}, expected 1..{len(code_cells)} "
                        "(a clean top-to-bottom run: tools/execute_notebooks.py)")
    for i, cell in code_cells:
        problems += [f"{rel}: cell {i}: metadata has {key!r}"
                     for key in VOLATILE_CELL_KEYS if key in cell.get("metadata", {})]
        tags = cell.get("metadata", {}).get("tags", [])
        for out in cell.get("outputs", []):
            if out.get("output_type") == "error" and "raises-exception" not in tags:
                problems.append(f"{rel}: cell {i}: stores an error ({out.get('ename')}) but is "
                                "not tagged raises-exception")
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("notebooks", nargs="*", type=Path, help="default: every notebook")
    args = parser.parse_args(argv)
    paths = args.notebooks or notebook_paths()
    problems = [p for path in paths for p in check_notebook(path)]
    for problem in problems:
        print(problem)
    print(f"Notebook hygiene: {len(paths)} notebooks, {len(problems)} problems")
    return 1 if problems or not paths else 0


if __name__ == "__main__":
    raise SystemExit(main())
