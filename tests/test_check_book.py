"""The browser check of the HTML book fails on each planted fault, and passes a clean page.

A tiny site is written into a temporary folder: clean pages, and one page per fault (a broken
formula, raw TeX, an image that does not load, a figure of the notebook missing from its page,
dead internal links, a JavaScript error, a request outside the site, an evidence section that
is not a closed block which a click opens, showing its figures and formulas), and chapters with
exercises beside their solutions pages (one pair linked both ways, one broken in every way).
Chromium opens it once. Without Chromium the browser tests skip, except under CI=true, where
that is a failure. A small Sphinx build shows that the notebooks' exercise links become links
to the right page and anchor.
"""

import importlib.util
import json
import shutil
import struct
import zlib

import nbformat
import pytest
from conftest import needs
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook, new_output

import build_book
from book import REPO_URL
from check_book import BrowserMissing, check_site, expected_figures, find_chromium, main

MATHJAX = build_book.MATHJAX_ES5
MATHJAX_CONFIG = {"tex": {"packages": ["base", "ams", "newcommand"], **build_book.TEX_OPTIONS}}


@pytest.fixture(scope="module")
def chromium():
    try:
        path = find_chromium()
    except BrowserMissing:
        path = None
    needs("chromium", path is not None, "apt-get install chromium")
    needs(
        "playwright",
        importlib.util.find_spec("playwright") is not None,
        "pip install -r requirements-book.txt",
    )
    needs(
        "mathjax-full",
        (MATHJAX / build_book.MATHJAX_BUNDLE).is_file(),
        "npm ci --prefix tools/book/latex",
    )
    return path


def png(width: int = 4, height: int = 3) -> bytes:
    """A tiny valid grey PNG."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return (
            struct.pack(">I", len(data))
            + kind
            + data
            + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)
        )

    rows = b"".join(b"\x00" + b"\x80" * width for _ in range(height))
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0))
        + chunk(b"IDAT", zlib.compress(rows))
        + chunk(b"IEND", b"")
    )


def page(
    body: str,
    notebook: str | None = None,
    mathjax: str = f"_mathjax/{build_book.MATHJAX_BUNDLE}",
    up: str = "",
) -> str:
    """A page of the fixture site; ``up`` leads from its folder to the site's root ("../")."""
    links = ""
    mathjax = up + mathjax
    if notebook:  # what the book theme puts in a notebook page's header
        links = (
            f'<a href="{REPO_URL.replace("https://github.com", "https://colab.research.google.com/github")}'
            f'/blob/main/{notebook}">Colab</a> <a href="{up}_sources/{notebook}">.ipynb</a>'
        )
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>fixture</title>
<script>window.MathJax = {json.dumps(MATHJAX_CONFIG)};</script>
<script defer src="{mathjax}"></script>
</head><body><nav>{links}</nav><article>{body}</article></body></html>
"""


CLEAN = """
<section id="start"><h1>A clean page</h1>
<p>Inline <span class="math notranslate nohighlight">\\(x^2 + \\frac{a}{b}\\)</span> and</p>
<div class="math notranslate nohighlight">
\\[\\begin{aligned} y &amp;= \\sum_i x_i \\end{aligned}\\]</div>
<p>Code may hold dollars: <code>$HOME</code>, <code>$x$</code>.</p>
<pre>echo "$PATH costs $5"</pre>
<img src="figure.png" alt="a figure">
<p><a href="good.html">a page</a>, <a href="good.html#target">an anchor</a>,
<a href="#start">this page</a>, <a href="https://example.org/">outside (not requested)</a></p>
</section>
"""

GOOD = """
<section id="target"><h1>Target</h1>
<div class="math notranslate nohighlight">\\[ z = 1 \\]</div>
<div class="cell"><div class="cell_input"><pre>plot()</pre></div>
<div class="cell_output"><img src="figure.png" alt="output"></div></div>
</section>
"""


def evidence_body(attrs: str = "", style: str = "", script: str = "") -> str:
    """A page with one evidence section folded as the book folds it: a closed <details> whose
    summary is the heading, holding a formula and a code cell with a figure."""
    return (
        f"{style}{script}"
        '<section id="e"><span id="Evidence:-a-control"></span>'
        f'<details class="evidence"{attrs}><summary><h2>Evidence: a control</h2></summary>'
        '<p>Inline <span class="math notranslate nohighlight">\\(x^2\\)</span>.</p>'
        '<div class="cell"><div class="cell_input"><pre>plot()</pre></div>'
        '<div class="cell_output"><img src="figure.png" alt="control"></div></div>'
        "</details></section>"
    )


EVIDENCE_TITLE = 'evidence block 0 ("Evidence: a control")'
FAULTS = {
    # page name: (body, the problem's expected element, the expected message)
    "broken_formula": (
        '<section id="s"><h2>Maths</h2><p>Broken: <span class="math notranslate nohighlight">'
        '\\(x^2^3\\)</span> and <span class="math notranslate nohighlight">'
        "\\(\\notamacro{1}\\)</span></p></section>",
        ['formula "x^2^3"', 'formula "\\notamacro{1}"'],
        ["MathJax error: Double exponent", "MathJax error: Undefined control sequence"],
    ),
    "raw_tex": (  # maths that neither MyST nor MathJax's finder can take
        '<section id="s"><h2>Raw</h2><p id="inline">A brace never closed: $\\frac{1}{2$.</p>'
        '<p id="env">\\begin{align} a &amp;= b, and no end</p></section>',
        ['<p#inline> in section "Raw"', '<p#env> in section "Raw"'],
        ['raw "$...$"', 'raw "\\begin{...}"'],
    ),
    "mathjax_missing": (  # a wrong path to MathJax: every formula stays raw
        '<p id="f">Inline <span class="math notranslate nohighlight">\\(x^2\\)</span>.</p>',
        ["MathJax", "resource file://", '<span.math.notranslate> in page: "\\(x^2\\)"'],
        [
            "did not typeset the page (not loaded)",
            "failed to load: net::ERR_FILE_NOT_FOUND",
            'raw "\\(" or "\\[" delimiters',
        ],
    ),
    "missing_image": (
        '<p><img id="gone" src="images/nothere.png" alt="lost"></p>',
        ["image 'images/nothere.png'", "resource file://"],
        ["did not load (naturalWidth == 0)", "failed to load: net::ERR_FILE_NOT_FOUND"],
    ),
    "missing_figure": (
        GOOD,  # the notebook (below) has two figures in that cell; the page shows one
        ["code cell 1 ('plot()')"],
        ["the notebook has 2 figure(s) in its outputs, the page shows 1"],
    ),
    "dead_link": (
        '<p><a id="a1" href="nowhere.html">gone</a> <a id="a2" href="good.html#no-such-anchor">'
        "moved</a></p>",
        ["link 'nowhere.html' (<a#a1>", "link 'good.html#no-such-anchor' (<a#a2>"],
        [
            "points to a missing page: nowhere.html",
            "points to anchor #no-such-anchor, which good.html does not have",
        ],
    ),
    "js_error": (
        "<p>Hi</p><script>window.noSuchFunction();</script>"
        "<script>console.error('planted failure');</script>",
        ["script file://", "console"],
        [
            "JavaScript error: TypeError: window.noSuchFunction is not a function",
            "JavaScript logged an error: planted failure",
        ],
    ),
    "wide_code": (  # cells 2 and 3 need a sideways scroll; the folded cell 0 does not count
        "<style>pre { overflow-x: auto; width: 300px; font: 12px monospace; }</style>"
        '<div class="cell"><details><summary>Show code cell source</summary>'
        '<div class="cell_input"><pre>' + "f" * 200 + "</pre></div></details></div>"
        '<div class="cell"><div class="cell_input"><pre>short = 1</pre></div></div>'
        '<div class="cell"><div class="cell_input"><pre>wide = "' + "x" * 100 + '"</pre></div>'
        "</div>"
        '<div class="cell"><div class="cell_input"><pre>show()</pre></div>'
        '<div class="cell_output"><pre>' + "y " * 100 + "</pre></div></div>",
        ["code cell 2 ('wide = ", "code cell 3 ('show()'), output"],
        ["needs horizontal scrolling in a 1280 px window", "needs horizontal scrolling"],
    ),
    "evidence_open": (  # open on load
        evidence_body(attrs=" open"),
        [EVIDENCE_TITLE],
        ["is open on load (it should be collapsed)"],
    ),
    "evidence_missing": (  # the notebook's collapsed section rendered as plain sections
        '<section id="e"><h2>Evidence: a control</h2><div class="cell"><div class="cell_input">'
        '<pre>plot()</pre></div><div class="cell_output"><img src="figure.png"></div></div>'
        "</section>",
        ["article"],
        ["the notebook has 1 evidence section(s), the page shows 0 collapsed block(s)"],
    ),
    "evidence_stuck": (  # a click on the heading does not open it
        evidence_body(
            script="<script>document.addEventListener('click', (e) => {"
            "if (e.target.closest('summary')) e.preventDefault(); }, true);</script>"
        ),
        [EVIDENCE_TITLE],
        ["does not open when its heading is clicked"],
    ),
    "evidence_hidden_figure": (  # opens, but its figure stays hidden
        evidence_body(style="<style>details.evidence img { display: none; }</style>"),
        [f"{EVIDENCE_TITLE}: image 'figure.png'"],
        ["not shown once opened"],
    ),
    "evidence_few_figures": (  # the notebook's section has two figures, the block one
        evidence_body(),
        [EVIDENCE_TITLE],
        ["the notebook's section has 2 figure(s), the opened block shows 1"],
    ),
    "evidence_hidden_maths": (  # opens, but its formula does not show
        evidence_body(style="<style>details.evidence mjx-container { display: none; }</style>"),
        [f'{EVIDENCE_TITLE}: formula "'],
        ["not typeset and shown once opened"],
    ),
    "external": (
        '<p>Hi</p><script src="http://127.0.0.1:9/tex-chtml.js"></script>',
        ["request to http://127.0.0.1:9/tex-chtml.js"],
        ["asks for something outside the site"],
    ),
}


def exercise_items(numbers) -> str:
    return "## Exercises\n\n" + "".join(f"{n}. Exercise {n}.\n" for n in numbers)


def solution_sections(numbers) -> list:
    return [new_markdown_cell(f"## Exercise {n} · Title {n}") for n in numbers]


def chapter_page(stem: str, anchors, links) -> str:
    """A chapter's page: anchors for the exercises ``anchors``, Solution links for ``links``."""
    items = []
    for n in sorted({*anchors, *links}):
        anchor = f'<a id="exercise-{n}"></a>' if n in anchors else ""
        link = f'<a href="solutions/{stem}_solutions.html#exercise-{n}">Solution</a>'
        items.append(f"<li>{anchor}Exercise {n}. {link if n in links else ''}</li>")
    return f'<section id="exercises"><h2>Exercises</h2><ol>{"".join(items)}</ol></section>'


def solutions_page(stem: str, anchors, links) -> str:
    """A solutions page: anchors for the sections ``anchors``, back links for ``links``."""
    return "".join(
        (f'<a id="exercise-{n}"></a>' if n in anchors else "")
        + f'<section id="exercise-{n}-title-{n}"><h2>Exercise {n} · Title {n}</h2>'
        + (
            f'<p><a href="../{stem}.html#exercise-{n}">Back to exercise {n}</a></p>'
            if n in links
            else ""
        )
        + "</section>"
        for n in sorted({*anchors, *links})
    )


# chapter stem: (its page, its solutions page or None, [(page, element, message)] expected)
EXERCISE_PAIRS = {
    "ch_good": (  # two exercises, linked both ways
        chapter_page("ch_good", {1, 2}, {1, 2}),
        solutions_page("ch_good", {1, 2}, {1, 2}),
        [],
    ),
    "ch_bad": (
        # exercise 1 has no Solution link; 3 has no anchor; the solution of 2 has no anchor
        chapter_page("ch_bad", {1, 2}, {2, 3}),
        # section 1 has no back link; 2 no anchor; 3 links back to a chapter anchor not there
        solutions_page("ch_bad", {1, 3}, {2, 3}),
        [
            ("ch_bad.html", "exercise 1", "no link to its solution, solutions/ch_bad_solutions"),
            (
                "ch_bad.html",
                "exercise 2",
                "the link to its solution goes to solutions/ch_bad_solutions.html#exercise-2, "
                "but that page has no id exercise-2",
            ),
            ("ch_bad.html", "exercise 3", "the page has no element with id exercise-3"),
            (
                "solutions/ch_bad_solutions.html",
                "exercise 1",
                "no link back to the exercise, ch_bad.html#exercise-1",
            ),
            (
                "solutions/ch_bad_solutions.html",
                "exercise 2",
                "the page has no element with id exercise-2",
            ),
            (
                "solutions/ch_bad_solutions.html",
                "exercise 3",
                "the link back to the exercise goes to ch_bad.html#exercise-3, but that page has "
                "no id exercise-3",
            ),
        ],
    ),
    "ch_orphan": (  # an exercise whose solutions page was never built
        chapter_page("ch_orphan", {1}, {1}),
        None,
        [
            (
                "ch_orphan.html",
                "exercise 1",
                "the link to its solution goes to a missing page, "
                "solutions/ch_orphan_solutions.html#exercise-1",
            )
        ],
    ),
}
EXERCISE_COUNTS = {"ch_good": 2, "ch_bad": 3, "ch_orphan": 1}  # in each chapter's notebook
EXERCISE_FAULT_PAGES = {page for _, _, found in EXERCISE_PAIRS.values() for page, _, _ in found}


def notebook_with_figures(n_figures: int):
    figure = new_output(
        "display_data", data={"image/png": "iVBORw0KGgo=", "text/plain": "<Figure>"}
    )
    cell = new_code_cell("plot()", execution_count=1, outputs=[figure] * n_figures)
    return new_notebook(cells=[new_markdown_cell("# Fixture"), cell])


def notebook_with_evidence(n_figures: int = 1):
    """A notebook whose one collapsed section holds a code cell with ``n_figures`` figures."""
    nb = notebook_with_figures(n_figures)
    heading = new_markdown_cell("## Evidence: a control")
    heading.metadata["jp-MarkdownHeadingCollapsed"] = True
    nb.cells.insert(1, heading)
    return nb


@pytest.fixture(scope="module")
def fixture_site(tmp_path_factory):
    site = tmp_path_factory.mktemp("site")
    (site / "_mathjax").mkdir()
    shutil.copy(MATHJAX / build_book.MATHJAX_BUNDLE, site / "_mathjax")
    shutil.copytree(MATHJAX / "output" / "chtml" / "fonts", site / "_mathjax/output/chtml/fonts")
    (site / "figure.png").write_bytes(png())
    (site / "_sources").mkdir()
    (site / "index.html").write_text(page(CLEAN))
    (site / "good.html").write_text(page(GOOD, notebook="good.ipynb"))
    nbformat.write(notebook_with_figures(1), site / "_sources" / "good.ipynb")
    nbformat.write(notebook_with_figures(2), site / "_sources" / "missing_figure.ipynb")
    (site / "evidence.html").write_text(page(evidence_body(), notebook="evidence.ipynb"))
    nbformat.write(notebook_with_evidence(), site / "_sources" / "evidence.ipynb")
    for name, (body, _, _) in FAULTS.items():
        notebook = "missing_figure.ipynb" if name == "missing_figure" else None
        if name.startswith("evidence_"):
            notebook = f"{name}.ipynb"
            figures = 2 if name == "evidence_few_figures" else 1
            nbformat.write(notebook_with_evidence(figures), site / "_sources" / notebook)
        mathjax = "_mathjax/not-there.js" if name == "mathjax_missing" else None
        (site / f"{name}.html").write_text(page(body, notebook, *[mathjax] * bool(mathjax)))
    (site / "solutions").mkdir()
    (site / "_sources" / "solutions").mkdir()
    for stem, (chapter, solutions, _) in EXERCISE_PAIRS.items():
        numbers = range(1, EXERCISE_COUNTS[stem] + 1)
        cells = [new_markdown_cell(f"# {stem}"), new_markdown_cell(exercise_items(numbers))]
        nbformat.write(new_notebook(cells=cells), site / "_sources" / f"{stem}.ipynb")
        (site / f"{stem}.html").write_text(page(chapter, f"{stem}.ipynb"))
        if solutions is not None:
            name = f"solutions/{stem}_solutions"
            cells = [new_markdown_cell(f"# Solutions to {stem}"), *solution_sections(numbers)]
            nbformat.write(new_notebook(cells=cells), site / "_sources" / f"{name}.ipynb")
            (site / f"{name}.html").write_text(page(solutions, f"{name}.ipynb", up="../"))
    return site


@pytest.fixture(scope="module")
def report(chromium, fixture_site, tmp_path_factory):
    shots = tmp_path_factory.mktemp("shots")
    return check_site(fixture_site, browser=chromium, screenshots=shots)


@pytest.mark.slow
def test_every_page_is_opened(report):
    exercise_pages = {f"{s}.html" for s in EXERCISE_PAIRS} | {
        f"solutions/{s}_solutions.html" for s, (_, sol, _) in EXERCISE_PAIRS.items() if sol
    }
    assert set(report.pages) == {
        "index.html",
        "good.html",
        "evidence.html",
        *(f"{n}.html" for n in FAULTS),
        *exercise_pages,
    }
    assert report.formulas >= 4  # the clean page's two and the broken page's two
    # ch_good 2 + 2, ch_bad 3 + 3, ch_orphan 1
    assert report.exercise_links == 11
    # one block on evidence.html and on each evidence fault page but evidence_missing
    assert report.evidence_blocks == 1 + sum(
        n.startswith("evidence_") and n != "evidence_missing" for n in FAULTS
    )


@pytest.mark.slow
def test_clean_pages_pass(report):
    clean = (
        "index.html",
        "good.html",
        "evidence.html",
        "ch_good.html",
        "solutions/ch_good_solutions.html",
    )
    assert [p for p in report.problems if p.page in clean] == []


@pytest.mark.slow
@pytest.mark.parametrize("name", list(FAULTS))
def test_each_planted_fault_is_named_by_page_and_element(report, name):
    _, elements, messages = FAULTS[name]
    found = [p for p in report.problems if p.page == f"{name}.html"]
    for element, message in zip(elements, messages, strict=True):
        assert any(element in p.element and message in p.message for p in found), (
            f"expected {element!r}: {message!r} on {name}.html, got:\n" + "\n".join(map(str, found))
        )


@pytest.mark.slow
def test_only_the_wide_cells_are_reported(report):
    wide = [p.element for p in report.problems if p.page == "wide_code.html"]
    assert len(wide) == 2 and not any("cell 0" in e or "cell 1" in e for e in wide), wide


@pytest.mark.slow
def test_the_faults_stay_on_their_pages(report):
    assert {p.page for p in report.problems} == {f"{n}.html" for n in FAULTS} | (
        EXERCISE_FAULT_PAGES
    )


@pytest.mark.slow
@pytest.mark.parametrize("stem", [s for s in EXERCISE_PAIRS if EXERCISE_PAIRS[s][2]])
def test_each_broken_exercise_link_is_named(report, stem):
    for page_name, element, message in EXERCISE_PAIRS[stem][2]:
        found = [p for p in report.problems if p.page == page_name and p.element == element]
        assert any(message in p.message for p in found), (
            f"expected {element!r}: {message!r} on {page_name}, got:\n"
            + "\n".join(map(str, [p for p in report.problems if p.page == page_name]))
        )


@pytest.mark.slow
def test_screenshot_of_the_notebook_page(report):
    assert [s.name for s in report.screenshots] == [
        "figures_missing_figure.png",
        "maths_missing_figure.png",
        "evidence_closed_evidence.png",  # the first evidence block, closed, then opened
        "evidence_open_evidence.png",
    ]
    assert all(s.read_bytes().startswith(b"\x89PNG") for s in report.screenshots)


def test_expected_figures_counts_outputs_and_markdown_images(tmp_path):
    nb = notebook_with_figures(2)
    nb.cells.append(new_markdown_cell("![a](a.png) and <img src='b.png'>"))
    removed = new_code_cell("x", outputs=nb.cells[1].outputs)
    removed.metadata["tags"] = ["remove-output"]
    nb.cells.append(removed)
    nbformat.write(nb, tmp_path / "nb.ipynb")
    per_cell, total = expected_figures(tmp_path / "nb.ipynb")
    assert per_cell == [(1, "plot()", 2), (3, "x", 0)]
    assert total == 4


def test_missing_browser_exits_2(tmp_path, capsys):
    (tmp_path / "index.html").write_text("<p>x</p>")
    assert main([str(tmp_path), "--browser", "no-such-chromium-here"]) == 2
    assert "Chromium is not installed" in capsys.readouterr().err


def test_landing_page_points_links_outside_the_site_to_the_repository():
    readme = (
        "# T\n\nSee [utils](utils/) and [a tool](tools/book/book.py), "
        "[nb](notebooks/00_x.ipynb), [web](https://x.org) and ![f](figures/a.png).\n\n"
        "## Quickstart\n\nnot on the landing page\n"
    )
    text = build_book._landing_page(
        readme, {"notebooks/00_x.ipynb", "figures/a.png"}, ["notebooks/00_x"]
    )
    assert f"[utils]({REPO_URL}/tree/main/utils)" in text
    assert f"[a tool]({REPO_URL}/blob/main/tools/book/book.py)" in text
    assert "[nb](notebooks/00_x.ipynb)" in text and "![f](figures/a.png)" in text
    assert "[web](https://x.org)" in text
    assert "not on the landing page" not in text
    assert "```{toctree}\n:hidden:" in text and "\nnotebooks/00_x\n```" in text


def test_notebook_links_to_repository_files_go_to_the_repository():
    staged = {"notebooks/03_attention.ipynb"}
    text = build_book.relink(
        "[a](../utils/attention.py#L3), [b](03_attention.ipynb#x), [c](../no/such/file.py)",
        "notebooks",
        staged,
    )
    assert f"[a]({REPO_URL}/blob/main/utils/attention.py#L3)" in text
    assert "[b](03_attention.ipynb#x)" in text  # a page of the site
    assert "[c](../no/such/file.py)" in text  # dead: left for Sphinx to report
    assert build_book.jupyter_slug(" 2. Why scale ") == "2.-Why-scale"


@pytest.mark.slow
# sphinx-book-theme and myst-parser use Sphinx APIs that Sphinx 9 marks for removal in 11
@pytest.mark.filterwarnings("ignore:.*is deprecated. Check CHANGES for Sphinx API")
def test_sphinx_turns_exercise_links_into_links_to_the_anchors(tmp_path):
    """The notebooks' links, as written for Jupyter and GitHub, land on the page and the raw
    anchor in the HTML book; a link to an anchor that does not exist fails the build."""
    needs(
        "the book's Sphinx packages",
        all(importlib.util.find_spec(m) for m in ("sphinx", "myst_nb", "sphinx_book_theme")),
        "pip install -r requirements-book.txt",
    )
    src = tmp_path / "src"
    stem = "01_toy"
    chapter = new_notebook(
        cells=[
            new_markdown_cell("# 01 · Toy"),
            new_markdown_cell(
                "## Exercises\n\n"
                + "".join(
                    f'{n}. <a id="exercise-{n}"></a>Exercise {n}. *Hint: {n}.*\n'
                    f"   [Solution](solutions/{stem}_solutions.ipynb#exercise-{n})\n"
                    for n in (1, 2)
                )
            ),
        ]
    )
    solutions = new_notebook(
        cells=[
            new_markdown_cell(f"# Solutions to 01 · Toy\n\n[Back to the chapter](../{stem}.ipynb)"),
            *(
                new_markdown_cell(
                    f'<a id="exercise-{n}"></a>\n\n## Exercise {n} · Toy {n}\n\n> Exercise {n}.\n\n'
                    f"[Back to exercise {n}](../{stem}.ipynb#exercise-{n})"
                )
                for n in (1, 2)
            ),
        ]
    )
    evidence_heading = new_markdown_cell("## Evidence: a control\n\nWhat the control shows.")
    evidence_heading.metadata["jp-MarkdownHeadingCollapsed"] = True
    chapter.cells[1:1] = [  # a collapsed section, then the main line goes on
        new_markdown_cell("## 1. Main line\n\nRead straight through."),
        new_code_cell("setup = 0", execution_count=1),  # the first code cell: the setup cell
        evidence_heading,
        new_code_cell("control = 1", execution_count=2),
        new_markdown_cell("### Nested inside the evidence"),
        new_markdown_cell("## 2. Back on the main line"),
    ]
    chapter.metadata["language_info"] = {"name": "python"}  # the code cell's lexer
    wrong = new_notebook(cells=[new_markdown_cell(f"# Wrong\n\n[x]({stem}.ipynb#exercise-9)")])
    (src / "notebooks" / "solutions").mkdir(parents=True)
    nbformat.write(chapter, src / "notebooks" / f"{stem}.ipynb")
    nbformat.write(solutions, src / "notebooks" / "solutions" / f"{stem}_solutions.ipynb")
    nbformat.write(wrong, src / "notebooks" / "wrong.ipynb")
    docs = [f"notebooks/{stem}", "notebooks/wrong"]
    landing = build_book._landing_page(
        "# Toy\n", set(), docs, [f"notebooks/solutions/{stem}_solutions"]
    )
    (src / "index.md").write_text(landing, encoding="utf-8")
    build_book.write_css(src)
    html = tmp_path / "html"
    config = build_book.sphinx_config(["base", "ams"])
    with pytest.raises(build_book.BookBuildError) as failed:
        build_book.run_sphinx(src, html, tmp_path / "doctrees", config, set())
    # the only warning: the link to an anchor that no page holds
    warnings = [ln for ln in str(failed.value).splitlines() if "WARNING" in ln]
    assert len(warnings) == 1 and "local id not found" in warnings[0], warnings
    assert "'exercise-9'" in warnings[0] and "wrong.ipynb" in warnings[0]
    # ... and, the build going on, the pair's links are links to the pages and their anchors
    chapter_html = (html / "notebooks" / f"{stem}.html").read_text(encoding="utf-8")
    solutions_html = (html / "notebooks" / "solutions" / f"{stem}_solutions.html").read_text(
        encoding="utf-8"
    )
    for n in (1, 2):
        assert f'<a id="exercise-{n}"></a>' in chapter_html
        assert f'href="solutions/{stem}_solutions.html#exercise-{n}"' in chapter_html
        assert f'<a id="exercise-{n}"></a>' in solutions_html
        assert f'href="../{stem}.html#exercise-{n}"' in solutions_html
    # the collapsed section is one closed block: its heading as the summary, its cells inside,
    # the next heading of its level outside
    assert chapter_html.count('<details class="evidence">') == 1
    assert '<details class="evidence" open' not in chapter_html
    opening = chapter_html.index('<details class="evidence"><summary>')
    after = chapter_html.index("Back on the main line", opening)
    block = chapter_html[opening : chapter_html.rindex("</details>", opening, after)]
    summary, inside = block.split("</summary>", 1)
    assert summary.split("<summary>")[1].lstrip().startswith("<h2")
    assert "Evidence: a control" in summary
    assert "What the control shows." in inside and '<span class="n">control</span>' in inside
    assert "Nested inside the evidence" in inside
    assert "Read straight through." not in block and build_book.EVIDENCE_MARKER not in chapter_html
    index = (html / "index.html").read_text(encoding="utf-8")
    assert index.index(build_book.CHAPTERS_CAPTION) < index.index(build_book.SOLUTIONS_CAPTION)


# ---------------------------------------------------------------------------------------
# Interactive views (utils.plotting.explore_attention) as the book draws them: one that works,
# and one page per fault: a view missing from its page, one that cannot draw (no plotly.js),
# one whose menu changes nothing.

VIEW_FAULTS = {
    "view_missing": ("article", "the notebook has 1 interactive view(s), the page shows 0"),
    "view_undrawn": ("interactive view 0", "did not draw (no plotly .main-svg"),
    "view_stuck": ("interactive view 0", "in its menu changed nothing drawn"),
}


def view_spec() -> dict:
    import torch

    from utils.plotting import explore_attention

    weights = torch.softmax(3 * torch.randn(2, 3, 4, 4, generator=torch.manual_seed(0)), -1)
    return explore_attention(weights, ["<bos>", "the", "cat", "sat"]).to_json()


@pytest.fixture(scope="module")
def view_site(tmp_path_factory):
    pytest.importorskip("plotly")
    from plotly.offline import get_plotlyjs

    site = tmp_path_factory.mktemp("views")
    (site / "_static" / "plotly").mkdir(parents=True)
    (site / "_static" / build_book.PLOTLY_JS).write_text(get_plotlyjs(), encoding="utf-8")
    (site / "_mathjax").mkdir()
    shutil.copy(MATHJAX / build_book.MATHJAX_BUNDLE, site / "_mathjax")
    (site / "_sources").mkdir()
    (site / "index.html").write_text(page("<h1>Views</h1>"))
    spec = view_spec()
    stuck = json.loads(json.dumps(spec))
    for button in stuck["layout"]["updatemenus"][0]["buttons"]:  # every entry shows head 0
        button["args"] = [{"visible": [t["visible"] for t in stuck["data"]]}]
    bodies = {
        "view": build_book.interactive_html(spec, "v"),
        "view_missing": "<p>no view here</p>",
        "view_undrawn": build_book.interactive_html(spec, "v"),
        "view_stuck": build_book.interactive_html(stuck, "v"),
    }
    output = new_output(
        "execute_result", data={build_book.PLOTLY_MIMETYPE: spec}, execution_count=1
    )
    for name, body in bodies.items():
        cell = new_code_cell("view", execution_count=1, outputs=[output])
        nbformat.write(new_notebook(cells=[cell]), site / "_sources" / f"{name}.ipynb")
        html = page(body, f"{name}.ipynb")
        if name != "view_undrawn":
            script = f'<script src="_static/{build_book.PLOTLY_JS}"></script>'
            html = html.replace("</head>", f"{script}\n</head>")
        (site / f"{name}.html").write_text(html)
    return site


@pytest.fixture(scope="module")
def view_report(chromium, view_site, tmp_path_factory):
    return check_site(view_site, browser=chromium, screenshots=tmp_path_factory.mktemp("shots"))


@pytest.mark.slow
def test_a_working_view_draws_responds_and_is_photographed(view_report):
    assert [p for p in view_report.problems if p.page in ("index.html", "view.html")] == []
    assert view_report.views == 3  # view, view_undrawn (found, not drawn), view_stuck
    shots = [s for s in view_report.screenshots if s.name.startswith("interactive_")]
    assert [s.name for s in shots] == ["interactive_view.png"]
    assert shots[0].read_bytes().startswith(b"\x89PNG")


@pytest.mark.slow
@pytest.mark.parametrize("name", list(VIEW_FAULTS))
def test_each_broken_view_is_named(view_report, name):
    element, message = VIEW_FAULTS[name]
    found = [p for p in view_report.problems if p.page == f"{name}.html"]
    assert any(element in p.element and message in p.message for p in found), "\n".join(
        map(str, found)
    )


def test_the_build_draws_plotly_outputs_with_the_pages_plotly_js():
    spec = view_spec()
    fallback = "<em>run the notebook to explore it</em>"
    output = new_output(
        "display_data", data={build_book.PLOTLY_MIMETYPE: spec, "text/html": fallback}
    )
    nb = new_notebook(cells=[new_code_cell("view", outputs=[output, output])])
    nb_dict = json.loads(nbformat.writes(nb))
    assert build_book._draw_interactive(nb_dict, "notebooks/05_x") == 2
    first, second = (o["data"] for o in nb_dict["cells"][0]["outputs"])
    assert build_book.PLOTLY_MIMETYPE not in first  # myst-nb renders the HTML, which draws it
    assert first["text/html"].startswith(f'<div class="{build_book.INTERACTIVE_CLASS}">')
    assert 'id="notebooks-05_x-view-0"' in first["text/html"]
    assert 'id="notebooks-05_x-view-1"' in second["text/html"]
    assert "Plotly.newPlot" in first["text/html"] and "plotly.js v" not in first["text/html"]


def test_an_evidence_heading_cell_must_begin_with_its_heading():
    cells = [new_markdown_cell("# T"), new_markdown_cell("## Evidence: x\n\nbody")]
    cells[1].metadata["jp-MarkdownHeadingCollapsed"] = True
    nb = json.loads(nbformat.writes(new_notebook(cells=cells)))
    assert build_book._mark_evidence(nb, "notebooks/t") == 1
    text = "".join(nb["cells"][1]["source"])
    assert text.startswith("## Evidence: x\n\n") and build_book.EVIDENCE_MARKER in text
    cells[1].source = "Prose before the heading.\n\n## Evidence: x"
    nb = json.loads(nbformat.writes(new_notebook(cells=cells)))
    with pytest.raises(build_book.BookBuildError, match="does not begin with its heading"):
        build_book._mark_evidence(nb, "notebooks/t")
