"""The browser check of the HTML book fails on each planted fault, and passes a clean page.

A tiny site is written into a temporary folder: clean pages, and one page per fault (a broken
formula, raw TeX, an image that does not load, a figure of the notebook missing from its page,
dead internal links, a JavaScript error, a request outside the site). Chromium opens it once.
Without Chromium the browser tests skip, except under CI=true, where that is a failure.
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
    body: str, notebook: str | None = None, mathjax: str = f"_mathjax/{build_book.MATHJAX_BUNDLE}"
) -> str:
    links = ""
    if notebook:  # what the book theme puts in a notebook page's header
        links = (
            f'<a href="{REPO_URL.replace("https://github.com", "https://colab.research.google.com/github")}'
            f'/blob/main/{notebook}">Colab</a> <a href="_sources/{notebook}">.ipynb</a>'
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
<div class="cell"><div class="cell_input"><pre>plot()</pre></div>
<div class="cell_output"><img src="figure.png" alt="output"></div></div>
</section>
"""

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
    "external": (
        '<p>Hi</p><script src="http://127.0.0.1:9/tex-chtml.js"></script>',
        ["request to http://127.0.0.1:9/tex-chtml.js"],
        ["asks for something outside the site"],
    ),
}


def notebook_with_figures(n_figures: int):
    figure = new_output(
        "display_data", data={"image/png": "iVBORw0KGgo=", "text/plain": "<Figure>"}
    )
    cell = new_code_cell("plot()", execution_count=1, outputs=[figure] * n_figures)
    return new_notebook(cells=[new_markdown_cell("# Fixture"), cell])


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
    for name, (body, _, _) in FAULTS.items():
        notebook = "missing_figure.ipynb" if name == "missing_figure" else None
        mathjax = "_mathjax/not-there.js" if name == "mathjax_missing" else None
        (site / f"{name}.html").write_text(page(body, notebook, *[mathjax] * bool(mathjax)))
    return site


@pytest.fixture(scope="module")
def report(chromium, fixture_site, tmp_path_factory):
    shots = tmp_path_factory.mktemp("shots")
    return check_site(fixture_site, browser=chromium, screenshots=shots)


@pytest.mark.slow
def test_every_page_is_opened(report):
    assert set(report.pages) == {"index.html", "good.html", *(f"{n}.html" for n in FAULTS)}
    assert report.formulas >= 4  # the clean page's two and the broken page's two


@pytest.mark.slow
def test_clean_pages_pass(report):
    clean = [p for p in report.problems if p.page in ("index.html", "good.html")]
    assert clean == []


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
    assert {p.page for p in report.problems} == {f"{n}.html" for n in FAULTS}


@pytest.mark.slow
def test_screenshot_of_the_notebook_page(report):
    assert [s.name for s in report.screenshots] == [
        "figures_missing_figure.png",
        "maths_missing_figure.png",
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
