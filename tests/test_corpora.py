"""`utils.corpora`: the shipped corpora load, have the promised size and shape, and hold no
markup; the extraction tools' cleaning steps do what their docstrings say."""

import dataclasses
import gzip
import re
import string
from collections import Counter

import pytest

from extract_bible import clean_osis, soften_opening_capitals  # tools/data is on pytest's path
from extract_shakespeare import convert_play, to_text
from utils.corpora import VersePair, load_parallel_verses, load_shakespeare


@pytest.fixture(scope="module")
def pairs():
    return load_parallel_verses()


@pytest.fixture(scope="module")
def plays():
    return load_shakespeare()


def test_verse_pairs_count_and_fields(pairs):
    assert len(pairs) >= 30_000
    assert all(isinstance(p, VersePair) for p in pairs)
    assert all(p.book and p.es and p.en and p.chapter >= 1 and p.verse >= 1 for p in pairs)
    assert len({p.book for p in pairs}) == 66
    assert len({(p.book, p.chapter) for p in pairs}) >= 1_150  # the chapter-level split
    short = [p for p in pairs if 4 <= len(p.es.split()) <= 30 and 4 <= len(p.en.split()) <= 30]
    assert len(short) >= 20_000
    with pytest.raises(dataclasses.FrozenInstanceError):
        pairs[0].en = "changed"


def test_verse_pairs_in_canonical_order_without_duplicates(pairs):
    refs = [(p.book, p.chapter, p.verse) for p in pairs]
    assert len(set(refs)) == len(refs)
    books = list(dict.fromkeys(p.book for p in pairs))
    assert books[0] == "Gen" and books[-1] == "Rev"
    order = [(books.index(b), c, v) for b, c, v in refs]
    assert order == sorted(order)


def test_verse_pairs_hold_no_markup(pairs):
    text = "\n".join(side for p in pairs for side in (p.es, p.en))
    assert len(text.split("\n")) == 2 * len(pairs)  # no newline inside a verse
    for mark in ("<", ">", "\\", "\t", "¶", "  ", "\n ", " \n"):  # tags, USFM, spacing
        at = text.find(mark)
        assert at < 0, (mark, text[max(0, at - 60) : at + 60])
    strongs = re.search(r"[HG]\d", text)  # Strong's numbers: H1234, G1234
    assert strongs is None, text[max(0, strongs.start() - 60) : strongs.end() + 60]


def test_verse_pairs_sides_are_spanish_and_english(pairs):
    def share(pattern, texts):
        pattern = re.compile(pattern)
        return sum(1 for t in texts if pattern.search(t)) / len(texts)

    sample = pairs[::7]  # every seventh pair is plenty for shares, and fast
    es, en = [p.es for p in sample], [p.en for p in sample]
    assert share(r"\b(?:the|and)\b", en) > 0.9
    assert share(r"\b(?:the|and)\b", es) < 0.01
    assert share(r"\b(?:de|la|y|que)\b", es) > 0.9
    assert share(r"[ñáéíóú]", en) < 0.001
    first = pairs[0]
    assert (first.book, first.chapter, first.verse) == ("Gen", 1, 1)
    assert first.en == "In the beginning God created the heaven and the earth."
    assert first.es.startswith("En el principio")  # chapter-opening capitals softened


def test_shakespeare_size_and_alphabet(plays):
    assert 4_500_000 <= len(plays) <= 5_100_000
    chars = set(plays)
    assert 60 <= len(chars) <= 80
    allowed = set(string.ascii_letters + string.digits + " \n!\"&',-.:;?—")
    assert set(chars) <= allowed, set(chars) - allowed
    for mark in ("**", "_", "#", "[", "]", "\\", "  "):
        assert mark not in plays, mark


def test_shakespeare_is_name_colon_speeches(plays):
    assert plays.endswith("\n\n") and "\n\n\n" not in plays
    speeches = plays[:-2].split("\n\n")
    assert len(speeches) >= 25_000
    for speech in speeches:
        name, *lines = speech.split("\n")
        assert name.endswith(":") and len(name) > 1 and lines, speech[:80]
        assert all(line and line == line.strip() for line in lines), speech[:80]


def test_loaders_explain_a_missing_or_broken_file(tmp_path):
    with pytest.raises(FileNotFoundError, match="extract_bible.py"):
        load_parallel_verses(tmp_path / "nope.tsv.gz")
    with pytest.raises(FileNotFoundError, match="extract_shakespeare.py"):
        load_shakespeare(tmp_path / "nope.txt.gz")
    bad = tmp_path / "bad.tsv.gz"
    bad.write_bytes(gzip.compress(b"book\tchapter\tverse\tes\ten\nGen\t1\t1\tEn el\n"))
    with pytest.raises(ValueError, match="line 2: expected 5 non-empty"):
        load_parallel_verses(bad)
    bad.write_bytes(gzip.compress(b"book\tchapter\tverse\ten\tes\n"))
    with pytest.raises(ValueError, match="expected the header"):
        load_parallel_verses(bad)
    bad.write_bytes(gzip.compress(b"book\tchapter\tverse\tes\ten\nGen\tone\t1\tEn\tIn\n"))
    with pytest.raises(ValueError, match="chapter and verse numbers"):
        load_parallel_verses(bad)
    empty = tmp_path / "empty.txt.gz"
    empty.write_bytes(gzip.compress(b""))
    with pytest.raises(ValueError, match="empty file"):
        load_shakespeare(empty)


def test_clean_osis_keeps_words_and_drops_markup():
    raw = (
        '<div type="x-milestone" subType="x-preverse" sID="pv1"/><title canonical="true" '
        'type="psalm">A <w lemma="strong:H4210">Psalm</w>.</title> <title type="section">'
        'Heading</title><q marker="" who="Jesus">¶ <w lemma="strong:G1063">For</w> '
        '<divineName>\\nd <w lemma="strong:H3068">LORD</w></divineName>\\+nd*<note '
        'placement="foot">a note G1234</note> &amp; <w>hear</w><transChange type="added">'
        'ye</transChange><w>it</w> ,</q> <div eID="b1" type="book"/> glossary after the book'
    )
    assert clean_osis(raw) == "A Psalm. For LORD & hear ye it,"


def test_soften_opening_capitals():
    counts = Counter({"Jehová": 5, "jehová": 0, "después": 9, "Después": 1})
    assert soften_opening_capitals("EN el principio", counts) == "En el principio"
    assert soften_opening_capitals("Y DESPUÉS movió", counts) == "Y después movió"
    assert soften_opening_capitals("Y JEHOVÁ dijo", counts) == "Y Jehová dijo"
    assert soften_opening_capitals("Salmo de David. ¡OH Dios", counts) == "Salmo de David. ¡Oh Dios"
    assert soften_opening_capitals("ALEPH. BIEN", counts) == "ALEPH. Bien"


def test_convert_play_drops_directions_and_mends_split_names():
    markdown = "\n".join(
        [
            "# A Play",
            "",
            "## ACT I",
            "",
            "### SCENE I. A heath.",
            "",
            "_Enter two_",
            "",
            "**FIRST**  ",
            "_\\[Aside]_  ",
            "Hail, friend\\--and well met.  ",
            "No, no; he'll __\\[ ]_  ",
            "",
            "_Exit SECOND, with",
            "attendants_",
            "",
            "Who comes here?",
            "BISHOP",
            "",
            "**OF ELY**  ",
            "Peace.",
            "",
        ]
    )
    speeches = convert_play(markdown)
    assert speeches == [
        ("FIRST", ["Hail, friend--and well met.", "No, no; he'll", "Who comes here?"]),
        ("BISHOP OF ELY", ["Peace."]),
    ]
    assert to_text(speeches).startswith("FIRST:\nHail, friend--and well met.\n")
