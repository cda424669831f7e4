"""The book's special token ids and its word-level vocabulary (notebook 01).

Every vocabulary of the book numbers its special tokens the same way, so masks, losses and
decoders can take the ids as defaults:

    `<pad>` = `PAD_ID` = 0, `<bos>` = `BOS_ID` = 1, `<eos>` = `EOS_ID` = 2,
    `<unk>` = `UNK_ID` = 3; ordinary tokens from `FIRST_TOKEN_ID` = 4.

`Vocab` (words, notebook 01), `utils.bpe.BPETokenizer` (subwords, notebook 12) and the
synthetic tasks of `utils.data` (notebook 10) all follow it; `utils.chars.CharVocab`
(notebook 13) has no special tokens.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable

from torch import Tensor

from utils.checks import check_positive_int

__all__ = [
    "PAD_ID",
    "BOS_ID",
    "EOS_ID",
    "UNK_ID",
    "FIRST_TOKEN_ID",
    "SPECIAL_TOKENS",
    "tokenize",
    "Vocab",
]

PAD_ID, BOS_ID, EOS_ID, UNK_ID = 0, 1, 2, 3
FIRST_TOKEN_ID = 4  # the first id that is not a special token
SPECIAL_TOKENS = ("<pad>", "<bos>", "<eos>", "<unk>")  # SPECIAL_TOKENS[PAD_ID] == "<pad>", ...

_TOKEN_RE = re.compile(r"\w+|[^\w\s]")


def tokenize(text: str) -> list[str]:
    """Lower-case `text` and split it into words and single punctuation marks.

    >>> tokenize("Hello, world!")
    ['hello', ',', 'world', '!']
    """
    if not isinstance(text, str):
        raise ValueError(f"text must be a str, got {type(text).__name__}")
    return _TOKEN_RE.findall(text.lower())


class Vocab:
    """A word-level vocabulary: `itos[id]` is a token, `stoi[token]` its id.

    Ids 0-3 are the special tokens `PAD`, `BOS`, `EOS`, `UNK` (`PAD_ID` .. `UNK_ID`); the
    words follow, most frequent first, ties broken alphabetically, so the same texts always
    give the same ids. `decode(encode(text))` returns the normalised text
    `" ".join(tokenize(text))` when every word is known; unknown words come back as `<unk>`.
    """

    PAD, BOS, EOS, UNK = SPECIAL_TOKENS
    SPECIALS = SPECIAL_TOKENS

    def __init__(self, tokens: Iterable[str] = ()) -> None:
        """A vocabulary of the special tokens followed by `tokens` (in that order)."""
        self.itos: list[str] = list(self.SPECIALS)
        for token in tokens:
            if not isinstance(token, str) or token in self.itos:
                raise ValueError(f"tokens must be distinct strs, not specials; got {token!r}")
            self.itos.append(token)
        self.stoi: dict[str, int] = {token: i for i, token in enumerate(self.itos)}

    @classmethod
    def build(cls, texts: Iterable[str], min_freq: int = 1) -> Vocab:
        """Count the words of `texts` and keep those seen at least `min_freq` times."""
        check_positive_int("min_freq", min_freq)
        counts = Counter(token for text in texts for token in tokenize(text))
        kept = [t for t, n in counts.items() if n >= min_freq and t not in cls.SPECIALS]
        kept.sort(key=lambda t: (-counts[t], t))
        return cls(kept)

    @property
    def pad_id(self) -> int:
        return PAD_ID

    @property
    def bos_id(self) -> int:
        return BOS_ID

    @property
    def eos_id(self) -> int:
        return EOS_ID

    @property
    def unk_id(self) -> int:
        return UNK_ID

    def __len__(self) -> int:
        return len(self.itos)

    def __contains__(self, token: object) -> bool:
        return token in self.stoi

    def __repr__(self) -> str:
        return f"Vocab(size={len(self)})"

    def encode(self, text: str, add_bos: bool = False, add_eos: bool = False) -> list[int]:
        """Token ids of `text`; unknown words map to `unk_id`."""
        ids = [self.stoi.get(token, self.unk_id) for token in tokenize(text)]
        return [self.bos_id] * add_bos + ids + [self.eos_id] * add_eos

    def decode(self, ids: Iterable[int] | Tensor, skip_special: bool = True) -> str:
        """The tokens of `ids` joined by spaces; `<pad>`, `<bos>`, `<eos>` dropped if asked.

        `<unk>` is always kept (it stands for a word, so dropping it would lose a position).
        """
        if isinstance(ids, Tensor):
            ids = ids.tolist()
        skip = {self.pad_id, self.bos_id, self.eos_id} if skip_special else set()
        tokens = []
        for i in ids:
            if isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < len(self):
                raise ValueError(f"ids must be ints in [0, {len(self)}), got {i!r}")
            if i not in skip:
                tokens.append(self.itos[i])
        return " ".join(tokens)
