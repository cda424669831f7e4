"""Point the book at another repository (a fork): `python tools/set_repo_url.py URL`.

Rewrites `REPO_URL` in `tools/book.py`, the setup cell of every notebook (where it is the
address Colab clones) and the README's "Open in Colab" links. Outputs are untouched, so the
notebooks need no re-execution.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import nbformat

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from tools.book import REPO_URL, ROOT, notebook_paths, setup_cell  # noqa: E402

GITHUB = re.compile(r"^https://github\.com/([\w.-]+)/([\w.-]+?)(\.git)?/?$")


def main(argv: list[str]) -> int:
    if len(argv) != 1 or not GITHUB.match(argv[0]):
        print("usage: python tools/set_repo_url.py https://github.com/OWNER/REPO", file=sys.stderr)
        return 2
    new = argv[0].rstrip("/").removesuffix(".git")
    old_slug = "/".join(REPO_URL.split("/")[-2:])
    new_slug = "/".join(new.split("/")[-2:])
    book = ROOT / "tools" / "book.py"
    book.write_text(book.read_text().replace(f'REPO_URL = "{REPO_URL}"', f'REPO_URL = "{new}"'))
    for path in notebook_paths():
        nb = nbformat.read(path, as_version=4)
        for cell in nb.cells:
            if cell.cell_type == "code" and cell.source == setup_cell(REPO_URL):
                cell.source = setup_cell(new)
        nbformat.write(nb, path)
    readme = ROOT / "README.md"
    readme.write_text(readme.read_text().replace(old_slug, new_slug))
    print(f"repository URL set to {new} (was {REPO_URL})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
