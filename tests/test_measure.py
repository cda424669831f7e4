"""utils.measure: interleaved timing alternates its order; the peak is the running maximum of
the profiler's memory records replayed in time order."""

from types import SimpleNamespace

import pytest
import torch
from torch.autograd import DeviceType

from utils.measure import interleaved, peak_cpu_bytes

CPU = torch.device("cpu")


def test_interleaved_alternates_the_order_after_one_warm_up_each():
    calls: list[str] = []
    fns = [lambda: calls.append("a"), lambda: calls.append("b")]
    medians = interleaved(fns, repeats=4, device=CPU)
    assert len(medians) == 2 and all(m >= 0 for m in medians)
    # one warm-up each, then a b, b a, a b, b a: each runs first as often as second
    assert "".join(calls) == "ab" + "abbaabba"


def test_interleaved_returns_each_functions_median_in_order(monkeypatch):
    # a fake clock that each function advances by its own cost: the medians are exact, and
    # no assert depends on how fast this machine is (tools/book/timing_asserts.py)
    clock = SimpleNamespace(now=0.0)
    monkeypatch.setattr("utils.measure.time.process_time", lambda: clock.now)

    def costs(seconds: list[float]):
        runs = iter(seconds)
        return lambda: setattr(clock, "now", clock.now + next(runs))

    # a warm-up, then 3 timed runs each: medians 2.0 and 7.0 whatever the order
    medians = interleaved([costs([9.0, 1.0, 2.0, 6.0]), costs([0.5, 7.0, 6.0, 20.0])], 3, CPU)
    assert medians == [2.0, 7.0]


@pytest.mark.parametrize(
    ("fns", "repeats", "message"),
    [
        ([], 2, "fns must be a non-empty sequence"),
        ([print], 0, "repeats must be a positive int"),
        ([print, 3], 2, "fns must be a non-empty sequence of callables"),
    ],
)
def test_interleaved_rejects_bad_input(fns, repeats, message):
    with pytest.raises(ValueError, match=message):
        interleaved(fns, repeats, CPU)


class Record:
    """A stand-in for one of the profiler's memory records: when, how many bytes (+ allocated,
    - freed), on which device."""

    def __init__(self, start_ns: int, nbytes: int, device=DeviceType.CPU, name="[memory]"):
        self._start, self._nbytes, self._device, self._name = start_ns, nbytes, device, name

    def name(self) -> str:
        return self._name

    def start_ns(self) -> int:
        return self._start

    def nbytes(self) -> int:
        return self._nbytes

    def device_type(self) -> DeviceType:
        return self._device


def finished_profile(records: list[Record]) -> SimpleNamespace:
    """What `peak_cpu_bytes` reads of a finished `torch.profiler.profile(profile_memory=True)`."""
    results = SimpleNamespace(events=lambda: records)
    return SimpleNamespace(profile_memory=True, profiler=SimpleNamespace(kineto_results=results))


def test_peak_cpu_bytes_replays_the_records_in_time_order():
    # given out of order: +100 at t=0, +50 at t=1, -120 at t=2, +80 at t=3 -> 100, 150, 30, 110
    records = [Record(3, 80), Record(0, 100), Record(2, -120), Record(1, 50), Record(4, 0)]
    assert peak_cpu_bytes(finished_profile(records)) == 150


def test_peak_cpu_bytes_counts_only_cpu_memory_records():
    records = [
        Record(0, 100),
        Record(1, 10**6, device=DeviceType.CUDA),  # GPU memory: not the CPU's
        Record(2, 10**6, name="aten::empty"),  # an operation, not a memory record
        Record(3, 20, device=DeviceType.MKLDNN),  # oneDNN's buffers are CPU memory
    ]
    assert peak_cpu_bytes(finished_profile(records)) == 120


def test_peak_cpu_bytes_sees_a_real_allocation():
    with torch.profiler.profile(
        activities=[torch.profiler.ProfilerActivity.CPU], profile_memory=True
    ) as prof:
        x = torch.ones(256, 1024)  # 1 MiB of float32
        del x
    assert peak_cpu_bytes(prof) >= 2**20


MIB = 2**20


class Temporary(torch.autograd.Function):
    """Returns x + 1; its forward and its backward each allocate and free a 1 MiB temporary."""

    @staticmethod
    def forward(ctx, x):
        tmp = torch.ones(MIB // 4)  # 1 MiB of float32, freed before forward returns
        return x + tmp[0]

    @staticmethod
    def backward(ctx, grad):
        tmp = torch.ones(MIB // 4)
        return grad * tmp[0]


@pytest.mark.parametrize("step", ["forward", "forward+backward"])
def test_peak_cpu_bytes_sees_a_temporary_freed_inside_an_autograd_function(step):
    # the temporary's free is booked to the Function's own range, its allocation to the
    # aten::ones inside it: a replay of operations by their start times misses it
    x = torch.zeros(4, requires_grad=True)
    with torch.profiler.profile(
        activities=[torch.profiler.ProfilerActivity.CPU], profile_memory=True
    ) as prof:
        y = Temporary.apply(x)
        if step == "forward+backward":
            y.sum().backward()
    assert MIB <= peak_cpu_bytes(prof) < 2 * MIB  # one temporary alive at a time, and 64 bytes


def test_peak_cpu_bytes_rejects_a_profile_without_memory():
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        torch.ones(4)
    with pytest.raises(ValueError, match="profile_memory=True"):
        peak_cpu_bytes(prof)


def test_peak_cpu_bytes_rejects_a_profile_not_yet_run():
    prof = torch.profiler.profile(profile_memory=True)
    with pytest.raises(ValueError, match="a finished profile"):
        peak_cpu_bytes(prof)
