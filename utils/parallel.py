"""Run several small training runs at once, one per CPU core (notebooks 10 and 13).

Book infrastructure, not part of the Transformer: the notebooks train many small models
(seeds, tasks, ablations), and one such model cannot keep two cores busy. `run_parallel` calls
each job in its own thread, so their runs compute on separate cores, and returns the results of
calling them one after another.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import torch

from utils.checks import check_positive_int

__all__ = ["run_parallel"]


def run_parallel(jobs: Sequence[Callable[[], Any]], workers: int | None = None) -> list[Any]:
    """Call every job (a function of no arguments), up to `workers` at once, each in its own
    thread; return their results in the order of `jobs`.

    Why threads make small runs faster: a small model cannot keep two cores busy (after
    `utils.setup` torch computes on one thread, and more threads inside each operation barely
    help at that size), but PyTorch lets go of Python's global interpreter lock inside every
    operation, so two training runs in two threads compute on two cores at the same time.

    The results are those of calling the jobs one after another, as long as no job draws
    from a random generator that another job also uses: build and seed the models *before*
    (initialisation draws from torch's global generator), give each run batches from its own
    seeded generator (`task_batches` does), and keep dropout at 0 (dropout draws from the
    global generator). A job that moves torch's global CPU generator while others run gets a
    `RuntimeWarning`, because its numbers then depend on thread timing.

    Args:
        jobs: functions of no arguments, e.g. closures that each train one model.
        workers: how many run at once; default `min(len(jobs), os.cpu_count())`.

    Returns:
        `[job() for job in jobs]`, computed concurrently. An exception in a job is raised here.
    """
    jobs = list(jobs)
    if not jobs:
        raise ValueError("run_parallel needs at least one job, got none")
    for i, job in enumerate(jobs):
        if not callable(job):
            raise ValueError(f"jobs must be functions of no arguments, job {i} is {job!r}")
    if workers is None:
        workers = min(len(jobs), os.cpu_count() or 1)
    check_positive_int("workers", workers)
    if workers == 1 or len(jobs) == 1:
        return [job() for job in jobs]
    rng_before = torch.random.get_rng_state()
    with ThreadPoolExecutor(max_workers=workers) as pool:
        results = list(pool.map(lambda job: job(), jobs))
    if not torch.equal(rng_before, torch.random.get_rng_state()):
        warnings.warn(
            "a job drew from torch's global random generator while other jobs ran (model "
            "initialisation? dropout?): its results depend on thread timing; build models "
            "before run_parallel and use dropout 0 or workers=1",
            RuntimeWarning,
            stacklevel=2,
        )
    return results
