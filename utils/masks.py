"""Padding and causal masks (notebook 04).

Every mask here is boolean with `True` = may attend, and broadcasts to
`(batch, heads, queries, keys)`:

- `padding_mask(tokens, pad_id)`   `(B, 1, 1, S)`: keys that are real tokens;
- `causal_mask(size)`              `(size, size)`: query i may attend keys j <= i;
- `target_mask(tokens, pad_id)`    `(B, 1, T, T)`: both, for decoder self-attention;
- `combine_masks(*masks)`          logical AND with checked broadcasting.

PyTorch's `nn.MultiheadAttention` and `nn.Transformer*` use the opposite convention for
bool masks (True = *not* allowed); `to_torch_attn_mask` and `to_torch_key_padding_mask`
flip ours into theirs. (`torch.nn.functional.scaled_dot_product_attention` uses ours.)
"""

from __future__ import annotations

from functools import reduce

import torch
from torch import Tensor

from utils.checks import check_bool_mask, check_positive_int, check_token_ids

__all__ = [
    "padding_mask",
    "causal_mask",
    "combine_masks",
    "target_mask",
    "to_torch_attn_mask",
    "to_torch_key_padding_mask",
]


def padding_mask(tokens: Tensor, pad_id: int) -> Tensor:
    """Keys that are real tokens: `tokens (B, S)` -> bool `(B, 1, 1, S)`, True where != pad_id.

    The two singleton dims broadcast over heads and queries: every query may look at every
    real key. Padded *query* rows still produce outputs; the loss ignores them.
    """
    check_token_ids(tokens)
    if isinstance(pad_id, bool) or not isinstance(pad_id, int):
        raise ValueError(f"pad_id must be an int, got {pad_id!r}")
    return (tokens != pad_id)[:, None, None, :]


def causal_mask(size: int, device: torch.device | str | None = None, offset: int = 0) -> Tensor:
    """No peeking: bool `(size, offset + size)`; query i may attend keys j <= offset + i.

    With `offset = 0` (training, a whole sequence at once) it is the square lower-triangular
    mask. With a key/value cache holding `offset` earlier positions, the `size` new queries
    sit at positions `offset .. offset+size-1` and may see every cached key and the new keys
    up to their own position.
    """
    check_positive_int("size", size)
    if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
        raise ValueError(f"offset must be a non-negative int, got {offset!r}")
    return torch.ones(size, offset + size, dtype=torch.bool, device=device).tril(diagonal=offset)


def combine_masks(*masks: Tensor | None) -> Tensor | None:
    """Logical AND of bool masks with broadcasting; `None` entries are ignored.

    Returns `None` when every mask is `None` (no masking). The result's shape is the
    broadcast of the inputs' shapes, e.g. `(B, 1, 1, T)` & `(T, T)` -> `(B, 1, T, T)`.

    Raises:
        ValueError: a mask that is not bool, or shapes that do not broadcast together.
    """
    present = [m for m in masks if m is not None]
    for i, m in enumerate(present):
        check_bool_mask(m, f"mask {i}")
    if not present:
        return None
    try:
        torch.broadcast_shapes(*(m.shape for m in present))
    except RuntimeError:
        shapes = ", ".join(str(tuple(m.shape)) for m in present)
        raise ValueError(
            f"masks must broadcast together (each dim equal or 1, aligned from the right), "
            f"got shapes {shapes}"
        ) from None
    return reduce(torch.logical_and, present)


def target_mask(tokens: Tensor, pad_id: int) -> Tensor:
    """Decoder self-attention mask: padding & causal, `tokens (B, T)` -> bool `(B, 1, T, T)`."""
    pad = padding_mask(tokens, pad_id)  # validates tokens
    return torch.logical_and(pad, causal_mask(tokens.shape[1], device=tokens.device))


def to_torch_attn_mask(mask: Tensor) -> Tensor:
    """Flip our mask (True = may attend) into PyTorch's module convention (True = masked).

    For `attn_mask` of `nn.MultiheadAttention` / `nn.Transformer*`, which expects a 2-D
    `(T, S)` or 3-D `(B*h, T, S)` mask. (`F.scaled_dot_product_attention` needs no flip.)
    """
    check_bool_mask(mask)
    if mask.dim() not in (2, 3):
        raise ValueError(
            f"nn.MultiheadAttention's attn_mask is (T, S) or (B*h, T, S), got shape "
            f"{tuple(mask.shape)}; pass padding separately with to_torch_key_padding_mask"
        )
    return ~mask


def to_torch_key_padding_mask(mask: Tensor) -> Tensor:
    """Our padding mask `(B, 1, 1, S)` or `(B, S)` -> PyTorch's `key_padding_mask` `(B, S)`.

    PyTorch's `key_padding_mask` marks the keys to *ignore* (True = pad), so this flips too.
    """
    check_bool_mask(mask)
    if mask.dim() == 4 and mask.shape[1] == 1 and mask.shape[2] == 1:
        mask = mask[:, 0, 0, :]
    if mask.dim() != 2:
        raise ValueError(
            f"expected a padding mask of shape (B, 1, 1, S) or (B, S), got {tuple(mask.shape)}"
        )
    return ~mask
