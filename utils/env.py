"""Reproducible set-up shared by every notebook and test.

`setup(seed)` is the one call the notebooks' setup cell makes after `utils` is importable.
"""

from __future__ import annotations

import random

import numpy as np
import torch

__all__ = ["setup", "get_device", "fmt"]


def setup(seed: int = 0) -> None:
    """Seed every random number generator the book uses and fix printing; prints nothing.

    - `random`, NumPy and torch (CPU and, when present, every CUDA device) get `seed`;
    - torch runs on one CPU thread: results do not depend on the machine's core count, and
      the book's small models run faster without threading overhead;
    - tensors and arrays print with 3 decimals and no scientific notation, so outputs are
      stable across machines and easy to read.
    """
    if not isinstance(seed, int) or isinstance(seed, bool) or seed < 0:
        raise ValueError(f"seed must be a non-negative int, got {seed!r}")
    random.seed(seed)
    np.random.seed(seed)  # noqa: NPY002 - the legacy global generator is what user code draws from
    torch.manual_seed(seed)  # also seeds every CUDA device
    torch.set_num_threads(1)
    torch.set_printoptions(precision=3, sci_mode=False, linewidth=100)
    np.set_printoptions(precision=3, suppress=True, linewidth=100)


def get_device() -> torch.device:
    """The GPU when one is present, else the CPU. The book never requires a GPU."""
    if torch.cuda.is_available():
        return torch.device("cuda")
    if getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
        return torch.device("mps")
    return torch.device("cpu")


def fmt(value: object, digits: int = 3) -> str:
    """A number, or a short sequence of numbers, as text with `digits` decimals.

    Notebooks print through this instead of printing float tensors: a tensor's repr
    depends on PyTorch's version (`tensor([1., 1.])` in one, `tensor([1.000, 1.000])` in
    another), `f"{x:.3f}"` of a Python float does not.

    >>> fmt(torch.tensor([1.0, 0.5]))
    '[1.000, 0.500]'
    >>> fmt(2 / 3, digits=2)
    '0.67'
    """
    if isinstance(digits, bool) or not isinstance(digits, int) or digits < 0:
        raise ValueError(f"digits must be a non-negative int, got {digits!r}")
    if isinstance(value, torch.Tensor | np.ndarray):
        value = value.tolist()
    if isinstance(value, list | tuple):
        return "[" + ", ".join(fmt(v, digits) for v in value) + "]"
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"fmt formats numbers and sequences of them, got {type(value).__name__}")
    if isinstance(value, int):
        return str(value)
    text = f"{value:.{digits}f}"
    return "0." + "0" * digits if text in ("-0." + "0" * digits,) else text  # no "-0.000"
