"""The budgets tool (tools/book/budget.py) and the notebook timer (tools/book/nbtimes.py) count
what the issue says they count, on small synthetic notebooks."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook, new_output

import budget
from book import ROOT


def write_notebook(path: Path, cells: list) -> Path:
    """A notebook with these cells at `path` (folders made as needed)."""
    nb = new_notebook(cells=cells)
    nb.metadata["kernelspec"] = {
        "name": "python3",
        "display_name": "Python 3",
        "language": "python",
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, path)
    return path


def collapsed(source: str):
    """A markdown heading cell folded in JupyterLab."""
    cell = new_markdown_cell(source)
    cell.metadata[budget.COLLAPSED_KEY] = True
    return cell


# ---------------------------------------------------------------------------------------------
# words and lines
# ---------------------------------------------------------------------------------------------
def test_a_formula_counts_as_one_word():
    assert budget.count_words("The map $f(x) = x^2 + 1$ is smooth.") == 5
    assert budget.count_words("the $x$-axis, and $a$ and $b$") == 6
    display = (
        "Hence\n\n$$\n\\operatorname{softmax}(z)_i = \\frac{e^{z_i}}{\\sum_k e^{z_k}}\n$$\n\nends."
    )
    assert budget.count_words(display) == 3
    aligned = "So \\begin{align} a &= b + c \\\\ d &= e \\end{align} holds."
    assert budget.count_words(aligned) == 3
    assert budget.count_words("costs \\$5 and \\$6") == 4  # escaped dollars are not maths


def test_markup_links_and_code_spans_are_not_words():
    text = (
        "## 2. [The docs](https://example.com/a/b) and <b>bold</b> ![a plot](fig.png)\n"
        "- **one** `utils.attention.scaled_dot_product_attention(q, k, v)`\n"
        "| a | b |\n|---|:--:|\n| c | d |\n\nSee https://example.com/x <!-- a note -->\n"
    )
    # 2. The docs and bold / one <code> / a b c d / See
    assert budget.count_words(text) == 12


def test_code_fences_in_markdown_are_code_lines_not_words():
    markdown = "Run this:\n\n```bash\npip install -e .\n\n# a comment line\n```\n\nthen read."
    assert budget.count_words(markdown) == 4
    assert budget.split_fences(markdown)[1] == 2
    # a '#' line inside a fence is not a heading
    assert budget.heading_level("Text\n```\n# not a heading\n```") is None
    assert budget.heading_level("Intro\n### Three\n## Two") == 2


def test_a_code_span_does_not_cross_a_blank_line():
    # a stray backtick once made one span up to the next backtick, two paragraphs on
    assert budget.count_words("one `unclosed code\n\nnext para with `x` here") == 8
    assert budget.count_words("a `span\nover two lines` ends") == 3  # one line break is fine


def test_a_fence_closes_only_on_a_bare_fence_at_least_as_long(tmp_path):
    nested = "Example:\n\n````markdown\n```python\n# a comment\n```\n````\n\nAfter."
    info = "```\nx = 1\n```python\n# a comment\n```"
    for markdown in (nested, info):
        assert budget.heading_level(markdown) is None
    assert budget.split_fences(nested)[1] == 3
    assert budget.split_fences(info)[1] == 3
    assert budget.count_words(nested) == 2
    # the false close once ended a collapsed section at the comment
    cells = [collapsed("## Evidence"), new_markdown_cell(nested), new_code_cell("a = 1")]
    flags = budget.evidence_flags(
        nbformat.read(write_notebook(tmp_path / "n.ipynb", cells), 4).cells
    )
    assert flags == [True, True, True]


def test_setext_headings_and_indented_code():
    assert budget.heading_level("Title\n=====\n\ntext") == 1
    assert budget.heading_level("A subtitle\n---\n\n### Three") == 2
    assert budget.heading_level("text\n\n---\n") is None  # a rule after a blank line
    assert budget.heading_level("- a list item\n---") is None
    assert budget.heading_level("| a | b |\n---") is None
    # indented code: after a blank line (or first in the cell), outside lists
    indented = "Run:\n\n    x = 1\n    # not a heading\n\n    y = 2\nback to prose"
    assert budget.split_fences(indented)[1] == 3
    assert budget.heading_level(indented) is None
    assert budget.count_words(indented) == 4
    assert budget.split_fences("    first = 1")[1] == 1
    # a list item's continuation paragraph and a paragraph's indented line stay prose
    prose = "- item\n\n    continued here\n\nText\n    indented continuation"
    assert budget.split_fences(prose)[1] == 0
    assert budget.count_words(prose) == 6


def test_blank_lines_are_not_code_lines(tmp_path):
    code = "a = 1\n\n   \n# a comment is a line\nb = 2\n\n"
    assert budget.count_code_lines(code) == 3
    nb = write_notebook(tmp_path / "01_x.ipynb", [new_code_cell(code), new_code_cell("\n\n")])
    assert budget.count_notebook(nb).main_code_lines == 3


# ---------------------------------------------------------------------------------------------
# collapsed sections
# ---------------------------------------------------------------------------------------------
def test_collapsed_sections_are_evidence_and_nested_headings_stay_inside(tmp_path):
    nb = write_notebook(
        tmp_path / "01_x.ipynb",
        [
            new_markdown_cell("# Title\n\nOne two three."),  # main: 4 words
            new_code_cell("x = 1"),  # main: 1 line
            collapsed("## Evidence\n\nFour five."),  # evidence: 3 words
            new_code_cell("y = 2\nz = 3"),  # evidence: 2 lines
            new_markdown_cell("### Inside, not folded\n\nSix."),  # evidence: 4 words
            new_code_cell("w = 4"),  # evidence: 1 line
            collapsed("### Folded inside folded"),  # evidence: 3 words
            new_code_cell("v = 5"),  # evidence: 1 line
            new_markdown_cell("## Back on the main line"),  # main: 5 words
            new_code_cell("u = 6\nt = 7"),  # main: 2 lines
        ],
    )
    flags = budget.evidence_flags(nbformat.read(nb, as_version=4).cells)
    assert flags == [False, False, True, True, True, True, True, True, False, False]
    assert budget.count_notebook(nb) == budget.Counts(
        main_words=9, main_code_lines=3, evidence_words=10, evidence_code_lines=4
    )


def test_a_collapsed_section_ends_at_a_heading_as_high_as_its_own(tmp_path):
    cells = [
        collapsed("### Deep"),
        new_code_cell("a = 1"),
        new_markdown_cell("#### Deeper"),  # lower level: still inside
        new_code_cell("b = 2"),
        new_markdown_cell("## Higher"),  # fewer '#': ends the section
        new_code_cell("c = 3"),
        collapsed("## Folded"),
        new_code_cell("d = 4"),
        new_markdown_cell("## Same level"),  # as many '#': ends it
        new_code_cell("e = 5"),
        new_markdown_cell("Plain text without a heading."),
    ]
    flags = budget.evidence_flags(
        nbformat.read(write_notebook(tmp_path / "n.ipynb", cells), 4).cells
    )
    assert flags == [True, True, True, True, False, False, True, True, False, False, False]


def test_the_collapsed_flag_on_a_cell_without_heading_folds_nothing(tmp_path):
    cells = [collapsed("No heading here."), new_code_cell("a = 1")]
    flags = budget.evidence_flags(
        nbformat.read(write_notebook(tmp_path / "n.ipynb", cells), 4).cells
    )
    assert flags == [False, False]


# ---------------------------------------------------------------------------------------------
# budgets, flags and exit codes
# ---------------------------------------------------------------------------------------------
def long_chapter(path: Path, words: int, lines: int, folded_words: int = 0) -> Path:
    """A chapter with `words` main-line words, `lines` main-line code lines, and a collapsed
    section of `folded_words` more words."""
    cells = [new_markdown_cell(" ".join(["word"] * words)), new_code_cell("x = 1\n" * lines)]
    if folded_words:
        cells += [collapsed("## Evidence"), new_markdown_cell(" ".join(["more"] * folded_words))]
    return write_notebook(path, cells)


def run_budget(capsys: pytest.CaptureFixture, *args: str) -> tuple[int, str]:
    """budget.py's exit status and output, run in this process (a subprocess costs seconds)."""
    status = budget.main(list(args))
    return status, capsys.readouterr().out


def test_over_budget_is_flagged_and_check_exits_1(tmp_path, capsys):
    over = long_chapter(tmp_path / "01_long.ipynb", budget.CHAPTER_MAX_WORDS + 1, 10)
    within = long_chapter(
        tmp_path / "02_short.ipynb", budget.CHAPTER_MAX_WORDS - 2, budget.CHAPTER_MAX_CODE_LINES
    )
    # evidence does not count against the budget
    folded = long_chapter(tmp_path / "03_folded.ipynb", 10, 10, budget.CHAPTER_MAX_WORDS * 2)
    no_times = ["--times", str(tmp_path / "none.json")]

    status, printed = run_budget(capsys, *no_times, str(over), str(within), str(folded))
    assert status == 0  # without --check it only prints
    rows = {line.split()[0]: line for line in printed.splitlines() if ".ipynb" in line}
    assert f"words>{budget.CHAPTER_MAX_WORDS:,}" in rows["01_long.ipynb"]
    assert "words>" not in rows["02_short.ipynb"] and "lines>" not in rows["02_short.ipynb"]
    assert "words>" not in rows["03_folded.ipynb"]
    assert "Times: not measured" in printed

    assert run_budget(capsys, "--check", *no_times, str(within), str(folded))[0] == 0
    many_lines = long_chapter(tmp_path / "04_code.ipynb", 10, budget.CHAPTER_MAX_CODE_LINES + 1)
    assert budget.make_row(many_lines, None).over == [f"lines>{budget.CHAPTER_MAX_CODE_LINES}"]
    # the script itself, as the test command would run it: the exit status is 1
    script = subprocess.run(
        [
            sys.executable,
            str(ROOT / "tools" / "book" / "budget.py"),
            "--check",
            *no_times,
            str(over),
        ],
        capture_output=True,
        text=True,
    )
    assert script.returncode == 1, script.stderr
    assert f"words>{budget.CHAPTER_MAX_WORDS:,}" in script.stdout


def entry(seconds: float, **fields) -> dict:
    """A times entry as the plugin writes it for a notebook whose two cells all ran."""
    return {"seconds": seconds, "cells": 2, "collected": 2, "failed": False,
            "measured": "2026-01-01T00:00:00+00:00", **fields}  # fmt: skip


def test_times_budgets_chapters_5_min_solutions_3_and_solutions_have_no_word_budget(
    tmp_path, capsys, monkeypatch
):
    monkeypatch.setattr(budget, "ROOT", tmp_path)  # the keys are read relative to the root
    chapter = long_chapter(tmp_path / "01_x.ipynb", 10, 1)
    slow_chapter = long_chapter(tmp_path / "02_x.ipynb", 10, 1)
    solutions = long_chapter(
        tmp_path / "solutions" / "01_x_solutions.ipynb", budget.CHAPTER_MAX_WORDS + 100, 1
    )
    times_file = tmp_path / "times.json"
    times_file.write_text(
        json.dumps(
            {
                "rootdir": str(tmp_path),
                "notebooks": {
                    "01_x.ipynb": entry(4 * 60),  # under 5 minutes
                    "02_x.ipynb": entry(6 * 60),
                    "solutions/01_x_solutions.ipynb": entry(4 * 60),  # over 3 minutes
                },
            }
        )
    )
    times = budget.load_times(times_file)
    assert budget.make_row(chapter, times).over == []
    assert budget.make_row(slow_chapter, times).over == ["time>5min"]
    row = budget.make_row(solutions, times)
    assert (row.kind, row.over, row.minutes) == ("solutions", ["time>3min"], 4.0)
    assert row.time_problem is None

    report = json.loads(run_budget(capsys, "--json", "--times", str(times_file), str(solutions))[1])
    assert report["notebooks"][0]["over"] == ["time>3min"]
    assert report["budgets"]["solutions"]["words"] is None
    assert run_budget(capsys, "--check", "--times", str(times_file), str(chapter))[0] == 0
    assert run_budget(capsys, "--check", "--times", str(times_file), str(slow_chapter))[0] == 1


def test_failed_and_partial_times_are_marked(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(budget, "ROOT", tmp_path)
    paths = [long_chapter(tmp_path / f"0{i}_x.ipynb", 10, 1) for i in range(1, 5)]
    times_file = tmp_path / "times.json"
    notebooks = {
        "01_x.ipynb": entry(60),
        "02_x.ipynb": entry(60, failed=True),
        "03_x.ipynb": entry(60, cells=1),  # one of two cells ran
        "04_x.ipynb": {"seconds": 60},  # an older plugin's entry: completeness unknown
    }
    times_file.write_text(json.dumps({"notebooks": notebooks}))
    times = budget.load_times(times_file)
    problems = [budget.make_row(path, times).time_problem for path in paths]
    assert problems == [None, "failed run", "partial run", "partial run"]
    printed = run_budget(capsys, "--times", str(times_file), *map(str, paths))[1]
    rows = {line.split()[0]: line for line in printed.splitlines() if ".ipynb" in line}
    assert "1.0*" not in rows["01_x.ipynb"] and "1.0" in rows["01_x.ipynb"]
    assert "1.0*" in rows["02_x.ipynb"] and "(time of a failed run)" in rows["02_x.ipynb"]
    assert "1.0*" in rows["03_x.ipynb"] and "(time of a partial run)" in rows["03_x.ipynb"]
    assert "1.0*" in rows["04_x.ipynb"]


def test_times_from_another_checkout_and_a_corrupt_file(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(budget, "ROOT", tmp_path)
    chapter = long_chapter(tmp_path / "notebooks" / "01_x.ipynb", 10, 1)
    times_file = tmp_path / "times.json"
    # written by pytest in another checkout: its rootdir is not this one
    times_file.write_text(
        json.dumps(
            {"rootdir": "/elsewhere/checkout", "notebooks": {"notebooks/01_x.ipynb": entry(90)}}
        )
    )
    assert budget.make_row(chapter, budget.load_times(times_file)).minutes == 1.5

    for broken in ('{"notebooks": {"notebooks/01_x.ip', '{"notebooks": {"a.ipynb": {}}}', "[1]"):
        times_file.write_text(broken)
        assert budget.load_times(times_file) is None
        assert "cannot read the notebook times" in capsys.readouterr().err
    status, printed = run_budget(capsys, "--check", "--times", str(times_file), str(chapter))
    assert status == 0 and "Times: not measured" in printed


# ---------------------------------------------------------------------------------------------
# the pytest plugin
# ---------------------------------------------------------------------------------------------
def test_notebook_of_a_node_id():
    import nbtimes

    assert nbtimes.notebook_of("notebooks/03_attention.ipynb::Cell 4") == (
        "notebooks/03_attention.ipynb"
    )
    assert nbtimes.notebook_of("tests/test_budget.py::test_x") is None


def timed_notebooks(folder: Path) -> list[Path]:
    """Two notebooks that nbval passes, the second slower (it sleeps)."""
    paths = []
    for name, sleep in [("fast", 0.0), ("slow", 0.3)]:
        cells = [
            new_code_cell(f"import time\ntime.sleep({sleep})", execution_count=1),
            new_code_cell(
                "print(2)",
                execution_count=2,
                outputs=[new_output("stream", name="stdout", text="2\n")],
            ),
        ]
        paths.append(write_notebook(folder / f"{name}.ipynb", cells))
    (folder / "pytest.ini").write_text("[pytest]\n")  # keeps the book's settings out
    return paths


def run_nbval(folder: Path, *args: str) -> subprocess.CompletedProcess:
    """pytest with nbval and the plugin (loaded by name from tools/book) inside `folder`."""
    env = {**os.environ, "PYTHONPATH": str(ROOT / "tools" / "book")}
    env.pop(budget.TIMES_ENV, None)
    command = [sys.executable, "-m", "pytest", "-p", "nbtimes", "-p", "no:cacheprovider"]
    return subprocess.run(
        [*command, "--nbval", *args], capture_output=True, text=True, cwd=folder, env=env
    )


def test_the_plugin_prints_the_slowest_and_merges_its_json(tmp_path, monkeypatch):
    fast, slow = timed_notebooks(tmp_path)
    first = run_nbval(tmp_path, fast.name)
    assert first.returncode == 0, first.stdout + first.stderr
    assert "slowest 1 notebooks" in first.stdout
    second = run_nbval(tmp_path, slow.name)
    assert second.returncode == 0, second.stdout + second.stderr

    data = json.loads((tmp_path / ".cache" / "notebook_times.json").read_text())
    entries = data["notebooks"]
    assert set(entries) == {"fast.ipynb", "slow.ipynb"}  # the second run kept the first's
    assert entries["slow.ipynb"]["cells"] == entries["fast.ipynb"]["cells"] == 2
    assert entries["slow.ipynb"]["seconds"] > 0  # a duration was recorded
    assert entries["slow.ipynb"]["collected"] == 2 and not entries["slow.ipynb"]["failed"]
    monkeypatch.setattr(budget, "ROOT", tmp_path)
    times = budget.load_times(tmp_path / ".cache" / "notebook_times.json")
    assert times is not None
    assert times.seconds[slow.resolve()] == budget.Timing(entries["slow.ipynb"]["seconds"])


def failing_notebook(folder: Path) -> Path:
    """A notebook whose first cell fails under nbval (its output differs), of two cells."""
    cells = [
        new_code_cell(
            "print(1)", execution_count=1, outputs=[new_output("stream", name="stdout", text="0\n")]
        ),
        new_code_cell("x = 1", execution_count=2),
    ]
    return write_notebook(folder / "bad.ipynb", cells)


def test_the_plugin_writes_only_notebooks_whose_cells_all_ran(tmp_path):
    fast, slow = timed_notebooks(tmp_path)
    bad = failing_notebook(tmp_path)
    times_file = tmp_path / ".cache" / "notebook_times.json"
    # one cell of `slow` picked by its node id: a partial sum, not written
    run = run_nbval(tmp_path, fast.name, f"{slow.name}::Cell 0")
    assert run.returncode == 0, run.stdout + run.stderr
    assert "partial: 1 of 2 cells ran, not written" in run.stdout
    assert set(json.loads(times_file.read_text())["notebooks"]) == {"fast.ipynb"}
    # -x stops after the failing cell: not written; without -x it is written, marked failed
    run = run_nbval(tmp_path, "-x", bad.name)
    assert run.returncode == 1
    assert set(json.loads(times_file.read_text())["notebooks"]) == {"fast.ipynb"}
    run = run_nbval(tmp_path, bad.name)
    assert run.returncode == 1
    written = json.loads(times_file.read_text())["notebooks"]["bad.ipynb"]
    assert (written["failed"], written["cells"], written["collected"]) == (True, 2, 2)


@pytest.mark.slow
def test_the_plugin_records_under_xdist_loadscope(tmp_path):
    fast, slow = timed_notebooks(tmp_path)
    out = tmp_path / "elsewhere.json"
    run = run_nbval(
        tmp_path, "-n", "2", "--dist", "loadscope", "--nbtimes-file", str(out), fast.name, slow.name
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert "slowest 2 notebooks" in run.stdout
    data = json.loads(out.read_text())
    assert data["workers"] == 2
    assert {k: v["cells"] for k, v in data["notebooks"].items()} == {
        "fast.ipynb": 2,
        "slow.ipynb": 2,
    }
    assert data["notebooks"]["slow.ipynb"]["seconds"] > 0  # a duration was recorded
    # the workers collect, and the controller learns from them that a cell was deselected
    run = run_nbval(
        tmp_path, "-n", "2", "--dist", "loadscope", "--nbtimes-file", str(out),
        "--deselect", f"{slow.name}::Cell 1", fast.name, slow.name,
    )  # fmt: skip
    assert run.returncode == 0, run.stdout + run.stderr
    assert "partial: 1 of 2 cells ran, not written" in run.stdout
    again = json.loads(out.read_text())["notebooks"]
    assert again["slow.ipynb"] == data["notebooks"]["slow.ipynb"]  # the full run's entry stays
    assert again["fast.ipynb"]["cells"] == again["fast.ipynb"]["collected"] == 2
