"""A chapter's exercises and its worked solutions: the format, and the check that they match.

Every chapter ``notebooks/NN_name.ipynb`` whose markdown has a ``## Exercises`` heading has a
solutions notebook ``notebooks/solutions/NN_name_solutions.ipynb`` (issue #18), linked both ways:

- in the chapter, the numbered items under ``## Exercises`` (up to the next heading) are the
  exercises; item N starts with its anchor and ends with the link to its solution, after the
  hint, so a reader tries first::

      N. <a id="exercise-N"></a>The exercise ... *Hint: ...*
         [Solution](solutions/NN_name_solutions.ipynb#exercise-N)

- the solutions notebook opens with a markdown cell ``# Solutions to NN · <chapter title>``
  that links ``[Back to the chapter](../NN_name.ipynb)``; then the setup cell; then, for each
  exercise N in order, a markdown cell that starts with the anchor, a blank line and the
  heading, restates the exercise as a ``>`` quote and links back::

      <a id="exercise-N"></a>

      ## Exercise N · <short title>

      > The exercise, restated.

      [Back to exercise N](../NN_name.ipynb#exercise-N)

  and, before the next such cell, the answer, which ends in at least one code cell with an
  ``assert`` (a derivation checked against autograd or a count, a prediction against the run).
  An answer that no code can check (rare: a purely conceptual question) says why instead, in a
  markdown cell of its section that starts with ``**Not checked by code:**`` and a reason.

- the quote is the exercise as the chapter states it now, word for word (issue #28): `quoted`
  (the ``>`` lines of the section cell, their ``>`` markers removed) equals `exercise_body`
  (the chapter's item without its anchor, without a leading bold title such as
  ``**No mask.**``, which the heading carries instead, and without the hint and the Solution
  link, from the first ``*Hint`` on), both after `normalise_whitespace` (every run of
  whitespace, line breaks included, becomes one space; the ends are stripped). So rewrapping a
  line or moving the quote's line breaks passes; any changed word, symbol or punctuation mark
  fails. `check_quotes` reports each exercise whose quote differs, with the first words that
  differ; `check_pair` runs it once the pair is otherwise whole, so `check_notebooks.py`
  enforces it.

The same relative links work in Jupyter, on GitHub and in the HTML book (``build_book.py``
resolves them to the pages and their anchors; ``check_book.py`` checks them in the browser).

`check_pair` returns every way a chapter and its solutions notebook break these rules;
`check_exercises` does it for a set of notebooks (the chapters and solutions among them).
``tests/test_solutions.py`` runs it over the book, and ``check_notebooks.py`` with the hygiene.
"""

from __future__ import annotations

import io
import json
import re
import tokenize
from dataclasses import dataclass
from pathlib import Path

from book import ROOT, is_solutions_notebook

EXERCISES_HEADING = re.compile(r"^## Exercises[ \t]*$", re.MULTILINE)
ANY_HEADING = re.compile(r"^#{1,6}[ \t]", re.MULTILINE)
ITEM = re.compile(r"^(\d+)\.[ \t]+", re.MULTILINE)  # a top-level numbered item
SECTION_HEADING = re.compile(r"^## Exercise[ \t]+(\d+)\b", re.MULTILINE)
CHAPTER_TITLE = re.compile(r"^# (\d\d) · (.+?)\s*$")
NOT_CHECKED = "**Not checked by code:**"
NOT_CHECKED_MIN_REASON = 20  # characters: a reason, not a shrug
# Code that depends on the kernel's working directory: execute_notebooks.py starts every
# kernel in notebooks/, nbval in the notebook's own folder (notebooks/solutions/).
CWD_DEPENDENT = re.compile(r"os\.chdir\(|os\.getcwd\(|Path\.cwd\(|[\"'](?:\.\.?/)")


def anchor(n: int) -> str:
    """The raw-HTML anchor of exercise ``n``, in the chapter and in the solutions."""
    return f'<a id="exercise-{n}"></a>'


def solutions_path(chapter: Path) -> Path:
    """Where the solutions of ``notebooks/NN_name.ipynb`` live."""
    return chapter.parent / "solutions" / f"{chapter.stem}_solutions.ipynb"


def chapter_path(solutions: Path) -> Path:
    """The chapter that ``notebooks/solutions/NN_name_solutions.ipynb`` answers."""
    return solutions.parent.parent / (solutions.name.removesuffix("_solutions.ipynb") + ".ipynb")


def solution_link(stem: str, n: int) -> str:
    """The chapter's link to the solution of exercise ``n`` (relative to the chapter)."""
    return f"[Solution](solutions/{stem}_solutions.ipynb#exercise-{n})"


def back_link(stem: str, n: int) -> str:
    """The solution's link back to exercise ``n`` (relative to the solutions notebook)."""
    return f"[Back to exercise {n}](../{stem}.ipynb#exercise-{n})"


@dataclass(frozen=True)
class Cell:
    index: int
    kind: str  # "markdown", "code", "raw"
    source: str


def read_cells(path: Path) -> list[Cell]:
    """The notebook's cells, sources joined. Raises ValueError if it is not a notebook."""
    try:
        nb = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise ValueError(f"not a readable notebook ({exc})") from None
    if not isinstance(nb, dict) or not isinstance(nb.get("cells"), list):
        raise ValueError("not a notebook (expected a JSON object with a list of cells)")
    cells = []
    for index, cell in enumerate(nb["cells"]):
        source = cell.get("source", "") if isinstance(cell, dict) else ""
        source = "".join(source) if isinstance(source, list) else str(source)
        kind = cell.get("cell_type", "") if isinstance(cell, dict) else ""
        cells.append(Cell(index, kind, source))
    return cells


@dataclass(frozen=True)
class Exercise:
    number: int  # as written in the item ("3." -> 3)
    text: str  # the item, its continuation lines included
    cell: int  # index of the markdown cell that holds it


def exercises(cells: list[Cell]) -> list[Exercise] | None:
    """The numbered items under the first ``## Exercises`` heading, up to the next heading.

    None if no markdown cell has that heading (the chapter has no exercises).
    """
    for cell in cells:
        if cell.kind != "markdown" or not (heading := EXERCISES_HEADING.search(cell.source)):
            continue
        region = cell.source[heading.end() :]
        if end := ANY_HEADING.search(region):
            region = region[: end.start()]
        starts = list(ITEM.finditer(region))
        return [
            Exercise(
                int(m.group(1)),
                region[m.end() : nxt.start() if nxt else len(region)].strip(),
                cell.index,
            )
            for m, nxt in zip(starts, [*starts[1:], None], strict=True)
        ]
    return None


@dataclass(frozen=True)
class Section:
    number: int  # from its heading "## Exercise N"
    cell: Cell  # the markdown cell with the anchor and the heading
    answer: list[Cell]  # the cells after it, up to the next section


def sections(cells: list[Cell]) -> list[Section]:
    """The ``## Exercise N`` sections of a solutions notebook, in order."""
    starts = [
        (i, int(m.group(1)))
        for i, c in enumerate(cells)
        if c.kind == "markdown" and (m := SECTION_HEADING.search(c.source))
    ]
    return [
        Section(n, cells[i], cells[i + 1 : nxt])
        for (i, n), nxt in zip(starts, [s[0] for s in starts[1:]] + [len(cells)], strict=True)
    ]


def has_assert(code: str) -> bool:
    """Whether the code holds an ``assert`` statement (in a comment or a string it does not)."""
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(code).readline))
    except (tokenize.TokenError, IndentationError, SyntaxError):
        lines = (line.split("#", 1)[0] for line in code.splitlines())
        return any(re.match(r"\s*assert\b", line) for line in lines)
    return any(t.type == tokenize.NAME and t.string == "assert" for t in tokens)


def _not_checked_reason(cell: Cell) -> str | None:
    text = cell.source.strip()
    return text.removeprefix(NOT_CHECKED).strip() if text.startswith(NOT_CHECKED) else None


def _display(path: Path) -> str:
    try:
        return path.resolve().relative_to(ROOT).as_posix()
    except ValueError:
        return str(path)


def _chapter_title(cells: list[Cell]) -> tuple[str, str] | None:
    """(NN, title) from the chapter's first line ``# NN · Title``."""
    first = next((c for c in cells if c.kind == "markdown"), None)
    line = first.source.strip().splitlines()[0] if first and first.source.strip() else ""
    match = CHAPTER_TITLE.match(line)
    return (match.group(1), match.group(2)) if match else None


def _chapter_problems(chapter: Path, items: list[Exercise]) -> list[str]:
    name, stem = _display(chapter), chapter.stem
    problems = []
    if not items:
        problems.append(f"{name}: has a '## Exercises' heading but no numbered items under it")
    numbers = [e.number for e in items]
    if numbers != list(range(1, len(items) + 1)):
        problems.append(f"{name}: exercises are numbered {numbers}, expected 1..{len(items)}")
    for n, item in enumerate(items, start=1):
        where = f"{name}: cell {item.cell}: exercise {n}"
        if not item.text.startswith(anchor(n)):
            problems.append(f"{where} does not start with its anchor {anchor(n)}")
        link = solution_link(stem, n)
        if link not in item.text:
            problems.append(f"{where} has no link {link}")
        elif "Hint" in item.text and item.text.index(link) < item.text.index("Hint"):
            problems.append(f"{where}: the Solution link comes before the hint (put it after)")
    return problems


def _solutions_problems(
    chapter: Path, chapter_cells: list[Cell], items: list[Exercise], path: Path
) -> list[str]:
    name, stem = _display(path), chapter.stem
    try:
        cells = read_cells(path)
    except ValueError as exc:
        return [f"{name}: {exc}"]
    problems = []
    first = cells[0] if cells else Cell(0, "", "")
    title = _chapter_title(chapter_cells)
    want = f"# Solutions to {title[0]} · {title[1]}" if title else "# Solutions to "
    first_line = first.source.strip().splitlines()[0] if first.source.strip() else ""
    titled = first_line == want if title else first_line.startswith(want)
    if first.kind != "markdown" or not titled:
        problems.append(f"{name}: cell 0: the first line should be {want!r}, is {first_line!r}")
    if f"[Back to the chapter](../{stem}.ipynb)" not in first.source:
        problems.append(f"{name}: cell 0: no link [Back to the chapter](../{stem}.ipynb)")

    found = sections(cells)
    if len(found) != len(items):
        problems.append(
            f"{name}: {len(found)} '## Exercise N' sections for the chapter's {len(items)} "
            f"exercises ({_display(chapter)})"
        )
    numbers = [s.number for s in found]
    if numbers != list(range(1, len(found) + 1)):
        problems.append(f"{name}: sections are numbered {numbers}, expected 1..{len(found)}")
    for n, section in enumerate(found, start=1):
        cell, where = section.cell, f"{name}: cell {section.cell.index}: exercise {n}"
        if not cell.source.startswith(anchor(n) + "\n\n## Exercise "):
            problems.append(
                f"{where}: the cell should start with {anchor(n)}, a blank line, then "
                f"'## Exercise {n} · <title>'"
            )
        elif not re.match(rf"## Exercise {n} · \S", cell.source.split("\n", 3)[2]):
            problems.append(f"{where}: the heading should read '## Exercise {n} · <title>'")
        if not re.search(r"^>[ \t]*\S", cell.source, re.MULTILINE):
            problems.append(f"{where}: no restatement of the exercise (a '>' quote)")
        if back_link(stem, n) not in cell.source:
            problems.append(f"{where}: no link {back_link(stem, n)}")
        asserted = any(c.kind == "code" and has_assert(c.source) for c in section.answer)
        reasons = [r for c in section.answer if (r := _not_checked_reason(c)) is not None]
        if not asserted and not reasons:
            problems.append(
                f"{where}: no code cell with an assert before the next section (an answer no "
                f"code can check says why in a cell starting {NOT_CHECKED!r})"
            )
        elif not asserted and all(len(r) < NOT_CHECKED_MIN_REASON for r in reasons):
            problems.append(f"{where}: {NOT_CHECKED!r} needs a reason (a sentence)")
    for cell in cells[2:]:  # the setup cell is the same everywhere (and may chdir in Colab)
        if cell.kind == "code" and (m := CWD_DEPENDENT.search(cell.source)):
            problems.append(
                f"{name}: cell {cell.index}: {m.group(0)!r} depends on the working directory "
                "(execute_notebooks.py runs it in notebooks/, nbval in notebooks/solutions/); "
                "build paths from ROOT"
            )
    return problems


HINT_START = "*Hint"
LEADING_TITLE = re.compile(r"\*\*[^*\n]+\*\*[ \t]*")  # "**No mask.** " at the item's start


def normalise_whitespace(text: str) -> str:
    """Every run of whitespace (line breaks included) as one space, the ends stripped."""
    return " ".join(text.split())


def exercise_body(item: Exercise) -> str:
    """What a solution quotes of ``item``: its text without the anchor, a leading bold title,
    the hint and the Solution link (all from the first ``*Hint`` on), whitespace normalised."""
    text = item.text.removeprefix(anchor(item.number)).lstrip()
    if title := LEADING_TITLE.match(text):
        text = text[title.end() :]
    text = text.split(HINT_START, 1)[0]
    text = re.sub(r"\[Solution\]\([^)]*\)", "", text)
    return normalise_whitespace(text)


def quoted(section: Section) -> str:
    """The ``>`` quote of a solutions section, markers removed, whitespace normalised."""
    lines = section.cell.source.splitlines()
    return normalise_whitespace(" ".join(line[1:] for line in lines if line.startswith(">")))


def _first_difference(a: str, b: str, width: int = 60) -> tuple[str, str]:
    """The two texts from a little before the first character where they differ."""
    i = next((k for k, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))
    start = max(0, i - 20)
    return a[start : start + width], b[start : start + width]


def check_quotes(chapter: Path, solutions: Path | None = None) -> list[str]:
    """Each exercise of ``chapter`` whose solution's ``>`` quote is not its text as it stands.

    Compares `quoted` (section N) with `exercise_body` (exercise N) for every N both have;
    counts, anchors and links are `check_pair`'s business. [] for a chapter without exercises
    or without its solutions notebook.
    """
    solutions = solutions or solutions_path(chapter)
    try:
        items = exercises(read_cells(chapter))
        found = sections(read_cells(solutions)) if solutions.is_file() else []
    except ValueError as exc:
        return [f"{_display(chapter)}: {exc}"]
    problems = []
    for item, section in zip(items or [], found, strict=False):
        want, have = exercise_body(item), quoted(section)
        if want != have:
            w, h = _first_difference(want, have)
            problems.append(
                f"{_display(solutions)}: cell {section.cell.index}: exercise {item.number}: the "
                f"quote differs from the chapter's text (cell {item.cell}): the chapter has "
                f"{w!r}, the quote {h!r}"
            )
    return problems


def check_pair(chapter: Path, solutions: Path | None = None) -> list[str]:
    """Every way ``chapter`` and its solutions notebook break the format above.

    ``solutions`` defaults to `solutions_path` (chapter). A chapter without a ``## Exercises``
    heading needs no solutions, and must have none.
    """
    solutions = solutions or solutions_path(chapter)
    try:
        chapter_cells = read_cells(chapter)
    except ValueError as exc:
        return [f"{_display(chapter)}: {exc}"]
    items = exercises(chapter_cells)
    if items is None:
        if solutions.exists():
            return [
                f"{_display(solutions)}: its chapter {_display(chapter)} has no '## Exercises' "
                "heading"
            ]
        return []
    problems = _chapter_problems(chapter, items)
    if not solutions.is_file():
        problems.append(
            f"{_display(solutions)}: missing (the solutions of the {len(items)} exercises of "
            f"{_display(chapter)})"
        )
        return problems
    problems += _solutions_problems(chapter, chapter_cells, items, solutions)
    return problems or check_quotes(chapter, solutions)  # quotes once the pair is whole


def check_exercises(paths: list[Path]) -> list[str]:
    """`check_pair` for each chapter and each solutions notebook among ``paths``, once a pair.

    A solutions notebook whose chapter does not exist is a problem.
    """
    problems: list[str] = []
    chapters: list[Path] = []
    for path in map(Path, paths):
        chapter = chapter_path(path) if is_solutions_notebook(path) else path
        if not chapter.is_file():
            problems.append(f"{_display(path)}: no chapter {_display(chapter)} for these solutions")
        elif chapter.resolve() not in {c.resolve() for c in chapters}:
            chapters.append(chapter)
    for chapter in chapters:
        problems += check_pair(chapter)
    return problems
