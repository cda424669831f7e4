"""Facts about the book that tools and tests share: where it lives, and its setup cell.

`REPO_URL` is the one place the repository's address is written. A fork sets it with
`python tools/book/set_repo_url.py URL`, which rewrites this file, every notebook's setup cell and
the README's Colab links.
"""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = ROOT / "notebooks"
SOLUTIONS = NOTEBOOKS / "solutions"  # one notebook of worked solutions per chapter (issue #18)
REPO_URL = "https://github.com/attention-book/attention-book"
# An interactive view (utils.plotting.explore_attention) in a notebook's outputs: plotly's JSON
# under this mimetype; in the HTML book it is drawn inside an element of this class.
PLOTLY_MIMETYPE = "application/vnd.plotly.v1+json"
INTERACTIVE_CLASS = "book-interactive"

SETUP_CELL_TEMPLATE = """\
# Setup, the same in every notebook: install the book in Colab, import `utils`, seed
# everything. Safe to run twice.
import importlib
import importlib.metadata
import os
import pathlib
import site
import subprocess
import sys

REPO_URL = "{repo_url}"
if "google.colab" in sys.modules:  # a Colab runtime starts without the book's files
    repo = pathlib.Path("/content/" + REPO_URL.rstrip("/").split("/")[-1])
    pip = [sys.executable, "-m", "pip", "install", "-q"]
    commands = [
        ["git", "clone", "-q", "--depth", "1", REPO_URL, str(repo)],
        [*pip, "-r", str(repo / "requirements-colab.txt")],  # what Colab lacks
        [*pip, "--no-deps", "-e", str(repo)],  # the book's package, `utils`
    ]
    for command in [] if repo.exists() else commands:
        run = subprocess.run(command, capture_output=True, text=True)
        if run.returncode != 0:  # say why, instead of a bare CalledProcessError
            raise RuntimeError(f"{' '.join(command)} failed:\\n{run.stderr}")
    # Python reads an editable install's .pth file at start-up, and this kernel started first
    importlib.invalidate_caches()
    site.addsitedir(str(importlib.metadata.distribution("attention-book").locate_file("")))
    os.chdir(repo / "notebooks")
try:
    import utils
except ModuleNotFoundError as exc:
    if exc.name != "utils":
        raise
    raise ModuleNotFoundError(
        "the book's package is not installed in this kernel's Python; run "
        f"{sys.executable} -m pip install -e <the book's folder>"
    ) from None

ROOT = pathlib.Path(utils.__file__).resolve().parent.parent  # the book's folder (editable)
utils.setup(seed=0)"""


def setup_cell(repo_url: str = REPO_URL) -> str:
    """The setup cell's source, exactly as every notebook carries it."""
    return SETUP_CELL_TEMPLATE.replace("{repo_url}", repo_url)


def notebook_paths() -> list[Path]:
    """Every chapter of the book, in reading order: ``notebooks/NN_*.ipynb``."""
    return sorted(NOTEBOOKS.glob("[0-9][0-9]_*.ipynb"))


def solution_paths() -> list[Path]:
    """Every worked-solutions notebook, in the chapters' reading order:
    ``notebooks/solutions/NN_<chapter>_solutions.ipynb``."""
    return sorted(SOLUTIONS.glob("[0-9][0-9]_*_solutions.ipynb"))


def all_notebook_paths() -> list[Path]:
    """Every notebook the tools check, run and publish: the chapters, then the solutions."""
    return notebook_paths() + solution_paths()


def is_solutions_notebook(path: Path) -> bool:
    """Whether ``path`` is named and placed as a solutions notebook (``solutions/*_solutions``)."""
    return path.parent.name == "solutions" and path.name.endswith("_solutions.ipynb")
