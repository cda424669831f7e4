"""Build the book as a static HTML site that reads offline: ``_build/html/index.html``.

Usage::

    pip install -r requirements-book.txt     # once, into the book's environment
    python tools/book/build_book.py               # then open _build/html/index.html

What it does:

1. Stages the sources in ``_build/src``: every chapter of ``book.notebook_paths()`` (so
   a new notebook joins the book, in reading order, without any edit here), then every
   solutions notebook of ``book.solution_paths()`` (an appendix part, "Worked solutions", in
   the same order), ``figures/``, and a landing page made from the README's opening and its
   table of contents. The sources keep the repository's layout, so the notebooks' relative
   links (``solutions/03_attention_solutions.ipynb#exercise-2`` in a chapter,
   ``../03_attention.ipynb#exercise-2`` back) work as written in Jupyter, on GitHub and here:
   Sphinx turns them into links to the pages, and the raw ``<a id="exercise-N"></a>`` anchors
   they point to are made known to MyST (`register_raw_anchors`), so each is checked at build
   time like a heading's anchor.
2. Runs Sphinx with myst-nb and **execution off**: the pages show the outputs committed in the
   notebooks, which are never re-run. Theme: sphinx-book-theme, with a button on every notebook
   page to open it in Colab and one to download its ``.ipynb``.
3. Copies MathJax 3 (``mathjax-full``, the npm package the LaTeX check installs into
   ``tools/book/latex``) into ``_build/html/_static/mathjax``: no page asks a CDN for anything.
   MathJax gets the configuration of the LaTeX check (``tools/book/latex/check_tex.mjs``), which is
   JupyterLab's without the packages that hide errors, so a formula that passes the check
   renders here as in Jupyter, and one that does not shows as an error the browser check sees.

4. Draws the interactive views (plotly figures: ``utils.plotting.explore_attention``). A
   notebook stores such a view as plotly's JSON (``application/vnd.plotly.v1+json``, which
   JupyterLab draws with the renderer that ships with plotly) and a line of HTML for viewers
   that cannot; myst-nb renders only the HTML, so the build replaces that line with a ``<div>``
   that draws the JSON (`interactive_html`), and the pages that have one load plotly.js once,
   from ``_static/plotly/plotly.min.js``, a copy of the installed plotly's (`copy_plotly`).

5. Folds each evidence section into a collapsed block. A section whose heading cell carries
   JupyterLab's ``jp-MarkdownHeadingCollapsed: true`` (``budget.evidence_sections``: to the next
   heading of the same or a higher level) is collapsed in JupyterLab; on the page it becomes a
   ``<details class="evidence">`` whose ``<summary>`` is the heading, closed until the reader
   opens it (`_mark_evidence`, then `fold_evidence`). Such a heading cell must begin with its
   heading, so that the block holds exactly the cells JupyterLab folds.

Warnings fail the build (a broken cross-reference is a broken book). ``tools/book/check_book.py``
then opens every page in Chromium and checks what a reader would see.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import unquote

from book import (  # tools/book/book.py, beside this
    INTERACTIVE_CLASS,
    PLOTLY_MIMETYPE,
    REPO_URL,
    ROOT,
    notebook_paths,
    solution_paths,
)
from budget import evidence_sections  # what a collapsed ("evidence") section is
from check_latex import LATEX_DIR  # the LaTeX check's node package: MathJax for the pages too

BUILD = ROOT / "_build"
SRC = BUILD / "src"
HTML = BUILD / "html"
DOCTREES = BUILD / "doctrees"
MATHJAX_ES5 = LATEX_DIR / "node_modules" / "mathjax-full" / "es5"
MATHJAX_BUNDLE = "tex-chtml-full.js"  # TeX input, CommonHTML output, as Jupyter renders
COLAB_URL = "https://colab.research.google.com"
SETUP_PROMPT_SHOW = "Setup cell, the same in every notebook (show)"
SETUP_PROMPT_HIDE = "Hide the setup cell"
# The text column of sphinx-book-theme is about 670 px wide in a 1280 px window: a code line
# of the book's limit (100 characters, ruff's line-length) needs about 870 px at the theme's
# code size. Narrower sidebars and padding, and code a little smaller than the prose, let it
# fit in a 1280 px window with both sidebars shown; tools/book/check_book.py fails on any
# code cell that still needs horizontal scrolling. Outputs wrap instead of scrolling: a
# printed line may be longer than a line of code (a sentence, a traceback).
BOOK_CSS = """\
:root {
  --pst-sidebar-secondary: 11rem;
}
@media (min-width: 960px) {
  .bd-page-width { max-width: 100%; }
  .bd-sidebar-primary { width: 14rem; }
}
@media (min-width: 1200px) {
  .bd-main .bd-content .bd-article-container { max-width: calc(100% - 11rem); }
}
.bd-main .bd-content .bd-article-container .bd-article {
  padding-left: 0.75rem;
  padding-right: 0.75rem;
}
div.cell div.highlight pre {
  font-size: 0.78rem;
}
div.cell .cell_output pre {
  font-size: 0.78rem;
  white-space: pre-wrap;
  overflow-wrap: anywhere;
}
details.evidence {
  border-left: 3px solid var(--pst-color-border, #ccc);
  padding-left: 0.75rem;
  margin: 1rem 0;
}
details.evidence > summary {
  cursor: pointer;
}
details.evidence > summary > :is(h1, h2, h3, h4, h5, h6) {
  display: inline;
}
"""
PLOTLY_JS = "plotly/plotly.min.js"  # in _static, on the pages that draw a plotly figure
EVIDENCE_CLASS = "evidence"  # <details class="evidence">: a collapsed section on the page
EVIDENCE_MARKER = "book-evidence-marker"  # put after an evidence heading, replaced by the fold
TITLE = "Attention, derived"
CHAPTERS_CAPTION = "Notebooks"
SOLUTIONS_CAPTION = "Worked solutions"

# The delimiters and options of the LaTeX check (tools/book/latex/check_tex.mjs, FIND_OPTIONS),
# which are Jupyter's.
TEX_OPTIONS = {
    "inlineMath": [["$", "$"], ["\\(", "\\)"]],
    "displayMath": [["$$", "$$"], ["\\[", "\\]"]],
    "processEscapes": True,
    "processEnvironments": True,
    "processRefs": True,
}


class BookBuildError(RuntimeError):
    """The book could not be built; the message says why."""


def ensure_mathjax() -> None:
    """Install mathjax-full into tools/book/latex (as the test command does) if it is missing."""
    if (MATHJAX_ES5 / MATHJAX_BUNDLE).is_file():
        return
    npm = shutil.which("npm")
    if npm is None:
        raise BookBuildError(
            "MathJax is not installed in tools/book/latex and npm is not on PATH; install Node.js, "
            "then run: npm ci --prefix tools/book/latex --no-audit --no-fund"
        )
    print("installing mathjax-full into tools/book/latex (npm ci) ...", flush=True)
    subprocess.run(
        [npm, "ci", "--prefix", str(LATEX_DIR), "--no-audit", "--no-fund", "--loglevel=error"],
        check=True,
    )


def mathjax_packages() -> list[str]:
    """The TeX packages the LaTeX check compiles with (``PACKAGES`` of check_tex.mjs).

    Read from the check itself, so the web and the check cannot drift apart. Importing the
    module also runs its check on standard input; we give it an empty list.
    """
    node = shutil.which("node")
    if node is None:
        raise BookBuildError("Node.js ('node') is not on PATH: it reads MathJax's package list")
    script = (
        f"const m = await import({json.dumps((LATEX_DIR / 'check_tex.mjs').as_uri())});"
        "process.stdout.write('PACKAGES ' + JSON.stringify(m.PACKAGES) + '\\n');"
    )
    run = subprocess.run(
        [node, "--input-type=module", "-e", script],
        input="[]",
        capture_output=True,
        text=True,
        cwd=LATEX_DIR,
        check=False,
    )
    lines = [ln for ln in run.stdout.splitlines() if ln.startswith("PACKAGES ")]
    if run.returncode != 0 or not lines:
        raise BookBuildError(f"cannot read the package list of check_tex.mjs:\n{run.stderr}")
    packages = json.loads(lines[-1].removeprefix("PACKAGES "))
    if "base" not in packages or "noerrors" in packages:
        raise BookBuildError(f"unexpected MathJax package list from check_tex.mjs: {packages}")
    return packages


def mathjax_config(packages: list[str]) -> dict:
    """``window.MathJax`` for every page: the LaTeX check's packages and delimiters.

    As in Jupyter, MathJax looks for maths in the whole page (code and ``pre`` excepted), so
    a formula that MyST did not mark as maths is still typeset; what neither finds stays raw
    TeX, which the browser check reports.
    """
    return {
        "tex": {"packages": packages, **TEX_OPTIONS},
        "chtml": {"matchFontHeight": True},
    }


def _first_heading(path: Path) -> str:
    nb = json.loads(path.read_text(encoding="utf-8"))
    for cell in nb.get("cells", []):
        if cell.get("cell_type") == "markdown":
            source = cell.get("source", "")
            source = "".join(source) if isinstance(source, list) else source
            for line in source.splitlines():
                if line.startswith("# "):
                    return line[2:].strip()
    return path.stem


_LINK = re.compile(r"(\]\()([^)\s]+)(\))")  # ](target) of a markdown link or image
_IMAGE = re.compile(r"!\[[^\]]*\]\(([^)\s]+)|<img\b[^>]*?\bsrc=[\"']([^\"']+)", re.IGNORECASE)
_SCHEME = re.compile(r"^[a-z][a-z0-9+.-]*:", re.IGNORECASE)


def _repo_path(target: str, folder: str) -> str | None:
    """A relative link's target as a path from the repository root (None: not a local path)."""
    path = unquote(target.split("#", 1)[0])
    if not path or _SCHEME.match(path) or path.startswith(("#", "/")):
        return None
    resolved = (ROOT / folder / path).resolve()
    if not resolved.is_relative_to(ROOT):
        return None
    return resolved.relative_to(ROOT).as_posix()


def relink(markdown: str, folder: str, staged: set[str]) -> str:
    """Point relative links to repository files the site does not hold at the repository.

    ``folder`` is where the markdown lives, relative to the root ("" or "notebooks"). A link to
    a page or file of the site stays; one to an existing file or folder of the repository
    (``../utils/attention.py``, ``utils/``) becomes its address on GitHub, so no link of the
    site is dead; a link to nothing stays, for Sphinx to report.
    """

    def replace(match: re.Match[str]) -> str:
        target = match.group(2)
        path = _repo_path(target, folder)
        if path is None or path in staged or not (ROOT / path).exists():
            return match.group(0)
        kind = "tree" if (ROOT / path).is_dir() else "blob"
        anchor = "#" + target.split("#", 1)[1] if "#" in target else ""
        return f"{match.group(1)}{REPO_URL.rstrip('/')}/{kind}/main/{path}{anchor}{match.group(3)}"

    return _LINK.sub(replace, markdown)


def _toctree(caption: str, docs: list[str]) -> str:
    lines = "\n".join(docs)
    return f"```{{toctree}}\n:hidden:\n:maxdepth: 1\n:caption: {caption}\n\n{lines}\n```\n"


def _landing_page(
    readme: str, staged: set[str], docs: list[str], solutions: list[str] | None = None
) -> str:
    """The README down to its contents table, as the book's first page, plus the navigation:
    the chapters (``docs``), then the worked solutions as an appendix part."""
    head = relink(readme.split("\n## Quickstart", 1)[0].rstrip() + "\n", "", staged)
    appendix = f"\n{_toctree(SOLUTIONS_CAPTION, solutions)}" if solutions else ""
    return (
        f"{head}\n"
        "## Reading this edition\n\n"
        "These pages show each notebook with the outputs it is committed with. The buttons at "
        "the top of a notebook's page open it in Google Colab or download the `.ipynb`; see "
        f"the [repository]({REPO_URL}) to run the book on your own machine.\n\n"
        f"{_toctree(CHAPTERS_CAPTION, docs)}{appendix}"
    )


def _markdown_cells(path: Path) -> list[str]:
    nb = json.loads(path.read_text(encoding="utf-8"))
    sources = (c.get("source", "") for c in nb.get("cells", []) if c.get("cell_type") == "markdown")
    return ["".join(s) if isinstance(s, list) else s for s in sources]


def write_css(src: Path = SRC) -> None:
    """The book's own style sheet, `_static/book.css` in the staged sources."""
    (src / "_static").mkdir(parents=True, exist_ok=True)
    (src / "_static" / "book.css").write_text(BOOK_CSS, encoding="utf-8")


def stage() -> tuple[list[str], set[str]]:
    """Lay out the sources in _build/src as the repository lays them out.

    Returns the pages' docnames, in reading order (the chapters, then the solutions), and the
    staged files (paths from the root). Images that a notebook's markdown shows from elsewhere in
    the repository are staged too.
    """
    if SRC.exists():
        shutil.rmtree(SRC)
    (SRC / "notebooks").mkdir(parents=True)
    chapters, solutions = notebook_paths(), solution_paths()
    paths = chapters + solutions
    if not chapters:
        raise BookBuildError("no notebooks found in notebooks/")
    staged: set[str] = set()

    def add(path: str, source: Path | None = None) -> None:
        (SRC / path).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source or ROOT / path, SRC / path)
        staged.add(path)

    if (ROOT / "figures").is_dir():
        for figure in sorted((ROOT / "figures").rglob("*")):
            if figure.is_file():
                add(figure.relative_to(ROOT).as_posix())
    for path in paths:
        folder = path.parent.relative_to(ROOT).as_posix()  # notebooks, notebooks/solutions
        add(f"{folder}/{path.name}", path)
        for markdown in _markdown_cells(path):
            for match in _IMAGE.finditer(markdown):
                image = _repo_path(match.group(1) or match.group(2), folder)
                if image and image not in staged and (ROOT / image).is_file():
                    add(image)
    docs = [_docname(p) for p in chapters]
    appendix = [_docname(p) for p in solutions]
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    landing = _landing_page(readme, staged, docs, appendix)
    (SRC / "index.md").write_text(landing, encoding="utf-8")
    write_css()
    return docs + appendix, staged


def _docname(path: Path) -> str:
    """A notebook's page, as Sphinx names it: its path from the root, without ``.ipynb``."""
    return path.relative_to(ROOT).with_suffix("").as_posix()


def interactive_html(spec: dict, div_id: str) -> str:
    """The HTML that draws one plotly figure ``{"data", "layout", "config"}`` with the page's
    plotly.js (plotly's own `to_html`, without the library)."""
    import plotly.io as pio  # requirements-book.txt

    figure = {"data": spec.get("data", []), "layout": spec.get("layout", {})}
    html = pio.to_html(
        figure,
        config=spec.get("config"),
        include_plotlyjs=False,
        full_html=False,
        validate=False,
        div_id=div_id,
    )
    return f'<div class="{INTERACTIVE_CLASS}">{html}</div>'


def _draw_interactive(nb: dict, docname: str) -> int:
    """Give each output that carries plotly's JSON the HTML that draws it; return how many."""
    count = 0
    for cell in nb.get("cells", []):
        for output in cell.get("outputs", []):
            data = output.get("data", {})
            if PLOTLY_MIMETYPE in data:
                div_id = f"{docname.replace('/', '-')}-view-{count}"
                data["text/html"] = interactive_html(data.pop(PLOTLY_MIMETYPE), div_id)
                count += 1
    return count


def _load_plotly(interactive: set[str]):
    """A Sphinx ``html-page-context`` handler: plotly.js on the pages in ``interactive``."""

    def handler(app, pagename: str, templatename: str, context: dict, doctree) -> None:
        if pagename in interactive:
            app.add_js_file(PLOTLY_JS)

    return handler


def _relink_notebook(staged: set[str], interactive: set[str] | None = None):
    """A Sphinx ``source-read`` handler: `relink` in each notebook's markdown cells, the
    setup cell (the first code cell) folded to a one-line toggle, and the interactive views
    drawn (`_draw_interactive`; their pages are added to ``interactive``).

    Only what Sphinx parses changes; the ``.ipynb`` offered for download is the notebook as
    committed. The fold is myst-nb's ``hide-input`` tag, added here rather than in the
    notebooks: Jupyter ignores it, so it would be metadata that only the web edition reads,
    and the 15 setup cells would have to carry it in step with `book.setup_cell`.
    """

    def handler(app, docname: str, source: list[str]) -> None:
        if not docname.startswith("notebooks/"):
            return
        folder = docname.rsplit("/", 1)[0]  # notebooks, or notebooks/solutions
        nb = json.loads(source[0])
        setup = next((c for c in nb.get("cells", []) if c.get("cell_type") == "code"), None)
        if setup is not None:
            metadata = setup.setdefault("metadata", {})
            metadata["tags"] = [*metadata.get("tags", []), "hide-input"]
            metadata["mystnb"] = {
                "code_prompt_show": SETUP_PROMPT_SHOW,
                "code_prompt_hide": SETUP_PROMPT_HIDE,
            }
        for cell in nb.get("cells", []):
            if cell.get("cell_type") == "markdown":
                text = cell.get("source", "")
                cell["source"] = relink(
                    "".join(text) if isinstance(text, list) else text, folder, staged
                )
        _mark_evidence(nb, docname)
        if _draw_interactive(nb, docname) and interactive is not None:
            interactive.add(docname)
        source[0] = json.dumps(nb)

    return handler


_ATX = re.compile(r"^ {0,3}(#{1,6})(?:[ \t]|$)")


def _mark_evidence(nb: dict, docname: str) -> int:
    """Put a marker right after the heading of each evidence section's heading cell
    (`budget.evidence_sections`), for `fold_evidence` to find in the doctree; return how many.

    The heading must be the cell's first line (an ATX heading of the section's level): the
    page folds from that heading to the next one of its level, as JupyterLab does from the cell,
    and prose above the heading in the same cell would be left outside the block.
    """
    from nbformat import from_dict  # requirements.txt

    cells = nb.get("cells", [])
    texts = [_text(cell.get("source", "")) for cell in cells]
    nodes = [from_dict({**cell, "source": text}) for cell, text in zip(cells, texts, strict=True)]
    sections = evidence_sections(nodes)
    for section in sections:
        first = texts[section.start].lstrip("\n").split("\n", 1)
        if not _ATX.match(first[0]):
            raise BookBuildError(
                f"{docname}: cell {section.start} starts a collapsed (evidence) section but does "
                f"not begin with its heading: {first[0][:60]!r}"
            )
        rest = first[1] if len(first) > 1 else ""
        marker = f'<div class="{EVIDENCE_MARKER}"></div>'
        cells[section.start]["source"] = f"{first[0]}\n\n{marker}\n\n{rest}"
    return len(sections)


def _text(source: str | list[str]) -> str:
    return "".join(source) if isinstance(source, list) else source


def fold_evidence(app, doctree, docname: str) -> None:
    """A Sphinx ``doctree-resolved`` handler: each section that holds an evidence marker
    (`_mark_evidence`) becomes ``<details class="evidence"><summary><hN>heading</hN>
    </summary> ... </details>`` inside its ``<section>``, closed on load.

    Done on the resolved doctree, after Sphinx has read the section titles for the navigation,
    so the title stays the section's heading there and keeps its anchor.
    """
    from docutils import nodes

    for raw in list(doctree.findall(nodes.raw)):
        if EVIDENCE_MARKER not in raw.astext():
            continue
        section = raw.parent
        if not isinstance(section, nodes.section) or not isinstance(section[0], nodes.title):
            raise BookBuildError(f"{docname}: an evidence marker outside a section's heading")
        section.remove(raw)
        opening = f'<details class="{EVIDENCE_CLASS}"><summary>'
        section.insert(0, nodes.raw("", opening, format="html"))
        section.insert(2, nodes.raw("", "</summary>", format="html"))
        section.append(nodes.raw("", "</details>", format="html"))


_RAW_ID = re.compile(r"""<a\s[^>]*?\bid\s*=\s*["']([^"']+)["']""", re.IGNORECASE)


def register_raw_anchors(app, doctree) -> None:
    """A Sphinx ``doctree-read`` handler: make the page's raw-HTML anchors (``<a id="x"></a>``
    in a markdown cell, as the exercises and solutions carry) known to MyST as link targets.

    MyST resolves ``[text](page.ipynb#x)`` only to a heading's anchor or a label; a raw
    anchor is neither, so the link would warn ("local id not found"), and warnings fail the
    build. Registered here as the page's own slugs, the anchor resolves, the link becomes
    ``page.html#x``, and the raw HTML keeps the element with that id on the page. A link to an
    anchor that no page holds still warns.
    """
    from docutils import nodes

    slugs = app.env.metadata[app.env.docname].setdefault("myst_slugs", {})
    for raw in doctree.findall(nodes.raw):
        if "html" in raw.get("format", "").split():
            for anchor_id in _RAW_ID.findall(raw.astext()):
                slugs.setdefault(anchor_id, (None, anchor_id, ""))


def jupyter_slug(text: str) -> str:
    """A heading's anchor as Jupyter makes it (its text, spaces as "-"), so that a link such
    as ``03_attention.ipynb#2.-Why-scale`` works in Jupyter and on the web alike."""
    return text.strip().replace(" ", "-")


def sphinx_config(packages: list[str]) -> dict:
    """Every Sphinx setting of the book (no conf.py: it is all here)."""
    return {
        "project": TITLE,
        "author": "the authors of Attention, derived",
        "copyright": "the authors of Attention, derived",
        "language": "en",
        "extensions": ["myst_nb"],
        "root_doc": "index",
        "exclude_patterns": [],
        # A heading that skips a level (# then ###) renders fine; every other warning fails.
        "suppress_warnings": ["myst.header"],
        # myst-nb: render the committed outputs, never execute.
        "nb_execution_mode": "off",
        "nb_merge_streams": True,
        # Markdown as Jupyter reads it: $...$, $$...$$ (also inside a paragraph), bare
        # \begin{align}...\end{align}, <img> tags; headings get anchors for #links.
        "myst_enable_extensions": ["dollarmath", "amsmath", "html_image"],
        "myst_dmath_double_inline": True,
        "myst_heading_anchors": 6,
        "myst_heading_slug_func": "build_book.jupyter_slug",
        "myst_update_mathjax": False,  # our MathJax options below
        # MathJax 3 from the site itself.
        "mathjax_path": f"mathjax/{MATHJAX_BUNDLE}",
        "mathjax3_config": mathjax_config(packages),
        # Theme: navigation in reading order, Colab and .ipynb buttons on notebook pages.
        "html_theme": "sphinx_book_theme",
        "html_title": TITLE,
        "html_copy_source": True,
        "html_static_path": ["_static"],
        "html_css_files": ["book.css"],
        "html_sourcelink_suffix": "",  # _sources/notebooks/NN_x.ipynb is the notebook itself
        "html_last_updated_fmt": None,
        # Light by default (the figures have white backgrounds); the reader can switch. Left
        # empty, the theme logs "Got invalid theme mode" on a reader's first visit.
        "html_context": {"default_mode": "light"},
        "html_theme_options": {
            "repository_url": REPO_URL,
            "repository_branch": "main",
            "path_to_docs": "",
            "use_repository_button": True,
            "use_download_button": True,
            "use_fullscreen_button": False,
            "home_page_in_toc": True,
            "show_navbar_depth": 1,
            "launch_buttons": {"colab_url": COLAB_URL, "notebook_interface": "jupyterlab"},
        },
    }


def copy_mathjax() -> None:
    """MathJax's browser build into _static/mathjax: the bundle, its extensions, fonts, menu."""
    target = HTML / "_static" / "mathjax"
    if target.exists():
        shutil.rmtree(target)
    unused = shutil.ignore_patterns(  # the other combined bundles; each page loads one
        "tex-svg*.js",
        "tex-mml-*.js",
        "mml-*.js",
        "tex-chtml.js",
        "tex-chtml-full-speech.js",
        "node-main.js",
        "latest.js",
        "svg",
        "svg.js",
    )
    shutil.copytree(MATHJAX_ES5, target, ignore=unused)


def copy_plotly() -> None:
    """plotly.js (the installed plotly's copy, which JupyterLab's renderer matches) into
    _static/plotly: the pages with an interactive view load it from there."""
    from plotly.offline import get_plotlyjs  # requirements-book.txt

    target = HTML / "_static" / PLOTLY_JS
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(get_plotlyjs(), encoding="utf-8")


def build(*, quiet: bool = True) -> Path:
    """Build the site into _build/html from the current tree; return index.html's path."""
    ensure_mathjax()
    packages = mathjax_packages()
    docs, staged = stage()
    interactive = run_sphinx(SRC, HTML, DOCTREES, sphinx_config(packages), staged, quiet=quiet)
    copy_mathjax()
    if interactive:
        copy_plotly()
    missing = [d for d in ["index", *docs] if not (HTML / f"{d}.html").is_file()]
    if missing:
        raise BookBuildError(f"pages missing from the build: {missing}")
    return HTML / "index.html"


def run_sphinx(
    src: Path, html: Path, doctrees: Path, config: dict, staged: set[str], *, quiet: bool = True
) -> set[str]:
    """Sphinx over the staged sources ``src`` into ``html``, with the book's handlers; any
    warning is a `BookBuildError`. Returns the pages that draw an interactive view."""
    from sphinx.application import Sphinx  # imported late: `--help` works without Sphinx

    for folder in (html, doctrees):
        if folder.exists():
            shutil.rmtree(folder)
    warnings = _Tee()
    app = Sphinx(
        srcdir=src,
        confdir=None,
        outdir=html,
        doctreedir=doctrees,
        buildername="html",
        confoverrides=config,
        status=None if quiet else sys.stdout,
        warning=warnings,
        freshenv=True,
        warningiserror=True,
    )
    interactive: set[str] = set()
    app.connect("source-read", _relink_notebook(staged, interactive))
    app.connect("doctree-read", register_raw_anchors)
    app.connect("doctree-resolved", fold_evidence)
    app.connect("html-page-context", _load_plotly(interactive))
    app.build()
    if app.statuscode != 0 or warnings.text:
        raise BookBuildError(f"Sphinx reported problems:\n{warnings.text}")
    return interactive


class _Tee:
    """Sphinx's warning stream: echoed to stderr and kept for the error message."""

    def __init__(self) -> None:
        self.text = ""

    def write(self, text: str) -> int:
        self.text += text
        sys.stderr.write(text)
        return len(text)

    def flush(self) -> None:
        sys.stderr.flush()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-v", "--verbose", action="store_true", help="show Sphinx's progress")
    args = parser.parse_args(argv)
    start = time.perf_counter()
    try:
        index = build(quiet=not args.verbose)
    except (BookBuildError, subprocess.CalledProcessError) as exc:
        print(f"book build failed: {exc}", file=sys.stderr)
        return 1
    chapters, solutions = len(notebook_paths()), len(solution_paths())
    print(
        f"book built: {chapters + solutions + 1} pages (the landing page, {chapters} chapters, "
        f"{solutions} solutions notebooks) in {time.perf_counter() - start:.0f} s; "
        f"open {index.relative_to(ROOT)} in a browser"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
