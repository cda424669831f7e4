"""Batching helpers: padding, the shifted decoder input, buckets, seeded synthetic tasks."""

import random

import pytest
import torch

from utils.data import (
    LMBatch,
    Seq2SeqBatch,
    bucket_batches,
    decoder_io,
    lm_batches,
    lm_blocks,
    make_batch,
    pad_batch,
    padding_fraction,
    random_batches,
    synthetic_pairs,
    task_batches,
)
from utils.vocab import FIRST_TOKEN_ID


def test_pad_batch_right_pads_lists_and_tensors():
    out = pad_batch([[5, 6, 7], torch.tensor([8]), []], pad_id=0)
    assert out.dtype == torch.long
    assert out.tolist() == [[5, 6, 7], [8, 0, 0], [0, 0, 0]]
    assert pad_batch([[5]], pad_id=9, length=3).tolist() == [[5, 9, 9]]


def test_pad_batch_rejects_bad_input():
    with pytest.raises(ValueError, match=r"a sequence of 3 tokens does not fit length=2"):
        pad_batch([[1, 2, 3]], 0, length=2)
    with pytest.raises(ValueError, match=r"at least one sequence"):
        pad_batch([], 0)
    with pytest.raises(ValueError, match=r"seqs\[1\] must hold int token ids, got 2.5"):
        pad_batch([[1], [2.5]], 0)
    with pytest.raises(ValueError, match=r"seqs\[0\] must be a 1-D integer tensor"):
        pad_batch([torch.ones(2, 2, dtype=torch.long)], 0)
    with pytest.raises(ValueError, match=r"pad_id must be a non-negative int"):
        pad_batch([[1]], -1)


def test_decoder_io_shifts_labels_one_left_of_the_input():
    tgt_in, tgt_out = decoder_io([[5, 6, 7], [8]], bos_id=1, eos_id=2, pad_id=0)
    assert tgt_in.tolist() == [[1, 5, 6, 7], [1, 8, 0, 0]]
    assert tgt_out.tolist() == [[5, 6, 7, 2], [8, 2, 0, 0]]
    # The shift: the label at t is the input at t + 1 (wherever the input continues).
    real = tgt_in[:, 1:] != 0
    assert torch.equal(tgt_out[:, :-1][real], tgt_in[:, 1:][real])
    with pytest.raises(ValueError, match=r"bos_id, eos_id and pad_id must differ"):
        decoder_io([[5]], bos_id=1, eos_id=1, pad_id=0)


def test_make_batch_counts_tokens_and_padding():
    batch = make_batch([([5, 6, 7], [7, 6]), ([5], [4, 4, 4])])
    assert batch.src.tolist() == [[5, 6, 7], [5, 0, 0]]
    assert batch.tgt_in.tolist() == [[1, 7, 6, 0], [1, 4, 4, 4]]
    assert batch.tgt_out.tolist() == [[7, 6, 2, 0], [4, 4, 4, 2]]
    assert batch.n_tokens == 7 and isinstance(batch.n_tokens, int)
    assert batch.padding_fraction == pytest.approx(3 / 14)  # 2 in src, 1 in tgt_out, 14 cells
    moved = batch.to("cpu")
    assert isinstance(moved, Seq2SeqBatch) and torch.equal(moved.tgt_out, batch.tgt_out)
    assert len(batch) == 2


def test_batch_rejects_mismatched_shapes():
    with pytest.raises(ValueError, match=r"tgt_in and tgt_out must have one shape"):
        Seq2SeqBatch(torch.zeros(2, 3), torch.zeros(2, 4), torch.zeros(2, 5))
    with pytest.raises(ValueError, match=r"one batch size, got 3 and 2"):
        Seq2SeqBatch(torch.zeros(3, 3), torch.zeros(2, 4), torch.zeros(2, 4))
    with pytest.raises(ValueError, match=r"pairs\[0\] must be a \(source, target\) pair"):
        make_batch([[1, 2, 3]])


def test_bucketing_covers_every_example_once_and_respects_the_limits():
    rng = random.Random(0)
    lengths = [rng.randint(1, 50) for _ in range(500)]
    batches = bucket_batches(lengths, max_tokens=200, seed=1)
    assert sorted(i for b in batches for i in b) == list(range(500))
    assert all(len(b) * max(lengths[i] for i in b) <= 200 for b in batches)
    batches = bucket_batches(lengths, batch_size=16, seed=1)
    assert max(len(b) for b in batches) == 16
    assert sorted(i for b in batches for i in b) == list(range(500))


def test_bucketing_reduces_padding():
    rng = random.Random(0)
    lengths = [rng.randint(1, 50) for _ in range(1000)]
    buckets = bucket_batches(lengths, batch_size=32, seed=0)
    randoms = random_batches(len(lengths), [len(b) for b in buckets], seed=0)
    bucketed, unsorted = padding_fraction(lengths, buckets), padding_fraction(lengths, randoms)
    assert unsorted > 0.35  # uniform lengths 1..50: the longest of 32 is near 50, the mean ~25
    assert bucketed < 0.05
    assert padding_fraction([3, 3], [[0, 1]]) == 0.0
    assert padding_fraction([1, 3], [[0, 1]]) == pytest.approx(2 / 6)


def test_bucketing_is_seeded_and_shuffles_batch_order():
    lengths = list(range(1, 101))
    assert bucket_batches(lengths, batch_size=10, seed=3) == bucket_batches(
        lengths, batch_size=10, seed=3
    )
    shuffled = bucket_batches(lengths, batch_size=10, seed=3)
    assert shuffled != bucket_batches(lengths, batch_size=10, seed=4)
    in_order = bucket_batches(lengths, batch_size=10, shuffle=False)
    assert in_order[0] == list(range(10))  # shortest first when not shuffled
    assert sorted(map(sorted, shuffled)) == sorted(map(sorted, in_order))  # same groups


def test_bucketing_rejects_bad_input():
    with pytest.raises(ValueError, match=r"give max_tokens or batch_size"):
        bucket_batches([1, 2])
    with pytest.raises(ValueError, match=r"an example of length 9 does not fit max_tokens=8"):
        bucket_batches([1, 9], max_tokens=8)
    with pytest.raises(ValueError, match=r"batch_size must be a positive int, got 0"):
        bucket_batches([1, 2], batch_size=0)
    with pytest.raises(ValueError, match=r"sizes must add up to n=5, got a total of 4"):
        random_batches(5, [2, 2])
    with pytest.raises(ValueError, match=r"sizes\[1\] must be a positive int, got True"):
        random_batches(5, [4, True])
    with pytest.raises(ValueError, match=r"batch 0 holds 7, not an index into 2 lengths"):
        padding_fraction([1, 2], [[7]])


@pytest.mark.parametrize("task", ["copy", "reverse"])
def test_synthetic_tasks_are_seeded(task):
    args = dict(task=task, n=200, vocab_size=12, min_len=3, max_len=9)
    first = synthetic_pairs(**args, seed=0)
    state = torch.get_rng_state()
    assert synthetic_pairs(**args, seed=0) == first
    assert torch.equal(torch.get_rng_state(), state)  # the global generator is left alone
    assert synthetic_pairs(**args, seed=1) != first
    lengths = {len(src) for src, _ in first}
    assert lengths == set(range(3, 10))
    tokens = {t for src, _ in first for t in src}
    assert tokens == set(range(FIRST_TOKEN_ID, 12))  # never a special id, every other id


def test_reverse_really_reverses_and_copy_copies():
    for src, tgt in synthetic_pairs("reverse", 50, 20, 1, 8, seed=0):
        assert tgt == src[::-1]
    for src, tgt in synthetic_pairs("copy", 50, 20, 1, 8, seed=0):
        assert tgt == src
    # Not a palindrome-only accident: most reversed targets differ from their source.
    pairs = synthetic_pairs("reverse", 50, 20, 4, 8, seed=0)
    assert sum(src != tgt for src, tgt in pairs) > 45


@pytest.mark.parametrize("task", ["copy", "reverse"])
def test_task_batches_match_make_batch_of_the_same_pairs(task):
    stream = task_batches(task, batch_size=16, vocab_size=10, min_len=2, max_len=7, seed=5)
    first = next(stream)
    expected = make_batch(synthetic_pairs(task, 16, 10, 2, 7, seed=5))
    for name in ("src", "tgt_in", "tgt_out"):
        assert torch.equal(getattr(first, name), getattr(expected, name)), name
    second = next(stream)
    assert not torch.equal(second.src[:, :2], first.src[:, :2])  # fresh data each batch
    again = next(task_batches(task, 16, 10, 2, 7, seed=5))
    assert torch.equal(again.tgt_out, first.tgt_out)


def test_synthetic_tasks_reject_bad_arguments():
    with pytest.raises(ValueError, match=r"task must be one of \('copy', 'reverse'\), got 'sort'"):
        synthetic_pairs("sort", 4, 10, 1, 3, seed=0)
    with pytest.raises(ValueError, match=r"vocab_size must exceed 4"):
        synthetic_pairs("copy", 4, 4, 1, 3, seed=0)
    with pytest.raises(ValueError, match=r"min_len must be <= max_len, got min_len=5, max_len=3"):
        task_batches("copy", 4, 10, 5, 3, seed=0)
    with pytest.raises(ValueError, match=r"seed must be a non-negative int"):
        synthetic_pairs("copy", 4, 10, 1, 3, seed=-1)


def test_lm_blocks_are_next_token_windows():
    ids = torch.arange(100)
    g = torch.Generator().manual_seed(0)
    x, y = lm_blocks(ids, block_size=8, batch_size=5, rng=g)
    assert x.shape == y.shape == (5, 8)
    assert torch.equal(y, x + 1)  # ids = positions: the target is the next position
    # Every window fits, and both ends of the text are reached: starts 0 .. N - T - 1.
    draws = [lm_blocks(ids, 8, 50, g) for _ in range(40)]
    assert min(int(x.min()) for x, _ in draws) == 0
    assert max(int(y.max()) for _, y in draws) == 99
    with pytest.raises(ValueError, match=r"ids must be longer than block_size=8"):
        lm_blocks(torch.arange(8), 8, 2, g)
    with pytest.raises(ValueError, match=r"ids must be a 1-D integer tensor"):
        lm_blocks(torch.rand(50), 8, 2, g)


def test_lm_batches_are_seeded_and_count_tokens():
    ids = torch.randint(0, 50, (1000,))
    a, b = next(lm_batches(ids, 16, 4, seed=0)), next(lm_batches(ids, 16, 4, seed=0))
    assert isinstance(a, LMBatch) and torch.equal(a.x, b.x) and torch.equal(a.y, b.y)
    x, y = a  # unpacks like a tuple
    assert a.n_tokens == 64 and torch.equal(x[:, 1:], y[:, :-1])
    assert torch.equal(a.to("cpu").y, a.y)


def test_seen_sources_regenerates_the_training_stream():
    from utils.data import seen_sources, task_batches

    stream = task_batches("copy", 16, 9, 1, 4, seed=3)
    expected = set()
    for _ in range(5):
        src = next(stream).src
        for row in src.tolist():
            expected.add(tuple(t for t in row if t != 0))
    assert seen_sources("copy", 16, 9, 1, 4, seed=3, steps=5) == expected


def test_unseen_pairs_excludes_training_sources_and_repeats():
    from utils.data import seen_sources, unseen_pairs

    seen = seen_sources("reverse", 64, 10, 1, 4, seed=0, steps=50)
    pairs = unseen_pairs("reverse", 200, 10, 1, 4, seed=1, exclude=seen)
    sources = [tuple(s) for s, _ in pairs]
    assert len(pairs) == 200 and len(set(sources)) == 200
    assert not set(sources) & seen
    assert all(t == s[::-1] for s, t in pairs)
    assert unseen_pairs("reverse", 200, 10, 1, 4, seed=1, exclude=seen) == pairs  # seeded


def test_unseen_pairs_says_when_too_few_exist():
    from utils.data import seen_sources, unseen_pairs

    seen = seen_sources("copy", 64, 6, 1, 2, seed=0, steps=20)  # all 2 + 4 sequences
    with pytest.raises(ValueError, match="outside `exclude`"):
        unseen_pairs("copy", 1, 6, 1, 2, seed=1, exclude=seen)
