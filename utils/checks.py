"""Argument checks shared by every module: one wording for one mistake.

Each raises `ValueError` saying what was expected and what came. Booleans are rejected where
a size is expected (`True` is an `int` in Python, but never a meaningful size).
"""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["check_positive_int", "check_dropout", "check_token_ids"]


def check_positive_int(name: str, value: object) -> int:
    """`value` if it is a positive int, else `ValueError` naming `name`."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be a positive int, got {value!r}")
    return value


def check_dropout(value: object, name: str = "dropout") -> float:
    """`value` as a float if it is a probability in [0, 1), else `ValueError`."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value < 1:
        raise ValueError(f"{name} must be a probability in [0, 1), got {value!r}")
    return float(value)


def check_token_ids(tokens: object, name: str = "tokens") -> None:
    """`ValueError` unless `tokens` is a 2-D `(batch, seq)` integer tensor."""
    if not isinstance(tokens, Tensor):
        raise ValueError(f"{name} must be a torch.Tensor of token ids, got {type(tokens).__name__}")
    if tokens.dim() != 2:
        raise ValueError(
            f"{name} must be 2-D (batch, seq) token ids, got shape {tuple(tokens.shape)}"
        )
    if tokens.dtype == torch.bool or tokens.is_floating_point() or tokens.is_complex():
        raise ValueError(f"{name} must be an integer tensor of token ids, got {tokens.dtype}")
