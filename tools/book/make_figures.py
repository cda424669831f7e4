"""Write the book's tracked figures from the code that draws them.

    python tools/book/make_figures.py              # into figures/
    python tools/book/make_figures.py --out DIR    # into another folder

Notebooks never write into the repository (running one must not change a tracked file):
notebook 00 draws the architecture on screen, and this command writes
`figures/transformer_architecture.png`, the copy the README shows. Run it after changing
`utils/diagrams.py`, and commit the result. The PNG carries no "Software" stamp, so a re-run
with the same matplotlib gives the same bytes.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import matplotlib.pyplot as plt

from book import ROOT  # tools/book/book.py, beside this script
from utils.diagrams import draw_transformer

FIGURES = ROOT / "figures"


def make_figures(out: Path = FIGURES) -> list[Path]:
    """Draw every tracked figure into `out` (created if missing); return the paths written."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / "transformer_architecture.png"
    fig, _ = draw_transformer()
    fig.savefig(path, dpi=110, bbox_inches="tight", metadata={"Software": None})
    plt.close(fig)
    return [path]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=FIGURES, help="default: figures/")
    args = parser.parse_args(argv)
    plt.switch_backend("Agg")  # files only, no display needed
    for path in make_figures(args.out):
        print("wrote", path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
