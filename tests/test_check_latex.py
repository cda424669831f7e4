"""Tests for tools/book/check_latex.py: formulas that typeset pass, broken ones are named.

Needs Node and `npm ci --prefix tools/book/latex --no-audit --no-fund`; without them these
tests skip, as the browser tests do, except under CI=true, where that is a failure (CI must
never pass a LaTeX check that did not run).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import nbformat
import pytest
from conftest import needs
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

import check_latex
from check_latex import LatexToolMissing, Problem, check_notebooks

GOOD = [
    r"Inline $x^\top W_Q$ and $\mathrm{softmax}(z)_i = e^{z_i} / \sum_j e^{z_j}$.",
    r"$$\operatorname{Attention}(Q, K, V) = \mathrm{softmax}\!\left("
    r"\frac{QK^\top}{\sqrt{d_k}}\right) V$$",
    "\\begin{align}\n  \\mathbf{q}_i &= \\mathbf{x}_i W^Q \\\\\n"
    "  \\tfrac{1}{2} \\lVert x \\rVert &\\le \\text{something, as text}\n\\end{align}",
    r"$$\begin{pmatrix} 1 & 0 \\ 0 & 1 \end{pmatrix} \begin{bmatrix} a \\ b \end{bmatrix}"
    r" = \underbrace{\boldsymbol{\alpha} + \boldsymbol{\beta}}_{d_\text{model}}$$",
    r"Display with brackets \[ \mathbb{R}^{n \times d} \] and parens \( \sqrt{d_k} \).",
    r"$\newcommand{\R}{\mathbb{R}} x \in \R^d$ and later $y \in \R^{d}$ in the same notebook.",
    "A fence:\n```python\nprice = '$$' + f'${x}'\n```\nand a code span `cost = $5` and `$$`.",
    r"It costs $5 (a lone dollar is text), escaped \$10 and \$20 are dollars too.",
    "$$\nx = 1\n$$\n\nNew paragraph with $y$.",
]

# (markdown, formula text expected in the message, error fragment expected in the message)
BAD = [
    (r"unknown macro $\foo + 1$ here", r"$\foo + 1$", r"Undefined control sequence \foo"),
    (r"missing argument $\frac{a}$", r"$\frac{a}$", r"Missing argument for \frac"),
    (r"extra brace $x}$", "$x}$", "Extra close brace"),
    (r"open brace $x^{2$ never closed", r"$x^{2$", "unbalanced braces"),
    (r"left alone $\left( x$", r"$\left( x$", r"missing \right"),
    (
        "$$\\begin{align} a &= b \\end{aligned}$$",
        r"\begin{align} a &= b \end{aligned}",
        r"\begin{align} ended with \end{aligned}",
    ),
    (
        "\\begin{align}\n a &= b\n\\end{aligned}",
        r"\begin{align}",
        r"\begin{align} is never closed",
    ),
    ("display $$ a + b never closed", "$$ a + b", "unclosed display math"),
    (r"macros do not leak across notebooks: $\R$", r"$\R$", r"Undefined control sequence \R"),
]


def _write(path: Path, markdown: list[str]) -> Path:
    nb = new_notebook()
    for text in markdown:
        nb.cells.append(new_markdown_cell(text))
        nb.cells.append(new_code_cell("x = '$\\\\foo$'  # code cells are not checked"))
    nbformat.write(nb, path)
    return path


def _cell(i: int) -> int:
    return 2 * i  # a code cell follows every markdown cell


@pytest.fixture(scope="module")
def tool_available():
    needs("Node.js", shutil.which("node") is not None, "install Node 20")
    needs(
        "mathjax-full",
        (check_latex.LATEX_DIR / "node_modules" / "mathjax-full").is_dir(),
        check_latex.INSTALL_HINT,
    )


@pytest.fixture(scope="module")
def result(tmp_path_factory, tool_available):
    tmp = tmp_path_factory.mktemp("nbs")
    good = _write(tmp / "01_good.ipynb", GOOD)
    bad = _write(tmp / "02_bad.ipynb", [text for text, _, _ in BAD])
    n_formulas, problems = check_notebooks([good, bad])
    return good, bad, n_formulas, problems


def test_good_formulas_pass(result):
    good, _, n_formulas, problems = result
    assert [p for p in problems if good.name in p.where] == []
    assert n_formulas >= 14


@pytest.mark.parametrize("i", range(len(BAD)), ids=[e for _, _, e in BAD])
def test_each_broken_formula_is_named(result, i):
    _, bad, _, problems = result
    text, formula, error = BAD[i]
    where = f"{bad} cell {_cell(i)}"
    mine = [p for p in problems if p.where == where]
    assert len(mine) == 1, f"{text!r} gave {mine}"
    line = str(mine[0])
    assert line.startswith(f"{where}: ")
    assert formula in line and error in line, line


def test_only_the_broken_formulas_are_reported(result):
    _, bad, _, problems = result
    assert {p.where for p in problems} == {f"{bad} cell {_cell(i)}" for i in range(len(BAD))}


def test_cli_prints_lines_and_summary(tmp_path, capsys, tool_available):
    nb = _write(tmp_path / "03_x.ipynb", ["fine $a$", r"broken $\frac{a}$"])
    assert check_latex.main([str(nb)]) == 1
    out = capsys.readouterr().out.splitlines()
    assert out == [
        rf"{nb} cell 2: $\frac{{a}}$ -> Missing argument for \frac",
        "LaTeX check: 2 formulas in 1 notebooks, 1 broken",
    ]


def test_missing_node_exits_2_with_hint(tmp_path, capsys, monkeypatch):
    nb = _write(tmp_path / "04_x.ipynb", ["$a$"])
    monkeypatch.setattr(check_latex.shutil, "which", lambda _name: None)
    with pytest.raises(LatexToolMissing):
        check_notebooks([nb])
    assert check_latex.main([str(nb)]) == 2
    assert "npm ci --prefix tools/book/latex" in capsys.readouterr().err


def test_problem_format():
    p = Problem("notebooks/03_x.ipynb cell 7", r"$\frac{a}$", r"Missing argument for \frac")
    assert str(p) == r"notebooks/03_x.ipynb cell 7: $\frac{a}$ -> Missing argument for \frac"
