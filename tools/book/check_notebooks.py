"""Notebook hygiene: each notebook is as a clean "Restart & Run All" left it.

    python tools/book/check_notebooks.py [notebooks...]   # default: chapters and solutions

Checks, naming the notebook and cell of each problem (chapters and solutions notebooks alike):
- kernelspec `python3`;
- the first code cell is the book's setup cell, character for character (`tools/book/book.py`);
- code cells' execution counts are exactly 1..N, every code cell executed, none empty;
- no Colab, timing, papermill or widget-state metadata;
- error outputs only in cells tagged `raises-exception`;
- no raw float tensor or array in a stored output (`tensor([1., 0.5])`, `tensor(0.3333)`,
  `array([0.25, ...])`): their text depends on the PyTorch/NumPy version (`tensor([1., 1.])`
  in one, `tensor([1.000, 1.000])` in another), so nbval would fail on the reader's machine.
  Print formatted Python numbers instead (`utils.fmt`, or f-strings). Integer and boolean
  tensors print the same everywhere and pass.

And the exercises (`tools/book/solutions.py`): a chapter with a ``## Exercises`` heading has a
solutions notebook with one checked answer per exercise, linked both ways. Given explicit paths,
that is checked for each chapter or solutions notebook among them.
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

from book import ROOT, all_notebook_paths, setup_cell
from execute_notebooks import (  # one list: what re-execution strips
    VOLATILE_CELL_KEYS,
    VOLATILE_NOTEBOOK_KEYS,
)
from solutions import check_exercises

# A tensor/array repr, from its opening bracket to the closing parenthesis (reprs hold no ")"
# before their end, except in a trailing `grad_fn=<...>)` or `dtype=...)`, which are fine).
_REPR_RE = re.compile(r"\b(tensor|array)\((.*?)\)", re.DOTALL)
# A float as PyTorch or NumPy print it: "1.", "0.500", "-2.5e-03", "1e-08", nan, inf.
_FLOAT_RE = re.compile(r"(?<![\w.])-?(?:\d+\.\d*|\.\d+|\d+e[-+]?\d+)|\b(?:nan|inf)\b")


def raw_float_reprs(text: str) -> list[str]:
    """The raw float tensor/array reprs in `text`, e.g. `tensor([1., 1.])` or `array([0.5])`.

    `tensor([1, 2])`, `tensor([True, False])` and `torch.Size([2, 3])` are not floats and are
    not returned; nor is `tensor(...)` written in prose with no number inside.
    """
    found = []
    for match in _REPR_RE.finditer(text):
        body = match.group(2)
        if _FLOAT_RE.search(body.split("dtype=")[0].split("grad_fn=")[0]):
            found.append(" ".join(match.group(0).split())[:60])
    return found


def _output_texts(cell: dict) -> list[str]:
    texts = []
    for out in cell.get("outputs", []):
        if out.get("output_type") == "stream":
            texts.append(out.get("text", ""))
        elif out.get("output_type") in ("execute_result", "display_data"):
            texts.append(out.get("data", {}).get("text/plain", ""))
    return ["".join(t) if isinstance(t, list) else t for t in texts]


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
    problems += [
        f"{rel}: notebook metadata has {key!r} (run tools/book/execute_notebooks.py)"
        for key in VOLATILE_NOTEBOOK_KEYS
        if key in meta
    ]

    code_cells = [
        (i, c)
        for i, c in enumerate(nb["cells"])
        if isinstance(c, dict) and c.get("cell_type") == "code"
    ]
    if not code_cells:
        problems.append(f"{rel}: has no code cells")
        return problems
    first_index, first = code_cells[0]
    if "".join(first.get("source", "")) != setup_cell():
        problems.append(
            f"{rel}: cell {first_index}: the first code cell is not the book's setup "
            "cell (copy it from tools/book/book.py)"
        )
    empty = {i for i, c in code_cells if not "".join(c.get("source", "")).strip()}
    problems += [f"{rel}: cell {i}: empty code cell (delete it)" for i in sorted(empty)]
    code_cells = [(i, c) for i, c in code_cells if i not in empty]  # never executed
    counts = [c.get("execution_count") for _, c in code_cells]
    if counts != list(range(1, len(code_cells) + 1)):
        problems.append(
            f"{rel}: execution counts are {counts}, expected 1..{len(code_cells)} "
            "(a clean top-to-bottom run: tools/book/execute_notebooks.py)"
        )
    for i, cell in code_cells:
        problems += [
            f"{rel}: cell {i}: metadata has {key!r}"
            for key in VOLATILE_CELL_KEYS
            if key in cell.get("metadata", {})
        ]
        tags = cell.get("metadata", {}).get("tags", [])
        for out in cell.get("outputs", []):
            if out.get("output_type") == "error" and "raises-exception" not in tags:
                problems.append(
                    f"{rel}: cell {i}: stores an error ({out.get('ename')}) but is "
                    "not tagged raises-exception"
                )
        reprs = [r for text in _output_texts(cell) for r in raw_float_reprs(text)]
        if reprs:
            problems.append(
                f"{rel}: cell {i}: prints a raw float tensor/array, whose text "
                f"changes with the PyTorch/NumPy version: {reprs[0]!r} (print "
                "utils.fmt(x) or an f-string with <= 3 decimals)"
            )
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "notebooks", nargs="*", type=Path, help="default: every chapter and solutions notebook"
    )
    args = parser.parse_args(argv)
    paths = args.notebooks or all_notebook_paths()
    problems = [p for path in paths for p in check_notebook(path)]
    problems += check_exercises(paths)
    for problem in problems:
        print(problem)
    print(f"Notebook hygiene: {len(paths)} notebooks, {len(problems)} problems")
    return 1 if problems or not paths else 0


if __name__ == "__main__":
    raise SystemExit(main())
