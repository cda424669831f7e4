"""Scaled dot-product attention and multi-head attention (notebooks 03 and 05).

Shapes follow the book's conventions: batch first, `(batch, seq, d_model)`; heads as
`(batch, heads, seq, d_head)`; masks are boolean with `True` = may attend, broadcastable to
`(batch, heads, queries, keys)`. Bad input raises `ValueError` saying what was expected and
what came.

This module validates masks with plain tensor checks (`check_mask`); `utils.masks` builds
them and may import from here, never the reverse.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from utils.checks import check_dropout, check_positive_int

__all__ = [
    "check_mask",
    "scaled_dot_product_attention",
    "split_heads",
    "merge_heads",
    "MultiHeadAttention",
]


def check_mask(mask: Tensor, scores_shape: Sequence[int] | torch.Size) -> None:
    """Check that `mask` is a valid attention mask for scores of shape `scores_shape`.

    A valid mask is a bool tensor (`True` = may attend) that broadcasts to `scores_shape`
    *without growing it*: e.g. `(B, 1, 1, S)`, `(T, S)` or `(B, h, T, S)` for scores
    `(B, h, T, S)`. A mask that would broadcast the scores to a bigger shape (a wrong batch
    size, a query/key length that does not match) is an error, never a silent broadcast.

    What no shape check can catch: a mask whose shape fits but means something else. A
    `(B, S)` padding mask passed where a `(T, S)` mask is expected is read as one row per
    *query* when B == T; build padding masks with `utils.masks.padding_mask`, which returns
    `(B, 1, 1, S)`, so this cannot happen by accident.

    Raises:
        ValueError: with a message saying what was expected and what came.
    """
    scores_shape = torch.Size(scores_shape)
    if not isinstance(mask, Tensor):
        raise ValueError(f"mask must be a torch.Tensor of dtype bool, got {type(mask).__name__}")
    if mask.dtype != torch.bool:
        raise ValueError(f"mask must be a bool tensor (True = may attend), got {mask.dtype}")
    if mask.dim() > len(scores_shape):
        raise ValueError(
            f"mask has {mask.dim()} dims {tuple(mask.shape)}, more than the attention scores "
            f"{tuple(scores_shape)}"
        )
    try:
        broadcast = torch.broadcast_shapes(mask.shape, scores_shape)
    except RuntimeError:
        broadcast = None
    if broadcast != scores_shape:
        raise ValueError(
            f"mask of shape {tuple(mask.shape)} does not broadcast to the attention scores of "
            f"shape {tuple(scores_shape)} (queries, keys last); expected each mask dim to "
            f"equal the scores' dim or be 1"
        )


def _check_qkv(query: Tensor, key: Tensor, value: Tensor) -> None:
    """Shape and dtype checks shared by both attention paths."""
    for name, t in (("query", query), ("key", key), ("value", value)):
        if not isinstance(t, Tensor):
            raise ValueError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if t.dim() < 2:
            raise ValueError(
                f"{name} must have at least 2 dims (..., seq, features), got shape "
                f"{tuple(t.shape)}"
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


def scaled_dot_product_attention(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    mask: Tensor | None = None,
    dropout_p: float = 0.0,
) -> tuple[Tensor, Tensor]:
    r"""Attention(Q, K, V) = softmax(Q Kᵀ / √d_k) V  (the paper's equation 1).

    Args:
        query: `(..., q, d_k)`.
        key:   `(..., k, d_k)`, the same leading dims as `query`.
        value: `(..., k, d_v)`.
        mask:  bool, `True` = may attend, broadcastable to `(..., q, k)` without growing it.
        dropout_p: probability of zeroing an attention weight before it multiplies `value`.
            Applied whenever `dropout_p > 0`; callers pass 0 in evaluation.

    Returns:
        `(output, weights)`: output `(..., q, d_v)` and the attention weights `(..., q, k)`.
        The returned weights are the softmax weights *before* dropout, so every row sums
        to 1 (the thing to plot); the output uses the dropped-out, rescaled weights.

    Masked positions get weight exactly 0 (their score is set to -inf before the softmax).
    A query row whose keys are *all* masked (e.g. a padding query under left padding) has
    no distribution to normalise; we define its weights as all 0 and so its output as 0.
    No NaN appears in the forward or the backward pass.
    """
    _check_qkv(query, key, value)
    dropout_p = check_dropout(dropout_p, "dropout_p")
    d_k = query.shape[-1]
    scores = query @ key.transpose(-2, -1) / math.sqrt(d_k)  # (..., q, k)
    if mask is not None:
        check_mask(mask, scores.shape)
        scores = scores.masked_fill(~mask, float("-inf"))
        # A fully masked row would be softmax(-inf, ..., -inf) = 0/0 = NaN. Give such rows
        # finite scores, then zero their weights below.
        row_has_key = mask.any(dim=-1, keepdim=True)
        scores = scores.masked_fill(~row_has_key, 0.0)
    weights = torch.softmax(scores, dim=-1)
    if mask is not None:
        # Exact zeros for masked keys; this also empties the fully masked rows.
        weights = weights.masked_fill(~mask, 0.0)
    attn = F.dropout(weights, p=dropout_p, training=True) if dropout_p > 0 else weights
    return attn @ value, weights


def split_heads(x: Tensor, n_heads: int) -> Tensor:
    """`(B, S, h*d) -> (B, h, S, d)`: cut the feature dim into `n_heads` consecutive slices.

    Head `i` gets features `[i*d, (i+1)*d)`, the same layout `nn.MultiheadAttention` uses.
    """
    if isinstance(n_heads, bool) or not isinstance(n_heads, int) or n_heads < 1:
        raise ValueError(f"n_heads must be a positive int, got {n_heads!r}")
    if not isinstance(x, Tensor) or x.dim() != 3:
        shape = tuple(x.shape) if isinstance(x, Tensor) else type(x).__name__
        raise ValueError(f"split_heads expects a 3-D tensor (batch, seq, features), got {shape}")
    batch, seq, features = x.shape
    if features % n_heads != 0:
        raise ValueError(
            f"feature dim {features} must be divisible by n_heads {n_heads} to split heads"
        )
    return x.view(batch, seq, n_heads, features // n_heads).transpose(1, 2)


def merge_heads(x: Tensor) -> Tensor:
    """`(B, h, S, d) -> (B, S, h*d)`: the inverse of `split_heads` (concatenate the heads)."""
    if not isinstance(x, Tensor) or x.dim() != 4:
        shape = tuple(x.shape) if isinstance(x, Tensor) else type(x).__name__
        raise ValueError(
            f"merge_heads expects a 4-D tensor (batch, heads, seq, d_head), got {shape}"
        )
    batch, heads, seq, d_head = x.shape
    return x.transpose(1, 2).reshape(batch, seq, heads * d_head)


class MultiHeadAttention(nn.Module):
    r"""MultiHead(Q, K, V) = Concat(head_1, ..., head_h) W^O,
    head_i = Attention(Q W_i^Q, K W_i^K, V W_i^V)  (the paper, section 3.2.2).

    The h per-head projections `W_i^Q` (d_model × d_k) are stored side by side as one
    `Linear(d_model, h*d_k)` (`w_q`, likewise `w_k`, `w_v`); `split_heads` cuts its output
    into heads. `w_o` is `Linear(h*d_v, d_model)`.

    `forward` is two steps, and the seam between them is where incremental decoding with a
    key/value cache plugs in (notebook 11) without rewriting this class:

    1. `project(x, which)` maps `(B, S, d_model)` to heads `(B, h, S, d)` for
       `which` in `"q"`, `"k"`, `"v"`;
    2. `attend(q_heads, k_heads, v_heads, mask)` runs attention over heads and returns
       `(B, T, d_model)` after merging heads and `w_o`.

    A cached decoder projects only the newest query token, concatenates the new key/value
    heads onto the cached ones along dim 2, and calls `attend`.

    After each forward, `attn_weights` holds the last attention weights `(B, h, T, S)`,
    detached (before dropout); it is `None` when the fused path ran, because
    `torch.nn.functional.scaled_dot_product_attention` does not return them.

    Args:
        d_model: model width.
        n_heads: number of heads h.
        d_k: per-head query/key width; default `d_model // n_heads`.
        d_v: per-head value width; default `d_model // n_heads`.
        dropout: dropout on the attention weights, in training mode only.
        bias: whether the four projections have biases.
        fused: use PyTorch's fused kernel (same results; an attribute you can flip any time).
    """

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        d_k: int | None = None,
        d_v: int | None = None,
        dropout: float = 0.0,
        bias: bool = True,
        fused: bool = False,
    ) -> None:
        super().__init__()
        check_positive_int("d_model", d_model)
        check_positive_int("n_heads", n_heads)
        if (d_k is None or d_v is None) and d_model % n_heads != 0:
            raise ValueError(
                f"d_model ({d_model}) must be divisible by n_heads ({n_heads}) when d_k or d_v "
                f"is not given (they default to d_model // n_heads)"
            )
        d_k = check_positive_int("d_k", d_model // n_heads if d_k is None else d_k)
        d_v = check_positive_int("d_v", d_model // n_heads if d_v is None else d_v)
        self.d_model = d_model
        self.n_heads = n_heads
        self.d_k = d_k
        self.d_v = d_v
        self.dropout = check_dropout(dropout)
        self.fused = fused
        self.w_q = nn.Linear(d_model, n_heads * d_k, bias=bias)
        self.w_k = nn.Linear(d_model, n_heads * d_k, bias=bias)
        self.w_v = nn.Linear(d_model, n_heads * d_v, bias=bias)
        self.w_o = nn.Linear(n_heads * d_v, d_model, bias=bias)
        self.attn_weights: Tensor | None = None

    def extra_repr(self) -> str:
        return (
            f"d_model={self.d_model}, n_heads={self.n_heads}, d_k={self.d_k}, d_v={self.d_v}, "
            f"dropout={self.dropout}, fused={self.fused}"
        )

    def _check_input(self, name: str, x: Tensor) -> None:
        if not isinstance(x, Tensor) or x.dim() != 3 or x.shape[-1] != self.d_model:
            shape = tuple(x.shape) if isinstance(x, Tensor) else type(x).__name__
            raise ValueError(
                f"{name} must be a 3-D tensor (batch, seq, d_model={self.d_model}), got {shape}"
            )

    def project(self, x: Tensor, which: str) -> Tensor:
        """Project `x (B, S, d_model)` to heads.

        Returns `(B, h, S, d_k)` for `which` = "q" or "k", `(B, h, S, d_v)` for "v".
        """
        layers = {"q": self.w_q, "k": self.w_k, "v": self.w_v}
        if which not in layers:
            raise ValueError(f"which must be one of 'q', 'k', 'v', got {which!r}")
        self._check_input({"q": "query", "k": "key", "v": "value"}[which], x)
        return split_heads(layers[which](x), self.n_heads)

    def attend(
        self, q_heads: Tensor, k_heads: Tensor, v_heads: Tensor, mask: Tensor | None = None
    ) -> Tensor:
        """Attention over heads, then merge and `w_o`.

        Args:
            q_heads: `(B, h, T, d_k)`; k_heads: `(B, h, S, d_k)`; v_heads: `(B, h, S, d_v)`.
            mask: bool, `True` = may attend, broadcastable to `(B, h, T, S)`.

        Returns:
            `(B, T, d_model)`.
        """
        _check_qkv(q_heads, k_heads, v_heads)
        dropout_p = self.dropout if self.training else 0.0
        if self.fused:
            out = self._fused_attention(q_heads, k_heads, v_heads, mask, dropout_p)
            self.attn_weights = None
        else:
            out, weights = scaled_dot_product_attention(q_heads, k_heads, v_heads, mask, dropout_p)
            self.attn_weights = weights.detach()
        return self.w_o(merge_heads(out))

    @staticmethod
    def _fused_attention(
        q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, dropout_p: float
    ) -> Tensor:
        """PyTorch's fused kernel, with our convention for fully masked rows (output 0)."""
        if mask is None:
            return F.scaled_dot_product_attention(q, k, v, dropout_p=dropout_p)
        scores_shape = (*q.shape[:-1], k.shape[-2])
        check_mask(mask, scores_shape)
        # F.sdpa's bool attn_mask also means True = take part. Depending on version and
        # backend it returns NaN or 0 for fully masked rows: let those rows attend to every
        # key (finite everywhere, also in backward), then zero their output.
        row_has_key = mask.any(dim=-1, keepdim=True)
        out = F.scaled_dot_product_attention(
            q, k, v, attn_mask=mask | ~row_has_key, dropout_p=dropout_p
        )
        return out.masked_fill(~row_has_key, 0.0)

    def forward(
        self, query: Tensor, key: Tensor, value: Tensor, mask: Tensor | None = None
    ) -> Tensor:
        """Multi-head attention.

        Args:
            query: `(B, T, d_model)`.
            key:   `(B, S, d_model)`.
            value: `(B, S, d_model)`.
            mask:  bool, `True` = may attend, broadcastable to `(B, h, T, S)`, e.g.
                `(B, 1, 1, S)` padding or `(T, S)` causal.

        Returns:
            `(B, T, d_model)`.
        """
        self._check_input("query", query)
        self._check_input("key", key)
        self._check_input("value", value)
        if not query.shape[0] == key.shape[0] == value.shape[0]:
            raise ValueError(
                f"query, key and value must have the same batch size, got {query.shape[0]}, "
                f"{key.shape[0]}, {value.shape[0]}"
            )
        if key.shape[1] != value.shape[1]:
            raise ValueError(
                f"key and value must have the same length, got key {tuple(key.shape)} and "
                f"value {tuple(value.shape)}"
            )
        q = self.project(query, "q")
        k = self.project(key, "k")
        v = self.project(value, "v")
        return self.attend(q, k, v, mask)
