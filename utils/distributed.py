"""Data parallelism with `torch.distributed`: a local process group, a bucketed sampler, the loss.

Notebook 14 derives it. P workers each hold a copy of the model and a shard of the batch;
DistributedDataParallel (DDP) all-reduces the gradients and divides by P, so every copy takes
the same step. That step is the whole batch's step only if the per-worker losses are weighted
right: the book's loss is a mean over target tokens, and when workers hold different numbers
of tokens the mean of per-worker means is not the mean over all tokens. `global_token_mean`
divides each worker's summed loss by the all-reduced token count (times P, which DDP's
averaging takes back), so the averaged gradient is the gradient of the whole batch's mean.

`launch` runs a function in P processes on this machine (gloo, loopback only, a free port, a
timeout), which is how the notebook and the tests run two workers on a CPU; `torchrun` does the
same for scripts (`tools/experiments/train_translation.py`).
"""

from __future__ import annotations

import copy
import datetime
import json
import socket
import tempfile
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import Tensor

from utils.checks import check_positive_float, check_positive_int
from utils.data import Seq2SeqBatch, bucket_batches
from utils.training import (  # rank, world size, the loss's token count: one owner, re-exported
    global_token_count,
    is_distributed,
    rank,
    seq2seq_loss,
    train,
    world_size,
)
from utils.vocab import PAD_ID

__all__ = [
    "available",
    "free_port",
    "init_local_group",
    "destroy_group",
    "is_distributed",
    "rank",
    "world_size",
    "is_main_process",
    "launch",
    "split_batches",
    "DistributedBucketSampler",
    "global_token_count",
    "global_token_mean",
    "train_data_parallel",
]

LOCALHOST = "127.0.0.1"  # loopback only: nothing leaves the machine


def available(backend: str = "gloo") -> bool:
    """Whether this PyTorch build has `torch.distributed` with `backend` (some builds lack it)."""
    if not dist.is_available():
        return False
    if backend == "gloo":
        return dist.is_gloo_available()
    if backend == "nccl":
        return dist.is_nccl_available() and torch.cuda.is_available()
    raise ValueError(f"backend must be 'gloo' or 'nccl', got {backend!r}")


def free_port() -> int:
    """A TCP port free on the loopback interface now (the OS picks it; another process could
    take it before we bind again, which `launch` turns into an error, not a hang)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((LOCALHOST, 0))
        return int(s.getsockname()[1])


def init_local_group(
    rank: int, world_size: int, port: int, timeout_s: float = 60.0, backend: str = "gloo"
) -> None:
    """Join a process group of `world_size` processes on this machine, listening on loopback.

    `timeout_s` bounds every collective, so a worker that died makes the others fail instead
    of waiting forever.
    """
    check_positive_int("world_size", world_size)
    if isinstance(rank, bool) or not isinstance(rank, int) or not 0 <= rank < world_size:
        raise ValueError(f"rank must be an int in [0, {world_size}), got {rank!r}")
    if isinstance(port, bool) or not isinstance(port, int) or not 0 < port < 65536:
        raise ValueError(f"port must be an int in (0, 65536), got {port!r}")
    timeout_s = check_positive_float("timeout_s", timeout_s)
    if not available(backend):
        raise ValueError(f"this PyTorch build has no torch.distributed backend {backend!r}")
    dist.init_process_group(
        backend,
        init_method=f"tcp://{LOCALHOST}:{port}",
        rank=rank,
        world_size=world_size,
        timeout=datetime.timedelta(seconds=timeout_s),
    )


def destroy_group() -> None:
    """Leave the process group, if any (safe to call twice)."""
    if is_distributed():
        dist.destroy_process_group()


def is_main_process() -> bool:
    """Rank 0 logs, evaluates and saves; the others only train."""
    return rank() == 0


def _worker(
    local_rank: int,
    fn: Callable[..., Any],
    world: int,
    port: int,
    timeout_s: float,
    out_dir: str,
    args: tuple,
) -> None:
    """One spawned process: join the group, run `fn(rank, world, *args)`, save its result.

    A failure is written to `<rank>.error` (when, and the traceback) *before* this worker leaves
    the group: the others, waiting in a collective, fail only once it has left, so the earliest
    record is the cause and theirs ("Connection closed by peer") are consequences.
    """
    torch.set_num_threads(1)  # P processes on P cores: one thread each
    init_local_group(local_rank, world, port, timeout_s)
    try:
        result = fn(local_rank, world, *args)
        torch.save(result, Path(out_dir) / f"{local_rank}.pt")
    except Exception:
        failed_at = time.time()  # one clock for every process of this machine
        record = {"time": failed_at, "traceback": traceback.format_exc()}
        (Path(out_dir) / f"{local_rank}.error").write_text(json.dumps(record))
        raise
    finally:
        destroy_group()


def _first_failure(out_dir: str, world: int) -> tuple[int, str] | None:
    """The rank whose failure `_worker` recorded first, and its traceback; None if none did."""
    records = []
    for r in range(world):
        path = Path(out_dir) / f"{r}.error"
        if path.exists():
            record = json.loads(path.read_text())
            records.append((record["time"], r, record["traceback"]))
    if not records:
        return None
    _, first, trace = min(records)
    return first, trace


def launch(
    fn: Callable[..., Any], world_size: int = 2, args: tuple = (), timeout_s: float = 120.0
) -> list[Any]:
    """Run `fn(rank, world_size, *args)` in `world_size` fresh processes joined in a gloo group
    on loopback; return their results, by rank.

    `fn` must be importable (a module-level function, not one defined in a notebook cell):
    the processes are spawned, not forked, so they start clean. A worker that fails raises
    `torch.multiprocessing.ProcessRaisedException` here, with the traceback of the worker that
    failed first (not of one that then lost its connection to it in a collective); a run
    longer than `timeout_s` ends every worker and raises `RuntimeError`.
    """
    if not callable(fn):
        raise ValueError(f"fn must be a function (rank, world_size, *args), got {fn!r}")
    check_positive_int("world_size", world_size)
    timeout_s = check_positive_float("timeout_s", timeout_s)
    if not available("gloo"):
        raise ValueError("this PyTorch build has no torch.distributed gloo backend")
    with tempfile.TemporaryDirectory() as out_dir:
        context = mp.start_processes(
            _worker,
            args=(fn, world_size, free_port(), timeout_s, out_dir, tuple(args)),
            nprocs=world_size,
            join=False,
            start_method="spawn",
        )
        deadline = time.monotonic() + timeout_s
        try:
            while not context.join(timeout=max(0.0, min(1.0, deadline - time.monotonic()))):
                if time.monotonic() >= deadline:
                    raise RuntimeError(f"the {world_size} workers ran past {timeout_s} s")
        except mp.ProcessRaisedException as failure:
            # join reports the first process to *exit*, often a bystander whose collective
            # broke when the failing worker left: report the first to fail instead
            first = _first_failure(out_dir, world_size)
            if first is None or first[0] == failure.error_index:
                raise
            rank_, trace = first
            message = f"\n\n-- Process {rank_:d} terminated with the following error:\n{trace}"
            pid = context.processes[rank_].pid
            raise mp.ProcessRaisedException(message, rank_, pid) from None
        finally:
            for p in context.processes:
                if p.is_alive():
                    p.kill()
                    p.join()
        return [
            torch.load(Path(out_dir) / f"{r}.pt", weights_only=False) for r in range(world_size)
        ]


# --------------------------------------------------------------------------------------------
# the data: every worker the same number of batches, every example once per epoch
# --------------------------------------------------------------------------------------------


def split_batches(batches: Sequence[Sequence[int]], parts: int) -> list[list[int]]:
    """Split the largest batches in two until their number divides by `parts`.

    Why: P workers step together, so each needs the same number of batches; dropping the
    remainder would skip examples and repeating batches would count some twice. Halving a
    batch keeps it within any padded-token budget it met. Order is kept (halves side by side).
    """
    check_positive_int("parts", parts)
    out = [list(b) for b in batches]
    if any(len(b) == 0 for b in out):
        raise ValueError("batches must all be non-empty, got an empty one")
    need = -len(out) % parts
    if sum(map(len, out)) < len(out) + need:
        raise ValueError(
            f"{sum(map(len, out))} examples in {len(out)} batches cannot make a multiple of "
            f"{parts} non-empty batches"
        )
    for _ in range(need):
        j = max(range(len(out)), key=lambda i: (len(out[i]), -i))  # largest, first of ties
        half = len(out[j]) // 2
        out[j : j + 1] = [out[j][:half], out[j][half:]]
    return out


class DistributedBucketSampler:
    """Length-bucketed batches of example indices, dealt out to `world_size` workers.

    Epoch e shuffles with seed `seed + e` (`bucket_batches`), so every worker computes the same
    list without talking to the others; batch i goes to worker `i % world_size`. Every worker
    gets `len(self)` batches, and the workers' batches together hold every example once.
    """

    def __init__(
        self,
        lengths: Sequence[int],
        max_tokens: int,
        rank: int = 0,
        world_size: int = 1,
        seed: int = 0,
    ) -> None:
        check_positive_int("world_size", world_size)
        if isinstance(rank, bool) or not isinstance(rank, int) or not 0 <= rank < world_size:
            raise ValueError(f"rank must be an int in [0, {world_size}), got {rank!r}")
        if isinstance(seed, bool) or not isinstance(seed, int):
            raise ValueError(f"seed must be an int, got {seed!r}")
        self.lengths, self.max_tokens = list(lengths), max_tokens
        self.rank, self.world_size, self.seed = rank, world_size, seed
        self.epoch = 0
        self.epoch_batches(0)  # check the arguments now

    def set_epoch(self, epoch: int) -> None:
        """Use epoch `epoch`'s shuffle next (as `torch.utils.data.DistributedSampler`)."""
        if isinstance(epoch, bool) or not isinstance(epoch, int) or epoch < 0:
            raise ValueError(f"epoch must be an int >= 0, got {epoch!r}")
        self.epoch = epoch

    def epoch_batches(self, epoch: int) -> list[list[int]]:
        """All workers' batches of `epoch`, in step order, before they are dealt out."""
        batches = bucket_batches(self.lengths, max_tokens=self.max_tokens, seed=self.seed + epoch)
        return split_batches(batches, self.world_size)

    def __iter__(self) -> Iterator[list[int]]:
        return iter(self.epoch_batches(self.epoch)[self.rank :: self.world_size])

    def __len__(self) -> int:
        return len(self.epoch_batches(self.epoch)) // self.world_size

    def stream(self) -> Iterator[list[int]]:
        """Endless: this worker's batches of epoch `self.epoch`, then of the next, and so on."""
        while True:
            yield from self
            self.epoch += 1


# --------------------------------------------------------------------------------------------
# the loss
# --------------------------------------------------------------------------------------------


def global_token_mean(loss_sum: Tensor, n_tokens: Tensor | int) -> Tensor:
    """What this worker should backpropagate so DDP's averaged gradient is the gradient of the
    mean loss over every worker's tokens: `loss_sum * P / sum over workers of n_tokens`.

    `loss_sum` is a scalar: this worker's summed token losses (`reduction="sum"`); `n_tokens`
    its token count. DDP divides the summed gradients by P, hence the factor P. Outside a
    process group it is `loss_sum / n_tokens`. Averaging the returned values over the
    workers gives the global mean (what rank 0 should log).
    """
    if not isinstance(loss_sum, Tensor) or loss_sum.dim() != 0:
        got = tuple(loss_sum.shape) if isinstance(loss_sum, Tensor) else type(loss_sum).__name__
        raise ValueError(f"loss_sum must be a scalar tensor (a summed loss), got {got}")
    count = global_token_count(n_tokens, loss_sum.device)  # one owner, shared with `train`
    return loss_sum * world_size() / count.clamp(min=1.0).to(loss_sum.dtype)


# --------------------------------------------------------------------------------------------
# a worker for `launch`: a few DDP steps of a seq2seq model (notebook 14 runs it)
# --------------------------------------------------------------------------------------------


def train_data_parallel(
    rank: int,
    world: int,
    model: torch.nn.Module,
    batches: Sequence[Sequence[Seq2SeqBatch]],
    lr: float = 1e-2,
    smoothing: float = 0.1,
    seed: int = 0,
) -> dict[str, Tensor]:
    """Run by `launch`: Adam steps of `model` under DDP; return the trained `state_dict`.

    `batches[step][rank]` is this worker's batch at `step` (one per worker per step). The
    steps are `utils.training.train`'s, the one training loop of the book: under
    torch.distributed it weighs this worker's mean label-smoothed loss by its share of the
    step's tokens, `n * P / n_tok` (`global_token_count`), so each worker backpropagates
    `P * loss_sum / n_tok`, what `global_token_mean` returns, and the step is that of the mean
    over every worker's target tokens. The model arrives pickled, the same in every worker
    (and DDP broadcasts rank 0's weights anyway); the random generator is then seeded with
    `seed + rank`, so dropout masks differ between workers.
    """
    if len(batches) == 0 or any(len(step) != world for step in batches):
        raise ValueError(f"batches must be a non-empty list of steps, {world} batches each")
    # spawn passes tensors through shared memory: without the copy, every worker would step
    # the same storage, and each step would be taken `world` times
    model = copy.deepcopy(model)
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    torch.manual_seed(seed + rank)  # after the shared weights: other dropout masks per worker
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    mine = iter([step[rank] for step in batches])
    loss_fn = seq2seq_loss(smoothing, PAD_ID)
    steps = len(batches)
    train(ddp, mine, loss_fn, optimizer, steps=steps, device="cpu", log_every=steps, progress=False)
    return {k: v.detach().clone() for k, v in model.state_dict().items()}
