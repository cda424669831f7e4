"""A character vocabulary for character-level language models (notebook 13).

Every distinct character of a training text gets an id, in sorted (code-point) order, so the
same text always gives the same vocabulary. There is no `<unk>`: a character the vocabulary
never saw is a `ValueError` that names it, because a silent substitute would let a model
read (and a loss score) text it cannot represent.

Shapes: `encode(text)` -> `(N,)` int64 ids for a text of N characters; `decode` takes `(N,)`.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

__all__ = ["CharVocab"]


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
        bad = [i for i in ids if not isinstance(i, int) or isinstance(i, bool)
               or not 0 <= i < len(self)]
        if bad:
            raise ValueError(f"ids must be ints in [0, {len(self)}), got {bad[:5]!r}")
        return "".join(self.chars[i] for i in ids)
