"""Check that every formula in the notebooks' markdown cells typesets in MathJax 3.

Jupyter (JupyterLab 4 / Notebook 7) and Google Colab render markdown maths with MathJax 3;
a formula MathJax cannot parse shows up as a red error box or as raw TeX. This script sends
every markdown cell to ``tools/book/latex/check_tex.mjs`` (one Node process for all of them),
which finds the maths with MathJax's own finder and compiles it with MathJax's TeX input jax
(mathjax-full 3.2.2, the version JupyterLab 4 bundles).

Usage::

    npm ci --prefix tools/book/latex --no-audit --no-fund   # once
    python tools/book/check_latex.py [notebook.ipynb ...]   # default: chapters and solutions

Exit status: 0 all formulas typeset, 1 some are broken, 2 Node or mathjax-full is missing.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from book import all_notebook_paths  # beside this script

ROOT = Path(__file__).resolve().parents[2]
LATEX_DIR = Path(__file__).resolve().parent / "latex"  # the node package beside this file
SCRIPT = LATEX_DIR / "check_tex.mjs"
INSTALL_HINT = "run: npm ci --prefix tools/book/latex --no-audit --no-fund"


class LatexToolMissing(RuntimeError):
    """Node or the mathjax-full package is not installed."""


@dataclass(frozen=True)
class Problem:
    where: str  # "<notebook path> cell <index>"
    formula: str
    error: str

    def __str__(self) -> str:
        return f"{self.where}: {self.formula} -> {self.error}"


def _display_path(path: Path) -> str:
    try:
        return path.resolve().relative_to(ROOT).as_posix()
    except ValueError:
        return str(path)


def _markdown_cells(path: Path) -> list[dict[str, str]]:
    name = _display_path(path)
    nb = json.loads(path.read_text(encoding="utf-8"))
    cells = []
    for index, cell in enumerate(nb.get("cells", [])):
        if cell.get("cell_type") != "markdown":
            continue
        source = cell.get("source", "")
        if isinstance(source, list):
            source = "".join(source)
        cells.append({"where": f"{name} cell {index}", "text": source, "doc": name})
    return cells


def check_notebooks(paths: list[Path] | list[str]) -> tuple[int, list[Problem]]:
    """Return (number of formulas found, broken formulas) over the notebooks' markdown.

    Raises LatexToolMissing if Node or mathjax-full is not installed.
    """
    cells = [c for p in paths for c in _markdown_cells(Path(p))]
    node = shutil.which("node")
    if node is None:
        raise LatexToolMissing(f"Node.js ('node') is not on PATH; install Node 20, {INSTALL_HINT}")
    if not (LATEX_DIR / "node_modules" / "mathjax-full" / "package.json").is_file():
        raise LatexToolMissing(f"mathjax-full is not installed in tools/book/latex; {INSTALL_HINT}")
    result = subprocess.run(
        [node, str(SCRIPT)],
        input=json.dumps(cells),
        capture_output=True,
        text=True,
        encoding="utf-8",
        check=False,
    )
    if result.returncode != 0:
        if "mathjax-full" in result.stderr and "Cannot find" in result.stderr:
            raise LatexToolMissing(f"mathjax-full cannot be loaded; {INSTALL_HINT}")
        raise RuntimeError(f"{SCRIPT.name} failed (exit {result.returncode}):\n{result.stderr}")
    out = json.loads(result.stdout)
    problems = [Problem(p["where"], p["formula"], p["error"]) for p in out["problems"]]
    return out["formulas"], problems


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    paths = [Path(a) for a in args] if args else all_notebook_paths()
    try:
        n_formulas, problems = check_notebooks(paths)
    except LatexToolMissing as exc:
        print(f"LaTeX check cannot run: {exc}", file=sys.stderr)
        return 2
    for problem in problems:
        print(problem)
    print(f"LaTeX check: {n_formulas} formulas in {len(paths)} notebooks, {len(problems)} broken")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
