"""Open every page of the built HTML book in headless Chromium and check what a reader sees.

Usage::

    python tools/book/build_book.py                  # builds _build/html
    python tools/book/check_book.py [SITE_DIR]       # default: _build/html

Each page is opened from disk (``file://``, as a reader who double-clicks ``index.html`` would)
in Debian's ``chromium``, driven by Playwright through the DevTools protocol. The check
fails, naming the page and the element, when:

- MathJax shows an error (an ``mjx-merror`` element), fails to start, or leaves raw TeX
  (``$...$``, ``$$``, ``\\(``, ``\\[``, ``\\begin{...}``) visible in the text outside code;
- a notebook's formulas are fewer on its page than the LaTeX check finds in the notebook;
- an image does not load (``naturalWidth == 0``), or a figure of the notebook is missing: a
  code cell shows fewer images than its outputs hold, or the page fewer than the notebook;
- an internal link points to a missing file or to an anchor its page does not have;
- the page throws or logs a JavaScript error, fails to load a resource, or requests anything
  outside the site (such requests are blocked, not sent);
- a notebook's page has no link to open it in Colab or to download its ``.ipynb``;
- an exercise is not linked both ways with its worked solution (``tools/book/solutions.py``):
  for each exercise N of a chapter (its source notebook's ``## Exercises``), the chapter's page
  must hold the element ``id="exercise-N"`` and link to ``solutions/<chapter>_solutions.html
  #exercise-N``, a page that exists and holds that element; for each ``## Exercise N``
  section of a solutions notebook, its page must hold the element and link back to
  ``../<chapter>.html#exercise-N``, which must hold it too;
- an interactive view (a plotly figure: ``utils.plotting.explore_attention``) does not draw or
  does not respond: the page must show as many views as its notebook's outputs hold (plotly's
  JSON), each with plotly's ``.main-svg`` and drawn marks (a heatmap's image); choosing another
  entry of its first menu (the head) with the mouse must change what is drawn, and hovering
  its middle must show a label (query, key and weight). plotly.js comes from the site itself:
  a request elsewhere fails as above;
- a code cell (its input or an output) needs horizontal scrolling in the 1280 x 900 window:
  the book's style sheet (``build_book.BOOK_CSS``) fits a line of 100 characters, ruff's
  line-length, so a longer line in a notebook is what this reports. A folded cell (the setup
  cell) does not count.

- an evidence section (a heading cell with ``jp-MarkdownHeadingCollapsed: true``, as
  ``budget.evidence_sections`` reads it) is not a collapsed block on its page: the page must
  hold as many ``<details class="evidence">`` as the notebook has such sections, each closed on
  load with its content hidden; a click on its heading must open it, and then its figures must
  show (loaded, drawn at a size above zero; as many as the section's cells hold), and so must its
  formulas (each typeset, no MathJax error, a size above zero), and none of its code cells may
  need horizontal scrolling.

It saves screenshots into ``_build/screenshots`` (``--screenshots DIR``): the notebook page
with the most figures, scrolled to its first figure, the one with the most display
formulas, scrolled to where they are densest, and the first interactive view of the book,
after its menu was used, with a hover label showing (``interactive_<page>.png``), and the first
evidence block of the book, closed and then opened (``evidence_closed_<page>.png``,
``evidence_open_<page>.png``).

Exit status: 0 every page passes, 1 some problem (listed), 2 Chromium or the site is missing.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import sys
import time
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit

import nbformat

from book import INTERACTIVE_CLASS, PLOTLY_MIMETYPE  # beside this script
from budget import evidence_sections
from check_latex import LatexToolMissing, check_notebooks
from solutions import exercises, read_cells, sections

ROOT = Path(__file__).resolve().parents[2]
SITE = ROOT / "_build" / "html"
SCREENSHOTS = ROOT / "_build" / "screenshots"
BROWSERS = ("chromium", "chromium-browser")
CHROMIUM_FLAGS = (  # on top of Playwright's own (headless, a fresh profile, no first run)
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-extensions",
    "--mute-audio",
)
VIEWPORT = (1280, 900)
PAGE_TIMEOUT_S = 60.0
# Requests a page may make without leaving the site: its own files and inline data.
LOCAL_SCHEMES = ("file", "data", "blob", "about", "chrome-error")
COLAB = "https://colab.research.google.com/"
SKIP_DIRS = ("_static", "_sources", "_images", "_downloads")
EVIDENCE_CLASS = "evidence"  # build_book.EVIDENCE_CLASS: <details class="evidence">
FIGURE_MIMES = ("image/png", "image/jpeg", "image/gif", "image/svg+xml", "image/webp")


class BrowserMissing(RuntimeError):
    """No Chromium executable was found."""


@dataclass(frozen=True)
class Problem:
    page: str  # path of the page inside the site, e.g. "notebooks/03_attention.html"
    element: str  # which element: a formula, an image's src, a link's href, a cell, ...
    message: str

    def __str__(self) -> str:
        return f"{self.page}: {self.element}: {self.message}"


@dataclass
class Report:
    pages: list[str] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)
    formulas: int = 0
    images: int = 0
    links: int = 0
    exercise_links: int = 0  # exercise -> solution and back, each checked
    views: int = 0  # interactive views, each drawn and used
    evidence_blocks: int = 0  # collapsed evidence blocks, each found closed and opened
    screenshots: list[Path] = field(default_factory=list)


def find_chromium(explicit: str | None = None) -> str:
    """The Chromium executable: ``explicit``, else $CHROMIUM, else the first of BROWSERS."""
    chosen = explicit or os.environ.get("CHROMIUM")
    for candidate in [chosen] if chosen else BROWSERS:
        if path := shutil.which(candidate):
            return path
    raise BrowserMissing(
        f"Chromium is not installed: no {chosen or ' or '.join(BROWSERS)} "
        "(Debian: apt-get install chromium)"
    )


# ---------------------------------------------------------------------------------------
# The browser, driven by Playwright (a maintained client): it starts the system Chromium and
# gives a DevTools-protocol session on one page, through which every check below reads the
# same protocol events (requests, failed loads, exceptions, console and log entries).

# The protocol events the checks read (see `_event_problems`).
EVENTS = (
    "Network.requestWillBeSent",
    "Network.loadingFailed",
    "Runtime.exceptionThrown",
    "Runtime.consoleAPICalled",
    "Log.entryAdded",
)


class DevTools:
    """Chromium started headless with a fresh profile; one page, its protocol events kept."""

    def __init__(self, executable: str, width: int = VIEWPORT[0], height: int = VIEWPORT[1]):
        from playwright.sync_api import sync_playwright  # pinned in requirements-book.txt

        self._playwright = sync_playwright().start()
        self._browser = None
        try:
            self._browser = self._playwright.chromium.launch(
                executable_path=executable,
                args=list(CHROMIUM_FLAGS),
                # a reader's window has a scrollbar, which narrows the page: keep it
                ignore_default_args=["--hide-scrollbars"],
                timeout=PAGE_TIMEOUT_S * 1000,
            )
            context = self._browser.new_context(viewport={"width": width, "height": height})
            self._page = context.new_page()
            self._page.set_default_timeout(PAGE_TIMEOUT_S * 1000)
            self._cdp = context.new_cdp_session(self._page)
            self.events: list[dict] = []
            for name in EVENTS:
                self._cdp.on(name, self._keeper(name))
            for domain in ("Page", "Runtime", "Log", "Network"):
                self.send(f"{domain}.enable")
            # Nothing leaves the machine: requests outside the site are blocked (and reported).
            self.send(
                "Network.setBlockedURLs",
                {"urls": ["http://*", "https://*", "ws://*", "wss://*", "ftp://*"]},
            )
        except BaseException:
            self.close()
            raise

    def _keeper(self, name: str):
        return lambda params: self.events.append({"method": name, "params": params})

    def send(self, method: str, params: dict | None = None) -> dict:
        """Send one protocol command and return its result; events that arrive meanwhile
        are kept."""
        return self._cdp.send(method, params or {})

    def take_events(self) -> list[dict]:
        events, self.events = self.events, []
        return events

    def evaluate(self, expression: str):
        """Evaluate a JS expression (awaiting a promise) and return its JSON value."""
        result = self.send(
            "Runtime.evaluate",
            {
                "expression": expression,
                "awaitPromise": True,
                "returnByValue": True,
            },
        )
        if "exceptionDetails" in result:
            details = result["exceptionDetails"]
            text = details.get("exception", {}).get("description") or details.get("text")
            raise RuntimeError(f"the check's own script failed in the page: {text}")
        return result["result"].get("value")

    def open(self, url: str) -> None:
        """Navigate and wait for the load event."""
        from playwright.sync_api import Error

        self.take_events()
        try:
            self._page.goto(url, wait_until="load")
        except Error as exc:
            raise RuntimeError(f"cannot open {url}: {exc.message.splitlines()[0]}") from exc

    def screenshot(self, path: Path) -> None:
        self._page.screenshot(path=path)

    def view(self, index: int):
        """The `index`-th interactive view of the page (a Playwright locator)."""
        return self._page.locator(f".{INTERACTIVE_CLASS}").nth(index)

    def choose_another(self, index: int) -> str:
        """Open the first menu of view `index` with the mouse and click an entry other than
        the active one; return that entry's label ("" when the menu has one entry)."""
        view = self.view(index)
        active = self.evaluate(VIEW_STATE.replace("VIEW_INDEX", str(index)))["active"]
        view.locator(".updatemenu-header-group").first.click()
        buttons = view.locator(".updatemenu-dropdown-button")
        if buttons.count() < 2:
            return ""
        choice = buttons.nth((active + 1) % buttons.count())
        label = choice.text_content() or ""
        choice.click()
        return label

    def hover_middle(self, index: int) -> str:
        """Move the mouse to the middle of view `index`'s plot; the hover label's text."""
        box = self.view(index).locator(".nsewdrag").first.bounding_box()
        if box is None:
            return ""
        self._page.mouse.move(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
        hover = self.view(index).locator(".hoverlayer")
        for _ in range(20):
            text = hover.text_content() or ""
            if text.strip():
                return text
            self._page.wait_for_timeout(50)
        return ""

    def open_evidence(self, index: int) -> None:
        """Click the summary (the heading) of the page's `index`-th evidence block."""
        self._page.locator(f"details.{EVIDENCE_CLASS} > summary").nth(index).click()

    def screenshot_view(self, index: int, path: Path) -> None:
        self.view(index).screenshot(path=path)

    def close(self) -> None:
        if self._browser is not None:
            self._browser.close()
        self._playwright.stop()

    def __enter__(self) -> DevTools:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# ---------------------------------------------------------------------------------------
# What the page reports about itself, once MathJax, images and fonts have settled.

PAGE_SCRIPT = r"""
(async () => {
  const out = {mathjax: null, merrors: [], rawTex: [], images: [], cells: [], links: [],
               ids: [], formulas: 0, displayFormulas: [], figureCount: 0, mathElements: 0,
               scrolls: []};
  const root = document.querySelector('article') || document.querySelector('main')
               || document.body;
  const section = (el) => {
    const sec = el.closest('section');
    if (!sec) return 'page';
    const h = sec.querySelector('h1, h2, h3, h4, h5, h6');
    const title = h ? h.textContent.replace(/[#¶]\s*$/, '').trim() : '';
    return title ? `section "${title.slice(0, 60)}"` : `section #${sec.id}`;
  };
  const describe = (el) => {
    let tag = el.tagName.toLowerCase();
    if (el.id) tag += '#' + el.id;
    else if (el.classList.length) tag += '.' + [...el.classList].slice(0, 2).join('.');
    return `<${tag}> in ${section(el)}`;
  };
  const snippet = (s, n = 90) => {
    s = s.replace(/\s+/g, ' ').trim();
    return s.length > n ? s.slice(0, n) + ' ...' : s;
  };

  // MathJax: wait for its first typesetting, then collect errors.
  out.mathElements = document.querySelectorAll('.math').length;
  if (window.MathJax && MathJax.startup && MathJax.startup.promise) {
    try { await MathJax.startup.promise; out.mathjax = 'ok'; }
    catch (e) { out.mathjax = 'failed: ' + e; }
  } else if (window.MathJax) {
    out.mathjax = 'not loaded';
  }
  if (out.mathjax === 'ok') {
    const items = [...MathJax.startup.document.math];
    for (const merror of document.querySelectorAll('mjx-merror')) {
      const container = merror.closest('mjx-container');
      const item = items.find((it) => it.typesetRoot === container);
      out.merrors.push({
        where: describe(container ? container.parentElement : merror),
        tex: item ? item.math : snippet(merror.textContent),
        error: merror.getAttribute('data-mjx-error') || merror.textContent,
      });
    }
  }
  out.formulas = root.querySelectorAll('mjx-container').length;
  for (const c of root.querySelectorAll('mjx-container[display="true"]')) {
    out.displayFormulas.push(c.getBoundingClientRect().top + window.scrollY);
  }

  // Raw TeX in the text a reader sees (code, scripts and typeset maths excluded),
  // gathered per block so a formula split by markup is still seen whole.
  const SKIP = 'script, style, pre, code, kbd, samp, textarea, noscript, template, '
             + 'mjx-container, .highlight, [aria-hidden="true"]';
  const BLOCK = 'p, li, td, th, dt, dd, h1, h2, h3, h4, h5, h6, figcaption, blockquote, '
              + 'div, span.math, section, article, main, body';
  const blocks = new Map();
  const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  for (let node = walker.nextNode(); node; node = walker.nextNode()) {
    const parent = node.parentElement;
    if (!parent || parent.closest(SKIP)) continue;
    const block = parent.closest(BLOCK) || document.body;
    blocks.set(block, (blocks.get(block) || '') + node.nodeValue);
  }
  const RAW = [
    [/\$\$/, 'raw "$$" (display maths left as text)'],
    [/(?<![\\$])\$(?!\$)[^$\n]*[^$\s\\]\$(?!\$)/, 'raw "$...$" (inline maths left as text)'],
    [/\\\(|\\\)|\\\[|\\\]/, 'raw "\\(" or "\\[" delimiters (maths MathJax did not typeset)'],
    [/\\(begin|end)\s*\{[^}]*\}/, 'raw "\\begin{...}" (an environment left as text)'],
  ];
  for (const [block, text] of blocks) {
    for (const [re, what] of RAW) {
      const m = text.match(re);
      if (m) {
        const at = Math.max(0, m.index - 30);
        out.rawTex.push({where: describe(block), what, text: snippet(text.slice(at), 100)});
        break;
      }
    }
  }

  // Images: let lazy ones load, then find those that did not.
  const imgs = [...document.images];
  await Promise.all(imgs.map((img) => {
    img.loading = 'eager';
    if (img.complete) return null;
    return new Promise((resolve) => {
      img.addEventListener('load', resolve);
      img.addEventListener('error', resolve);
      setTimeout(resolve, 10000);
    });
  }));
  for (const img of imgs) {
    out.images.push({where: describe(img), src: img.getAttribute('src') || '',
                     ok: img.complete && img.naturalWidth > 0});
  }
  out.figureCount = root.querySelectorAll('img').length;
  for (const cell of root.querySelectorAll('div.cell')) {
    const source = cell.querySelector('.cell_input, .input_area, pre');
    out.cells.push({images: cell.querySelectorAll('.cell_output img, .output img').length,
                    source: source ? snippet(source.textContent, 60) : ''});
  }

  // Code cells a reader must scroll sideways: any box in a cell (the code's <pre>, an
  // output's <pre>, a table) whose content is wider than the box. Collapsed (hidden) inputs
  // have no width and never count.
  [...root.querySelectorAll('div.cell')].forEach((cell, index) => {
    for (const el of cell.querySelectorAll('*')) {
      if (!el.checkVisibility()) continue;  // inside a folded cell: nothing to scroll
      const overflowX = getComputedStyle(el).overflowX;
      if ((overflowX === 'auto' || overflowX === 'scroll')
          && el.scrollWidth > el.clientWidth + 1) {
        const source = cell.querySelector('.cell_input, .input_area, pre');
        out.scrolls.push({cell: index, part: el.closest('.cell_output, .output') ? 'output'
                                                                                 : 'input',
                          source: source ? snippet(source.textContent, 50) : '',
                          scrollWidth: el.scrollWidth, clientWidth: el.clientWidth});
        break;  // one report per cell
      }
    }
  });

  for (const a of document.querySelectorAll('a[href], link[rel="next"], link[rel="prev"]')) {
    out.links.push({href: a.getAttribute('href'), url: a.href, where: describe(a),
                    text: snippet(a.textContent, 40)});
  }
  for (const el of document.querySelectorAll('[id]')) out.ids.push(el.id);
  for (const el of document.querySelectorAll('a[name]')) out.ids.push(el.getAttribute('name'));
  await document.fonts.ready;
  return out;
})()
"""

SCROLL_SCRIPT = r"""
(async (y) => {
  window.scrollTo(0, Math.max(0, y));
  await new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(r)));
  await document.fonts.ready;
  return window.scrollY;
})(%s)
"""

# The interactive views of a page, once plotly has drawn them (or 5 s have passed).
VIEWS_SCRIPT = r"""
(async () => {
  const views = [...document.querySelectorAll('.VIEW_CLASS')];
  const drawn = (v) => v.querySelector('.main-svg');
  const marks = (v) => [...v.querySelectorAll('.hm image, .scatterlayer .trace')].filter(
    (m) => m.tagName !== 'image' || (m.getAttribute('href') || '').startsWith('data:')).length;
  for (let t = 0; t < 100 && !views.every((v) => drawn(v) && marks(v)); t++) {
    await new Promise((r) => setTimeout(r, 50));
  }
  return views.map((v) => {
    const gd = v.querySelector('.js-plotly-plot');
    return {id: gd ? gd.id : '', drawn: !!drawn(v), marks: marks(v),
            menus: v.querySelectorAll('.updatemenu-header-group').length};
  });
})()
""".replace("VIEW_CLASS", INTERACTIVE_CLASS)

# What view N draws now: its heatmaps' pixels and its traces' visibility, and the active
# entry of its first menu.
VIEW_STATE = r"""
(() => {
  const v = document.querySelectorAll('.VIEW_CLASS')[VIEW_INDEX];
  const gd = v.querySelector('.js-plotly-plot');
  const menus = (gd.layout && gd.layout.updatemenus) || [];
  return {drawn: JSON.stringify([
            [...v.querySelectorAll('.hm image')].map((i) => i.getAttribute('href')),
            gd.data.map((t) => t.visible)]),
          active: menus.length ? (menus[0].active || 0) : 0};
})()
""".replace("VIEW_CLASS", INTERACTIVE_CLASS)

# The evidence blocks of a page as it loaded: open or not, and whether any content shows.
EVIDENCE_SCRIPT = r"""
(() => [...document.querySelectorAll('details.EVIDENCE_CLASS')].map((d) => {
  const summary = d.querySelector(':scope > summary');
  return {title: summary ? summary.textContent.replace(/[#¶]\s*$/, '').trim().slice(0, 60) : '',
          summary: !!summary, open: d.open,
          contentShown: [...d.children].some((c) => c.tagName !== 'SUMMARY'
                                                  && c.checkVisibility())};
}))()
""".replace("EVIDENCE_CLASS", EVIDENCE_CLASS)

# Evidence block N once clicked: open, its content shown, its figures and formulas drawn, and
# any of its code cells that needs a sideways scroll.
EVIDENCE_OPENED = r"""
(async () => {
  const d = document.querySelectorAll('details.EVIDENCE_CLASS')[BLOCK_INDEX];
  await new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(r)));
  const snippet = (s, n) => s.replace(/\s+/g, ' ').trim().slice(0, n);
  const shown = (el) => {
    const box = el.getBoundingClientRect();
    return el.checkVisibility() && box.width > 0 && box.height > 0;
  };
  const out = {open: d.open, images: [], maths: [], scrolls: [],
               contentShown: [...d.children].some((c) => c.tagName !== 'SUMMARY'
                                                       && c.checkVisibility())};
  for (const img of d.querySelectorAll('img')) {
    out.images.push({src: img.getAttribute('src') || '',
                     ok: img.complete && img.naturalWidth > 0 && shown(img)});
  }
  for (const m of d.querySelectorAll('.math')) {
    const c = m.querySelector('mjx-container');
    out.maths.push({tex: snippet(m.textContent, 60),
                    ok: !!c && shown(c) && !c.querySelector('mjx-merror')});
  }
  [...d.querySelectorAll('div.cell')].forEach((cell, index) => {
    for (const el of cell.querySelectorAll('*')) {
      if (!el.checkVisibility()) continue;
      const overflowX = getComputedStyle(el).overflowX;
      if ((overflowX === 'auto' || overflowX === 'scroll')
          && el.scrollWidth > el.clientWidth + 1) {
        const source = cell.querySelector('.cell_input, .input_area, pre');
        out.scrolls.push({cell: index, source: source ? snippet(source.textContent, 50) : '',
                          scrollWidth: el.scrollWidth, clientWidth: el.clientWidth});
        break;
      }
    }
  });
  d.scrollIntoView();
  await new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(r)));
  return out;
})()
""".replace("EVIDENCE_CLASS", EVIDENCE_CLASS)

SCROLL_TO_EVIDENCE = r"""
(async (i) => {
  document.querySelectorAll('details.EVIDENCE_CLASS')[i].scrollIntoView();
  await new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(r)));
  return window.scrollY;
})(%s)
""".replace("EVIDENCE_CLASS", EVIDENCE_CLASS)

FIRST_FIGURE_Y = r"""
(() => {
  const root = document.querySelector('article') || document.body;
  const img = root.querySelector('.cell_output img') || root.querySelector('img');
  return img ? img.getBoundingClientRect().top + window.scrollY : 0;
})()
"""


# ---------------------------------------------------------------------------------------
# What the page should show, from the notebook the site ships in _sources/.


def _source(cell: dict) -> str:
    source = cell.get("source", "")
    return "".join(source) if isinstance(source, list) else source


_MD_IMAGE = re.compile(r"!\[[^\]]*\]\([^)]+\)|<img\b", re.IGNORECASE)
_REMOVED = {"remove-cell", "remove-output"}


def expected_figures(notebook: Path) -> tuple[list[tuple[int, str, int]], int]:
    """([(cell index, first source line, figures in its outputs)] per code cell, total).

    A figure is a display output with an image, or an image in a markdown cell.
    """
    nb = json.loads(notebook.read_text(encoding="utf-8"))
    per_cell: list[tuple[int, str, int]] = []
    total = 0
    for index, cell in enumerate(nb.get("cells", [])):
        tags = set(cell.get("metadata", {}).get("tags", []))
        if "remove-cell" in tags:
            continue
        if cell.get("cell_type") == "markdown":
            total += len(_MD_IMAGE.findall(_source(cell)))
        elif cell.get("cell_type") == "code":
            shown = (
                0
                if tags & _REMOVED
                else sum(
                    any(m in output.get("data", {}) for m in FIGURE_MIMES)
                    for output in cell.get("outputs", [])
                )
            )
            first = next((ln for ln in _source(cell).splitlines() if ln.strip()), "")
            per_cell.append((index, first[:60], shown))
            total += shown
    return per_cell, total


def expected_views(notebook: Path) -> int:
    """Interactive views in the notebook's outputs: those that carry plotly's JSON."""
    nb = json.loads(notebook.read_text(encoding="utf-8"))
    return sum(
        PLOTLY_MIMETYPE in output.get("data", {})
        for cell in nb.get("cells", [])
        if cell.get("cell_type") == "code"
        and not {"remove-cell", "remove-output"} & set(cell.get("metadata", {}).get("tags", []))
        for output in cell.get("outputs", [])
    )


def expected_evidence(notebook: Path) -> list[tuple[str, int]]:
    """(heading, figures) for each evidence section of the notebook (`budget.evidence_sections`):
    its heading's first line and the figures its cells show (markdown images and figure
    outputs, as `expected_figures` counts them)."""
    nb = nbformat.read(notebook, as_version=4)
    sections = []
    for section in evidence_sections(nb.cells):
        figures = 0
        for cell in nb.cells[section.start : section.stop]:
            tags = set(cell.metadata.get("tags", []))
            if "remove-cell" in tags:
                continue
            if cell.cell_type == "markdown":
                figures += len(_MD_IMAGE.findall(cell.source))
            elif cell.cell_type == "code" and not tags & _REMOVED:
                figures += sum(
                    any(m in output.get("data", {}) for m in FIGURE_MIMES)
                    for output in cell.get("outputs", [])
                )
        heading = next(ln for ln in nb.cells[section.start].source.splitlines() if ln.strip())
        sections.append((heading.lstrip("# ").strip(), figures))
    return sections


def _evidence_problems(
    chrome: DevTools, page: str, expected: list[tuple[str, int]], shots: tuple[Path, Path] | None
) -> tuple[list[Problem], int, bool]:
    """Each evidence block of the open page: closed on load, opened by a click on its heading,
    then showing its figures and formulas. ``shots`` (closed, open): screenshots of the first
    block. Returns (problems, blocks checked, whether the screenshots were taken)."""
    blocks = chrome.evaluate(EVIDENCE_SCRIPT)
    problems = []
    if len(blocks) != len(expected):
        problems.append(
            Problem(
                page,
                "article",
                f"the notebook has {len(expected)} evidence section(s), the page shows "
                f"{len(blocks)} collapsed block(s)",
            )
        )
    taken = False
    for index, block in enumerate(blocks):
        element = f'evidence block {index} ("{block["title"]}")'
        if not block["summary"]:
            problems.append(Problem(page, element, "has no <summary> (its heading) to click"))
            continue
        if block["open"] or block["contentShown"]:
            problems.append(Problem(page, element, "is open on load (it should be collapsed)"))
        if shots is not None and not taken:
            shots[0].parent.mkdir(parents=True, exist_ok=True)
            chrome.evaluate(SCROLL_TO_EVIDENCE % index)
            chrome.screenshot(shots[0])
        chrome.open_evidence(index)
        opened = chrome.evaluate(EVIDENCE_OPENED.replace("BLOCK_INDEX", str(index)))
        if not opened["open"] or not opened["contentShown"]:
            problems.append(Problem(page, element, "does not open when its heading is clicked"))
            continue
        if shots is not None and not taken:
            chrome.screenshot(shots[1])
            taken = True
        want = expected[index][1] if index < len(expected) else 0
        if len(opened["images"]) < want:
            problems.append(
                Problem(
                    page,
                    element,
                    f"the notebook's section has {want} figure(s), the opened block shows "
                    f"{len(opened['images'])}",
                )
            )
        for img in opened["images"]:
            if not img["ok"]:
                problems.append(
                    Problem(page, f"{element}: image {img['src']!r}", "not shown once opened")
                )
        for maths in opened["maths"]:
            if not maths["ok"]:
                problems.append(
                    Problem(
                        page,
                        f'{element}: formula "{maths["tex"]}"',
                        "not typeset and shown once opened",
                    )
                )
        for box in opened["scrolls"]:
            problems.append(
                Problem(
                    page,
                    f"{element}: code cell {box['cell']} ({box['source']!r})",
                    f"needs horizontal scrolling in a {VIEWPORT[0]} px window: "
                    f"{box['scrollWidth']} px of content in {box['clientWidth']} px",
                )
            )
    return problems, len(blocks), taken


def _interactive_problems(
    chrome: DevTools, page: str, expected: int, screenshot: Path | None
) -> tuple[list[Problem], int, bool]:
    """Each interactive view of the open page draws and responds (menu, hover).

    Returns (problems, views checked, whether `screenshot` was taken of the first view)."""
    views = chrome.evaluate(VIEWS_SCRIPT)
    problems = []
    if len(views) < expected:
        problems.append(
            Problem(
                page,
                "article",
                f"the notebook has {expected} interactive view(s), the page shows {len(views)}",
            )
        )
    shot = False
    for index, view in enumerate(views):
        element = f"interactive view {index} (#{view['id']})"
        if not view["drawn"] or view["marks"] == 0:
            what = "no plotly .main-svg" if not view["drawn"] else "no marks drawn"
            problems.append(Problem(page, element, f"did not draw ({what}; is plotly.js loaded?)"))
            continue
        if view["menus"]:
            before = chrome.evaluate(VIEW_STATE.replace("VIEW_INDEX", str(index)))["drawn"]
            label = chrome.choose_another(index)
            after = before
            for _ in range(40):  # plotly redraws within a frame or two
                after = chrome.evaluate(VIEW_STATE.replace("VIEW_INDEX", str(index)))["drawn"]
                if after != before:
                    break
                time.sleep(0.05)
            if after == before:
                problems.append(
                    Problem(page, element, f"choosing {label!r} in its menu changed nothing drawn")
                )
        if not chrome.hover_middle(index).strip():
            problems.append(Problem(page, element, "hovering its middle shows no label"))
        if screenshot is not None and not shot:
            screenshot.parent.mkdir(parents=True, exist_ok=True)
            chrome.screenshot_view(index, screenshot)
            shot = True
    return problems, len(views), shot


def notebook_formulas(notebook: Path) -> int | None:
    """Formulas in the notebook's markdown as the LaTeX check counts them (None: no Node)."""
    try:
        count, _ = check_notebooks([notebook])
    except LatexToolMissing:
        return None
    return count


class _Ids(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.ids: set[str] = set()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        for name, value in attrs:
            if value and (name == "id" or (tag == "a" and name == "name")):
                self.ids.add(value)


def static_ids(page: Path) -> set[str]:
    parser = _Ids()
    parser.feed(page.read_text(encoding="utf-8", errors="replace"))
    return parser.ids


# ---------------------------------------------------------------------------------------


def site_pages(site: Path) -> list[Path]:
    """Every HTML page of the site, index first, the theme's own folders left out."""
    pages = [p for p in site.rglob("*.html") if p.relative_to(site).parts[0] not in SKIP_DIRS]
    return sorted(pages, key=lambda p: (p.name != "index.html" or p.parent != site, str(p)))


def _page_name(site: Path, path: Path) -> str:
    try:
        return path.relative_to(site).as_posix()
    except ValueError:
        return str(path)


def _event_problems(page: str, events: list[dict]) -> list[Problem]:
    problems = []
    urls = {}
    for event in events:
        method, params = event.get("method"), event.get("params", {})
        if method == "Network.requestWillBeSent":
            url = params["request"]["url"]
            urls[params["requestId"]] = url
            if urlsplit(url).scheme not in LOCAL_SCHEMES:
                initiator = params.get("initiator", {}).get("url") or params.get("type", "")
                problems.append(
                    Problem(
                        page,
                        f"request to {url}",
                        f"asks for something outside the site ({initiator})",
                    )
                )
        elif method == "Network.loadingFailed":
            url = urls.get(params["requestId"], "?")
            if urlsplit(url).scheme in LOCAL_SCHEMES and not params.get("canceled"):
                problems.append(
                    Problem(page, f"resource {url}", f"failed to load: {params.get('errorText')}")
                )
        elif method == "Runtime.exceptionThrown":
            details = params["exceptionDetails"]
            text = details.get("exception", {}).get("description") or details.get("text", "")
            where = f"script {details.get('url', '')}:{details.get('lineNumber', 0) + 1}"
            problems.append(Problem(page, where, f"JavaScript error: {text.splitlines()[0]}"))
        elif method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
            text = " ".join(str(a.get("value", a.get("description", ""))) for a in params["args"])
            problems.append(Problem(page, "console", f"JavaScript logged an error: {text}"))
        elif method == "Log.entryAdded":
            entry = params["entry"]
            # network failures are reported from Network.loadingFailed, blocked requests above
            if entry.get("level") == "error" and entry.get("source") != "network":
                problems.append(
                    Problem(
                        page,
                        f"console ({entry.get('source')})",
                        f"error logged: {entry.get('text')}",
                    )
                )
    return problems


def _content_problems(page: str, seen: dict) -> list[Problem]:
    problems = []
    if seen["mathjax"] not in (None, "ok"):
        problems.append(Problem(page, "MathJax", f"did not typeset the page ({seen['mathjax']})"))
    elif seen["mathjax"] is None and seen["mathElements"]:
        problems.append(
            Problem(
                page, "MathJax", f"never loaded, and the page has {seen['mathElements']} formulas"
            )
        )
    for m in seen["merrors"]:
        problems.append(
            Problem(page, f'formula "{m["tex"]}" ({m["where"]})', f"MathJax error: {m['error']}")
        )
    for r in seen["rawTex"]:
        problems.append(Problem(page, f'{r["where"]}: "{r["text"]}"', r["what"]))
    for box in seen.get("scrolls", []):
        problems.append(
            Problem(
                page,
                f"code cell {box['cell']} ({box['source']!r}), {box['part']}",
                f"needs horizontal scrolling in a {VIEWPORT[0]} px window: "
                f"{box['scrollWidth']} px of content in {box['clientWidth']} "
                "px",
            )
        )
    for img in seen["images"]:
        if not img["ok"]:
            problems.append(
                Problem(
                    page,
                    f"image {img['src']!r} ({img['where']})",
                    "did not load (naturalWidth == 0)",
                )
            )
    return problems


def _figure_problems(page: str, notebook: Path, seen: dict) -> list[Problem]:
    per_cell, total = expected_figures(notebook)
    problems = []
    if len(seen["cells"]) == len(per_cell):
        for (index, first, want), got in zip(per_cell, seen["cells"], strict=True):
            if got["images"] < want:
                problems.append(
                    Problem(
                        page,
                        f"code cell {index} ({first!r})",
                        f"the notebook has {want} figure(s) in its outputs, "
                        f"the page shows {got['images']}",
                    )
                )
    if seen["figureCount"] < total and not problems:
        problems.append(
            Problem(
                page,
                "article",
                f"the notebook has {total} figures, the page shows {seen['figureCount']}",
            )
        )
    return problems


def _link_problems(
    site: Path, page_path: Path, seen: dict, ids_of: dict[Path, set[str]]
) -> list[Problem]:
    page = _page_name(site, page_path)
    problems = []
    site_root = site.resolve()
    for link in seen["links"]:
        parts = urlsplit(link["url"])
        if parts.scheme != "file":
            continue
        target = Path(unquote(parts.path)).resolve()
        where = f"link {link['href']!r} ({link['where']})"
        if not target.is_relative_to(site_root):
            problems.append(Problem(page, where, "points outside the site"))
            continue
        if target.is_dir():
            target = target / "index.html"
        if not target.is_file():
            problems.append(
                Problem(page, where, f"points to a missing page: {_page_name(site_root, target)}")
            )
            continue
        fragment = unquote(parts.fragment)
        if fragment and target.suffix == ".html":
            if target not in ids_of:
                ids_of[target] = static_ids(target)
            if fragment not in ids_of[target]:
                problems.append(
                    Problem(
                        page,
                        where,
                        f"points to anchor #{fragment}, which "
                        f"{_page_name(site_root, target)} does not have",
                    )
                )
    return problems


def expected_exercise_links(page_path: Path, notebook: Path) -> list[tuple[int, Path, str]]:
    """(N, target page, what it is) for each exercise link the page must carry.

    A chapter page (its notebook has ``## Exercises``) links exercise N to its solution,
    ``solutions/<stem>_solutions.html#exercise-N``; a solutions page (``solutions/*_solutions``)
    links section N back to ``../<chapter>.html#exercise-N``. Other pages carry none.
    """
    try:
        cells = read_cells(notebook)
    except ValueError:
        return []
    if notebook.parent.name == "solutions" and notebook.stem.endswith("_solutions"):
        chapter = page_path.parent.parent / (notebook.stem.removesuffix("_solutions") + ".html")
        return [
            (n, chapter, "link back to the exercise") for n in range(1, len(sections(cells)) + 1)
        ]
    items = exercises(cells)
    if items is None:
        return []
    solution = page_path.parent / "solutions" / f"{page_path.stem}_solutions.html"
    return [(n, solution, "link to its solution") for n in range(1, len(items) + 1)]


def _exercise_link_problems(
    site: Path, page_path: Path, notebook: Path, seen: dict, ids_of: dict[Path, set[str]]
) -> tuple[list[Problem], int]:
    """Each exercise link the page must carry (`expected_exercise_links`): the anchor on this
    page, the link, and the anchor on its target. Returns (problems, links checked)."""
    page = _page_name(site, page_path)
    expected = expected_exercise_links(page_path, notebook)
    targets = set()
    for link in seen["links"]:
        parts = urlsplit(link["url"])
        if parts.scheme == "file":
            targets.add((Path(unquote(parts.path)).resolve(), unquote(parts.fragment)))
    problems = []
    for n, target, what in expected:
        anchor, element = f"exercise-{n}", f"exercise {n}"
        target_name = f"{_page_name(site, target)}#{anchor}"
        if anchor not in ids_of.get(page_path, set()):
            problems.append(Problem(page, element, f"the page has no element with id {anchor}"))
        if (target.resolve(), anchor) not in targets:
            problems.append(Problem(page, element, f"no {what}, {target_name}"))
        elif not target.is_file():
            problems.append(
                Problem(page, element, f"the {what} goes to a missing page, {target_name}")
            )
        else:
            if target not in ids_of:
                ids_of[target] = static_ids(target)
            if anchor not in ids_of[target]:
                problems.append(
                    Problem(
                        page,
                        element,
                        f"the {what} goes to {target_name}, but that page has no id {anchor}",
                    )
                )
    return problems, len(expected)


def _notebook_page_problems(site: Path, page: str, notebook: Path, seen: dict) -> list[Problem]:
    problems = []
    name = notebook.name
    hrefs = [link["url"] for link in seen["links"]]
    if not any(h.startswith(COLAB) and h.endswith("/" + name) for h in hrefs):
        problems.append(Problem(page, "header", f"no link to open {name} in Colab"))
    if not any(
        urlsplit(h).scheme == "file"
        and Path(unquote(urlsplit(h).path)).resolve() == notebook.resolve()
        for h in hrefs
    ):
        problems.append(Problem(page, "header", f"no link to download {name}"))
    want = notebook_formulas(notebook)
    if want is not None and seen["formulas"] < want:
        problems.append(
            Problem(
                page,
                "article",
                f"{want} formulas in the notebook's markdown, "
                f"{seen['formulas']} typeset on the page",
            )
        )
    return problems


def check_site(
    site: Path = SITE,
    *,
    browser: str | None = None,
    screenshots: Path | None = SCREENSHOTS,
    progress: bool = False,
) -> Report:
    """Open every page of ``site`` in Chromium; return the problems found.

    Raises BrowserMissing if Chromium is not installed, FileNotFoundError if the site is.
    """
    site = site.resolve()
    if not (site / "index.html").is_file():
        raise FileNotFoundError(f"no built site at {site} (run: python tools/book/build_book.py)")
    executable = find_chromium(browser)
    report = Report()
    ids_of: dict[Path, set[str]] = {}
    seen_by_page: dict[Path, dict] = {}
    with DevTools(executable) as chrome:
        for path in site_pages(site):
            page = _page_name(site, path)
            started = time.perf_counter()
            chrome.open(path.as_uri())
            seen = chrome.evaluate(PAGE_SCRIPT)
            notebook = site / "_sources" / Path(page).with_suffix(".ipynb")
            expected = expected_views(notebook) if notebook.is_file() else 0
            shot = None
            if screenshots is not None and not any(
                s.name.startswith("interactive_") for s in report.screenshots
            ):
                shot = screenshots / f"interactive_{Path(page).stem}.png"
            problems, views, taken = _interactive_problems(chrome, page, expected, shot)
            report.views += views
            if taken and shot is not None:
                report.screenshots.append(shot)
            sections = expected_evidence(notebook) if notebook.is_file() else []
            shots = None
            if screenshots is not None and not any(
                s.name.startswith("evidence_") for s in report.screenshots
            ):
                stem = Path(page).stem
                shots = (
                    screenshots / f"evidence_closed_{stem}.png",
                    screenshots / f"evidence_open_{stem}.png",
                )
            found, blocks, taken = _evidence_problems(chrome, page, sections, shots)
            problems += found
            report.evidence_blocks += blocks
            if taken and shots is not None:
                report.screenshots += list(shots)
            time.sleep(0.05)  # let the last console and network events arrive
            chrome.send("Runtime.evaluate", {"expression": "0"})
            problems = _event_problems(page, chrome.take_events()) + problems
            problems += _content_problems(page, seen)
            if notebook.is_file():
                problems += _figure_problems(page, notebook, seen)
                problems += _notebook_page_problems(site, page, notebook, seen)
            ids_of[path] = set(seen["ids"])
            seen_by_page[path] = seen
            report.pages.append(page)
            report.problems += problems
            report.formulas += seen["formulas"]
            report.images += len(seen["images"])
            report.links += len(seen["links"])
            if progress:
                print(
                    f"  {page}: {seen['formulas']} formulas, {len(seen['images'])} images, "
                    f"{len(problems)} problems ({time.perf_counter() - started:.1f} s)",
                    flush=True,
                )
        for path, seen in seen_by_page.items():
            report.problems += _link_problems(site, path, seen, ids_of)
            notebook = site / "_sources" / path.relative_to(site).with_suffix(".ipynb")
            if notebook.is_file():
                problems, checked = _exercise_link_problems(site, path, notebook, seen, ids_of)
                report.problems += problems
                report.exercise_links += checked
        if screenshots is not None:
            report.screenshots = _screenshots(chrome, site, seen_by_page, screenshots) + [
                s for s in report.screenshots if s.name.startswith(("interactive_", "evidence_"))
            ]
    return report


def _screenshots(
    chrome: DevTools, site: Path, seen_by_page: dict[Path, dict], folder: Path
) -> list[Path]:
    """The notebook page with the most figures and the one with the most display maths."""
    notebooks = {
        p: s
        for p, s in seen_by_page.items()
        if (site / "_sources" / p.relative_to(site).with_suffix(".ipynb")).is_file()
    }
    if not notebooks:
        return []
    folder.mkdir(parents=True, exist_ok=True)
    figures = max(notebooks, key=lambda p: (notebooks[p]["figureCount"], str(p)))
    maths = max(notebooks, key=lambda p: (len(notebooks[p]["displayFormulas"]), str(p)))
    shots = []
    for kind, path in (("figures", figures), ("maths", maths)):
        chrome.open(path.as_uri())
        chrome.evaluate(PAGE_SCRIPT)  # waits for MathJax, images and fonts
        if kind == "figures":
            y = chrome.evaluate(FIRST_FIGURE_Y) - 120
        else:  # where display formulas are densest within one screen
            tops = sorted(notebooks[path]["displayFormulas"])
            best = max(
                tops, key=lambda t: sum(t <= u < t + VIEWPORT[1] - 200 for u in tops), default=0
            )
            y = best - 150
        chrome.evaluate(SCROLL_SCRIPT % int(y))
        shot = folder / f"{kind}_{path.stem}.png"
        chrome.screenshot(shot)
        chrome.take_events()
        shots.append(shot)
    return shots


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "site", nargs="?", type=Path, default=SITE, help="the built site (default: _build/html)"
    )
    parser.add_argument("--browser", help="Chromium executable (default: $CHROMIUM, chromium)")
    parser.add_argument(
        "--screenshots",
        type=Path,
        default=SCREENSHOTS,
        help="folder for the screenshots (default: _build/screenshots)",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="one line per page")
    args = parser.parse_args(argv)
    start = time.perf_counter()
    try:
        report = check_site(
            args.site, browser=args.browser, screenshots=args.screenshots, progress=args.verbose
        )
    except (BrowserMissing, FileNotFoundError) as exc:
        print(f"browser check cannot run: {exc}", file=sys.stderr)
        return 2
    for problem in report.problems:
        print(problem)
    shots = ", ".join(_page_name(ROOT, s) for s in report.screenshots) or "none"
    print(
        f"browser check: {len(report.pages)} pages, {report.formulas} formulas, "
        f"{report.images} images, {report.links} links ({report.exercise_links} between "
        f"exercises and solutions), {report.views} interactive views drawn and used, "
        f"{report.evidence_blocks} evidence blocks found closed and opened, "
        f"{len(report.problems)} problems "
        f"({time.perf_counter() - start:.0f} s); screenshots: {shots}"
    )
    return 1 if report.problems else 0


if __name__ == "__main__":
    sys.exit(main())
