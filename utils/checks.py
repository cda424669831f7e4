"""Argument checks shared by every module: one wording for one mistake.

Each raises `ValueError` saying what was expected and what came. Booleans are rejected where
a size is expected (`True` is an `int` in Python, but never a meaningful size).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import cast

import torch
from torch import Tensor, nn

__all__ = [
    "check_positive_int",
    "check_bool",
    "check_optional_positive_int",
    "check_positive_float",
    "check_dropout",
    "check_token_ids",
    "check_token_range",
    "check_tokens",
    "check_features",
    "check_memory",
    "check_bool_mask",
    "check_mask",
    "check_head_dims",
    "check_qkv",
    "check_eval_mode",
]


def check_positive_int(name: str, value: object) -> int:
    """`value` if it is a positive int, else `ValueError` naming `name`."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be a positive int, got {value!r}")
    return value


def check_bool(name: str, value: object) -> bool:
    """`value` if it is a bool (not merely truthy), else `ValueError` naming `name`."""
    if not isinstance(value, bool):
        raise ValueError(f"{name} must be a bool, got {value!r}")
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
    """`ValueError` unless every id of `tokens` is in `[0, vocab_size)`; on the CPU only.

    On a GPU the check would synchronise every step; CUDA's device-side assert catches it there.
    """
    if tokens.device.type != "cpu" or tokens.numel() == 0:
        return
    lo, hi = int(tokens.min()), int(tokens.max())
    if lo < 0 or hi >= vocab_size:
        raise ValueError(
            f"{name}: token ids must be in [0, {vocab_size}) for vocab_size {vocab_size}, "
            f"got ids in [{lo}, {hi}]"
        )


def check_tokens(
    tokens: object, vocab_size: int, max_len: int, name: str = "tokens", offset: int = 0
) -> None:
    """`ValueError` unless `tokens` are `(batch, seq)` ids in `[0, vocab_size)` within `max_len`."""
    check_token_ids(tokens, name)
    check_token_range(tokens, vocab_size, name)  # type: ignore[arg-type]
    length = tokens.shape[1]  # type: ignore[attr-defined]
    if offset + length > max_len:
        last = offset + length - 1
        where = f"positions {offset}..{last}" if offset else f"sequence length {length}"
        raise ValueError(f"{name}: {where} exceeds max_len {max_len} of the positional encoding")


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
    if memory.shape[0] != x.shape[0]:  # type: ignore[attr-defined]
        raise ValueError(
            f"memory batch size must equal x's ({x.shape[0]}), got memory shape "
            f"{tuple(memory.shape)}"  # type: ignore[attr-defined]
        )


def check_bool_mask(mask: object, name: str = "mask") -> None:
    """`ValueError` unless `mask` is a bool tensor (the book's convention: True = may attend)."""
    if not isinstance(mask, Tensor):
        raise ValueError(f"{name} must be a torch.Tensor of dtype bool, got {type(mask).__name__}")
    if mask.dtype != torch.bool:
        raise ValueError(f"{name} must be a bool tensor (True = may attend), got {mask.dtype}")


def check_mask(mask: object, scores_shape: Sequence[int] | torch.Size, name: str = "mask") -> None:
    """`ValueError` unless `mask` is bool and broadcasts to `scores_shape` *without growing it*.

    E.g. `(B, 1, 1, S)`, `(T, S)` or `(B, h, T, S)` for scores `(B, h, T, S)`. A `(B, S)`
    padding mask where `(T, S)` is expected passes when B == T: use `utils.masks.padding_mask`.
    """
    scores_shape = torch.Size(scores_shape)
    check_bool_mask(mask, name)
    mask = cast(Tensor, mask)
    if mask.dim() > len(scores_shape):
        raise ValueError(
            f"{name} has {mask.dim()} dims {tuple(mask.shape)}, more than the attention scores "
            f"{tuple(scores_shape)}"
        )
    try:
        broadcast = torch.broadcast_shapes(mask.shape, scores_shape)
    except RuntimeError:
        broadcast = None
    if broadcast != scores_shape:
        raise ValueError(
            f"{name} of shape {tuple(mask.shape)} does not broadcast to the attention scores of "
            f"shape {tuple(scores_shape)} (queries, keys last); expected each mask dim to "
            f"equal the scores' dim or be 1"
        )


def check_qkv(query: Tensor, key: Tensor, value: Tensor) -> None:
    """`ValueError` unless query `(..., q, d_k)`, key `(..., k, d_k)` and value `(..., k, d_v)`
    are floating-point tensors of one dtype with the same leading dims (attention's inputs)."""
    for name, t in (("query", query), ("key", key), ("value", value)):
        if not isinstance(t, Tensor):
            raise ValueError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if t.dim() < 2:
            raise ValueError(
                f"{name} must have at least 2 dims (..., seq, features), got shape {tuple(t.shape)}"
            )
        if not t.is_floating_point():
            raise ValueError(f"{name} must be a floating-point tensor, got {t.dtype}")
    if not query.dtype == key.dtype == value.dtype:
        raise ValueError(
            f"query, key and value must share a dtype, got {query.dtype}, {key.dtype}, "
            f"{value.dtype}"
        )
    if query.shape[-1] != key.shape[-1]:
        raise ValueError(
            f"query and key must have the same last dim d_k, got query {tuple(query.shape)} "
            f"and key {tuple(key.shape)}"
        )
    if key.shape[-2] != value.shape[-2]:
        raise ValueError(
            f"key and value must have the same length (dim -2), got key {tuple(key.shape)} "
            f"and value {tuple(value.shape)}"
        )
    if not query.shape[:-2] == key.shape[:-2] == value.shape[:-2]:
        raise ValueError(
            f"query, key and value must have the same leading (batch, heads) dims, got "
            f"{tuple(query.shape[:-2])}, {tuple(key.shape[:-2])}, {tuple(value.shape[:-2])}"
        )


def check_head_dims(
    d_model: object, n_heads: object, d_k: object = None, d_v: object = None
) -> tuple[int, int]:
    """The per-head widths `(d_k, d_v)`, `d_model // n_heads` where not given."""
    d_model = check_positive_int("d_model", d_model)
    n_heads = check_positive_int("n_heads", n_heads)
    check_optional_positive_int("d_k", d_k)
    check_optional_positive_int("d_v", d_v)
    if (d_k is None or d_v is None) and d_model % n_heads != 0:
        raise ValueError(
            f"n_heads={n_heads} must divide d_model={d_model} when d_k or d_v "
            f"is not given (they default to d_model // n_heads)"
        )
    default = d_model // n_heads
    return (default if d_k is None else d_k), (default if d_v is None else d_v)  # type: ignore[return-value]


def check_eval_mode(model: nn.Module) -> None:
    """`ValueError` if `model` is in training mode: the decoding scorers need eval mode."""
    if model.training:  # dropout would make each step random, and cached != recomputed
        raise ValueError(
            "model is in training mode (dropout on); call model.eval() or build the scorer "
            "inside `with evaluation(model):`"
        )
