"""`train(..., checkpoint=, checkpoint_every=, resume=True)`: a run that stops and goes on ends
with the same weights as one that never stopped, bit for bit (float64, CPU, dropout on).

The interruption is real: the first run's stream raises after some batches, mid-step, as a
disconnected runtime would stop it; the second run starts from fresh objects (other weights,
other random states) and reads everything it needs from the checkpoint.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import torch
from torch.nn.parallel import DistributedDataParallel

from utils.data import lm_batches, task_batches
from utils.distributed import available, launch
from utils.gpt import GPT, GPTConfig
from utils.model import Transformer, TransformerConfig
from utils.training import (
    ResumableStream,
    lm_loss,
    seq2seq_loss,
    train,
    warmup_linear_decay,
)

STEPS, EVERY, CRASH = 12, 4, 7  # checkpoints after steps 4 and 8; the crash is in step 7 or 8
TINY = TransformerConfig(12, 12, d_model=16, n_heads=2, d_ff=32, n_layers=1, dropout=0.1,
                         max_len=32)  # fmt: skip
TINY_GPT = GPTConfig(vocab_size=12, d_model=16, n_heads=2, d_ff=32, n_layers=1, max_len=16,
                     dropout=0.1)  # fmt: skip
LM_IDS = torch.randint(0, 12, (400,), generator=torch.Generator().manual_seed(0))


class Crash(Exception):
    """The runtime went away."""


def crash_after(stream: Iterator, n: int) -> Iterator:
    for i, batch in enumerate(stream):
        if i == n:
            raise Crash
        yield batch


def stream(kind: str, crash: int | None = None, rank: int = 0) -> ResumableStream:
    def make() -> Iterator:
        if kind == "transformer":
            it = task_batches("reverse", 4, 12, 2, 6, seed=rank)
        else:
            it = lm_batches(LM_IDS, 8, 4, seed=rank)
        return it if crash is None else crash_after(it, crash)

    return ResumableStream(make)


def noisy(loss_fn):
    """The loss times numbers drawn from numpy's and Python's global generators: resuming must
    restore them too, not only torch's (dropout)."""

    def fn(model, batch):
        return loss_fn(model, batch) * (1 + 0.01 * np.random.rand() + 0.01 * random.random())  # noqa: NPY002

    return fn


def run(kind: str, path: Path, crash: int | None, seed: int, accumulate: int = 1, ddp=False):
    """`STEPS` steps from `seed` (weights, dropout, noise); a checkpoint at `path` every `EVERY`
    steps."""
    torch.manual_seed(seed)
    np.random.seed(seed)  # noqa: NPY002
    random.seed(seed)
    model = (Transformer(TINY) if kind == "transformer" else GPT(TINY_GPT)).double()
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    scheduler = warmup_linear_decay(optimizer, 3, STEPS)
    loss = noisy(seq2seq_loss(0.1) if kind == "transformer" else lm_loss())
    rank = torch.distributed.get_rank() if ddp else 0
    history = train(
        DistributedDataParallel(model) if ddp else model,
        stream(kind, None if crash is None else crash * accumulate, rank),
        loss,
        optimizer,
        scheduler,
        steps=STEPS,
        device="cpu",
        log_every=3,
        progress=False,
        accumulate=accumulate,
        checkpoint=path,
        checkpoint_every=EVERY,
        resume=True,
    )
    return model, history


def interrupted_then_resumed(kind, path, accumulate=1, ddp=False):
    with pytest.raises(Crash) if not ddp else _expect(Crash):
        run(kind, path, CRASH, seed=0, accumulate=accumulate, ddp=ddp)
    return run(kind, path, None, seed=123, accumulate=accumulate, ddp=ddp)  # other weights


class _expect:
    """`pytest.raises` outside pytest (in a spawned worker)."""

    def __init__(self, kind):
        self.kind = kind

    def __enter__(self):
        return self

    def __exit__(self, kind, value, tb):
        if kind is not self.kind:
            raise AssertionError(f"expected {self.kind.__name__}, got {kind}")
        return True


def assert_same_weights(a: torch.nn.Module, b: torch.nn.Module) -> None:
    for (name, x), (_, y) in zip(a.state_dict().items(), b.state_dict().items(), strict=True):
        assert torch.equal(x, y), name


@pytest.mark.parametrize("kind", ["transformer", "gpt"])
@pytest.mark.parametrize("accumulate", [1, 2])
def test_resumed_run_ends_with_the_uninterrupted_runs_weights(kind, accumulate, tmp_path):
    straight, straight_history = run(kind, tmp_path / "a.pt", None, 0, accumulate)
    resumed, history = interrupted_then_resumed(kind, tmp_path / "b.pt", accumulate)
    assert_same_weights(resumed, straight)
    assert history.step == straight_history.step and history.loss == straight_history.loss
    assert history.stop_reason == "steps"


def test_a_checkpoint_and_no_resume_starts_again(tmp_path):
    path = tmp_path / "run.pt"
    first, _ = run("gpt", path, None, seed=0)
    assert path.exists()
    model = GPT(TINY_GPT).double()
    history = train(model, stream("gpt"), lm_loss(), torch.optim.AdamW(model.parameters()),
                    steps=2, device="cpu", progress=False, checkpoint=path)  # fmt: skip
    assert history.step == [2]  # resume=False: from step 0, and the file is overwritten
    assert torch.load(path, weights_only=True)["step"] == 2


def test_resuming_a_finished_run_changes_nothing(tmp_path):
    path = tmp_path / "run.pt"
    done, _ = run("gpt", path, None, seed=0)
    again, history = run("gpt", path, None, seed=5)
    assert_same_weights(again, done)
    assert history.steps_done == STEPS


def _ddp_resume(rank: int, world: int, folder: str) -> tuple[dict, dict]:
    """Run in a spawned process: an uninterrupted and an interrupted-then-resumed DDP run."""
    straight, _ = run("transformer", Path(folder) / "a.pt", None, 0, accumulate=2, ddp=True)
    resumed, _ = interrupted_then_resumed("transformer", Path(folder) / "b.pt", 2, ddp=True)
    return straight.state_dict(), resumed.state_dict()


@pytest.mark.slow
@pytest.mark.skipif(not available("gloo"), reason="no torch.distributed gloo backend")
def test_resume_under_two_gloo_workers(tmp_path):
    results = launch(_ddp_resume, 2, (str(tmp_path),), timeout_s=240)
    for rank, (straight, resumed) in enumerate(results):
        assert sorted(p.name for p in tmp_path.glob("b.rank*.pt")) == ["b.rank0.pt", "b.rank1.pt"]
        for name, value in straight.items():
            assert torch.equal(resumed[name], value), f"rank {rank} {name}"
    for name, value in results[0][0].items():  # and the workers agree
        assert torch.equal(results[1][0][name], value), name


# --------------------------------------------------------------------------------------------
# what cannot be resumed is refused
# --------------------------------------------------------------------------------------------


def tiny_gpt(**changes) -> GPT:
    torch.manual_seed(0)
    return GPT(TINY_GPT.replace(**changes)).double()


def test_a_stream_that_cannot_be_resumed_is_refused(tmp_path):
    model = tiny_gpt()
    with pytest.raises(ValueError, match="batches that can be resumed.*got generator"):
        train(model, lm_batches(LM_IDS, 8, 4, seed=0), lm_loss(),
              torch.optim.AdamW(model.parameters()), steps=2,
              checkpoint=tmp_path / "x.pt")  # fmt: skip


def test_resume_refuses_a_checkpoint_of_another_model_or_setting(tmp_path):
    path = tmp_path / "run.pt"
    run("gpt", path, None, seed=0)
    model = tiny_gpt(d_ff=64)
    opt = torch.optim.AdamW(model.parameters())
    args = {"steps": STEPS + 1, "device": "cpu", "progress": False, "checkpoint": path,
            "resume": True}  # fmt: skip
    with pytest.raises(ValueError, match=r"another config \(fields \['d_ff'\]\)"):
        train(model, stream("gpt"), lm_loss(), opt, **args)
    model = tiny_gpt()
    opt = torch.optim.AdamW(model.parameters())
    with pytest.raises(ValueError, match="saved with accumulate 1, this run has 2"):
        train(model, stream("gpt"), lm_loss(), opt, accumulate=2, **args)
    with pytest.raises(ValueError, match="saved with a scheduler"):
        train(model, stream("gpt"), lm_loss(), opt, **args)
    path.write_bytes(path.read_bytes()[:100])  # a copy cut short
    with pytest.raises(ValueError, match="is not a training checkpoint"):
        train(model, stream("gpt"), lm_loss(), opt, **args)


def test_a_stream_shorter_than_the_checkpoint_is_refused():
    short = ResumableStream(lambda: iter(range(3)))
    with pytest.raises(ValueError, match="ends after 3 batches; the checkpoint had consumed 5"):
        short.load_state_dict({"consumed": 5})
    with pytest.raises(ValueError, match="must be"):
        short.load_state_dict({"consumed": -1})


def test_checkpoint_arguments_are_checked(tmp_path):
    model = tiny_gpt()
    opt = torch.optim.AdamW(model.parameters())
    with pytest.raises(ValueError, match="need a checkpoint path"):
        train(model, stream("gpt"), lm_loss(), opt, steps=1, resume=True)
    with pytest.raises(ValueError, match="checkpoint_every must be"):
        train(model, stream("gpt"), lm_loss(), opt, steps=1, checkpoint=tmp_path / "x",
              checkpoint_every=0)  # fmt: skip
    with pytest.raises(ValueError, match="checkpoint must be a file path"):
        train(model, stream("gpt"), lm_loss(), opt, steps=1, checkpoint=3)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="make must be a function"):
        ResumableStream([1, 2])  # type: ignore[arg-type]
