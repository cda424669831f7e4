"""Joint BPE tokenizer: the book's special ids, determinism, round trip, bad input."""

import pytest

from utils.bpe import BPETokenizer
from utils.vocab import BOS_ID, EOS_ID, FIRST_TOKEN_ID, PAD_ID, SPECIAL_TOKENS, UNK_ID

TEXTS = [
    "En el principio creó Dios los cielos y la tierra.",
    "In the beginning God created the heaven and the earth.",
    "Y la tierra estaba desordenada y vacía.",
    "And the earth was without form, and void; and darkness was upon the deep.",
    "Y dijo Dios: Sea la luz: y fué la luz.",
    "And God said, Let there be light: and there was light.",
] * 5


@pytest.fixture(scope="module")
def tok():
    return BPETokenizer.train(TEXTS, vocab_size=120)


def test_special_ids_are_the_books(tok):
    ids = [tok.tokenizer.token_to_id(t) for t in SPECIAL_TOKENS]
    assert ids == [PAD_ID, BOS_ID, EOS_ID, UNK_ID] == [0, 1, 2, 3]
    assert FIRST_TOKEN_ID == 4
    assert min(tok.encode(TEXTS[0])) >= FIRST_TOKEN_ID


def test_training_is_deterministic(tok):
    again = BPETokenizer.train(TEXTS, vocab_size=120)
    assert again.to_str() == tok.to_str()


def test_vocab_size_is_respected(tok):
    assert 4 < tok.vocab_size <= 120


def test_round_trip_gives_the_text_back(tok):
    for text in TEXTS[:6] + ["Dios dijo: luz, tierra; cielos."]:
        assert tok.decode(tok.encode(text)) == text


def test_decode_skips_specials_and_normalises_spaces(tok):
    ids = tok.encode("la  luz ")
    assert tok.decode([BOS_ID, *ids, EOS_ID, PAD_ID, PAD_ID]) == "la luz"


def test_pieces_mark_word_starts(tok):
    pieces = tok.tokens("la luz")
    assert pieces[0].startswith("\u2581")
    assert "".join(pieces).replace("\u2581", " ").strip() == "la luz"


def test_unseen_character_becomes_unk(tok):
    ids = tok.encode("luz \u65e5")
    assert UNK_ID in ids
    assert tok.decode(ids) == "luz"


def test_saved_tokenizer_encodes_the_same(tok):
    again = BPETokenizer.from_str(tok.to_str())
    assert again.encode(TEXTS[3]) == tok.encode(TEXTS[3])


@pytest.mark.parametrize("text", ["", "   ", "\n"])
def test_empty_sentence_is_a_clear_error(tok, text):
    with pytest.raises(ValueError, match="non-empty sentence"):
        tok.encode(text)
    with pytest.raises(ValueError, match="non-empty sentence"):
        tok.encode_batch(["luz", text])


def test_bad_arguments(tok):
    with pytest.raises(ValueError, match="expected a sentence as str"):
        tok.encode(5)
    with pytest.raises(ValueError, match="got one str"):
        tok.encode_batch("luz")
    with pytest.raises(ValueError, match="ids in"):
        tok.decode([tok.vocab_size])
    with pytest.raises(ValueError, match="vocab_size"):
        BPETokenizer.train(TEXTS, vocab_size=4)
    with pytest.raises(ValueError, match="non-empty sentence"):
        BPETokenizer.train(["", " "], vocab_size=50)


def test_merges_are_in_training_order(tok):
    merges = tok.merges
    alphabet = {ch for t in TEXTS for ch in " ".join(t.split()).replace(" ", "\u2581")} | {"\u2581"}
    # every merge adds one entry: specials + characters + merges fill the vocabulary
    assert len(merges) == tok.vocab_size - len(SPECIAL_TOKENS) - len(alphabet)
    vocab = tok.tokenizer.get_vocab()
    assert all(
        vocab[a + b] == len(SPECIAL_TOKENS) + len(alphabet) + k for k, (a, b) in enumerate(merges)
    )


def test_first_merge_is_the_most_frequent_pair(tok):
    # Count adjacent character pairs inside the pre-tokenized words, from scratch.
    counts: dict[tuple[str, str], int] = {}
    pre = tok.tokenizer.pre_tokenizer
    for text in TEXTS:
        for word, _ in pre.pre_tokenize_str(tok.tokenizer.normalizer.normalize_str(text)):
            for pair in zip(word[:-1], word[1:], strict=True):
                counts[pair] = counts.get(pair, 0) + 1
    top = max(counts.values())
    assert counts[tok.merges[0]] == top
