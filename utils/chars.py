"""A character vocabulary for character-level language models (notebook 13).

Every distinct character of a training text gets an id, in sorted (code-point) order, so the
same text always gives the same vocabulary. There is no `<unk>`: a character the vocabulary
never saw is a `ValueError` that names it, because a silent substitute would let a model
read (and a loss score) text it cannot represent.

Shapes: `encode(text)` -> `(N,)` int64 ids for a text of N characters; `decode` takes `(N,)`.

`longest_shared_substring` is the memorisation check of a generated sample: the longest
stretch of it that occurs, character for character, in the training text.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

__all__ = ["CharVocab", "longest_shared_substring"]


class CharVocab:
    """The characters of a text as ids `0 .. len(vocab) - 1`.

    Args:
        text: the text whose distinct characters form the vocabulary (non-empty).

    Attributes:
        chars: the characters, sorted; `chars[i]` has id i.
        stoi: character -> id.
    """

    def __init__(self, text: str) -> None:
        if not isinstance(text, str) or not text:
            got = "an empty string" if isinstance(text, str) else type(text).__name__
            raise ValueError(f"text must be a non-empty str, got {got}")
        self.chars: list[str] = sorted(set(text))
        self.stoi: dict[str, int] = {c: i for i, c in enumerate(self.chars)}

    def __len__(self) -> int:
        return len(self.chars)

    def __repr__(self) -> str:
        return f"CharVocab({len(self)} characters)"

    def encode(self, text: str) -> Tensor:
        """`text` (N characters) -> ids `(N,)` int64; an unseen character is a `ValueError`."""
        if not isinstance(text, str):
            raise ValueError(f"text must be a str, got {type(text).__name__}")
        unseen = sorted(set(text) - self.stoi.keys())
        if unseen:
            shown = ", ".join(repr(c) for c in unseen[:10])
            raise ValueError(
                f"text holds {len(unseen)} character(s) the vocabulary never saw: {shown}; "
                f"the vocabulary has {len(self)} characters (see .chars)"
            )
        return torch.tensor([self.stoi[c] for c in text], dtype=torch.long)

    def decode(self, ids: Tensor | Sequence[int]) -> str:
        """ids `(N,)` (a 1-D tensor or a list of ints) -> the text of N characters."""
        if isinstance(ids, Tensor):
            if ids.dim() != 1 or ids.is_floating_point() or ids.dtype == torch.bool:
                raise ValueError(
                    f"ids must be a 1-D integer tensor, got shape {tuple(ids.shape)} {ids.dtype}"
                )
            ids = ids.tolist()
        elif isinstance(ids, str) or not isinstance(ids, Sequence):
            raise ValueError(
                f"ids must be a 1-D tensor or a list of ints, got {type(ids).__name__}"
            )
        bad = [
            i
            for i in ids
            if not isinstance(i, int) or isinstance(i, bool) or not 0 <= i < len(self)
        ]
        if bad:
            raise ValueError(f"ids must be ints in [0, {len(self)}), got {bad[:5]!r}")
        return "".join(self.chars[i] for i in ids)


def longest_shared_substring(text: str, reference: str) -> str:
    """The longest substring of `text` that also occurs in `reference` (the first one found
    when several tie; "" when they share no character).

    The memorisation check of a language model's sample: a sample that shares a long
    stretch with the training text is quoting it, one that shares only what any two texts
    of the language share (a few short words) is not. Brute force without an index: for
    each start in `text` the match only has to grow past the best so far, so it asks
    `len(text) + len(answer)` substring questions (`in`) of `reference`; meant for samples
    of a few hundred characters against a reference of a few million.
    """
    for name, value in (("text", text), ("reference", reference)):
        if not isinstance(value, str):
            raise ValueError(f"{name} must be a str, got {type(value).__name__}")
    best, where = 0, 0
    for start in range(len(text)):
        # grow the candidate text[start : start + best + 1] while reference holds it
        while start + best < len(text) and text[start : start + best + 1] in reference:
            best, where = best + 1, start
    return text[where : where + best]
