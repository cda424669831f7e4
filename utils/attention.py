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

from utils.checks import check_bool_mask, check_dropout, check_positive_int
from utils.dropout import dropout

__all__ = [
    "AttentionCache",
    "KVCache",
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
    check_bool_mask(mask)
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
    check_positive_int("n_heads", n_heads)
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


class AttentionCache:
    """Keys and values of one attention block, kept between decoding steps (notebook 11).

    - self-attention (`static=False`): each step appends the new positions' keys/values, so
      `k` grows as `(B, h, T_cached, d_k)`;
    - cross-attention (`static=True`): the encoder output is projected to keys/values *once*,
      at the first step, and reused unchanged (`(B, h, S, d_k)`).

    `k` and `v` are `None` until the first step fills them.
    """

    def __init__(self, static: bool = False) -> None:
        self.static = static
        self.k: Tensor | None = None
        self.v: Tensor | None = None

    def __repr__(self) -> str:
        shape = None if self.k is None else tuple(self.k.shape)
        return f"AttentionCache(static={self.static}, k={shape})"


class KVCache:
    """The key/value cache of a decoder stack: one `AttentionCache` per attention block.

    One design serves the encoder-decoder (`cross=True`: each layer has a self-attention
    cache that grows and a cross-attention cache projected once per source) and the
    decoder-only model of notebook 13 (`cross=False`). The model reads and updates it:

    - `length`: how many positions are cached, i.e. the position of the next token (its
      positional encoding is taken at `length`, not at 0);
    - `reorder(index)`: keep rows `index` of the batch, in that order (beam search re-ranks
      hypotheses; the cache must follow them);
    - `batch_size`: the batch the cache was filled with (`None` while empty). Feeding it a
      batch of another size raises `ValueError`.
    """

    def __init__(self, n_layers: int, cross: bool) -> None:
        check_positive_int("n_layers", n_layers)
        self.self_attn = [AttentionCache(static=False) for _ in range(n_layers)]
        self.cross_attn = [AttentionCache(static=True) for _ in range(n_layers)] if cross else []
        self.length = 0

    def blocks(self) -> list[AttentionCache]:
        """Every `AttentionCache` of the stack (self-attention first, then cross-attention)."""
        return [*self.self_attn, *self.cross_attn]

    @property
    def batch_size(self) -> int | None:
        for block in self.blocks():
            if block.k is not None:
                return block.k.shape[0]
        return None

    def reorder(self, index: Tensor) -> None:
        """Keep batch rows `index` (int64 `(B_new,)`, values in `[0, batch_size)`), in place."""
        if not isinstance(index, Tensor) or index.dim() != 1 or index.is_floating_point():
            raise ValueError(f"index must be a 1-D integer tensor, got {index!r}")
        size = self.batch_size
        if size is None:
            return
        if index.numel() and (int(index.min()) < 0 or int(index.max()) >= size):
            raise ValueError(f"index values must be in [0, {size}), got {index.tolist()}")
        for block in self.blocks():
            if block.k is not None:
                block.k = block.k.index_select(0, index)
                block.v = block.v.index_select(0, index)

    def check(self, batch_size: int, n_layers: int, cross: bool) -> None:
        """`ValueError` unless this cache fits a stack of `n_layers` layers (with
        cross-attention caches if `cross`) fed a batch of `batch_size`."""
        if len(self.self_attn) != n_layers or bool(self.cross_attn) != cross:
            kind = "an encoder-decoder (cross=True)" if cross else "a decoder-only model"
            raise ValueError(
                f"cache must be a KVCache with {n_layers} layers for {kind}, got {self!r}"
            )
        if self.batch_size is not None and self.batch_size != batch_size:
            raise ValueError(
                f"the cache holds a batch of {self.batch_size}, but the input has batch size "
                f"{batch_size}; start a new cache (or reorder it) for another batch"
            )

    def memory_bytes(self) -> int:
        """Bytes held by the cached keys and values."""
        return sum(
            t.numel() * t.element_size()
            for block in self.blocks()
            for t in (block.k, block.v)
            if t is not None
        )

    def __repr__(self) -> str:
        return (
            f"KVCache(layers={len(self.self_attn)}, cross={bool(self.cross_attn)}, "
            f"length={self.length}, batch_size={self.batch_size})"
        )


def _sdpa(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, dropout_p: float) -> Tensor:
    """`F.scaled_dot_product_attention`, except with dropout on a CPU.

    There PyTorch has no fused kernel and falls back to its reference formula, which also
    scales both q and k and scans the scores for fully masked rows; the caller has already
    handled those rows, so the same formula is written out here, with the fast path's
    dropout mask (`utils.dropout`). Shapes as in `scaled_dot_product_attention`.
    """
    if dropout_p == 0.0 or q.device.type != "cpu":
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout_p)
    scores = torch.matmul(q * q.shape[-1] ** -0.5, k.transpose(-2, -1))
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = dropout(torch.softmax(scores, dim=-1), dropout_p, training=True, fused=True)
    return torch.matmul(weights, v)


class MultiHeadAttention(nn.Module):
    r"""MultiHead(Q, K, V) = Concat(head_1, ..., head_h) W^O,
    head_i = Attention(Q W_i^Q, K W_i^K, V W_i^V)  (the paper, section 3.2.2).

    The h per-head projections `W_i^Q` (d_model × d_k) are stored side by side as one
    `Linear(d_model, h*d_k)` (`w_q`, likewise `w_k`, `w_v`); `split_heads` cuts its output
    into heads. `w_o` is `Linear(h*d_v, d_model)`.

    `forward` is two steps: `project(x, which)` maps `(B, S, d_model)` to heads
    `(B, h, S, d)` for `which` in "q", "k", "v"; `attend(q, k, v, mask)` runs attention over
    heads, merges them and applies `w_o`.

    Two paths give the same numbers (within float rounding; the tests check 1e-5):
    - the readable path (`fused=False`, the default where the notebooks teach): three
      projections and our `scaled_dot_product_attention`, which returns the weights to plot;
    - the fast path (`fused=True`, what training uses): self-attention projects Q, K and V
      with *one* matrix multiplication (the three weights concatenated, as
      `nn.MultiheadAttention` stores them) and attention runs in PyTorch's fused kernel
      `F.scaled_dot_product_attention`, which never materialises the weights.

    Attention weights: after a forward on the readable path, `attn_weights` holds them
    `(B, h, T, S)`, detached (before dropout) - but only when asked: `record_weights=True`
    always keeps them, `False` never does, and `None` (the default) keeps them except while
    training with gradients on, so a training run does not keep one weight tensor per
    attention block alive. The fast path never has weights (`attn_weights` is `None`).

    Key/value cache (incremental decoding, notebook 11): pass an `AttentionCache` as
    `cache`. For self-attention the new positions' keys and values are appended to the
    cached ones and the queries (only the new positions) attend to all of them; for
    cross-attention the keys and values are projected from `key`/`value` at the first
    call and reused afterwards.

    Args:
        d_model: model width.
        n_heads: number of heads h.
        d_k: per-head query/key width; default `d_model // n_heads`.
        d_v: per-head value width; default `d_model // n_heads`.
        dropout: dropout on the attention weights, in training mode only.
        bias: whether the four projections have biases.
        fused: the fast path (an attribute you can flip any time).
        record_weights: keep the attention weights (see above).
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
        record_weights: bool | None = None,
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
        if record_weights not in (None, True, False):
            raise ValueError(f"record_weights must be None, True or False, got {record_weights!r}")
        self.d_model = d_model
        self.n_heads = n_heads
        self.d_k = d_k
        self.d_v = d_v
        self.dropout = check_dropout(dropout)
        self.fused = fused
        self.record_weights = record_weights
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

    def project_qkv(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """Self-attention's three projections as one matrix multiplication.

        `x (B, T, d_model)` -> heads `q, k (B, h, T, d_k)`, `v (B, h, T, d_v)`; the same
        numbers as three `project` calls: `[W_Q; W_K; W_V]` stacked is one linear map.
        """
        self._check_input("query", x)
        weight = torch.cat([self.w_q.weight, self.w_k.weight, self.w_v.weight])
        bias = None
        if self.w_q.bias is not None:
            bias = torch.cat([self.w_q.bias, self.w_k.bias, self.w_v.bias])
        qk = self.n_heads * self.d_k
        q, k, v = F.linear(x, weight, bias).split([qk, qk, self.n_heads * self.d_v], dim=-1)
        return (
            split_heads(q, self.n_heads),
            split_heads(k, self.n_heads),
            split_heads(v, self.n_heads),
        )

    def project_kv(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """Cross-attention's key and value projections of the same `x (B, S, d_model)` as one
        matrix multiplication -> `k (B, h, S, d_k)`, `v (B, h, S, d_v)`."""
        self._check_input("key", x)
        weight = torch.cat([self.w_k.weight, self.w_v.weight])
        bias = None if self.w_k.bias is None else torch.cat([self.w_k.bias, self.w_v.bias])
        sizes = [self.n_heads * self.d_k, self.n_heads * self.d_v]
        k, v = F.linear(x, weight, bias).split(sizes, dim=-1)
        return split_heads(k, self.n_heads), split_heads(v, self.n_heads)

    def _project_all(self, query: Tensor, key: Tensor, value: Tensor) -> tuple[Tensor, ...]:
        """q, k, v heads: packed on the fast path when the inputs are shared."""
        if self.fused and key is value:
            if query is key:
                return self.project_qkv(query)
            return (self.project(query, "q"), *self.project_kv(key))
        return self.project(query, "q"), self.project(key, "k"), self.project(value, "v")

    def _keeps_weights(self) -> bool:
        if self.record_weights is None:
            return not (self.training and torch.is_grad_enabled())
        return self.record_weights

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
            self.attn_weights = weights.detach() if self._keeps_weights() else None
        return self.w_o(merge_heads(out))

    @staticmethod
    def _fused_attention(
        q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, dropout_p: float
    ) -> Tensor:
        """PyTorch's fused kernel, with our convention for fully masked rows (output 0)."""
        if mask is None:
            return _sdpa(q, k, v, None, dropout_p)
        scores_shape = (*q.shape[:-1], k.shape[-2])
        check_mask(mask, scores_shape)
        # F.sdpa's bool attn_mask also means True = take part. Depending on version and
        # backend it returns NaN or 0 for fully masked rows: let those rows attend to every
        # key (finite everywhere, also in backward), then zero their output.
        row_has_key = mask.any(dim=-1, keepdim=True)
        if mask.device.type == "cpu" and bool(row_has_key.all()):
            # The usual case (no empty row). Asking is free on the CPU; on a GPU it would
            # stall the pipeline, so there the guard below always runs.
            return _sdpa(q, k, v, mask, dropout_p)
        out = _sdpa(q, k, v, mask | ~row_has_key, dropout_p)
        return out.masked_fill(~row_has_key, 0.0)

    def forward(
        self,
        query: Tensor,
        key: Tensor,
        value: Tensor,
        mask: Tensor | None = None,
        cache: AttentionCache | None = None,
    ) -> Tensor:
        """Multi-head attention.

        Args:
            query: `(B, T, d_model)`.
            key:   `(B, S, d_model)`.
            value: `(B, S, d_model)`.
            mask:  bool, `True` = may attend, broadcastable to `(B, h, T, S)`, e.g.
                `(B, 1, 1, S)` padding or `(T, S)` causal. With a self-attention cache, S
                counts the cached positions too: `(T, T_cached + T)`.
            cache: an `AttentionCache` for incremental decoding (see the class docstring).

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
        if cache is not None:
            return self._forward_cached(query, key, value, mask, cache)
        q, k, v = self._project_all(query, key, value)
        return self.attend(q, k, v, mask)

    def _forward_cached(
        self, query: Tensor, key: Tensor, value: Tensor, mask: Tensor | None, cache: AttentionCache
    ) -> Tensor:
        if not isinstance(cache, AttentionCache):
            raise ValueError(f"cache must be an AttentionCache, got {type(cache).__name__}")
        if cache.k is not None and cache.k.shape[0] != query.shape[0]:
            raise ValueError(
                f"the cache holds a batch of {cache.k.shape[0]}, but the query has batch size "
                f"{query.shape[0]}; start a new cache (or reorder it) for another batch"
            )
        if cache.static:  # cross-attention: keys/values of the source, projected once
            if cache.k is not None and cache.k.shape[2] != key.shape[1]:
                raise ValueError(
                    f"this cross-attention cache holds keys of a memory of {cache.k.shape[2]} "
                    f"positions, but the key has {key.shape[1]}; start a new cache for a new "
                    "source"
                )
            q = self.project(query, "q")
            if cache.k is None:
                if self.fused and key is value:
                    cache.k, cache.v = self.project_kv(key)
                else:
                    cache.k, cache.v = self.project(key, "k"), self.project(value, "v")
            return self.attend(q, cache.k, cache.v, mask)
        q, k, v = self._project_all(query, key, value)
        if cache.k is not None:
            k = torch.cat([cache.k, k], dim=2)
            v = torch.cat([cache.v, v], dim=2)
        cache.k, cache.v = k, v
        return self.attend(q, k, v, mask)
