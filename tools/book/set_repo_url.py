"""Point the book at another repository (a fork): `python tools/book/set_repo_url.py URL`.

Rewrites `REPO_URL` in `tools/book/book.py`, the setup cell of every notebook, chapters and
solutions (where it is the address Colab clones) and the README's "Open in Colab" link. Outputs
are untouched, so the notebooks need no re-execution. Fails, changing nothing, if any of those
places does not hold the current address where it is expected.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import nbformat

from book import REPO_URL, ROOT, all_notebook_paths, setup_cell

GITHUB = re.compile(r"^https://github\.com/([\w.-]+)/([\w.-]+?)(\.git)?/?$")


def main(argv: list[str]) -> int:
    if len(argv) != 1 or not GITHUB.match(argv[0]):
        print(
            "usage: python tools/book/set_repo_url.py https://github.com/OWNER/REPO",
            file=sys.stderr,
        )
        return 2
    new = argv[0].rstrip("/").removesuffix(".git")
    old_slug = "/".join(REPO_URL.split("/")[-2:])
    new_slug = "/".join(new.split("/")[-2:])

    # Plan every rewrite first; write only if each place holds the current address.
    writes: dict[Path, str] = {}
    book = ROOT / "tools" / "book" / "book.py"
    text = book.read_text(encoding="utf-8")
    writes[book] = text.replace(f'REPO_URL = "{REPO_URL}"', f'REPO_URL = "{new}"')
    notebooks = {}
    for path in all_notebook_paths():
        nb = nbformat.read(path, as_version=4)
        setup_cells = [c for c in nb.cells if c.cell_type == "code" and c.source == setup_cell()]
        if len(setup_cells) != 1:
            print(
                f"{path.relative_to(ROOT)}: no setup cell with the current address "
                "(run tools/book/check_notebooks.py)",
                file=sys.stderr,
            )
            return 1
        setup_cells[0].source = setup_cell(new)
        notebooks[path] = nb
    readme = ROOT / "README.md"
    text = readme.read_text(encoding="utf-8")
    writes[readme] = text.replace(old_slug, new_slug)
    unchanged = [p.name for p, t in writes.items() if t == p.read_text(encoding="utf-8")]
    if unchanged and new != REPO_URL:
        print(
            f"the current address {REPO_URL} was not found in: {', '.join(unchanged)}",
            file=sys.stderr,
        )
        return 1

    for path, text in writes.items():
        path.write_text(text, encoding="utf-8")
    for path, nb in notebooks.items():
        nbformat.write(nb, path)
    print(
        f"repository URL set to {new} (was {REPO_URL}) in tools/book/book.py, README.md and "
        f"{len(notebooks)} notebooks"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
