"""utils.parallel.run_parallel: the serial results, in job order; errors and shared randomness."""

from __future__ import annotations

import time

import pytest
import torch

from utils.data import task_batches
from utils.model import Transformer, TransformerConfig
from utils.parallel import run_parallel
from utils.training import seq2seq_loss, train

TINY = TransformerConfig(
    src_vocab_size=12,
    tgt_vocab_size=12,
    d_model=16,
    n_heads=2,
    d_ff=32,
    n_layers=1,
    dropout=0.0,
    max_len=32,
)


def test_run_parallel_gives_the_serial_results_in_job_order():
    def job(task: str, seed: int):
        torch.manual_seed(seed)
        model = Transformer(TINY)  # built before the threads start: the global generator

        def run() -> tuple[str, torch.Tensor]:
            optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
            train(
                model,
                task_batches(task, 16, 12, 1, 5, seed=seed),
                seq2seq_loss(0.0),
                optimizer,
                steps=15,
                log_every=5,
                progress=False,
                device="cpu",
            )
            return task, torch.cat([p.detach().flatten() for p in model.parameters()])

        return run

    specs = [("copy", 0), ("reverse", 1), ("copy", 2)]
    serial = [job(*spec)() for spec in specs]
    parallel = run_parallel([job(*spec) for spec in specs], workers=2)
    assert [task for task, _ in parallel] == [task for task, _ in serial]  # the jobs' order
    for (_, a), (_, b) in zip(serial, parallel, strict=True):
        assert torch.equal(a, b)  # bit for bit: each run computed as if alone


def test_run_parallel_orders_results_by_job_not_by_finishing_time():
    def sleeper(seconds: float, value: int):
        return lambda: (time.sleep(seconds), value)[1]

    assert run_parallel([sleeper(0.2, 0), sleeper(0.0, 1), sleeper(0.1, 2)], workers=3) == [0, 1, 2]


def test_run_parallel_raises_job_errors_warns_on_shared_randomness_and_checks_input():
    def boom() -> None:
        raise KeyError("inside a job")

    with pytest.raises(KeyError, match="inside a job"):
        run_parallel([lambda: 1, boom], workers=2)
    with pytest.warns(RuntimeWarning, match="global random generator"):
        run_parallel([lambda: torch.rand(1), lambda: 2], workers=2)
    with pytest.raises(ValueError, match="at least one job"):
        run_parallel([])
    with pytest.raises(ValueError, match="functions of no arguments, job 1"):
        run_parallel([lambda: 1, 2])
    for bad in (0, -1, 1.5, True):
        with pytest.raises(ValueError, match="workers must be a positive int"):
            run_parallel([lambda: 1, lambda: 2], workers=bad)
