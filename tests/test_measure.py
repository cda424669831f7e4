"""utils.measure: interleaved timing alternates its order; the peak is the running maximum."""

from types import SimpleNamespace

import pytest
import torch

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


def event(start: int, self_bytes: int) -> SimpleNamespace:
    """A stand-in for a profiler event: when it started and what it allocated (+) or freed (-)."""
    return SimpleNamespace(
        time_range=SimpleNamespace(start=start), self_cpu_memory_usage=self_bytes
    )


def test_peak_cpu_bytes_replays_allocations_in_start_order():
    # given out of order: +100 at t=0, +50 at t=1, -120 at t=2, +80 at t=3 -> 100, 150, 30, 110
    events = [event(3, 80), event(0, 100), event(2, -120), event(1, 50), event(4, 0)]
    assert peak_cpu_bytes(SimpleNamespace(events=lambda: events)) == 150


def test_peak_cpu_bytes_sees_a_real_allocation():
    with torch.profiler.profile(
        activities=[torch.profiler.ProfilerActivity.CPU], profile_memory=True
    ) as prof:
        x = torch.ones(256, 1024)  # 1 MiB of float32
        del x
    assert peak_cpu_bytes(prof) >= 2**20
