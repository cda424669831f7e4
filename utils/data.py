"""Batching for training: padding, the shifted decoder input, length buckets, synthetic tasks.

Notebook 10 derives these; every later notebook that trains uses them. Special ids are
those of `utils.vocab`; synthetic tokens are drawn from `[FIRST_TOKEN_ID, vocab_size)`.
Every draw uses its own seeded generator, never the global random state, so data do not
change when a notebook adds a cell that draws random numbers.
"""

from __future__ import annotations

import random
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import cast

import torch
from torch import Tensor

from utils.checks import check_positive_int
from utils.vocab import BOS_ID, EOS_ID, FIRST_TOKEN_ID, PAD_ID

__all__ = [
    "TASKS",
    "pad_batch",
    "decoder_io",
    "Seq2SeqBatch",
    "make_batch",
    "bucket_batches",
    "random_batches",
    "padding_fraction",
    "synthetic_pairs",
    "task_batches",
    "seen_sources",
    "unseen_pairs",
    "LMBatch",
    "lm_blocks",
    "lm_batches",
]

TASKS = ("copy", "reverse")

IdSequence = Sequence[int] | Tensor


# --------------------------------------------------------------------------------------------
# argument checks
# --------------------------------------------------------------------------------------------


def _check_id(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{name} must be a non-negative int (a token id), got {value!r}")
    return value


def _as_id_list(seq: object, name: str) -> list[int]:
    """One sequence of token ids (list/tuple of ints or a 1-D integer tensor) as a list."""
    if isinstance(seq, Tensor):
        if seq.dim() != 1 or seq.is_floating_point() or seq.dtype == torch.bool:
            raise ValueError(
                f"{name} must be a 1-D integer tensor, got shape {tuple(seq.shape)} {seq.dtype}"
            )
        return seq.tolist()
    if isinstance(seq, str) or not isinstance(seq, Sequence):
        raise ValueError(f"{name} must be a sequence of int token ids, got {type(seq).__name__}")
    ids = list(seq)
    for token in ids:
        if isinstance(token, bool) or not isinstance(token, int):
            raise ValueError(f"{name} must hold int token ids, got {token!r}")
    return ids


def _as_id_lists(seqs: object, name: str) -> list[list[int]]:
    if isinstance(seqs, Tensor) and seqs.dim() == 2:
        seqs = list(seqs)
    if isinstance(seqs, str | Tensor) or not isinstance(seqs, Sequence):
        raise ValueError(f"{name} must be a sequence of id sequences, got {type(seqs).__name__}")
    if len(seqs) == 0:
        raise ValueError(f"{name} must hold at least one sequence, got none")
    return [_as_id_list(s, f"{name}[{i}]") for i, s in enumerate(seqs)]


# --------------------------------------------------------------------------------------------
# padding and the shifted decoder input
# --------------------------------------------------------------------------------------------


def pad_batch(seqs: Sequence[IdSequence], pad_id: int, length: int | None = None) -> Tensor:
    """Right-pad B id sequences into one `(B, L)` int64 tensor; L defaults to the longest."""
    rows = _as_id_lists(seqs, "seqs")
    _check_id("pad_id", pad_id)
    longest = max(len(r) for r in rows)
    if length is None:
        length = longest
    elif isinstance(length, bool) or not isinstance(length, int) or length < 0:
        raise ValueError(f"length must be a non-negative int or None, got {length!r}")
    elif longest > length:
        raise ValueError(
            f"a sequence of {longest} tokens does not fit length={length}; "
            f"pass length >= {longest} or None"
        )
    out = torch.full((len(rows), length), pad_id, dtype=torch.long)
    for b, row in enumerate(rows):
        if row:
            out[b, : len(row)] = torch.tensor(row, dtype=torch.long)
    return out


def decoder_io(
    targets: Sequence[IdSequence], bos_id: int = BOS_ID, eos_id: int = EOS_ID, pad_id: int = PAD_ID
) -> tuple[Tensor, Tensor]:
    """Teacher forcing: targets `y1 .. yn` -> input `<bos> y1 .. yn`, labels `y1 .. yn <eos>`.

    Returns `(tgt_in, tgt_out)`, both `(B, T)` int64 with T = max n + 1, padded with `pad_id`.
    """
    rows = _as_id_lists(targets, "targets")
    for name, value in (("bos_id", bos_id), ("eos_id", eos_id), ("pad_id", pad_id)):
        _check_id(name, value)
    if len({bos_id, eos_id, pad_id}) != 3:
        raise ValueError(f"bos_id, eos_id and pad_id must differ, got {bos_id}, {eos_id}, {pad_id}")
    tgt_in = pad_batch([[bos_id, *r] for r in rows], pad_id)
    tgt_out = pad_batch([[*r, eos_id] for r in rows], pad_id)
    return tgt_in, tgt_out


# --------------------------------------------------------------------------------------------
# batches
# --------------------------------------------------------------------------------------------


@dataclass
class Seq2SeqBatch:
    """One encoder-decoder batch: `src (B, S)`, `tgt_in (B, T)`, `tgt_out (B, T)`, right-padded."""

    src: Tensor
    tgt_in: Tensor
    tgt_out: Tensor
    pad_id: int = PAD_ID

    def __post_init__(self) -> None:
        for name in ("src", "tgt_in", "tgt_out"):
            value = getattr(self, name)
            if not isinstance(value, Tensor) or value.dim() != 2:
                got = tuple(value.shape) if isinstance(value, Tensor) else type(value).__name__
                raise ValueError(f"{name} must be a 2-D (batch, seq) tensor, got {got}")
        if self.tgt_in.shape != self.tgt_out.shape:
            raise ValueError(
                f"tgt_in and tgt_out must have one shape, got {tuple(self.tgt_in.shape)} "
                f"and {tuple(self.tgt_out.shape)}"
            )
        if self.src.shape[0] != self.tgt_in.shape[0]:
            raise ValueError(
                f"src and targets must have one batch size, got {self.src.shape[0]} "
                f"and {self.tgt_in.shape[0]}"
            )

    def to(self, device: torch.device | str) -> Seq2SeqBatch:
        """The same batch on `device` (non-blocking copies where the source allows it)."""
        return Seq2SeqBatch(
            self.src.to(device, non_blocking=True),
            self.tgt_in.to(device, non_blocking=True),
            self.tgt_out.to(device, non_blocking=True),
            self.pad_id,
        )

    def __len__(self) -> int:
        return self.src.shape[0]

    @property
    def n_tokens(self) -> int:
        """The number of non-pad labels, the tokens the loss averages over (a sync if on a GPU)."""
        return int((self.tgt_out != self.pad_id).sum())

    @property
    def padding_fraction(self) -> float:
        """The share of padding among the cells of `src` and `tgt_out` together."""
        cells = self.src.numel() + self.tgt_out.numel()
        pads = int((self.src == self.pad_id).sum()) + int((self.tgt_out == self.pad_id).sum())
        return pads / cells if cells else 0.0


def make_batch(
    pairs: Sequence[tuple[IdSequence, IdSequence]],
    pad_id: int = PAD_ID,
    bos_id: int = BOS_ID,
    eos_id: int = EOS_ID,
) -> Seq2SeqBatch:
    """A `Seq2SeqBatch` from `(source ids, target ids)` pairs (targets without specials)."""
    if isinstance(pairs, str) or not isinstance(pairs, Sequence) or len(pairs) == 0:
        raise ValueError(
            f"pairs must be a non-empty sequence of (source, target) pairs, got {pairs!r}"
        )
    for i, pair in enumerate(pairs):
        if not isinstance(pair, tuple | list) or len(pair) != 2:
            raise ValueError(f"pairs[{i}] must be a (source, target) pair, got {pair!r}")
    src = pad_batch([p[0] for p in pairs], pad_id)
    tgt_in, tgt_out = decoder_io([p[1] for p in pairs], bos_id, eos_id, pad_id)
    return Seq2SeqBatch(src, tgt_in, tgt_out, pad_id)


# --------------------------------------------------------------------------------------------
# length buckets
# --------------------------------------------------------------------------------------------


def _check_lengths(lengths: object) -> list[int]:
    if isinstance(lengths, Tensor):
        lengths = lengths.tolist()
    if isinstance(lengths, str) or not isinstance(lengths, Sequence) or len(lengths) == 0:
        raise ValueError(f"lengths must be a non-empty sequence of ints, got {lengths!r}")
    out = list(lengths)
    for n in out:
        if isinstance(n, bool) or not isinstance(n, int) or n < 0:
            raise ValueError(f"lengths must be non-negative ints, got {n!r}")
    return out


def bucket_batches(
    lengths: Sequence[int],
    max_tokens: int | None = None,
    batch_size: int | None = None,
    shuffle: bool = True,
    seed: int = 0,
) -> list[list[int]]:
    """Batches of example indices, grouped by length so each batch carries little padding.

    A batch closes at `batch_size` examples or when `len(batch) * longest` would exceed
    `max_tokens` (the padded size compute scales with). The batch order is then shuffled, so
    training does not see short sequences first.
    """
    lens = _check_lengths(lengths)
    if max_tokens is None and batch_size is None:
        raise ValueError("give max_tokens or batch_size (or both), got neither")
    if max_tokens is not None:
        check_positive_int("max_tokens", max_tokens)
        if max(lens) > max_tokens:
            raise ValueError(
                f"an example of length {max(lens)} does not fit max_tokens={max_tokens}"
            )
    if batch_size is not None:
        check_positive_int("batch_size", batch_size)
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise ValueError(f"seed must be an int, got {seed!r}")
    rng = random.Random(seed)
    order = list(range(len(lens)))
    if shuffle:
        rng.shuffle(order)
    order.sort(key=lambda i: lens[i])  # stable: equal lengths keep the shuffled order
    batches: list[list[int]] = []
    current: list[int] = []
    for i in order:
        too_many = batch_size is not None and len(current) + 1 > batch_size
        # ascending lengths: with example i the batch's longest length becomes lens[i]
        too_big = max_tokens is not None and (len(current) + 1) * max(lens[i], 1) > max_tokens
        if current and (too_many or too_big):
            batches.append(current)
            current = []
        current.append(i)
    batches.append(current)
    if shuffle:
        rng.shuffle(batches)
    return batches


def random_batches(n: int, sizes: int | Sequence[int], seed: int = 0) -> list[list[int]]:
    """Batches of a random permutation of `range(n)`, for comparison with `bucket_batches`.

    `sizes`: one batch size, or the list of sizes (e.g. those of `bucket_batches`).
    """
    check_positive_int("n", n)
    if isinstance(sizes, int) and not isinstance(sizes, bool):
        check_positive_int("sizes", sizes)
        sizes = [sizes] * (n // sizes) + ([n % sizes] if n % sizes else [])
    sizes = list(cast(Sequence[int], sizes))  # a bool raises TypeError here
    for i, size in enumerate(sizes):
        check_positive_int(f"sizes[{i}]", size)
    if sum(sizes) != n:
        raise ValueError(f"sizes must add up to n={n}, got a total of {sum(sizes)}")
    order = list(range(n))
    random.Random(seed).shuffle(order)
    out, start = [], 0
    for s in sizes:
        out.append(order[start : start + s])
        start += s
    return out


def padding_fraction(lengths: Sequence[int], batches: Sequence[Sequence[int]]) -> float:
    """The share of padding when each batch is padded to its longest example."""
    lens = _check_lengths(lengths)
    padded = real = 0
    for b, batch in enumerate(batches):
        if len(batch) == 0:
            raise ValueError(f"batch {b} is empty")
        for i in batch:
            if isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < len(lens):
                raise ValueError(f"batch {b} holds {i!r}, not an index into {len(lens)} lengths")
        padded += len(batch) * max(lens[i] for i in batch)
        real += sum(lens[i] for i in batch)
    return (padded - real) / padded if padded else 0.0


# --------------------------------------------------------------------------------------------
# synthetic tasks
# --------------------------------------------------------------------------------------------


def _check_task(task: object, vocab_size: object, min_len: object, max_len: object) -> None:
    if task not in TASKS:
        raise ValueError(f"task must be one of {TASKS}, got {task!r}")
    check_positive_int("vocab_size", vocab_size)
    if vocab_size <= FIRST_TOKEN_ID:  # type: ignore[operator]
        raise ValueError(
            f"vocab_size must exceed {FIRST_TOKEN_ID} (ids 0-3 are the special tokens), "
            f"got {vocab_size}"
        )
    check_positive_int("min_len", min_len)
    check_positive_int("max_len", max_len)
    if min_len > max_len:  # type: ignore[operator]
        raise ValueError(f"min_len must be <= max_len, got min_len={min_len}, max_len={max_len}")


def _seeded_rng(seed: object) -> torch.Generator:
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise ValueError(f"seed must be a non-negative int, got {seed!r}")
    return torch.Generator().manual_seed(seed)


def _draw(
    task: str, n: int, vocab_size: int, min_len: int, max_len: int, g: torch.Generator
) -> tuple[Tensor, Tensor, Tensor]:
    """n examples as `(src (n, L), tgt (n, L), lengths (n,))`, padded with PAD_ID.

    Lengths then tokens, so `task_batches(seed)` starts with `synthetic_pairs(seed)`'s pairs.
    """
    lengths = torch.randint(min_len, max_len + 1, (n,), generator=g)
    width = int(lengths.max())
    tokens = torch.randint(FIRST_TOKEN_ID, vocab_size, (n, width), generator=g)
    pos = torch.arange(width)
    real = pos < lengths[:, None]
    src = tokens.masked_fill(~real, PAD_ID)
    if task == "copy":
        tgt = src
    else:  # reverse: tgt[j] = src[length - 1 - j] for j < length
        index = (lengths[:, None] - 1 - pos).clamp(min=0)
        tgt = src.gather(1, index).masked_fill(~real, PAD_ID)
    return src, tgt, lengths


def synthetic_pairs(
    task: str, n: int, vocab_size: int, min_len: int, max_len: int, seed: int
) -> list[tuple[list[int], list[int]]]:
    """n `(source, target)` pairs of the `"copy"` or `"reverse"` task, from `seed`, no specials."""
    _check_task(task, vocab_size, min_len, max_len)
    check_positive_int("n", n)
    src, tgt, lengths = _draw(task, n, vocab_size, min_len, max_len, _seeded_rng(seed))
    return [
        (s[:k], t[:k]) for s, t, k in zip(src.tolist(), tgt.tolist(), lengths.tolist(), strict=True)
    ]


def task_batches(
    task: str,
    batch_size: int,
    vocab_size: int,
    min_len: int,
    max_len: int,
    seed: int,
) -> Iterator[Seq2SeqBatch]:
    """An endless stream of fresh copy/reverse `Seq2SeqBatch`es (on the CPU), from `seed`.

    Another seed alone does not make held-out data unseen (short sources recur): use
    `unseen_pairs(..., seen_sources(...))`.
    """
    _check_task(task, vocab_size, min_len, max_len)
    check_positive_int("batch_size", batch_size)
    g = _seeded_rng(seed)

    def stream() -> Iterator[Seq2SeqBatch]:
        while True:
            src, tgt, lengths = _draw(task, batch_size, vocab_size, min_len, max_len, g)
            width = src.shape[1]
            rows = torch.arange(batch_size)
            tgt_in = torch.full((batch_size, width + 1), PAD_ID, dtype=torch.long)
            tgt_in[:, 0] = BOS_ID
            tgt_in[:, 1:] = tgt
            tgt_out = torch.full((batch_size, width + 1), PAD_ID, dtype=torch.long)
            tgt_out[:, :width] = tgt
            tgt_out[rows, lengths] = EOS_ID
            yield Seq2SeqBatch(src, tgt_in, tgt_out, PAD_ID)

    return stream()


def seen_sources(
    task: str,
    batch_size: int,
    vocab_size: int,
    min_len: int,
    max_len: int,
    seed: int,
    steps: int,
) -> set[tuple[int, ...]]:
    """Every source of the first `steps` batches of `task_batches(...)`, as tuples of ids."""
    check_positive_int("steps", steps)
    stream = task_batches(task, batch_size, vocab_size, min_len, max_len, seed)
    seen: set[tuple[int, ...]] = set()
    for _ in range(steps):
        src = next(stream).src
        lengths = (src != PAD_ID).sum(1).tolist()
        seen.update(tuple(row[:k]) for row, k in zip(src.tolist(), lengths, strict=True))
    return seen


def unseen_pairs(
    task: str,
    n: int,
    vocab_size: int,
    min_len: int,
    max_len: int,
    seed: int,
    exclude: set[tuple[int, ...]],
) -> list[tuple[list[int], list[int]]]:
    """n distinct pairs drawn as in `synthetic_pairs(seed)` whose sources are not in `exclude`.

    Lengths whose every sequence is excluded never appear, so lengths are no longer uniform.
    """
    _check_task(task, vocab_size, min_len, max_len)
    check_positive_int("n", n)
    g = _seeded_rng(seed)
    kept: dict[tuple[int, ...], tuple[list[int], list[int]]] = {}
    for _ in range(100):
        src, tgt, lengths = _draw(task, n, vocab_size, min_len, max_len, g)
        for s, t, k in zip(src.tolist(), tgt.tolist(), lengths.tolist(), strict=True):
            key = tuple(s[:k])
            if key not in exclude and key not in kept:
                kept[key] = (s[:k], t[:k])
                if len(kept) == n:
                    return list(kept.values())
    raise ValueError(
        f"found only {len(kept)} of n={n} sources outside `exclude` after 100 rounds "
        f"(lengths {min_len}-{max_len}, vocab_size {vocab_size}, {len(exclude):,} excluded)"
    )


# --------------------------------------------------------------------------------------------
# language-model batches
# --------------------------------------------------------------------------------------------


@dataclass
class LMBatch:
    """An LM batch: inputs `x (B, T)`, next-token targets `y (B, T)`; unpacks as `x, y`."""

    x: Tensor
    y: Tensor

    def to(self, device: torch.device | str) -> LMBatch:
        return LMBatch(self.x.to(device, non_blocking=True), self.y.to(device, non_blocking=True))

    def __iter__(self) -> Iterator[Tensor]:
        return iter((self.x, self.y))

    def __len__(self) -> int:
        return self.x.shape[0]

    @property
    def n_tokens(self) -> int:
        """Every target is a real token (windows of one text have no padding)."""
        return self.y.numel()


def lm_blocks(
    ids: Tensor, block_size: int, batch_size: int, rng: torch.Generator
) -> tuple[Tensor, Tensor]:
    """B random windows of `ids (N,)`: `x (B, T)` = `ids[s : s + T]`, `y` = `ids[s+1 : s+T+1]`."""
    if (
        not isinstance(ids, Tensor)
        or ids.dim() != 1
        or ids.is_floating_point()
        or (ids.dtype == torch.bool)
    ):
        got = f"shape {tuple(ids.shape)} {ids.dtype}" if isinstance(ids, Tensor) else type(ids)
        raise ValueError(f"ids must be a 1-D integer tensor of token ids, got {got}")
    check_positive_int("block_size", block_size)
    check_positive_int("batch_size", batch_size)
    if not isinstance(rng, torch.Generator):
        raise ValueError(f"rng must be a torch.Generator, got {type(rng).__name__}")
    if ids.numel() <= block_size:
        raise ValueError(
            f"ids must be longer than block_size={block_size} (a window and its next token), "
            f"got {ids.numel()} ids"
        )
    starts = torch.randint(0, ids.numel() - block_size, (batch_size,), generator=rng)
    index = starts[:, None] + torch.arange(block_size)
    ids = ids.long()
    return ids[index.to(ids.device)], ids[(index + 1).to(ids.device)]


def lm_batches(ids: Tensor, block_size: int, batch_size: int, seed: int) -> Iterator[LMBatch]:
    """An endless stream of `LMBatch(*lm_blocks(ids, ...))` drawn with an rng seeded `seed`."""
    g = _seeded_rng(seed)
    lm_blocks(ids, block_size, batch_size, torch.Generator().manual_seed(0))  # check arguments now

    def stream() -> Iterator[LMBatch]:
        while True:
            yield LMBatch(*lm_blocks(ids, block_size, batch_size, g))

    return stream()
