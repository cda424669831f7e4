"""Every exercise has a worked, checked solution, linked both ways (issue #18).

For each chapter with a ``## Exercises`` heading, `solutions.check_pair` compares its numbered
exercises with the ``## Exercise N`` sections of ``notebooks/solutions/<chapter>_solutions.ipynb``
(count, order, anchors, links both ways, an ``assert`` in every answer); the format is in
``tools/book/solutions.py``. The checker itself is tested first, on a synthetic chapter and
solutions notebook: the pair passes, and each way of breaking it is named.

`solutions.check_quotes` (issue #28) compares each section's ``>`` quote with the chapter's
exercise as it stands, after whitespace normalisation (the rule is in ``solutions.py``), for
every chapter.
"""

from pathlib import Path

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

from book import all_notebook_paths, notebook_paths, setup_cell, solution_paths
from check_notebooks import check_notebook
from check_notebooks import main as check_notebooks_main
from solutions import (
    NOT_CHECKED,
    chapter_path,
    check_exercises,
    check_pair,
    check_quotes,
    exercise_body,
    exercises,
    has_assert,
    quoted,
    read_cells,
    sections,
    solutions_path,
)

# ---------------------------------------------------------------------------------------------
# A synthetic pair: chapter 07 with three exercises, and its solutions.

STEM = "07_toy"


def chapter_exercises_cell(n: int = 3) -> str:
    items = "".join(
        f'{i}. <a id="exercise-{i}"></a>Exercise number {i}, over two\n'
        f"   lines. *Hint: think of {i}.*\n"
        f"   [Solution](solutions/{STEM}_solutions.ipynb#exercise-{i})\n"
        for i in range(1, n + 1)
    )
    return f"## Summary\n\n- A point.\n\n## Exercises\n\n{items}\n## References\n\n1. A book.\n"


def section_cell(i: int) -> str:
    return (
        f'<a id="exercise-{i}"></a>\n\n## Exercise {i} · Number {i}\n\n'
        f"> Exercise number {i}, over two lines.\n\n"
        f"[Back to exercise {i}]({f'../{STEM}.ipynb#exercise-{i}'})"
    )


def chapter_cells(n: int = 3) -> list:
    return [
        new_markdown_cell("# 07 · A toy chapter\n\nIt derives things."),
        new_code_cell(setup_cell()),
        new_markdown_cell(chapter_exercises_cell(n)),
    ]


def solution_cells(n: int = 3) -> list:
    cells = [
        new_markdown_cell(
            "# Solutions to 07 · A toy chapter\n\nTry each exercise first.\n\n"
            f"[Back to the chapter](../{STEM}.ipynb)"
        ),
        new_code_cell(setup_cell()),
    ]
    for i in range(1, n + 1):
        cells += [
            new_markdown_cell(section_cell(i)),
            new_markdown_cell(f"The derivation of {i}."),
            new_code_cell(f"value = {i}\nassert value == {i}, value"),
        ]
    return cells


def write(path: Path, cells: list) -> Path:
    nb = new_notebook(cells=cells)
    nb.metadata["kernelspec"] = {
        "name": "python3",
        "display_name": "Python 3",
        "language": "python",
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, path)
    return path


def pair(tmp_path, chapter=None, solutions=None) -> tuple[Path, Path]:
    chapter_file = write(tmp_path / "notebooks" / f"{STEM}.ipynb", chapter or chapter_cells())
    solutions_file = tmp_path / "notebooks" / "solutions" / f"{STEM}_solutions.ipynb"
    write(solutions_file, solutions or solution_cells())
    return chapter_file, solutions_file


def test_the_paths_of_a_chapter_and_its_solutions_map_both_ways(tmp_path):
    chapter = tmp_path / "notebooks" / "03_attention.ipynb"
    assert solutions_path(chapter) == (
        tmp_path / "notebooks" / "solutions" / "03_attention_solutions.ipynb"
    )
    assert chapter_path(solutions_path(chapter)) == chapter


def test_a_matching_pair_passes(tmp_path):
    chapter, solutions = pair(tmp_path)
    assert [e.number for e in exercises(read_cells(chapter))] == [1, 2, 3]
    assert check_pair(chapter) == []
    assert check_exercises([chapter, solutions]) == []


def test_a_chapter_without_exercises_needs_no_solutions(tmp_path):
    cells = chapter_cells()[:2]
    chapter = write(tmp_path / "notebooks" / f"{STEM}.ipynb", cells)
    assert exercises(read_cells(chapter)) is None
    assert check_pair(chapter) == []
    write(solutions_path(chapter), solution_cells())  # ... and must have none
    assert any("has no '## Exercises' heading" in p for p in check_pair(chapter))


def test_missing_solutions_notebook_fails(tmp_path):
    chapter = write(tmp_path / "notebooks" / f"{STEM}.ipynb", chapter_cells())
    (problem,) = check_pair(chapter)
    assert f"solutions/{STEM}_solutions.ipynb: missing" in problem
    assert "3 exercises" in problem


def test_solutions_without_a_chapter_fail(tmp_path):
    orphan = write(tmp_path / "notebooks" / "solutions" / "09_x_solutions.ipynb", solution_cells())
    (problem,) = check_exercises([orphan])
    assert "no chapter" in problem and "09_x.ipynb" in problem


def _replace(cells, index, old, new):
    assert old in cells[index].source, (old, cells[index].source)
    cells[index].source = cells[index].source.replace(old, new)
    return cells


# (what is broken, how: (chapter cells, solutions cells) -> None, the expected problem)
BREAKAGES = {
    "one solution fewer than exercises": (
        lambda ch, so: so.__delitem__(slice(-3, None)),
        "2 '## Exercise N' sections for the chapter's 3 exercises",
    ),
    "exercises numbered out of order": (
        lambda ch, so: _replace(ch, 2, "2. <a", "4. <a"),
        "exercises are numbered [1, 4, 3], expected 1..3",
    ),
    "a chapter exercise without its anchor": (
        lambda ch, so: _replace(ch, 2, '<a id="exercise-2"></a>', ""),
        'exercise 2 does not start with its anchor <a id="exercise-2"></a>',
    ),
    "a chapter exercise whose anchor has the wrong number": (
        lambda ch, so: _replace(ch, 2, 'id="exercise-3"', 'id="exercise-2"'),
        'exercise 3 does not start with its anchor <a id="exercise-3"></a>',
    ),
    "a chapter exercise without its Solution link": (
        lambda ch, so: _replace(
            ch, 2, f"[Solution](solutions/{STEM}_solutions.ipynb#exercise-1)", ""
        ),
        f"exercise 1 has no link [Solution](solutions/{STEM}_solutions.ipynb#exercise-1)",
    ),
    "a Solution link to the wrong exercise": (
        lambda ch, so: _replace(
            ch, 2, "_solutions.ipynb#exercise-3", "_solutions.ipynb#exercise-2"
        ),
        "exercise 3 has no link",
    ),
    "a Solution link before the hint": (
        lambda ch, so: _replace(
            ch,
            2,
            "   lines. *Hint: think of 2.*\n"
            f"   [Solution](solutions/{STEM}_solutions.ipynb#exercise-2)\n",
            f"   [Solution](solutions/{STEM}_solutions.ipynb#exercise-2)\n"
            "   lines. *Hint: think of 2.*\n",
        ),
        "exercise 2: the Solution link comes before the hint",
    ),
    "solutions titled differently from the chapter": (
        lambda ch, so: _replace(so, 0, "# Solutions to 07 · A toy chapter", "# Answers"),
        "the first line should be '# Solutions to 07 · A toy chapter', is '# Answers'",
    ),
    "no link back to the chapter": (
        lambda ch, so: _replace(so, 0, f"[Back to the chapter](../{STEM}.ipynb)", ""),
        f"cell 0: no link [Back to the chapter](../{STEM}.ipynb)",
    ),
    "a section without its anchor": (
        lambda ch, so: _replace(so, 5, '<a id="exercise-2"></a>\n\n', ""),
        'cell 5: exercise 2: the cell should start with <a id="exercise-2"></a>',
    ),
    "an anchor in a cell of its own": (
        lambda ch, so: so.insert(5, new_markdown_cell(so.pop(5).source.split("\n\n", 1)[1])),
        'exercise 2: the cell should start with <a id="exercise-2"></a>',
    ),
    "a heading without its title": (
        lambda ch, so: _replace(so, 5, "## Exercise 2 · Number 2", "## Exercise 2"),
        "exercise 2: the heading should read '## Exercise 2 · <title>'",
    ),
    "sections numbered out of order": (
        lambda ch, so: (
            _replace(so, 5, "exercise-2", "exercise-3"),
            _replace(so, 5, "## Exercise 2", "## Exercise 3"),
        ),
        "sections are numbered [1, 3, 3], expected 1..3",
    ),
    "a section that does not restate its exercise": (
        lambda ch, so: _replace(so, 8, "> Exercise number 3", "Exercise number 3"),
        "exercise 3: no restatement of the exercise",
    ),
    "a section without its back link": (
        lambda ch, so: _replace(so, 2, f"[Back to exercise 1](../{STEM}.ipynb#exercise-1)", ""),
        f"exercise 1: no link [Back to exercise 1](../{STEM}.ipynb#exercise-1)",
    ),
    "a back link to the wrong exercise": (
        lambda ch, so: _replace(so, 5, "ipynb#exercise-2)", "ipynb#exercise-1)"),
        "exercise 2: no link [Back to exercise 2]",
    ),
    "an answer without an assert": (
        lambda ch, so: _replace(so, 7, "assert value == 2, value", "print(value)"),
        "exercise 2: no code cell with an assert before the next section",
    ),
    "an assert that is only a comment or a string": (
        lambda ch, so: _replace(so, 7, "assert value == 2, value", "# assert value\ns = 'assert'"),
        "exercise 2: no code cell with an assert",
    ),
    "an assert in the next section does not count for this one": (
        lambda ch, so: (so.pop(7), so.insert(9, new_code_cell("assert True"))),
        "exercise 2: no code cell with an assert",
    ),
    "a conceptual answer whose marker gives no reason": (
        lambda ch, so: so.__setitem__(7, new_markdown_cell(f"{NOT_CHECKED} none.")),
        f"exercise 2: {NOT_CHECKED!r} needs a reason",
    ),
    "a path relative to the working directory": (
        lambda ch, so: _replace(so, 4, "value = 1", "value = len(open('../data/x.txt').read())"),
        'cell 4: "\'../" depends on the working directory',
    ),
}


@pytest.mark.parametrize("breakage", list(BREAKAGES))
def test_each_way_of_breaking_the_pair_is_named(tmp_path, breakage):
    chapter, solutions = chapter_cells(), solution_cells()
    change, expected = BREAKAGES[breakage]
    change(chapter, solutions)
    chapter_file, _ = pair(tmp_path, chapter, solutions)
    problems = check_pair(chapter_file)
    assert any(expected in p for p in problems), "\n".join(problems) or "no problem found"


def test_the_quote_is_the_exercise_without_anchor_title_hint_and_link(tmp_path):
    chapter, solutions = pair(tmp_path)
    assert check_quotes(chapter) == []
    (first, *_) = exercises(read_cells(chapter))
    assert exercise_body(first) == "Exercise number 1, over two lines."
    assert quoted(sections(read_cells(solutions))[0]) == "Exercise number 1, over two lines."


# (what changes, how: (chapter cells, solutions cells) -> None); the quote still matches
QUOTE_MATCHES = {
    "the quote wrapped elsewhere": lambda ch, so: _replace(
        so, 5, "> Exercise number 2, over two lines.", "> Exercise number\n> 2, over two  lines."
    ),
    "a leading bold title, which the heading carries": lambda ch, so: _replace(
        ch, 2, '<a id="exercise-2"></a>Exercise', '<a id="exercise-2"></a>**Number 2.** Exercise'
    ),
    "a bold word inside the text, quoted": lambda ch, so: (
        _replace(ch, 2, "Exercise number 2, over", "Exercise **number** 2, over"),
        _replace(so, 5, "Exercise number 2, over", "Exercise **number** 2, over"),
    ),
}


@pytest.mark.parametrize("change", list(QUOTE_MATCHES))
def test_a_quote_in_step_passes(tmp_path, change):
    chapter, solutions = chapter_cells(), solution_cells()
    QUOTE_MATCHES[change](chapter, solutions)
    chapter_file, _ = pair(tmp_path, chapter, solutions)
    assert check_quotes(chapter_file) == []


# (what drifted, how, the expected problem)
QUOTE_DRIFTS = {
    "the chapter's exercise reworded, the quote not": (
        lambda ch, so: _replace(
            ch, 2, "Exercise number 2, over two", "Exercise number 2, over three"
        ),
        "exercise 2: the quote differs from the chapter's text",
    ),
    "the quote shortened": (
        lambda ch, so: _replace(so, 8, "number 3, over two lines.", "number 3."),
        "exercise 3: the quote differs",
    ),
    "a bold title kept in the quote": (
        lambda ch, so: _replace(so, 2, "> Exercise number 1", "> **Number 1.** Exercise number 1"),
        "exercise 1: the quote differs",
    ),
    "the hint quoted too": (
        lambda ch, so: _replace(so, 5, "over two lines.", "over two lines. *Hint: think of 2.*"),
        "exercise 2: the quote differs",
    ),
    "a changed punctuation mark": (
        lambda ch, so: _replace(so, 2, "over two lines.", "over two lines"),
        "exercise 1: the quote differs",
    ),
}


@pytest.mark.parametrize("drift", list(QUOTE_DRIFTS))
def test_each_way_a_quote_drifts_is_named(tmp_path, drift):
    chapter, solutions = chapter_cells(), solution_cells()
    change, expected = QUOTE_DRIFTS[drift]
    change(chapter, solutions)
    chapter_file, _ = pair(tmp_path, chapter, solutions)
    problems = check_quotes(chapter_file)
    assert any(expected in p for p in problems), "\n".join(problems) or "no problem found"
    assert check_pair(chapter_file) == problems  # the format is fine: the pair check says so


def test_a_conceptual_answer_with_a_reason_passes(tmp_path):
    solutions = solution_cells()
    solutions[7] = new_markdown_cell(
        f"{NOT_CHECKED} the question asks for an opinion on notation, which no run decides."
    )
    chapter_file, _ = pair(tmp_path, solutions=solutions)
    assert check_pair(chapter_file) == []


@pytest.mark.parametrize(
    ("code", "found"),
    [
        ("assert x == 1", True),
        ("if ok:\n    assert y, 'why'", True),
        ("x = 1; assert x", True),
        ("%time f()\nassert f() == 2", True),  # IPython magics do not hide it
        ("# assert x\nprint('assert')", False),
        ('"""\nassert x\n"""', False),
        ("assertion = 3", False),
        ("assert (x ==\n", True),  # does not tokenize: read line by line
    ],
)
def test_has_assert_finds_the_statement_only(code, found):
    assert has_assert(code) == found


def test_check_notebooks_applies_the_hygiene_and_the_pair_check_to_solutions(tmp_path, capsys):
    solutions = solution_cells()
    solutions[1].source = "import utils"  # not the setup cell
    _, solutions_file = pair(tmp_path, solutions=solutions)
    hygiene = check_notebook(solutions_file)
    assert any("not the book's setup cell" in p for p in hygiene)
    assert any("execution counts are" in p for p in hygiene)  # never executed
    assert check_notebooks_main([str(solutions_file)]) == 1
    out = capsys.readouterr().out
    assert "not the book's setup cell" in out
    # the pair check runs from a solutions path alone; the chapter is found beside it
    _replace(solutions, 2, "## Exercise 1 · Number 1", "## Exercise 1")
    write(solutions_file, solutions)
    assert check_notebooks_main([str(solutions_file)]) == 1
    assert "exercise 1: the heading should read" in capsys.readouterr().out


# ---------------------------------------------------------------------------------------------
# The book itself.

CHAPTERS_WITH_EXERCISES = [p for p in notebook_paths() if exercises(read_cells(p)) is not None]


def test_solutions_come_after_the_chapters_in_reading_order():
    assert all_notebook_paths() == notebook_paths() + solution_paths()
    assert solution_paths() == sorted(solution_paths())
    assert CHAPTERS_WITH_EXERCISES, "no chapter has a '## Exercises' heading"


@pytest.mark.parametrize("chapter", CHAPTERS_WITH_EXERCISES, ids=lambda p: p.stem)
def test_every_exercise_has_a_checked_solution_linked_both_ways(chapter):
    assert check_pair(chapter) == []


def test_every_solutions_notebook_answers_a_chapter_with_exercises():
    orphans = [s.name for s in solution_paths() if chapter_path(s) not in CHAPTERS_WITH_EXERCISES]
    assert orphans == []


@pytest.mark.parametrize("chapter", CHAPTERS_WITH_EXERCISES, ids=lambda p: p.stem)
def test_every_solution_quotes_its_exercise_as_the_chapter_states_it(chapter):
    assert check_quotes(chapter) == []
