"""`utils.setup`: reproducible random streams, one thread, quiet."""

import random

import numpy as np
import pytest
import torch

import utils


def draw():
    return random.random(), np.random.rand(), torch.rand(1).item()  # noqa: NPY002


def test_setup_makes_every_generator_repeat(capsys):
    utils.setup(123)
    first = draw()
    utils.setup(123)
    assert draw() == first
    utils.setup(124)
    assert draw() != first
    assert capsys.readouterr().out == ""  # prints nothing


def test_setup_pins_one_thread_and_three_decimals():
    utils.setup(0)
    assert torch.get_num_threads() == 1
    assert str(torch.tensor([1.23456])) == "tensor([1.235])"


@pytest.mark.parametrize("seed", [-1, 1.5, "0", True])
def test_setup_rejects_bad_seeds(seed):
    with pytest.raises(ValueError, match="seed must be a non-negative int"):
        utils.setup(seed)


def test_get_device_is_a_torch_device():
    assert isinstance(utils.get_device(), torch.device)


def test_fmt_formats_numbers_and_sequences() -> None:
    import numpy as np
    import pytest
    import torch

    from utils import fmt

    assert fmt(torch.tensor([1.0, 0.5])) == "[1.000, 0.500]"
    assert fmt(torch.tensor(2.0)) == "2.000"
    assert fmt(np.array([[1.0, 2.0]]), digits=1) == "[[1.0, 2.0]]"
    assert fmt(-1e-9) == "0.000"
    assert fmt(7) == "7"
    with pytest.raises(ValueError, match="numbers"):
        fmt("x")
    with pytest.raises(ValueError, match="digits"):
        fmt(1.0, digits=-1)
