"""The character vocabulary of notebook 13."""

from __future__ import annotations

import pytest
import torch

from utils.chars import CharVocab, longest_shared_substring


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


@pytest.mark.parametrize(
    "bad",
    [torch.tensor([0, 4]), [0, -1], torch.zeros(2, 2, dtype=torch.long), torch.tensor([0.0]), "ab"],
)
def test_bad_ids_are_rejected(bad) -> None:
    with pytest.raises(ValueError, match="ids must"):
        CharVocab("abc ").decode(bad)


@pytest.mark.parametrize("bad", ["", 3])
def test_bad_text_is_rejected(bad) -> None:
    with pytest.raises(ValueError, match="text must"):
        CharVocab(bad)


@pytest.mark.parametrize(
    ("text", "reference", "expected"),
    [
        ("xx to be or yy", "whether to be, or not to be", " to be"),
        ("abcdef", "zzcdezzabzz", "cde"),  # the longest, not the first, match
        ("abc", "xyz", ""),
        ("", "anything", ""),
        ("the whole sample", "quoting the whole sample here", "the whole sample"),
    ],
)
def test_longest_shared_substring(text: str, reference: str, expected: str) -> None:
    assert longest_shared_substring(text, reference) == expected


def test_longest_shared_substring_agrees_with_an_exhaustive_search() -> None:
    g = torch.Generator().manual_seed(0)
    alphabet = "ab c"
    for _ in range(20):
        text = "".join(alphabet[i] for i in torch.randint(0, 4, (12,), generator=g).tolist())
        ref = "".join(alphabet[i] for i in torch.randint(0, 4, (40,), generator=g).tolist())
        every = [
            text[i:j] for i in range(len(text)) for j in range(i, len(text) + 1) if text[i:j] in ref
        ]
        assert len(longest_shared_substring(text, ref)) == max(map(len, every))
        assert longest_shared_substring(text, ref) in ref


def test_longest_shared_substring_rejects_non_strings() -> None:
    with pytest.raises(ValueError, match="reference must be a str, got list"):
        longest_shared_substring("abc", ["abc"])
