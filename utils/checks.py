"""Argument checks shared by every module: one wording for one mistake.

Each raises `ValueError` saying what was expected and what came. Booleans are rejected where
a size is expected (`True` is an `int` in Python, but never a meaningful size).
"""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = [
    "check_positive_int",
    "check_optional_positive_int",
    "check_positive_float",
    "check_dropout",
    "check_token_ids",
    "check_token_range",
    "check_features",
    "check_memory",
    "check_bool_mask",
]


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


def check_token_range(tokens: Tensor, vocab_size: int, name: str = "tokens") -> None:
    """`ValueError` unless every id of `tokens` is in `[0, vocab_size)`.

    Reading the smallest and largest id needs their values on the host. On the CPU that is
    free; on a GPU it would stall the forward pass until the device catches up (a host-device
    synchronisation every step), so there the check is skipped: an id out of range then
    trips CUDA's own device-side assert in the lookup. Code outside the hot path (decoding
    entry points, data loaders) calls this on CPU tensors.
    """
    if tokens.device.type != "cpu" or tokens.numel() == 0:
        return
    lo, hi = int(tokens.min()), int(tokens.max())
    if lo < 0 or hi >= vocab_size:
        raise ValueError(
            f"{name}: token ids must be in [0, {vocab_size}) for vocab_size {vocab_size}, "
            f"got ids in [{lo}, {hi}]"
        )


def check_optional_positive_int(name: str, value: object) -> int | None:
    """`value` if it is `None` or a positive int, else `ValueError` naming `name`."""
    return None if value is None else check_positive_int(name, value)


def check_positive_float(name: str, value: object) -> float:
    """`value` as a float if it is a positive number, else `ValueError` naming `name`."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not float(value) > 0.0:
        raise ValueError(f"{name} must be a positive number, got {value!r}")
    return float(value)


def check_features(name: str, x: object, d_model: int, ndim: int | None = 3) -> None:
    """`ValueError` unless `x` is a tensor with `ndim` dims (any if None) and last dim `d_model`."""
    if not isinstance(x, Tensor):
        raise ValueError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    if ndim is not None and x.dim() != ndim:
        raise ValueError(
            f"{name} must have {ndim} dims (batch, seq, d_model={d_model}), "
            f"got shape {tuple(x.shape)}"
        )
    if x.dim() == 0 or x.shape[-1] != d_model:
        raise ValueError(f"{name} must have last dim d_model={d_model}, got shape {tuple(x.shape)}")


def check_memory(x: Tensor, memory: object, d_model: int) -> None:
    """`ValueError` unless `memory` is `(batch, S, d_model)` with the batch size of `x`."""
    check_features("memory", memory, d_model)
    if memory.shape[0] != x.shape[0]:  # type: ignore[union-attr]
        raise ValueError(
            f"memory batch size must equal x's ({x.shape[0]}), got memory shape "
            f"{tuple(memory.shape)}"  # type: ignore[union-attr]
        )


def check_bool_mask(mask: object, name: str = "mask") -> None:
    """`ValueError` unless `mask` is a bool tensor (the book's convention: True = may attend)."""
    if not isinstance(mask, Tensor):
        raise ValueError(f"{name} must be a torch.Tensor of dtype bool, got {type(mask).__name__}")
    if mask.dtype != torch.bool:
        raise ValueError(f"{name} must be a bool tensor (True = may attend), got {mask.dtype}")
