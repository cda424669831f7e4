"""Subword tokenization: a joint byte-pair-encoding (BPE) vocabulary for translation -- notebook 12.

`BPETokenizer.train(texts, vocab_size)` learns one BPE vocabulary from source and target text
together (a *joint* vocabulary, as in the paper's English-German setup), offline and in
seconds, with the `tokenizers` package. The ids follow the book's convention
(`utils.vocab`): `<pad>` 0, `<bos>` 1, `<eos>` 2, `<unk>` 3, subwords from 4.

Words are split on whitespace and punctuation is kept as its own pieces; a word-initial
piece carries the marker `▁` (U+2581), so `decode(encode(text))` gives the text back with
single spaces (detokenized text, what BLEU should be computed on). A character the training
text never contained becomes `<unk>` (id 3); it is not an error. An empty (or all-space)
sentence is an error: `encode` raises `ValueError`, because a translation model has nothing
to attend to.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence

from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

from utils.vocab import FIRST_TOKEN_ID, SPECIAL_TOKENS

WORD_MARK = "\u2581"  # "▁", marks a piece that starts a word


class BPETokenizer:
    """A trained BPE vocabulary with the book's special ids.

    Build one with `BPETokenizer.train(...)` (or from a saved JSON string with
    `BPETokenizer.from_str`). `encode` maps a sentence to subword ids (no `<bos>`/`<eos>`;
    `utils.data.make_batch` adds them), `decode` maps ids back to text, skipping specials.
    """

    def __init__(self, tokenizer: Tokenizer) -> None:
        for i, token in enumerate(SPECIAL_TOKENS):
            if tokenizer.token_to_id(token) != i:
                raise ValueError(
                    f"expected special token {token!r} at id {i}, "
                    f"got id {tokenizer.token_to_id(token)}"
                )
        self.tokenizer = tokenizer

    @classmethod
    def train(cls, texts: Iterable[str], vocab_size: int, min_frequency: int = 2) -> BPETokenizer:
        """Learn a BPE vocabulary of (at most) `vocab_size` entries, specials included.

        Deterministic: the same texts in the same order give the same vocabulary.

        Args:
            texts: the training sentences (for a joint vocabulary, both languages).
            vocab_size: total size, the 4 specials and the base characters included.
            min_frequency: a pair is merged only if it occurs at least this often.
        """
        if isinstance(vocab_size, bool) or not isinstance(vocab_size, int) or vocab_size <= 4:
            raise ValueError(f"vocab_size must be an int > 4, got {vocab_size!r}")
        if isinstance(texts, str):
            raise ValueError("texts must be an iterable of sentences, got one str")
        texts = list(texts)
        if not any(isinstance(t, str) and t.strip() for t in texts):
            raise ValueError("texts must contain at least one non-empty sentence")
        tok = Tokenizer(models.BPE(unk_token="<unk>"))
        tok.normalizer = normalizers.Sequence(
            [normalizers.NFC(), normalizers.Replace(Regex(r"\s+"), " "), normalizers.Strip()]
        )
        tok.pre_tokenizer = pre_tokenizers.Sequence(
            [pre_tokenizers.Metaspace(replacement=WORD_MARK), pre_tokenizers.Punctuation()]
        )
        tok.decoder = decoders.Metaspace(replacement=WORD_MARK)
        trainer = trainers.BpeTrainer(
            vocab_size=vocab_size,
            min_frequency=min_frequency,
            special_tokens=list(SPECIAL_TOKENS),
            show_progress=False,
        )
        tok.train_from_iterator(texts, trainer=trainer)
        return cls(tok)

    @classmethod
    def from_str(cls, json: str) -> BPETokenizer:
        """A tokenizer from `to_str()`'s JSON."""
        return cls(Tokenizer.from_str(json))

    def to_str(self) -> str:
        """The whole tokenizer (vocabulary, merges, normalizer) as a JSON string."""
        return self.tokenizer.to_str()

    @property
    def merges(self) -> list[tuple[str, str]]:
        """The learned merges, in the order training made them: `(left, right)` symbol pairs.

        Merge `k` joined the most frequent adjacent pair after merges `0..k-1` (Sennrich et al.,
        2016); notebook 12 re-derives the first ones with a loop of its own.
        """
        merges = json.loads(self.to_str())["model"]["merges"]
        # tokenizers writes ["a", "b"] pairs; versions before 0.20 wrote "a b" strings.
        return [tuple(m) if isinstance(m, list) else tuple(m.split(" ", 1)) for m in merges]

    @property
    def vocab_size(self) -> int:
        """Number of ids, specials included (the model's `src_vocab_size`/`tgt_vocab_size`)."""
        return self.tokenizer.get_vocab_size()

    def _check_text(self, text: object) -> str:
        if not isinstance(text, str):
            raise ValueError(f"expected a sentence as str, got {type(text).__name__}")
        if not text.strip():
            raise ValueError(f"expected a non-empty sentence, got {text!r}")
        return text

    def encode(self, text: str) -> list[int]:
        """Subword ids of one sentence, without `<bos>`/`<eos>`; unseen characters -> 3."""
        return self.tokenizer.encode(self._check_text(text), add_special_tokens=False).ids

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        """`encode` for many sentences at once."""
        if isinstance(texts, str):
            raise ValueError("expected a sequence of sentences, got one str")
        texts = [self._check_text(t) for t in texts]
        return [e.ids for e in self.tokenizer.encode_batch(texts, add_special_tokens=False)]

    def tokens(self, text: str) -> list[str]:
        """The subword strings of one sentence (`▁` marks a word start)."""
        return self.tokenizer.encode(self._check_text(text), add_special_tokens=False).tokens

    def id_to_token(self, i: int) -> str:
        """The string of id `i`."""
        token = self.tokenizer.id_to_token(i)
        if token is None:
            raise ValueError(f"expected an id in [0, {self.vocab_size}), got {i!r}")
        return token

    def decode(self, ids: Sequence[int]) -> str:
        """Detokenized text of `ids`; specials (`<pad>`, `<bos>`, `<eos>`, `<unk>`) are skipped."""
        ids = [int(i) for i in ids]
        bad = [i for i in ids if not 0 <= i < self.vocab_size]
        if bad:
            raise ValueError(f"expected ids in [0, {self.vocab_size}), got {bad[:5]}")
        return self.tokenizer.decode([i for i in ids if i >= FIRST_TOKEN_ID]).strip()
