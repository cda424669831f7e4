"""Measuring time and memory fairly: interleaved repetitions, the profiler's peak -- notebook 14.

Two functions that notebook 14 and `tools/experiments/bench.py` share, so that the book's
figures and the benchmark's tables are measured the same way:

- `interleaved` times several functions against each other, alternating their order so that
  neither always runs in the other's wake (a machine that slows down mid-run slows both);
- `peak_cpu_bytes` replays the CPU allocations and frees a `torch.profiler` run recorded, in
  time order, and returns the peak.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence

import torch
from torch.autograd import DeviceType

from utils.checks import check_positive_int

# the devices whose allocations are CPU memory, as torch.profiler counts them
_CPU_DEVICES = (DeviceType.CPU, DeviceType.MKLDNN, DeviceType.IDEEP)

__all__ = ["interleaved", "peak_cpu_bytes"]


def _synchronize(device: torch.device) -> None:
    """Wait for the GPU's queued work (a no-op on the CPU, which runs eagerly).

    CUDA kernels run asynchronously: without this a timer would stop when the work is queued,
    not when it is done.
    """
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def interleaved(
    fns: Sequence[Callable[[], object]], repeats: int, device: torch.device
) -> list[float]:
    """Median seconds of each function, run in turn `repeats` times after one warm-up each.

    The order alternates (A B, B A, A B, ...): each function runs after the other as often
    as before it, so neither always inherits the other's leftover memory (on Linux, freshly
    allocated memory costs page faults). An even `repeats` balances the orders exactly.
    On the CPU the clock is this process's CPU time (`time.process_time`; the book runs torch
    on one thread), so other programs competing for the cores do not inflate one side's
    numbers; on a GPU it is wall-clock time around a synchronisation.

    Returns one median per function, in the order of `fns`.
    """
    if not fns or not all(callable(fn) for fn in fns):
        raise ValueError(f"fns must be a non-empty sequence of callables, got {fns!r}")
    check_positive_int("repeats", repeats)
    clock = time.process_time if device.type == "cpu" else time.perf_counter
    for fn in fns:  # warm-up: first calls allocate buffers and fill caches
        fn()
    times: list[list[float]] = [[] for _ in fns]
    order = list(enumerate(fns))
    for rep in range(repeats):
        for i, fn in order if rep % 2 == 0 else order[::-1]:
            _synchronize(device)
            start = clock()
            fn()
            _synchronize(device)
            times[i].append(clock() - start)
    return [statistics.median(t) for t in times]


def peak_cpu_bytes(prof: torch.profiler.profile) -> int:
    """Peak of the CPU memory allocated while `prof` ran, in bytes, above what was allocated
    when it started.

    `prof` must have run with `profile_memory=True`, which records every allocation (+bytes)
    and every free (-bytes) with its time. Replaying those records in time order gives the
    memory allocated at each moment; the peak is the largest running total. Temporaries
    allocated and freed inside one operation count while they are alive: the tiles of a
    custom `torch.autograd.Function`, the buffers of a backward node or of a fused kernel.

    (Per-operation totals cannot give this: `self_cpu_memory_usage` is an operation's *net*
    bytes, and what its callees allocate and free inside it nets out to a single number, so
    replaying operations by their start times never sees the temporaries.)
    """
    if not getattr(prof, "profile_memory", False):
        raise ValueError("peak_cpu_bytes needs a torch.profiler.profile(profile_memory=True) run")
    profiler = getattr(prof, "profiler", None)
    results = getattr(profiler, "kineto_results", None)
    if results is None:
        raise ValueError("peak_cpu_bytes needs a finished profile: run it, then read the peak")
    records = sorted(
        (r for r in results.events() if r.name() == "[memory]" and r.device_type() in _CPU_DEVICES),
        key=lambda r: r.start_ns(),  # a stable sort: records of the same moment keep their order
    )
    current = peak = 0
    for r in records:
        current += r.nbytes()
        peak = max(peak, current)
    return peak
