"""Reproducible set-up shared by every notebook and test.

`setup(seed)` is the one call the notebooks' setup cell makes after `utils` is importable.
"""

from __future__ import annotations

import random

import numpy as np
import torch

__all__ = ["setup", "get_device"]


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
