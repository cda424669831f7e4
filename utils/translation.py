"""Notebook 12's translation recipe, written once: split, batches, decoding, scores, save/load.

Notebook 12 and `tools/experiments/train_translation.py` both import these, so the two
draw the same split and the same batches.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, NamedTuple

from sacrebleu.metrics import BLEU, CHRF

from utils.bpe import BPETokenizer
from utils.checks import check_positive_int
from utils.corpora import VersePair
from utils.data import Seq2SeqBatch, bucket_batches, make_batch, pad_batch
from utils.decoding import translate
from utils.model import Transformer

__all__ = [
    "MIN_WORDS",
    "MAX_WORDS",
    "N_DEV",
    "N_TEST",
    "SPLIT_SEED",
    "Split",
    "keep_by_length",
    "split_by_chapter",
    "batch_stream",
    "TokenCounter",
    "translate_all",
    "Scores",
    "corpus_scores",
    "TOKENIZER_FILE",
    "INFO_FILE",
    "save_translator",
    "load_translator",
]

MIN_WORDS, MAX_WORDS = 4, 30  # words per verse, on both sides: sentences, and short enough
N_DEV, N_TEST = 200, 1000  # held-out verses
SPLIT_SEED = 0
TEST_MARGIN = 50  # test chapters are drawn until this many verses spare, for the twins dropped


# --------------------------------------------------------------------------------------------
# the data split
# --------------------------------------------------------------------------------------------


def keep_by_length(
    pairs: Sequence[VersePair], min_words: int = MIN_WORDS, max_words: int = MAX_WORDS
) -> list[VersePair]:
    """The verses with `min_words` to `max_words` words (split on spaces) on both sides."""
    return [p for p in pairs if all(min_words <= len(s.split()) <= max_words for s in (p.es, p.en))]


class Split(NamedTuple):
    """Training, dev and test verses, and how many held-out verses were dropped as twins."""

    train: list[VersePair]
    dev: list[VersePair]
    test: list[VersePair]
    n_dropped: int  # held-out verses whose Spanish or English occurs verbatim in training


def split_by_chapter(
    pairs: Sequence[VersePair], seed: int = SPLIT_SEED, n_dev: int = N_DEV, n_test: int = N_TEST
) -> Split:
    """Train, dev and test verses; dev and test are whole held-out chapters, in a seeded order.

    A held-out verse whose Spanish or English also occurs in training is dropped (a verbatim
    twin would be memory, not translation).
    """
    check_positive_int("n_dev", n_dev)
    check_positive_int("n_test", n_test)
    chapters: dict[tuple[str, int], list[VersePair]] = {}
    for p in pairs:
        chapters.setdefault((p.book, p.chapter), []).append(p)
    if len(pairs) < n_dev + n_test + TEST_MARGIN:
        raise ValueError(
            f"expected at least n_dev + n_test + {TEST_MARGIN} = "
            f"{n_dev + n_test + TEST_MARGIN} verses to split, got {len(pairs)}"
        )
    keys = list(chapters)
    random.Random(seed).shuffle(keys)
    dev_keys: list[tuple[str, int]] = []
    test_keys: list[tuple[str, int]] = []
    i = 0
    while sum(len(chapters[k]) for k in dev_keys) < n_dev:
        dev_keys.append(keys[i])
        i += 1
    while sum(len(chapters[k]) for k in test_keys) < n_test + TEST_MARGIN:
        test_keys.append(keys[i])
        i += 1
        if i == len(keys) and sum(len(chapters[k]) for k in test_keys) < n_test + TEST_MARGIN:
            raise ValueError(f"the {len(pairs)} verses leave no chapter to train on")
    held = set(dev_keys) | set(test_keys)
    train = [p for k in keys if k not in held for p in chapters[k]]
    seen = {p.es for p in train} | {p.en for p in train}

    def fresh(ks: list[tuple[str, int]]) -> list[VersePair]:
        return [p for k in ks for p in chapters[k] if p.es not in seen and p.en not in seen]

    n_held = sum(len(chapters[k]) for k in dev_keys + test_keys)
    n_dropped = n_held - len(fresh(dev_keys + test_keys))
    return Split(train, fresh(dev_keys)[:n_dev], fresh(test_keys)[:n_test], n_dropped)


# --------------------------------------------------------------------------------------------
# batches
# --------------------------------------------------------------------------------------------


def batch_stream(
    src_ids: Sequence[Sequence[int]],
    tgt_ids: Sequence[Sequence[int]],
    max_tokens: int,
    seed: int = 0,
) -> Iterator[Seq2SeqBatch]:
    """Length-bucketed batches of at most `max_tokens` padded tokens, reshuffled each epoch."""
    lengths = [max(len(s), len(t) + 1) for s, t in zip(src_ids, tgt_ids, strict=True)]
    epoch = 0
    while True:
        for idx in bucket_batches(lengths, max_tokens=max_tokens, seed=seed + epoch):
            yield make_batch([(src_ids[i], tgt_ids[i]) for i in idx])
        epoch += 1


class TokenCounter:
    """An iterator over `batches` that adds up the target tokens it hands out (`.tokens`)."""

    def __init__(self, batches: Iterator[Seq2SeqBatch]) -> None:
        self.batches, self.tokens = batches, 0

    def __iter__(self) -> TokenCounter:
        return self

    def __next__(self) -> Seq2SeqBatch:
        batch = next(self.batches)
        self.tokens += batch.n_tokens
        return batch


# --------------------------------------------------------------------------------------------
# translating and scoring a test set
# --------------------------------------------------------------------------------------------


def translate_all(
    model: Transformer,
    tok: BPETokenizer,
    sources: Sequence[str],
    beam_size: int = 1,
    batch_size: int = 50,
    alpha: float = 0.6,
) -> list[str]:
    """Detokenized translations of `sources`, in their order (sorted by length inside).

    `beam_size=1` is greedy search, else beam search with length penalty `alpha`.
    """
    check_positive_int("batch_size", batch_size)
    ids = tok.encode_batch(list(sources))
    order = sorted(range(len(ids)), key=lambda i: len(ids[i]))
    device = next(model.parameters()).device
    out = [""] * len(ids)
    for start in range(0, len(order), batch_size):
        chunk = order[start : start + batch_size]
        src = pad_batch([ids[i] for i in chunk], model.config.pad_id).to(device)  # (B, S)
        hyps = translate(model, src, beam_size=beam_size, alpha=alpha)
        for i, hyp in zip(chunk, hyps, strict=True):
            out[i] = tok.decode(hyp)
    return out


class Scores(NamedTuple):
    """One system's translations of a test set and their corpus scores."""

    hyps: list[str]
    bleu: float
    chrf: float
    line: str  # sacrebleu's report: n-gram precisions, brevity penalty, length ratio, lengths
    bleu_signature: str  # what BLEU was computed with (tokenizer, smoothing, version)
    chrf_signature: str


def corpus_scores(hyps: Sequence[str], refs: Sequence[str]) -> Scores:
    """sacrebleu's corpus BLEU and chrF (its defaults) of detokenized `hyps` against `refs`."""
    hyps, refs = list(hyps), list(refs)
    if len(hyps) != len(refs):
        raise ValueError(f"expected one reference per hypothesis, got {len(refs)} for {len(hyps)}")
    bleu, chrf = BLEU(), CHRF()
    bleu_score = bleu.corpus_score(hyps, [refs])
    return Scores(
        hyps,
        bleu_score.score,
        chrf.corpus_score(hyps, [refs]).score,
        str(bleu_score),
        str(bleu.get_signature()),
        str(chrf.get_signature()),
    )


# --------------------------------------------------------------------------------------------
# the trained translator on disk
# --------------------------------------------------------------------------------------------

TOKENIZER_FILE = "tokenizer.json"
INFO_FILE = "info.json"


def save_translator(
    directory: str | Path, model: Transformer, tokenizer: BPETokenizer, info: dict[str, Any]
) -> Path:
    """Write `model` (float16 weights), `tokenizer` and `info` (recipe, scores) to `directory`.

    The model is an ordinary checkpoint (`Transformer.save_pretrained`: `config.json`,
    `model.safetensors`); beside it `tokenizer.json` (Hugging Face `tokenizers`' own format)
    and `info.json` (plain values: the recipe, the test translations and their scores).
    """
    if not isinstance(model, Transformer):
        raise ValueError(f"model must be a utils.model.Transformer, got {type(model).__name__}")
    try:
        text = json.dumps(info, indent=1)
    except TypeError as err:
        raise ValueError(f"info must be JSON-serialisable (plain Python values): {err}") from None
    directory = model.save_pretrained(directory, dtype="float16")
    (directory / TOKENIZER_FILE).write_text(tokenizer.to_str(), encoding="utf-8")
    (directory / INFO_FILE).write_text(text + "\n", encoding="utf-8")
    return directory


def load_translator(
    directory: str | Path, *, fused: bool = False
) -> tuple[Transformer, BPETokenizer, dict[str, Any]]:
    """`(model, tokenizer, info)` from a directory written by `save_translator`; eval mode.

    `fused=True` runs attention with PyTorch's kernel (as the shipped run was scored).

    Errors as `utils.checkpoint`: a missing directory or file is `FileNotFoundError`, a file
    that is not what it should be is `ValueError`; both name the file.
    """
    directory = Path(directory)
    model = Transformer.from_pretrained(directory, fused=fused)
    tok_path, info_path = directory / TOKENIZER_FILE, directory / INFO_FILE
    for path in (tok_path, info_path):
        if not path.is_file():
            raise FileNotFoundError(f"{path} is missing: {directory} holds no translator")
    try:
        tokenizer = BPETokenizer.from_str(tok_path.read_text(encoding="utf-8"))
    except Exception as err:  # tokenizers raises its own Exception type
        raise ValueError(f"{tok_path} is not a tokenizer: {err}") from None
    try:
        info = json.loads(info_path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ValueError(f"{info_path} is not valid JSON: {err}") from None
    if not isinstance(info, dict):
        raise ValueError(f"{info_path} must hold a JSON object, got {type(info).__name__}")
    return model, tokenizer, info
