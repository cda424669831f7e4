"""utils.distributed: two gloo workers equal one process on the combined batches; the sampler.

The process tests spawn two processes on loopback, bounded by `launch`'s timeout; they skip
where this PyTorch has no gloo backend, except under CI=true, where that is a failure.
"""

from __future__ import annotations

import os

import pytest
import torch
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from utils.data import LMBatch, Seq2SeqBatch, bucket_batches, make_batch
from utils.distributed import (
    DistributedBucketSampler,
    available,
    global_token_mean,
    launch,
    split_batches,
    train_data_parallel,
)
from utils.gpt import GPT, GPTConfig
from utils.model import Transformer, TransformerConfig
from utils.training import label_smoothing_loss, seq2seq_loss, train
from utils.vocab import PAD_ID

needs_gloo = pytest.mark.skipif(
    not available("gloo") and os.environ.get("CI") != "true",
    reason="torch.distributed with gloo is unavailable in this PyTorch",
)

WORLD, STEPS = 2, 3
TINY = TransformerConfig(
    src_vocab_size=12, tgt_vocab_size=12, d_model=16, n_heads=2, d_ff=32, n_layers=1,
    dropout=0.0, max_len=32,
)  # fmt: skip
TINY_GPT = GPTConfig(vocab_size=12, d_model=16, n_heads=2, d_ff=32, n_layers=1, max_len=16)


def _model(kind: str) -> torch.nn.Module:
    torch.manual_seed(0)  # every worker and the reference start from the same weights
    model = Transformer(TINY) if kind == "transformer" else GPT(TINY_GPT)
    return model.double()


def _shard(kind: str, step: int, rank: int) -> Seq2SeqBatch | LMBatch:
    """Worker `rank`'s batch at `step`: rank 0 short targets and few rows, rank 1 long ones
    and more rows, so the workers hold different numbers of target tokens."""
    g = torch.Generator().manual_seed(100 * step + rank)
    rows = 2 + rank
    if kind == "transformer":  # rank up to 3 (the accumulation test): lengths up to 17
        lengths = torch.randint(1, 3, (rows,), generator=g) + 5 * rank  # 1-2 or 6-7 tokens
        pairs = [
            (torch.randint(4, 12, (5,), generator=g).tolist(),
             torch.randint(4, 12, (int(n),), generator=g).tolist())
            for n in lengths
        ]  # fmt: skip
        return make_batch(pairs)
    ids = torch.randint(0, 12, (rows, 9), generator=g)
    return LMBatch(ids[:, :-1], ids[:, 1:])


def _loss_sum(model: torch.nn.Module, batch: Seq2SeqBatch | LMBatch) -> torch.Tensor:
    """The summed (not averaged) label-smoothed loss over the batch's target tokens."""
    if isinstance(batch, Seq2SeqBatch):
        logits = model(batch.src, batch.tgt_in)
        return label_smoothing_loss(logits, batch.tgt_out, 0.1, PAD_ID, reduction="sum")
    return label_smoothing_loss(model(batch.x), batch.y, 0.1, None, reduction="sum")


def _ddp_worker(rank: int, world: int, kind: str) -> dict[str, torch.Tensor]:
    """Run in a spawned process: STEPS of DDP training on this rank's shards."""
    model = _model(kind)
    ddp = DistributedDataParallel(model)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    for step in range(STEPS):
        batch = _shard(kind, step, rank)
        loss = global_token_mean(_loss_sum(ddp, batch), batch.n_tokens)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def _one_process(kind: str) -> dict[str, torch.Tensor]:
    """The same steps in one process: the mean over the tokens of both shards together."""
    model = _model(kind)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    for step in range(STEPS):
        shards = [_shard(kind, step, r) for r in range(WORLD)]
        total = sum(_loss_sum(model, b) for b in shards)
        loss = total / sum(b.n_tokens for b in shards)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


@pytest.fixture(scope="module")
def ddp_results() -> dict[str, list[dict[str, torch.Tensor]]]:
    """Both models trained by two workers, in one launch each (spawning costs seconds)."""
    return {
        kind: launch(_ddp_worker, WORLD, (kind,), timeout_s=90) for kind in ("transformer", "gpt")
    }


@needs_gloo
@pytest.mark.slow
@pytest.mark.parametrize("kind", ["transformer", "gpt"])
def test_two_workers_equal_one_process_on_the_combined_batches(ddp_results, kind):
    shards = [_shard(kind, 0, r) for r in range(WORLD)]
    assert shards[0].n_tokens != shards[1].n_tokens  # the case that needs the token weighting
    reference = _one_process(kind)
    for r, state in enumerate(ddp_results[kind]):
        for name, value in reference.items():
            torch.testing.assert_close(
                state[name], value, atol=1e-10, rtol=0, msg=f"rank {r} {name}"
            )
    start = _model(kind).state_dict()
    assert any(not torch.equal(start[k], v) for k, v in reference.items())  # it did train


@needs_gloo
@pytest.mark.slow
def test_train_data_parallel_equals_one_process_on_the_whole_batches():
    steps = [[_shard("transformer", s, r) for r in range(WORLD)] for s in range(STEPS)]
    states = launch(train_data_parallel, WORLD, (_model("transformer"), steps), timeout_s=90)
    reference = _one_process("transformer")  # same shards, same Adam(lr=1e-2), smoothing 0.1
    for r, state in enumerate(states):
        for name, value in reference.items():
            torch.testing.assert_close(state[name], value, atol=1e-10, rtol=0, msg=f"{r} {name}")
    with pytest.raises(ValueError, match="batches must be a non-empty list of steps"):
        train_data_parallel(0, 2, _model("transformer"), [steps[0][:1]])


def _micro_batches(rank: int, world: int, accumulate: int) -> list[Seq2SeqBatch]:
    """Worker `rank`'s batches in order: `accumulate` a step, of the step's world * accumulate."""
    return [
        _shard("transformer", step, rank * accumulate + j)  # type: ignore[misc]
        for step in range(STEPS)
        for j in range(accumulate)
    ]


def _train(model: nn.Module, batches: list[Seq2SeqBatch], accumulate: int, ddp: bool):
    """`STEPS` steps of `utils.training.train` with Adam(lr=1e-2), logging every step."""
    return train(
        DistributedDataParallel(model) if ddp else model,
        iter(batches),
        seq2seq_loss(0.1),
        torch.optim.Adam(model.parameters(), lr=1e-2),
        steps=STEPS,
        device="cpu",
        log_every=1,
        progress=False,
        accumulate=accumulate,
    )


def _train_twice(rank: int, world: int) -> list[tuple[dict[str, torch.Tensor], list[float]]]:
    """Run in a spawned process: `utils.training.train` under DDP, without and with accumulation."""
    out = []
    for accumulate in (1, 2):
        model = _model("transformer")
        history = _train(model, _micro_batches(rank, world, accumulate), accumulate, ddp=True)
        out.append(({k: v.detach().clone() for k, v in model.state_dict().items()}, history.loss))
    return out


@needs_gloo
@pytest.mark.slow
def test_train_under_ddp_equals_one_process_accumulating_the_same_batches():
    results = launch(_train_twice, WORLD, timeout_s=90)
    for index, accumulate in enumerate((1, 2)):
        model = _model("transformer")
        batches = _micro_batches(0, 1, WORLD * accumulate)
        history = _train(model, batches, WORLD * accumulate, ddp=False)
        if accumulate == 1:  # one process accumulating both shards = the token mean over both
            reference = _one_process("transformer")
            for name, value in reference.items():
                torch.testing.assert_close(model.state_dict()[name], value, atol=1e-10, rtol=0)
        for r, runs in enumerate(results):
            state, losses = runs[index]
            for name, value in model.state_dict().items():
                torch.testing.assert_close(
                    state[name], value, atol=1e-10, rtol=0, msg=f"rank {r} acc {accumulate} {name}"
                )
            assert losses == pytest.approx(history.loss, abs=1e-6)  # logged in float32


def _fail_on_rank_1(rank: int, world: int) -> None:
    """Run in a spawned process: rank 1 raises while rank 0 waits for it in a collective.

    Rank 1's process then takes 2 s to exit (an `atexit` hook, like a logger flushing): rank 0,
    whose barrier breaks when rank 1 leaves the group, exits first, so a launcher that reports
    the first process to *exit* would show rank 0's gloo error instead of rank 1's.
    """
    import atexit
    import time

    import torch.distributed as dist

    if rank == 1:
        atexit.register(time.sleep, 2.0)
        raise ValueError("rank 1 failed on purpose")
    dist.barrier()


@needs_gloo
@pytest.mark.slow
def test_launch_reports_the_worker_that_failed_first_with_its_traceback():
    with pytest.raises(torch.multiprocessing.ProcessRaisedException) as failure:
        launch(_fail_on_rank_1, WORLD, timeout_s=60)
    message = str(failure.value)
    assert "Process 1 terminated with the following error" in message, message
    assert "ValueError: rank 1 failed on purpose" in message, message
    assert "in _fail_on_rank_1" in message and "Connection closed" not in message, message
    assert failure.value.error_index == 1


# --------------------------------------------------------------------------------------------
# the loss outside a process group; the sampler
# --------------------------------------------------------------------------------------------


def test_global_token_mean_outside_a_group_is_the_token_mean():
    loss_sum = torch.tensor(6.0)
    assert global_token_mean(loss_sum, 4).item() == 1.5
    assert global_token_mean(loss_sum, 0).item() == 6.0  # no tokens: no division by zero


def test_global_token_mean_rejects_bad_input():
    with pytest.raises(ValueError, match="loss_sum must be a scalar tensor"):
        global_token_mean(torch.ones(2), 3)
    with pytest.raises(ValueError, match="n_tokens must be a count >= 0"):
        global_token_mean(torch.tensor(1.0), -1)


LENGTHS = [int(n) for n in torch.randint(1, 30, (203,), generator=torch.Generator().manual_seed(0))]


@pytest.mark.parametrize("world", [1, 2, 3, 4])
def test_sampler_gives_equal_counts_and_covers_every_example_once(world):
    for epoch in (0, 1):
        shards = []
        for r in range(world):
            sampler = DistributedBucketSampler(LENGTHS, 120, rank=r, world_size=world, seed=5)
            sampler.set_epoch(epoch)
            shards.append(list(sampler))
            assert len(shards[-1]) == len(sampler)
        assert len({len(s) for s in shards}) == 1  # every worker the same number of steps
        seen = sorted(i for s in shards for b in s for i in b)
        assert seen == list(range(len(LENGTHS)))  # every example once
        for s in shards:
            for b in s:
                assert len(b) * max(LENGTHS[i] for i in b) <= 120  # the token budget holds


def test_sampler_is_deterministic_from_seed_and_epoch():
    def batches(seed: int, epoch: int) -> list[list[int]]:
        sampler = DistributedBucketSampler(LENGTHS, 120, rank=1, world_size=2, seed=seed)
        sampler.set_epoch(epoch)
        return list(sampler)

    assert batches(3, 0) == batches(3, 0)
    assert batches(3, 0) != batches(3, 1)  # a new shuffle each epoch
    assert batches(3, 0) != batches(4, 0)
    stream = DistributedBucketSampler(LENGTHS, 120, rank=1, world_size=2, seed=3).stream()
    first = [next(stream) for _ in range(len(batches(3, 0)) + 1)]
    assert first == batches(3, 0) + batches(3, 1)[:1]  # the stream moves on to epoch 1


def test_split_batches_halves_the_largest_until_the_count_divides():
    batches = bucket_batches(LENGTHS, max_tokens=120, seed=0)
    for parts in (2, 3, 7):
        out = split_batches(batches, parts)
        assert len(out) % parts == 0 and len(out) - len(batches) < parts
        assert sorted(i for b in out for i in b) == list(range(len(LENGTHS)))
    assert split_batches([[0, 1, 2]], 2) == [[0], [1, 2]]


def test_distributed_rejects_bad_input():
    with pytest.raises(ValueError, match=r"cannot make a multiple of 3 non-empty batches"):
        split_batches([[0], [1]], 3)
    with pytest.raises(ValueError, match="batches must all be non-empty"):
        split_batches([[0], []], 2)
    with pytest.raises(ValueError, match=r"rank must be an int in \[0, 2\)"):
        DistributedBucketSampler(LENGTHS, 120, rank=2, world_size=2)
    with pytest.raises(ValueError, match="epoch must be an int >= 0"):
        DistributedBucketSampler(LENGTHS, 120).set_epoch(-1)
    with pytest.raises(ValueError, match="fn must be a function"):
        launch(3)  # type: ignore[arg-type]


def test_train_accumulating_two_batches_is_the_token_mean_over_both():
    """One process: accumulate=2 takes the step of both batches together (token-weighted)."""
    shards = [_shard("transformer", s, r) for s in range(STEPS) for r in range(WORLD)]
    model = _model("transformer")
    train(
        model,
        iter(shards),
        seq2seq_loss(0.1),
        torch.optim.Adam(model.parameters(), lr=1e-2),
        steps=STEPS,
        device="cpu",
        progress=False,
        accumulate=WORLD,
    )
    reference = _one_process("transformer")
    for name, value in reference.items():
        torch.testing.assert_close(model.state_dict()[name], value, atol=1e-10, rtol=0)
    with pytest.raises(ValueError, match="accumulate must be a positive int, got 0"):
        train(model, iter(shards), seq2seq_loss(0.1), torch.optim.Adam(model.parameters()),
              steps=1, progress=False, accumulate=0)  # fmt: skip
