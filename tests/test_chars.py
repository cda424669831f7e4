"""The character vocabulary of notebook 13."""

from __future__ import annotations

import pytest
import torch

from utils.chars import CharVocab


def test_round_trip_and_sorted_ids() -> None:
    text = "To be, or not to be:\nthat is the question."
    vocab = CharVocab(text)
    assert vocab.chars == sorted(set(text))
    assert len(vocab) == len(set(text))
    ids = vocab.encode(text)
    assert ids.dtype == torch.long and ids.shape == (len(text),)
    assert vocab.decode(ids) == text
    assert vocab.decode(ids.tolist()) == text
    assert vocab.encode("be")[0] == vocab.chars.index("b")


def test_same_text_same_vocabulary() -> None:
    assert CharVocab("hello world").chars == CharVocab("world hello").chars


def test_unseen_character_is_a_clear_error() -> None:
    vocab = CharVocab("abc ")
    with pytest.raises(ValueError, match=r"never saw: 'z'"):
        vocab.encode("a z")


@pytest.mark.parametrize("bad", [torch.tensor([0, 4]), [0, -1], torch.zeros(2, 2, dtype=torch.long),
                                 torch.tensor([0.0]), "ab"])
def test_bad_ids_are_rejected(bad) -> None:
    with pytest.raises(ValueError, match="ids must"):
        CharVocab("abc ").decode(bad)


@pytest.mark.parametrize("bad", ["", 3])
def test_bad_text_is_rejected(bad) -> None:
    with pytest.raises(ValueError, match="text must"):
        CharVocab(bad)
