"""Extract the verse-aligned Spanish-English Bible corpus from Debian's SWORD modules.

Writes `data/bible_es_en.tsv.gz`: a header line, then one aligned verse per line,
`book<TAB>chapter<TAB>verse<TAB>es<TAB>en`, in canonical order (the 66 books of the KJV canon,
then chapter, then verse). `book` is the OSIS abbreviation (`Gen`, `Ps`, `Rev`, ...). Spanish is
the Reina-Valera 1909 (`spaRV1909eb`), English the King James Version (`engKJV2006eb`, the
default) or the World English Bible (`engWEB2015eb`); all three are public domain.

Regenerate on Debian or Ubuntu (pysword goes into a throwaway venv, not into the book's
requirements):

    sudo apt-get install sword-text-sparv sword-text-kjv sword-text-web
    python3 -m venv /tmp/venv-data && /tmp/venv-data/bin/pip install pysword==0.2.8
    /tmp/venv-data/bin/python tools/data/extract_bible.py --report   # writes the shipped file
    /tmp/venv-data/bin/python tools/data/extract_bible.py --english web --out /tmp/web.tsv.gz

How a pair is made:
1. Markup is stripped (`clean_osis`): notes, section headings and Strong's numbers go; the
   words of canonical psalm titles, Psalm 119's acrostic letters and the KJV's subscriptions
   to the epistles stay, because the Reina-Valera prints them inside the neighbouring verse.
   The Spanish chapter openings lose their printed capitals (`soften_opening_capitals`).
2. Both sides are read book by book, empty verses dropped, and aligned on verse lengths with
   the Gale-Church dynamic programme (beads 1-1, 1-0, 0-1, 2-1, 1-2, 2-2). Only 1-1 beads
   whose two verses carry the same reference are kept. This matters even for the KJV, whose
   versification the Spanish module claims to share: where the Spanish numbering differs
   (Job 38-41, Numbers 12-13, Jonah 1-2, ...), the module leaves slots empty and shifts the
   following verses, so pairing by reference alone would pair different verses.

The output is byte-for-byte reproducible: fixed order, gzip level 9 with mtime 0 and no file
name in the header.
"""

from __future__ import annotations

import argparse
import functools
import gzip
import hashlib
import html
import math
import re
import sys
import unicodedata
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SWORD = Path("/usr/share/sword")
SPANISH = "spaRV1909eb"
ENGLISH = {"kjv": "engKJV2006eb", "web": "engWEB2015eb"}
HEADER = "book\tchapter\tverse\tes\ten"

# --- markup -------------------------------------------------------------------------------

_END_OF_BOOK = re.compile(r'<div\b[^>]*\beID="[^"]*"[^>]*\btype="book"[^>]*/>')
_NOTE = re.compile(r"<note\b[^>]*?(?<!/)>.*?</note>", re.S)
_SPEAKER = re.compile(r"<speaker\b[^>]*>.*?</speaker>", re.S)
_TITLE = re.compile(r"<title\b([^>]*?)(?<!/)>(.*?)</title>", re.S)
_BLOCK = re.compile(r"</?(?:l|lb|lg|div|chapter|milestone|p|list|item|title|q)\b[^>]*>")
_TAG = re.compile(r"<[^>]*>")
# The Reina-Valera module writes words the translators supplied (<transChange>) flush against
# the neighbouring <w> elements, without the space between the words.
_FLUSH = re.compile(r"(</(?:w|transChange)>)(?=<(?:w|transChange)\b)")
_USFM = re.compile(r"\\\+?[a-z]+\d*\*?")  # USFM character styles left in the KJV: \nd, \+nd*
_HEBREW = re.compile(r"[\u0590-\u05ff]+")
_STRONGS = re.compile(r"\b[HG]\d{3,5}\b")
_SPACE_BEFORE = re.compile(r" ([,.;:!?)\]])")


def _keep_title(match: re.Match[str]) -> str:
    """Words of canonical titles and untyped ones (acrostic letters, subscriptions), else none."""
    attributes, words = match.group(1), match.group(2)
    if 'canonical="true"' in attributes or "type=" not in attributes:
        return f" {words} "
    return " "


_OPENING_CAPS = re.compile(r"(?<!\w)(\w)(\w*[A-ZÁÉÍÓÚÑÜ]\w*)(?![\w.])")


def soften_opening_capitals(text: str, counts: Counter[str]) -> str:
    """The Reina-Valera's first verse of a chapter with its printed capitals made ordinary.

    The module keeps the printed convention of setting a chapter's first word in capitals
    ("EN el principio", "Y DESPUÉS movió", after a psalm title "¡OH Jehová"); the KJV module
    has no such convention. The first all-capital word of two letters or more (not one
    followed by a full stop, like ALEPH.) becomes "En" at the start of a sentence; inside one
    ("Y DESPUÉS", "Y JEHOVÁ") it takes whichever of "después"/"Después" is more frequent in
    `counts` (word counts of the whole Spanish text; a tie keeps the capital), so names keep
    their capital.
    """
    for match in _OPENING_CAPS.finditer(text):
        word = match.group(0)
        if len(word) < 2 or not word.isupper():
            continue
        before = text[: match.start()]
        lower, title = word.lower(), word[0] + word[1:].lower()
        starts = re.search(r"[^\W\d_]", before) is None or re.search(r"[.!?:]\W*$", before)
        new = title if starts or counts[title] >= counts[lower] else lower
        return before + new + text[match.end() :]
    return text


def clean_osis(raw: str) -> str:
    """The plain words of one OSIS verse: no tags, notes, headings, Strong's numbers, pilcrows.

    Text after the end-of-book marker (the WEB appends its glossary to Revelation 22:21) is
    dropped, Hebrew letters are removed, whitespace collapses to single spaces, Unicode is NFC.
    """
    text = _END_OF_BOOK.split(raw, maxsplit=1)[0]
    text = _NOTE.sub(" ", text)
    text = _SPEAKER.sub(" ", text)
    text = _TITLE.sub(_keep_title, text)
    text = _BLOCK.sub(" ", _FLUSH.sub(r"\1 ", text))
    text = _TAG.sub("", text)
    text = _USFM.sub(" ", html.unescape(text))
    text = _HEBREW.sub(" ", text).replace("\u00b6", " ")
    text = " ".join(unicodedata.normalize("NFC", text).split())
    return _SPACE_BEFORE.sub(r"\1", text)


# --- reading ------------------------------------------------------------------------------

Ref = tuple[int, int, int]  # (book index in the KJV canon, chapter, verse)


def read_module(key: str, library: Path = SWORD) -> tuple[list[str], dict[Ref, str]]:
    """Cleaned verses of one SWORD module, keyed by reference; only the 66 books of the KJV canon.

    Returns the OSIS book names in canonical order and a dict `(book, chapter, verse) -> text`
    holding the non-empty verses.
    """
    from pysword.canons import canons  # a throwaway-venv dependency: imported only when reading
    from pysword.modules import SwordModules

    canon = [book[1] for part in ("ot", "nt") for book in canons["kjv"][part]]
    modules = SwordModules(str(library))
    found = modules.parse_modules()
    if key not in found:
        raise SystemExit(f"SWORD module {key} not found under {library}: apt-get install it")
    bible = modules.get_bible_from_module(key)
    # pysword inflates a book's whole compressed block for every verse; keep the last one.
    bible._decompressed_text = functools.lru_cache(maxsize=2)(bible._decompressed_text)
    verses: dict[Ref, str] = {}
    for books in bible.get_structure().get_books().values():
        for book in books:
            if book.osis_name not in canon:
                continue  # the WEB's deuterocanon
            b = canon.index(book.osis_name)
            for chapter in range(1, book.num_chapters + 1):
                raws = bible.get_iter(books=[book.name], chapters=[chapter], clean=False)
                for verse, raw in enumerate(raws, start=1):
                    text = clean_osis(raw)
                    if text:
                        verses[(b, chapter, verse)] = text
    return canon, verses


# --- alignment ----------------------------------------------------------------------------

# Gale & Church (1993): prior probabilities of the bead types (source verses, target verses),
# and the variance of the length difference per source character. Their 6.8 is kept rather
# than the variance fitted here (about 2.5, printed by --report): verse lengths have heavier
# tails than a Gaussian, and with the fitted value the programme merges sound verses (it cut
# 18 well-aligned verses out of Job 20).
_BEADS = {(1, 1): 0.89, (1, 0): 0.005, (0, 1): 0.005, (2, 1): 0.045, (1, 2): 0.045, (2, 2): 0.01}
VARIANCE = 6.8


def length_model(es: dict[Ref, str], en: dict[Ref, str]) -> tuple[float, float]:
    """English characters per Spanish character, and the fitted variance per Spanish character.

    Both from the verses present on both sides under the same reference.
    """
    common = sorted(es.keys() & en.keys())
    ratio = sum(len(en[r]) for r in common) / sum(len(es[r]) for r in common)
    z = [(len(en[r]) - ratio * len(es[r])) / math.sqrt(len(es[r])) for r in common]
    return ratio, sum(x * x for x in z) / len(z)


def _bead_cost(l_es: int, l_en: int, ratio: float, prior: float) -> float:
    """-log P(bead) of Gale-Church: the prior times the two-sided tail of the length delta."""
    mean = (l_es + l_en / ratio) / 2
    delta = (l_en - ratio * l_es) / math.sqrt(max(mean, 1.0) * VARIANCE)
    tail = math.erfc(abs(delta) / math.sqrt(2))
    return -math.log(prior) - math.log(max(tail, 1e-300))


Bead = tuple[int, int, int, int]  # (first es index, es count, first en index, en count)


def align(es: list[int], en: list[int], ratio: float, band: int = 20) -> list[Bead]:
    """The beads of the cheapest Gale-Church path through two sequences of verse lengths.

    `es` and `en` are the character lengths of one book's verses, in order; the search stays
    within `band` verses of the diagonal, ample since versifications differ by a few verses.
    """
    n, m = len(es), len(en)
    cost: dict[tuple[int, int], float] = {(0, 0): 0.0}
    back: dict[tuple[int, int], tuple[int, int]] = {}
    for i in range(n + 1):
        centre = round(i * m / n) if n else 0
        for j in range(max(0, centre - band), min(m, centre + band) + 1):
            best, arg = math.inf, None
            for (di, dj), prior in _BEADS.items():
                prev = (i - di, j - dj)
                if prev in cost:
                    c = cost[prev] + _bead_cost(
                        sum(es[i - di : i]), sum(en[j - dj : j]), ratio, prior
                    )
                    if c < best:
                        best, arg = c, (di, dj)
            if arg is not None:
                cost[(i, j)], back[(i, j)] = best, arg
    if (n, m) not in cost:
        raise RuntimeError(f"no alignment path within a band of {band} verses")
    beads, (i, j) = [], (n, m)
    while (i, j) != (0, 0):
        di, dj = back[(i, j)]
        i, j = i - di, j - dj
        beads.append((i, di, j, dj))
    return beads[::-1]


def aligned_pairs(es: dict[Ref, str], en: dict[Ref, str]) -> tuple[list[Ref], Counter[str]]:
    """References kept (1-1 bead, same reference on both sides), and why each other Spanish
    verse went."""
    ratio, _ = length_model(es, en)
    kept: list[Ref] = []
    why: Counter[str] = Counter()
    for book in sorted({r[0] for r in es} | {r[0] for r in en}):
        src = sorted((r, t) for r, t in es.items() if r[0] == book)
        tgt = sorted((r, t) for r, t in en.items() if r[0] == book)
        for i, di, j, dj in align([len(t) for _, t in src], [len(t) for _, t in tgt], ratio):
            if (di, dj) == (1, 1) and src[i][0] == tgt[j][0]:
                kept.append(src[i][0])
            elif (di, dj) == (1, 1):
                why["1-1 with an English verse of another number (shifted numbering)"] += 1
            elif di:
                why[f"in a {di}-{dj} bead (verse boundaries differ)"] += di
    return kept, why


# --- writing ------------------------------------------------------------------------------


def gzip_bytes(text: str) -> bytes:
    """`text` as UTF-8, gzipped reproducibly: level 9, mtime 0, no file name in the header."""
    import io

    buffer = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", compresslevel=9, fileobj=buffer, mtime=0) as f:
        f.write(text.encode("utf-8"))
    return buffer.getvalue()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--english", choices=sorted(ENGLISH), default="kjv")
    parser.add_argument("--out", type=Path, default=ROOT / "data" / "bible_es_en.tsv.gz")
    parser.add_argument("--library", type=Path, default=SWORD)
    parser.add_argument("--report", action="store_true", help="print counts and spot checks")
    args = parser.parse_args(argv)

    canon, es = read_module(SPANISH, args.library)
    counts = Counter(word for t in es.values() for word in re.findall(r"\w+", t))
    es = {ref: soften_opening_capitals(t, counts) if ref[2] == 1 else t for ref, t in es.items()}
    _, en = read_module(ENGLISH[args.english], args.library)
    kept, why = aligned_pairs(es, en)
    for ref in kept:
        for side in (es[ref], en[ref]):
            if any(ch in side for ch in "\t\n<>\\") or _STRONGS.search(side):
                raise ValueError(f"verse {ref} still holds markup after cleaning: {side!r}")
    lines = [HEADER] + [
        f"{canon[b]}\t{c}\t{v}\t{es[(b, c, v)]}\t{en[(b, c, v)]}" for b, c, v in kept
    ]
    data = gzip_bytes("\n".join(lines) + "\n")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_bytes(data)
    print(
        f"wrote {args.out} ({len(data):,} bytes, {len(kept):,} pairs), "
        f"sha256 {hashlib.sha256(data).hexdigest()}"
    )
    if args.report:
        report(canon, es, en, kept, why)


def report(
    canon: list[str], es: dict[Ref, str], en: dict[Ref, str], kept: list[Ref], why: Counter[str]
) -> None:
    """Print the counts data/README.md quotes, the chapters that lost most, and spot checks."""
    ratio, var = length_model(es, en)
    both = es.keys() & en.keys()
    print(f"non-empty verses: es {len(es):,}, en {len(en):,}, same reference {len(both):,}")
    print(
        f"length model: {ratio:.3f} en chars per es char; fitted variance {var:.2f} per char "
        f"(alignment uses {VARIANCE})"
    )
    for reason, count in why.most_common():
        print(f"dropped {count:,} Spanish verses: {reason}")
    short = sum(1 for r in kept if 4 <= len(es[r].split()) <= 30 and 4 <= len(en[r].split()) <= 30)
    print(f"pairs with 4-30 words on both sides: {short:,}")
    print(
        f"distinct chapters: {len({(b, c) for b, c, _ in kept}):,}, "
        f"books: {len({b for b, _, _ in kept})}"
    )
    kept_set = set(kept)
    lost = Counter((canon[b], c) for b, c, _ in sorted(both - kept_set))
    print(
        "chapters that lost most:",
        ", ".join(f"{b} {c} ({k})" for (b, c), k in lost.most_common(12)),
    )
    for book, chapter, verse in [
        ("Gen", 1, 1),
        ("Ps", 3, 1),
        ("Job", 39, 1),
        ("Num", 13, 1),
        ("John", 3, 16),
        ("Rom", 16, 27),
    ]:
        ref = (canon.index(book), chapter, verse)
        state = "kept" if ref in kept_set else "dropped"
        print(f"{book} {chapter}:{verse} ({state})")
        print(f"  es: {es.get(ref, '')}\n  en: {en.get(ref, '')}")


if __name__ == "__main__":
    main(sys.argv[1:])
