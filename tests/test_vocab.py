"""Tests for utils.vocab: the special ids, the tokenizer and the word-level vocabulary."""

import pytest
import torch

from utils.vocab import (
    BOS_ID,
    EOS_ID,
    FIRST_TOKEN_ID,
    PAD_ID,
    SPECIAL_TOKENS,
    UNK_ID,
    Vocab,
    tokenize,
)

TEXTS = ["The cat sat on the mat.", "The dog sat, too!", "A cat and a dog."]


def test_special_ids_match_the_vocabulary():
    vocab = Vocab(["a"])
    assert (PAD_ID, BOS_ID, EOS_ID, UNK_ID) == (0, 1, 2, 3)
    assert (PAD_ID, BOS_ID, EOS_ID, UNK_ID) == (
        vocab.pad_id,
        vocab.bos_id,
        vocab.eos_id,
        vocab.unk_id,
    )
    assert [vocab.stoi[t] for t in SPECIAL_TOKENS] == [PAD_ID, BOS_ID, EOS_ID, UNK_ID]
    assert FIRST_TOKEN_ID == len(Vocab.SPECIALS) == vocab.stoi["a"]


# --- vocabulary ---------------------------------------------------------------------------------


def test_tokenize_lowercases_and_splits_punctuation():
    assert tokenize("The dog sat, too!") == ["the", "dog", "sat", ",", "too", "!"]


def test_vocab_specials_and_deterministic_order():
    vocab = Vocab.build(TEXTS)
    assert vocab.itos[:4] == ["<pad>", "<bos>", "<eos>", "<unk>"]
    assert (vocab.pad_id, vocab.bos_id, vocab.eos_id, vocab.unk_id) == (0, 1, 2, 3)
    # "the" x3; then ".", "a", "cat", "dog", "sat" x2 in code-point order; then the singletons
    assert vocab.itos[4:10] == ["the", ".", "a", "cat", "dog", "sat"]
    assert Vocab.build(reversed(TEXTS)).itos == vocab.itos
    assert all(vocab.stoi[t] == i for i, t in enumerate(vocab.itos))
    assert "cat" in vocab and "zebra" not in vocab
    assert len(Vocab.build(TEXTS, min_freq=2)) == 4 + 6


def test_vocab_round_trip_and_unk():
    vocab = Vocab.build(TEXTS)
    text = "The cat sat on the dog, too!"
    ids = vocab.encode(text, add_bos=True, add_eos=True)
    assert ids[0] == vocab.bos_id and ids[-1] == vocab.eos_id
    assert vocab.decode(ids) == " ".join(tokenize(text)) == "the cat sat on the dog , too !"
    assert vocab.encode("the zebra") == [vocab.stoi["the"], vocab.unk_id]
    assert vocab.decode(vocab.encode("the zebra")) == "the <unk>"
    assert vocab.decode(torch.tensor(ids), skip_special=False).startswith("<bos> the")
    with pytest.raises(ValueError, match=r"ids must be ints in \[0, 16\)"):
        vocab.decode([99])


def test_bad_min_freq():
    with pytest.raises(ValueError, match="min_freq must be a positive int"):
        Vocab.build(TEXTS, min_freq=0)
