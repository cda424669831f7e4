"""The book's budgets (issue #28): how long each notebook's main line is, and how long it runs.

    python tools/book/budget.py [--check] [--json] [--times FILE] [notebooks...]

One row per notebook (default: the chapters, then the solutions notebooks), with

- the **main line**: markdown cells outside collapsed sections, counted in words of prose, and
  code cells outside them, counted in non-blank lines;
- the **evidence**: the same counts inside collapsed sections;
- the **running time**: the sum of the notebook's cell durations under nbval, read from the
  file that the pytest plugin ``tools/book/nbtimes.py`` writes (``--times``; default
  ``.cache/notebook_times.json``, or ``$BOOK_NOTEBOOK_TIMES``). Without it, or when it cannot
  be read (a warning then), the table says the times are not measured. Its keys are read
  relative to this repository's root, whichever checkout wrote it. A time from a run in which a
  cell failed, or from an entry not known to cover every cell (written by an older plugin or by
  hand), is shown with a ``*`` and a note; it still counts against the budget.

Budgets (the constants below): a chapter's main line holds at most 3,600 words of prose and
650 non-blank lines of code, as chapters 01–08 do, and it runs in at most 5 minutes; a
solutions notebook runs in at most 3 minutes. Solutions notebooks get no word or line budget:
the issue gives them none, and their length follows the chapter's exercises (one checked answer
each), so a cap there would only push answers into fewer, denser cells. Their counts are shown
for information.

By default the tool only prints (many chapters are over budget while the book is being cut
down); ``--check`` exits with status 1 when any notebook exceeds one of its budgets, a running
time included once it has been measured.

What counts (and why):
- A collapsed section starts at a markdown cell whose metadata has JupyterLab's
  ``jp-MarkdownHeadingCollapsed: true`` and runs to the next cell with a heading of the same or a
  higher level (as many or fewer ``#``). A cell's level is its highest heading (fewest ``#``),
  the one JupyterLab folds by. The heading cell belongs to its section, as the issue defines it.
  Headings nested inside a collapsed section (collapsed or not) stay inside it.
- A formula is one word: ``$...$``, ``$$...$$``, ``\\(...\\)``, ``\\[...\\]`` and
  ``\\begin{env}...\\end{env}``. So is an inline code span (``utils.fmt``): it reads as a name.
- Code blocks in markdown count as lines of code (non-blank ones), not as words: fenced ones
  (a fence closes only on a bare fence of its character, at least as long) and indented ones
  (4 spaces, after a blank line, outside lists; see ``markdown_lines``). Their lines are never
  headings, and no code span or formula runs across a blank line.
- Headings are ATX (``#`` to ``######``) or setext (a line underlined with ``===``, level 1, or
  ``---``, level 2).
- Markup is not prose: link targets, images, HTML tags and comments, bare URLs, heading
  marks, emphasis, list bullets and table rules are stripped; link texts and table cells stay.
  A word is a whitespace-separated token with at least one letter or digit in it, so a lone
  dash or a bullet is not one.
- Raw cells count as neither.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

import nbformat

from book import ROOT, all_notebook_paths, is_solutions_notebook

# ---------------------------------------------------------------------------------------------
# the budgets
# ---------------------------------------------------------------------------------------------
CHAPTER_MAX_WORDS = 3_600  # main-line prose of a chapter, a formula counted as one word
CHAPTER_MAX_CODE_LINES = 650  # main-line non-blank code lines of a chapter
CHAPTER_MAX_MINUTES = 5.0  # a chapter's cells, summed, on 2 CPU cores
SOLUTIONS_MAX_MINUTES = 3.0  # a solutions notebook's cells, summed, on 2 CPU cores
# Solutions notebooks: no word or line budget (see the module docstring).
SOLUTIONS_MAX_WORDS: int | None = None
SOLUTIONS_MAX_CODE_LINES: int | None = None

TIMES_ENV = "BOOK_NOTEBOOK_TIMES"  # the same variable the pytest plugin reads
DEFAULT_TIMES = ROOT / ".cache" / "notebook_times.json"

COLLAPSED_KEY = "jp-MarkdownHeadingCollapsed"

# ---------------------------------------------------------------------------------------------
# counting words and lines
# ---------------------------------------------------------------------------------------------
_FENCE_RE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
_HEADING_RE = re.compile(r"^ {0,3}(#{1,6})(?:[ \t]|$)")
_SETEXT_RE = re.compile(r"^ {0,3}(=+|-+)[ \t]*$")  # the underline of a level-1 or -2 heading
_LIST_ITEM_RE = re.compile(r"^ {0,3}(?:[-+*]|\d{1,9}[.)])(?:[ \t]|$)")
# A formula's stand-in: one token of letters, glued to its neighbours as the formula was, so
# "the $x$-axis" stays two words and "$a$ and $b$" three.
_WORD = "\x01formula\x01"
_FORMULA_RES = [
    re.compile(r"\\begin\{([^}]*)\}.*?\\end\{\1\}", re.DOTALL),
    re.compile(r"(?<!\\)\$\$.+?(?<!\\)\$\$", re.DOTALL),
    re.compile(r"\\\[.+?\\\]", re.DOTALL),
    re.compile(r"\\\(.+?\\\)", re.DOTALL),
    # inline, as Jupyter pairs them: any two unescaped single $ with no blank line between
    re.compile(r"(?<!\\)\$(?:[^$\n]|\n(?!\s*\n))+?(?<!\\)\$"),
]
# a code span, like an inline formula, cannot cross a blank line (it would end the paragraph)
_CODE_SPAN_RE = re.compile(r"(`+)(?!`)(?:[^\n]|\n(?!\s*\n))+?(?<!`)\1(?!`)")
_COMMENT_RE = re.compile(r"<!--.*?-->", re.DOTALL)
_IMAGE_RE = re.compile(r"!\[[^\]]*\]\([^)]*\)")
_LINK_RE = re.compile(r"\[([^\]]*)\](?:\([^)]*\)|\[[^\]]*\])")
_LINK_DEF_RE = re.compile(r"^ {0,3}\[[^\]]+\]:\s+\S+.*$", re.MULTILINE)
_URL_RE = re.compile(r"<?\b(?:https?|ftp)://[^\s>)]+>?")
_TAG_RE = re.compile(r"</?[A-Za-z][^>]*>")
_TABLE_RULE_RE = re.compile(r"^\s*\|?\s*:?-{2,}:?\s*(\|\s*:?-{2,}:?\s*)*\|?\s*$", re.MULTILINE)
_HRULE_RE = re.compile(r"^ {0,3}([-*_])(\s*\1){2,}\s*$", re.MULTILINE)
_WORDLIKE_RE = re.compile(r"[^\W_]")  # a letter or a digit, in any script


def _closes_fence(fence: str, line: str) -> bool:
    """Whether `line` closes the block that `fence` opened: the same character, at least as
    many of it, and nothing else on the line (so "```python" or a shorter fence does not)."""
    match = _FENCE_RE.match(line)
    return bool(
        match
        and match.group(1)[0] == fence[0]
        and len(match.group(1)) >= len(fence)
        and not line[match.end() :].strip()
    )


def _indent(line: str) -> int:
    expanded = line.expandtabs(4)
    return len(expanded) - len(expanded.lstrip())


def markdown_lines(markdown: str) -> Iterator[tuple[str, str]]:
    """Each line of a markdown cell with its kind: "prose", "code" (inside a fenced or an
    indented code block) or "fence" (a fence's opening or closing line).

    A fence opens at 0-3 spaces of indentation with three or more backticks or tildes (a
    backtick fence's info string holds no backtick) and closes as `_closes_fence` says, or at the
    end of the cell. An indented code block, kept simple: a line indented by 4 or more spaces
    (a tab counts 4) that follows a blank line or starts the cell, and the indented or blank
    lines after it, unless a list is open; a list opens at a list item (``-``, ``+``, ``*``,
    ``1.``, ``1)``) and closes at an unindented line after a blank line. So the continuation
    paragraphs of a list item stay prose, and so does an indented line inside a paragraph.
    """
    fence: str | None = None  # the opening fence while inside a fenced block
    indented = False  # inside an indented code block
    in_list = False
    after_blank = True  # the start of the cell counts as a blank line before it
    for line in markdown.splitlines():
        if fence is not None:
            if _closes_fence(fence, line):
                fence = None
                yield "fence", line
            else:
                yield "code", line
            continue
        if not line.strip():
            after_blank = True
            yield "prose", line  # a blank line: a paragraph break, whatever surrounds it
            continue
        indent = _indent(line)
        if indent >= 4 and (indented or after_blank) and not in_list:
            indented, after_blank = True, False
            yield "code", line
            continue
        indented = False
        if _LIST_ITEM_RE.match(line):
            in_list = True
        elif after_blank and indent == 0:
            in_list = False
        after_blank = False
        match = _FENCE_RE.match(line)
        if match and (match.group(1)[0] == "~" or "`" not in line[match.end() :]):
            fence = match.group(1)
            yield "fence", line
            continue
        yield "prose", line


def split_fences(markdown: str) -> tuple[str, int]:
    """The markdown without its code blocks (fenced or indented, see `markdown_lines`), and
    their non-blank code lines. A code block leaves a blank line in the prose: it ends a
    paragraph, so no formula or code span reaches across it."""
    prose: list[str] = []
    code_lines = 0
    for kind, line in markdown_lines(markdown):
        if kind == "prose":
            prose.append(line)
        else:
            prose.append("")
            code_lines += kind == "code" and bool(line.strip())
    return "\n".join(prose), code_lines


def prose_text(markdown: str) -> str:
    """The prose of a markdown cell without fences or markup; each formula or code span becomes
    one token."""
    text, _ = split_fences(markdown)
    text = _COMMENT_RE.sub(" ", text)
    text = _CODE_SPAN_RE.sub(_WORD, text)  # before formulas: "`$HOME`" is code, not maths
    for pattern in _FORMULA_RES:
        text = pattern.sub(_WORD, text)
    text = _IMAGE_RE.sub(" ", text)
    text = _LINK_RE.sub(r"\1", text)
    text = _LINK_DEF_RE.sub(" ", text)
    text = _URL_RE.sub(" ", text)
    text = _TAG_RE.sub(" ", text)
    text = _TABLE_RULE_RE.sub(" ", text)
    text = _HRULE_RE.sub(" ", text)
    return text.replace("|", " ")


def count_words(markdown: str) -> int:
    """Words of prose in a markdown cell (a formula or a code span is one word)."""
    return sum(1 for token in prose_text(markdown).split() if _WORDLIKE_RE.search(token))


def count_code_lines(source: str) -> int:
    """Non-blank lines of code."""
    return sum(1 for line in source.splitlines() if line.strip())


def heading_level(markdown: str) -> int | None:
    """The cell's highest heading level (1 for ``#`` or a ``===`` underline, 2 for ``##`` or a
    ``---`` underline), ignoring lines in code blocks; None without a heading.

    A setext underline (``===`` or ``---`` alone on a line) makes a heading of the paragraph line
    right above it, when that line is prose and not a heading, a list item, a quote or a table
    row; after a blank line ``---`` is a rule, not a heading."""
    levels = []
    text_above: str | None = None  # the previous line, if it can be a setext heading's text
    for kind, line in markdown_lines(markdown):
        if kind != "prose":
            text_above = None
            continue
        atx = _HEADING_RE.match(line)
        setext = _SETEXT_RE.match(line)
        if atx:
            levels.append(len(atx.group(1)))
        elif setext and text_above is not None:
            levels.append(1 if setext.group(1)[0] == "=" else 2)
        can_be_text = line.strip() and not (
            atx or setext or _LIST_ITEM_RE.match(line) or line.lstrip()[0] in ">|"
        )
        text_above = line if can_be_text else None
    return min(levels, default=None)


def evidence_sections(cells: list) -> list[range]:
    """The collapsed sections of a notebook, as ranges of cell indices: each starts at a
    markdown cell whose metadata has ``jp-MarkdownHeadingCollapsed: true`` and runs to the next
    cell with a heading of the same or a higher level (or to the end). Headings nested inside a
    collapsed section, collapsed or not, stay inside it. The HTML book folds each of these
    ranges into one collapsed block (``tools/book/build_book.py``)."""
    sections = []
    start: int | None = None
    collapsed_at: int | None = None  # the level of the open collapsed section
    for index, cell in enumerate(cells):
        level = heading_level(cell.source) if cell.cell_type == "markdown" else None
        if level is not None and collapsed_at is not None and level <= collapsed_at:
            sections.append(range(start, index))  # a heading as high as the section's ends it
            start = collapsed_at = None
        if level is not None and collapsed_at is None and cell.metadata.get(COLLAPSED_KEY):
            start, collapsed_at = index, level
    if start is not None:
        sections.append(range(start, len(cells)))
    return sections


def evidence_flags(cells: list) -> list[bool]:
    """For each cell, whether it lies inside a collapsed section (is evidence)."""
    flags = [False] * len(cells)
    for section in evidence_sections(cells):
        for index in section:
            flags[index] = True
    return flags


@dataclass
class Counts:
    """What one notebook holds, on its main line and in its collapsed sections."""

    main_words: int = 0
    main_code_lines: int = 0
    evidence_words: int = 0
    evidence_code_lines: int = 0


def count_notebook(path: Path) -> Counts:
    """Main-line and evidence words of prose and non-blank code lines of one notebook."""
    nb = nbformat.read(path, as_version=4)
    counts = Counts()
    for cell, evidence in zip(nb.cells, evidence_flags(nb.cells), strict=True):
        if cell.cell_type == "markdown":
            words, lines = count_words(cell.source), split_fences(cell.source)[1]
        elif cell.cell_type == "code":
            words, lines = 0, count_code_lines(cell.source)
        else:
            continue
        if evidence:
            counts.evidence_words += words
            counts.evidence_code_lines += lines
        else:
            counts.main_words += words
            counts.main_code_lines += lines
    return counts


# ---------------------------------------------------------------------------------------------
# running times (written by tools/book/nbtimes.py)
# ---------------------------------------------------------------------------------------------
@dataclass
class Timing:
    """One notebook's measured seconds, and what is wrong with the measurement, if anything."""

    seconds: float
    problem: str | None = None  # "failed run" or "partial run"; None for a clean full run


@dataclass
class Times:
    """Measured times per notebook (resolved paths) and how they were measured."""

    seconds: dict[Path, Timing]
    source: Path
    note: str


def timing(entry: dict) -> Timing:
    """An entry of the plugin's JSON as a Timing. A failed run's time is marked, and so is one
    not known to be complete: the plugin writes ``cells`` (cells that ran) equal to
    ``collected`` (cells nbval made) and ``measured``; an entry without them, or with fewer
    cells than collected, came from elsewhere (an older plugin summed whatever ran)."""
    seconds = float(entry["seconds"])
    if entry.get("failed"):
        return Timing(seconds, "failed run")
    complete = (
        "measured" in entry
        and isinstance(entry.get("collected"), int)
        and entry.get("cells") == entry["collected"]
    )
    return Timing(seconds, None if complete else "partial run")


def load_times(path: Path) -> Times | None:
    """The notebook times in ``path`` (the plugin's JSON), or None if there is no such file or
    it cannot be read (a warning on stderr then: the times count as not measured).

    The keys are notebook paths relative to the repository root (pytest's rootdir when the
    plugin wrote them), resolved against this repository's ROOT, not the stored ``rootdir``: a
    file written in another checkout (or copied from a machine that timed the notebooks) names
    this checkout's notebooks."""
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text())
        seconds = {
            (ROOT / key).resolve(): timing(entry)
            for key, entry in data.get("notebooks", {}).items()
        }
    except (OSError, UnicodeDecodeError, ValueError, TypeError, KeyError, AttributeError) as error:
        print(
            f"budget.py: warning: cannot read the notebook times in {path} "
            f"({type(error).__name__}: {error}); the times count as not measured",
            file=sys.stderr,
        )
        return None
    note = f"measured {data.get('written', '?')}, {data.get('workers', '?')} worker(s)"
    return Times(seconds=seconds, source=path, note=note)


# ---------------------------------------------------------------------------------------------
# the table
# ---------------------------------------------------------------------------------------------
@dataclass
class Row:
    """One notebook's counts, time and the budgets it exceeds."""

    notebook: str
    kind: str  # "chapter" or "solutions"
    counts: Counts
    minutes: float | None  # None: not measured
    over: list[str]
    time_problem: str | None = None  # "failed run" or "partial run": the time is marked


def budgets(kind: str) -> tuple[int | None, int | None, float]:
    """(max words, max code lines, max minutes) for a notebook of this kind."""
    if kind == "chapter":
        return CHAPTER_MAX_WORDS, CHAPTER_MAX_CODE_LINES, CHAPTER_MAX_MINUTES
    return SOLUTIONS_MAX_WORDS, SOLUTIONS_MAX_CODE_LINES, SOLUTIONS_MAX_MINUTES


def make_row(path: Path, times: Times | None) -> Row:
    """Count one notebook and compare it with its budgets."""
    kind = "solutions" if is_solutions_notebook(path) else "chapter"
    counts = count_notebook(path)
    measured = times.seconds.get(path.resolve()) if times else None
    minutes = None if measured is None else measured.seconds / 60
    max_words, max_lines, max_minutes = budgets(kind)
    over = []
    if max_words is not None and counts.main_words > max_words:
        over.append(f"words>{max_words:,}")
    if max_lines is not None and counts.main_code_lines > max_lines:
        over.append(f"lines>{max_lines}")
    if minutes is not None and minutes > max_minutes:
        over.append(f"time>{max_minutes:g}min")
    problem = None if measured is None else measured.problem
    return Row(_display_name(path), kind, counts, minutes, over, problem)


def _display_name(path: Path) -> str:
    try:
        return path.resolve().relative_to(ROOT / "notebooks").as_posix()
    except ValueError:
        return path.name


def format_table(rows: list[Row], times: Times | None) -> str:
    """The table, with a header that says the budgets and where the times came from."""
    name_width = max([len("notebook"), *(len(row.notebook) for row in rows)])
    header = (
        f"{'notebook':<{name_width}}  {'words':>6}  {'lines':>5}  "
        f"{'ev.words':>8}  {'ev.lines':>8}  {'min':>5}  over budget"
    )
    lines = [
        f"Budgets: a chapter's main line <= {CHAPTER_MAX_WORDS:,} words and "
        f"{CHAPTER_MAX_CODE_LINES} code lines, <= {CHAPTER_MAX_MINUTES:g} min; a solutions "
        f"notebook <= {SOLUTIONS_MAX_MINUTES:g} min (no word or line budget).",
        "words, lines: main line; ev.: inside collapsed sections (evidence); "
        "min: the notebook's cells summed under nbval; a * marks the time of a failed or "
        "partial run (see the note after the row).",
        (
            f"Times: {times.source} ({times.note})."
            if times
            else "Times: not measured (run pytest with -p nbtimes to write "
            f"{_relative(DEFAULT_TIMES)})."
        ),
        "",
        header,
        "-" * len(header),
    ]
    for row in rows:
        c = row.counts
        minutes = "-" if row.minutes is None else f"{row.minutes:.1f}"
        notes = list(row.over)
        if row.time_problem and row.minutes is not None:
            minutes += "*"
            notes.append(f"(time of a {row.time_problem})")
        lines.append(
            f"{row.notebook:<{name_width}}  {c.main_words:>6,}  {c.main_code_lines:>5}  "
            f"{c.evidence_words:>8,}  {c.evidence_code_lines:>8}  {minutes:>5}  "
            f"{', '.join(notes)}".rstrip()
        )
    over = sum(1 for row in rows if row.over)
    lines += ["", f"{over} of {len(rows)} notebooks over a budget."]
    return "\n".join(lines)


def _relative(path: Path) -> str:
    try:
        return path.relative_to(ROOT).as_posix()
    except ValueError:
        return str(path)


def main(argv: list[str] | None = None) -> int:
    """Print the table (or JSON); with --check, exit 1 when a notebook is over a budget."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("notebooks", nargs="*", type=Path, help="default: every notebook")
    parser.add_argument("--check", action="store_true", help="exit 1 when over a budget")
    parser.add_argument("--json", action="store_true", help="print JSON instead of the table")
    parser.add_argument(
        "--times",
        type=Path,
        default=Path(os.environ.get(TIMES_ENV, DEFAULT_TIMES)),
        help=f"the notebook times (default: ${TIMES_ENV} or {_relative(DEFAULT_TIMES)})",
    )
    args = parser.parse_args(argv)
    times = load_times(args.times)
    rows = [make_row(path, times) for path in args.notebooks or all_notebook_paths()]
    if args.json:
        report = {
            "budgets": {
                kind: dict(zip(["words", "code_lines", "minutes"], budgets(kind), strict=True))
                for kind in ("chapter", "solutions")
            },
            "times": None if times is None else {"file": str(times.source), "note": times.note},
            "notebooks": [asdict(row) for row in rows],
        }
        print(json.dumps(report, indent=1))
    else:
        print(format_table(rows, times))
    return 1 if args.check and any(row.over for row in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
